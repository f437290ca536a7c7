"""The sandbox that re-runs recorded agent commands, tested for real: real namespaces,
real mounts, real processes (nothing of unshare is mocked). Each test fails if the
isolation it names broke: a file outside the scratch tree changed, a connection got
through, a process outlived its call, a privilege survived."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from ctxdb.agent import sandbox
from ctxdb.agent.sandbox import (
    MAX_ADDRESS_SPACE_BYTES,
    MAX_OUTPUT_BYTES,
    SANDBOX_UID,
    SandboxError,
    SandboxUnavailable,
    run_isolated,
)
from ctxdb.agent.worktree import HARNESS_ENV, ScratchTree

# Seconds a killed sandbox may take beyond its time limit to return.
KILL_SLACK_S = 4.0


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture(scope="module")
def source_git(tmp_path_factory) -> Path:
    """A bare git directory holding one commit of a tiny project."""
    work = tmp_path_factory.mktemp("source")
    _git("init", "--quiet", "--initial-branch=main", cwd=work)
    (work / "README").write_text("a tiny project\n")
    (work / "pkg").mkdir()
    (work / "pkg" / "mod.py").write_text("def answer():\n    return 42\n")
    (work / "data.bin").write_bytes(b"\0large data the store may lack\0")
    _git("add", "-A", cwd=work)
    _git("-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "--quiet",
         "-m", "first", cwd=work)
    bare = tmp_path_factory.mktemp("bare") / "project.git"
    _git("clone", "--quiet", "--bare", str(work), str(bare), cwd=work)
    return bare


@pytest.fixture
def tree(source_git, tmp_path):
    with ScratchTree.create(source_git, "main", parent=tmp_path) as scratch:
        yield scratch


def test_a_scratch_tree_a_killed_process_left_goes_at_the_next_one(source_git, tmp_path):
    """A SIGKILL leaves its process's scratch tree (13-40 MB each, in a trial): the next
    tree made under the same parent removes it. A tree in use (its lock held, by another
    process too), one without a lock file and a symbolic link are left."""
    import fcntl
    import subprocess
    import sys

    from ctxdb.agent import worktree
    from ctxdb.agent.worktree import SCRATCH_LOCK, SCRATCH_PREFIX

    def tree(name: str) -> Path:
        home = tmp_path / f"{SCRATCH_PREFIX}{name}"
        (home / "testbed").mkdir(parents=True)
        (home / "testbed" / "a.py").write_text("x = 1\n")
        (home / SCRATCH_LOCK).touch()
        return home

    left, in_use, unlocked = tree("killed"), tree("in-use"), tree("being-made")
    (unlocked / SCRATCH_LOCK).unlink()
    (tmp_path / f"{SCRATCH_PREFIX}link").symlink_to(in_use)
    # another process holds in_use's lock, as a replay's worker does while it runs
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time; "
         "fd = os.open(sys.argv[1], os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX); "
         "print('held', flush=True); time.sleep(60)", str(in_use / SCRATCH_LOCK)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with ScratchTree.create(source_git, "main", parent=tmp_path) as scratch:
            assert not left.exists()
            assert in_use.is_dir() and unlocked.is_dir()
            assert (tmp_path / f"{SCRATCH_PREFIX}link").is_symlink()
            # the tree made holds its own lock: a sweep from elsewhere leaves it
            fd = os.open(scratch.home / SCRATCH_LOCK, os.O_RDONLY)
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.close(fd)
            worktree._swept.clear()
            assert worktree.remove_orphaned_scratch(tmp_path) == []
    finally:
        holder.kill()
        holder.wait()
    worktree._swept.clear()  # the holder gone, its tree is an orphan now
    assert worktree.remove_orphaned_scratch(tmp_path) == [in_use]


def test_a_sweep_while_a_tree_is_being_locked_leaves_it(source_git, tmp_path, monkeypatch):
    """Another process sweeping between a new tree's lock file being made and locked
    finds no lock file to take (it is made under another name, locked, then renamed): the
    tree stays whole and locked."""
    import fcntl

    from ctxdb.agent import worktree
    from ctxdb.agent.worktree import SCRATCH_LOCK

    flock, swept = fcntl.flock, []

    def sweep_first(fd, operation):
        if not swept:  # the maker's first lock: a sweep lands just before it
            swept.append(True)
            worktree._swept.clear()
            swept.extend(worktree.remove_orphaned_scratch(tmp_path))
        return flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", sweep_first)
    with ScratchTree.create(source_git, "main", parent=tmp_path) as scratch:
        monkeypatch.setattr(fcntl, "flock", flock)
        assert swept == [True]  # it removed nothing
        assert (scratch.path / ".git").is_dir() and (scratch.home / SCRATCH_LOCK).is_file()


def _processes_with(marker: str) -> list[str]:
    """Command lines of the host's processes that contain marker."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{entry.name}: {cmdline}")
    return found


