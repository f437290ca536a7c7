"""Which directory listings the walk may take as they were without a stat: Linux's inotify
watches on the walked directories, kept in process with the listings (`recon/kept.py`).

A directory is *trusted* when its watch was in place before the stat (or listing) that
validated its kept listing, and no event has come for it since: adding, removing or
renaming an entry, or a change of its own attributes, sends one. Its listing is then
used with no stat call: a walk of a tree whose directories did not move stats the files
alone (a file's content changing sends nothing here, and is found by its stat key as
before). Only the directory entries are watched, so a file written through a hard link
elsewhere or through a memory map changes nothing this module decides.

An event comes for what happens to a watched directory, not to its path: a rename of a
directory above it that is not watched, or a mount over it, sends nothing. So the walk
(`recon/walk.py`) takes a directory as it was only when every directory from the root
down to it has been watched, by the same watch, since its listing was validated; it
checks the root's own identity (device, inode) each walk, for the directories above the
root; and every root's trust is dropped when the mount table changes (polled here).

Nothing is trusted where events may not come: another operating system, a file system
that is not local (a change made on another host, or in an overlay's lower layer, sends
nothing), a directory past the watch limit, a process forked from the one that set the
watches (the events queue is shared with it), after the kernel's event queue overflowed,
or where the mount table cannot be polled. One inotify instance serves the process (the
user's instances are few and shared by all their programs). Pure Python over the C
library's inotify calls (ctypes).
"""

from __future__ import annotations

import ctypes
import errno
import os
import select
import struct
import sys
import threading

# inotify(7)'s event bits
IN_ATTRIB = 0x00000004
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_UNMOUNT = 0x00002000
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_ISDIR = 0x40000000
# The events asked for: each change to a directory's listing (an entry created, deleted,
# renamed in or out) and to the directory itself (its attributes: a chmod can make it
# unreadable; its deletion; its rename). IN_ONLYDIR and IN_DONT_FOLLOW are flags of the
# call, not events: watch a directory only, never through a link. IN_UNMOUNT,
# IN_Q_OVERFLOW and IN_IGNORED come without being asked for.
WATCH_MASK = (IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
              | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW)
# events after which the watched directory itself is gone, moved or replaced
SELF_EVENTS = IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT | IN_IGNORED
# events naming an entry whose path no longer leads where it did
ENTRY_GONE_EVENTS = IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE | IN_CREATE
# struct inotify_event: int wd; uint32 mask, cookie, len; then the name (len bytes)
EVENT_HEADER = struct.Struct("iIII")
# one read takes what the queue holds, up to this (an event is 16 bytes and a name)
READ_BYTES = 1 << 16
# statfs(2)'s f_type of local file systems, whose every change goes through this kernel
# and reaches the watched inode. Not overlayfs: a change made in a lower (or upper)
# layer directly, as a container's image or a build cache does, sends nothing on the
# merged directory, so an overlay is walked with stats.
LOCAL_FILE_SYSTEMS = frozenset({
    0xEF53,  # ext2/3/4
    0x58465342,  # xfs
    0x9123683E,  # btrfs
    0x01021994,  # tmpfs
    0x858458F6,  # ramfs
    0x2FC12FC1,  # zfs
    0xF2F52010,  # f2fs
    0xCA451A4E,  # bcachefs
    0x3153464A,  # jfs
    0x52654973,  # reiserfs
})
# struct statfs is 120 bytes on 64-bit Linux (f_type, a long, first): room to spare
STATFS_BUFFER_BYTES = 256
# The user's inotify watches are shared by all their programs (editors, file managers):
# this process takes at most the limit divided by this, the rest of a tree is stat'ed.
WATCH_LIMIT_DIVISOR = 4
MAX_USER_WATCHES_FILE = "/proc/sys/fs/inotify/max_user_watches"
# the limit's default before Linux 5.11, when the file cannot be read
DEFAULT_MAX_USER_WATCHES = 8192
# The mount table: a mount or unmount over a watched directory sends no inotify event,
# but the kernel marks this file with POLLPRI and POLLERR (proc(5)) when the table changes.
MOUNTINFO_FILE = "/proc/self/mountinfo"
MOUNT_CHANGE_EVENTS = select.POLLPRI | select.POLLERR
# what add() tells of a directory's watch
UNWATCHED = 0  # none: no event will come for it
NEW = 1  # set by this call (or on another inode than before): nothing below it is vouched for
CONTINUED = 2  # the watch it had before, on the same inode: events came for it since

# Guards the shared instance (its watch descriptors, the events read for each root) and
# the budget: the walks of different roots run in different threads.
_LOCK = threading.Lock()


class _WatchBudget:
    """How many watches this process holds, against its share of the user's limit (used
    under _LOCK)."""

    def __init__(self) -> None:
        self.in_use = 0
        self.limit: int | None = None

    def allows_another(self) -> bool:
        if self.limit is None:
            try:
                with open(MAX_USER_WATCHES_FILE) as fh:
                    user_limit = int(fh.read())
            except (OSError, ValueError):
                user_limit = DEFAULT_MAX_USER_WATCHES
            self.limit = user_limit // WATCH_LIMIT_DIVISOR
        return self.in_use < self.limit

    def take(self) -> bool:
        if not self.allows_another():
            return False
        self.in_use += 1
        return True


