"""The one progress bar: a line on stderr, redrawn in place, only on a terminal (in a
pipe or a log file it writes nothing)."""

from __future__ import annotations

import sys
import time

BAR_WIDTH = 30
REDRAW_SECONDS = 0.1  # no more often than this, except for the first and last step


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


class ProgressBar:
    """``ProgressBar("recon", total, "files")``; ``enabled=None`` means "if stderr is a
    terminal". ``start()`` draws the empty bar (a slow first step shows the run has
    begun); ``step()`` counts one more done, or sets how many."""

    def __init__(self, label: str, total: int, unit: str, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else bool(enabled)
        self.label, self.total, self.unit = label, total, unit
        self.done = 0
        self._started = time.monotonic()
        self._last = 0.0

    def start(self) -> None:
        self._draw()

    def step(self, done: int | None = None) -> None:
        self.done = self.done + 1 if done is None else done
        now = time.monotonic()
        if now - self._last < REDRAW_SECONDS and self.done != self.total:
            return
        self._draw()

    def _draw(self) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        self._last = now
        filled = BAR_WIDTH * self.done // max(self.total, 1)
        elapsed = now - self._started
        timing = f" {_duration(elapsed)}"
        if 0 < self.done < self.total:  # the rest at the pace so far
            timing += f", ~{_duration(elapsed / self.done * (self.total - self.done))} left"
        sys.stderr.write(f"\r{self.label}: [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] "
                         f"{self.done}/{self.total} {self.unit}{timing}\x1b[K")
        if self.done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()
