"""Build and refresh the recon index of a repository: `index_repository`.

Phases: walk → compare with the index → parse what changed (in a process pool when
there is a lot) → write everything in one transaction, under a new generation.

Finding what changed reads no file that did not: each file's stat key (size, mtime,
ctime, inode) is kept with its content hash, and only a file whose key moved is hashed
(and parsed if its hash or dotted module name moved). A key is kept only when the file
had not changed for RACY_WINDOW_NS before it was read (timestamps are coarse). The walk
(recon/walk.py) keeps, in process, each directory's listing while the directory's own key
holds, and its last result while every directory's does, so a walk of an unchanged tree
stats and does nothing else; where inotify watches the directories (recon/watch.py), it
stats the files alone. A harness that knows what it changed says so
(`changed=[...]`) and nothing else is looked at.

An incremental run re-parses the changed files and writes them over their rows: a file
keeps its id, and so does each symbol whose key stays (only the rows and full-text
entries that moved are written; a removed file's rows are deleted). It resolves again
only the edges a change may move (recon/incremental.py): the new files' own, those into
symbols now gone, and those naming a name whose meaning may have moved. It works on the name
resolver kept in process from the last run over the index (recon/kept.py: same
generation only), or one loaded from the stored rows (`binding` keeps each module's
imports so unchanged files need not be re-parsed). A test compares the result of a
series of edits with cold builds, table by table.

The parts: recon/walk.py (the walk, stat keys), recon/writer.py (the write transaction,
statements from sql/recon/, DDL, generation), recon/loader.py (parsed files into the
database), recon/fulltext.py (the full-text entries), recon/incremental.py (deleting
replaced files, resolving again what a change may move). This module runs them.
"""

from __future__ import annotations

import gc
import hashlib
import multiprocessing
import os
import signal
import sqlite3
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import sqlalchemy as sa

from ctxdb.progress import ProgressBar
from ctxdb.recon import schema
from ctxdb.recon.extract import (
    MAX_FILE_BYTES,
    MAX_PARSE_DEPTH,
    SKIP_TOO_LARGE,
    ParsedFile,
    Symbol,
    body_terms,
    count_lines,
    extract_file,
    join_body_terms,
    prepare_parser,
    unparsed_file,
)
from ctxdb.recon.fulltext import insert_deferred_body_terms
from ctxdb.recon.incremental import (
    OldFile,
    Plan,
    clear_replaced_files,
    delete_files,
    gone_totals,
    plan_replacement,
    resolve_incrementally,
)
from ctxdb.recon.kept import (
    FileIdentity,
    forget_engine,
    forget_index,
    forget_resolver,
    keep_engine,
    keep_index,
    keep_resolver,
    kept_engine,
    kept_index,
    kept_resolver,
)
from ctxdb.recon.loader import EDGE_COLUMNS, EdgeRecord, FileState, Loader
from ctxdb.recon.resolve import (
    ModuleBinding,
    Resolver,
    ResolverFile,
    ResolverSymbol,
    WrittenBase,
    module_names,
)
from ctxdb.recon.walk import (
    SkippedPath,
    StatKey,
    parse_stat_key,
    stat_key_is_settled,
    stat_key_text,
    walk_python_files,
    walk_repository,
)
from ctxdb.recon.writer import (
    DatabaseThread,
    Writer,
    compiled_sql,
    create_added_tables,
    create_indexes,
    create_tables,
    ensure_generation,
    indexed_root,
    read_generation,
    stored_generation,
    write_generation,
    write_meta,
    write_root,
    write_transaction,
)
from ctxdb.sqlfiles import load_sql, sql_statement
from ctxdb.workers import usable_cpu_count

# what `from ctxdb.recon.indexer import ...` finds: this module's API and what it re-exports
__all__ = ["DEFAULT_LIMITS", "IndexLimits", "IndexStats", "SkippedPath", "index_repository",
           "indexed_root", "read_skipped", "walk_python_files", "walk_repository"]

# Below this many files to parse, a process pool costs more than it saves.
POOL_MIN_FILES = 200
POOL_CHUNK = 16
# Edges are resolved and handed to the database thread in batches of this many.
EDGE_BATCH = 16384
# A file too large to parse is hashed and its lines counted in pieces of this size.
READ_CHUNK_BYTES = 1 << 20
# How many times a run starts over when another indexer changed the index between its
# reading the index and its taking the write lock.
MAX_INDEX_ATTEMPTS = 3


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