_BUDGET = _WatchBudget()


class _MountTable:
    """An open /proc/self/mountinfo, polled for changes of the mount table."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._poll = select.poll()
        self._poll.register(fd, MOUNT_CHANGE_EVENTS)
        self._read()

    def changed(self) -> bool:
        """Whether the mount table changed since the last call (one poll, no wait)."""
        if not self._poll.poll(0):
            return False
        self._read()  # re-arms the signal on kernels that take a read for it
        return True

    def _read(self) -> None:
        os.lseek(self.fd, 0, os.SEEK_SET)
        while os.read(self.fd, READ_BYTES):
            pass


class _Inotify:
    """The process's one inotify instance, shared by the watches of every root: a
    directory watched for two roots is one kernel watch, counted once in the budget."""

    def __init__(self, libc: ctypes.CDLL, fd: int, mounts: _MountTable) -> None:
        self.libc = libc
        self.fd = fd
        self.mounts = mounts
        self.owners: dict[int, set[DirectoryWatch]] = {}  # watch descriptor → its roots' watches
        self.watches: set[DirectoryWatch] = set()

    def read_events(self) -> None:
        """Hand each root's watch the events read for it (under _LOCK)."""
        if self.mounts.changed():
            for watch in self.watches:
                watch._lost = True
        while True:
            try:
                data = os.read(self.fd, READ_BYTES)
            except BlockingIOError:
                break
            self.dispatch(data)

    def dispatch(self, data: bytes) -> None:
        """Hand over the events in `data`, a buffer read from the instance."""
        offset = 0
        while offset < len(data):
            wd, mask, _cookie, length = EVENT_HEADER.unpack_from(data, offset)
            offset += EVENT_HEADER.size
            name = data[offset:offset + length].rstrip(b"\0")
            offset += length
            if mask & IN_Q_OVERFLOW:
                for watch in self.watches:
                    watch._lost = True  # events were lost, for any root
                continue
            owners = self.owners.get(wd)
            if not owners:
                continue  # a watch let go of (inotify_rm_watch's own IN_IGNORED)
            if mask & IN_IGNORED:  # the kernel dropped the watch
                del self.owners[wd]
                _BUDGET.in_use -= 1
            for watch in owners:
                watch._events.append((wd, mask, name))

    def remove(self, watch: DirectoryWatch, wd: int) -> None:
        """`watch` needs `wd` no more: let it go in the kernel if no root does."""
        owners = self.owners.get(wd)
        if owners is None:
            return  # already dropped by the kernel
        owners.discard(watch)
        if not owners:
            del self.owners[wd]
            self.libc.inotify_rm_watch(self.fd, wd)
            _BUDGET.in_use -= 1

    def close(self) -> None:
        for fd in (self.fd, self.mounts.fd):
            try:
                os.close(fd)
            except OSError:
                pass


_INOTIFY: _Inotify | None = None


