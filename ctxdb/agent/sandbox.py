"""Run one shell command isolated: only its scratch tree is writable, no network.

A recorded agent step is re-run to move files, never to be trusted: the command may
write anywhere, fork without end, print without end, listen or connect. Here it runs
in new user, mount, network, pid, IPC and UTS namespaces made by ``unshare``
(util-linux), inside a fresh root built for the call:

- a small tmpfs as ``/``, holding a read-only bind mount of each of the host's
  top-level directories (``/usr``, ``/etc``, ``/work``, …) and its top-level symlinks
  recreated as symlinks (``/bin -> usr/bin``); the host's ``/proc``, ``/sys``,
  ``/dev``, ``/tmp`` and ``/run`` are not shown (fresh ones or none stand in);
- the scratch tree bind-mounted read-write at ``workdir`` (``/testbed`` by default;
  it need not exist on the host when it lies outside the host's top-level directories
  or under ``/tmp``), over whatever the host holds there;
- a private tmpfs ``/tmp`` (``HOME`` is ``/tmp``), a minimal ``/dev`` (null, zero,
  full, random, urandom, tty bound from the host; a small ``/dev/shm``), a fresh
  ``/proc`` of the new pid namespace;
- a down loopback as the only network interface.

Then it sets resource limits (``prlimit``: processes, file size, address space, no core
files), enters the command's user namespace (below), chroots, drops every privilege
(``setpriv``: uid and gid ``SANDBOX_UID``, no supplementary groups, no-new-privs, empty
capability and bounding sets: as root inside the namespaces a command could remount the
read-only binds read-write) and runs the command with ``bash -c`` in ``workdir``, as the
recorded harness did.

The user namespace is the command's alone, made once the root is built and the limits
set (both as the host's root, as without it). It maps every id to itself, written by
this process into its ``uid_map`` and ``gid_map`` while the setup script waits
(``unshare``'s own ``--map-users`` needs ``newuidmap``, one more package), so files,
``id`` and ``ls -l`` read as without it. It is there because the kernel (Linux 5.14 and
later) counts a uid's processes per user namespace: ``RLIMIT_NPROC`` bounds each call's
command alone, so sandboxes side by side (a replay's workers, a replay beside a test
run's fork loop) do not take each other's processes. Together they may run as many
processes as the limit times the calls running; the host's pid and memory limits still
bound them all.

Why ``unshare`` and not ``bwrap``: bubblewrap is not installed on a fresh machine of
this project's kind and would be one more system package to bring; ``unshare``,
``setpriv``, ``prlimit`` and ``chroot`` come with util-linux and coreutils, which every
Debian machine has. The price is running as root (making namespaces and mounts needs
it, here where unprivileged user namespaces are not relied on); the privileges are
dropped before the command runs.

Time limit: the sandbox is the leader of a process group of its own and the command is
pid 1 of its pid namespace. On timeout the group is killed, and the namespace's init by
a pidfd taken once it named itself: the command can leave the group (``exec setsid``),
and ``unshare --kill-child``'s parent-death signal does not reach it, as the kernel
clears that signal when ``setpriv`` changes the uid. The kernel kills every process
left in a pid namespace whose init dies, so daemons and fork loops end too and the call
never hangs. When the command ends by itself, its namespace ends with it: what it left
running in the background is killed.

If the sandbox cannot be made (``unshare`` missing, not permitted), ``SandboxUnavailable``
says at which step and what was expected; the check runs once per process and its
verdict is kept.
"""

from __future__ import annotations

import os
import posixpath
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

from .trajectory import DEFAULT_WORKDIR, MAX_COMMAND_TIMEOUT_S

# The unprivileged user and group the command runs as (nobody/nogroup on Debian).
SANDBOX_UID = 65534
SANDBOX_GID = 65534

# What a command may use. RLIMIT_NPROC counts the processes of SANDBOX_UID in the call's
# own user namespace: a fork loop is stopped at this many, in its sandbox alone.
MAX_PROCESSES = 512
# RLIMIT_FSIZE: no single file written (in the tree, in /tmp) may grow past this.
MAX_FILE_BYTES = 512 * 1024 * 1024
# RLIMIT_AS: one process's address space, so one process of a recorded command cannot
# take the host's memory (a replay runs beside others on a shared machine; all of a
# command's processes together are not capped: docs/replay.md); a Python script with
# its libraries maps well under 1 GiB.
MAX_ADDRESS_SPACE_BYTES = 8 * 1024 ** 3
# The private /tmp is memory: bounded.
TMP_SIZE = "512m"
SHM_SIZE = "64m"
# The new root holds only mount points, symlinks and the python shim.
ROOT_SIZE = "1m"
DEV_SIZE = "64k"