@cache
def _parser_pool_class() -> type:
    """A process pool whose worker-handler thread wakes only when a worker exits or the
    pool itself changes state. CPython's also waits on the result pipe, so while results
    wait there for the result-handler thread it loops without blocking: a cold build of
    Django's sdist (174 chunks) looped 15,029 times, ~0.45 s of CPU and the GIL taken on
    each turn, beside the loader. (A private method: where it is gone, the pool is
    CPython's.) Made on first use: multiprocessing.pool's imports cost a process that
    never parses in a pool ~25 ms."""
    import multiprocessing.pool

    class ParserPool(multiprocessing.pool.Pool):
        def _get_sentinels(self) -> list[Any]:
            return [self._change_notifier._reader]  # type: ignore[attr-defined]

    return ParserPool


@contextmanager
def _parser_pool(n_jobs: int, engine: sa.Engine) -> Iterator[Any]:
    """A process pool when there is enough to parse, else None.

    Created before the write connection is opened, and with the engine's idle
    connections closed, so no worker inherits a database connection.
    """
    workers = usable_cpu_count()
    if n_jobs < POOL_MIN_FILES or workers < 2:
        yield None
        return
    engine.dispose()
    prepare_parser()
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    # forked with the GC paused
    with _parser_pool_class()(workers, initializer=_parser_started, context=ctx) as pool:
        yield pool


def _parser_started() -> None:
    """A parser worker's start: the GC back on, and the signals its parent's handlers
    would take (a replay's or an A/B run's worker forks the pool) left to the parent —
    Ctrl-C ignored, SIGTERM (the pool's own terminate) ending it at once — so a stopped
    index ends quietly, not with a traceback from each parser."""
    gc.enable()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _parse_results(pool: Any, jobs: list[_ParseJob]) -> Iterator[ParsedFile | None]:
    """Results of `_parse_job`, in job order."""
    if pool is None:
        return map(_parse_job, jobs)
    return pool.imap(_parse_job, jobs, chunksize=POOL_CHUNK)


# --- the run ------------------------------------------------------------------------------


class _NextIds(NamedTuple):
    file: int
    symbol: int
    edge: int


class _KeptIndex(NamedTuple):
    """What a run leaves in process of the index it wrote, for the next run over it
    (kept per generation, so read only while the index is exactly that)."""

    existing: dict[str, FileState]
    skipped_paths: list[SkippedPath]  # recon.skipped_path, sorted
    totals: tuple[int, int, int]  # symbols, edges, flagged files
    skipped: tuple[SkippedPath, ...]  # `read_skipped`
    stat_keys: dict[str, StatKey | None]  # `existing`'s stat keys, by path


class _State(NamedTuple):
    """What an index holds before a run."""

    exists: bool
    existing: dict[str, FileState]  # by path
    generation: str | None
    root: str | None  # as recorded
    has_added_tables: bool  # schema.ADDED_TABLES are there
    kept: _KeptIndex | None  # what the last run in this process left, if still current
    # `existing`'s stat keys, by path: what a walk of a tree where nothing changed finds
    stat_keys: dict[str, StatKey | None]


def _read_state(engine: sa.Engine, target: Any, rebuild: bool, identity: str) -> _State:
    with engine.connect() as conn:
        meta = _read_meta(conn)
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
        cursor = conn.connection.cursor()
        try:
            cursor.execute(load_sql(states))
            existing = {path: FileState(fid, sha256, module, parse_stat_key(key))
                        for path, fid, sha256, module, key in cursor.fetchall()}
        finally:
            cursor.close()
        return _State(True, existing, generation, root, has_added_tables, None,
                      _stat_keys_of(existing))


