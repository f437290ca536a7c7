"""(a) Evidence-pool assembly, spec §3.1: collect and normalize, never select.

Every input becomes a pool item with a stable id (``E1``…) in a fixed order —
the plan node and its acceptance criteria (07), then the harness's evidence in
the order given, then the live state in arrival order — so the same request
always yields the same pool. Caps are enforced here and every cut is marked in
the text and logged as an event; the uncut text is kept (``original_content``).
"""

from __future__ import annotations

import functools
from typing import Protocol

from ..entities import EntityRef, is_absolute_key, parse_entity_key
from ..recon.reader import ResolvedEntity
from ..request import DecisionRequest
from ..spec import CONTENT_MAX_BYTES, POOL_MAX_ITEMS, PROVENANCE_MAX_CHARS, SOURCE_PRIORITY
from .compress import grow_lines, sliding_window
from .dedup import fact_key
from .gate import cap_order
from .state import AssemblyEvent, PoolItem, change_sites_of, obligation_terms
from .vocabulary import FAILURE_KINDS, REJECTED, SPAN_CUT_KINDS
from .window_text import CONTENT_CUT_MARK_START

UTF8_MAX_BYTES_PER_CHAR = 4
PROVENANCE_CUT_MARK = "…"
# how much of an event's command its provenance quotes (the 200-char cap holds the rest)
COMMAND_IN_PROVENANCE_CHARS = 60


class EntityResolver(Protocol):
    """What assembly needs of recon (``ctxdb.recon.reader.ReconReader``, or a test's);
    a resolver may also say ``is_empty`` and ``root()``, for the reason an entity is
    unresolved."""

    def resolve(self, ref: EntityRef) -> ResolvedEntity | None: ...


def cap_content(text: str, keep_tail: bool = False) -> tuple[str, bool]:
    """Cut ``text`` to CONTENT_MAX_BYTES of UTF-8, marker included; (text, was_cut). With
    ``keep_tail`` the end is kept and the mark leads (a failure's output ends with what
    matters: pytest's summary, a traceback's innermost frame and exception)."""
    if len(text) * UTF8_MAX_BYTES_PER_CHAR <= CONTENT_MAX_BYTES:
        return text, False  # fits whatever its characters are, no need to encode
    data = text.encode("utf-8")
    if len(data) <= CONTENT_MAX_BYTES:
        return text, False
    mark = (
        f"{CONTENT_CUT_MARK_START} to {CONTENT_MAX_BYTES} bytes of {len(data)}; "
        "the full text is kept in v_evidence_item.original_content]"
    )
    keep = CONTENT_MAX_BYTES - len(mark.encode("utf-8"))
    # errors="ignore" drops a multi-byte character split by the cut.
    if keep_tail:
        tail = data[len(data) - keep:].decode("utf-8", errors="ignore")
        newline = tail.find("\n")
        if 0 <= newline < len(tail.rstrip("\n")) - 1:
            tail = tail[newline + 1:]  # from a whole line, unless the last line is all there is
        return mark.lstrip("\n") + "\n" + tail, True
    return data[:keep].decode("utf-8", errors="ignore") + mark, True


# The same large entities come back decision after decision (their texts are one object
# from recon's snapshot, so the key hashes once): keep the cuts of the last few.
CODE_CUTS_REMEMBERED = 256


def may_exceed_content_cap(text: str) -> bool:
    """Whether ``text`` could be over CONTENT_MAX_BYTES (checked without encoding it)."""
    return len(text) * UTF8_MAX_BYTES_PER_CHAR > CONTENT_MAX_BYTES


def cap_code_around(text: str, first_line: int, focus: tuple[int, int] | None,
                    decision_terms: frozenset[str],
                    sites: tuple[tuple[int, int], ...] = ()) -> tuple[str, int, int] | None:
    if not may_exceed_content_cap(text):
        return None  # fits whatever its characters are, no need to encode
    return _cut_code_around(text, first_line, focus, decision_terms, sites)


