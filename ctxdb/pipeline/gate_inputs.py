"""The gate's inputs: what the current obligation structurally reaches, read from recon.

Derived at assembly and written as the decision's own rows (``decision_link``,
``impact_edge``, ``item_nearness``) so the gate view runs on them (docs/pipeline.md,
"What counts as a structural link"):

* links — the target, 05's change targets, the plan node's dependencies, the symbol
  at the insertion point,
  the required-validation tests and what they call, traceback frames, and
  identifiers in the obligation/criteria/question that name exactly one symbol;
* derived impact edges (``derive_impact``) — direct dependents of the change
  target (callers: CalledBy; tests that exercise it: PreserveObligation;
  subclasses: SchemaConsumer) and their dependents up to ``MAX_DERIVED_DEPTH``;
  deeper reach is summarized by the one-line impact digest item;
* nearness — an unlinked pool item is tested when it shares at least
  ``NEAR_MIN_SHARED_TERMS`` identifier terms with the decision's text, or sits
  within ``NEAR_MAX_RECON_HOPS`` recon edges of a linked symbol; its ``near_score``
  (structural + lexical, below) decides whether the gate leaves it residual.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from typing import NamedTuple

from ..entities import entity_key_of_test_id, parse_entity_key
from ..recon.reader import ReconReader
from ..request import DecisionRequest
from ..spec import PROVENANCE_MAX_CHARS
from ..terms import terms
from ..tokens import content_sha256
from .aging import observation_of, stale_arrivals
from .assemble import apply_pool_cap
from .dedup import fact_key
from .options import stage_options
from .state import ImpactEdge, Link, Nearness, PoolItem
from .vocabulary import (
    CHANGE_TARGET,
    CHANGE_TARGET_KINDS,
    CHANGE_TARGET_LINKS,
    FAILURE_KINDS,
    IMPACT_DIGEST,
    INSERTION_POINT,
    NAMED_IN_CRITERIA,
    NEAR_TESTED_KINDS,
    OBLIGATION_DEPENDENCY,
    TARGET_ENTITY,
    TRACEBACK_FRAME,
    VALIDATION_CALLEE,
    VALIDATION_TEST,
)

NEAR_MIN_SHARED_TERMS = 2
NEAR_MAX_RECON_HOPS = 2
NEAR_HOP_SCORE = {1: 1.0, 2: 0.5}  # near_score's structural part, by recon hops
# near_score's threshold: residual iff the score reaches it (sql/views/20_v_gate_rule.sql
# holds the same number; tests/test_contract.py holds the two equal). Set on the whole
# development set (docs/pipeline.md, `near_score`), never per instance.
NEAR_MIN_SCORE = 0.0
NEAR_SCORE_DECIMALS = 4
NEAR_CONTENT_CHARS = 400  # how much of an item's text the shared-terms test reads
MAX_DERIVED_DEPTH = 3
GIVEN_EDGE_ORIGIN, DERIVED_EDGE_ORIGIN = "06", "recon"  # impact_edge.origin
# `File "path", line N, in name` (Python) and `path:N: in name` (pytest --tb=short)
_PY_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+)')
_PYTEST_FRAME = re.compile(r"^(?P<path>[\w./-]+\.py):(?P<line>\d+):", re.MULTILINE)
# identifiers that look like code: dotted, snake_case, CamelCase, private (`_make_repr`),
# or called
_CODE_NAME = re.compile(
    r"\b(?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*\b|\b[a-z]\w*_\w+\b|\b[A-Z][a-z0-9]+[A-Z]\w*\b"
    r"|(?<![\w.])_+[A-Za-z]\w*\b|\b\w+(?=\()"
)
DIGEST_KEY_SUFFIX = "#impact"


def _link_for_key(recon: ReconReader, kind: str, key: str, detail: str | None = None) -> Link:
    try:
        ref = parse_entity_key(key)
    except ValueError:
        return Link(kind, key, None, None, None, detail)
    if ref.qualified_name is not None:
        row = recon.symbol(key)
        if row is not None:
            return Link(kind, key, row.path, row.start_line, row.end_line, detail, row.id)
        return Link(kind, key, ref.path, None, None, detail)
    return Link(kind, key, ref.path, ref.start_line, ref.end_line, detail)


def traceback_frames(texts: list[str]) -> list[tuple[str, int]]:
    frames = []
    for chunk in texts:
        for match in list(_PY_FRAME.finditer(chunk)) + list(_PYTEST_FRAME.finditer(chunk)):
            frames.append((match["path"], int(match["line"])))
    return frames


# which failures' frames are read first (a symbol is linked once, by its first frame)
FRAME_KIND_ORDER = ("traceback", "test_output", "error")


def compute_links(request: DecisionRequest, pool: list[PoolItem],
                  recon: ReconReader | None) -> list[Link]:
    node = request.plan_node
    links: list[Link] = []
    if recon is None:
        if node.target_entity:
            links.append(Link(TARGET_ENTITY, node.target_entity, None, None, None))
        for item in pool:
            if item.kind in CHANGE_TARGET_KINDS and item.entity_key:
                links.append(Link(CHANGE_TARGET, item.entity_key, item.path, None, None))
        for key in node.dependencies:
            links.append(Link(OBLIGATION_DEPENDENCY, key, None, None, None))
        for test_id in node.required_validation:
            links.append(Link(VALIDATION_TEST, entity_key_of_test_id(test_id), None, None, None,
                              test_id))
        return _unique(links)

    if node.target_entity:
        links.append(_link_for_key(recon, TARGET_ENTITY, node.target_entity))
    for item in pool:
        if item.kind in CHANGE_TARGET_KINDS and item.entity_key:
            links.append(_link_for_key(recon, CHANGE_TARGET, item.entity_key, item.item_id))
    for key in node.dependencies:
        links.append(_link_for_key(recon, OBLIGATION_DEPENDENCY, key))
    point = node.insertion_point
    if point is not None:
        row = recon.innermost(point.path, point.line)
        if row is not None:
            links.append(Link(INSERTION_POINT, row.key, row.path, row.start_line, row.end_line,
                              f"{point.path}:{point.line}", row.id))
    for test_id in node.required_validation:
        test_key = entity_key_of_test_id(test_id)
        links.append(_link_for_key(recon, VALIDATION_TEST, test_key, test_id))
        for row in recon.rows("recon/tested_callees", {"test_key": test_key}):
            links.append(Link(VALIDATION_CALLEE, row.key, row.path, row.start_line, row.end_line,
                              test_id, row.id))
    # the frames of live failures a newer observation has not superseded (P6: a stale
    # failure's line numbers may point into code that has changed since), and the task's
    live = [item for item in pool if item.arrival_no is not None and item.source == "live"]
    stale = stale_arrivals(observation_of(item) for item in live)
    current = sorted((item for item in live
                      if item.kind in FAILURE_KINDS and item.arrival_no not in stale),
                     key=lambda item: (FRAME_KIND_ORDER.index(item.kind), item.arrival_no))
    failure_texts = [*(item.original_content or item.content for item in current), request.task]
    for name, line in traceback_frames(failure_texts):
        path = recon.path_for(name)
        row = recon.innermost(path, line) if path else None
        if row is not None:
            links.append(Link(TRACEBACK_FRAME, row.key, row.path, row.start_line, row.end_line,
                              f"{path}:{line}", row.id))
    named_text = " ".join([node.obligation, node.decision_question or "",
                           *node.acceptance_criteria])
    for name in sorted(set(_CODE_NAME.findall(named_text))):
        rows = recon.rows("recon/symbols_named",
                          {"name": name, "last_part": name.rsplit(".", 1)[-1]})
        if len(rows) == 1:  # names exactly one symbol: a structural reference
            row = rows[0]
            links.append(Link(NAMED_IN_CRITERIA, row.key, row.path, row.start_line, row.end_line,
                              name, row.id))
    return _unique(links)


def _unique(links: list[Link]) -> list[Link]:
    seen, out = set(), []
    for link in links:
        if (link.link_kind, link.entity_key) not in seen:
            seen.add((link.link_kind, link.entity_key))
            out.append(link)
    return out


_DEPENDENT_KIND = {"calls": "CalledBy", "tests": "PreserveObligation", "inherits": "SchemaConsumer"}


def derive_impact(links: list[Link], recon: ReconReader) -> list[ImpactEdge]:
    """Direct and transitive dependents of the change targets, breadth first."""
    heads = [link for link in links
             if link.link_kind in CHANGE_TARGET_LINKS and link.symbol_id]
    edges: list[ImpactEdge] = []
    for head in heads:
        seen = {head.symbol_id}
        frontier = [head.symbol_id]
        for depth in range(1, MAX_DERIVED_DEPTH + 1):
            if not frontier:
                break
            rows = recon.rows("recon/dependents_of", {"symbol_ids": frontier}, "symbol_ids")
            next_frontier = []
            for row in rows:
                if row.tail_id in seen:
                    continue
                seen.add(row.tail_id)
                next_frontier.append(row.tail_id)
                kind = _DEPENDENT_KIND[row.kind]
                if row.tail_is_test and kind == "CalledBy":
                    kind = "PreserveObligation"
                edges.append(ImpactEdge(head.entity_key, row.tail_key, kind, depth,
                                        DERIVED_EDGE_ORIGIN))
            frontier = sorted(next_frontier)
    return edges


def impact_digest(target: str, edges: list[ImpactEdge]) -> str:
    """§3.3's fixed one-line digest of the wider impact DAG, with real counts."""
    from_target = [e for e in edges if e.head == target]
    direct_callers = sum(1 for e in from_target if e.depth == 1 and e.kind == "CalledBy")
    consumers = sum(1 for e in from_target if e.kind in ("ConfigConsumer", "SchemaConsumer"))
    indirect = sum(1 for e in from_target if e.depth > 1 and e.kind != "PreserveObligation")
    tests = sum(1 for e in from_target if e.kind == "PreserveObligation")
    return (
        f"{target}: {direct_callers} callers, {consumers} config/schema consumers, "
        f"{indirect} indirect dependents, {tests} tests — "
        "no direct evidence requires source expansion yet"
    )


