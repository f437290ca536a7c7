"""The `current` arm (spec §7 "stuff everything"): the whole pool, verbatim, in pool
order — no gate, no ranking, no compression, no budget. Written to the same tables as
the constructor's windows, so every A/B comparison is one SQL query."""

from __future__ import annotations

from .state import MIDDLE, WORKING_SET, Attempt, Candidate, TokenCounter
from .vocabulary import BASELINE_DRIVER
from .window_text import window_text

BASELINE_ROLE = "baseline"


def stuff_everything(attempt: Attempt, count: TokenCounter) -> None:
    window = [
        Candidate(item=item, driver=BASELINE_DRIVER, role=BASELINE_ROLE, rendering="verbatim",
                  text=item.content, tier=WORKING_SET, block=MIDDLE)
        for item in attempt.inputs.pool
        if not attempt.audit.verdict(item.item_id)  # out of the pool: the 256 cap is both arms'
    ]
    for candidate, tokens in zip(window, count([c.block_text() for c in window]), strict=True):
        candidate.tokens = tokens
    attempt.candidates = window
    attempt.token_count = count([window_text(attempt.inputs.request.task, window)])[0]
