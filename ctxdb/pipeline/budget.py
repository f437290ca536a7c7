"""(g) Token budgeting, spec §3.7: account, never overflow.

The window is the task header plus each item's block text; it is measured with
the configured tokenizer (exact counts, cached by content hash) after dedup.
While it is over the ceiling the eviction ladder runs, re-measuring after every
action and stopping as soon as the window fits:

1. transient state — older tool output, errors and failures are masked to a
   pointer (raw text stays in the store); the freshest failure output stays;
2. the working set by representation — supporting verbatim bodies become
   signatures, then supporting (middle) items are evicted weakest first, then
   the tests reasoned over become signatures, then the change target is cut to
   the sliding window that fits;
   then the freshest failure output, which step 1 kept, cut to its last lines that fit
   (where pytest's summary and a traceback's innermost frame and exception are; the end
   of its last line when not even that fits), with a pointer to the whole text — so one
   long test run does not empty the window;
3. the stable core — supporting acceptance detail only: later criteria cut to
   their first line, then evicted; never the task or the current obligation.

If it still does not fit, the window is the stable core only, flagged
``stable_core_only``; if even that is over (a pathological task), the task text
is cut and flagged ``task_truncated`` — no window over the ceiling is emitted.
"""

from __future__ import annotations

from collections.abc import Callable

from .compress import sliding_window
from .render import signature_of
from .state import (
    STABLE_CORE,
    TRANSIENT,
    WORKING_SET,
    Attempt,
    BudgetStep,
    Candidate,
    TokenCounter,
)
from .vocabulary import BUDGET, EVICTED, FAILURE_KINDS, ROLE_STRENGTH
from .window_text import mask_pointer, task_block, window_text, without_cut_mark

STAGE = BUDGET
# A conservative bytes-per-token ratio to size a cut before re-measuring exactly.
BYTES_PER_TOKEN_FLOOR = 2
TASK_CUT_MARK = "\n[ctxdb: task cut to fit the ceiling]"
TASK_CUT_MARGIN_CHARS = 64
# a window and its token count, as each step of the ladder leaves them
Fitting = tuple[list[Candidate], int]


