"""(d) Structural compression, spec §3.4 — no model anywhere.

1. Signatures over bodies: done by the rendering (render.py).
2. AST slices: a verbatim change target larger than 1 KB with an insertion
   point inside it is cut to the largest enclosing tree-sitter statement that
   fits 1 KB, under the entity's signature.
3. Sliding-window contiguous-line extraction (RepoCoder): a large verbatim item
   the decision needs only part of is cut to the contiguous run of lines, up to
   1 KB, with the most token overlap with the decision's own terms.
4. Masking to a pointer, used by the budgeter under pressure (budget.py): the raw
   text stays in ``evidence_text`` and the pointer (window_text.py) names the command
   that shows it.

An item that cannot go under 1 KB while keeping what the decision needs (a
change target with no insertion point, a test the decision reasons over, the
current failure) is flagged for the budgeter, never silently dropped.
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import TYPE_CHECKING

from ..spec import COMPRESSED_TARGET_BYTES
from ..terms import terms
from .render import signature_of
from .state import Attempt
from .vocabulary import COMPRESS
from .window_text import without_cut_mark

if TYPE_CHECKING:  # imported when first used: tree-sitter loads its grammar
    from tree_sitter import Parser

STAGE = COMPRESS

# Roles whose whole text is the decision's predicate: flagged, never cut here.
KEEP_WHOLE_ROLES = frozenset({"test_reasoned_over", "live_current", "requirement"})


@functools.cache
def _python_parser() -> Parser:
    import tree_sitter_python
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_python.language()))


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def ast_slice(source: str, first_line: int, target_line: int, budget: int,
              target_end_line: int | None = None) -> tuple[int, int] | None:
    """(start, end) 1-based lines of the largest statement around ``target_line`` — and
    through ``target_end_line``, when the edit site spans lines — within budget.

    ``source`` starts at file line ``first_line``. Returns None when the line is
    not inside ``source`` or no enclosing statement holding the site fits.
    """
    relative = target_line - first_line
    lines = source.split("\n")  # tree-sitter counts rows by \n only
    if not 0 <= relative < len(lines):
        return None
    tree = _python_parser().parse(source.encode("utf-8"))
    line_text = lines[relative]
    column = len(line_text) - len(line_text.lstrip())
    node = tree.root_node.descendant_for_point_range((relative, column), (relative, column))
    best = None
    while node is not None and node.parent is not None:
        start, end = node.start_point[0], node.end_point[0]
        if node.is_named and node.type not in ("block", "identifier"):
            text = "\n".join(lines[start : end + 1])
            if _size(text) > budget:
                break
            if target_end_line is None or end + first_line >= target_end_line:
                best = (start + first_line, end + first_line)
        node = node.parent
    return best


def sliding_window(text: str, decision_terms: frozenset[str], budget: int) -> tuple[int, int]:
    """0-based (start, end) line indexes of the best contiguous window within ``budget`` bytes.

    Score = decision terms present in the window (RepoCoder's token overlap);
    ties go to the earliest window, so the choice is deterministic. One pass: the
    window's terms are counted as lines enter and leave it (the 8 KB cut runs this on
    files of thousands of lines).
    """
    lines = text.split("\n")
    line_terms = [terms(line) & decision_terms for line in lines]
    sizes = [_size(line) + 1 for line in lines]
    best, best_score = (0, 0), -1
    in_window: Counter[str] = Counter()  # the terms of lines [start, end)
    end, used = 0, 0
    for start in range(len(lines)):
        if end < start:
            end, used = start, 0
        while end < len(lines) and used + sizes[end] <= budget:
            used += sizes[end]
            in_window.update(line_terms[end])
            end += 1
        if end == start:  # a single line over budget: take it alone
            window, score = (start, start), len(line_terms[start])
        else:
            window, score = (start, end - 1), len(in_window)
        if score > best_score:
            best, best_score = window, score
        if end > start:
            used -= sizes[start]
            in_window.subtract(line_terms[start])
            for term in line_terms[start]:
                if in_window[term] <= 0:
                    del in_window[term]
    return best


def compress(attempt: Attempt) -> None:
    audit, inputs = attempt.audit, attempt.inputs
    for candidate in attempt.candidates:
        before = _size(candidate.text)
        if before <= COMPRESSED_TARGET_BYTES or candidate.rendering != "verbatim":
            continue
        item = candidate.item
        body = without_cut_mark(item.content)  # file lines only: the 8 KB cut's mark is not one
        if candidate.role in ("change_target", "insertion_point"):
            span = None
            if (
                inputs.insertion_line is not None
                and item.path == inputs.insertion_path
                and item.start_line is not None
            ):
                span = ast_slice(body, item.start_line, inputs.insertion_line,
                                 COMPRESSED_TARGET_BYTES, inputs.insertion_end_line)
            if span is None or item.start_line is None:  # (no span without a first line)
                candidate.over_compress_target = True
                audit.add(item.item_id, STAGE, "flagged_over_1kb",
                          "the whole change target is needed")
                continue
            lines = body.split("\n")
            start, end = span[0] - item.start_line, span[1] - item.start_line
            candidate.shown_lines = span
            candidate.text = (
                signature_of(candidate)
                + f"\n    # … AST slice: lines {span[0]}-{span[1]} around the edit at line"
                f" {inputs.insertion_line}\n"
                + "\n".join(lines[start : end + 1])
            )
            audit.add(
                item.item_id, STAGE, "ast_slice", f"lines {span[0]}-{span[1]}",
                detail=f"{before} -> {_size(candidate.text)} bytes",
            )
            continue
        if candidate.role in KEEP_WHOLE_ROLES:
            candidate.over_compress_target = True
            audit.add(item.item_id, STAGE, "flagged_over_1kb",
                      f"{candidate.role}: whole text needed")
            continue
        start, end = sliding_window(body, inputs.terms, COMPRESSED_TARGET_BYTES)
        lines = body.split("\n")
        first = (item.start_line or 1) + start
        last = (item.start_line or 1) + end
        candidate.shown_lines = (first, last)
        candidate.text = f"# … lines {first}-{last} (sliding window on the decision's terms)\n" + (
            "\n".join(lines[start : end + 1])
        )
        audit.add(
            item.item_id, STAGE, "sliding_window", f"lines {first}-{last}",
            detail=f"{before} -> {_size(candidate.text)} bytes",
        )