# What a call returns of the command's output (stdout and stderr merged, as the harness
# recorded them): the first MAX_OUTPUT_BYTES; the rest is read and dropped so the
# command never blocks on a full pipe.
MAX_OUTPUT_BYTES = 1024 * 1024

# After a kill, how long to wait for the output pipe to close before giving up on it.
KILL_GRACE_S = 5.0

# The command's PATH inside. SHIM_DIR comes first: it holds `python` when the host has
# no plain `python` reachable there (see _python_shim_target).
SHIM_DIR = "/.ctxdb-shims"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# A program the caller says is missing (``missing_programs``: the recorded run's
# environment lacked it) is this stand-in in SHIM_DIR, named by a link: it fails as
# bash fails on a program it cannot find.
MISSING_PROGRAM_STAND_IN = ".missing-program"
MISSING_PROGRAM_SCRIPT = '#!/bin/sh\necho "bash: ${0##*/}: command not found" >&2\nexit 127\n'
# what a missing program's name may be: a file name in SHIM_DIR (at most NAME_MAX, 255
# bytes), never a path or an option
PROGRAM_NAME = re.compile(r"[A-Za-z0-9_+][A-Za-z0-9._+-]{0,254}")
# Every command's environment starts from this; the caller's env is laid over it.
BASE_ENV = {
    "PATH": f"{SHIM_DIR}:{SYSTEM_PATH}",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    # Python and git read and write the trees' non-ASCII sources as UTF-8
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
}

# Host top-level entries not shown inside: fresh ones replace /proc, /dev and /tmp;
# /sys and /run (sockets of the host's services) are left out.
HIDDEN_TOP_LEVEL = frozenset({"proc", "sys", "dev", "tmp", "run"})
# The sandbox's own mounts: no tree is bound at or under them.
SYSTEM_TOP_LEVEL = frozenset({"proc", "sys", "dev"})
# Bound read-write from the host's /dev into the minimal /dev.
DEVICE_NODES = ("null", "zero", "full", "random", "urandom", "tty")

PROBE_TIMEOUT_S = 30  # the one-time check that this machine can make the sandbox
OUTPUT_READ_BYTES = 65536  # one read of the command's output pipe
# Exit status of the setup script when a step failed (its message went to the status pipe).
_SETUP_FAILED = 125
_READY = "ready"
_FAILED = "failed"
# Status lines: every setup step succeeded (the command's user namespace is made next);
# the user namespace is made, with the host pid of the process in it, which waits for
# its id maps on the map pipe.
_STEPS_DONE = "steps-done"
_IN_NAMESPACES = "in-namespaces"
# Every uid (gid) maps to itself: the whole 32-bit range but (uid_t)-1, which is no id.
IDENTITY_ID_MAP = "0 0 4294967295\n"


class SandboxError(RuntimeError):
    """The sandbox could not be set up for a command."""


class SandboxUnavailable(SandboxError):
    """This machine cannot make the sandbox at all (checked once per process)."""


@dataclass(frozen=True)
class CommandResult:
    returncode: int  # the command's exit status; -9 (killed) when it timed out
    # stdout and stderr merged, the first MAX_OUTPUT_BYTES decoded with errors="replace"
    output: str
    timed_out: bool
    duration_s: float
    # True when the command printed more than MAX_OUTPUT_BYTES
    output_truncated: bool = False


# a read-only path: a host path shown at the same place, or (host path, place inside)
ReadOnlyPath = Path | tuple[Path, str]


