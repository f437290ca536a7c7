"""The `current` arm (spec §7 "stuff everything"): the whole pool, verbatim, in pool
order — no gate, no ranking, no compression, no budget. Written to the same tables as
the constructor's windows, so every A/B comparison is one SQL query."""

from __future__ import annotations

from collections.abc import Callable

from .state import MIDDLE, WORKING_SET, Candidate, Decision
from .vocabulary import BASELINE_DRIVER
from .window_text import window_text

BASELINE_ROLE = "baseline"


def stuff_everything(decision: Decision, count: Callable[[list[str]], list[int]]) -> None:
    window = [
        Candidate(item=item, driver=BASELINE_DRIVER, role=BASELINE_ROLE, rendering="verbatim",
                  text=item.content, tier=WORKING_SET, block=MIDDLE)
        for item in decision.pool
        if not decision.audit.verdict(item.item_id)  # out of the pool: the 256 cap is both arms'
    ]
    for candidate, tokens in zip(window, count([c.block_text() for c in window]), strict=True):
        candidate.tokens = tokens
    decision.candidates = window
    decision.token_count = count([window_text(decision.request.task, window)])[0]
