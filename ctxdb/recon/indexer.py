"""Build and refresh the recon index of a repository: `index_repository`.

Phases: walk → compare content hashes with the index (one SELECT) → parse what changed
(in a process pool when there is a lot) → write everything in one transaction.

Incremental runs re-parse only files whose sha256 (or dotted module name) changed,
delete the rows of changed and vanished files, insert the new rows, and then re-resolve
*every* edge of the repository from the stored rows (`binding` keeps each module's
imports so unchanged files need not be re-parsed) and update the ones whose destination
moved. Re-resolving everything is the simple correct choice: a changed file can add,
remove or shadow a name that edges anywhere resolve to (a new second ``helper`` makes
the repo-wide unique ``helper`` ambiguous; a changed base list changes ``self.x`` in
subclasses). It costs one read of the edge table; parsing is the expensive part.

Change detection reads and hashes every file (no mtime shortcut: content decides); on
Django's 2.7k files that is about 0.1 s, and a run that finds nothing changed writes
nothing.
"""

from __future__ import annotations

import errno
import gc
import hashlib
import multiprocessing
import os
import queue
import stat
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import sqlalchemy as sa

from ctxdb.db import insert_statement
from ctxdb.entities import is_test_path
from ctxdb.progress import ProgressBar
from ctxdb.recon import schema
from ctxdb.recon.extract import (
    MAX_FILE_BYTES,
    MAX_PARSE_DEPTH,
    SKIP_TOO_LARGE,
    ParsedFile,
    Reference,
    Symbol,
    body_terms,
    count_lines,
    extract_file,
    join_body_terms,
    split_body_terms,
    unparsed_file,
)
from ctxdb.recon.resolve import (
    ModuleBinding,
    Resolver,
    ResolverFile,
    ResolverSymbol,
    WrittenBase,
    module_names,
)
from ctxdb.workers import usable_cpu_count

# Directory names never descended into (plus *.egg-info and any dir holding pyvenv.cfg).
SKIP_DIRS = frozenset(
    {".git", ".hg", ".svn", ".venv", "venv", "build", "dist", "__pycache__",
     "node_modules", ".tox", ".nox"}
)
# Below this many files to parse, a process pool costs more than it saves.
POOL_MIN_FILES = 200
POOL_CHUNK = 16
# Edges are resolved and handed to the database thread in batches of this many.
EDGE_BATCH = 16384
# A cold build inserts its body terms in statements of about this many characters:
# few enough to run without the GIL, small enough to keep the copies in memory small.
BODY_INSERT_CHUNK_CHARS = 1 << 22
# A file too large to parse is hashed and its lines counted in pieces of this size.
READ_CHUNK_BYTES = 1 << 20
# Why the walk passed over a path (recon.skipped_path.reason).
SKIP_SYMLINK_LOOP = "symlink_loop"
SKIP_SYMLINK_OUTSIDE = "symlink_outside_root"
SKIP_SYMLINK_BROKEN = "symlink_broken"
SKIP_SYMLINK_DIR = "symlink_dir"  # a directory link inside the root: not followed
SKIP_FIFO = "fifo"
SKIP_SOCKET = "socket"
SKIP_DEVICE = "device"
SKIP_NOT_REGULAR = "not_regular"
SKIP_UNREADABLE = "unreadable"
# PostgreSQL's tsvector limits: positions above 16383 are clipped, and a lexeme keeps at
# most 256 of them (more is an error in a literal, not a clip).
TSVECTOR_MAX_POSITION = 16383
TSVECTOR_MAX_POSITIONS = 256


class SkippedPath(NamedTuple):
    """A path not indexed, or indexed as a file row alone, and why."""

    path: str  # relative to the root, posix
    reason: str  # a SKIP_* value of this module or of `extract`


@dataclass(frozen=True)
class IndexLimits:
    """What the indexer parses: files up to `max_file_bytes`, parse trees up to
    `max_parse_depth` levels; larger or deeper files become file rows alone. The limits
    apply when a file is parsed: an unchanged file keeps what it got (--rebuild)."""

    max_file_bytes: int = MAX_FILE_BYTES
    max_parse_depth: int = MAX_PARSE_DEPTH


@dataclass
class IndexStats:
    """One indexing run. symbols/edges/files_flagged/skipped are totals in the index
    afterwards. `skipped`: the files indexed without symbols (too large, too deep) and
    the paths the walk passed over (FIFOs, sockets, devices, symlink loops, links
    leaving the root, ...), by path."""

    files_seen: int
    files_parsed: int
    files_removed: int
    files_flagged: int
    symbols: int
    edges: int
    seconds: float
    skipped: tuple[SkippedPath, ...] = ()

    @property
    def files_skipped(self) -> int:
        return len(self.skipped)


# --- walking ------------------------------------------------------------------------------


class Walk(NamedTuple):
    files: list[tuple[str, str]]  # (relative posix path, absolute path), sorted
    skipped: list[SkippedPath]  # sorted by path


def walk_python_files(root: str | os.PathLike) -> list[tuple[str, str]]:
    """(relative posix path, absolute path) of every Python file to index, sorted."""
    return walk_repository(root).files