def _read_meta(conn: sa.Connection) -> dict[str, str] | None:
    """`schema.read_meta`; on SQLite through the driver, the table looked for only when
    it cannot be read (SQLAlchemy's table check and execution: ~0.45 ms of every run)."""
    if conn.dialect.name != "sqlite":
        return schema.read_meta(conn)
    cursor = conn.connection.cursor()
    try:
        cursor.execute(compiled_sql("recon/index_meta", conn.dialect)[0])
        return dict(cursor.fetchall())
    except sqlite3.OperationalError:  # the driver create_recon_engine uses
        return schema.read_meta(conn)  # no table: None (another error: raised again there)
    finally:
        cursor.close()


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
        same_paths = full_paths.keys() == existing.keys()  # the walk finds each path once
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
        # the paths outside the scopes are taken as indexed
        same_paths = in_scope == full_paths.keys()
        if same_paths:
            paths = list(existing)
        else:
            paths = [rel for rel in existing if rel not in in_scope]
            paths += full_paths
    removed = [] if same_paths else sorted(set(existing).difference(paths))
    to_parse, confirmed = [], []
    if same_paths:
        # module names move only when paths come or go (a package gains an __init__.py)
        indexed_keys = state.stat_keys
        moved = [rel for rel, key in stat_keys.items() if key != indexed_keys[rel]]
        modules = {rel: existing[rel].module for rel in moved}
        # a file looked at without a key (a link whose target vanished meanwhile): hashed
        looked_at = [] if len(stat_keys) == len(full_paths) else [
            rel for rel in full_paths if rel not in stat_keys]
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


def _indexed_under(existing: dict[str, FileState], scopes: list[str]) -> set[str]:
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


def _totals(w: Writer) -> tuple[int, int, int]:
    return tuple(w.run("recon/index_totals").fetchone())


def _read_skipped(w: Writer) -> tuple[SkippedPath, ...]:
    # sorted here, not in SQL: collations differ between backends
    return tuple(sorted(SkippedPath(*row) for row in w.run("recon/index_skipped").fetchall()))


def _write_skipped_paths(w: Writer, skipped: list[SkippedPath]) -> None:
    w.run("recon/index_clear_skipped_paths")
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
    with write_transaction(engine) as w:
        _write_skipped_paths(w, skipped)
    return True


