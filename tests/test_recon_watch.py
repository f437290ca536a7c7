"""The walk's inotify watches (recon/watch.py) never hide a change the stat walk finds:
changes above the root, mounts, directories whose parents were not watched, lost events,
threads and forks. Each test compares a walk with what is kept against one with nothing
kept, or pins one rule of the watches' drain."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from recon_walks import have_watches, walk_afresh

from ctxdb.recon import kept as kept_module
from ctxdb.recon import walk
from ctxdb.recon import watch as watch_module
from ctxdb.recon.kept import forget_indexer_state

# a listing is kept once its directory is this old (the walk's RACY_WINDOW_NS, shortened)
TEST_RACY_WINDOW_NS = 100_000_000
PAST_THE_WINDOW_S = 0.15
# concurrent first walks of one root, how often the race is tried, and the interpreter's
# thread switch interval meanwhile (seconds: as short as it goes, for the race to show)
WALK_THREADS = 8
WALK_RACES = 50
RACE_SWITCH_INTERVAL_S = 1e-7
# a forked child that waits this long on a lock reports it held
CHILD_ALARM_S = 10
# the kernel's f_type of overlayfs, which must not be taken as local
OVERLAYFS_MAGIC = 0x794C7630


pytestmark = pytest.mark.skipif(not have_watches(), reason="no inotify here")


@pytest.fixture(autouse=True)
def _fresh_state(monkeypatch):
    monkeypatch.setattr(walk, "RACY_WINDOW_NS", TEST_RACY_WINDOW_NS)
    forget_indexer_state()
    yield
    forget_indexer_state()


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _settle_and_trust(root: Path) -> None:
    """Listings kept and directories trusted: two walks after the listings settle."""
    time.sleep(PAST_THE_WINDOW_S)
    walk.walk_repository(root)
    walk.walk_repository(root)


def _files(found: walk.Walk) -> list[str]:
    return [rel for rel, _ in found.files]


def _kept_watch(root: Path) -> watch_module.DirectoryWatch:
    watch = kept_module.kept_walk(os.path.realpath(root)).watch
    assert watch is not None
    return watch


def _inotify_descriptors() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
        except OSError:
            pass  # the listing's own descriptor, closed since
    return count


def _mount(*args: str) -> None:
    result = subprocess.run(["mount", *args], capture_output=True, text=True)
    if result.returncode:
        pytest.skip(f"mounting is not permitted here (needs root or CAP_SYS_ADMIN): "
                    f"{result.stderr.strip()}")


def _umount(path: Path) -> None:
    subprocess.run(["umount", str(path)], check=True)


# --- changes no event reports ---------------------------------------------------------------

def test_a_tree_put_where_the_roots_parent_was_is_walked_afresh(tmp_path):
    """A directory above the root renamed away and another tree put at the same path: the
    watches (on the old tree) see nothing; the root's identity says it moved."""
    root = tmp_path / "ws" / "repo"
    _write(root, {"app/__init__.py": "", "app/core.py": "X = 1\n"})
    _settle_and_trust(root)
    assert _kept_watch(root).trusted
    (tmp_path / "ws").rename(tmp_path / "ws.old")
    _write(root, {"app/__init__.py": "", "app/core.py": "X = 1\n", "app/new.py": "",
                  "lib/z.py": ""})
    found = walk.walk_repository(root)
    assert _files(found) == ["app/__init__.py", "app/core.py", "app/new.py", "lib/z.py"]
    assert found == walk_afresh(root)


def test_a_directory_below_one_that_was_not_watched_is_stat_ed(tmp_path, monkeypatch):
    """Past the watch budget, a directory's parents may be unwatched while it is watched:
    a rename of a parent then sends nothing, so it is trusted only below watches held
    all along (here the budget frees up while the walk is below the unwatched parent)."""
    root = tmp_path / "repo"
    _write(root, {"A/P/C/x.py": ""})
    real = os.path.realpath(root)
    time.sleep(PAST_THE_WINDOW_S)
    budget = watch_module._BUDGET
    budget.allows_another()  # the limit read
    monkeypatch.setattr(budget, "limit", budget.in_use + 1)  # room for the root alone
    real_stat = os.stat

    def stat_freeing_the_budget(path, *args, **kwargs):
        if os.fsdecode(path) == f"{real}/A/P":
            budget.limit += 10  # as another root's watches being let go
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat_freeing_the_budget)
    walk.walk_repository(root)
    monkeypatch.setattr(os, "stat", real_stat)
    budget.limit = budget.in_use  # the freed share taken again
    _settle_and_trust(root)
    watch = _kept_watch(root)
    assert f"{real}/A/P/C" in watch.trusted and f"{real}/A/P" not in watch._watched
    (root / "A/P").rename(root / "A/P.old")
    _write(root, {"A/P/C/x.py": "", "A/P/C/new.py": ""})
    found = walk.walk_repository(root)
    assert "A/P/C/new.py" in _files(found)
    assert found == walk_afresh(root)