def walk_repository(root: str | os.PathLike) -> Walk:
    """The Python files to index under `root`, and what was passed over.

    Skipped without a word: SKIP_DIRS, ``*.egg-info`` and virtualenvs (a dir holding
    ``pyvenv.cfg``). Listed in `Walk.skipped`: every ``.py`` name that is not a regular
    file inside the root (a FIFO, socket or device; a link that loops, dangles or
    leaves the root), every directory link (never followed: a loop, outside the root,
    or a second path to files indexed where they are), and directories that could not
    be read.
    """
    root_real = os.path.realpath(root)
    inside = root_real.rstrip(os.sep) + os.sep
    out: list[tuple[str, str]] = []
    skipped: list[SkippedPath] = []
    pending = [(root_real, "")]
    while pending:
        directory, rel = pending.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            skipped.append(SkippedPath(rel.rstrip("/") or ".", SKIP_UNREADABLE))
            continue
        for entry in entries:
            name = entry.name
            try:
                if entry.is_symlink():
                    reason = _symlink_skip(entry.path, name, inside)
                    if reason is None:
                        out.append((f"{rel}{name}", entry.path))
                    elif reason:
                        skipped.append(SkippedPath(f"{rel}{name}", reason))
                elif entry.is_dir(follow_symlinks=False):
                    if (
                        name in SKIP_DIRS
                        or name.endswith(".egg-info")
                        or os.path.exists(os.path.join(entry.path, "pyvenv.cfg"))
                    ):
                        continue
                    pending.append((entry.path, f"{rel}{name}/"))
                elif name.endswith(".py"):
                    reason = _special_file_skip(entry.stat(follow_symlinks=False).st_mode)
                    if reason is None:
                        out.append((f"{rel}{name}", entry.path))
                    else:
                        skipped.append(SkippedPath(f"{rel}{name}", reason))
            except OSError:
                skipped.append(SkippedPath(f"{rel}{name}", SKIP_UNREADABLE))
    out.sort()
    skipped.sort()
    return Walk(out, skipped)


def _special_file_skip(mode: int) -> str | None:
    """None for a regular file, else why it is not read (reading a FIFO blocks)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return SKIP_FIFO
    if stat.S_ISSOCK(mode):
        return SKIP_SOCKET
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return SKIP_DEVICE
    return SKIP_NOT_REGULAR


def _symlink_skip(path: str, name: str, inside: str) -> str | None:
    """For a symbolic link: None to index it (a ``.py`` link to a regular file inside the
    root), "" to pass over it quietly (a link to something that is no directory and no
    ``.py`` name), else the reason it is listed as skipped."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return SKIP_SYMLINK_LOOP
        if exc.errno == errno.ENOENT:
            return SKIP_SYMLINK_BROKEN if name.endswith(".py") else ""
        raise
    is_dir = stat.S_ISDIR(mode)
    if not is_dir and not name.endswith(".py"):
        return ""
    real = os.path.realpath(path)
    if is_dir:
        # a link to the directory holding it, or to one above it, is a loop
        if (os.path.dirname(path) + os.sep).startswith(real.rstrip(os.sep) + os.sep):
            return SKIP_SYMLINK_LOOP
        return SKIP_SYMLINK_DIR if real.startswith(inside) else SKIP_SYMLINK_OUTSIDE
    if not real.startswith(inside):
        return SKIP_SYMLINK_OUTSIDE
    return _special_file_skip(mode)


# --- parsing ------------------------------------------------------------------------------


class _ParseJob(NamedTuple):
    relpath: str
    full_path: str
    module: str
    limits: IndexLimits


