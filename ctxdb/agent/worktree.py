"""A scratch git working copy of a commit, where a recorded run's commands are re-run.

``ScratchTree.create(git_dir, commit)`` makes, in a temporary directory (``home``), a
real git working copy at ``path``: the agent's own git commands (``git diff``, ``git
status``, ``git checkout FILE``, ``git stash``) work in it, inside the sandbox, as in the
harness's ``/testbed``. It is made fast and without touching the source git directory:

- ``git init`` with the source's object store borrowed through ``objects/info/alternates``
  (nothing copied), the source's default branch set to the commit and the index read
  from it. Inside the sandbox the store is shown read-only at its host path, or, when
  the tree's bind at the run's directory would hide it there (a local run replayed on
  the checkout it worked in), at ``SANDBOX_OBJECT_STORE``, which the tree's alternates
  then name once the host is done with the tree's own ``.git`` (the source's own
  alternates, if any, must then be absolute paths). Not ``git clone
  --shared``: that would also copy every ref of the source, later commits included,
  where SWE-bench's /testbed has the one branch at the base.
  git sizes abbreviated object names (``index abc..def`` lines) by the objects it sees,
  alternates included, as in the harness's full clone (10 digits for sympy and astropy
  in every recorded submission): nothing is pinned;
- the files written blob by blob (``materialize.write_commit_tree``: one ``git
  cat-file --batch``), so a blob absent from the store is skipped, not fatal. Each
  skipped path is listed in ``skipped`` and flagged skip-worktree in the index, so
  ``git status``, ``git diff`` and ``git add -A`` do not report it as deleted;
- everything chowned to the sandbox's unprivileged user, then the index refreshed
  (its stat data taken after the chown, so the first ``git status`` inside is fast).

The host reads the tree with git too (``diff``, ``submission``), as root,
so never through the tree's own ``.git``: a recorded command can write its config
(``core.fsmonitor``, ``diff.external``, a filter driver, a ``commondir``), and git run by
root would run what it names, on the host. The host reads through a git directory of its
own (``host.git`` beside the tree, root's, never mounted writable in the sandbox): the
base commit's index, the source's objects as alternates, a config of ctxdb's, the tree as
its work tree — and with no optional locks, never fetching, neither the host's global nor
its system git config (a ``color.ui`` or ``diff.noprefix`` there would change the
patches), no external diff or textconv. So the host compares the tree with the base
commit (where the agent's own commits, if any, are not followed). ``submission`` stages
into a copy of that index and writes the objects it hashes into a directory of its own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

from ..ab.materialize import SkippedBlob, write_commit_tree
from ..gitenv import HARDENED_GIT, git_env
from .sandbox import (
    DEFAULT_WORKDIR,
    SANDBOX_GID,
    SANDBOX_UID,
    CommandResult,
    run_isolated,
)
from .trajectory import DEFAULT_COMMAND_TIMEOUT_S, text_lines

COMMAND_TIMEOUT_S = DEFAULT_COMMAND_TIMEOUT_S  # the recorded harness's, 60 s
# info.config.environment.env of the recorded mini-swe-agent runs: set for every command
HARNESS_ENV: Mapping[str, str] = {
    "PAGER": "cat",
    "MANPAGER": "cat",
    "LESS": "-R",
    "PIP_PROGRESS_BAR": "off",
    "TQDM_DISABLE": "1",
}
TREE_DIR = "testbed"
# a scratch tree's directory; the file in it its process holds a lock on while the tree
# is in use, so a later process can tell a tree whose process died without removing it
# (SIGKILL, the OOM killer) from one in use — in any process, container or pid namespace
# on this machine
SCRATCH_PREFIX = "ctxdb-scratch-"
SCRATCH_LOCK = "in-use.lock"
# where a command sees the source's object store when its own path lies under the run's
# directory (in the sandbox's own root: the tree's bind cannot hide it there)
SANDBOX_OBJECT_STORE = "/.ctxdb-source-objects"
HOST_GIT_DIR = "host.git"  # the host's view of the tree: root's, never the sandbox's
SETUP_TIMEOUT_S = 60  # for create's setup_command
FAILED_SETUP_OUTPUT_SHOWN_CHARS = 500  # of a failed setup command's output, in its error
# What SWE-bench's image build did to /testbed's tracked files before the harness
# started, by repository: a recorded run began from that state, so its replay must too.
# For astropy 4.1 to 5.3 its pre_install step pins setuptools in pyproject.toml (older
# versions have no such line and the edit leaves them as they are); every development
# run of those versions submitted the pin unless its agent reverted pyproject.toml.
SWEBENCH_TESTBED_SETUP: Mapping[str, str] = {
    "astropy/astropy": "if [ -f pyproject.toml ]; then sed -i "
                       "'s/requires = \\[\"setuptools\",/requires = [\"setuptools==68.0.0\",/' "
                       "pyproject.toml; fi",
}



class ScratchTreeError(RuntimeError):
    """The scratch tree could not be made or read: git said why."""


def _git(args: list[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None,
         stdin: bytes | None = None, check: bool = True) -> bytes:
    done = subprocess.run([*HARDENED_GIT, *args], cwd=cwd, input=stdin, capture_output=True,
                          env=dict(env) if env is not None else git_env(), check=False)
    if done.returncode != 0 and check:
        raise ScratchTreeError(f"git {' '.join(args[:3])} failed ({done.returncode}): "
                               f"{done.stderr.decode(errors='replace').strip()}")
    return done.stdout


class ScratchTree:
    """A working copy of one commit in a temporary directory; a context manager that
    removes it all on exit. Commands run in it through the sandbox (``run``)."""

    def __init__(self, home: Path, commit: str, object_store: Path,
                 skipped: tuple[SkippedBlob, ...], workdir: str, lock_fd: int = -1) -> None:
        self.home = home  # the temporary directory: the tree and room for the caller's files
        self._lock_fd = lock_fd  # held locked while the tree is in use (SCRATCH_LOCK)
        self.path = home / TREE_DIR
        self.commit = commit
        self.object_store = object_store  # the source's objects, borrowed read-only
        self.skipped = skipped
        self.workdir = workdir

    @classmethod
    def create(cls, git_dir: Path | str, commit: str, parent: Path | str | None = None, *,
               workdir: str = DEFAULT_WORKDIR, setup_command: str | None = None) -> ScratchTree:
        """A working copy of ``commit`` of the git directory ``git_dir`` (bare or not),
        in a new temporary directory under ``parent`` (the system's default if None).
        ``setup_command`` (e.g. ``SWEBENCH_TESTBED_SETUP[repo]``) is run in it, in the
        sandbox, before it is handed over; it must succeed."""
        git_dir = Path(git_dir).resolve()
        remove_orphaned_scratch(parent)
        home = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=parent)).resolve()
        lock_fd = -1
        try:
            lock_fd = _lock_in_use(home)
            object_store, full_commit, branch = _source(git_dir, commit)
            tree = home / TREE_DIR
            _git(["init", "--quiet", f"--initial-branch={branch}", str(tree)])
            (tree / ".git" / "objects" / "info" / "alternates").write_text(
                f"{object_store}\n", encoding="utf-8")
            _git(["update-ref", f"refs/heads/{branch}", full_commit], cwd=tree)
            _git(["read-tree", full_commit], cwd=tree)
            skipped = write_commit_tree(git_dir, full_commit, tree)
            if skipped:
                paths = b"".join(os.fsencode(s.path) + b"\0" for s in skipped)
                _git(["update-index", "--skip-worktree", "-z", "--stdin"], cwd=tree,
                     stdin=paths)
            _chown_tree(tree)
            _git(["update-index", "-q", "--refresh"], cwd=tree)
            os.chown(tree / ".git" / "index", SANDBOX_UID, SANDBOX_GID)
            if scratch_store_shown_at(object_store, workdir) != str(object_store):
                # from here the tree's own .git is read only inside the sandbox
                (tree / ".git" / "objects" / "info" / "alternates").write_text(
                    f"{SANDBOX_OBJECT_STORE}\n", encoding="utf-8")
            scratch = cls(home, full_commit, object_store, skipped, workdir, lock_fd)
            host = home / HOST_GIT_DIR
            _git(["init", "--quiet", "--bare", f"--initial-branch={branch}", str(host)])
            (host / "objects" / "info" / "alternates").write_text(f"{object_store}\n",
                                                                  encoding="utf-8")
            _git(["--git-dir", str(host), "config", "core.bare", "false"])
            _git(["--git-dir", str(host), "update-ref", f"refs/heads/{branch}", full_commit])
            _git(["read-tree", full_commit], env=scratch._host_env())
            if skipped:
                _git(["update-index", "--skip-worktree", "-z", "--stdin"],
                     env=scratch._host_env(), stdin=paths)
            if setup_command:
                done = scratch.run(setup_command, SETUP_TIMEOUT_S)
                if done.returncode != 0 or done.timed_out:
                    printed = done.output.strip()[-FAILED_SETUP_OUTPUT_SHOWN_CHARS:]
                    raise ScratchTreeError(
                        f"the setup command {setup_command!r} failed ("
                        + (f"timed out after {SETUP_TIMEOUT_S} s" if done.timed_out
                           else f"exit {done.returncode}")
                        + (f"): {printed}" if printed else "; it printed nothing)"))
            _git(["update-index", "-q", "--refresh"], env=scratch._host_env(), check=False)
            return scratch
        except BaseException:
            try:
                remove_tree(home)
            finally:
                if lock_fd >= 0:
                    os.close(lock_fd)
            raise

    def __enter__(self) -> ScratchTree:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Remove the temporary directory and everything in it."""
        try:
            remove_tree(self.home)
        finally:  # (a stop during the removal still lets the lock go)
            if self._lock_fd >= 0:
                os.close(self._lock_fd)
                self._lock_fd = -1

    def run(self, command: str, timeout_s: float = COMMAND_TIMEOUT_S,
            env: Mapping[str, str] = HARNESS_ENV,
            missing_programs: Sequence[str] = ()) -> CommandResult:
        """Run one shell command in the tree, isolated (``sandbox.run_isolated``), in
        ``workdir`` with the recorded harness's environment variables, the programs its
        environment lacked (``missing_programs``) missing too."""
        return run_isolated(command, self.path, workdir=self.workdir, timeout_s=timeout_s,
                            env=env,
                            read_only_paths=((self.object_store, scratch_store_shown_at(
                                self.object_store, self.workdir)),),
                            missing_programs=missing_programs)

    def diff(self) -> str:
        """The live patch of the tracked files: ``git diff HEAD`` (what the agent's own
        ``git diff`` prints while it has staged nothing). New files are not in it."""
        return self._read_git(["diff", "--no-ext-diff", "--no-textconv", "HEAD"])

    def submission(self) -> str:
        """Exactly what the harness's ``git add -A && git diff --cached`` would print now,
        the tree's own index and object store left as they are."""
        with self._staged_everything() as env:
            return self._read_git(["diff", "--no-ext-diff", "--no-textconv", "--cached"], env)

    def changed_paths(self) -> list[str]:
        """The paths ``submission`` holds a change of (added, modified, deleted), sorted."""
        with self._staged_everything() as env:
            names = self._read_git(["diff", "--no-ext-diff", "--cached", "--name-only", "-z",
                                    "--no-renames"], env)
        return sorted(name for name in names.split("\0") if name)

    def file_lines(self, path: str) -> list[str] | None:
        """The lines of a file of the tree (decoded with errors="replace"), as the agent's
        commands number them (``text_lines``), or None."""
        target = self._inside(path)
        if target is None or not target.is_file():
            return None
        return text_lines(target.read_bytes().decode(errors="replace"))

    def _inside(self, path: str) -> Path | None:
        prefix = self.workdir.rstrip("/") + "/"
        if path.startswith(prefix):
            path = path[len(prefix):]
        relative = PurePosixPath(path)
        if relative.is_absolute() or ".." in relative.parts:
            return None
        target = self.path.joinpath(*relative.parts)
        try:  # a symlink may point anywhere on the host: only what stays in the tree
            target.resolve().relative_to(self.path)
        except (ValueError, OSError):
            return None
        return target

    def _host_env(self, **extra: str) -> dict[str, str]:
        """git's environment for the host's reads: its own git directory, the tree as
        work tree (the tree's .git is never read by the host)."""
        return git_env(GIT_DIR=str(self.home / HOST_GIT_DIR), GIT_WORK_TREE=str(self.path),
                        **extra)

    def _read_git(self, args: list[str], env: Mapping[str, str] | None = None) -> str:
        out = _git(["--no-optional-locks", *args], cwd=self.path,
                   env=env if env is not None else self._host_env())
        return out.decode(errors="replace")

    def _staged_everything(self) -> _StagedCopy:
        return _StagedCopy(self)


class _StagedCopy:
    """The tree with everything staged, in a copy of its index: the environment for
    git to read it. The objects ``git add -A`` hashes go to a directory of the copy's own,
    the tree's object store (and through it the source's) read as alternates."""

    def __init__(self, tree: ScratchTree) -> None:
        self.tree = tree
        self.scratch: str | None = None

    def __enter__(self) -> dict[str, str]:
        self.scratch = tempfile.mkdtemp(prefix="staged-", dir=self.tree.home)
        index = os.path.join(self.scratch, "index")
        objects = os.path.join(self.scratch, "objects")
        os.mkdir(objects)
        host = self.tree.home / HOST_GIT_DIR
        shutil.copyfile(host / "index", index)
        env = self.tree._host_env(GIT_INDEX_FILE=index, GIT_OBJECT_DIRECTORY=objects,
                                  GIT_ALTERNATE_OBJECT_DIRECTORIES=str(host / "objects"))
        _git(["add", "-A"], cwd=self.tree.path, env=env)
        return env

    def __exit__(self, *exc_info) -> None:
        if self.scratch is not None:
            remove_tree(self.scratch)


_swept: set[str] = set()  # the parents this process has swept of orphaned scratch trees


def _lock_in_use(home: Path) -> int:
    """Lock ``home``'s ``SCRATCH_LOCK`` for as long as the returned descriptor is open
    (the process's end closes it, however it ends). The file is locked under another
    name and then given its own, so no sweep ever finds it there unlocked."""
    import fcntl

    making = home / f"{SCRATCH_LOCK}.new"
    fd = os.open(making, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: nobody else holds it
        os.rename(making, home / SCRATCH_LOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def remove_orphaned_scratch(parent: Path | str | None) -> list[Path]:
    """Remove the scratch trees under ``parent`` (the system's temporary directory if
    None) that no process holds any more — what a SIGKILL or the OOM killer left — once
    per process and parent; the trees removed. A tree is left when its lock is held (in
    use), when it has no lock file (being made, or made by a ctxdb before the lock), or
    when another user owns it."""
    import fcntl

    where = str(Path(parent or tempfile.gettempdir()).resolve())
    if where in _swept:
        return []
    _swept.add(where)
    removed = []
    for entry in Path(where).glob(f"{SCRATCH_PREFIX}*"):
        try:
            if entry.is_symlink() or not entry.is_dir() or entry.stat().st_uid != os.geteuid():
                continue
            fd = os.open(entry / SCRATCH_LOCK, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:  # no lock file (or gone meanwhile): not ours to judge
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: in use
            os.close(fd)
            continue
        try:
            remove_tree(entry)
            removed.append(entry)
        finally:
            os.close(fd)
    return removed


def remove_tree(path: str | Path) -> None:
    """Remove ``path`` and all under it, as far as it can be, rather than leave the copy
    on the host's disk: a command may have nested directories deeper than
    ``shutil.rmtree`` recurses (RecursionError, which its ``ignore_errors`` does not
    catch), and Ctrl-C or SIGTERM may land while it removes; ``rm``, which walks any
    depth, removes what is left (the signal is raised again after)."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    except RecursionError:
        _remove_with_rm(path)
    except KeyboardInterrupt:
        _remove_with_rm(path)
        raise


def _remove_with_rm(path: str | Path) -> None:
    subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)],
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)


def scratch_store_shown_at(object_store: Path, workdir: str) -> str:
    """Where the sandbox shows the source's object store: at its own path, unless that
    lies under ``workdir``, where the tree is bound over it."""
    if PurePosixPath(object_store).is_relative_to(workdir):
        return SANDBOX_OBJECT_STORE
    return str(object_store)


def has_commit(git_dir: Path, commit: str) -> bool:
    """Whether ``commit`` names a commit of the git directory (bare or a checkout, whoever
    owns it), asked as a scratch tree asks for it."""
    if commit.startswith("-"):
        return False
    found = subprocess.run([*HARDENED_GIT, "-C", str(git_dir), "cat-file", "-e",
                            f"{commit}^{{commit}}"], capture_output=True, env=git_env(),
                           check=False)
    return found.returncode == 0


def is_git_dir(path: Path) -> bool:
    """Whether ``path`` is a git directory (bare, or a checkout's ``.git``) or a checkout
    (its ``.git`` a directory or a link file) — not a directory inside one, where git
    would quietly take the repository around it."""
    if (path / ".git").exists():
        return True
    return (path / "HEAD").is_file() and (path / "objects").is_dir()


def _source(git_dir: Path, commit: str) -> tuple[Path, str, str]:
    """The source's object directory, the commit's full id, and the branch a clone of
    the source would be on (its HEAD's, else 'main')."""
    objects = Path(_git(["-C", str(git_dir), "rev-parse", "--path-format=absolute",
                         "--git-path", "objects"]).decode().strip())
    try:
        full = _git(["-C", str(git_dir), "rev-parse", "--verify", "--quiet",
                     f"{commit}^{{commit}}"]).decode().strip()
    except ScratchTreeError:
        raise ScratchTreeError(f"commit {commit} is not in {git_dir}") from None
    head = subprocess.run([*HARDENED_GIT, "-C", str(git_dir), "symbolic-ref", "--quiet", "--short",
                           "HEAD"], capture_output=True, env=git_env(), check=False)
    branch = head.stdout.decode().strip() if head.returncode == 0 else ""
    return objects, full, branch or "main"


def _chown_tree(tree: Path) -> None:
    """Give the whole tree (files, .git) to the sandbox's user: commands run as it."""
    os.chown(tree, SANDBOX_UID, SANDBOX_GID)
    for directory, subdirectories, files in os.walk(tree):
        for name in subdirectories + files:
            os.lchown(os.path.join(directory, name), SANDBOX_UID, SANDBOX_GID)

