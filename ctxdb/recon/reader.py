"""Reading recon for decisions: one caching reader, keyed on the index generation.

A harness constructs many decisions over one repository in one process, so what a
process has read of one recon *snapshot* (symbol rows, file hashes, resolved entities,
query results, neighbours) is kept and shared by every decision built over it. A
snapshot is named by ``recon_meta``'s generation (written by the indexer in the same
transaction as any change), the highest file id and the file count; it is re-checked
after each decision's reads and dropped if it moved.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict, namedtuple
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from sqlalchemy import Connection, CursorResult, Row, bindparam

from ..entities import EntityRef, path_of_key
from ..sqlfiles import sql_statement
from .schema import GENERATION_KEY, ROOT_KEY
from .writer import compiled_sql


@dataclass(frozen=True)
class ResolvedEntity:
    """What recon knows of an entity, copied into the decision's own rows."""

    path: str
    start_line: int
    end_line: int
    text: str
    signature: str | None


class SymbolRow(NamedTuple):
    """A recon symbol as ``sql/recon/symbol_by_key.sql`` and ``symbols_by_keys.sql`` read
    it, kept per snapshot as a plain tuple: a field of SQLAlchemy's row costs ~1.5 µs, and
    a 256-item decision reads ~250 symbols' ids for nearness alone."""

    id: int
    key: str
    kind: str
    path: str
    start_line: int
    end_line: int
    signature: str | None
    doc: str | None
    is_test: bool


def _symbol_row(row: Row | None) -> SymbolRow | None:
    return None if row is None else SymbolRow(**row._mapping)


# the named-tuple types of kept queries' rows, one per column list (a dozen queries)
ROW_TYPES_KEPT = 64


@functools.lru_cache(maxsize=ROW_TYPES_KEPT)
def _row_type(columns: tuple[str, ...]) -> type[tuple]:
    return namedtuple("ReconRow", columns)  # a column that is no identifier raises here


def _plain_rows(result: CursorResult) -> tuple:
    """A recon query's rows as named tuples, read by name as SQLAlchemy's rows are, at a
    tenth of their cost a field (derive_impact reads ~6 fields of each dependent)."""
    row_type = _row_type(tuple(result.keys()))
    return tuple(map(row_type._make, result))  # type: ignore[attr-defined]


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


# Sentinels as one-member enums: the type checker tells them apart from rows.
class _Missing(Enum):
    MISSING = "recon has no such row"  # remembered like a row


class _Absent(Enum):
    ABSENT = "not looked up yet"  # where None is a result


_MISSING = _Missing.MISSING
_ABSENT = _Absent.ABSENT


class _Snapshot:
    def __init__(self) -> None:
        self.symbols: dict[str, SymbolRow | None] = {}
        self.hashes: dict[str, str | _Missing] = {}  # path -> sha256, or _MISSING
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
    """Read on the driver's cursor, in ``connection``'s transaction (begun here if none
    is: the reads after it are then one snapshot on SQLite): a decision reads it once
    or twice, and SQLAlchemy's execution costs ~5× the statement (~70 µs)."""
    if not connection.in_transaction():
        connection.begin()  # what SQLAlchemy's own execution would begin
    sql, order = compiled_sql("recon/snapshot_identity", connection.dialect)
    parameters = {"generation_key": GENERATION_KEY}
    cursor = connection.connection.cursor()
    try:
        cursor.execute(sql, parameters if order is None
                       else tuple(parameters[key] for key in order))
        row = cursor.fetchone()
    finally:
        cursor.close()
    if row is None:
        raise ValueError("recon/snapshot_identity: no row")
    return tuple(row)


def _driver_in_transaction(connection: Connection) -> bool:
    return bool(getattr(connection.connection.dbapi_connection, "in_transaction", False))