@functools.lru_cache(maxsize=CODE_CUTS_REMEMBERED)
def _cut_code_around(text: str, first_line: int, focus: tuple[int, int] | None,
                     decision_terms: frozenset[str],
                     sites: tuple[tuple[int, int], ...] = ()) -> tuple[str, int, int] | None:
    """Code over CONTENT_MAX_BYTES cut to whole lines around what the decision touches:
    ``focus`` (the insertion point's first and last line) and ``sites`` (the other change
    sites inside the text), from the first to the last of them when that fits; else grown
    from the insertion point when it is inside (else the first site), each other site
    added when the lines up to it still fit; else, with neither inside, the window of
    lines with the most decision terms (§3.4's sliding window) — never its head.
    Returns (text with a mark naming the lines, first kept line, last kept line), or
    None when the text fits. ``first_line`` is the file line ``text`` starts at."""
    size = len(text.encode("utf-8"))
    if size <= CONTENT_MAX_BYTES:
        return None
    lines = text.split("\n")  # tree-sitter lines: \n only
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()  # the newline that ends the last line starts no line of its own
    last_line = first_line + len(lines) - 1
    point_inside = focus is not None and first_line <= focus[0] <= last_line
    sites = tuple(site for site in sites if first_line <= site[0] <= last_line)
    around_focus = point_inside or bool(sites)
    # the mark's longest form, so the kept lines plus the mark always fit
    mark_room = max(len(_code_cut_mark(last_line, last_line, first_line, last_line, size,
                                       how).encode())
                    for how in _cut_reasons(point_inside, bool(sites)))
    budget = CONTENT_MAX_BYTES - mark_room
    sizes = [len(line.encode("utf-8")) + 1 for line in lines]
    kept_a_site = False
    if around_focus:
        # the insertion point leads: a site elsewhere in the item never pushes it out
        spans = [(s[0] - first_line, min(s[1], last_line) - first_line)
                 for s in ((focus,) if point_inside and focus is not None else ()) + sites]
        whole = (min(s[0] for s in spans), max(s[1] for s in spans))
        if sum(sizes[whole[0] : whole[1] + 1]) <= budget:  # every edit site first
            start, end = whole
            kept_a_site = bool(sites)
        else:
            anchor, others = spans[0], spans[1:]
            start = end = anchor[0]
            if sum(sizes[anchor[0] : anchor[1] + 1]) <= budget:
                end = anchor[1]
            # the nearest other sites next, each only when the lines up to it fit
            for first, last in sorted(others, key=lambda s: abs(s[0] - anchor[0])):
                grown = (min(start, first), max(end, last))
                if sum(sizes[grown[0] : grown[1] + 1]) <= budget:
                    start, end = grown
                    kept_a_site = True
            kept_a_site = kept_a_site or not point_inside
        start, end = grow_lines(sizes, start, end, budget)
    else:
        start, end = sliding_window("\n".join(lines), decision_terms, budget)
    kept = "\n".join(lines[start : end + 1])
    kept = kept.encode("utf-8")[:budget].decode("utf-8", errors="ignore")  # one huge line
    how = (AROUND_SITES if kept_a_site else AROUND_POINT) if around_focus else BY_TERMS
    mark = _code_cut_mark(first_line + start, first_line + end, first_line, last_line, size,
                          how)
    return kept + mark, first_line + start, first_line + end


def forget_code_cuts() -> None:
    """Drop the cuts of large entities kept in this process (ctxdb.caches)."""
    _cut_code_around.cache_clear()


# what the 8 KB cut's mark says it kept the lines around
AROUND_POINT = "around the insertion point"
AROUND_SITES = "around the change sites"
BY_TERMS = "with the most decision terms"


def _cut_reasons(point_inside: bool, sites_inside: bool) -> tuple[str, ...]:
    """The marks a cut may end with: with change sites inside, either (the insertion point
    alone when no site fits with it); without, exactly the one it had before sites."""
    if sites_inside:
        return (AROUND_POINT, AROUND_SITES) if point_inside else (AROUND_SITES,)
    return (AROUND_POINT,) if point_inside else (BY_TERMS,)


def _code_cut_mark(start: int, end: int, first: int, last: int, size: int, how: str) -> str:
    return (f"{CONTENT_CUT_MARK_START} to lines {start}-{end} of {first}-{last} ({size} bytes),"
            f" {how}; the full text is kept in v_evidence_item.original_content]")


def _is_span_key(key: str | None) -> bool:
    return bool(key) and parse_entity_key(key).start_line is not None


def cap_provenance(text: str) -> tuple[str, bool]:
    if len(text) <= PROVENANCE_MAX_CHARS:
        return text, False
    return text[: PROVENANCE_MAX_CHARS - len(PROVENANCE_CUT_MARK)] + PROVENANCE_CUT_MARK, True


# (source, kind, content, provenance, decision it arrived in, command): a live item
LiveInput = tuple[str, str, str, str, int | None, str | None]
# (source, kind, content or None, provenance, entity_key, score, arrival_no): a pool input
RawInput = tuple[str, str, str | None, str, str | None, float | None, int | None]