def compute_nearness(
    request: DecisionRequest, pool: list[PoolItem], links: list[Link], recon: ReconReader | None
) -> dict[str, Nearness]:
    node = request.plan_node
    decision_terms = terms(" ".join(
        [request.task, node.obligation, node.decision_question or "", *node.acceptance_criteria]
    ))
    # symbol id -> the first link on it: the bucket is the lowest-numbered link, as the
    # gate view takes the first link that reaches an item
    anchors: dict[int, int] = {}
    for number, link in enumerate(links, start=1):
        if link.symbol_id is not None:
            anchors.setdefault(link.symbol_id, number)
    candidates = [i for i in pool if i.in_pool and i.kind in NEAR_TESTED_KINDS]
    item_symbols: dict[str, int] = {}
    if recon is not None:
        for item in candidates:
            if item.entity_key and "::" in item.entity_key:
                row = recon.symbol(item.entity_key)
                if row is not None:
                    item_symbols[item.item_id] = row.id
    hops = _recon_hops(recon, sorted(anchors), sorted(set(item_symbols.values())))

    shared_by_item = {item.item_id: _shared_terms(decision_terms, _item_terms(item))
                      for item in candidates}
    # how many of the tested items share each term: a term every hit shares tells
    # nothing about any one of them
    items_sharing = Counter(term for shared in shared_by_item.values() for term in shared)
    near: dict[str, Nearness] = {}
    first_link = 1 if links else None
    for item in candidates:
        shared = shared_by_item[item.item_id]
        symbol = item_symbols.get(item.item_id)
        found = hops.get(symbol) if symbol is not None else None
        # scored only when it gets a row: most tested items share too few terms
        if found is not None:
            recon_hops, anchor = found
            score = near_score(recon_hops, [items_sharing[t] for t in shared])
            near[item.item_id] = Nearness(list(shared), recon_hops,
                                          anchors.get(anchor, first_link), score)
        elif len(shared) >= NEAR_MIN_SHARED_TERMS:
            score = near_score(None, [items_sharing[t] for t in shared])
            near[item.item_id] = Nearness(list(shared), None, first_link, score)
    return near