def _parse_job(job: _ParseJob) -> ParsedFile | None:
    rel, module = job.relpath, job.module
    try:
        with open(job.full_path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size > job.limits.max_file_bytes:
                return _too_large(fh)
            data = fh.read()
    except OSError:
        return None
    is_package = rel.rsplit("/", 1)[-1] == "__init__.py"
    try:
        return extract_file(rel, data, module, is_package, job.limits.max_parse_depth)
    except Exception as exc:  # noqa: BLE001 - bad input must never abort an index run
        print(f"recon: {rel}: extraction failed ({exc!r}); indexed as a bare module, "
              "flagged syntax_error", file=sys.stderr)
        source = data.decode("utf-8", "replace").replace("\x00", "\ufffd").encode("utf-8")
        lines = count_lines(source.decode("utf-8"))
        module_symbol = Symbol(0, -1, rel, "module", module.rsplit(".", 1)[-1], module, 1,
                               max(lines, 1), 0, len(source), None, None)
        return ParsedFile(hashlib.sha256(data).hexdigest(), len(data), lines, True,
                          source != data, source, [module_symbol], [], [],
                          join_body_terms(body_terms(source, [module_symbol])))


def _too_large(fh: Any) -> ParsedFile:
    """A file over the size limit: its hash, size and lines, read in bounded pieces."""
    digest = hashlib.sha256()
    size = newlines = 0
    last = b""
    while chunk := fh.read(READ_CHUNK_BYTES):
        digest.update(chunk)
        size += len(chunk)
        newlines += chunk.count(b"\n")
        last = chunk
    lines = newlines + (1 if last and not last.endswith(b"\n") else 0)
    return unparsed_file(digest.hexdigest(), size, lines, False, SKIP_TOO_LARGE)


@contextmanager
def _parser_pool(n_jobs: int) -> Iterator[Any]:
    """A process pool when there is enough to parse, else None.

    Created before the write connection is opened, so no worker inherits it.
    """
    workers = usable_cpu_count()
    if n_jobs < POOL_MIN_FILES or workers < 2:
        yield None
        return
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with ctx.Pool(workers, initializer=gc.enable) as pool:  # forked with the GC paused
        yield pool


def _parse_results(pool: Any, jobs: list[_ParseJob]) -> Iterator[ParsedFile | None]:
    """Results of `_parse_job`, in job order."""
    if pool is None:
        return map(_parse_job, jobs)
    return pool.imap(_parse_job, jobs, chunksize=POOL_CHUNK)


# --- writing ------------------------------------------------------------------------------


class _Writer:
    """Raw DB-API access for bulk writes; statements use ? and are adapted per driver."""

    def __init__(self, engine: sa.Engine) -> None:
        self.dialect = engine.dialect
        self.sqlite = self.dialect.name == "sqlite"
        self.raw = engine.raw_connection()
        self.con = self.raw.driver_connection
        if self.sqlite:
            self.con.isolation_level = None  # explicit BEGIN/COMMIT below
        self.cur = self.con.cursor()

    def q(self, sql: str) -> str:
        return sql if self.sqlite else sql.replace("?", "%s")

    def execute(self, sql: str, params: tuple = ()) -> Any:
        self.cur.execute(self.q(sql), params)
        return self.cur

    def executemany(self, sql: str, rows: list[tuple]) -> None:
        if rows:
            self.cur.executemany(self.q(sql), rows)

    def insert(self, table: sa.Table, rows: list[tuple], columns: tuple[str, ...] = ()) -> None:
        """Rows in `columns` order (default: all of the table's)."""
        if rows:
            columns = columns or tuple(table.columns.keys())
            self.cur.executemany(insert_statement(self.dialect, table, columns), rows)

    def begin(self) -> None:
        if self.sqlite:
            self.cur.execute("PRAGMA recon.synchronous=NORMAL")
            self.cur.execute("PRAGMA recon.cache_size=-65536")  # KiB: 64 MiB for the load
            self.cur.execute("PRAGMA temp_store=MEMORY")  # index builds sort in memory
            self.cur.execute(f"PRAGMA threads={usable_cpu_count()}")  # ... with helper threads
            self.cur.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        if self.sqlite:
            self.cur.execute("COMMIT")
        else:
            self.con.commit()

    def rollback(self) -> None:
        try:
            if self.sqlite:
                if self.con.in_transaction:
                    self.cur.execute("ROLLBACK")
            else:
                self.con.rollback()
        except Exception:  # noqa: BLE001 - keep the original error
            pass

    def close(self) -> None:
        self.raw.close()


def _create_tables(w: _Writer, drop: bool) -> None:
    if not w.sqlite:
        w.execute("CREATE SCHEMA IF NOT EXISTS recon")
    if drop:
        for stmt in schema.drop_statements(w.dialect):
            w.execute(stmt)
    for stmt in schema.table_ddl(w.dialect):
        w.execute(stmt)


def _create_indexes(w: _Writer, *, edges: bool) -> None:
    for stmt in schema.index_ddl(w.dialect, edges=edges):
        w.execute(stmt)


def _write_meta(w: _Writer) -> None:
    w.execute("DELETE FROM recon.recon_meta")
    w.insert(schema.recon_meta, sorted(schema.current_meta().items()))


def _ensure_generation(engine: sa.Engine, root: str) -> None:
    """Give an index written before generations existed its first one, and record the
    indexed root where it is missing or another (a read, and a write only then: a
    no-change run of a current index takes no write lock)."""
    with engine.connect() as connection:
        if read_generation(connection) is not None and read_root(connection) == root:
            return
    with _write_transaction(engine) as w:
        row = w.execute("SELECT value FROM recon.recon_meta WHERE key = ?",
                        (schema.ROOT_KEY,)).fetchone()
        if row is None or row[0] != root:
            _write_root(w, root)
            # what an absolute path resolves to changed: readers must read afresh
            _write_generation(w)
            return
        row = w.execute("SELECT 1 FROM recon.recon_meta WHERE key = ?",
                        (schema.GENERATION_KEY,)).fetchone()
        if row is None:  # another indexer may have written one meanwhile
            _write_generation(w)


@contextmanager
def _write_transaction(engine: sa.Engine):
    """A _Writer in one transaction: committed on success, rolled back on any error."""
    w = _Writer(engine)
    try:
        w.begin()
        yield w
        w.commit()
    except BaseException:
        w.rollback()
        raise
    finally:
        w.close()


def read_generation(connection: sa.Connection) -> str | None:
    from ..sqlfiles import sql_statement

    return connection.execute(sql_statement("recon/snapshot_identity"),
                              {"generation_key": schema.GENERATION_KEY}).one().generation


def read_root(connection: sa.Connection) -> str | None:
    """The indexed directory's real path, or None for an index that predates it."""
    from ..sqlfiles import sql_statement

    return connection.execute(sql_statement("recon/indexed_root"),
                              {"root_key": schema.ROOT_KEY}).scalar()


def indexed_root(root: str | os.PathLike) -> str:
    """What recon_meta records as the root: the real path the walk resolves paths
    under (symlinks followed, as walk_python_files does), in posix form."""
    return Path(os.path.realpath(root)).as_posix()


def _write_root(w: _Writer, root: str) -> None:
    w.execute("DELETE FROM recon.recon_meta WHERE key = ?", (schema.ROOT_KEY,))
    w.insert(schema.recon_meta, [(schema.ROOT_KEY, root)])


def _write_generation(w: _Writer) -> None:
    """A new snapshot identity, in the transaction that changes the index: readers may
    keep what they read of one generation for as long as it is current."""
    w.execute("DELETE FROM recon.recon_meta WHERE key = ?", (schema.GENERATION_KEY,))
    w.insert(schema.recon_meta, [(schema.GENERATION_KEY, uuid.uuid4().hex)])


class EdgeRecord(NamedTuple):
    """A row of recon.edge (EDGE_COLUMNS)."""

    id: int
    kind: str
    src_symbol_id: int
    dst_symbol_id: int | None
    dst_name: str
    typed_name: str | None
    line: int

    def as_tests_edge(self, eid: int) -> tuple:
        """The tests edge row a resolved call from a test function gives: same site."""
        return (eid, "tests", self.src_symbol_id, self.dst_symbol_id, self.dst_name,
                self.typed_name, self.line)


# The rows the indexer inserts are plain tuples in these columns' order: Django's sdist
# writes ~220k of them, and a NamedTuple is built ~4x slower than a tuple and bound
# ~40% slower by the sqlite3 driver (through the sequence protocol).
FILE_COLUMNS = ("id", "path", "module", "sha256", "size_bytes", "line_count", "is_test",
                "syntax_error", "not_utf8", "skipped")
SYMBOL_COLUMNS = ("id", "file_id", "parent_id", "key", "kind", "name", "qualname",
                  "start_line", "end_line", "start_byte", "end_byte", "signature", "doc")
EDGE_COLUMNS = EdgeRecord._fields
BINDING_COLUMNS = ("file_id", "name", "target", "line")


class _Loader:
    """Streams freshly parsed files into the database, ids assigned in path order.

    Keeps only what name resolution needs; source text and symbol details go to the
    database in batches while the workers are still parsing.
    """

    FLUSH_FILES = 64

    def __init__(self, w: _Writer, next_file: int, next_symbol: int, *,
                 defer_body_terms: bool = False) -> None:
        self.w = w
        self.next_file = next_file
        self.next_symbol = next_symbol
        # kept for name resolution
        self.files: list[ResolverFile] = []
        self.symbols: list[ResolverSymbol] = []
        self.bindings: list[ModuleBinding] = []
        self.bases: list[WrittenBase] = []  # inherits references: resolved first
        # per file: its first symbol id and its references (src_index counts from it)
        self._references: list[tuple[int, list[Reference]]] = []
        self.flagged = 0
        self.skipped: list[SkippedPath] = []  # files indexed without symbols
        # rows for the next flush, in FILE_COLUMNS, ("file_id", "text"), SYMBOL_COLUMNS
        # and BINDING_COLUMNS order
        self._file_rows: list[tuple] = []
        self._source_rows: list[tuple[int, str]] = []
        self._symbol_rows: list[tuple] = []
        self._binding_rows: list[tuple] = []
        self._body_rows: list[tuple[int, str]] = []  # (symbol id, body terms)
        # A cold build writes the body index on the database thread once parsing is done
        # (beside name resolution) rather than here, where it competes with the parsers:
        # each file's joined terms, in symbol id order from deferred_first_symbol.
        self.defer_body_terms = defer_body_terms
        self.deferred_first_symbol = next_symbol
        self.deferred_body_terms: list[str] = []
        self._symbol_ids_to_flush = range(next_symbol, next_symbol)

    def add(self, rel: str, module: str, parsed: ParsedFile) -> None:
        fid = self.next_file
        self.next_file += 1
        is_test = is_test_path(rel)
        self.flagged += bool(parsed.syntax_error or parsed.not_utf8)
        self._file_rows.append((fid, rel, module, parsed.sha256, parsed.size_bytes,
                                parsed.line_count, is_test, parsed.syntax_error,
                                parsed.not_utf8, parsed.skipped))
        self.files.append(ResolverFile(fid, rel, module, is_test))
        if parsed.skipped is not None:  # a file row alone
            self.skipped.append(SkippedPath(rel, parsed.skipped))
            return
        self._source_rows.append((fid, parsed.source.decode("utf-8")))
        first = self.next_symbol  # symbol ids: the file's symbol indexes shifted by first
        self.next_symbol += len(parsed.symbols)
        for symbol in parsed.symbols:
            sid = first + symbol.index
            parent = first + symbol.parent_index if symbol.parent_index >= 0 else None
            kind, name = symbol.kind, symbol.name
            self._symbol_rows.append(
                (sid, fid, parent, symbol.key, kind, name, symbol.qualname, symbol.start_line,
                 symbol.end_line, symbol.start_byte, symbol.end_byte, symbol.signature,
                 symbol.doc)
            )
            self.symbols.append(ResolverSymbol(sid, fid, parent, kind, name))
        if self.defer_body_terms:
            self.deferred_body_terms.append(parsed.body_terms)
        else:
            self._body_rows += zip(range(first, self.next_symbol),
                                   split_body_terms(parsed.body_terms, len(parsed.symbols)),
                                   strict=True)
        self._symbol_ids_to_flush = range(self._symbol_ids_to_flush.start, self.next_symbol)
        self._references.append((first, parsed.references))
        self.bases += [WrittenBase(first + r.src_index, r.dst_name, r.typed_name)
                       for r in parsed.references if r.kind == "inherits"]
        for binding in parsed.bindings:
            self._binding_rows.append((fid, binding.name, binding.target, binding.line))
            self.bindings.append(ModuleBinding(fid, binding.name, binding.target))
        if len(self._file_rows) >= self.FLUSH_FILES:
            self.flush()

    def references(self) -> Iterator[tuple[int, Reference]]:
        """Every loaded reference, in load order, with its source's symbol id."""
        for first, references in self._references:
            for reference in references:
                yield first + reference.src_index, reference

    def flush(self) -> None:
        w = self.w
        w.insert(schema.file, self._file_rows, FILE_COLUMNS)
        w.insert(schema.file_source, self._source_rows, ("file_id", "text"))
        w.insert(schema.symbol, self._symbol_rows, SYMBOL_COLUMNS)
        ids = self._symbol_ids_to_flush
        if w.sqlite and ids:  # external-content FTS5: index the new rows
            w.execute(
                "INSERT INTO recon.symbol_fts(rowid, name, qualname, signature, doc)"
                " SELECT id, name, qualname, signature, doc FROM recon.symbol"
                " WHERE id BETWEEN ? AND ?",
                (ids[0], ids[-1]),
            )
        _insert_body_terms(w, self._body_rows)
        w.insert(schema.binding, self._binding_rows, BINDING_COLUMNS)
        self._file_rows, self._source_rows = [], []
        self._symbol_rows, self._binding_rows, self._body_rows = [], [], []
        self._symbol_ids_to_flush = range(self.next_symbol, self.next_symbol)


def tsvector_literal(terms: str) -> str:
    """A tsvector in PostgreSQL's literal form (``'term':1,4 'other':2``): the terms are
    already code-aware and lower-case, and PostgreSQL's own parser would split them at
    underscores. They hold only [a-z0-9_], so no quoting is needed."""
    positions: dict[str, list[str]] = {}
    for position, term in enumerate(terms.split(), start=1):
        positions.setdefault(term, []).append(str(min(position, TSVECTOR_MAX_POSITION)))
    return " ".join(f"'{term}':{','.join(at[:TSVECTOR_MAX_POSITIONS])}"
                    for term, at in positions.items())


def _insert_body_terms(w: _Writer, rows: list[tuple[int, str]]) -> None:
    """Rows of the body index: (symbol id, terms) — FTS5 on SQLite, tsvector elsewhere."""
    if w.sqlite:
        w.executemany("INSERT INTO recon.symbol_body_fts(rowid, terms) VALUES (?, ?)", rows)
    else:
        w.executemany("INSERT INTO recon.symbol_body(symbol_id, terms) VALUES (?, ?::tsvector)",
                      [(sid, tsvector_literal(terms)) for sid, terms in rows])


def _insert_deferred_body_terms(w: _Writer, first_symbol: int, per_file: list[str]) -> None:
    """A cold build's body index: the files' joined terms (`ParsedFile.body_terms`, in
    load order), whose symbols have consecutive ids from `first_symbol`. Consumes
    `per_file` (each piece is released once written).

    On SQLite as a few statements over JSON arrays of the terms, BODY_INSERT_CHUNK_CHARS
    at a time: an executemany steps the driver once per row and takes the GIL back each
    time, which on the database thread beside name resolution made the 41,700 rows of
    Django's sdist take 2 s instead of 0.5 s; a statement runs without the GIL
    throughout. The terms hold only [a-z0-9_ ] (code-aware terms), so they need no JSON
    escaping.
    """
    if not w.sqlite:
        terms = [row for joined in per_file for row in joined.split("\n")]
        per_file.clear()
        _insert_body_terms(w, list(zip(range(first_symbol, first_symbol + len(terms)), terms)))
        return
    sql = ("INSERT INTO recon.symbol_body_fts(rowid, terms)"
           " SELECT ? + key, value FROM json_each(?)")
    while per_file:
        n_files = size = 0
        while n_files < len(per_file) and size < BODY_INSERT_CHUNK_CHARS:
            size += len(per_file[n_files])
            n_files += 1
        chunk = [joined.replace("\n", '","') for joined in per_file[:n_files]]
        del per_file[:n_files]
        w.execute(sql, (first_symbol, '["' + '","'.join(chunk) + '"]'))
        first_symbol += sum(joined.count('","') + 1 for joined in chunk)


def _stored_body_terms(w: _Writer, file_id: int) -> list[tuple[int, str]]:
    """The body terms the index holds for a file's symbols, computed again from the
    stored text and spans (the FTS5 table is contentless: a row is deleted by giving
    the very terms it was inserted with)."""
    text = w.execute("SELECT text FROM recon.file_source WHERE file_id = ?",
                     (file_id,)).fetchone()
    rows = w.execute(
        "SELECT id, parent_id, key, kind, name, qualname, start_line, end_line, start_byte,"
        " end_byte FROM recon.symbol WHERE file_id = ? ORDER BY id", (file_id,)).fetchall()
    if text is None or not rows:
        return []
    index_of = {row[0]: index for index, row in enumerate(rows)}
    symbols = [Symbol(index_of[sid], index_of.get(parent, -1), *rest, None, None)
               for sid, parent, *rest in rows]
    terms = body_terms(text[0].encode("utf-8"), symbols)
    return [(row[0], body) for row, body in zip(rows, terms, strict=True)]


# --- the run ------------------------------------------------------------------------------


@dataclass
class _Existing:
    id: int
    sha256: str
    module: str


class _NextIds(NamedTuple):
    file: int
    symbol: int
    edge: int


def _read_state(
    engine: sa.Engine, target: Any, rebuild: bool
) -> tuple[bool, dict[str, _Existing], _NextIds]:
    """(schema exists, path → _Existing, the next free ids)."""
    with engine.connect() as conn:
        meta = schema.read_meta(conn)
        if meta is None:
            if sa.inspect(conn).has_table("symbol", schema=schema.RECON_SCHEMA) and not rebuild:
                raise schema.ReconVersionError(
                    f"{schema.describe_target(target)} has recon tables but no version stamp. "
                    f"Rebuild it: {schema.rebuild_hint(target)}"
                )
            return False, {}, _NextIds(1, 1, 1)
        if rebuild:
            return True, {}, _NextIds(1, 1, 1)
        schema.check_meta(meta, target)
        rows = conn.execute(sa.text("SELECT path, id, sha256, module FROM recon.file"))
        existing = {p: _Existing(i, s, m) for p, i, s, m in rows}
        nxt = conn.execute(
            sa.text(
                "SELECT (SELECT coalesce(max(id), 0) + 1 FROM recon.file),"
                " (SELECT coalesce(max(id), 0) + 1 FROM recon.symbol),"
                " (SELECT coalesce(max(id), 0) + 1 FROM recon.edge)"
            )
        ).one()
        return True, existing, _NextIds(*nxt)


def _totals(engine: sa.Engine) -> tuple[int, int, int]:
    with engine.connect() as conn:
        row = conn.execute(
            sa.text(
                "SELECT (SELECT count(*) FROM recon.symbol), (SELECT count(*) FROM recon.edge),"
                " (SELECT count(*) FROM recon.file WHERE syntax_error OR not_utf8)"
            )
        ).one()
    return tuple(row)


def _write_skipped_paths(w: _Writer, skipped: list[SkippedPath]) -> None:
    w.execute("DELETE FROM recon.skipped_path")
    w.insert(schema.skipped_path, [tuple(row) for row in skipped], ("path", "reason"))


def _ensure_skipped_paths(engine: sa.Engine, skipped: list[SkippedPath]) -> None:
    """A run that found no Python file changed still records what the walk passed over
    when that changed (a FIFO appeared); otherwise it writes nothing."""
    with engine.connect() as connection:
        stored = connection.execute(sa.text(
            "SELECT path, reason FROM recon.skipped_path ORDER BY path")).all()
    if sorted(map(tuple, stored)) != [tuple(row) for row in skipped]:
        with _write_transaction(engine) as w:
            _write_skipped_paths(w, skipped)


def read_skipped(bind: sa.Engine | sa.Connection) -> tuple[SkippedPath, ...]:
    """What the index holds as skipped: files without symbols (too large, too deep) and
    the paths the last walk passed over, by path."""
    sql = sa.text("SELECT path, skipped FROM recon.file WHERE skipped IS NOT NULL"
                  " UNION ALL SELECT path, reason FROM recon.skipped_path")
    if isinstance(bind, sa.Engine):
        with bind.connect() as connection:
            rows = connection.execute(sql).all()
    else:
        rows = bind.execute(sql).all()
    # sorted here, not in SQL: collations differ between backends
    return tuple(sorted(SkippedPath(path, reason) for path, reason in rows))


def _sha256_file(path: str) -> str | None:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(READ_CHUNK_BYTES):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def index_repository(
    root: str | os.PathLike,
    target: str | os.PathLike,
    *,
    rebuild: bool = False,
    progress: bool | None = None,
    limits: IndexLimits = IndexLimits(),
) -> IndexStats:
    """Index the Python files under `root` into the recon index at `target`.

    `target` is a SQLite file path or a SQLAlchemy URL (PostgreSQL: schema ``recon``).
    A second run re-parses only changed files; `rebuild` drops and recreates the index.
    `progress`: None shows a bar on stderr when it is a terminal; True/False force it.
    `limits`: files larger or parse trees deeper are indexed as file rows alone.
    Raises ReconVersionError if the index was written by another version (use rebuild).
    """
    started = time.perf_counter()
    if not os.path.isdir(root):
        raise NotADirectoryError(f"not a directory: {root}")
    with _gc_paused():
        return _index(root, target, rebuild, progress, limits, started)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic GC off for the run: the rows built here hold no reference cycles, and
    on a large repository the collector would re-scan them hundreds of times."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _index(
    root: str | os.PathLike, target: Any, rebuild: bool, progress: bool | None,
    limits: IndexLimits, started: float,
) -> IndexStats:
    walk = walk_repository(root)
    walked = walk.files
    modules = module_names(rel for rel, _ in walked)
    sqlite_path = schema.sqlite_path(target)
    if sqlite_path is not None:
        Path(sqlite_path).absolute().parent.mkdir(parents=True, exist_ok=True)
    engine = schema.create_recon_engine(target)
    try:
        exists, existing, next_ids = _read_state(engine, target, rebuild)
        # What changed: new paths, other content, or another dotted module name (a
        # package gained or lost __init__.py: its relative imports mean other things).
        if existing:
            to_parse = [
                (rel, full)
                for rel, full in walked
                if (old := existing.get(rel)) is None
                or old.module != modules[rel]
                or old.sha256 != _sha256_file(full)
            ]
            seen = {rel for rel, _ in walked}
            removed = sorted(p for p in existing if p not in seen)
        else:
            to_parse, removed = list(walked), []
        cold = not exists or rebuild
        root_path = indexed_root(root)
        if not cold and not to_parse and not removed:
            _ensure_generation(engine, root_path)
            _ensure_skipped_paths(engine, walk.skipped)
            symbols, edges, flagged = _totals(engine)
            return IndexStats(len(walked), 0, 0, flagged, symbols, edges,
                              time.perf_counter() - started, read_skipped(engine))

        bar = ProgressBar("recon", len(to_parse), "files", enabled=progress)
        jobs = [_ParseJob(rel, full, modules[rel], limits) for rel, full in to_parse]
        with _parser_pool(len(jobs)) as pool, _write_transaction(engine) as w:
            if cold:
                _create_tables(w, drop=rebuild)
                _write_meta(w)
            else:
                gone = [existing[p].id for p in removed]
                gone += [existing[rel].id for rel, _ in to_parse if rel in existing]
                _delete_files(w, sorted(gone))
            loader = _Loader(w, next_ids.file, next_ids.symbol, defer_body_terms=cold)
            results = _parse_results(pool, jobs)
            for job, parsed in zip(jobs, results, strict=True):
                if parsed is not None:
                    loader.add(job.relpath, job.module, parsed)
                bar.step()
            loader.flush()
            if cold:
                n_edges = _write_edges_cold(w, loader, next_ids.edge)
            else:
                _write_edges_incremental(w, loader, next_ids.edge)
            _write_skipped_paths(w, walk.skipped)
            _write_root(w, root_path)
            _write_generation(w)
        if cold:
            symbols, edges, flagged = len(loader.symbols), n_edges, loader.flagged
            skipped = tuple(sorted(loader.skipped + walk.skipped))
        else:
            symbols, edges, flagged = _totals(engine)
            skipped = read_skipped(engine)
        return IndexStats(len(walked), len(loader.files), len(removed), flagged, symbols, edges,
                          time.perf_counter() - started, skipped)
    finally:
        engine.dispose()


