"""What the current obligation structurally reaches, read from recon at assembly.

These are the gate's inputs (DESIGN.md, "what required to discharge the
obligation can mean, deterministically"), copied into ``decision_link``,
``impact_edge`` and ``item_nearness`` so the gate view runs on the decision's
own rows:

* links — the target, 05's change targets, the symbol at the insertion point,
  the required-validation tests and what they call, traceback frames, and
  identifiers in the obligation/criteria/question that name exactly one symbol;
* derived impact edges (``derive_impact``) — direct dependents of the change
  target (callers: CalledBy; tests that exercise it: PreserveObligation;
  subclasses: SchemaConsumer) and their dependents up to ``MAX_DERIVED_DEPTH``;
* nearness — an unlinked pool item is near when it shares at least
  ``NEAR_MIN_SHARED_TERMS`` identifier terms with the decision's text, or sits
  within ``NEAR_MAX_RECON_HOPS`` recon edges of a linked symbol.
"""

from __future__ import annotations

import functools
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from sqlalchemy import Connection, bindparam

from .assemble import PoolItem, ResolvedEntity
from ..entities import EntityRef, entity_key_of_test_id, parse_entity_key
from ..recon.schema import GENERATION_KEY
from ..request import DecisionRequest
from ..sqlfiles import sql_statement
from ..terms import terms

NEAR_MIN_SHARED_TERMS = 2
NEAR_MAX_RECON_HOPS = 2
NEAR_CONTENT_CHARS = 400  # how much of an item's text the shared-terms test reads
MAX_DERIVED_DEPTH = 3
CODE_KINDS = frozenset({"source_code", "symbol", "retrieved_hit", "config", "graph_edge",
                        "downstream_obligation"})
# `File "path", line N, in name` (Python) and `path:N: in name` (pytest --tb=short)
_PY_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+)')
_PYTEST_FRAME = re.compile(r"^(?P<path>[\w./-]+\.py):(?P<line>\d+):", re.MULTILINE)
# identifiers that look like code: dotted, snake_case, CamelCase, or called
_CODE_NAME = re.compile(
    r"\b(?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*\b|\b[a-z]\w*_\w+\b|\b[A-Z][a-z0-9]+[A-Z]\w*\b|\b\w+(?=\()"
)
DIGEST_KEY_SUFFIX = "#impact"


@dataclass(frozen=True)
class Link:
    link_kind: str
    entity_key: str
    path: str | None
    start_line: int | None
    end_line: int | None
    detail: str | None = None
    symbol_id: int | None = None


@dataclass(frozen=True)
class DerivedEdge:
    head: str
    tail: str
    kind: str
    depth: int


@dataclass(slots=True)
class Nearness:
    shared_terms: list[str] = field(default_factory=list)
    recon_hops: int | None = None
    nearest_link_no: int | None = None


# Source texts already read by this process, keyed by (path, content sha256): a harness
# constructs many decisions over one repository, and a changed file has a new hash.
FILE_TEXT_CACHE_FILES = 512
_FILE_TEXTS: OrderedDict[tuple[str, str], tuple[int, str, list[str]]] = OrderedDict()
_FILE_TEXTS_LOCK = threading.Lock()  # harness threads may construct at once

# What this process has read from one recon snapshot, shared by every decision built over
# it. A snapshot is named by recon_meta's `generation` — new whenever an index run changes
# anything, written in the same transaction — together with the highest file id and the
# file count, which also move when an indexer that predates generations changes the index
# (it re-inserts a changed file under a new id). An index without a generation gets a
# fresh snapshot per decision.
RECON_SNAPSHOTS_KEPT = 4
# A snapshot holds symbol rows, query results and entity texts; past this estimate of
# its size it starts over (a few generations at most: a bounded ~100 MB worst case).
RECON_SNAPSHOT_BUDGET_BYTES = 24 << 20
_ROW_BYTES, _ID_BYTES = 256, 32  # rough sizes for the budget
_MISSING = object()  # "recon has no such row", remembered like a row
_ABSENT = object()  # "not looked up yet"