class DirectoryWatch:
    """The watches on the walked directories of one root, and which are trusted. Used by
    one walk at a time (the root's `KeptWalk.lock`)."""

    def __init__(self, inotify: _Inotify) -> None:
        self._inotify: _Inotify | None = inotify
        self._paths: dict[int, set[str]] = {}  # watch descriptor → directories it watches
        self._watched: dict[str, int] = {}  # directory → its watch descriptor
        self._events: list[tuple[int, int, bytes]] = []  # read for this root, not yet seen
        self._lost = False  # events may have been lost, or the mounts changed: trust nothing
        self._local_devices: dict[int, bool] = {}  # st_dev → on a local file system
        self.trusted: set[str] = set()
        self.root_identity: tuple[int, int] | None = None  # the root's (st_dev, st_ino)

    @property
    def usable(self) -> bool:
        """Open, and in the process that set the watches."""
        return self._inotify is not None and self._inotify is _INOTIFY

    def add(self, directory: str) -> int:
        """Watch `directory` (before the stat that validates its listing): UNWATCHED, NEW
        or CONTINUED. It is added to `trusted` once its listing is validated, if
        `is_local`."""
        inotify = self._inotify
        if inotify is None or not self.usable:
            return UNWATCHED
        with _LOCK:
            known = self._watched.get(directory)
            if known is None and not _BUDGET.allows_another():
                return UNWATCHED  # the kernel call would only set a watch past the share
            wd = inotify.libc.inotify_add_watch(inotify.fd, os.fsencode(directory), WATCH_MASK)
            if wd < 0:
                if ctypes.get_errno() == errno.ENOSPC:
                    _BUDGET.limit = _BUDGET.in_use  # the user's limit is reached: stop trying
                return UNWATCHED  # or gone: stat'ed as before
            owners = inotify.owners.get(wd)
            if owners is None:  # a new kernel watch (the path may lead to another inode)
                if not _BUDGET.take():
                    inotify.libc.inotify_rm_watch(inotify.fd, wd)
                    return UNWATCHED
                owners = inotify.owners[wd] = set()
            owners.add(self)
            if known is not None and known != wd:  # the path leads to another directory
                self._forget(directory, known)
            self._paths.setdefault(wd, set()).add(directory)
            self._watched[directory] = wd
            return CONTINUED if known == wd else NEW

    def _forget(self, directory: str, wd: int) -> None:
        """`directory` is no more watched by `wd` (under _LOCK)."""
        paths = self._paths.get(wd)
        if paths is not None:
            paths.discard(directory)
            if not paths:
                del self._paths[wd]
                if self._inotify is not None:
                    self._inotify.remove(self, wd)

    def is_local(self, directory: str, device: int) -> bool:
        """Whether `directory`, on the device of this st_dev, is on a local file system
        (every change to it then sends its event)."""
        local = self._local_devices.get(device)
        if local is None:
            local = self._local_devices[device] = _is_local(directory)
        return local

    def drain(self) -> None:
        """Read every pending event; distrust what they concern."""
        inotify = self._inotify
        if inotify is None or not self.usable:
            self.trusted.clear()
            return
        with _LOCK:
            inotify.read_events()
            events, self._events = self._events, []
            lost, self._lost = self._lost, False
        trusted, paths = self.trusted, self._paths
        if lost:
            trusted.clear()
        gone_below: set[str] = set()  # directories whose subtrees are distrusted too
        for wd, mask, name in events:
            watched = paths.get(wd, ())
            for directory in watched:
                trusted.discard(directory)
            if mask & SELF_EVENTS:
                gone_below.update(watched)
                if mask & IN_IGNORED and wd in paths:  # the kernel dropped the watch
                    for directory in paths.pop(wd):
                        if self._watched.get(directory) == wd:
                            del self._watched[directory]
            elif name and mask & IN_ISDIR and mask & ENTRY_GONE_EVENTS:
                entry = os.fsdecode(name)
                gone_below.update(f"{directory}/{entry}" for directory in watched)
        if gone_below and trusted:
            prefixes = tuple(f"{directory}/" for directory in gone_below)
            trusted.difference_update(
                [path for path in trusted if path in gone_below or path.startswith(prefixes)])

    def close(self) -> None:
        """Let go of this root's watches (and of the instance, after the last root's)."""
        global _INOTIFY
        inotify = self._inotify
        if inotify is not None and self.usable:
            with _LOCK:
                for wd in list(self._paths):
                    inotify.remove(self, wd)
                inotify.watches.discard(self)
                if not inotify.watches and _INOTIFY is inotify:
                    _INOTIFY = None
                    inotify.close()
        self._inotify = None
        self.trusted.clear()
        self._paths.clear()
        self._watched.clear()
        self._events.clear()


def open_watch() -> DirectoryWatch | None:
    """Watches for one root, on the process's inotify instance; None where there are none
    (not Linux, no more instances allowed, or the mount table cannot be polled)."""
    global _INOTIFY
    with _LOCK:
        if _INOTIFY is None:
            _INOTIFY = _open_instance()
            if _INOTIFY is None:
                return None
        watch = DirectoryWatch(_INOTIFY)
        _INOTIFY.watches.add(watch)
        return watch


def _open_instance() -> _Inotify | None:
    if not sys.platform.startswith("linux"):
        return None
    libc = _libc()
    if libc is None:
        return None
    try:
        mounts_fd = os.open(MOUNTINFO_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # a mount over a watched directory would go unseen: no watches
    try:
        mounts = _MountTable(mounts_fd)
    except OSError:
        os.close(mounts_fd)
        return None
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        os.close(mounts_fd)
        return None
    return _Inotify(libc, fd, mounts)


def _after_fork_in_child() -> None:
    """A forked child's watches are not its own (the queue stays its parent's), a lock
    may have been held by a thread that is not in the child, and the budget counts the
    parent's watches: start afresh."""
    global _INOTIFY, _LOCK
    _LOCK = threading.Lock()
    inherited, _INOTIFY = _INOTIFY, None
    _BUDGET.in_use = 0
    if inherited is not None:
        inherited.close()  # the child's copies of the descriptors


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


_LIBC: list[ctypes.CDLL | None] = []


def _libc() -> ctypes.CDLL | None:
    if not _LIBC:
        try:
            # the C library this process already loaded (find_library would run ldconfig)
            libc = ctypes.CDLL(None, use_errno=True)
            libc.inotify_init1.argtypes = [ctypes.c_int]
            libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
            libc.statfs.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        except (OSError, AttributeError):
            libc = None
        _LIBC.append(libc)
    return _LIBC[0]


def _is_local(directory: str) -> bool:
    """Whether `directory` is on a file system in LOCAL_FILE_SYSTEMS."""
    libc = _libc()
    if libc is None:
        return False
    buffer = ctypes.create_string_buffer(STATFS_BUFFER_BYTES)
    if libc.statfs(os.fsencode(directory), buffer) != 0:
        return False
    f_type = ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF  # the magic is 32 bits
    return f_type in LOCAL_FILE_SYSTEMS