def run_isolated(command: str, tree: Path, *, workdir: str = DEFAULT_WORKDIR,
                 timeout_s: float, env: Mapping[str, str],
                 read_only_paths: Sequence[ReadOnlyPath] = (),
                 missing_programs: Sequence[str] = ()) -> CommandResult:
    """Run ``command`` with ``bash -c`` in ``workdir``, where ``tree`` is mounted
    read-write; nothing else of the host is writable and there is no network.

    ``env`` is laid over ``BASE_ENV`` (PATH with the python shim, HOME=/tmp, a UTF-8
    locale); nothing of this process's own environment passes in. ``read_only_paths``
    are host paths also shown read-only inside, for paths the host's top-level binds do
    not show (e.g. a git object store under the host's /tmp that the tree borrows through
    alternates): at the same place, or at the place a ``(host path, place)`` pair names
    (for a path the tree's own bind at ``workdir`` would hide). ``tree`` must be writable
    by ``SANDBOX_UID``.
    ``missing_programs`` are names a command finds missing (``command not found``, exit
    127) though the host has them: the programs the environment being reproduced lacked.

    On timeout the whole sandbox is killed and ``timed_out`` is set. Raises
    ``SandboxUnavailable`` if this machine cannot make the sandbox, ``SandboxError`` if
    this call's setup failed (e.g. ``tree`` does not exist)."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) \
            or not 0 < timeout_s <= MAX_COMMAND_TIMEOUT_S:  # (NaN and infinity too)
        raise SandboxError(f"timeout_s {timeout_s!r}: expected seconds above 0, at most "
                           f"{MAX_COMMAND_TIMEOUT_S}: a command's time limit is a bound")
    top = workdir.split("/")[1] if workdir.startswith("/") else ""
    if not top or posixpath.normpath(workdir) != workdir or top in SYSTEM_TOP_LEVEL:
        raise SandboxError(f"workdir {workdir!r}: expected an absolute, normalized path below "
                           f"/, not under /{', /'.join(sorted(SYSTEM_TOP_LEVEL))}")
    for name in missing_programs:
        if not PROGRAM_NAME.fullmatch(name):
            raise SandboxError(f"missing_programs: {name!r} is not a program's name "
                               "(letters, digits, '.', '_', '+', '-'; not a path)")
    ensure_sandbox()
    return _run(command, tree, workdir=workdir, timeout_s=timeout_s, env=env,
                read_only_paths=read_only_paths, missing_programs=missing_programs)


_availability_lock = threading.Lock()
_availability: SandboxUnavailable | bool | None = None  # None: not checked yet


def ensure_sandbox() -> None:
    """Check once per process that a sandbox can be made and behaves (the command runs
    as SANDBOX_UID in the workdir); raise the same SandboxUnavailable every time if not."""
    global _availability
    with _availability_lock:
        if _availability is None:
            try:
                _probe()
                _availability = True
            except SandboxUnavailable as error:
                _availability = error
        if isinstance(_availability, SandboxUnavailable):
            raise _availability


def _probe() -> None:
    if os.geteuid() != 0:
        raise SandboxUnavailable(
            "sandbox step 'run as root' failed: expected this process to be root (making "
            f"namespaces and mounts, then dropping to uid {SANDBOX_UID}, need it); it runs "
            f"as uid {os.geteuid()}")
    with tempfile.TemporaryDirectory(prefix="ctxdb-sandbox-probe-") as scratch:
        tree = Path(scratch)
        os.chown(tree, SANDBOX_UID, SANDBOX_GID)
        try:
            result = _run('id -u; id -g; pwd; touch probe && echo writable', tree,
                          workdir=DEFAULT_WORKDIR, timeout_s=PROBE_TIMEOUT_S, env={},
                          read_only_paths=())
        except SandboxError as error:
            raise SandboxUnavailable(str(error)) from None
    expected = f"{SANDBOX_UID}\n{SANDBOX_GID}\n{DEFAULT_WORKDIR}\nwritable\n"
    if result.output != expected:
        raise SandboxUnavailable(
            "sandbox step 'chroot, prlimit, setpriv, env -C' failed: expected the probe "
            f"command to run as uid {SANDBOX_UID} in a writable {DEFAULT_WORKDIR}, "
            f"got exit status {result.returncode} and output {result.output!r}")


def _python_shim_target() -> str | None:
    """The interpreter `python` should name inside, or None when the system PATH already
    has a plain `python` (or no python3 at all). The host's own `python` may live where
    the unprivileged user cannot reach (a pyenv shim under /root): only what the
    sandbox's PATH shows counts."""
    if shutil.which("python", path=SYSTEM_PATH):
        return None
    return shutil.which("python3", path=SYSTEM_PATH)