class _Snapshot:
    def __init__(self) -> None:
        self.symbols: dict[str, object] = {}
        self.hashes: dict[str, object] = {}  # path -> sha256, or _MISSING
        self.resolved: dict[str, ResolvedEntity | None] = {}
        self.queries: dict[tuple, tuple] = {}
        self.neighbours: dict[int, tuple[int, ...]] = {}
        self.size = 0

    def remember(self, table: dict, key, value, size: int = _ROW_BYTES) -> None:
        self.size += size
        if self.size > RECON_SNAPSHOT_BUDGET_BYTES:
            for each in (self.symbols, self.hashes, self.resolved, self.queries,
                         self.neighbours):
                each.clear()
            self.size = size
        table[key] = value


_SNAPSHOTS: OrderedDict[tuple, _Snapshot] = OrderedDict()
_SNAPSHOTS_LOCK = threading.Lock()


def _snapshot_for(identity: tuple) -> _Snapshot:
    if identity[0] is None:  # no generation: nothing may be kept across decisions
        return _Snapshot()
    with _SNAPSHOTS_LOCK:
        found = _SNAPSHOTS.get(identity)
        if found is None:
            found = _SNAPSHOTS[identity] = _Snapshot()
            while len(_SNAPSHOTS) > RECON_SNAPSHOTS_KEPT:
                _SNAPSHOTS.popitem(last=False)
        else:
            _SNAPSHOTS.move_to_end(identity)
        return found


def forget_recon_reads() -> None:
    """Drop every recon snapshot and source text this process keeps."""
    with _SNAPSHOTS_LOCK:
        _SNAPSHOTS.clear()
    with _FILE_TEXTS_LOCK:
        _FILE_TEXTS.clear()


def _forget_snapshot(identity: tuple) -> None:
    with _SNAPSHOTS_LOCK:
        _SNAPSHOTS.pop(identity, None)


@functools.lru_cache(maxsize=64)
def _query(name: str, *expanding: str):
    statement = sql_statement(name)
    if expanding:
        statement = statement.bindparams(*(bindparam(n, expanding=True) for n in expanding))
    return statement


def _snapshot_identity(connection: Connection) -> tuple:
    return tuple(connection.execute(_query("recon/snapshot_identity"),
                                     {"generation_key": GENERATION_KEY}).one())