def _assert_none_left(marker: str) -> None:
    deadline = time.monotonic() + 2  # a killed namespace's processes are reaped at once
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_with(marker) == []


def test_writes_outside_the_scratch_tree_fail_and_change_nothing(tree, tmp_path):
    beside = tmp_path / "beside-the-tree.txt"  # on the host, next to the tree
    beside.write_text("host\n")
    beside.chmod(0o666)
    # /var is shown inside, read-only: only the mount protects a world-writable file
    with open(f"/var/tmp/ctxdb-sandbox-{secrets.token_hex(4)}", "w") as handle:
        shown = Path(handle.name)
        handle.write("host\n")
    shown.chmod(0o666)
    in_etc = Path(f"/etc/ctxdb-sandbox-{secrets.token_hex(4)}")
    in_root = Path(f"/root/ctxdb-sandbox-{secrets.token_hex(4)}")
    try:
        for target in (beside, shown, Path("/etc/hostname"), in_etc, in_root,
                       Path("/testbed/../escaped")):
            result = tree.run(f"echo pwned >> {target}; echo pwned > {target}")
            assert result.returncode != 0, (target, result.output)
        assert beside.read_text() == "host\n"
        assert shown.read_text() == "host\n"
        assert not in_etc.exists() and not in_root.exists()
        assert not (tree.home / "escaped").exists()
        assert "pwned" not in Path("/etc/hostname").read_text()
        assert "Read-only file system" in tree.run(f"echo pwned > {shown}").output
    finally:
        shown.unlink()


def test_writes_in_the_tree_show_in_diff_and_submission(tree):
    index_before = (tree.path / ".git" / "index").read_bytes()
    result = tree.run("echo 'more' >> README && printf 'NEW = 1\\n' > pkg/new.py && pwd")
    assert (result.returncode, result.output, result.timed_out) == (0, "/testbed\n", False)
    diff, submission = tree.diff(), tree.submission()
    assert "+more" in diff and "pkg/new.py" not in diff  # untracked: not in git diff
    assert "+more" in submission and "+NEW = 1" in submission
    assert tree.changed_paths() == ["README", "pkg/new.py"]
    # the tree's own index is left as it was: the new file still untracked inside
    assert (tree.path / ".git" / "index").read_bytes() == index_before
    assert tree.run("git status --porcelain").output == " M README\n?? pkg/new.py\n"
    # exactly what the harness's submit command prints, its marker line removed
    submitted = tree.run("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && "
                         "git diff --cached").output
    assert submitted.splitlines(keepends=True)[1:] == submission.splitlines(keepends=True)


def test_a_tree_nested_deeper_than_python_recurses_is_still_removed(source_git, tmp_path):
    nest = ("import os\n"
            "for _ in range(1500):\n"
            "    os.mkdir('d' * 200)\n"
            "    os.chdir('d' * 200)\n"
            "open('bottom', 'w').close()\n")
    with ScratchTree.create(source_git, "main", parent=tmp_path) as scratch:
        assert scratch.run(f"python3 -c {_shell_quote(nest)}").returncode == 0
        home = scratch.home
    assert not home.exists()  # shutil.rmtree alone hits RecursionError and leaves it


def test_a_tree_whose_removal_a_signal_cuts_short_is_still_removed(tmp_path, monkeypatch):
    from ctxdb.agent import worktree

    home = tmp_path / "scratch"
    (home / "tree" / "pkg").mkdir(parents=True)
    (home / "tree" / "pkg" / "mod.py").write_text("x = 1\n")
    (home / "host.git").mkdir()

    remove = shutil.rmtree

    def stopped_midway(path, ignore_errors=False):  # SIGTERM after the first directory
        remove(Path(path) / "host.git")
        raise KeyboardInterrupt

    monkeypatch.setattr(worktree.shutil, "rmtree", stopped_midway)
    with pytest.raises(KeyboardInterrupt):
        worktree.remove_tree(home)
    assert not home.exists()