def _top_level_entries() -> tuple[list[str], list[tuple[str, str]]]:
    """The host's top-level directories to bind and its top-level symlinks (name, target)."""
    directories, symlinks = [], []
    with os.scandir("/") as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name in HIDDEN_TOP_LEVEL:
                continue
            if entry.is_symlink():
                symlinks.append((entry.name, os.readlink(entry.path)))
            elif entry.is_dir(follow_symlinks=False):
                directories.append(entry.name)
    return directories, symlinks


def _setup_script(new_root: str, tree: str, workdir: str, env: Mapping[str, str],
                  read_only_paths: Sequence[tuple[str, str]], status_fd: int, map_fd: int,
                  missing_programs: Sequence[str] = ()) -> str:
    """The bash script run as root inside the new namespaces: each step is one command
    that must succeed. What a step says on stderr goes to the status pipe; the first
    that fails adds 'failed<TAB>what it was meant to do' there and ends the script. When
    all have run, it says 'steps-done', sets the limits and enters a user namespace of
    its own, says 'in-namespaces HOST_PID' on the status pipe and waits for a line on the
    map pipe (the caller writes the namespace's id maps meanwhile; the pipe closed
    without a line ends the script).
    Then 'ready' goes to the status pipe, both pipes are closed, and the command is
    exec'd ($1 of the script). Steps are few and batched: this runs for every command."""
    steps: list[tuple[str, list[str]]] = []

    def step(what: str, *argv: str) -> None:
        steps.append((what, list(argv)))

    root = new_root
    directories, symlinks = _top_level_entries()
    shim_target = None if "python" in missing_programs else _python_shim_target()
    step("mount a tmpfs as the new root", "mount", "-t", "tmpfs", "-o",
         f"size={ROOT_SIZE},mode=0755,nosuid,nodev", "ctxdb-sandbox", root)
    mount_points = [f"{root}/{name}" for name in (*directories, "proc", "dev", "tmp", "run")]
    if shim_target is not None or missing_programs:
        mount_points.append(f"{root}{SHIM_DIR}")
    step("make the mount points in the new root", "mkdir", "-p", *mount_points)
    for name, target in symlinks:
        step(f"recreate the symlink /{name}", "ln", "-s", target, f"{root}/{name}")
    for name in directories:
        step(f"bind /{name} read-only", "mount", "--bind", "-o", "ro,nosuid,nodev",
             f"/{name}", f"{root}/{name}")
    step("mount a fresh /proc of the new pid namespace", "mount", "-t", "proc", "-o",
         "nosuid,nodev,noexec", "proc", f"{root}/proc")
    step("mount a private /tmp", "mount", "-t", "tmpfs", "-o",
         f"size={TMP_SIZE},mode=1777,nosuid,nodev", "ctxdb-tmp", f"{root}/tmp")
    step("mount a minimal /dev", "mount", "-t", "tmpfs", "-o",
         f"size={DEV_SIZE},mode=0755,nosuid", "ctxdb-dev", f"{root}/dev")
    step("make the /dev entries", "mkdir", f"{root}/dev/shm")
    step("make the /dev nodes' mount points", "touch",
         *(f"{root}/dev/{node}" for node in DEVICE_NODES))
    for node in DEVICE_NODES:
        step(f"bind /dev/{node}", "mount", "--bind", f"/dev/{node}", f"{root}/dev/{node}")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        step(f"link /dev/{name}", "ln", "-s", target, f"{root}/dev/{name}")
    step("mount /dev/shm", "mount", "-t", "tmpfs", "-o",
         f"size={SHM_SIZE},mode=1777,nosuid,nodev", "ctxdb-shm", f"{root}/dev/shm")
    if read_only_paths:  # after /tmp is mounted: they may lie under it
        step("make the read-only paths' mount points", "mkdir", "-p",
             *(f"{root}{inside}" for _, inside in read_only_paths))
    for path, inside in read_only_paths:
        step(f"bind {path} at {inside} read-only", "mount", "--bind", "-o", "ro,nosuid,nodev",
             path, f"{root}{inside}")
    if shim_target is not None:
        step(f"link python to {shim_target}", "ln", "-s", shim_target,
             f"{root}{SHIM_DIR}/python")
    if missing_programs:
        stand_in = f"{root}{SHIM_DIR}/{MISSING_PROGRAM_STAND_IN}"
        step("write the missing programs' stand-in", "bash", "-c",
             'printf "%s" "$1" > "$2" && chmod 755 "$2"', "stand-in",
             MISSING_PROGRAM_SCRIPT, stand_in)
        for name in missing_programs:
            step(f"make {name} missing", "ln", "-s", MISSING_PROGRAM_STAND_IN,
                 f"{root}{SHIM_DIR}/{name}")
    # made last, as what it lies under is mounted: a workdir under /tmp is made in the
    # private one; under a host directory (bound read-only) it must exist there
    step(f"make the mount point {workdir} (under a host directory it must exist there)",
         "mkdir", "-p", f"{root}{workdir}")
    step(f"bind the scratch tree at {workdir}", "mount", "--bind", tree, f"{root}{workdir}")
    step("make /dev read-only", "mount", "-o", "remount,ro,nosuid", f"{root}/dev")
    step("make the new root read-only", "mount", "-o", "remount,ro,nosuid,nodev", root)

    command_env = {**BASE_ENV, **env}
    # set as the host's root, before the user namespace: root there could not raise a
    # hard limit the host's is below
    limits = ["prlimit", f"--nproc={MAX_PROCESSES}", f"--fsize={MAX_FILE_BYTES}",
              f"--as={MAX_ADDRESS_SPACE_BYTES}", "--core=0", "--"]
    enter = [
        "chroot", root,
        "setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_GID}", "--clear-groups",
        "--no-new-privs", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all",
        "--",
        "env", "-i", "-C", workdir, *(f"{key}={value}" for key, value in command_env.items()),
        "bash", "-c",
    ]
    lines = [
        "set -u",
        f"status_fd={status_fd}",
        'step() { local what=$1; shift; "$@" 2>&"$status_fd" || '
        f'{{ printf \'{_FAILED}\\t%s\\n\' "$what" >&"$status_fd"; exit {_SETUP_FAILED}; }}; }}',
    ]
    lines += [f"step {shlex.quote(what)} {shlex.join(argv)}" for what, argv in steps]
    # The command's own user namespace: unshare then execs the script below in the same
    # process, whose pid on the host (read here, where the host's /proc is still
    # mounted) tells the caller whose id maps to write.
    in_user_namespace = "\n".join([
        "set -u",
        f'printf \'{_IN_NAMESPACES} %s\\n\' "$1" >&{status_fd}',
        f"read -r mapped <&{map_fd} || exit {_SETUP_FAILED}",
        f'printf \'{_READY}\\n\' >&{status_fd}',
        f"exec {status_fd}>&- {map_fd}<&-",
        f'exec {shlex.join(enter)} "$2"',
    ])
    lines += [
        f'printf \'{_STEPS_DONE}\\n\' >&"$status_fd"',
        "read -r host_pid _ < /proc/self/stat",
        f"exec {shlex.join(limits)} unshare --user -- bash -c "
        f'{shlex.quote(in_user_namespace)} ctxdb-command "$host_pid" "$1"',
    ]
    return "\n".join(lines) + "\n"