class ReconSql:
    """Reads recon through the store's connection (``recon.*`` on both backends)."""

    # Stay well under SQLite's bound-parameter limit in IN lists.
    KEYS_PER_QUERY = 500

    def __init__(self, connection: Connection):
        self.connection = connection
        self._identity = _snapshot_identity(connection)
        self._snapshot = _snapshot_for(self._identity)

    def confirm_snapshot(self) -> None:
        """After a decision's reads: if the index changed meanwhile (reads on a separate
        recon connection, or PostgreSQL's read committed, need not be one snapshot), the
        shared reads are dropped, so the next decision reads afresh."""
        if self._identity[0] is not None and _snapshot_identity(self.connection) != self._identity:
            _forget_snapshot(self._identity)

    def rows(self, name: str, params: dict, *expanding: str, keep: bool = True) -> tuple:
        """A recon query's rows, read once per snapshot (lists in params are IN lists);
        ``keep=False`` for queries whose parameters rarely repeat."""
        if not keep:
            return tuple(self.connection.execute(_query(name, *expanding), params))
        key = (name, *sorted((k, tuple(v) if isinstance(v, list) else v)
                             for k, v in params.items()))
        found = self._snapshot.queries.get(key)
        if found is None:
            found = tuple(self.connection.execute(_query(name, *expanding), params))
            size = _ROW_BYTES * len(found) + _ID_BYTES * sum(
                len(v) for v in params.values() if isinstance(v, list))
            self._snapshot.remember(self._snapshot.queries, key, found, size)
        return found

    def _file(self, path: str) -> tuple[int, str, list[str]] | None:
        sha256 = self._snapshot.hashes.get(path)
        if sha256 is _MISSING:
            return None
        if sha256 is not None:
            with _FILE_TEXTS_LOCK:
                found = _FILE_TEXTS.get((path, sha256))
                if found is not None:
                    _FILE_TEXTS.move_to_end((path, sha256))
                    return found
        row = self.connection.execute(_query("recon/file_by_path"), {"path": path}).first()
        self._snapshot.remember(self._snapshot.hashes, path, row.sha256 if row else _MISSING)
        if row is None:
            return None
        # Line numbers are tree-sitter rows, counted by \n only (not by form feeds).
        found = (row.line_count, row.text, row.text.split("\n"))
        with _FILE_TEXTS_LOCK:
            _FILE_TEXTS[(path, row.sha256)] = found
            while len(_FILE_TEXTS) > FILE_TEXT_CACHE_FILES:
                _FILE_TEXTS.popitem(last=False)
        return found

    def prefetch(self, keys) -> None:
        """Read many symbols and file hashes in a few queries (a whole pool at once)."""
        snapshot = self._snapshot
        keys = [k for k in keys if k]
        wanted = sorted({k for k in keys if "::" in k and k not in snapshot.symbols})
        statement = _query("recon/symbols_by_keys", "entity_keys")
        for start in range(0, len(wanted), self.KEYS_PER_QUERY):
            chunk = wanted[start : start + self.KEYS_PER_QUERY]
            found = {row.key: row for row in self.connection.execute(statement, {"entity_keys": chunk})}
            for key in chunk:
                snapshot.remember(snapshot.symbols, key, found.get(key))
        paths = sorted({k.split("::", 1)[0].split(":", 1)[0] for k in keys} - set(snapshot.hashes))
        hashes = _query("recon/file_hashes", "paths")
        for start in range(0, len(paths), self.KEYS_PER_QUERY):
            chunk = paths[start : start + self.KEYS_PER_QUERY]
            found = {row.path: row.sha256 for row in self.connection.execute(hashes, {"paths": chunk})}
            for path in chunk:
                snapshot.remember(snapshot.hashes, path, found.get(path, _MISSING))

    def symbol(self, key: str):
        row = self._snapshot.symbols.get(key, _ABSENT)
        if row is _ABSENT:
            row = self.connection.execute(_query("recon/symbol_by_key"), {"entity_key": key}).first()
            self._snapshot.remember(self._snapshot.symbols, key, row)
        return row

    def _lines(self, path: str, start: int, end: int) -> str | None:
        found = self._file(path)
        if found is None:
            return None
        lines = found[2]
        text = "\n".join(lines[start - 1 : end])
        return text + "\n" if end < len(lines) else text

    def resolve(self, ref: EntityRef) -> ResolvedEntity | None:
        found = self._snapshot.resolved.get(ref.key, _ABSENT)
        if found is _ABSENT:
            found = self._resolve(ref)
            size = _ROW_BYTES + (len(found.text) if found is not None else 0)
            self._snapshot.remember(self._snapshot.resolved, ref.key, found, size)
        return found

    def _resolve(self, ref: EntityRef) -> ResolvedEntity | None:
        if ref.qualified_name is not None:
            row = self.symbol(ref.key)
            if row is None:
                return None
            signature = row.signature
            if signature and row.doc:
                signature = f'{signature}\n    """{row.doc}"""'
            return ResolvedEntity(
                row.path, row.start_line, row.end_line,
                self._lines(row.path, row.start_line, row.end_line) or "", signature,
            )
        found = self._file(ref.path)
        if found is None:
            return None
        line_count, source, _lines = found
        if ref.start_line is not None:
            end = min(ref.end_line, line_count)
            return ResolvedEntity(ref.path, ref.start_line, end,
                                  self._lines(ref.path, ref.start_line, end) or "", None)
        return ResolvedEntity(ref.path, 1, line_count, source, None)

    def neighbours(self, symbol_ids) -> dict[int, tuple[int, ...]]:
        """symbol id -> the ids one recon edge away (calls/inherits/tests, either way)."""
        known = self._snapshot.neighbours
        found = {i: known.get(i) for i in symbol_ids}
        wanted = sorted(i for i, n in found.items() if n is None)
        for start in range(0, len(wanted), self.KEYS_PER_QUERY):
            chunk = wanted[start : start + self.KEYS_PER_QUERY]
            read: dict[int, list[int]] = {i: [] for i in chunk}
            for row in self.connection.execute(_query("recon/neighbours_of", "symbol_ids"),
                                               {"symbol_ids": chunk}):
                read[row.via_id].append(row.neighbour_id)
            for symbol_id, ids in read.items():
                found[symbol_id] = tuple(ids)
                self._snapshot.remember(known, symbol_id, found[symbol_id],
                                        _ID_BYTES * (len(ids) + 1))
        return found

    def innermost(self, path: str, line: int):
        rows = self.rows("recon/enclosing_symbol_of_span",
                         {"path": path, "first_line": line, "last_line": line})
        return rows[0] if rows else None

    def path_for(self, name: str) -> str | None:
        rows = self.rows("recon/paths_ending_with", {"name": name})
        return rows[0].path if rows else None