def test_a_directory_watched_again_past_the_budget_vouches_for_nothing(tmp_path, monkeypatch):
    """The watches of deleted directories freed, another root takes their place in the
    budget; a directory moved back below re-created (unwatched) parents keeps its watch,
    but a rename of those parents would send nothing: it is stat'ed."""
    root, other = tmp_path / "repo", tmp_path / "other"
    _write(root, {"A/P/C/x.py": ""})
    _write(other, {"o1/a.py": "", "o2/b.py": ""})
    watch_module._BUDGET.allows_another()
    monkeypatch.setattr(watch_module._BUDGET, "limit", watch_module._BUDGET.in_use + 4)
    _settle_and_trust(root)  # repo, A, P, C: the share is full
    (root / "A/P/C").rename(tmp_path / "C")
    shutil.rmtree(root / "A")
    walk.walk_repository(root)  # A's and P's watches dropped by the kernel
    walk.walk_repository(other)  # the freed share taken by another root
    (root / "A/P").mkdir(parents=True)
    (tmp_path / "C").rename(root / "A/P/C")
    _settle_and_trust(root)
    (root / "A/P").rename(root / "A/P.old")
    _write(root, {"A/P/C/x.py": "", "A/P/C/new.py": ""})
    found = walk.walk_repository(root)
    assert "A/P/C/new.py" in _files(found)
    assert found == walk_afresh(root)
    assert watch_module._BUDGET.in_use <= watch_module._BUDGET.limit


def test_a_path_watched_before_takes_a_new_watch_only_within_the_budget(tmp_path,
                                                                       monkeypatch):
    """A directory replaced at a watched path needs a new kernel watch: past the share,
    none is set (the path is stat'ed)."""
    root = tmp_path / "repo"
    _write(root, {"A/x.py": ""})
    _settle_and_trust(root)
    watch, budget = _kept_watch(root), watch_module._BUDGET
    monkeypatch.setattr(budget, "limit", budget.in_use)
    (root / "A").rename(root / "A.old")
    (root / "A").mkdir()
    assert watch.add(os.path.realpath(root / "A")) == watch_module.UNWATCHED
    assert budget.in_use == budget.limit
    assert watch.add(os.path.realpath(root)) == watch_module.CONTINUED  # no new watch


def test_a_mount_over_a_watched_directory_and_its_unmount_are_seen(tmp_path):
    """A mount or unmount sends no inotify event: the mount table's change drops all trust."""
    root = tmp_path / "repo"
    _write(root, {"app/__init__.py": "", "app/core.py": "X = 1\n"})
    _write(tmp_path / "other", {"mounted.py": "", "pkg/inner.py": ""})
    _settle_and_trust(root)
    _mount("--bind", str(tmp_path / "other"), str(root / "app"))
    try:
        found = walk.walk_repository(root)
        assert _files(found) == ["app/mounted.py", "app/pkg/inner.py"]
        assert found == walk_afresh(root)
        _settle_and_trust(root)
    finally:
        _umount(root / "app")
    found = walk.walk_repository(root)
    assert _files(found) == ["app/__init__.py", "app/core.py"]
    assert found == walk_afresh(root)
    _settle_and_trust(root)
    _mount("-t", "tmpfs", "tmpfs", str(root / "app"))
    try:
        found = walk.walk_repository(root)
        assert _files(found) == []
        assert found == walk_afresh(root)
    finally:
        _umount(root / "app")


def test_a_changed_mount_table_drops_all_trust(tmp_path, monkeypatch):
    """The drain's rule alone (no mounting needed): a change of the mount table distrusts
    every directory."""
    root = tmp_path / "repo"
    _write(root, {"app/__init__.py": ""})
    _settle_and_trust(root)
    watch = _kept_watch(root)
    assert watch.trusted
    monkeypatch.setattr(watch._inotify.mounts, "changed", lambda: True)
    watch.drain()
    assert watch.trusted == set()