def cut_task(task: str, ceiling: int, exact: int) -> str:
    """The last resort's cut: the task in proportion to how far the window (``exact``
    tokens) is over the ceiling, less a margin, marked. ``ctxdb show`` replays it from
    the recounts in budget_log, as the store keeps the task uncut."""
    keep = max(len(task) * ceiling // max(exact, 1) - TASK_CUT_MARGIN_CHARS, 0)
    return (task[:keep] + TASK_CUT_MARK) if keep else ""


def _most_that_fit(most: int, fits: Callable[[int], bool]) -> int:
    """The largest n in 0..most with fits(n) (fits is monotone: fewer always fit)."""
    low, high = 0, max(most, 0)
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def fit_budget(attempt: Attempt, count: TokenCounter) -> None:
    """The window that fits becomes the attempt's candidates, with its exact count."""
    window, attempt.token_count = Budgeter(attempt, count).fit(attempt.candidates)
    attempt.candidates = window


class Budgeter:
    def __init__(self, attempt: Attempt, count: TokenCounter):
        self.attempt = attempt
        self.ref, self.terms = attempt.inputs.ref, attempt.inputs.terms
        self.ceiling = attempt.inputs.settings.token_ceiling
        self.count = count
        self.audit = attempt.audit
        self.steps = attempt.budget_steps
        self.flags = attempt.flags  # after the request's own (nul_replaced)

    @property
    def task(self) -> str:
        return self.attempt.window_task

    @task.setter
    def task(self, text: str) -> None:
        self.attempt.window_task = text

    # -- measuring -----------------------------------------------------------
    def _measure_items(self, items: list[Candidate]) -> None:
        counts = self.count([c.block_text() for c in items])
        for candidate, tokens in zip(items, counts, strict=True):
            candidate.tokens = tokens

    def _header_tokens(self) -> int:
        return self.count([task_block(self.task)])[0]

    def _total(self, window: list[Candidate]) -> int:
        return self._header_tokens() + sum(c.tokens for c in window)

    def _log(self, ladder_step: str, candidate: Candidate | None, before: int, after: int,
             detail: str | None = None) -> None:
        item_id = candidate.item_id if candidate is not None else None
        self.steps.append(BudgetStep(len(self.steps) + 1, ladder_step, item_id, before, after,
                                     detail))

    # -- the ladder ----------------------------------------------------------
    def fit(self, window: list[Candidate]) -> Fitting:
        """The window that fits, and its exact token count."""
        self._measure_items(window)
        total = self._total(window)
        self._log("measured", None, total, total, f"ceiling {self.ceiling}")
        for action in (self._mask_transient, self._shrink_working_set, self._cut_freshest_failure,
                       self._trim_stable_core):
            if total <= self.ceiling:
                break
            window, total = action(window, total)
        if total > self.ceiling:
            window, total = self._stable_core_only(window, total)
        exact = self.count([window_text(self.task, window)])[0]
        while exact > self.ceiling:
            # Token boundaries between blocks made the whole longer than its parts:
            # keep evicting the weakest evictable item, or cut the task as a last resort.
            window, exact = self._evict_for_exactness(window, exact)
        return window, exact

    def _replace_text(self, candidate: Candidate, text: str, rendering: str, ladder_step: str,
                      total: int, verdict_action: str,
                      shown_lines: tuple[int, int] | None = None) -> int:
        before_tokens = candidate.tokens
        candidate.text, candidate.rendering = text, rendering
        candidate.shown_lines = shown_lines  # a signature or pointer labels the whole span
        self._measure_items([candidate])
        after = total - before_tokens + candidate.tokens
        self._log(ladder_step, candidate, total, after)
        self.audit.add(
            candidate.item_id, STAGE, verdict_action, ladder_step,
            tokens_before=before_tokens, tokens_after=candidate.tokens,
        )
        return after

    def _evict(self, window: list[Candidate], candidate: Candidate, ladder_step: str,
               total: int) -> Fitting:
        window = [c for c in window if c is not candidate]
        after = total - candidate.tokens
        self._log(ladder_step, candidate, total, after)
        self.audit.final(
            candidate.item_id, STAGE, EVICTED, ladder_step, tokens_after=0,
            detail=f"{candidate.tokens} tokens freed",
        )
        return window, after

    def _mask_transient(self, window: list[Candidate], total: int) -> Fitting:
        transient = [c for c in window if c.tier == TRANSIENT]
        failures = [c for c in transient if c.item.kind in FAILURE_KINDS]
        freshest = max(failures, key=lambda c: (c.item.arrival_no or 0, c.item.item_no),
                       default=None)
        oldest_first = sorted(transient, key=lambda c: (c.item.arrival_no or 0, c.item.item_no))
        for candidate in oldest_first:
            if total <= self.ceiling:
                break
            if candidate is freshest:
                continue
            pointer = mask_pointer(candidate, self.ref)
            candidate.masked = True
            total = self._replace_text(
                candidate, pointer, "truncated", "1_mask_transient", total, "masked_to_pointer"
            )
        return window, total

    def _shrink_working_set(self, window: list[Candidate], total: int) -> Fitting:
        # (a) supporting verbatim bodies → signatures, largest first
        supporting_verbatim = sorted(
            (c for c in window if c.rendering == "verbatim" and not c.edge_critical
             and c.tier == WORKING_SET and c.item.kind != "patch"),
            key=lambda c: (-c.tokens, c.item.item_no),
        )
        for candidate in supporting_verbatim:
            if total <= self.ceiling:
                return window, total
            total = self._replace_text(
                candidate, signature_of(candidate), "signature", "2a_verbatim_to_signature",
                total, "downgraded",
            )
        # (b) evict supporting middle items, weakest role first, then largest
        middle = sorted(
            (c for c in window if not c.edge_critical and c.tier != STABLE_CORE
             and not c.masked),
            key=lambda c: (-ROLE_STRENGTH.index(c.role), -c.tokens, c.item.item_no),
        )
        for candidate in middle:
            if total <= self.ceiling:
                return window, total
            window, total = self._evict(window, candidate, "2b_evict_supporting", total)
        # (c) tests the decision reasons over → name + expectation
        for candidate in [c for c in window if c.role == "test_reasoned_over"]:
            if total <= self.ceiling:
                return window, total
            total = self._replace_text(
                candidate, signature_of(candidate), "signature", "2c_test_to_signature",
                total, "downgraded",
            )
        # (d) change targets cut to the sliding window that fits what is left
        for candidate in [c for c in window if c.role in ("change_target", "insertion_point")]:
            if total <= self.ceiling:
                return window, total
            spare_tokens = self.ceiling - (total - candidate.tokens)
            budget_bytes = max(spare_tokens, 0) * BYTES_PER_TOKEN_FLOOR
            if budget_bytes <= 0:
                continue
            body = without_cut_mark(candidate.item.content)  # file lines only
            start, end = sliding_window(body, self.terms, budget_bytes)
            lines = body.split("\n")  # tree-sitter lines: \n only
            text = "# … cut to fit the budget\n" + "\n".join(lines[start : end + 1])
            first = candidate.item.start_line
            total = self._replace_text(
                candidate, text, "truncated", "2d_cut_change_target", total, "cut_to_window",
                shown_lines=(first + start, first + end) if first is not None else None,
            )
        return window, total

    def _trim_stable_core(self, window: list[Candidate], total: int) -> Fitting:
        criteria = sorted(
            (c for c in window if c.item.kind == "acceptance_criteria"),
            key=lambda c: -c.item.item_no,
        )
        # the first criterion states the goal; later ones are supporting detail
        for candidate in criteria[:-1]:
            if total <= self.ceiling:
                return window, total
            content = candidate.item.content.strip()
            first_line = content.splitlines()[0] if content else ""
            if first_line != candidate.text.strip():
                total = self._replace_text(
                    candidate, first_line, "truncated", "3_trim_acceptance_detail", total,
                    "trimmed",
                )
        for candidate in criteria[:-1]:
            if total <= self.ceiling:
                return window, total
            window, total = self._evict(window, candidate, "3_evict_acceptance_detail", total)
        return window, total

    def _cut_freshest_failure(self, window: list[Candidate], total: int) -> Fitting:
        failures = [c for c in window if c.tier == TRANSIENT and c.item.kind in FAILURE_KINDS
                    and not c.masked]
        freshest = max(failures, key=lambda c: (c.item.arrival_no or 0, c.item.item_no),
                       default=None)
        if freshest is None:
            return window, total
        rest = total - freshest.tokens
        content = freshest.item.content.rstrip("\n")
        lines = content.split("\n")
        whole_text, mark = freshest.text, self._failure_cut_mark(freshest)

        def fits(tail: str) -> bool:
            freshest.text = mark + tail
            return rest + self.count([freshest.block_text()])[0] <= self.ceiling

        # the most last lines that fit, by exact counts (a binary search: few counts);
        # when not even the last line fits, the most of its end that does
        kept = _most_that_fit(len(lines) - 1, lambda n: fits("\n".join(lines[len(lines) - n:])))
        if kept:
            tail = "\n".join(lines[len(lines) - kept:])
        else:
            last = lines[-1]
            chars = _most_that_fit(len(last) - 1, lambda n: fits(last[len(last) - n:]))
            tail = last[len(last) - chars:] if chars else ""
        freshest.text = whole_text
        if not tail:
            return window, total  # nothing of it fits: the stable core only, in the end
        total = self._replace_text(freshest, mark + tail, "truncated", "2e_cut_freshest_failure",
                                   total, "cut_to_window")
        return window, total

    def _failure_cut_mark(self, candidate: Candidate) -> str:
        item = candidate.item
        return (f"[… {item.kind} cut to its last lines to fit the budget —"
                f" ctxdb show {self.ref} {item.item_id}]\n")

    def _stable_core_only(self, window: list[Candidate], total: int) -> Fitting:
        for candidate in [c for c in window if c.tier != STABLE_CORE]:
            window, total = self._evict(window, candidate, "stable_core_only", total)
        self.flags.append("stable_core_only")
        return window, total

    def _evict_for_exactness(self, window: list[Candidate], exact: int) -> Fitting:
        evictable = [c for c in window if c.tier != STABLE_CORE]
        if evictable:
            weakest = max(evictable, key=lambda c: (ROLE_STRENGTH.index(c.role), c.item.item_no))
            window, _ = self._evict(window, weakest, "exact_recount", exact)
            if not [c for c in window if c.tier != STABLE_CORE]:
                self.flags.append("stable_core_only")
        elif self.task:
            # Only the stable core is left and it is over: cut the task text first.
            self.task = cut_task(self.task, self.ceiling, exact)
            if "task_truncated" not in self.flags:
                self.flags.append("task_truncated")
        else:
            # Pathological: the stable core alone is over the ceiling. Halve the largest
            # stable-core text until it fits (the full text stays in the store); when no
            # text is left to cut, drop items — criteria first, the obligation last.
            if "stable_core_truncated" not in self.flags:
                self.flags.append("stable_core_truncated")
            shrinkable = [c for c in window if c.text]
            if shrinkable:
                largest = max(shrinkable, key=lambda c: (c.tokens, -c.item.item_no))
                largest.text = largest.text[: len(largest.text) // 2]
                largest.rendering, largest.shown_lines = "truncated", None
                self._measure_items([largest])
            elif window:
                victim = max(window, key=lambda c: (c.item.kind != "plan_node", c.item.item_no))
                window, _ = self._evict(window, victim, "stable_core_overflow", exact)
            else:
                raise RuntimeError(
                    f"an empty window counts {exact} tokens, over the ceiling {self.ceiling}"
                )
        new_exact = self.count([window_text(self.task, window)])[0]
        self._log("exact_recount", None, exact, new_exact)
        return window, new_exact