def test_the_agents_git_commands_work_inside(tree):
    result = tree.run("echo x >> pkg/mod.py && git stash --quiet && git status --porcelain "
                      "&& git stash pop --quiet && git checkout --quiet pkg/mod.py && git status "
                      "--porcelain && echo clean")
    assert (result.returncode, result.output) == (0, "clean\n")
    assert tree.submission() == ""


def test_a_run_replayed_on_the_checkout_it_worked_in(source_git, tmp_path):
    """A local run's workdir is its own checkout: the scratch tree is bound over it, and
    still borrows that checkout's objects (shown elsewhere: its path is under the bind)."""
    checkout = tmp_path / "project"
    _git("clone", "--quiet", str(source_git), str(checkout), cwd=tmp_path)
    with ScratchTree.create(checkout, "main", parent=tmp_path,
                            workdir=str(checkout)) as scratch:
        done = scratch.run("echo more >> README && pwd && git diff --stat && "
                           "git show --stat --format=%s HEAD | head -n 1")
        assert (done.returncode, done.output) == (0, f"{checkout}\n README | 1 +\n"
                                                  " 1 file changed, 1 insertion(+)\nfirst\n")
        assert "+more" in scratch.submission()
    assert (checkout / "README").read_text() == "a tiny project\n"  # the host's, unchanged
    # a workdir under /tmp the host lacks is made in the private /tmp
    elsewhere = tmp_path / "never-made"
    with ScratchTree.create(source_git, "main", parent=tmp_path,
                            workdir=str(elsewhere)) as scratch:
        assert scratch.run("pwd && cat pkg/mod.py | head -n 1").output == \
            f"{elsewhere}\ndef answer():\n"
    assert not elsewhere.exists()
    # under a host directory (shown read-only) it must exist there: said so
    with ScratchTree.create(source_git, "main", parent=tmp_path,
                            workdir="/usr/ctxdb-no-such-dir") as scratch:
        with pytest.raises(SandboxError, match="make the mount point /usr/ctxdb-no-such-dir "
                                               r"\(under a host directory it must exist"):
            scratch.run("true")


def test_a_source_borrowing_objects_by_a_relative_path_replays(source_git, tmp_path):
    """A source whose own alternates name a store relative to its objects (shown inside
    at the host's paths: under /var, not the private /tmp)."""
    shared = Path(tempfile.mkdtemp(prefix="ctxdb-sandbox-", dir="/var/tmp"))
    shared.chmod(0o755)  # the sandbox's user reads the stores
    try:
        _git("clone", "--quiet", "--bare", str(source_git), str(shared / "lender.git"),
             cwd=tmp_path)
        _git("clone", "--quiet", "--bare", "--shared", str(shared / "lender.git"),
             str(shared / "borrower.git"), cwd=tmp_path)
        (shared / "borrower.git" / "objects" / "info" / "alternates").write_text(
            "../../lender.git/objects\n")
        with ScratchTree.create(shared / "borrower.git", "main", parent=tmp_path) as scratch:
            done = scratch.run("git show --format=%s --stat HEAD | head -n 1 && cat README")
            assert (done.returncode, done.output) == (0, "first\na tiny project\n")
    finally:
        shutil.rmtree(shared)


def test_a_blob_absent_from_the_store_is_skipped_not_reported_deleted(source_git, tmp_path):
    lacking = tmp_path / "lacking.git"
    _git("clone", "--quiet", "--bare", "--no-local", str(source_git), str(lacking),
         cwd=tmp_path)
    blob = _git("rev-parse", "main:data.bin", cwd=lacking).strip()
    _drop_object(lacking, blob)
    with ScratchTree.create(lacking, "main", parent=tmp_path) as scratch:
        assert [s.path for s in scratch.skipped] == ["data.bin"]
        assert not (scratch.path / "data.bin").exists()
        assert scratch.run("git status --porcelain").output == ""
        assert scratch.submission() == "" and scratch.diff() == ""
        scratch.run("echo more >> README")
        assert "+more" in scratch.submission()  # the absent blob is not in the way


def _drop_object(git_dir: Path, blob: str) -> None:
    """Make git_dir lack one blob: unpack its pack to loose objects, remove the blob's."""
    packs = list((git_dir / "objects" / "pack").glob("*.pack"))
    for pack in packs:
        moved = pack.with_suffix(".moved")
        pack.rename(moved)
        pack.with_suffix(".idx").unlink()
        subprocess.run(["git", "unpack-objects", "-q"], cwd=git_dir, stdin=moved.open("rb"),
                       check=True)
        moved.unlink()
    (git_dir / "objects" / blob[:2] / blob[2:]).unlink()