def _link_for_key(recon: ReconSql, kind: str, key: str, detail: str | None = None) -> Link:
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


def compute_links(request: DecisionRequest, pool: list[PoolItem], recon: ReconSql | None) -> list[Link]:
    node = request.plan_node
    links: list[Link] = []
    if recon is None:
        if node.target_entity:
            links.append(Link("target_entity", node.target_entity, None, None, None))
        for item in pool:
            if item.kind in ("fault_entity", "changed_entity") and item.entity_key:
                links.append(Link("change_target", item.entity_key, item.path, None, None))
        for test_id in node.required_validation:
            links.append(Link("validation_test", entity_key_of_test_id(test_id), None, None, None, test_id))
        return _unique(links)

    if node.target_entity:
        links.append(_link_for_key(recon, "target_entity", node.target_entity))
    for item in pool:
        if item.kind in ("fault_entity", "changed_entity") and item.entity_key:
            links.append(_link_for_key(recon, "change_target", item.entity_key, item.item_id))
    point = node.insertion_point
    if point is not None:
        row = recon.innermost(point.path, point.line)
        if row is not None:
            links.append(Link("insertion_point", row.key, row.path, row.start_line, row.end_line,
                              f"{point.path}:{point.line}", row.id))
    for test_id in node.required_validation:
        test_key = entity_key_of_test_id(test_id)
        links.append(_link_for_key(recon, "validation_test", test_key, test_id))
        for row in recon.rows("recon/tested_callees", {"test_key": test_key}):
            links.append(Link("validation_callee", row.key, row.path, row.start_line, row.end_line,
                              test_id, row.id))
    live = request.live
    failure_texts = [*live.tracebacks, *live.test_outputs, *live.errors, request.task]
    for name, line in traceback_frames(failure_texts):
        path = recon.path_for(name)
        row = recon.innermost(path, line) if path else None
        if row is not None:
            links.append(Link("traceback_frame", row.key, row.path, row.start_line, row.end_line,
                              f"{path}:{line}", row.id))
    named_text = " ".join([node.obligation, node.decision_question or "", *node.acceptance_criteria])
    for name in sorted(set(_CODE_NAME.findall(named_text))):
        rows = recon.rows("recon/symbols_named",
                          {"name": name, "last_part": name.rsplit(".", 1)[-1]})
        if len(rows) == 1:  # names exactly one symbol: a structural reference
            row = rows[0]
            links.append(Link("named_in_criteria", row.key, row.path, row.start_line, row.end_line,
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


def derive_impact(links: list[Link], recon: ReconSql) -> list[DerivedEdge]:
    """Direct and transitive dependents of the change targets, breadth first."""
    heads = [link for link in links
             if link.link_kind in ("target_entity", "change_target") and link.symbol_id]
    edges: list[DerivedEdge] = []
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
                edges.append(DerivedEdge(head.entity_key, row.tail_key, kind, depth))
            frontier = sorted(next_frontier)
    return edges


def impact_digest(target: str, edges: list[tuple[str, str, str, int]]) -> str:
    """§3.3's fixed one-line digest of the wider impact DAG, with real counts."""
    from_target = [e for e in edges if e[0] == target]
    direct_callers = sum(1 for e in from_target if e[3] == 1 and e[2] == "CalledBy")
    consumers = sum(1 for e in from_target if e[2] in ("ConfigConsumer", "SchemaConsumer"))
    indirect = sum(1 for e in from_target if e[3] > 1 and e[2] != "PreserveObligation")
    tests = sum(1 for e in from_target if e[2] == "PreserveObligation")
    return (
        f"{target}: {direct_callers} callers, {consumers} config/schema consumers, "
        f"{indirect} indirect dependents, {tests} tests — "
        "no direct evidence requires source expansion yet"
    )


def compute_nearness(
    request: DecisionRequest, pool: list[PoolItem], links: list[Link], recon: ReconSql | None
) -> dict[str, Nearness]:
    node = request.plan_node
    decision_terms = terms(" ".join(
        [request.task, node.obligation, node.decision_question or "", *node.acceptance_criteria]
    ))
    anchors = {link.symbol_id: number for number, link in enumerate(links, start=1)
               if link.symbol_id is not None}
    candidates = [i for i in pool if i.in_pool and i.kind in CODE_KINDS]
    item_symbols: dict[str, int] = {}
    if recon is not None:
        for item in candidates:
            if item.entity_key and "::" in item.entity_key:
                row = recon.symbol(item.entity_key)
                if row is not None:
                    item_symbols[item.item_id] = row.id
    hops = _recon_hops(recon, sorted(anchors), sorted(set(item_symbols.values())))

    near: dict[str, Nearness] = {}
    first_link = 1 if links else None
    for item in candidates:
        shared = decision_terms.intersection(
            _item_terms(item.entity_key, item.signature, item.content[:NEAR_CONTENT_CHARS])
        )
        found = hops.get(item_symbols.get(item.item_id))
        if found is not None:
            recon_hops, anchor = found
            near[item.item_id] = Nearness(sorted(shared), recon_hops,
                                          anchors.get(anchor, first_link))
        elif len(shared) >= NEAR_MIN_SHARED_TERMS:
            near[item.item_id] = Nearness(sorted(shared), None, first_link)
    return near


@functools.lru_cache(maxsize=4096)  # keys hold the first 400 characters: a few MB at most
def _item_terms(entity_key: str | None, signature: str | None, head: str) -> frozenset[str]:
    """The terms the shared-terms test reads from an item: its entity, signature and the
    head of its text (cached: the same symbols come back decision after decision)."""
    return terms(" ".join(filter(None, [entity_key, signature, head])))


def _recon_hops(recon, anchor_ids, item_ids) -> dict[int, tuple[int, int]]:
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
    for item_id in item_ids:
        if item_id in anchor_set:
            continue
        if item_id in neighbour_anchor:
            hops[item_id] = (1, neighbour_anchor[item_id])
        elif NEAR_MAX_RECON_HOPS >= 2:
            middle = [n for n in neighbours[item_id] if n in neighbour_anchor]
            if middle:
                hops[item_id] = (2, neighbour_anchor[min(middle)])
    return hops
