"""The recon indexer's walk: the Python files under a root, what was passed over and
why, and each file's stat key (what change detection compares).

Each directory's listing is kept in process while the directory's own stat key holds
(`recon/kept.py`), and the last whole walk's result while every directory's does: a walk
of a tree none of whose directories moved stats each directory and each file, and does
nothing else. Where inotify watches the directories (`recon/watch.py`: Linux, local file
systems), a directory no event came for is not even stat'ed, if the directories above it
were watched all along: such a walk stats the root (its identity) and the files alone.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from typing import NamedTuple

from ctxdb.recon.kept import KeptWalk, kept_walk
from ctxdb.recon.watch import CONTINUED, UNWATCHED, DirectoryWatch, open_watch

# Directory names never descended into (plus *.egg-info and any dir holding pyvenv.cfg).
SKIP_DIRS = frozenset(
    {".git", ".hg", ".svn", ".venv", "venv", "build", "dist", "__pycache__",
     "node_modules", ".tox", ".nox"}
)
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


class SkippedPath(NamedTuple):
    """A path not indexed, or indexed as a file row alone, and why."""

    path: str  # relative to the root, posix
    reason: str  # a SKIP_* value of this module or of `extract`


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
    does nothing else; a directory watched since its listing was validated, with no
    event since (`recon/watch.py`), is taken as it was without a stat when every
    directory above it up to the root was watched all along too, the root is the
    directory (device, inode) it was, and the mount table has not changed.
    """
    walk_started_ns = time.time_ns()
    root_real = os.path.realpath(root)
    kept = kept_walk(root_real)
    with kept.lock:  # one walk at a time changes what is kept (listings, watches)
        return _walk(root_real, under, kept, walk_started_ns)


def _walk(root_real: str, under: str, kept: KeptWalk, walk_started_ns: int) -> Walk:
    watch = _directory_watch(kept, root_real)
    trusted: set[str] = watch.trusted if watch is not None else set()
    if not under and kept.files is not None:
        if watch is None:
            keys = _stat_kept_walk(kept)
        elif trusted.issuperset(kept.directory_names):
            keys = _stat_kept_files(kept)  # no directory moved: their events say so
            if keys is None:  # a file vanished since the drain: its event is read before
                watch.drain()  # the walk below takes any listing as it was
        else:
            keys = None  # the walk below stats the directories events came for
        if keys is not None:
            return Walk(list(kept.files), list(kept.skipped), keys)
    inside = root_real.rstrip(os.sep) + os.sep
    listings = kept.listings
    out: list[tuple[str, str]] = []
    skipped: list[SkippedPath] = []
    keys = {}
    # (directory, its relative path, whether every directory above it up to the root was
    # watched all along, so that no rename above it could have gone unseen)
    pending: list[tuple[str, str, bool]] = []
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

    def visit(directory: str, rel: str, chained: bool) -> None:
        """One directory: its own listing, or the one kept while its stat key holds."""
        nonlocal listed_anew, unsettled, looked_beyond
        listing = list_get(directory)
        if chained and listing is not None and directory in trusted and listing.rel == rel:
            fresh = False  # watched since its listing was validated, and no event since
            visited.append((directory, listing.key))
            below = True
        else:
            trusted.discard(directory)
            try:
                # the watch first: a change after the stat below is then reported
                watching = watch.add(directory) if watch is not None else UNWATCHED
                st = stat(directory)
                key = (st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
                if listing is not None and listing.key == key and listing.rel == rel:
                    fresh = False
                else:
                    fresh = listed_anew = True
                    stats: dict[str, os.stat_result] = {}
                    listing = _list_directory(directory, rel, key, stats)
                    if not listing.unreadable and max(key[0], key[1]) < settled_before_ns:
                        listings[directory] = listing
                    else:
                        unsettled = True
                        listings.pop(directory, None)
                local = (watch is not None and watching != UNWATCHED
                         and watch.is_local(directory, st.st_dev))
                if local and list_get(directory) is listing:
                    trusted.add(directory)
                # a watch set just now vouches for nothing below it: a directory there may
                # have been renamed or replaced while this one was not watched
                below = chained and local and watching == CONTINUED
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
            for subdir, subdir_rel in listing.subdirs:
                pending.append((subdir, subdir_rel, below))

    if not under:
        pending.append((root_real, "", True))  # above the root: its identity, checked
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
                # the directories above were not walked: nothing vouches for them
                pending.append((path, f"{rel}{name}/", False))
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
    except OSError:
        return None  # a directory vanished: the walk sees what there is
    return _stat_kept_files(kept)


def _stat_kept_files(kept: KeptWalk) -> dict[str, StatKey] | None:
    """The stat keys of the last whole walk's files (None if one vanished)."""
    try:
        return dict(zip(kept.file_rels, [(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
                                         for st in map(os.lstat, kept.file_paths)],
                        strict=True))
    except OSError:
        return None  # a file vanished: the walk sees what there is


def _directory_watch(kept: KeptWalk, root_real: str) -> DirectoryWatch | None:
    """The inotify watches on this root's directories, their pending events read (None
    where there are none); opened on the first walk of the root in this process. No
    event comes for a change above the root (a directory there renamed away and another
    tree put at the same path): if the root is not the directory it was (device, inode),
    nothing is trusted."""
    if kept.watch is not None and not kept.watch.usable:
        kept.release_watch()  # set by the process this one was forked from: start anew
    if not kept.watch_opened:
        kept.watch, kept.watch_opened = open_watch(), True
    watch = kept.watch
    if watch is not None:
        watch.drain()
        try:
            st = os.stat(root_real)
            identity: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except OSError:
            identity = None  # gone: the walk says so
        if identity is None or identity != watch.root_identity:
            watch.trusted.clear()
            watch.root_identity = identity
    return watch


class DirectoryListing(NamedTuple):
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
                    stats: dict[str, os.stat_result]) -> DirectoryListing:
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
    return DirectoryListing(key, rel, virtualenv, tuple(files), tuple(links), tuple(subdirs),
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