def test_no_network_even_to_the_hosts_loopback(tree):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        result = tree.run(f"python3 -c \"import socket; socket.create_connection(("
                          f"'127.0.0.1', {port}), timeout=3); print('connected')\"", 10)
        assert result.returncode != 0 and "connected" not in result.output
        assert "unreachable" in result.output or "refused" in result.output
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


@pytest.mark.parametrize("shape", [
    "{sleep}", "{sleep} & wait", "(setsid {sleep} &); echo left",
    # the namespace's init leaves the sandbox's process group, its output closed or not
    "exec setsid {sleep}", "exec setsid sh -c 'exec >/dev/null 2>&1; exec {sleep}'"])
def test_a_command_that_never_ends_is_killed_with_all_it_started(tree, shape):
    marker = f"1000.{secrets.randbelow(10**6):06d}"  # an argument no other process has
    timeout_s = 1.5
    started = time.monotonic()
    result = tree.run(shape.format(sleep=f"sleep {marker}"), timeout_s)
    elapsed = time.monotonic() - started
    if "echo left" in shape:  # ended by itself: what it left in the background dies too
        assert (result.timed_out, result.output) == (False, "left\n")
    else:
        assert result.timed_out and result.returncode != 0
    assert elapsed < timeout_s + KILL_SLACK_S
    _assert_none_left(marker)


def test_a_fork_loop_is_contained_and_ended(tree):
    marker = f"fork-loop-{secrets.token_hex(4)}"
    loop = (f"import os  # {marker}\n"
            "while True:\n"
            "    try:\n"
            "        os.fork()\n"
            "    except OSError:\n"
            "        pass\n")
    timeout_s = 3.0
    started = time.monotonic()
    result = tree.run(f"python3 -c {_shell_quote(loop)}", timeout_s)
    assert result.timed_out
    assert time.monotonic() - started < timeout_s + KILL_SLACK_S
    _assert_none_left(marker)
    assert tree.run("echo alive").output == "alive\n"  # and the next command runs


# Holds every process its sandbox may have: forks sleeping children until a fork fails,
# says so in the tree (file "holding"), then waits for the file "release".
_HOLD_THE_PROCESS_LIMIT = """
import os, signal, time
children = []
while True:
    try:
        pid = os.fork()
    except BlockingIOError:
        break
    if pid == 0:
        signal.pause()
        os._exit(0)
    children.append(pid)
with open("holding", "w") as handle:
    handle.write(str(len(children)))
while not os.path.exists("release"):
    time.sleep(0.05)
print(len(children))
"""
_FORK_ONCE = ("import os\n"
              "pid = os.fork()\n"
              "if pid == 0:\n"
              "    os._exit(0)\n"
              "os.waitpid(pid, 0)\n"
              "print('forked')\n")


def test_sandboxes_side_by_side_do_not_share_the_process_limit(source_git, tmp_path,
                                                               monkeypatch):
    """A command holding all the processes its sandbox may have leaves another sandbox's
    command free to fork: the limit counts each sandbox's processes alone (a user
    namespace per command), not every process of the sandbox's uid on the host."""
    monkeypatch.setattr(sandbox, "MAX_PROCESSES", 24)  # reached at once
    with ScratchTree.create(source_git, "main", parent=tmp_path) as holder_tree, \
            ScratchTree.create(source_git, "main", parent=tmp_path) as other_tree:
        held: list = []

        def hold() -> None:
            try:
                held.append(holder_tree.run(f"python3 -c {_shell_quote(_HOLD_THE_PROCESS_LIMIT)}",
                                            60))
            except BaseException as error:  # shown by the assertion below, not lost
                held.append(error)

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            deadline = time.monotonic() + 30
            while not (holder_tree.path / "holding").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert (holder_tree.path / "holding").exists(), "the holder never reached its limit"
            result = other_tree.run(f"python3 -c {_shell_quote(_FORK_ONCE)}", 30)
            assert (result.returncode, result.output) == (0, "forked\n")
        finally:
            (holder_tree.path / "release").write_text("")
            holder.join()
        # the holder did run into its own limit: at most MAX_PROCESSES of its processes
        assert isinstance(held[0], sandbox.CommandResult), held[0]
        assert not held[0].timed_out
        assert 0 < int(held[0].output) < sandbox.MAX_PROCESSES


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