def _write_file_stats(w: Writer, rows: list[tuple[int, StatKey]], started_ns: int) -> None:
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
    identity = _target_identity(target)
    # the file the run opens: its engine is kept for the next run only if it still is
    opened = None if sqlite_path is None else _file_identity(sqlite_path)
    engine = None if opened is None else kept_engine(identity, opened)
    if engine is None:
        engine = schema.create_recon_engine(target, pooled=sqlite_path is not None)
    done = False
    try:
        state = _read_state(engine, target, rebuild, identity)
        if opened is None and sqlite_path is not None:  # the file the run created
            opened = _file_identity(sqlite_path)
        cold = not state.exists or rebuild
        changes = _find_changes(root, engine, state, None if cold else scopes, started_ns)
        if cold:
            to_parse, removed = list(changes.full_paths.items()), []
        else:
            to_parse, removed = changes.to_parse, changes.removed
        root_path = indexed_root(root)
        if not cold and not to_parse and not removed:
            nothing = _nothing_changed(engine, identity, state, changes, root_path, started,
                                       started_ns)
            done = True
            return nothing
        replaced = set(removed) | {rel for rel, _ in to_parse}  # the index's files now gone

        bar = ProgressBar("recon", len(to_parse), "files", enabled=progress)
        modules = changes.modules
        jobs = [_ParseJob(rel, full, modules[rel], limits) for rel, full in to_parse]
        # handed over: changed below, kept again once committed (dropped on any error)
        kept = None if cold else kept_resolver(identity, state.generation)
        forget_index(identity)
        if cold:
            forget_resolver(identity)  # its memory is better spent on the build
        with _parser_pool(len(jobs), engine) as pool, write_transaction(engine) as w:
            results = _parse_results(pool, jobs)
            # an incremental run parses first: a file read again is written over its rows
            in_place: dict[str, OldFile] = {}
            if cold:
                create_tables(w, drop=rebuild)
                write_meta(w)
                next_ids = _NextIds(1, 1, 1)
            else:
                parsed_files = []
                for parsed in results:
                    parsed_files.append(parsed)
                    bar.step()
                results = iter(parsed_files)
                if not state.has_added_tables:
                    create_added_tables(w)
                if stored_generation(w) != state.generation:
                    raise _GenerationMoved(target)
                next_ids = _NextIds(*w.run("recon/index_next_ids").fetchone())
                resolver = kept or _load_resolver(w)
                gone = [state.existing[p].id for p in removed]
                gone += [state.existing[rel].id for rel, _ in to_parse if rel in state.existing]
                paths_move = bool(removed) or any(
                    rel not in state.existing or state.existing[rel].module != modules[rel]
                    for rel, _ in to_parse)
                plan = plan_replacement(w, resolver, sorted(gone), paths_move)
                # with the last run's totals kept, they follow the change (no table
                # counted): that run's, and what the files replaced counted for in them
                followed = (state.kept, gone_totals(w, plan)) if state.kept is not None else None
                in_place = _written_in_place(jobs, parsed_files, state.existing, plan)
                kept_ids = {old.id for old in in_place.values()}
                delete_files(w, sorted(set(gone) - kept_ids))
                clear_replaced_files(w, sorted(kept_ids))
            loader = Loader(w, next_ids.file, next_ids.symbol, defer_body_terms=cold)
            for job, parsed in zip(jobs, results, strict=True):
                if parsed is None:
                    pass
                elif job.relpath in in_place:
                    loader.replace(in_place[job.relpath], job.module, parsed)
                else:
                    loader.add(job.relpath, job.module, parsed)
                if cold:
                    bar.step()
            loader.flush()
            if cold:
                n_edges, resolver = _write_edges_cold(w, loader, next_ids.edge)
                resolved = loader.reference_count()
            else:
                resolver, resolved, next_edge, edges_deleted = resolve_incrementally(
                    w, resolver, plan, loader, next_ids.edge)
            keys = changes.stat_keys
            stats = [(f.id, keys[f.path]) for f in loader.files if f.path in keys]
            _write_file_stats(w, stats + changes.confirmed, started_ns)
            # what the index holds already is not written again (fewer pages to commit)
            if state.kept is None or state.kept.skipped_paths != changes.skipped:
                _write_skipped_paths(w, changes.skipped)
            if cold or state.root != root_path:
                write_root(w, root_path)
            generation = write_generation(w)
            if cold:
                totals = (len(loader.symbols), n_edges, loader.flagged)
                skipped = tuple(sorted(loader.skipped + changes.skipped))
            elif followed is not None:
                last_run, replaced_totals = followed
                symbols, edges, flagged = last_run.totals
                edges_added = next_edge - next_ids.edge - edges_deleted
                totals = (symbols - replaced_totals[0] + len(loader.symbols),
                          edges - replaced_totals[1] + edges_added,
                          flagged - replaced_totals[2] + loader.flagged)
                # the files kept that are indexed without symbols, the new ones, the walk's
                skipped = tuple(sorted(
                    [entry for entry in last_run.skipped
                     if entry.path in state.existing and entry.path not in replaced]
                    + loader.skipped + changes.skipped))
            else:
                totals, skipped = _totals(w), _read_skipped(w)
        keep_resolver(identity, generation, resolver)
        # the index's file states now, and their stat keys: copies of the last ones with
        # the change applied (a one-file run need not go over every file)
        existing = {} if cold else dict(state.existing)
        stat_keys = {} if cold else dict(state.stat_keys)
        for path in replaced:
            existing.pop(path, None)
            stat_keys.pop(path, None)
        existing.update(loader.states)
        stat_keys.update((path, loaded.stat_key) for path, loaded in loader.states.items())
        _keep_stat_keys(existing, stat_keys, stats + changes.confirmed, started_ns)
        keep_index(identity, generation,
                   _KeptIndex(existing, changes.skipped, totals, skipped, stat_keys))
        done = True
        return IndexStats(len(changes.paths), len(loader.files), len(removed), totals[2],
                          totals[0], totals[1], time.perf_counter() - started, skipped,
                          resolved)
    finally:
        now = None if sqlite_path is None else _file_identity(sqlite_path)
        # the same file all along (its own writes change only its size and times)
        if done and now is not None and opened is not None and now[:2] == opened[:2]:
            keep_engine(identity, now, engine)
        else:
            engine.dispose()