SANDBOX_ROOT_PREFIX = "ctxdb-sandbox-root-"
# a sandbox's root lives for one command, at most MAX_COMMAND_TIMEOUT_S and the time to
# end it: one older than this was left by a process stopped before it could remove it
SANDBOX_ROOT_STALE_S = 2 * MAX_COMMAND_TIMEOUT_S


def remove_stale_sandbox_roots(parent: str | None = None) -> list[str]:
    """Remove the sandbox roots (empty mount points) in ``parent`` (the temporary
    directory) that a stopped process left, older than ``SANDBOX_ROOT_STALE_S``; returns
    their paths. A root in use is younger, and one not empty is no root of ours: both
    stay."""
    parent = parent or tempfile.gettempdir()
    removed = []
    cutoff = time.time() - SANDBOX_ROOT_STALE_S
    for entry in Path(parent).glob(f"{SANDBOX_ROOT_PREFIX}*"):
        try:
            if entry.is_dir() and not entry.is_symlink() and entry.stat().st_mtime < cutoff:
                entry.rmdir()
                removed.append(str(entry))
        except OSError:  # not empty, gone meanwhile, not ours to remove
            continue
    return removed


def _run(command: str, tree: Path, *, workdir: str, timeout_s: float,
         env: Mapping[str, str], read_only_paths: Sequence[ReadOnlyPath],
         missing_programs: Sequence[str] = ()) -> CommandResult:
    if not workdir.startswith("/") or workdir == "/":
        raise SandboxError(f"workdir must be an absolute path below /, not {workdir!r}")
    tree_path = Path(tree).resolve()
    if not tree_path.is_dir():
        raise SandboxError(f"the scratch tree {tree_path} is not a directory")
    started = time.monotonic()
    deadline = started + timeout_s
    new_root = tempfile.mkdtemp(prefix=SANDBOX_ROOT_PREFIX)
    status_read, status_write = os.pipe()
    map_read, map_write = os.pipe()
    try:
        binds = [(str(Path(p).resolve()), str(Path(p).resolve())) if not isinstance(p, tuple)
                 else (str(Path(p[0]).resolve()), p[1]) for p in read_only_paths]
        for _, inside in binds:
            if not inside.startswith("/") or inside == "/" or posixpath.normpath(inside) != inside:
                raise SandboxError(f"read_only_paths: the place inside {inside!r} must be an "
                                   "absolute, normalized path below /")
        script = _setup_script(new_root, str(tree_path), workdir, env, binds, status_write,
                               map_read, sorted(set(missing_programs)))
        argv = ["unshare", "--mount", "--net", "--pid", "--ipc", "--uts", "--fork",
                "--kill-child", "--propagation", "private",
                "--", "bash", "-c", script, "ctxdb-sandbox", command]
        try:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT,
                                       pass_fds=(status_write, map_read),
                                       start_new_session=True)
        except FileNotFoundError:
            raise SandboxUnavailable(
                "sandbox step 'unshare' failed: expected the unshare command (util-linux) "
                "on PATH") from None
        for end in (status_write, map_read):
            os.close(end)
        status_write = map_read = -1
        sandboxed = _Sandboxed(process)
        output_stream = cast(IO[bytes], process.stdout)  # stdout=PIPE: never None
        try:
            map_end, map_write = map_write, -1  # _collect closes it
            output, truncated, status, timed_out = _collect(sandboxed, output_stream,
                                                            status_read, map_end, deadline)
        finally:
            sandboxed.kill()
            output_stream.close()
            returncode = process.wait()
    finally:
        for end in (status_write, map_read, map_write):
            if end >= 0:
                os.close(end)
        os.close(status_read)
        # only the mount point: the mounts on it lived in the namespace, gone with it
        os.rmdir(new_root)
    duration = time.monotonic() - started
    text = output.decode(errors="replace")
    status_lines = status.splitlines()
    if status_lines[-1:] != [_READY] and not timed_out:
        failed = [line for line in status_lines if line.startswith(f"{_FAILED}\t")]
        if _STEPS_DONE in status_lines:  # the user namespace could not be made
            raise SandboxUnavailable(
                "sandbox step 'enter a user namespace for the command' failed: expected "
                "prlimit and unshare --user to run (user namespaces: sysctl "
                f"user.max_user_namespaces > 0); exit status {returncode}: {text.strip()!r}")
        if not failed:  # unshare itself failed: the setup script never ran
            raise SandboxUnavailable(
                "sandbox step 'unshare' failed: expected to enter new mount, net, pid, ipc "
                "and uts namespaces (needs root or CAP_SYS_ADMIN); exit status "
                f"{returncode}: {text.strip()!r}")
        what = failed[-1].partition("\t")[2]
        said = "\n".join(line for line in status_lines if not line.startswith(f"{_FAILED}\t"))
        raise SandboxError(f"sandbox step {what!r} failed: {said.strip()!r}")
    return CommandResult(returncode=returncode, output=text, timed_out=timed_out,
                         duration_s=duration, output_truncated=truncated)