def test_privileges_are_gone(tree):
    checks = {
        "id -u": f"{SANDBOX_UID}\n",
        "grep CapEff /proc/self/status": "CapEff:\t0000000000000000\n",
        "grep NoNewPrivs /proc/self/status": "NoNewPrivs:\t1\n",
    }
    for command, expected in checks.items():
        assert tree.run(command).output == expected, command
    for trick in ("mount -o remount,rw /usr",
                  "mount -t tmpfs none /testbed/pkg",
                  "umount /testbed",
                  "chmod 777 /etc/passwd",
                  "chown nobody /etc/passwd",
                  "su -c true root",
                  # a user namespace of its own makes it 'root' there, not on the mounts
                  "unshare -rm sh -c 'mount -o remount,rw /etc && touch /etc/pwned'",
                  "ls /root"):
        result = tree.run(trick)
        assert result.returncode != 0, (trick, result.output)
    assert not Path("/etc/pwned").exists()
    assert oct(Path("/etc/passwd").stat().st_mode & 0o777) == "0o644"


def test_a_flood_of_output_comes_back_bounded(tree):
    started = time.monotonic()
    result = tree.run("head -c 10000000 /dev/zero | tr '\\0' a; echo done >&2", 30)
    assert time.monotonic() - started < 10
    assert (result.returncode, result.timed_out, result.output_truncated) == (0, False, True)
    assert len(result.output) == MAX_OUTPUT_BYTES and set(result.output) == {"a"}


def test_a_memory_hog_fails_instead_of_taking_the_hosts_memory(tree):
    # one allocation past the address-space limit: refused at once, nothing is touched
    result = tree.run(f"python3 -c 'bytearray({MAX_ADDRESS_SPACE_BYTES})'; echo after", 30)
    assert "MemoryError" in result.output and result.output.endswith("after\n")
    assert not result.timed_out


def test_the_harness_environment_and_python_are_there(tree):
    result = tree.run('echo "$PAGER $TQDM_DISABLE $HOME"; python -c "print(1 + 1)"; '
                      "python3 -c 'import sys; print(sys.version_info[0])'")
    assert result.output == f"{HARNESS_ENV['PAGER']} 1 /tmp\n2\n3\n"


def test_a_setup_step_that_fails_is_named(tmp_path):
    tree_dir = tmp_path / "tree"
    tree_dir.mkdir()
    missing = tmp_path / "no-such-store"
    with pytest.raises(SandboxError, match=f"sandbox step 'bind {missing} at"):
        run_isolated("true", tree_dir, timeout_s=10, env={}, read_only_paths=[missing])
    for inside in ("relative/place", "/", "/a/../b"):  # never beside the sandbox's root
        with pytest.raises(SandboxError, match=f"the place inside {inside!r} must be"):
            run_isolated("true", tree_dir, timeout_s=10, env={},
                         read_only_paths=[(tree_dir, inside)])
    for workdir in ("relative", "/", "/tmp/..", "/dev", "/proc/1", "/testbed/"):
        with pytest.raises(SandboxError, match=f"workdir {workdir!r}: expected an absolute"):
            run_isolated("true", tree_dir, workdir=workdir, timeout_s=10, env={})
    # a library caller's time limit is bounded as the CLI's --timeout is
    for timeout in (0, -1, 1e9, float("inf"), float("nan"), True, "10"):
        with pytest.raises(SandboxError, match=r"timeout_s .*: expected seconds above 0, "
                           r"at most 600"):
            run_isolated("true", tree_dir, timeout_s=timeout, env={})


def test_a_setup_command_that_fails_says_how_and_what_it_printed(source_git, tmp_path,
                                                                 monkeypatch):
    from ctxdb.agent import worktree
    from ctxdb.agent.worktree import ScratchTreeError

    with pytest.raises(ScratchTreeError, match=r"the setup command 'exit 3' failed \(exit 3; "
                       r"it printed nothing\)$"):
        ScratchTree.create(source_git, "main", parent=tmp_path, setup_command="exit 3")
    with pytest.raises(ScratchTreeError, match=r"failed \(exit 1\): boom$"):
        ScratchTree.create(source_git, "main", parent=tmp_path,
                           setup_command="echo boom; exit 1")
    monkeypatch.setattr(worktree, "SETUP_TIMEOUT_S", 1)
    with pytest.raises(ScratchTreeError, match=r"failed \(timed out after 1 s; it printed "
                       r"nothing\)$"):
        ScratchTree.create(source_git, "main", parent=tmp_path, setup_command="sleep 30")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("ctxdb-scratch-")]


def test_a_missing_unshare_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no unshare there
    with pytest.raises(SandboxUnavailable, match="unshare"):
        sandbox._run("true", tmp_path, workdir="/testbed", timeout_s=5, env={},
                     read_only_paths=())