def _write_edges_cold(w: _Writer, loader: _Loader, next_edge: int) -> int:
    """Resolve and insert every edge, and build the indexes. Returns the edge count.

    The database work runs on a helper thread, overlapped with name resolution here:
    SQLite releases the GIL while it builds indexes and inserts rows.
    """
    with _DatabaseThread() as db:
        db.submit(_create_indexes, w, edges=False)  # symbol, file, binding indexes
        db.submit(_insert_deferred_body_terms, w, loader.deferred_first_symbol,
                  loader.deferred_body_terms)
        resolver = Resolver(
            loader.files,
            loader.symbols,
            sorted(loader.bindings),
            loader.bases,
        )
        resolve = resolver.resolve
        tests_from = resolver.test_functions()
        test_calls: list[EdgeRecord] = []  # each also gives a tests edge
        eid = next_edge
        edges = []
        for src, ref in loader.references():
            kind, name, typed, line = ref.kind, ref.dst_name, ref.typed_name, ref.line
            dst = resolve(src, name, kind, typed)
            edges.append((eid, kind, src, dst, name, typed, line))
            if dst is not None and kind == "calls" and src in tests_from:
                test_calls.append(EdgeRecord(eid, kind, src, dst, name, typed, line))
            eid += 1
            if len(edges) == EDGE_BATCH:
                db.submit(w.insert, schema.edge, edges, EDGE_COLUMNS)
                edges = []
        db.submit(w.insert, schema.edge, edges, EDGE_COLUMNS)
        edges = []
        for call in test_calls:
            edges.append(call.as_tests_edge(eid))
            eid += 1
        db.submit(w.insert, schema.edge, edges, EDGE_COLUMNS)
        db.submit(_create_indexes, w, edges=True)
    return eid - next_edge