def _live_items(request: DecisionRequest) -> list[LiveInput]:
    """(source, kind, content, provenance, decision it arrived in, command) of the live state: the
    patch, the per-kind lists (oldest first per stream; their order across kinds is not
    known), then the events in the harness's own order across kinds."""
    live = request.live
    items: list[LiveInput] = []
    if live.patch:
        items.append(("patch", "patch", live.patch, "patch: the current working-tree diff", None,
                      None))
    streams = (
        ("error", live.errors),
        ("traceback", live.tracebacks),
        ("tool_output", live.tool_outputs),
        ("test_output", live.test_outputs),
    )
    for kind, texts in streams:
        for number, text in enumerate(texts, start=1):
            items.append(("live", kind, text, f"live: {kind} #{number} of {len(texts)}", None,
                          None))
    for number, event in enumerate(live.events, start=1):
        arrived = f", from decision {event.decision_seq}" if event.decision_seq else ""
        quoted = (" ".join(event.command.split())[:COMMAND_IN_PROVENANCE_CHARS]
                  if event.command else "")
        of = f" of `{quoted}`" if quoted else ""
        items.append(("live", event.kind, event.text,
                      f"live: event #{number} of {len(live.events)} ({event.kind}{arrived}){of}",
                      event.decision_seq, event.command))
    return items


def assemble_pool(request: DecisionRequest, recon: EntityResolver | None) -> list[PoolItem]:
    """The decision's pool, every input accounted for (over-cap items marked out of pool)."""
    node = request.plan_node
    raw: list[RawInput] = [
        ("07", "plan_node", node.obligation, f"07: plan node {node.node_id}",
         node.target_entity, None, None)
    ]
    for number, criterion in enumerate(node.acceptance_criteria, start=1):
        raw.append(("07", "acceptance_criteria", criterion,
                    f"07: acceptance criterion {number} of plan node {node.node_id}",
                    None, None, None))
    raw += [(given.source, given.kind, given.content, given.provenance, given.entity,
             given.score, None) for given in request.evidence]
    arrived_in: dict[int, int] = {}  # arrival number -> the decision it arrived in
    commands: dict[int, str] = {}  # arrival number -> what produced it
    first_event = None  # the arrival number of live.events[0]: order across kinds from here
    items = _live_items(request)
    for arrival, (live_source, live_kind, text, about, seq, command) in enumerate(items, 1):
        raw.append((live_source, live_kind, text, about, None, None, arrival))
        if seq is not None:
            arrived_in[arrival] = seq
        if command is not None:
            commands[arrival] = command
    if request.live.events:
        first_event = len(items) - len(request.live.events) + 1

    decision_terms = obligation_terms(node)
    if recon is not None and hasattr(recon, "prefetch"):
        recon.prefetch(fields[4] for fields in raw)
    pool = []
    for item_no, (source, kind, content, provenance, entity_key, score, arrival_no) in enumerate(
        raw, start=1
    ):
        arrived_in_seq = command = None
        if arrival_no is not None:  # live state
            arrived_in_seq, command = arrived_in.get(arrival_no), commands.get(arrival_no)
        item = PoolItem(item_no, source, kind, content or "", provenance, entity_key,
                        score=score, arrival_no=arrival_no, arrived_in_seq=arrived_in_seq,
                        command=command,
                        in_harness_order=(first_event is not None and arrival_no is not None
                                          and arrival_no >= first_event))
        _resolve(item, recon, has_content=content is not None)
        _apply_caps(item, request, decision_terms, from_recon=content is None)
        item.fact_key = fact_key(item.kind, item.entity_key, item.content, item.item_id)
        pool.append(item)
    apply_pool_cap(pool)
    return pool


# Why an entity could not be read from recon (pool items' `unresolved`, the warning,
# the strict error and the placeholder all say it in these words).
NO_RECON = "no recon index was given (ContextStore.open(recon=...), --recon or $CTXDB_RECON)"
EMPTY_RECON = "the recon index holds no files"
NOT_IN_RECON = "not in the recon index"
NO_ROOT = ("an absolute path, and the recon index records no root to make it relative to "
           "(index the repository again to record it)")


def unresolved_reason(ref: EntityRef, recon: EntityResolver | None) -> str:
    if recon is None:
        return NO_RECON
    if getattr(recon, "is_empty", False):
        return EMPTY_RECON
    if is_absolute_key(ref.key):
        root = recon.root() if hasattr(recon, "root") else None
        return NO_ROOT if root is None else f"an absolute path outside the indexed root {root}"
    return NOT_IN_RECON


