"""Build and refresh the recon index of a repository: `index_repository`.

Phases: walk → compare with the index → parse what changed (in a process pool when
there is a lot) → write everything in one transaction, under a new generation.

Finding what changed reads no file that did not: each file's stat key (size, mtime,
ctime, inode) is kept with its content hash, and only a file whose key moved is hashed
(and parsed if its hash or dotted module name moved). A key is kept only when the file
had not changed for RACY_WINDOW_NS before it was read (timestamps are coarse). The walk
keeps, in process, each directory's listing while the directory's own key holds, so a
walk of an unchanged tree stats but never lists. A harness that knows what it changed
says so (`changed=[...]`) and nothing else is looked at.

An incremental run re-parses the changed files, deletes their rows and their full-text
entries, inserts the new ones, and resolves again only the edges a change may move
(see "incremental resolution" below): the new files' own, those into the replaced
files, and those naming a name whose meaning may have moved. It works on the name
resolver kept in process from the last run over the index (recon/kept.py: same
generation only), or one loaded from the stored rows (`binding` keeps each module's
imports so unchanged files need not be re-parsed). A test compares the result of a
series of edits with cold builds, table by table.
"""

from __future__ import annotations

import errno
import functools
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
from collections.abc import Iterable, Iterator
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
from ctxdb.recon.kept import (
    KeptWalk,
    forget_index,
    forget_resolver,
    keep_index,
    keep_resolver,
    kept_index,
    kept_resolver,
    kept_walk,
)
from ctxdb.recon.resolve import (
    ModuleBinding,
    Resolver,
    ResolverFile,
    ResolverSymbol,
    WrittenBase,
    module_names,
    path_module,
)
from ctxdb.sqlfiles import load_sql, sql_statement
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
# A file changed this shortly before it was read keeps no stat key (see
# stat_key_is_settled): 2 s covers the coarsest common timestamps (FAT's).
RACY_WINDOW_NS = 2_000_000_000
# A change touching at most this many names finds the edges naming them with one pass over
# the edge table each (~17 ms on Django's); more, with one read of every edge (~90 ms).
MAX_NAME_PASSES = 4
# How many times a run starts over when another indexer changed the index between its
# reading the index and its taking the write lock.
MAX_INDEX_ATTEMPTS = 3
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


# index's default limits (frozen, so one instance serves every call)
DEFAULT_LIMITS = IndexLimits()


@dataclass
class IndexStats:
    """One indexing run. symbols/edges/files_flagged/skipped are totals in the index
    afterwards. `skipped`: the files indexed without symbols (too large, too deep) and
    the paths the walk passed over (FIFOs, sockets, devices, symlink loops, links
    leaving the root, ...), by path. `edges_resolved`: the edges this run resolved (all
    of them in a cold build; in an incremental one, the changed files' and those a change
    may have moved)."""

    files_seen: int
    files_parsed: int
    files_removed: int
    files_flagged: int
    symbols: int
    edges: int
    seconds: float
    skipped: tuple[SkippedPath, ...] = ()
    edges_resolved: int = 0

    @property
    def files_skipped(self) -> int:
        return len(self.skipped)


# --- walking ------------------------------------------------------------------------------


# What change detection compares: size, modification and change times, inode.
StatKey = tuple[int, int, int, int]


class Walk(NamedTuple):
    files: list[tuple[str, str]]  # (relative posix path, absolute path), sorted
    skipped: list[SkippedPath]  # sorted by path
    stat_keys: dict[str, StatKey] | None = None  # relative path → `stat_key` of its file


def stat_key(st: os.stat_result) -> StatKey:
    """What change detection compares: size, modification and change times, inode. A
    file whose key is what it was when its content was hashed is taken as unchanged."""
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def stat_key_text(key: StatKey) -> str:
    """A stat key as `recon.file_stat` stores it."""
    return ":".join(map(str, key))


def parse_stat_key(text: str | None) -> StatKey | None:
    """`stat_key_text`'s inverse; None for None or a key written some other way (the
    file is then hashed, as for a missing key)."""
    if text is None:
        return None
    try:
        size, mtime_ns, ctime_ns, inode = map(int, text.split(":"))
    except ValueError:
        return None
    return (size, mtime_ns, ctime_ns, inode)


def stat_key_is_settled(key: StatKey, read_after_ns: int) -> bool:
    """Whether a stat key can vouch for the content read after `read_after_ns`: a file
    changed within RACY_WINDOW_NS before it was read may change again without its times
    moving (timestamps are coarse), so its key is not kept and it is hashed next time."""
    return max(key[1], key[2]) < read_after_ns - RACY_WINDOW_NS


def walk_python_files(root: str | os.PathLike) -> list[tuple[str, str]]:
    """(relative posix path, absolute path) of every Python file to index, sorted."""
    return walk_repository(root).files