def test_only_the_sandboxs_own_process_gets_its_ids_mapped():
    """The id maps are written only for a process in the sandbox's pid namespace and in a
    user namespace other than ours: a pid named on the status pipe that is anyone else's
    (a pid reused once the sandbox's process died) is refused, its maps left unwritten."""
    outsider = subprocess.Popen(["unshare", "--user", "sleep", "30"])  # unmapped, not ours
    sandbox_like = subprocess.Popen(["unshare", "--pid", "--fork", "sleep", "30"])
    try:
        uid_map = Path(f"/proc/{outsider.pid}/uid_map")
        made = ((outsider, "user"), (sandbox_like, "pid_for_children"))
        deadline = time.monotonic() + 5  # until both unshare calls have made their namespace
        while (any(_namespace(process.pid, kind) in (None, _namespace(os.getpid(), kind))
                   for process, kind in made)
               and time.monotonic() < deadline):
            time.sleep(0.01)
        assert all(_namespace(process.pid, kind) not in (None, _namespace(os.getpid(), kind))
                   for process, kind in made), "unshare made no namespace in 5 s"
        with pytest.raises(SandboxError, match="in the sandbox's pid namespace"):
            sandbox._map_ids(sandbox_like, outsider.pid)
        with pytest.raises(SandboxError, match="in the sandbox's pid namespace"):
            sandbox._map_ids(sandbox_like, os.getpid())
        assert uid_map.read_text() == ""
    finally:
        for process in (outsider, sandbox_like):
            process.kill()
            process.wait()


def _namespace(pid: int, kind: str) -> str | None:
    """The namespace /proc/PID/ns/KIND names; None while it has none to name (a new pid
    namespace's pid_for_children reads so until its first process is made)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except FileNotFoundError:
        return None


def test_a_machine_without_user_namespaces_is_named(tmp_path, monkeypatch):
    """The setup runs, then unshare --user fails: the error says it was that step."""
    real_unshare = shutil.which("unshare")
    fake = tmp_path / "bin" / "unshare"
    fake.parent.mkdir()
    fake.write_text("#!/bin/bash\n"
                    'for arg in "$@"; do [ "$arg" = --user ] && { '
                    'echo "unshare: unshare failed: No space left on device" >&2; exit 1; }; done\n'
                    f'exec {real_unshare} "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    tree_dir = tmp_path / "tree"
    tree_dir.mkdir()
    with pytest.raises(SandboxUnavailable,
                       match="'enter a user namespace for the command' failed.*"
                             "max_user_namespaces.*No space left"):
        sandbox._run("true", tree_dir, workdir="/testbed", timeout_s=10, env={},
                     read_only_paths=())


def test_a_program_named_missing_is_not_found_and_the_others_are(tree):
    result = tree.run("sed --version; echo $?; python --version >/dev/null; echo $?; "
                      "python3 -c 'print(3)'", missing_programs=["sed", "python"])
    assert result.output == ("bash: sed: command not found\n127\n"
                             "bash: python: command not found\n127\n3\n")
    assert tree.run("sed --version >/dev/null; echo $?").output == "0\n"  # only when asked
    for bad in ("../bin/sed", "-rf", "", ".hidden", "a/b"):
        with pytest.raises(SandboxError, match="missing_programs"):
            tree.run("true", missing_programs=[bad])


def test_a_sandbox_root_a_stopped_process_left_goes_at_the_next_replay(tmp_path):
    """A replay stopped between making a sandbox's root (an empty mount point) and removing
    it left the directory in the temporary directory; the next replay removes what is
    older than any command runs, and leaves a younger root or one that is not empty."""
    import os
    import time

    from ctxdb.agent.sandbox import (
        SANDBOX_ROOT_PREFIX,
        SANDBOX_ROOT_STALE_S,
        remove_stale_sandbox_roots,
    )

    old, young, full = (tmp_path / f"{SANDBOX_ROOT_PREFIX}{name}" for name in ("a", "b", "c"))
    for root in (old, young, full):
        root.mkdir()
    (full / "kept").write_text("not ours", encoding="utf-8")
    long_ago = time.time() - SANDBOX_ROOT_STALE_S - 1
    for root in (old, full):
        os.utime(root, (long_ago, long_ago))
    assert remove_stale_sandbox_roots(str(tmp_path)) == [str(old)]
    assert not old.exists() and young.is_dir() and full.is_dir()