def _resolve(item: PoolItem, recon: EntityResolver | None, *, has_content: bool) -> None:
    if item.entity_key is None or item.kind in ("plan_node",):
        return
    ref = parse_entity_key(item.entity_key)
    item.path = ref.path
    resolved = recon.resolve(ref) if recon is not None else None
    if resolved is None:
        if not has_content:
            # Its text had to come from recon: the window can only show a placeholder,
            # and the caller is told (a flag, a warning, or an error when strict).
            item.unresolved = unresolved_reason(ref, recon)
            item.content = f"[{item.entity_key}: unresolved entity, {item.unresolved}]"
            item.events.append(AssemblyEvent("entity_unresolved", item.entity_key,
                                             item.unresolved))
        elif recon is not None:
            # The harness's own text is shown; only the key is unknown to recon.
            item.events.append(AssemblyEvent("entity_unresolved", item.entity_key,
                                             "not in recon"))
        return
    item.path, item.start_line, item.end_line = (resolved.path, resolved.start_line,
                                                 resolved.end_line)
    item.signature = resolved.signature
    if not has_content:
        # No event: the row's span and signature columns record what recon supplied, and
        # a per-item event here was a quarter of a 256-item decision's audit writes.
        item.content = resolved.text


def _apply_caps(item: PoolItem, request: DecisionRequest, decision_terms: frozenset[str], *,
                from_recon: bool) -> None:
    # Most text and provenance fit: each cap is looked at only when its own length check
    # fails (the caps below would each find the same and change nothing), ~260 items a
    # decision at 256.
    if may_exceed_content_cap(item.content):
        _cap_content(item, request, decision_terms, from_recon=from_recon)
    if len(item.provenance) > PROVENANCE_MAX_CHARS:
        _cap_provenance(item)


def _cap_content(item: PoolItem, request: DecisionRequest, decision_terms: frozenset[str], *,
                 from_recon: bool) -> None:
    # Only text read from recon has file lines to cut by; a line-span key keeps its span,
    # which the gate matches against the linked symbols.
    # the change sites are looked at only for text that may need the cut (most fits)
    if (from_recon and item.kind in SPAN_CUT_KINDS and item.start_line is not None
            and not _is_span_key(item.entity_key)):
        focus, sites = _focus_of(item, request)
        around = cap_code_around(item.content, item.start_line, focus, decision_terms, sites)
        if around is not None:
            item.original_content = item.content
            item.content, item.start_line, item.end_line = around
            item.events.append(AssemblyEvent(
                "content_cut", f"content > {CONTENT_MAX_BYTES} bytes (§3.1 cap)",
                detail=f"kept lines {item.start_line}-{item.end_line}"))
    capped, cut = cap_content(item.content,
                              keep_tail=item.source == "live" and item.kind in FAILURE_KINDS)
    if cut:
        item.original_content, item.content = item.content, capped
        item.events.append(
            AssemblyEvent("content_cut", f"content > {CONTENT_MAX_BYTES} bytes (§3.1 cap)")
        )


def _cap_provenance(item: PoolItem) -> None:
    provenance, cut = cap_provenance(item.provenance)
    if cut:
        item.events.append(
            AssemblyEvent(
                "provenance_cut",
                f"provenance > {PROVENANCE_MAX_CHARS} chars (§3.1 cap)",
                detail=item.provenance,
            )
        )
        item.provenance = provenance


def _focus_of(item: PoolItem, request: DecisionRequest
              ) -> tuple[tuple[int, int] | None, tuple[tuple[int, int], ...]]:
    """What the 8 KB cut grows from: the insertion point's lines when it is in the item's
    file, and the other change sites inside the item, in file order."""
    node = request.plan_node
    point = node.insertion_point
    focus = None
    if point is not None and point.path == item.path:
        focus = (point.line, point.end_line or point.line)
    sites = sorted({(site.first_line, site.last_line) for site in change_sites_of(node)
                    if site.inside(item.path, item.start_line, item.end_line)} - {focus})
    return focus, tuple(sites)


def apply_pool_cap(pool: list[PoolItem]) -> None:
    """Keep POOL_MAX_ITEMS in the pool (§3.1); safe to call again after adding an item."""
    in_pool = [item for item in pool if item.in_pool]
    if len(in_pool) <= POOL_MAX_ITEMS:
        return
    # the gate's one cap order, with the spec's source priority (the store's
    # source_priority rows hold the same numbers: tests/test_contract.py)
    by_cap = sorted(in_pool, key=lambda i: cap_order(SOURCE_PRIORITY[i.source], i))
    for item in by_cap[POOL_MAX_ITEMS:]:
        item.in_pool = False
        item.events.append(
            AssemblyEvent(
                REJECTED, f"pool_cap: pool > {POOL_MAX_ITEMS} items (§3.1)", is_final=True
            )
        )