def _collect(sandboxed: _Sandboxed, output_stream: IO[bytes], status_fd: int,
             map_fd: int, deadline: float) -> tuple[bytes, bool, str, bool]:
    """Read the output (bounded) and the status pipe until the output closes or the
    deadline passes; on the deadline the sandbox is killed and the output drained for at
    most KILL_GRACE_S. When the status pipe names the process that entered the command's
    user namespace (the namespace's init), map its ids (``_map_ids``) and hold it by a
    pidfd. Returns (output, truncated, status text, timed out); ``map_fd`` is closed on
    return."""
    kept = bytearray()
    truncated = False
    status = bytearray()
    timed_out = False
    selector = selectors.DefaultSelector()
    open_streams = 2
    try:
        selector.register(output_stream, selectors.EVENT_READ, "output")
        selector.register(status_fd, selectors.EVENT_READ, "status")
        while open_streams:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if timed_out:  # the grace after the kill is over too
                    break
                timed_out = True
                sandboxed.kill()
                deadline = time.monotonic() + KILL_GRACE_S
                continue
            for key, _events in selector.select(remaining):
                chunk = os.read(key.fd, OUTPUT_READ_BYTES)
                if not chunk:
                    selector.unregister(key.fileobj)
                    open_streams -= 1
                elif key.data == "status":
                    status += chunk
                    if map_fd >= 0 and (host_pid := _entered_user_namespace(status)):
                        _map_ids(sandboxed.process, host_pid)
                        # it waits for the line below: still the process just checked
                        sandboxed.hold_init(host_pid)
                        os.write(map_fd, b"mapped\n")
                        os.close(map_fd)
                        map_fd = -1
                elif len(kept) < MAX_OUTPUT_BYTES:
                    room = MAX_OUTPUT_BYTES - len(kept)
                    kept += chunk[:room]
                    truncated = truncated or len(chunk) > room
                else:
                    truncated = True
    finally:
        selector.close()
        if map_fd >= 0:  # never mapped: a script still waiting for it ends
            os.close(map_fd)
    return bytes(kept), truncated, status.decode(errors="replace"), timed_out


