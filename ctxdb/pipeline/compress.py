"""(d) Structural compression, spec §3.4 — no model anywhere.

1. Signatures over bodies: done by the rendering (render.py).
2. AST slices: a verbatim change target larger than 1 KB with an insertion
   point inside it is cut to the largest enclosing tree-sitter statement that
   fits 1 KB, under the entity's signature. A fix that spans several symbols names
   several change sites: each target is cut around its own — the sites inside it
   that no smaller verbatim item of the window shows (the function around a nested
   one shows its own changed lines, not the nested function's again) — one slice per
   site, the 1 KB shared among them.
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
from typing import TYPE_CHECKING, NamedTuple

from ..spec import COMPRESSED_TARGET_BYTES
from ..terms import terms
from .render import signature_of
from .state import Attempt, Candidate, ChangeSite
from .vocabulary import COMPRESS
from .window_text import without_cut_mark

if TYPE_CHECKING:  # imported when first used: tree-sitter loads its grammar
    from tree_sitter import Parser, Tree

STAGE = COMPRESS

# Roles whose whole text is the decision's predicate: flagged, never cut here.
KEEP_WHOLE_ROLES = frozenset({"test_reasoned_over", "live_current", "requirement"})
# Roles cut around the edit sites they hold (the insertion point, the change sites).
SITE_ROLES = frozenset({"change_target", "insertion_point"})
# At most this many change sites of one change target are sliced (and named in its
# header; the rest are counted): a 1 KB target shared by more would show each as a line
# or two, and every site costs a tree-sitter lookup.
SITE_SLICES_MAX = 8


@functools.cache
def _python_parser() -> Parser:
    import tree_sitter_python
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_python.language()))


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def ast_slice(source: str, first_line: int, target_line: int, budget: int,
              target_end_line: int | None = None, tree: Tree | None = None
              ) -> tuple[int, int] | None:
    """(start, end) 1-based lines of the largest statement around ``target_line`` — and
    through ``target_end_line``, when the edit site spans lines — within budget.

    ``source`` starts at file line ``first_line``; ``tree`` is its parse, when the caller
    slices it more than once. Returns None when the line is not inside ``source`` or no
    enclosing statement holding the site fits.
    """
    relative = target_line - first_line
    lines = source.split("\n")  # tree-sitter counts rows by \n only
    if not 0 <= relative < len(lines):
        return None
    if tree is None:
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


def lines_around(source: str, first_line: int, site_first: int, site_last: int,
                 budget: int) -> tuple[int, int] | None:
    """(start, end) file lines: the site's own lines, grown one line after then one before
    while they fit ``budget`` — for a site no one statement holds within budget (changed
    lines across sibling statements). None when the site is not inside ``source`` or its
    own lines do not fit."""
    lines = source.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()  # the newline that ends the last line starts no line of its own
    start, end = site_first - first_line, site_last - first_line
    if not 0 <= start <= end < len(lines):
        return None
    sizes = [_size(line) + 1 for line in lines]
    if sum(sizes[start : end + 1]) > budget:
        return None
    start, end = grow_lines(sizes, start, end, budget)
    return start + first_line, end + first_line


def grow_lines(sizes: list[int], start: int, end: int, budget: int) -> tuple[int, int]:
    """Lines ``start``-``end`` (0-based indexes into ``sizes``, each line's bytes with
    its newline) grown one line at a time, the one after then the one before, while the
    kept lines fit ``budget``."""
    used = sum(sizes[start : end + 1])
    grown = True
    while grown:
        grown = False
        for step in (end + 1, start - 1):
            if 0 <= step < len(sizes) and not start <= step <= end \
                    and used + sizes[step] <= budget:
                used += sizes[step]
                start, end = min(start, step), max(end, step)
                grown = True
    return start, end


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


def own_change_sites(candidate: Candidate, sites: tuple[ChangeSite, ...],
                     window: list[Candidate]) -> tuple[ChangeSite, ...]:
    """The change sites ``candidate`` is cut around: those inside its span that no smaller
    verbatim item of the same file shows — else every site inside it, so a target holding
    a nested function's one site is cut around it, as it was before change sites. A smaller
    item shows a site when it is cut around its own sites too (its role is one of
    SITE_ROLES) or is not cut at all (under the 1 KB target); any other large item is cut
    by the decision's terms and may leave the site out."""
    item = candidate.item
    held = [s for s in sites if s.inside(item.path, item.start_line, item.end_line)]
    smaller = [
        other.item for other in window
        if other is not candidate and other.rendering == "verbatim"
        and (other.role in SITE_ROLES or _size(other.item.content) <= COMPRESSED_TARGET_BYTES)
        and other.item.path == item.path and other.item.start_line is not None
        and other.item.end_line is not None and item.start_line is not None
        and item.end_line is not None
        and item.start_line <= other.item.start_line and other.item.end_line <= item.end_line
        and (other.item.start_line, other.item.end_line) != (item.start_line, item.end_line)
    ]
    own = [s for s in held
           if not any(s.inside(o.path, o.start_line, o.end_line) for o in smaller)]
    return tuple(own or held)


class SiteSlices(NamedTuple):
    spans: list[tuple[int, int]]  # file lines, in order, none overlapping
    by_statement: bool  # every span is a statement's (ast_slice), none a run of lines


def _gap_mark(after: int, before: int) -> str:
    """The line standing for the file lines between two slices."""
    return f"    # … lines {after + 1}-{before - 1} not shown"