def test_without_the_mount_table_nothing_is_watched(tmp_path, monkeypatch):
    """Where the mount table cannot be polled, a mount would go unseen: a stat walk."""
    monkeypatch.setattr(watch_module, "MOUNTINFO_FILE", str(tmp_path / "no-mountinfo"))
    assert watch_module.open_watch() is None
    root = tmp_path / "repo"
    _write(root, {"app/__init__.py": ""})
    _settle_and_trust(root)
    assert kept_module.kept_walk(os.path.realpath(root)).watch is None


def test_an_overlay_is_walked_with_stats(tmp_path):
    """A change in an overlay's lower layer sends no event on the merged directory."""
    assert OVERLAYFS_MAGIC not in watch_module.LOCAL_FILE_SYSTEMS
    for layer in ("lower", "upper", "work", "merged"):
        (tmp_path / layer).mkdir()
    _write(tmp_path / "lower", {"repo/app/__init__.py": "", "repo/app/core.py": ""})
    _mount("-t", "overlay", "overlay", "-o", f"lowerdir={tmp_path}/lower,upperdir="
           f"{tmp_path}/upper,workdir={tmp_path}/work", str(tmp_path / "merged"))
    root = tmp_path / "merged" / "repo"
    try:
        _settle_and_trust(root)
        assert _kept_watch(root).trusted == set()
        (tmp_path / "lower/repo/app/added.py").write_text("")
        assert walk.walk_repository(root) == walk_afresh(root)
    finally:
        forget_indexer_state()
        _umount(tmp_path / "merged")


def test_a_file_system_that_is_not_local_is_walked_with_stats(tmp_path, monkeypatch):
    """The walk trusts a directory only on a local file system."""
    monkeypatch.setattr(watch_module, "_is_local", lambda directory: False)
    root = tmp_path / "repo"
    _write(root, {"app/__init__.py": "", "app/sub/x.py": ""})
    _settle_and_trust(root)
    assert _kept_watch(root).trusted == set()
    stat_calls: list[str] = []
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: stat_calls.append(
        os.fsdecode(path)) or real_stat(path, *a, **k))
    walk.walk_repository(root)
    assert f"{os.path.realpath(root)}/app/sub" in stat_calls


# --- the drain's rules, on crafted events -------------------------------------------------

def _trusted_tree(tmp_path: Path) -> tuple[Path, watch_module.DirectoryWatch, str]:
    root = tmp_path / "repo"
    _write(root, {"A/P/C/x.py": "", "B/y.py": ""})
    _settle_and_trust(root)
    watch = _kept_watch(root)
    real = os.path.realpath(root)
    assert {f"{real}/A/P", f"{real}/A/P/C", f"{real}/B"} <= watch.trusted
    return root, watch, real


def _event(wd: int, mask: int, name: bytes = b"") -> bytes:
    return watch_module.EVENT_HEADER.pack(wd, mask, 0, len(name)) + name


def test_an_overflowed_queue_drops_all_trust(tmp_path):
    _, watch, _ = _trusted_tree(tmp_path)
    with watch_module._LOCK:
        watch._inotify.dispatch(_event(-1, watch_module.IN_Q_OVERFLOW))
    watch.drain()
    assert watch.trusted == set()


def test_a_directory_moved_itself_distrusts_its_subtree(tmp_path):
    """IN_MOVE_SELF on P (its parent's event not read): P and everything below."""
    _, watch, real = _trusted_tree(tmp_path)
    with watch_module._LOCK:
        watch._inotify.dispatch(_event(watch._watched[f"{real}/A/P"], watch_module.IN_MOVE_SELF))
    watch.drain()
    assert not {f"{real}/A/P", f"{real}/A/P/C"} & watch.trusted
    assert {f"{real}/A", f"{real}/B"} <= watch.trusted