def _file_identity(path: str) -> FileIdentity | None:
    """What tells a kept engine's file from another written at its path since, or the
    same file written by another connection since (copied over in place, say: SQLite's
    page cache trusts a header such a copy may share): device, inode, size and mtime."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def release_index_file(target: str | os.PathLike) -> None:
    """Close the engine a run kept open on the index file `target` (one about to be
    moved or deleted, as a staging copy is: nothing else would close it)."""
    forget_engine(_target_identity(str(target)))


def _written_in_place(jobs: list[_ParseJob], parsed_files: list[ParsedFile | None],
                      existing: dict[str, FileState], plan: Plan) -> dict[str, OldFile]:
    """The indexed files read again, by path, as the index held them: each is written
    over its old rows (`Loader.replace`). A file that could not be read is removed."""
    old_by_id = {old.id: old for old in plan.old_files}
    return {job.relpath: old_by_id[existing[job.relpath].id]
            for job, parsed in zip(jobs, parsed_files, strict=True)
            if parsed is not None and job.relpath in existing}


def _nothing_changed(engine: sa.Engine, identity: str, state: _State, changes: _Changes,
                     root_path: str, started: float, started_ns: int) -> IndexStats:
    """A run that found no file to parse or remove: the index's content stays as it is
    (a new generation only for an index without one, or indexed from another root)."""
    wrote = False
    if state.generation is None or state.root != root_path:
        ensure_generation(engine, root_path)
        wrote = True
    kept = state.kept
    wrote |= _ensure_skipped_paths(engine, changes.skipped,
                                   kept.skipped_paths if kept is not None else None)
    if changes.confirmed:  # bookkeeping only: the index's content is as it was
        with write_transaction(engine) as w:
            if not state.has_added_tables:
                create_added_tables(w)
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


def _keep_stat_keys(existing: dict[str, FileState], stat_keys: dict[str, StatKey | None],
                    stats: list[tuple[int, StatKey]], started_ns: int) -> None:
    """Record in the kept file states (and their stat keys by path) the keys just written."""
    settled = {fid: key for fid, key in stats if stat_key_is_settled(key, started_ns)}
    if settled:
        for path, old in existing.items():
            if old.id in settled:
                existing[path] = old._replace(stat_key=settled[old.id])
                stat_keys[path] = settled[old.id]


def _stat_keys_of(existing: dict[str, FileState]) -> dict[str, StatKey | None]:
    return {path: old.stat_key for path, old in existing.items()}


def _target_identity(target: Any) -> str:
    """What names one index for the resolvers kept in process: a SQLite file's real
    path, or the server URL."""
    path = schema.sqlite_path(target)
    return f"sqlite:{os.path.realpath(path)}" if path is not None else str(target)


def _load_resolver(w: Writer) -> Resolver:
    """A resolver over the index as it is (no resolver of its generation kept)."""
    return Resolver(
        map(ResolverFile._make, w.run("recon/index_resolver_files").fetchall()),
        map(ResolverSymbol._make, w.run("recon/index_resolver_symbols").fetchall()),
        # sorted here, not in SQL: collations differ between backends
        sorted(map(ModuleBinding._make, w.run("recon/index_resolver_bindings").fetchall())),
        map(WrittenBase._make, w.run("recon/index_resolver_bases").fetchall()),
    )


def _write_edges_cold(w: Writer, loader: Loader, next_edge: int) -> tuple[int, Resolver]:
    """Resolve and insert every edge, and build the indexes. Returns the edge count and
    the resolver (kept for the next, incremental, run).

    The database work runs on a helper thread, overlapped with name resolution here:
    SQLite releases the GIL while it builds indexes and inserts rows.
    """
    with DatabaseThread() as db:
        db.submit(create_indexes, w, edges=False)  # symbol, file, binding indexes
        db.submit(insert_deferred_body_terms, w, loader.deferred_first_symbol,
                  loader.deferred_body_terms)
        resolver = Resolver(
            loader.files,
            loader.symbols,
            sorted(loader.bindings),
            loader.bases,
        )
        # `Resolver.resolve`'s steps inlined: this loop runs once per reference
        resolve_name, module_prefix = resolver.resolve_name, resolver.module_prefix
        tests_from = resolver.test_functions()
        test_calls: list[EdgeRecord] = []  # each also gives a tests edge
        eid = next_edge
        edges = []
        for src, (kind, _, name, line, typed) in loader.references():
            if kind == "imports":
                dst = module_prefix(name)
            else:
                dst = None if typed is None else resolve_name(src, typed)
                if dst is None:
                    dst = resolve_name(src, name)
                if dst is not None and src in tests_from and kind == "calls":
                    test_calls.append(EdgeRecord(eid, kind, src, dst, name, typed, line))
            edges.append((eid, kind, src, dst, name, typed, line))
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
        db.submit(create_indexes, w, edges=True)
    return eid - next_edge, resolver
