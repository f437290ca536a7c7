"""What the indexer keeps in process between runs over the same index and tree.

A harness re-indexes one repository after every command, so a run keeps, for the next:
the name resolver of the index's generation (updated in place by an incremental run,
never used for another generation), the index's file states and totals (the same), and
each directory's listing for the walk (used while the directory's own stat key has not
moved: adding, removing or renaming an entry moves it) with the last whole walk's sorted
result (used while every listing is), the inotify watches on its directories
(`recon/watch.py`: a directory no event came for is not stat'ed), and a SQLite index's
engine with its connection open (its parsed schema and page cache kept: used while the
file is as the last run left it — device, inode, size, mtime — never in a forked child).
All are dropped by `forget_indexer_state`, e.g. for benchmarks; none can go stale
unnoticed. Pure Python: importing this loads no parser and no database driver.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .resolve import Resolver
    from .walk import DirectoryListing, SkippedPath
    from .watch import DirectoryWatch

# A resolver holds a repository's names (~40 MB for Django's): only the most recent few.
KEPT_RESOLVERS = 2
# An index's file states and totals (~1 MB for Django's).
KEPT_INDEXES = 4
# Directory listings, per walked root (~1 MB for Django's 3,224 directories).
KEPT_WALKS = 4
# Engines on SQLite index files, each with an idle connection (a file descriptor and
# SQLite's page cache of the index, 2 MB by default).
KEPT_ENGINES = 4

_RESOLVERS: OrderedDict[str, tuple[str, Resolver]] = OrderedDict()
_INDEXES: OrderedDict[str, tuple[str, Any]] = OrderedDict()
_WALKS: OrderedDict[str, KeptWalk] = OrderedDict()
# A SQLite index file as a kept engine saw it last: device, inode, size, mtime (ns)
FileIdentity = tuple[int, int, int, int]
# identity → (the file's identity when the engine's run ended, the engine)
_ENGINES: OrderedDict[str, tuple[FileIdentity, Any]] = OrderedDict()
# A forked child's copies of its parent's engines: never used, never closed (closing a
# connection the parent opened is unsafe in SQLite), so never collected either.
_FORKED_ENGINES: list[Any] = []
# Guards _WALKS: concurrent first walks of a root must share one KeptWalk (each would
# set watches of its own, and keep them).
_WALKS_LOCK = threading.Lock()


def kept_resolver(identity: str, generation: str | None) -> Resolver | None:
    """The resolver kept for this index if it is of this generation. It is handed over:
    the caller changes it, and keeps it again once its changes are committed."""
    kept = _RESOLVERS.pop(identity, None)
    if kept is None or generation is None or kept[0] != generation:
        return None
    return kept[1]


def keep_resolver(identity: str, generation: str, resolver: Resolver | None) -> None:
    """Keep the resolver matching this index at this generation."""
    _RESOLVERS.pop(identity, None)
    if resolver is None:
        return
    _RESOLVERS[identity] = (generation, resolver)
    while len(_RESOLVERS) > KEPT_RESOLVERS:
        _RESOLVERS.popitem(last=False)


def forget_resolver(identity: str) -> None:
    _RESOLVERS.pop(identity, None)


def kept_index(identity: str, generation: str | None) -> Any | None:
    """What the last run left of this index (its file states, totals), if the index is
    still of that generation."""
    kept = _INDEXES.get(identity)
    if kept is None or generation is None or kept[0] != generation:
        return None
    return kept[1]


def keep_index(identity: str, generation: str, summary: Any) -> None:
    _INDEXES.pop(identity, None)
    _INDEXES[identity] = (generation, summary)
    while len(_INDEXES) > KEPT_INDEXES:
        _INDEXES.popitem(last=False)


def forget_index(identity: str) -> None:
    _INDEXES.pop(identity, None)


def kept_engine(identity: str, file_identity: FileIdentity | None) -> Any | None:
    """The engine kept for this index if its file is still the one it opened (a file
    removed and written anew at the path is another index). Handed over, as a resolver
    is: a run in another thread meanwhile opens its own."""
    kept = _ENGINES.pop(identity, None)
    if kept is None:
        return None
    if kept[0] != file_identity:
        kept[1].dispose()
        return None
    return kept[1]


def forget_engine(identity: str) -> None:
    """Close the engine kept for this index, if any (its file is about to go)."""
    kept = _ENGINES.pop(identity, None)
    if kept is not None:
        kept[1].dispose()


def keep_engine(identity: str, file_identity: FileIdentity, engine: Any) -> None:
    old = _ENGINES.pop(identity, None)
    if old is not None and old[1] is not engine:
        old[1].dispose()
    _ENGINES[identity] = (file_identity, engine)
    while len(_ENGINES) > KEPT_ENGINES:
        _ENGINES.popitem(last=False)[1][1].dispose()


@dataclass
class KeptWalk:
    """What the walk keeps of one root: each directory's listing, by absolute path, and
    the last whole walk's result (`files` None: none, or a listing moved since): the
    directories it entered and their stat keys, its sorted files — (relative, absolute
    path) — and skipped paths.
    The paths and keys are kept apart, in parallel, to be stat'ed and compared in bulk;
    the paths to stat as bytes (os.stat then skips encoding each: ~5% of a walk).
    `watch`: the inotify watches on its directories (`recon/watch.py`), once opened
    (`watch_opened`: None then means there are none to be had here)."""

    listings: dict[str, DirectoryListing] = field(default_factory=dict)
    files: list[tuple[str, str]] | None = None
    skipped: list[SkippedPath] = field(default_factory=list)
    directories: list[bytes] = field(default_factory=list)
    directory_keys: list[tuple[int, int, int]] = field(default_factory=list)
    file_rels: list[str] = field(default_factory=list)
    file_paths: list[bytes] = field(default_factory=list)
    directory_names: list[str] = field(default_factory=list)
    watch: DirectoryWatch | None = None
    watch_opened: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def keep_result(self, directories: list[tuple[str, tuple[int, int, int]]],
                    files: list[tuple[str, str]], skipped: list[SkippedPath]) -> None:
        self.files, self.skipped = list(files), list(skipped)
        self.directory_names = [directory for directory, _ in directories]
        self.directories = [os.fsencode(directory) for directory, _ in directories]
        self.directory_keys = [key for _, key in directories]
        self.file_rels = [rel for rel, _ in files]
        self.file_paths = [os.fsencode(path) for _, path in files]

    def forget_result(self) -> None:
        self.files, self.skipped = None, []
        self.directories, self.directory_keys, self.file_rels, self.file_paths = [], [], [], []
        self.directory_names = []

    def close(self) -> None:
        """Let go of the watches (the listings stay, checked by stat again); waits for a
        walk in progress, which uses them."""
        with self.lock:
            self.release_watch()

    def release_watch(self) -> None:
        """`close`, by the walk holding `lock`."""
        if self.watch is not None:
            self.watch.close()
        self.watch, self.watch_opened = None, False


def kept_walk(root: str) -> KeptWalk:
    """What the walk keeps of `root` (a real path); the walk fills it."""
    evicted = []
    with _WALKS_LOCK:
        kept = _WALKS.pop(root, None)
        if kept is None:
            kept = KeptWalk()
        _WALKS[root] = kept
        while len(_WALKS) > KEPT_WALKS:
            evicted.append(_WALKS.popitem(last=False)[1])
    for old in evicted:  # outside the lock: closing waits for a walk of that root
        old.close()
    return kept


def forget_indexer_state() -> None:
    """Drop everything kept: the next run is a fresh process's."""
    _RESOLVERS.clear()
    _INDEXES.clear()
    _dispose_engines()
    with _WALKS_LOCK:
        walks = list(_WALKS.values())
        _WALKS.clear()
    for kept in walks:
        kept.close()


def _dispose_engines() -> None:
    """Close the kept engines' connections (at exit too: Python 3.13 warns of a sqlite3
    connection left to the collector)."""
    while _ENGINES:
        _ENGINES.popitem()[1][1].dispose()


atexit.register(_dispose_engines)


def _after_fork_in_child() -> None:
    """A lock held by another thread at the fork stays held in the child, where that
    thread is not: new locks (the watches themselves are dropped by recon/watch.py). The
    parent's engines are not the child's to use."""
    global _WALKS_LOCK
    _FORKED_ENGINES.extend(engine for _, engine in _ENGINES.values())
    _ENGINES.clear()
    _WALKS_LOCK = threading.Lock()
    for kept in _WALKS.values():
        kept.lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