def near_score(recon_hops: int | None, items_sharing_each_term: list[int]) -> float:
    """§3.2's "semantically near but structurally unlinked", as one deterministic number:

        structural  NEAR_HOP_SCORE[hops] — 1.0 for a direct recon neighbour of a linked
                    symbol, 0.5 at two edges, 0 beyond;
      + lexical     the sum, over the identifier terms the item shares with the decision's
                    text, of 1 / (the number of tested pool items sharing that term) — a
                    term only this item shares counts 1, one that all 30 hits share 1/30.

    The gate leaves an item residual iff the score reaches NEAR_MIN_SCORE (set on the
    development set, see the constant); rounded so the SQL view and the audit agree.
    """
    structural = NEAR_HOP_SCORE.get(recon_hops, 0.0) if recon_hops is not None else 0.0
    lexical = sum(1.0 / count for count in items_sharing_each_term if count)
    return round(structural + lexical, NEAR_SCORE_DECIMALS)


def item_terms_uncached(entity_key: str | None, signature: str | None,
                        content: str) -> frozenset[str]:
    """The terms the shared-terms test reads from an item: its entity, signature and the
    head of its text."""
    return terms(" ".join(filter(None, [entity_key, signature,
                                        content[:NEAR_CONTENT_CHARS]])))


# An item's terms, kept per (entity key, signature, text digest) — derived once per text,
# by its hash, as token counts are: the same symbols come back decision after decision,
# and the digest is the one the pool's row is written with (tokens.content_sha256).
# Emptied when full, as tokens' in-process counts are.
ITEM_TERMS_KEPT = 1 << 14
_terms_by_item_text: dict[tuple[str | None, str | None, str], frozenset[str]] = {}