def test_a_directory_entry_moved_out_distrusts_its_subtree(tmp_path):
    """IN_MOVED_FROM of the directory P in A (P's own event not read): A, P and below."""
    _, watch, real = _trusted_tree(tmp_path)
    with watch_module._LOCK:
        watch._inotify.dispatch(_event(watch._watched[f"{real}/A"], watch_module.IN_MOVED_FROM
                                       | watch_module.IN_ISDIR, b"P\0\0\0"))
    watch.drain()
    assert not {f"{real}/A", f"{real}/A/P", f"{real}/A/P/C"} & watch.trusted
    assert f"{real}/B" in watch.trusted


# --- threads and processes -------------------------------------------------------------------

def test_a_change_just_after_the_drain_is_read_before_the_walk_falls_back(tmp_path,
                                                                          monkeypatch):
    """The kept result fails (a file gone after the drain): the events are read again
    before the walk takes the trusted listings."""
    root = tmp_path / "repo"
    _write(root, {"app/__init__.py": "", "app/x.py": ""})
    _settle_and_trust(root)
    real_drain = watch_module.DirectoryWatch.drain

    def drain_then_rename(self):
        real_drain(self)
        monkeypatch.setattr(watch_module.DirectoryWatch, "drain", real_drain)
        (root / "app/x.py").rename(root / "app/y.py")  # another process, just then

    monkeypatch.setattr(watch_module.DirectoryWatch, "drain", drain_then_rename)
    found = walk.walk_repository(root)
    assert _files(found) == ["app/__init__.py", "app/y.py"] and found.skipped == []
    assert found == walk_afresh(root)


def test_concurrent_first_walks_share_one_kept_walk_and_one_instance(tmp_path):
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(RACE_SWITCH_INTERVAL_S)
    try:
        _race_first_walks(tmp_path)
    finally:
        sys.setswitchinterval(switch_interval)


def _race_first_walks(tmp_path: Path) -> None:
    roots = [tmp_path / f"r{number}" for number in range(2)]
    for root in roots:
        _write(root, {"a/x.py": "", "b/c/y.py": ""})
    for _ in range(WALK_RACES):
        forget_indexer_state()
        barrier = threading.Barrier(WALK_THREADS)
        kept_ids: list[int] = []

        def first_walk(barrier: threading.Barrier, kept_ids: list[int]) -> None:
            barrier.wait()
            kept_ids.append(id(kept_module.kept_walk(os.path.realpath(roots[0]))))
            walk.walk_repository(roots[0])

        threads = [threading.Thread(target=first_walk, args=(barrier, kept_ids))
                   for _ in range(WALK_THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(set(kept_ids)) == 1
    walk.walk_repository(roots[1])
    assert _inotify_descriptors() == 1  # one instance for both roots
    forget_indexer_state()
    assert _inotify_descriptors() == 0
    assert watch_module._BUDGET.in_use == 0


def test_closing_the_watches_waits_for_the_walk_using_them(tmp_path, monkeypatch):
    root = tmp_path / "repo"
    _write(root, {"app/__init__.py": "", "app/sub/x.py": ""})
    real = os.path.realpath(root)
    closer = threading.Thread(target=forget_indexer_state)
    seen: list[bool] = []
    real_stat = os.stat

    def stat_while_closing(path, *args, **kwargs):
        if os.fsdecode(path) == f"{real}/app/sub" and not closer.is_alive() and not seen:
            closer.start()
            closer.join(PAST_THE_WINDOW_S)
            seen.append(closer.is_alive())  # still waiting for this walk
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat_while_closing)
    found = walk.walk_repository(root)
    closer.join()
    assert seen == [True]
    assert _files(found) == ["app/__init__.py", "app/sub/x.py"]
    assert watch_module._BUDGET.in_use == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_walks_with_locks_and_a_budget_of_its_own(tmp_path, monkeypatch):
    """Forked while the root's walk lock is held and the parent's share of the watches
    is used up: the child walks, with watches of its own."""
    root = tmp_path / "repo"
    _write(root, {"a/b/x.py": "", "d/y.py": ""})
    _settle_and_trust(root)
    budget = watch_module._BUDGET
    monkeypatch.setattr(budget, "limit", budget.in_use)
    kept = kept_module.kept_walk(os.path.realpath(root))
    with kept.lock:
        child = os.fork()
        if child == 0:  # pragma: no cover - the child reports through its exit status
            signal.alarm(CHILD_ALARM_S)  # a lock still held: killed, not hung
            _settle_and_trust(root)
            os._exit(0 if _kept_watch(root).trusted else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert walk.walk_repository(root) == walk_afresh(root)