def walk_repository(root: str | os.PathLike, under: str = "") -> Walk:
    """The Python files to index under `root`, and what was passed over.

    `under`: only this relative path (a file, or a directory and everything below it),
    with the same rules: nothing when one of its directories would not be entered.

    Skipped without a word: SKIP_DIRS, ``*.egg-info`` and virtualenvs (a dir holding
    ``pyvenv.cfg``). Listed in `Walk.skipped`: every ``.py`` name that is not a regular
    file inside the root (a FIFO, socket or device; a link that loops, dangles or
    leaves the root), every directory link (never followed: a loop, outside the root,
    or a second path to files indexed where they are), and directories that could not
    be read.

    Each directory's listing is kept (`recon/kept.py`) while the directory's stat key
    holds, and the last whole walk's result while every directory's does: a walk of a
    tree none of whose directories moved then stats each directory and each file, and
    does nothing else.
    """
    walk_started_ns = time.time_ns()
    root_real = os.path.realpath(root)
    kept = kept_walk(root_real)
    if not under and kept.files is not None:
        keys = _stat_kept_walk(kept)
        if keys is not None:
            return Walk(list(kept.files), list(kept.skipped), keys)
    inside = root_real.rstrip(os.sep) + os.sep
    listings = kept.listings
    out: list[tuple[str, str]] = []
    skipped: list[SkippedPath] = []
    keys = {}
    pending: list[tuple[str, str]] = []
    visited: list[tuple[str, tuple[int, int, int]]] = []  # (directory, its stat key)
    # a result holds for the next walk only when made of kept listings alone
    listed_anew = unsettled = looked_beyond = False

    def take_link(path: str, name: str, rel: str) -> None:
        try:
            reason = _symlink_skip(path, name, inside)
            if reason is None:
                out.append((f"{rel}{name}", path))
                keys[f"{rel}{name}"] = stat_key(os.stat(path))
            elif reason:
                skipped.append(SkippedPath(f"{rel}{name}", reason))
        except OSError:
            skipped.append(SkippedPath(f"{rel}{name}", SKIP_UNREADABLE))

    settled_before_ns = walk_started_ns - RACY_WINDOW_NS
    stat, lstat, list_get = os.stat, os.lstat, listings.get

    def visit(directory: str, rel: str) -> None:
        """One directory: its own listing, or the one kept while its stat key holds."""
        nonlocal listed_anew, unsettled, looked_beyond
        try:
            st = stat(directory)
            key = (st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            listing = list_get(directory)
            fresh = listing is None or listing.key != key or listing.rel != rel
            if fresh:
                listed_anew = True
                stats: dict[str, os.stat_result] = {}
                listing = _list_directory(directory, rel, key, stats)
                if not listing.unreadable and max(key[0], key[1]) < settled_before_ns:
                    listings[directory] = listing
                else:
                    unsettled = True
                    listings.pop(directory, None)
            visited.append((directory, key))
        except OSError:
            looked_beyond = True
            skipped.append(SkippedPath(rel.rstrip("/") or ".", SKIP_UNREADABLE))
            return
        if rel and listing.virtualenv:
            return
        files = listing.files
        if files:
            for file_rel, path in files:
                try:
                    st = stats[path] if fresh else lstat(path)
                except OSError:
                    looked_beyond = True
                    skipped.append(SkippedPath(file_rel, SKIP_UNREADABLE))
                    continue
                keys[file_rel] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            out.extend(files)
        if listing.links:
            looked_beyond = True
            for name in listing.links:
                take_link(f"{directory}/{name}", name, rel)
        if listing.skipped:
            skipped.extend(listing.skipped)
        if listing.subdirs:
            pending.extend(listing.subdirs)

    if not under:
        pending.append((root_real, ""))
    else:
        parent, _, name = under.rpartition("/")
        directory = root_real
        for part in parent.split("/") if parent else ():
            directory = os.path.join(directory, part)
            if os.path.islink(directory) or not os.path.isdir(directory) or _skipped_dir(
                    directory, part):
                return Walk([], [], {})
        path = os.path.join(directory, name)
        rel = f"{parent}/" if parent else ""
        if os.path.islink(path):
            take_link(path, name, rel)
        elif os.path.isdir(path):
            if not _skipped_dir(path, name):
                pending.append((path, f"{rel}{name}/"))
        elif name.endswith(".py") and os.path.lexists(path):
            try:
                st = os.lstat(path)
                reason = _special_file_skip(st.st_mode)
                if reason is None:
                    out.append((f"{rel}{name}", path))
                    keys[f"{rel}{name}"] = stat_key(st)
                else:
                    skipped.append(SkippedPath(f"{rel}{name}", reason))
            except OSError:
                skipped.append(SkippedPath(f"{rel}{name}", SKIP_UNREADABLE))
    while pending:
        visit(*pending.pop())
    out.sort()
    skipped.sort()
    if listed_anew:
        kept.forget_result()  # the listings moved: the last whole walk's result is stale
    if not under and not unsettled and not looked_beyond:
        kept.keep_result(visited, out, skipped)
    return Walk(out, skipped, keys)


def _stat_kept_walk(kept: KeptWalk) -> dict[str, StatKey] | None:
    """The stat keys of the last whole walk's files, if none of its directories moved
    (then its files and skipped paths are what a walk would find); else None."""
    try:
        if [(st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
                for st in map(os.stat, kept.directories)] != kept.directory_keys:
            return None
        return dict(zip(kept.file_rels, [(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
                                         for st in map(os.lstat, kept.file_paths)],
                        strict=True))
    except OSError:
        return None  # a directory or file vanished: the walk sees what there is


class _Listing(NamedTuple):
    """What a directory holds for the walk, as of its stat key (mtime, ctime, inode):
    adding, removing or renaming an entry moves it, so the listing holds while it does."""

    key: tuple[int, int, int]
    rel: str  # the directory's path relative to the root, with a trailing /
    virtualenv: bool  # it holds pyvenv.cfg: never entered (but as the root)
    files: tuple[tuple[str, str], ...]  # regular .py files: (relative, absolute path)
    links: tuple[str, ...]  # names of symbolic links: where they lead is looked at anew
    subdirs: tuple[tuple[str, str], ...]  # directories to enter: (absolute, relative/)
    skipped: tuple[SkippedPath, ...]  # .py names that are no regular file
    unreadable: bool  # an entry could not be looked at: the listing is not kept


def _list_directory(directory: str, rel: str, key: tuple[int, int, int],
                    stats: dict[str, os.stat_result]) -> _Listing:
    """A directory's listing (OSError if it cannot be read); fills `stats` with the
    regular files' stat results, by absolute path."""
    files, links, subdirs, skipped = [], [], [], []
    virtualenv = unreadable = False
    for entry in os.scandir(directory):
        name = entry.name
        try:
            if name == "pyvenv.cfg" and os.path.exists(entry.path):
                virtualenv = True
            if entry.is_symlink():
                links.append(name)
            elif entry.is_dir(follow_symlinks=False):
                if name not in SKIP_DIRS and not name.endswith(".egg-info"):
                    subdirs.append((entry.path, f"{rel}{name}/"))
            elif name.endswith(".py"):
                st = entry.stat(follow_symlinks=False)
                reason = _special_file_skip(st.st_mode)
                if reason is None:
                    files.append((f"{rel}{name}", entry.path))
                    stats[entry.path] = st
                else:
                    skipped.append(SkippedPath(f"{rel}{name}", reason))
        except OSError:
            skipped.append(SkippedPath(f"{rel}{name}", SKIP_UNREADABLE))
            unreadable = True
    return _Listing(key, rel, virtualenv, tuple(files), tuple(links), tuple(subdirs),
                    tuple(skipped), unreadable)


def _skipped_dir(path: str, name: str) -> bool:
    """A directory the walk never enters (build output, VCS data, a virtualenv)."""
    return (name in SKIP_DIRS or name.endswith(".egg-info")
            or os.path.exists(os.path.join(path, "pyvenv.cfg")))


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

    def run(self, name: str, /, **params: Any) -> Any:
        """The statement of ``sql/<name>.sql`` with these parameters; the cursor."""
        sql, order = _compiled_sql(name, self.dialect)
        self.cur.execute(sql, params if order is None else tuple(params[k] for k in order))
        return self.cur

    def run_many(self, name: str, rows: list[dict[str, Any]]) -> None:
        if rows:
            sql, order = _compiled_sql(name, self.dialect)
            self.cur.executemany(
                sql, rows if order is None else [tuple(r[k] for k in order) for r in rows])

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


@functools.lru_cache(maxsize=64)
def _compiled_sql(name: str, dialect: sa.engine.Dialect) -> tuple[str, tuple[str, ...] | None]:
    """``sql/<name>.<database>.sql`` or ``sql/<name>.sql`` in the driver's parameter
    style, and the parameters' order for a positional style (None: by name)."""
    try:  # a statement written for this database, else the common one
        text = load_sql(f"{name}.{dialect.name}")
    except FileNotFoundError:
        text = load_sql(name)
    compiled = sa.text(text).compile(dialect=dialect)
    order = compiled.positiontup
    return str(compiled), (tuple(order) if order is not None else None)


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


def _write_generation(w: _Writer) -> str:
    """A new snapshot identity, in the transaction that changes the index: readers may
    keep what they read of one generation for as long as it is current."""
    generation = uuid.uuid4().hex
    w.execute("DELETE FROM recon.recon_meta WHERE key = ?", (schema.GENERATION_KEY,))
    w.insert(schema.recon_meta, [(schema.GENERATION_KEY, generation)])
    return generation


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
        self.states: dict[str, _Existing] = {}  # what the next run compares with, by path
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
        # entity keys of the loaded symbols, by id: an incremental run compares a file's
        # definitions before and after by key (a cold build needs none)
        self.symbol_keys: dict[int, str] = {}

    def add(self, rel: str, module: str, parsed: ParsedFile) -> None:
        fid = self.next_file
        self.next_file += 1
        is_test = is_test_path(rel)
        self.flagged += bool(parsed.syntax_error or parsed.not_utf8)
        self._file_rows.append((fid, rel, module, parsed.sha256, parsed.size_bytes,
                                parsed.line_count, is_test, parsed.syntax_error,
                                parsed.not_utf8, parsed.skipped))
        self.files.append(ResolverFile(fid, rel, module, is_test))
        self.states[rel] = _Existing(fid, parsed.sha256, module, None)
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
        if not self.defer_body_terms:
            self.symbol_keys.update((first + symbol.index, symbol.key)
                                    for symbol in parsed.symbols)
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

    def reference_count(self) -> int:
        return sum(len(references) for _, references in self._references)

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
        _insert_body_terms(w, list(zip(range(first_symbol, first_symbol + len(terms)), terms,
                                       strict=True)))
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


class _Existing(NamedTuple):
    id: int
    sha256: str
    module: str
    stat_key: StatKey | None  # when its content was last hashed; None: hash it to be sure


class _NextIds(NamedTuple):
    file: int
    symbol: int
    edge: int


class _KeptIndex(NamedTuple):
    """What a run leaves in process of the index it wrote, for the next run over it
    (kept per generation, so read only while the index is exactly that)."""

    existing: dict[str, _Existing]
    skipped_paths: list[SkippedPath]  # recon.skipped_path, sorted
    totals: tuple[int, int, int]  # symbols, edges, flagged files
    skipped: tuple[SkippedPath, ...]  # `read_skipped`
    stat_keys: dict[str, StatKey | None]  # `existing`'s stat keys, by path


class _State(NamedTuple):
    """What an index holds before a run."""

    exists: bool
    existing: dict[str, _Existing]  # by path
    generation: str | None
    root: str | None  # as recorded
    has_added_tables: bool  # schema.ADDED_TABLES are there
    kept: _KeptIndex | None  # what the last run in this process left, if still current
    # `existing`'s stat keys, by path: what a walk of a tree where nothing changed finds
    stat_keys: dict[str, StatKey | None]


def _read_state(engine: sa.Engine, target: Any, rebuild: bool, identity: str) -> _State:
    with engine.connect() as conn:
        meta = schema.read_meta(conn)
        if meta is None:
            if sa.inspect(conn).has_table("symbol", schema=schema.RECON_SCHEMA) and not rebuild:
                raise schema.ReconVersionError(
                    f"{schema.describe_target(target)} has recon tables but no version stamp. "
                    f"Rebuild it: {schema.rebuild_hint(target)}"
                )
            return _State(False, {}, None, None, True, None, {})
        if rebuild:
            return _State(True, {}, None, None, True, None, {})
        schema.check_meta(meta, target)
        generation, root = meta.get(schema.GENERATION_KEY), meta.get(schema.ROOT_KEY)
        kept = kept_index(identity, generation)
        if kept is not None:
            return _State(True, kept.existing, generation, root, True, kept, kept.stat_keys)
        has_added_tables = all(
            sa.inspect(conn).has_table(table.name, schema=schema.RECON_SCHEMA)
            for table in schema.ADDED_TABLES)
        states = "recon/index_file_states" if has_added_tables else \
            "recon/index_file_states_without_stats"
        # through the driver: a few thousand rows
        cursor = conn.connection.dbapi_connection.cursor()
        try:
            cursor.execute(load_sql(states))
            existing = {path: _Existing(fid, sha256, module, parse_stat_key(key))
                        for path, fid, sha256, module, key in cursor.fetchall()}
        finally:
            cursor.close()
        return _State(True, existing, generation, root, has_added_tables, None,
                      _stat_keys_of(existing))


class _Changes(NamedTuple):
    """What a run found on disk, compared with the index."""

    paths: list[str]  # every file to index (relative paths; sorted when walked whole)
    full_paths: dict[str, str]  # relative → absolute path, of the files looked at
    skipped: list[SkippedPath]  # what the walk passed over, sorted
    modules: dict[str, str]  # relative path → dotted module name
    to_parse: list[tuple[str, str]]  # new or changed files (relative, absolute), sorted
    removed: list[str]  # indexed paths gone
    confirmed: list[tuple[int, StatKey]]  # (file id, stat key): stat moved, content did not
    stat_keys: dict[str, StatKey]  # of the files looked at


def _find_changes(root: str | os.PathLike, engine: sa.Engine, state: _State,
                  scopes: list[str] | None, started_ns: int) -> _Changes:
    """New, changed and vanished files. A file is hashed only when no stat key of it is
    kept or its stat key moved; with `scopes`, only the files at or under those relative
    paths are looked at, the others taken as indexed."""
    existing = state.existing
    if scopes is None:
        walk = walk_repository(root)
        full_paths = dict(walk.files)
        paths = [rel for rel, _ in walk.files]
        skipped, stat_keys = walk.skipped, walk.stat_keys or {}
        if stat_keys == state.stat_keys and len(full_paths) == len(stat_keys):
            # the same paths, every one with the key it had when last read: all as indexed
            return _Changes(paths, full_paths, skipped, {}, [], [], [], stat_keys)
    else:
        full_paths, skipped, stat_keys = {}, [], {}
        for scope in scopes:
            walk = walk_repository(root, under=scope)
            full_paths.update(walk.files)
            skipped += walk.skipped
            stat_keys.update(walk.stat_keys or {})
        if state.kept is not None:
            stored_skipped = state.kept.skipped_paths
        else:
            with engine.connect() as connection:
                stored_skipped = [SkippedPath(*row) for row in connection.execute(
                    sql_statement("recon/index_skipped_paths"))]
        skipped = sorted(skipped + [s for s in stored_skipped if not _under(s.path, scopes)])
        in_scope = _indexed_under(existing, scopes)
        paths = [rel for rel in existing if rel not in in_scope]
        paths += full_paths
    same_paths = len(paths) == len(existing) and existing.keys() == set(paths)
    removed = [] if same_paths else sorted(set(existing).difference(paths))
    to_parse, confirmed = [], []
    if same_paths:
        # module names move only when paths come or go (a package gains an __init__.py)
        moved = [rel for rel, key in stat_keys.items() if key != existing[rel].stat_key]
        modules = {rel: existing[rel].module for rel in moved}
        # a file looked at without a key (a link whose target vanished meanwhile): hashed
        looked_at = [rel for rel in full_paths if rel not in stat_keys]
        modules.update((rel, existing[rel].module) for rel in looked_at)
        candidates = moved + looked_at
    else:
        modules = module_names(paths)
        candidates = paths
    for rel in candidates:
        old = existing.get(rel)
        full = full_paths.get(rel)
        if old is None or old.module != modules[rel]:
            to_parse.append((rel, full or os.path.join(os.path.realpath(root), rel)))
            continue
        if full is None:  # not looked at
            continue
        key = stat_keys.get(rel)
        if key is not None and key == old.stat_key:
            continue
        if _sha256_file(full) != old.sha256:
            to_parse.append((rel, full))
        elif key is not None and stat_key_is_settled(key, started_ns):
            confirmed.append((old.id, key))
    to_parse.sort()
    return _Changes(paths, full_paths, skipped, modules, to_parse, removed, confirmed,
                    stat_keys)


def _under(rel: str, scopes: list[str]) -> bool:
    """Whether a relative path is one of `scopes` or below one of them."""
    return any(rel == scope or rel.startswith(scope + "/") for scope in scopes)


def _indexed_under(existing: dict[str, _Existing], scopes: list[str]) -> set[str]:
    """The indexed paths at or under these scopes (only a scope that is no indexed file,
    perhaps a directory, needs a look at every path)."""
    found = {scope for scope in scopes if scope in existing}
    wider = [scope for scope in scopes if scope not in existing]
    if wider:
        found |= {rel for rel in existing if _under(rel, wider)}
    return found


def _changed_scopes(root: str | os.PathLike, changed: Any) -> list[str] | None:
    """`index_repository`'s `changed`, as sorted relative posix paths (None: walk it all).

    Each entry is a path relative to the root or an absolute path under it: a file, or a
    directory standing for everything below it, whether or not it still exists."""
    if isinstance(changed, str | os.PathLike):
        raise TypeError(f"changed: expected a list of paths, got the single path {changed!r}")
    root_real = os.path.realpath(root)
    scopes = set()
    for entry in changed:
        if not isinstance(entry, str | os.PathLike) or not os.fspath(entry):
            raise ValueError(f"changed: {entry!r} is not a path")
        path = os.fspath(entry)
        full = os.path.normpath(path if os.path.isabs(path) else os.path.join(root_real, path))
        rel = os.path.relpath(full, root_real)
        if rel == os.pardir or rel.startswith(os.pardir + os.sep):
            # perhaps through a link to the root: its directory's real path
            real = os.path.join(os.path.realpath(os.path.dirname(full)), os.path.basename(full))
            rel = os.path.relpath(real, root_real)
            if rel == os.pardir or rel.startswith(os.pardir + os.sep):
                raise ValueError(f"changed: {path!r} is not under the indexed root {root_real}")
        if rel == os.curdir:
            return None
        scopes.add(Path(rel).as_posix())
    return sorted(scopes)


def _totals(w: _Writer) -> tuple[int, int, int]:
    return tuple(w.run("recon/index_totals").fetchone())


def _read_skipped(w: _Writer) -> tuple[SkippedPath, ...]:
    # sorted here, not in SQL: collations differ between backends
    return tuple(sorted(SkippedPath(*row) for row in w.run("recon/index_skipped").fetchall()))


def _write_skipped_paths(w: _Writer, skipped: list[SkippedPath]) -> None:
    w.execute("DELETE FROM recon.skipped_path")
    w.insert(schema.skipped_path, [tuple(row) for row in skipped], ("path", "reason"))


def _ensure_skipped_paths(engine: sa.Engine, skipped: list[SkippedPath],
                          stored: list[SkippedPath] | None) -> bool:
    """A run that found no Python file changed still records what the walk passed over
    when that changed (a FIFO appeared); otherwise it writes nothing. `stored`: the
    table's rows if known. Returns whether it wrote."""
    if stored is None:
        with engine.connect() as connection:
            stored = sorted(SkippedPath(*row) for row in
                            connection.execute(sql_statement("recon/index_skipped_paths")))
    if [tuple(row) for row in stored] == [tuple(row) for row in skipped]:
        return False
    with _write_transaction(engine) as w:
        _write_skipped_paths(w, skipped)
    return True


def _write_file_stats(w: _Writer, rows: list[tuple[int, StatKey]], started_ns: int) -> None:
    """Keep each file's stat key, when it can vouch for the content just read."""
    w.run_many("recon/index_set_file_stat",
               [{"file_id": fid, "stat_key": stat_key_text(key)} for fid, key in rows
                if stat_key_is_settled(key, started_ns)])


def read_skipped(bind: sa.Engine | sa.Connection) -> tuple[SkippedPath, ...]:
    """What the index holds as skipped: files without symbols (too large, too deep) and
    the paths the last walk passed over, by path."""
    sql = sql_statement("recon/index_skipped")
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
    limits: IndexLimits = DEFAULT_LIMITS,
    changed: Iterable[str | os.PathLike] | None = None,
) -> IndexStats:
    """Index the Python files under `root` into the recon index at `target`.

    `target` is a SQLite file path or a SQLAlchemy URL (PostgreSQL: schema ``recon``).
    A second run re-parses only changed files; `rebuild` drops and recreates the index.
    `progress`: None shows a bar on stderr when it is a terminal; True/False force it.
    `limits`: files larger or parse trees deeper are indexed as file rows alone.
    `changed`: the paths (relative to `root`, or absolute under it; files, or directories
    for everything below them) a harness knows may have changed since the last run: only
    they are looked at, the rest of the index is taken as it is. None: walk the tree.
    Raises ReconVersionError if the index was written by another version (use rebuild).
    """
    started = time.perf_counter()
    if not os.path.isdir(root):
        raise NotADirectoryError(f"not a directory: {root}")
    scopes = None if changed is None else _changed_scopes(root, changed)
    with _gc_paused():
        for attempt in range(1, MAX_INDEX_ATTEMPTS + 1):
            try:
                return _index(root, target, rebuild, progress, limits, scopes, started)
            except _GenerationMoved:
                if attempt == MAX_INDEX_ATTEMPTS:
                    raise
    raise AssertionError("unreachable")


class _GenerationMoved(RuntimeError):
    """Another indexer changed the index between this run's reading it and its write lock."""

    def __init__(self, target: Any) -> None:
        super().__init__(f"{schema.describe_target(target)}: another indexer kept changing "
                         f"the index ({MAX_INDEX_ATTEMPTS} attempts); run again")


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
    limits: IndexLimits, scopes: list[str] | None, started: float,
) -> IndexStats:
    started_ns = time.time_ns()
    sqlite_path = schema.sqlite_path(target)
    if sqlite_path is not None:
        Path(sqlite_path).absolute().parent.mkdir(parents=True, exist_ok=True)
    engine = schema.create_recon_engine(target)
    identity = _target_identity(target)
    try:
        state = _read_state(engine, target, rebuild, identity)
        cold = not state.exists or rebuild
        changes = _find_changes(root, engine, state, None if cold else scopes, started_ns)
        if cold:
            to_parse, removed = list(changes.full_paths.items()), []
        else:
            to_parse, removed = changes.to_parse, changes.removed
        root_path = indexed_root(root)
        if not cold and not to_parse and not removed:
            return _nothing_changed(engine, identity, state, changes, root_path, started,
                                    started_ns)
        replaced = set(removed) | {rel for rel, _ in to_parse}  # the index's files now gone

        bar = ProgressBar("recon", len(to_parse), "files", enabled=progress)
        modules = changes.modules
        jobs = [_ParseJob(rel, full, modules[rel], limits) for rel, full in to_parse]
        resolver = None
        # handed over: changed below, kept again once committed (dropped on any error)
        kept = None if cold else kept_resolver(identity, state.generation)
        forget_index(identity)
        if cold:
            forget_resolver(identity)  # its memory is better spent on the build
        with _parser_pool(len(jobs)) as pool, _write_transaction(engine) as w:
            if cold:
                _create_tables(w, drop=rebuild)
                _write_meta(w)
                next_ids = _NextIds(1, 1, 1)
            else:
                if not state.has_added_tables:
                    _create_added_tables(w)
                if _stored_generation(w) != state.generation:
                    raise _GenerationMoved(target)
                next_ids = _NextIds(*w.run("recon/index_next_ids").fetchone())
                resolver = kept or _load_resolver(w)
                gone = [state.existing[p].id for p in removed]
                gone += [state.existing[rel].id for rel, _ in to_parse if rel in state.existing]
                paths_move = bool(removed) or any(
                    rel not in state.existing or state.existing[rel].module != modules[rel]
                    for rel, _ in to_parse)
                plan = _plan_replacement(w, resolver, sorted(gone), paths_move)
                # with the last run's totals kept, they follow the change: no table counted
                gone_totals = _gone_totals(w, plan) if state.kept is not None else None
                _delete_files(w, sorted(gone))
            loader = _Loader(w, next_ids.file, next_ids.symbol, defer_body_terms=cold)
            results = _parse_results(pool, jobs)
            for job, parsed in zip(jobs, results, strict=True):
                if parsed is not None:
                    loader.add(job.relpath, job.module, parsed)
                bar.step()
            loader.flush()
            if cold:
                n_edges, resolver = _write_edges_cold(w, loader, next_ids.edge)
                resolved = loader.reference_count()
            else:
                resolver, resolved, next_edge, edges_deleted = _resolve_incrementally(
                    w, resolver, plan, loader, next_ids.edge)
            keys = changes.stat_keys
            stats = [(f.id, keys[f.path]) for f in loader.files if f.path in keys]
            _write_file_stats(w, stats + changes.confirmed, started_ns)
            _write_skipped_paths(w, changes.skipped)
            _write_root(w, root_path)
            generation = _write_generation(w)
            if cold:
                totals = (len(loader.symbols), n_edges, loader.flagged)
                skipped = tuple(sorted(loader.skipped + changes.skipped))
            elif gone_totals is not None:
                symbols, edges, flagged = state.kept.totals
                edges_added = next_edge - next_ids.edge - edges_deleted
                totals = (symbols - gone_totals[0] + len(loader.symbols),
                          edges - gone_totals[1] + edges_added,
                          flagged - gone_totals[2] + loader.flagged)
                # the files kept that are indexed without symbols, the new ones, the walk's
                kept_files = {path for path in state.existing if path not in replaced}
                skipped = tuple(sorted(
                    [entry for entry in state.kept.skipped if entry.path in kept_files]
                    + loader.skipped + changes.skipped))
            else:
                totals, skipped = _totals(w), _read_skipped(w)
        keep_resolver(identity, generation, resolver)
        existing = {} if cold else {path: old for path, old in state.existing.items()
                                    if path not in replaced}
        existing.update(loader.states)
        stat_keys = _stat_keys_of(existing)
        _keep_stat_keys(existing, stat_keys, stats + changes.confirmed, started_ns)
        keep_index(identity, generation,
                   _KeptIndex(existing, changes.skipped, totals, skipped, stat_keys))
        return IndexStats(len(changes.paths), len(loader.files), len(removed), totals[2],
                          totals[0], totals[1], time.perf_counter() - started, skipped,
                          resolved)
    finally:
        engine.dispose()


def _nothing_changed(engine: sa.Engine, identity: str, state: _State, changes: _Changes,
                     root_path: str, started: float, started_ns: int) -> IndexStats:
    """A run that found no file to parse or remove: the index's content stays as it is
    (a new generation only for an index without one, or indexed from another root)."""
    wrote = False
    if state.generation is None or state.root != root_path:
        _ensure_generation(engine, root_path)
        wrote = True
    kept = state.kept
    wrote |= _ensure_skipped_paths(engine, changes.skipped,
                                   kept.skipped_paths if kept is not None else None)
    if changes.confirmed:  # bookkeeping only: the index's content is as it was
        with _write_transaction(engine) as w:
            if not state.has_added_tables:
                _create_added_tables(w)
            _write_file_stats(w, changes.confirmed, started_ns)
        _keep_stat_keys(state.existing, state.stat_keys, changes.confirmed, started_ns)
    if wrote or kept is None:
        forget_index(identity)
        with engine.connect() as connection:
            totals = tuple(connection.execute(sql_statement("recon/index_totals")).one())
            skipped = read_skipped(connection)
            generation = read_generation(connection)
        # what this run read, for the next one, if no run changed the index meanwhile
        if generation is not None and generation == state.generation:
            keep_index(identity, generation, _KeptIndex(
                state.existing, changes.skipped, totals, skipped, state.stat_keys))
    else:
        totals, skipped = kept.totals, kept.skipped
    return IndexStats(len(changes.paths), 0, 0, totals[2], totals[0], totals[1],
                      time.perf_counter() - started, skipped)


def _keep_stat_keys(existing: dict[str, _Existing], stat_keys: dict[str, StatKey | None],
                    stats: list[tuple[int, StatKey]], started_ns: int) -> None:
    """Record in the kept file states (and their stat keys by path) the keys just written."""
    settled = {fid: key for fid, key in stats if stat_key_is_settled(key, started_ns)}
    if settled:
        for path, old in existing.items():
            if old.id in settled:
                existing[path] = old._replace(stat_key=settled[old.id])
                stat_keys[path] = settled[old.id]


def _stat_keys_of(existing: dict[str, _Existing]) -> dict[str, StatKey | None]:
    return {path: old.stat_key for path, old in existing.items()}


def _target_identity(target: Any) -> str:
    """What names one index for the resolvers kept in process: a SQLite file's real
    path, or the server URL."""
    path = schema.sqlite_path(target)
    return f"sqlite:{os.path.realpath(path)}" if path is not None else str(target)


def _create_added_tables(w: _Writer) -> None:
    for stmt in schema.added_table_ddl(w.dialect):
        w.execute(stmt)


def _stored_generation(w: _Writer) -> str | None:
    row = w.run("recon/index_generation", generation_key=schema.GENERATION_KEY).fetchone()
    return row[0] if row is not None else None


def _load_resolver(w: _Writer) -> Resolver:
    """A resolver over the index as it is (no resolver of its generation kept)."""
    return Resolver(
        map(ResolverFile._make, w.run("recon/index_resolver_files").fetchall()),
        map(ResolverSymbol._make, w.run("recon/index_resolver_symbols").fetchall()),
        # sorted here, not in SQL: collations differ between backends
        sorted(map(ModuleBinding._make, w.run("recon/index_resolver_bindings").fetchall())),
        map(WrittenBase._make, w.run("recon/index_resolver_bases").fetchall()),
    )


def _write_edges_cold(w: _Writer, loader: _Loader, next_edge: int) -> tuple[int, Resolver]:
    """Resolve and insert every edge, and build the indexes. Returns the edge count and
    the resolver (kept for the next, incremental, run).

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
    return eid - next_edge, resolver


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
    w.run_many("recon/index_delete_file_stat", [{"file_id": i} for i in gone])
    w.executemany("DELETE FROM recon.symbol WHERE file_id = ?", ids)
    w.executemany("DELETE FROM recon.file_source WHERE file_id = ?", ids)
    w.executemany("DELETE FROM recon.file WHERE id = ?", ids)


# --- incremental resolution ---------------------------------------------------------------
#
# A changed file gets new symbol ids, so an edge elsewhere is resolved again when
# - it resolved into a replaced or removed file (its destination id is gone), or
# - a part of its written or typed name (between dots) is a name whose meaning may have
#   moved: a definition added, removed or re-kinded in a changed file; a name bound by
#   import added, removed or re-targeted; the last part of a module name that appeared,
#   vanished or moved to another file; closed over imports (a name bound to a target
#   holding a moved name has moved too); or
# - it is a call, and a part of its name is a member of a class whose bases moved, or of
#   one of that class's bases before or after (the class's lookups go through them).
# Everything else looks up, step by step, the same names in the same places as before,
# and finds the same symbol. What cannot be bounded by names — a star import whose
# module moved, a changed file's own star imports when another module star-imports it —
# resolves every edge again. A test compares the result with a cold build after each of a
# series of edits.


class _OldFile(NamedTuple):
    """A file as the index held it before it was replaced or removed."""

    id: int
    path: str
    module: str
    symbols: list[tuple]  # (id, parent id, key, kind, name), in id order
    bindings: list[tuple[str, str]]  # (name, target)


class _Plan(NamedTuple):
    """What an incremental run reads before deleting the rows of the files it replaces."""

    old_files: list[_OldFile]
    into: dict[int, EdgeRecord]  # edges of other files resolved into them, by id
    old_bases: dict[int, list[int]]  # the resolver's class bases before the change
    old_modules: dict[str, str] | None  # module name → path, when paths come or go


def _plan_replacement(w: _Writer, resolver: Resolver, gone: list[int],
                      paths_move: bool) -> _Plan:
    old_files = []
    for fid in gone:
        symbols = [tuple(row) for row in
                   w.run("recon/index_old_symbols_of_file", file_id=fid).fetchall()]
        bindings = [tuple(row) for row in
                    w.run("recon/index_old_bindings_of_file", file_id=fid).fetchall()]
        old_files.append(_OldFile(fid, resolver.file_path[fid], resolver.file_module[fid],
                                  symbols, bindings))
    gone_symbols = {row[0] for old in old_files for row in old.symbols}
    into = {}
    for old in old_files:
        if not old.symbols:
            continue
        # a file's symbols have consecutive ids
        rows = w.run("recon/index_edges_into_symbols", first_id=old.symbols[0][0],
                     last_id=old.symbols[-1][0]).fetchall()
        for edge in map(EdgeRecord._make, rows):
            if edge.src_symbol_id not in gone_symbols:
                into[edge.id] = edge
    old_modules = _module_paths(resolver) if paths_move else None
    return _Plan(old_files, into, dict(resolver.bases), old_modules)


def _gone_totals(w: _Writer, plan: _Plan) -> tuple[int, int, int]:
    """What the files an incremental run replaces or removes count for in `_totals`:
    their symbols, the edges out of them, the flagged ones among them."""
    symbols = edges = flagged = 0
    for old in plan.old_files:
        file_edges, file_flagged = w.run("recon/index_file_totals", file_id=old.id).fetchone()
        symbols += len(old.symbols)
        edges += file_edges
        flagged += file_flagged
    return symbols, edges, flagged


def _module_paths(resolver: Resolver) -> dict[str, str]:
    return {name: resolver.file_path[resolver.sym_file[sid]]
            for name, sid in resolver.modules.items()}


def _resolve_incrementally(w: _Writer, resolver: Resolver, plan: _Plan, loader: _Loader,
                           next_edge: int) -> tuple[Resolver, int, int, int]:
    """Resolve the new files' edges and the edges elsewhere whose destination may have
    moved (see above); write them. Returns the resolver, now of the new index, how many
    edges were resolved (tests edges follow their calls: not counted), the next free edge
    id (new edges take consecutive ids) and how many edges were deleted."""
    resolver.replace_files([old.id for old in plan.old_files], loader.files, loader.symbols,
                           sorted(loader.bindings), loader.bases)
    names, everything = _moved_names(plan, loader, resolver)
    if everything:
        resolver.rebase(list(resolver.written_bases))
        return resolver, *_write_edges_incremental(w, loader, next_edge)
    selected = dict(plan.into)
    _select_edges_naming(w, names, selected, kinds=None)
    # every class of the new files (one may have lost all its bases), and the classes
    # elsewhere whose written bases may resolve otherwise now
    rebased = {symbol.id for symbol in loader.symbols if symbol.kind == "class"}
    rebased |= {edge.src_symbol_id for edge in selected.values() if edge.kind == "inherits"}
    resolver.rebase(rebased)
    _select_edges_naming(w, _names_under_moved_bases(plan, loader, resolver, rebased),
                         selected, kinds=("calls",))

    resolve = resolver.resolve
    updates = []
    test_calls = []
    for edge in selected.values():
        dst = resolve(edge.src_symbol_id, edge.dst_name, edge.kind, edge.typed_name)
        if dst != edge.dst_symbol_id:
            updates.append({"dst_id": dst, "edge_id": edge.id})
        if edge.kind == "calls" and resolver.is_test_function(edge.src_symbol_id):
            test_calls.append(edge._replace(dst_symbol_id=dst))
    w.run_many("recon/index_set_edge_destination", updates)
    next_edge, deleted = _follow_tests_edges(w, test_calls, next_edge)

    rows, new_test_calls = [], []
    for src, ref in loader.references():
        kind, name, typed = ref.kind, ref.dst_name, ref.typed_name
        dst = resolve(src, name, kind, typed)
        rows.append((next_edge, kind, src, dst, name, typed, ref.line))
        if dst is not None and kind == "calls" and resolver.is_test_function(src):
            new_test_calls.append(EdgeRecord(next_edge, kind, src, dst, name, typed, ref.line))
        next_edge += 1
    for call in new_test_calls:
        rows.append(call.as_tests_edge(next_edge))
        next_edge += 1
    w.insert(schema.edge, rows, EDGE_COLUMNS)
    return resolver, len(selected) + len(rows) - len(new_test_calls), next_edge, deleted


def _moved_names(plan: _Plan, loader: _Loader, resolver: Resolver) -> tuple[set[str], bool]:
    """The names whose meaning may have moved (see above), and whether the change cannot
    be bounded by names (then every edge is resolved again)."""
    old_symbols = {(key, kind): name for old in plan.old_files
                   for _, _, key, kind, name in old.symbols}
    new_symbols = {(loader.symbol_keys[s.id], s.kind): s.name for s in loader.symbols}
    names = {old_symbols[k] if k in old_symbols else new_symbols[k]
             for k in old_symbols.keys() ^ new_symbols.keys()}

    new_path = {f.id: f.path for f in loader.files}
    old_bound = {(old.path, name, target) for old in plan.old_files
                 for name, target in old.bindings}
    new_bound = {(new_path[b.file_id], b.name, b.target) for b in loader.bindings}
    moved_modules: set[str] = set()
    for path, name, _ in old_bound ^ new_bound:
        if name == "*":  # its module's members moved, whatever their names
            moved_modules |= _module_keys(resolver, plan, path)
        else:
            names.add(name)
    if plan.old_modules is not None:
        new_modules = _module_paths(resolver)
        moved_modules |= {name for name in plan.old_modules.keys() | new_modules.keys()
                          if plan.old_modules.get(name) != new_modules.get(name)}
    if moved_modules:
        for stars in resolver.stars.values():
            for target in stars:
                parts = target.split(".")
                if any(".".join(parts[:i]) in moved_modules for i in range(1, len(parts) + 1)):
                    return names, True
        names |= {module.rsplit(".", 1)[-1] for module in moved_modules}
    if names:
        _close_over_bindings(names, resolver)
    return names, False


def _module_keys(resolver: Resolver, plan: _Plan, path: str) -> set[str]:
    """The module names a file is known by, before and after."""
    keys = {path_module(path)}
    keys |= {old.module for old in plan.old_files if old.path == path}
    keys |= {module for fid, module in resolver.file_module.items()
             if resolver.file_path[fid] == path}
    return keys


def _close_over_bindings(names: set[str], resolver: Resolver) -> None:
    """Add every name bound by import to a target with a moved name among its parts."""
    frontier = set(names)
    while frontier:
        reached = resolver.names_bound_to(frontier) - names
        names |= reached
        frontier = reached


def _names_under_moved_bases(plan: _Plan, loader: _Loader, resolver: Resolver,
                             rebased: set[int]) -> set[str]:
    """The member names of every class whose bases moved, and of its bases before and
    after: what lookups through its method resolution order may now find elsewhere."""
    old_key = {row[0]: row[2] for old in plan.old_files for row in old.symbols}
    old_id_of_key = {key: sid for sid, key in old_key.items()}
    new_key = loader.symbol_keys
    moved = []
    for cid in rebased:
        old_cid = old_id_of_key.get(new_key[cid]) if cid in new_key else cid
        if old_cid is None:  # a new class: its name is among the moved names already
            continue
        before = [old_key.get(base, base) for base in plan.old_bases.get(old_cid, ())]
        after = [new_key.get(base, base) for base in resolver.bases.get(cid, ())]
        if before != after:
            moved.append((old_cid, cid))
    if not moved:
        return set()
    old_members: dict[int, list[str]] = {}
    for old in plan.old_files:
        for _, parent, _, kind, name in old.symbols:
            if kind != "module":
                old_members.setdefault(parent, []).append(name)
    names: set[str] = set()

    def collect(start: int, bases: dict[int, list[int]], members: Any) -> None:
        pending, seen = [start], set()
        while pending:
            cls = pending.pop()
            if cls not in seen:
                seen.add(cls)
                names.update(members(cls))
                pending.extend(bases.get(cls, ()))

    for old_cid, cid in moved:
        collect(old_cid, plan.old_bases,
                lambda c: old_members.get(c, ()) if c in old_key else resolver.members.get(c, ()))
        collect(cid, resolver.bases, lambda c: resolver.members.get(c, ()))
    return names


def _select_edges_naming(w: _Writer, names: set[str], selected: dict[int, EdgeRecord],
                         kinds: tuple[str, ...] | None) -> None:
    """Add to `selected` the edges (of these kinds, None: all but tests) with one of these
    names as a part of their written or typed name."""
    if not names:
        return
    if len(names) <= MAX_NAME_PASSES:
        rows = []
        for name in sorted(names):
            rows += w.run("recon/index_edges_naming", name=name).fetchall()
    else:
        rows = w.run("recon/index_edges_all").fetchall()
    for edge in map(EdgeRecord._make, rows):
        if edge.id in selected or (kinds is not None and edge.kind not in kinds):
            continue
        parts = set(edge.dst_name.split("."))
        if edge.typed_name is not None:
            parts.update(edge.typed_name.split("."))
        if not parts.isdisjoint(names):
            selected[edge.id] = edge


def _follow_tests_edges(w: _Writer, calls: list[EdgeRecord],
                        next_edge: int) -> tuple[int, int]:
    """Each test function's resolved call gives a tests edge (same site): after these calls
    were resolved again, insert, move or delete their tests edges. Returns the next id and
    how many were deleted."""
    by_source: dict[int, list[EdgeRecord]] = {}
    for call in calls:
        by_source.setdefault(call.src_symbol_id, []).append(call)
    fresh, moved, stale = [], [], []
    for src, src_calls in sorted(by_source.items()):
        existing = {name: (eid, dst) for eid, dst, name in
                    w.run("recon/index_tests_edges_of_symbol", src_id=src).fetchall()}
        for call in src_calls:
            found = existing.get(call.dst_name)
            if call.dst_symbol_id is None:
                if found is not None:
                    stale.append({"edge_id": found[0]})
            elif found is None:
                fresh.append(call.as_tests_edge(next_edge))
                next_edge += 1
            elif found[1] != call.dst_symbol_id:
                moved.append({"dst_id": call.dst_symbol_id, "edge_id": found[0]})
    w.run_many("recon/index_delete_edge", stale)
    w.run_many("recon/index_set_edge_destination", moved)
    w.insert(schema.edge, fresh, EDGE_COLUMNS)
    return next_edge, len(stale)


def _write_edges_incremental(w: _Writer, loader: _Loader,
                             next_edge: int) -> tuple[int, int, int]:
    """Insert the new files' edges, then resolve every edge again. Returns how many edges
    were resolved (tests edges not counted), the next free edge id and how many edges
    were deleted."""
    new_edges = []
    for src, ref in loader.references():
        new_edges.append((next_edge, ref.kind, src, None, ref.dst_name, ref.typed_name, ref.line))
        next_edge += 1
    w.insert(schema.edge, new_edges, EDGE_COLUMNS)
    return _reresolve(w, next_edge)


def _reresolve(w: _Writer, next_edge: int) -> tuple[int, int, int]:
    """Resolve every edge again from the stored rows; write only what changed. Returns
    how many edges were resolved (tests edges not counted), the next free edge id and how
    many edges were deleted."""
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
    return len(edges) - len(old_tests), next_edge, len(stale)