class _DatabaseThread:
    """Runs submitted database calls in order on one helper thread.

    The first error stops the remaining calls and is raised on exit.
    """

    def __init__(self) -> None:
        self._jobs: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="recon-db", daemon=True)

    def __enter__(self) -> _DatabaseThread:
        self._thread.start()
        return self

    def submit(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        if self._error is not None:
            raise self._error
        self._jobs.put((fn, args, kwargs))

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            if self._error is None:
                fn, args, kwargs = job
                try:
                    fn(*args, **kwargs)
                except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
                    self._error = exc

    def __exit__(self, *exc_info: Any) -> None:
        self._jobs.put(None)
        self._thread.join()
        if self._error is not None and exc_info[0] is None:
            raise self._error


def _delete_files(w: _Writer, gone: list[int]) -> None:
    """Remove every row of these files (their symbols, edges out, bindings, text)."""
    ids = [(i,) for i in gone]
    if w.sqlite:  # external-content FTS5: remove index entries with the old values
        w.executemany(
            "INSERT INTO recon.symbol_fts(symbol_fts, rowid, name, qualname, signature, doc)"
            " SELECT 'delete', id, name, qualname, signature, doc FROM recon.symbol"
            " WHERE file_id = ?",
            ids,
        )
        # contentless FTS5: the same, with the terms computed again (PostgreSQL's rows
        # go with their symbols: ON DELETE CASCADE)
        for file_id in gone:
            w.executemany(
                "INSERT INTO recon.symbol_body_fts(symbol_body_fts, rowid, terms)"
                " VALUES ('delete', ?, ?)",
                _stored_body_terms(w, file_id),
            )
    w.executemany(
        "DELETE FROM recon.edge WHERE src_symbol_id IN"
        " (SELECT id FROM recon.symbol WHERE file_id = ?)",
        ids,
    )
    # Edges from other files into the deleted symbols keep a stale id here (PostgreSQL's
    # foreign key sets it NULL); re-resolution afterwards points them at the new symbols.
    w.executemany("DELETE FROM recon.binding WHERE file_id = ?", ids)
    w.executemany("DELETE FROM recon.symbol WHERE file_id = ?", ids)
    w.executemany("DELETE FROM recon.file_source WHERE file_id = ?", ids)
    w.executemany("DELETE FROM recon.file WHERE id = ?", ids)


def _write_edges_incremental(w: _Writer, loader: _Loader, next_edge: int) -> None:
    new_edges = []
    for src, ref in loader.references():
        new_edges.append((next_edge, ref.kind, src, None, ref.dst_name, ref.typed_name, ref.line))
        next_edge += 1
    w.insert(schema.edge, new_edges, EDGE_COLUMNS)
    _reresolve(w, next_edge)


def _reresolve(w: _Writer, next_edge: int) -> None:
    """Resolve every edge again from the stored rows; write only what changed."""
    files = list(map(ResolverFile._make, w.execute(
        "SELECT id, path, module, is_test FROM recon.file ORDER BY id"
    )))
    symbols = list(map(ResolverSymbol._make, w.execute(
        "SELECT id, file_id, parent_id, kind, name FROM recon.symbol ORDER BY id"
    )))
    # sorted here, not in SQL: collations differ between backends
    bindings = sorted(map(ModuleBinding._make, w.execute(
        "SELECT file_id, name, target FROM recon.binding"
    )))
    edges = list(map(EdgeRecord._make, w.execute(
        "SELECT id, kind, src_symbol_id, dst_symbol_id, dst_name, typed_name, line"
        " FROM recon.edge ORDER BY id"
    )))
    resolver = Resolver(
        files, symbols, bindings,
        [WrittenBase(e.src_symbol_id, e.dst_name, e.typed_name)
         for e in edges if e.kind == "inherits"],
    )
    tests_from = resolver.test_functions()
    updates = []
    # (src, dst_name) → the call edge, newly resolved, that a tests edge must repeat
    wanted_tests: dict[tuple[int, str], EdgeRecord] = {}
    old_tests = []
    for edge in edges:
        if edge.kind == "tests":
            old_tests.append(edge)
            continue
        new = resolver.resolve(edge.src_symbol_id, edge.dst_name, edge.kind, edge.typed_name)
        if new != edge.dst_symbol_id:
            updates.append((new, edge.id))
        if new is not None and edge.kind == "calls" and edge.src_symbol_id in tests_from:
            wanted_tests[(edge.src_symbol_id, edge.dst_name)] = edge._replace(dst_symbol_id=new)
    w.executemany("UPDATE recon.edge SET dst_symbol_id = ? WHERE id = ?", updates)

    stale = []
    moved = []
    for old in old_tests:
        want = wanted_tests.pop((old.src_symbol_id, old.dst_name), None)
        if want is None:
            stale.append((old.id,))
        elif want.dst_symbol_id != old.dst_symbol_id:
            moved.append((want.dst_symbol_id, old.id))
    w.executemany("DELETE FROM recon.edge WHERE id = ?", stale)
    w.executemany("UPDATE recon.edge SET dst_symbol_id = ? WHERE id = ?", moved)
    fresh = []
    for call in wanted_tests.values():
        fresh.append(call.as_tests_edge(next_edge))
        next_edge += 1
    w.insert(schema.edge, fresh, EDGE_COLUMNS)