def site_slices(body: str, first_line: int, sites: tuple[ChangeSite, ...], budget: int,
                insertion_site: ChangeSite | None = None) -> SiteSlices | None:
    """One slice per change site (file lines, in order; overlapping ones merged, and two
    whose gap is no longer than the mark that would stand for it), the budget shared
    equally: the largest statement holding the site, else — for a site other than the
    insertion point, whose target stays whole as before — the site's lines and those
    around them (``lines_around``); a site that does not fit its share gets the whole
    budget (the item then stays over it, flagged). None when a site fits no slice at
    all: the whole target is needed. The body is parsed once for all its sites."""
    tree = _python_parser().parse(body.encode("utf-8"))
    share = budget // len(sites)
    spans, by_statement = [], True
    for site in sites:
        ways = [functools.partial(ast_slice, body, first_line, site.first_line,
                                  target_end_line=site.last_line, tree=tree)]
        if site != insertion_site:
            ways.append(functools.partial(lines_around, body, first_line, site.first_line,
                                          site.last_line))
        found = next(((way, span) for allowed in dict.fromkeys((share, budget)) for way in ways
                      if (span := way(budget=allowed)) is not None), None)
        if found is None:
            return None
        by_statement = by_statement and found[0] is ways[0]
        spans.append(found[1])
    lines = body.split("\n")
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged:
            gap = lines[merged[-1][1] + 1 - first_line : start - first_line]
            gap_bytes = sum(_size(line) + 1 for line in gap)
            if gap_bytes <= _size(_gap_mark(merged[-1][1], start)) + 1:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
                continue
        merged.append((start, end))
    return SiteSlices(merged, by_statement)


def slices_size(body: str, first_line: int, spans: list[tuple[int, int]]) -> int:
    """Bytes of the file lines the slices show (the 1 KB target's measure)."""
    lines = body.split("\n")
    return sum(_size("\n".join(lines[start - first_line : end - first_line + 1]))
               for start, end in spans)


def _sliced_text(candidate: Candidate, body: str, first_line: int, slices: SiteSlices,
                 sites: tuple[ChangeSite, ...], not_sliced: int) -> str:
    lines = body.split("\n")
    spans = slices.spans
    how = "AST slice" if slices.by_statement else "slice"
    # a slice from the body's first line shows the def line itself
    head = "" if spans[0][0] == first_line else signature_of(candidate) + "\n"
    if len(spans) == 1 and len(sites) == 1 and not not_sliced:
        (start, end), = spans
        return (head + f"    # … {how}: lines {start}-{end} around the edit at line"
                f" {sites[0].first_line}\n"
                + "\n".join(lines[start - first_line : end - first_line + 1]))
    named_spans = ", ".join(f"{start}-{end}" for start, end in spans)
    named_sites = ", ".join(str(line) for line in dict.fromkeys(s.first_line for s in sites))
    more = f" (and {not_sliced} more, not sliced)" if not_sliced else ""
    parts = [head + f"    # … {how}{'s' if len(spans) > 1 else ''}: lines {named_spans}"
             f" around the edits at lines {named_sites}{more}"]
    for number, (start, end) in enumerate(spans):
        if number:
            parts.append(_gap_mark(spans[number - 1][1], start))
        parts.append("\n".join(lines[start - first_line : end - first_line + 1]))
    return "\n".join(parts)


def compress(attempt: Attempt) -> None:
    audit, inputs = attempt.audit, attempt.inputs
    for candidate in attempt.candidates:
        before = _size(candidate.text)
        if before <= COMPRESSED_TARGET_BYTES or candidate.rendering != "verbatim":
            continue
        item = candidate.item
        body = without_cut_mark(item.content)  # file lines only: the 8 KB cut's mark is not one
        if candidate.role in SITE_ROLES:
            held = own_change_sites(candidate, inputs.change_sites, attempt.candidates)
            sites = held[:SITE_SLICES_MAX]
            # change_sites lists the insertion point first, when there is one
            insertion_site = inputs.change_sites[0] if inputs.insertion_line is not None else None
            slices = None
            if sites and item.start_line is not None:
                slices = site_slices(body, item.start_line, sites, COMPRESSED_TARGET_BYTES,
                                     insertion_site)
            if slices is None or item.start_line is None:  # (no span without a first line)
                candidate.over_compress_target = True
                audit.add(item.item_id, STAGE, "flagged_over_1kb",
                          "the whole change target is needed")
                continue
            spans = slices.spans
            sliced = _sliced_text(candidate, body, item.start_line, slices, sites,
                                  not_sliced=len(held) - len(sites))
            # slices and marks that would outweigh the lines they cut (the insertion
            # point's lone slice is kept as it was before change sites: no gap marks)
            if sites != (insertion_site,) and _size(sliced) >= before:
                candidate.over_compress_target = True
                audit.add(item.item_id, STAGE, "flagged_over_1kb",
                          "the change sites' slices are no smaller than the whole target",
                          detail=f"{before} -> {_size(sliced)} bytes")
                continue
            # the window item records one span of file lines: the first site's
            candidate.shown_lines = next(span for span in spans
                                         if span[0] <= sites[0].first_line <= span[1])
            candidate.text = sliced
            audit.add(
                item.item_id, STAGE, "ast_slice" if slices.by_statement else "site_slice",
                "lines " + ", ".join(f"{start}-{end}" for start, end in spans),
                detail=f"{before} -> {_size(candidate.text)} bytes",
            )
            shown = slices_size(body, item.start_line, spans)
            if shown > COMPRESSED_TARGET_BYTES:  # a site that fit no share took the whole
                candidate.over_compress_target = True
                audit.add(item.item_id, STAGE, "flagged_over_1kb",
                          "the change sites' slices need more than the target",
                          detail=f"{shown} bytes of file lines in the slices")
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