def _entered_user_namespace(status: bytearray) -> int | None:
    """The host pid the status pipe's 'in-namespaces PID' line names, once it is whole."""
    for line in bytes(status).split(b"\n")[:-1]:
        word, _, pid = line.decode(errors="replace").partition(" ")
        if word == _IN_NAMESPACES and pid.isdigit():
            return int(pid)
    return None


def _map_ids(process: subprocess.Popen, host_pid: int) -> None:
    """Map every uid and gid of the user namespace ``host_pid`` is in to itself, once that
    process is shown to be the sandbox's: in the pid namespace the sandbox's ``unshare``
    made, in a user namespace other than this process's. Its ``/proc`` directory is held
    open meanwhile, so a pid reused by another process cannot be written to."""
    what = "sandbox step 'map the command's user namespace' failed: expected "
    try:
        proc = os.open(f"/proc/{host_pid}", os.O_RDONLY | os.O_DIRECTORY)
    except OSError as error:
        raise SandboxError(f"{what}process {host_pid} to be there: {error}") from None
    try:
        try:
            sandbox_pids = os.readlink(f"/proc/{process.pid}/ns/pid_for_children")
            its_pids, its_users = (os.readlink(f"ns/{kind}", dir_fd=proc)
                                   for kind in ("pid", "user"))
        except OSError as error:
            raise SandboxError(f"{what}to read process {host_pid}'s namespaces: "
                               f"{error}") from None
        if its_pids != sandbox_pids or its_users == os.readlink("/proc/self/ns/user"):
            raise SandboxError(f"{what}process {host_pid} to be in the sandbox's pid "
                               "namespace and a user namespace of its own")
        for id_map in ("uid_map", "gid_map"):
            try:
                handle = os.open(id_map, os.O_WRONLY, dir_fd=proc)
                try:
                    os.write(handle, IDENTITY_ID_MAP.encode("ascii"))
                finally:
                    os.close(handle)
            except OSError as error:
                raise SandboxError(f"{what}to write /proc/{host_pid}/{id_map} (needs "
                                   f"root): {error}") from None
    finally:
        os.close(proc)


class _Sandboxed:
    """The sandbox's ``unshare`` and, once it named itself, the namespace's init, held by
    a pidfd (a pid the init left behind and another process took is never signalled)."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process
        self.init_pidfd = -1

    def hold_init(self, host_pid: int) -> None:
        try:
            self.init_pidfd = os.pidfd_open(host_pid)
        except OSError as error:
            raise SandboxUnavailable(
                "sandbox step 'hold the namespace's init' failed: expected pidfd_open "
                f"(Linux 5.3 or later) to open process {host_pid}: {error}") from None

    def kill(self) -> None:
        """SIGKILL the sandbox's process group (unshare and the namespace's init, unless
        it left the group) and the init itself; the kernel then kills the rest of the
        pid namespace. The pidfd is closed."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.init_pidfd >= 0:
            try:
                signal.pidfd_send_signal(self.init_pidfd, signal.SIGKILL)
            except ProcessLookupError:  # it ended
                pass
            finally:
                os.close(self.init_pidfd)
                self.init_pidfd = -1
