"""The one progress bar: a line on stderr, redrawn in place, only on a terminal."""

from __future__ import annotations

import sys
import time

BAR_WIDTH = 30
REDRAW_SECONDS = 0.1  # no more often than this, except for the last step


class ProgressBar:
    """``ProgressBar("recon", total, "files")``; ``enabled=None`` means "if stderr is a
    terminal"."""

    def __init__(self, label: str, total: int, unit: str, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else bool(enabled)
        self.label, self.total, self.unit = label, total, unit
        self.done = 0
        self._last = 0.0

    def step(self, done: int | None = None) -> None:
        self.done = self.done + 1 if done is None else done
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < REDRAW_SECONDS and self.done != self.total:
            return
        self._last = now
        filled = BAR_WIDTH * self.done // max(self.total, 1)
        sys.stderr.write(f"\r{self.label}: [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] "
                         f"{self.done}/{self.total} {self.unit}")
        if self.done == self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()
