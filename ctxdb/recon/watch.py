"""Which directory listings the walk may take as they were without a stat: Linux's inotify
watches on the walked directories, kept in process with the listings (`recon/kept.py`).

A directory is *trusted* when its watch was in place before the stat (or listing) that
validated its kept listing, and no event has come for it since: adding, removing or
renaming an entry, or a change of its own attributes, sends one. Its listing is then
used with no stat call: a walk of a tree whose directories did not move stats the files
alone (a file's content changing sends nothing here, and is found by its stat key as
before). Only the directory entries are watched, so a file written through a hard link
elsewhere or through a memory map changes nothing this module decides.

Nothing is trusted where events may not come: another operating system, a file system
that is not local (a change made on another host sends nothing), a directory past the
watch limit, a process forked from the one that set the watches (the events queue is
shared with it), or after the kernel's event queue overflowed (all trust dropped).
Pure Python over the C library's three inotify calls (ctypes).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
import sys

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
# what moves a directory's listing, or the directory itself
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
LOCAL_FILE_SYSTEMS = frozenset({
    0xEF53,  # ext2/3/4
    0x58465342,  # xfs
    0x9123683E,  # btrfs
    0x01021994,  # tmpfs
    0x858458F6,  # ramfs
    0x794C7630,  # overlayfs
    0x2FC12FC1,  # zfs
    0xF2F52010,  # f2fs
    0xCA451A4E,  # bcachefs
    0x3153464A,  # jfs
    0x52654973,  # reiserfs
})
# struct statfs is 120 bytes on 64-bit Linux (f_type, a long, first): room to spare
STATFS_BUFFER_BYTES = 256
# The user's inotify watches are shared by all their programs (editors, file managers):
# this process takes at most this share of the limit, the rest of a tree is stat'ed.
WATCH_LIMIT_SHARE = 4
MAX_USER_WATCHES_FILE = "/proc/sys/fs/inotify/max_user_watches"
# the limit's default before Linux 5.11, when the file cannot be read
DEFAULT_MAX_USER_WATCHES = 8192


class _WatchBudget:
    """How many watches this process holds, against its share of the user's limit."""

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
            self.limit = user_limit // WATCH_LIMIT_SHARE
        return self.in_use < self.limit


_BUDGET = _WatchBudget()


class DirectoryWatch:
    """inotify watches on the walked directories of one root, and which are trusted."""

    def __init__(self, libc: ctypes.CDLL, fd: int) -> None:
        self._libc = libc
        self._fd: int | None = fd
        self._pid = os.getpid()
        self._paths: dict[int, set[str]] = {}  # watch descriptor → directories it watches
        self._watched: set[str] = set()  # every directory a watch was set on
        self._local_devices: dict[int, bool] = {}  # st_dev → on a local file system
        self.trusted: set[str] = set()

    @property
    def usable(self) -> bool:
        """Open, and in the process that set the watches."""
        return self._fd is not None and os.getpid() == self._pid

    def add(self, directory: str) -> bool:
        """Watch `directory` (before the stat that validates its listing): whether its
        events will come. It is added to `trusted` once its listing is validated, if
        `is_local`."""
        if not self.usable or not (directory in self._watched or _BUDGET.allows_another()):
            return False
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(directory), WATCH_MASK)
        if wd < 0:
            return False  # past the user's limit, or gone: stat'ed as before
        if wd not in self._paths:
            self._paths[wd] = set()
            _BUDGET.in_use += 1
        self._paths[wd].add(directory)
        self._watched.add(directory)
        return True

    def is_local(self, directory: str, device: int) -> bool:
        """Whether `directory`, on the device of this st_dev, is on a local file system
        (every change to it then sends its event)."""
        local = self._local_devices.get(device)
        if local is None:
            local = self._local_devices[device] = _is_local(self._libc, directory)
        return local

    def drain(self) -> None:
        """Read every pending event; distrust what they concern."""
        if not self.usable:
            self.trusted.clear()
            return
        gone_below: set[str] = set()  # directories whose subtrees are distrusted too
        trusted, paths = self.trusted, self._paths
        while True:
            try:
                data = os.read(self._fd, READ_BYTES)  # type: ignore[arg-type]
            except BlockingIOError:
                break
            offset = 0
            while offset < len(data):
                wd, mask, _cookie, length = EVENT_HEADER.unpack_from(data, offset)
                offset += EVENT_HEADER.size
                name = data[offset:offset + length].rstrip(b"\0")
                offset += length
                if mask & IN_Q_OVERFLOW:
                    trusted.clear()  # events were lost
                    continue
                watched = paths.get(wd, ())
                for directory in watched:
                    trusted.discard(directory)
                if mask & SELF_EVENTS:
                    gone_below.update(watched)
                    if mask & IN_IGNORED and wd in paths:  # the kernel dropped the watch
                        self._watched.difference_update(paths.pop(wd))
                        _BUDGET.in_use -= 1
                elif name and mask & IN_ISDIR and mask & ENTRY_GONE_EVENTS:
                    entry = os.fsdecode(name)
                    gone_below.update(f"{directory}/{entry}" for directory in watched)
        if gone_below and trusted:
            prefixes = tuple(f"{directory}/" for directory in gone_below)
            trusted.difference_update(
                [path for path in trusted if path in gone_below or path.startswith(prefixes)])

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # in a forked process, its own copy
            if os.getpid() == self._pid:
                _BUDGET.in_use -= len(self._paths)
        self._fd = None
        self.trusted.clear()
        self._paths.clear()
        self._watched.clear()


def open_watch() -> DirectoryWatch | None:
    """A new inotify instance, or None where there is none (not Linux, or no more
    instances allowed)."""
    if not sys.platform.startswith("linux"):
        return None
    libc = _libc()
    if libc is None:
        return None
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        return None
    return DirectoryWatch(libc, fd)


_LIBC: list[ctypes.CDLL | None] = []


def _libc() -> ctypes.CDLL | None:
    if not _LIBC:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
            libc.inotify_init1.argtypes = [ctypes.c_int]
            libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            libc.statfs.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        except (OSError, AttributeError):
            libc = None
        _LIBC.append(libc)
    return _LIBC[0]


def _is_local(libc: ctypes.CDLL, directory: str) -> bool:
    """Whether `directory` is on a file system in LOCAL_FILE_SYSTEMS."""
    buffer = ctypes.create_string_buffer(STATFS_BUFFER_BYTES)
    if libc.statfs(os.fsencode(directory), buffer) != 0:
        return False
    f_type = ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF  # the magic is 32 bits
    return f_type in LOCAL_FILE_SYSTEMS