class ReconReader:
    """Reads recon through the store's connection (``recon.*`` on both backends)."""

    # Stay well under SQLite's bound-parameter limit in IN lists.
    KEYS_PER_QUERY = 500

    def __init__(self, connection: Connection):
        self.connection = connection
        self._identity = _snapshot_identity(connection)
        self._snapshot = _snapshot_for(self._identity)
        # SQLite inside a transaction (the store's connections BEGIN before their first
        # read): every read after the identity's, in that transaction, sees the same
        # snapshot of recon
        self._transaction = (connection.get_transaction()
                             if connection.dialect.name == "sqlite"
                             and _driver_in_transaction(connection) else None)

    @property
    def reads_one_snapshot(self) -> bool:
        """Whether every read so far was in the transaction the identity was read in."""
        transaction = self._transaction
        return (transaction is not None and transaction.is_active
                and self.connection.get_transaction() is transaction
                and _driver_in_transaction(self.connection))

    def confirm_snapshot(self) -> None:
        """After a decision's reads: if the index changed meanwhile (reads on a separate
        recon connection, which reads statement by statement, or PostgreSQL's read
        committed, need not be one snapshot), the shared reads are dropped, so the next
        decision reads afresh. Reads of one snapshot need no second look."""
        if self.reads_one_snapshot or self._identity[0] is None:
            return
        if _snapshot_identity(self.connection) != self._identity:
            _forget_snapshot(self._identity)

    @property
    def is_empty(self) -> bool:
        """The index holds no file (built over a directory with no Python in it)."""
        return not self._identity[2]  # snapshot_identity's file_count

    def root(self) -> str | None:
        """The indexed directory's real path (recon_meta), None if the index predates it."""
        rows = self.rows("recon/indexed_root", {"root_key": ROOT_KEY})
        return rows[0].root if rows else None

    def rows(self, name: str, params: dict, *expanding: str, keep: bool = True) -> tuple:
        """A recon query's rows, read once per snapshot (lists in params are IN lists);
        ``keep=False`` for queries whose parameters rarely repeat."""
        if not keep:
            return _plain_rows(self.connection.execute(_query(name, *expanding), params))
        key = (name, *sorted((k, tuple(v) if isinstance(v, list) else v)
                             for k, v in params.items()))
        found = self._snapshot.queries.get(key)
        if found is None:
            found = _plain_rows(self.connection.execute(_query(name, *expanding), params))
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
        # an entity already resolved in this snapshot needs neither read again (a warm
        # decision's whole pool: ~0.25 ms of path splitting at 256 items, for nothing)
        resolved = snapshot.resolved
        keys = [k for k in keys if k and k not in resolved]
        wanted = sorted({k for k in keys if "::" in k and k not in snapshot.symbols})
        statement = _query("recon/symbols_by_keys", "entity_keys")
        for start in range(0, len(wanted), self.KEYS_PER_QUERY):
            chunk = wanted[start : start + self.KEYS_PER_QUERY]
            found = {row.key: row
                     for row in self.connection.execute(statement, {"entity_keys": chunk})}
            for key in chunk:
                snapshot.remember(snapshot.symbols, key, _symbol_row(found.get(key)))
        paths = sorted({path_of_key(k) for k in keys} - set(snapshot.hashes))
        hashes = _query("recon/file_hashes", "paths")
        for start in range(0, len(paths), self.KEYS_PER_QUERY):
            chunk = paths[start : start + self.KEYS_PER_QUERY]
            found = {row.path: row.sha256
                     for row in self.connection.execute(hashes, {"paths": chunk})}
            for path in chunk:
                snapshot.remember(snapshot.hashes, path, found.get(path, _MISSING))

    def symbol(self, key: str) -> SymbolRow | None:
        row = self._snapshot.symbols.get(key, _ABSENT)
        if row is _ABSENT:
            row = _symbol_row(self.connection.execute(_query("recon/symbol_by_key"),
                                                      {"entity_key": key}).first())
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
            if ref.end_line is None:
                raise ValueError(f"entity {ref.key!r}: a start line without an end line")
            end = min(ref.end_line, line_count)
            return ResolvedEntity(ref.path, ref.start_line, end,
                                  self._lines(ref.path, ref.start_line, end) or "", None)
        return ResolvedEntity(ref.path, 1, line_count, source, None)

    def neighbours(self, symbol_ids) -> dict[int, tuple[int, ...]]:
        """symbol id -> the ids one recon edge away (calls/inherits/tests, either way)."""
        known = self._snapshot.neighbours
        found = {i: known.get(i) for i in symbol_ids}
        wanted = sorted(i for i, n in found.items() if n is None)
        fetched: dict[int, tuple[int, ...]] = {}  # the wanted ones, read below
        for start in range(0, len(wanted), self.KEYS_PER_QUERY):
            chunk = wanted[start : start + self.KEYS_PER_QUERY]
            read: dict[int, list[int]] = {i: [] for i in chunk}
            for row in self.connection.execute(_query("recon/neighbours_of", "symbol_ids"),
                                               {"symbol_ids": chunk}):
                read[row.via_id].append(row.neighbour_id)
            for symbol_id, ids in read.items():
                fetched[symbol_id] = tuple(ids)
                self._snapshot.remember(known, symbol_id, fetched[symbol_id],
                                        _ID_BYTES * (len(ids) + 1))
        return {i: kept if kept is not None else fetched[i] for i, kept in found.items()}

    def innermost(self, path: str, line: int):
        rows = self.rows("recon/enclosing_symbol_of_span",
                         {"path": path, "first_line": line, "last_line": line})
        return rows[0] if rows else None

    def path_for(self, name: str) -> str | None:
        rows = self.rows("recon/paths_ending_with", {"name": name})
        return rows[0].path if rows else None