def _item_terms(item: PoolItem) -> frozenset[str]:
    key = (item.entity_key, item.signature, content_sha256(item.content))
    found = _terms_by_item_text.get(key)
    if found is None:
        if len(_terms_by_item_text) >= ITEM_TERMS_KEPT:
            _terms_by_item_text.clear()
        found = item_terms_uncached(item.entity_key, item.signature, item.content)
        _terms_by_item_text[key] = found
    return found


@functools.lru_cache(maxsize=ITEM_TERMS_KEPT)
def _shared_terms(decision_terms: frozenset[str], item_terms: frozenset[str]) -> tuple[str, ...]:
    """The item's terms the decision's text names too, sorted. Kept: both sets are the
    memos' own objects (terms(), _item_terms), so a repeat costs one lookup."""
    return tuple(sorted(decision_terms & item_terms))


def forget_item_terms() -> None:
    """Drop the item term sets kept in this process (ctxdb.caches)."""
    _terms_by_item_text.clear()
    _shared_terms.cache_clear()


def _recon_hops(recon: ReconReader | None, anchor_ids: list[int],
                item_ids: list[int]) -> dict[int, tuple[int, int]]:
    """symbol id -> (hops, anchor id) for pool symbols within 2 recon edges of an anchor
    (the lowest-numbered anchor, and for 2 hops the lowest-numbered middle symbol).

    Bounded by the pool, not a walk of the graph: the anchors' neighbours (the ring),
    then each pool symbol's own neighbours — read per symbol and kept per snapshot, as
    the same symbols come back decision after decision.
    """
    if recon is None or not anchor_ids or not item_ids:
        return {}
    anchors = sorted(anchor_ids)
    neighbours = recon.neighbours(anchors + list(item_ids))
    neighbour_anchor: dict[int, int] = {}
    for anchor in anchors:
        for neighbour in neighbours[anchor]:
            neighbour_anchor.setdefault(neighbour, anchor)
    hops: dict[int, tuple[int, int]] = {}
    anchor_set = set(anchors)
    # most symbols have no neighbour in the ring: told by one C call over their
    # neighbours, not a Python loop (a 256-item pool's symbols have ~1,000 neighbours)
    off_ring = set(neighbour_anchor).isdisjoint
    for item_id in item_ids:
        if item_id in anchor_set:
            continue
        if item_id in neighbour_anchor:
            hops[item_id] = (1, neighbour_anchor[item_id])
        elif NEAR_MAX_RECON_HOPS >= 2 and not off_ring(neighbours[item_id]):
            middle = min(n for n in neighbours[item_id] if n in neighbour_anchor)
            hops[item_id] = (2, neighbour_anchor[middle])
    return hops


class GateInputs(NamedTuple):
    """What assembly derives for the gate: the pool (with the impact digest item, when
    there is one), the links, the impact edges and the nearness of unlinked code."""

    pool: list[PoolItem]
    links: list[Link]
    edges: list[ImpactEdge]
    nearness: dict[str, Nearness]


def derive_gate_inputs(request: DecisionRequest, pool: list[PoolItem],
                       recon: ReconReader | None) -> GateInputs:
    """The decision's links, impact edges (given by 06 and derived from recon), the
    digest item of the wider impact (§3.3) added to the pool, and the nearness of
    unlinked code."""
    links = compute_links(request, pool, recon)
    edges = [ImpactEdge(e.head, e.tail, e.kind, e.depth, GIVEN_EDGE_ORIGIN)
             for e in request.impact_edges]
    if request.derive_impact and recon is not None:
        edges += derive_impact(links, recon)
    target = request.plan_node.target_entity
    if (target and stage_options(request.variant).impact_digest
            and any(e.head == target and e.depth > 1 for e in edges)):
        digest_key = target + DIGEST_KEY_SUFFIX
        pool = [*pool, _digest_item(target, digest_key, edges, len(pool) + 1)]
        apply_pool_cap(pool)  # the digest counts against the 256 like any item
        links.append(Link(IMPACT_DIGEST, digest_key, None, None, None, "06 digest"))
    return GateInputs(pool, links, edges, compute_nearness(request, pool, links, recon))


def _digest_item(target: str, digest_key: str, edges: list[ImpactEdge],
                 item_no: int) -> PoolItem:
    """The pool item of §3.3's one-line digest of the target's transitive impact."""
    item = PoolItem(
        item_no=item_no, source="06", kind="graph_edge",
        content=impact_digest(target, edges),
        provenance=f"06: digest of the transitive impact of {target}"[:PROVENANCE_MAX_CHARS],
        entity_key=digest_key,
    )
    item.fact_key = fact_key(item.kind, item.entity_key, item.content, item.item_id)
    return item
