"""An instance's repository at its base commit with the test patch applied, indexed.

Cached by repository, commit and test patch: a tree is built in a staging directory
and renamed into place only when complete, so workers racing for one tree are safe.

From a git directory the tree is written blob by blob (``git ls-tree -r`` for the
commit's entries, one ``git cat-file --batch`` for their contents) rather than by
``git archive``, which fails on the first blob the object store lacks: a snapshot may
hold the history without some of its largest data files. Every blob that is present is
written; an absent one is skipped and recorded (``SkippedBlob``: path and object id;
its size is unknown, since git learns a blob's size only by reading it). What was
skipped is kept beside the tree (``MANIFEST_FILE``), so a cached tree reports it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, cast

from ..gitenv import HARDENED_GIT, git_env
from ..recon import ReconVersionError, check_recon_version, index_repository
from ..recon.indexer import release_index_file
from .instances import Instance

RECON_FILE = "recon.db"
TREE_DIR = "tree"
READY_MARK = ".ctxdb-ready"
MANIFEST_FILE = "materialized.json"

# git tree entry modes
_MODE_SYMLINK = "120000"
_MODE_EXECUTABLE = "100755"
_MODE_SUBMODULE = "160000"
# protocol.allow=never: an object missing from the store is never fetched from anywhere


@dataclass(frozen=True)
class SkippedBlob:
    """A file of the commit that is not in the tree: its blob is absent from the store."""

    path: str
    blob: str


@dataclass(frozen=True)
class Materialized:
    home: Path
    skipped: tuple[SkippedBlob, ...] = ()

    @property
    def tree(self) -> Path:
        return self.home / TREE_DIR

    @property
    def recon(self) -> Path:
        return self.home / RECON_FILE


class MaterializeError(RuntimeError):
    """git could not list or read the commit, or the test patch does not apply."""


def _safe_name(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", value)[:80]


def cache_home(instance: Instance, cache_dir: Path) -> Path:
    """Where the instance's tree and recon.db are cached (by repository, commit, test patch)."""
    key = hashlib.sha256(
        "\0".join([instance.repo, instance.base_commit, instance.test_patch]).encode()
    ).hexdigest()[:16]
    return cache_dir / f"{_safe_name(instance.repo)}-{key}"


def is_cached(instance: Instance, cache_dir: Path) -> bool:
    return (cache_home(instance, cache_dir) / READY_MARK).exists()


def materialize(instance: Instance, cache_dir: Path) -> Materialized:
    """A cached directory holding the tree (base commit + test patch) and its recon.db."""
    home = cache_home(instance, cache_dir)
    if (home / READY_MARK).exists():
        _reindex_if_stale(home)
        return Materialized(home, _read_manifest(home))
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="staging-", dir=cache_dir))
    try:
        tree = staging / TREE_DIR
        skipped: tuple[SkippedBlob, ...] = ()
        if instance.repo_path is not None:
            shutil.copytree(instance.repo_path, tree, symlinks=True,
                            ignore=shutil.ignore_patterns(".git", "__pycache__"))
        elif instance.repo_git is not None:  # an instance names one of the two
            tree.mkdir()
            skipped = write_commit_tree(instance.repo_git, instance.base_commit, tree)
        if instance.test_patch.strip():
            # (as outside any repository: the config of one around the cache, a home
            # directory under git, is not this tree's)
            applied = subprocess.run(
                [*HARDENED_GIT, "apply", "--whitespace=nowarn", "-"], cwd=tree,
                input=instance.test_patch.encode(), capture_output=True, check=False,
                env=git_env(GIT_CEILING_DIRECTORIES=str(staging)),
            )
            if applied.returncode != 0:
                raise MaterializeError("the test_patch does not apply at the base commit: "
                                       + applied.stderr.decode(errors="replace").strip())
        # ab run and retrieve --eval draw their own bar: no second one under it
        index_repository(tree, str(staging / RECON_FILE), progress=False)
        release_index_file(staging / RECON_FILE)  # the staging path is renamed or removed
        _write_manifest(staging, instance.base_commit, skipped)
        (staging / READY_MARK).write_text(instance.base_commit + "\n")
        try:
            staging.rename(home)
        except OSError:  # another worker made it first: theirs is as good
            shutil.rmtree(staging, ignore_errors=True)
        return Materialized(home, skipped)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _reindex_if_stale(home: Path) -> None:
    """Index a cached tree again when its recon index was written by another recon schema
    version (a new table, other extraction rules): the tree itself is still good. The new
    index is built beside the old one and renamed over it."""
    recon = home / RECON_FILE
    try:
        check_recon_version(recon)
        return
    except ReconVersionError:
        pass
    fresh = home / f"{RECON_FILE}.{os.getpid()}.new"
    try:
        index_repository(home / TREE_DIR, str(fresh), rebuild=True, progress=False)
        release_index_file(fresh)
    except BaseException:  # a failed or stopped build leaves no half-made index behind
        for made in (fresh.name, *(f"{fresh.name}-{journal}"
                                   for journal in ("journal", "wal", "shm"))):
            (home / made).unlink(missing_ok=True)
        raise
    for leftover in (f"{RECON_FILE}-wal", f"{RECON_FILE}-shm"):  # the old file's journal
        (home / leftover).unlink(missing_ok=True)
    os.replace(fresh, recon)


def _tree_entries(git_dir: Path, commit: str) -> list[tuple[str, str, str, str]]:
    """(mode, type, object, path) of every file of the commit, in git's path order."""
    listed = subprocess.run([*HARDENED_GIT, "-C", str(git_dir), "ls-tree", "-r", "-z",
                             "--full-tree", commit], capture_output=True, env=git_env(),
                            check=False)
    if listed.returncode != 0:
        raise MaterializeError(f"git ls-tree {commit} failed: "
                               f"{listed.stderr.decode(errors='replace').strip()}")
    entries = []
    for record in listed.stdout.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        mode, kind, obj = meta.decode().split(" ")
        entries.append((mode, kind, obj, os.fsdecode(path)))
    return entries


def write_commit_tree(git_dir: Path, commit: str, tree: Path) -> tuple[SkippedBlob, ...]:
    """Write every file of ``commit`` whose blob the git directory holds under ``tree``;
    the files whose blob is absent are returned, in path order."""
    entries = _tree_entries(git_dir, commit)
    blobs = [e for e in entries if e[1] == "blob"]
    for mode, _kind, _obj, path in entries:
        if mode == _MODE_SUBMODULE:  # as git archive does: an empty directory
            _target(tree, path).mkdir(parents=True, exist_ok=True)
    reader = subprocess.Popen([*HARDENED_GIT, "-C", str(git_dir), "cat-file", "--batch"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=git_env())
    # the three pipes asked for above: never None
    to_git = cast(IO[bytes], reader.stdin)
    from_git = cast(IO[bytes], reader.stdout)
    git_errors = cast(IO[bytes], reader.stderr)

    def feed() -> None:  # on a thread: git's output would fill its pipe before its input ends
        try:
            for _mode, _kind, obj, _path in blobs:
                to_git.write(obj.encode() + b"\n")
            to_git.close()
        except BrokenPipeError:
            pass  # git stopped early; its exit status says why

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    skipped = []
    try:
        for mode, _kind, obj, path in blobs:
            header = from_git.readline().decode().split()
            if header[1:] == ["missing"]:
                skipped.append(SkippedBlob(path, obj))
                continue
            if len(header) != 3 or header[0] != obj:
                raise MaterializeError(f"git cat-file: unexpected answer {header!r} for {path}")
            content = from_git.read(int(header[2]))
            from_git.read(1)  # the newline after each object
            _write_entry(tree, mode, path, content)
    except BaseException:
        # stopped (an error, Ctrl-C, SIGTERM) with git's output unread: git waits to write
        # it and the feeder waits to write to git, so the join below would wait for ever;
        # git ended, the feeder's next write fails and it ends
        reader.kill()
        raise
    finally:
        feeder.join()
        from_git.close()
        error = git_errors.read().decode(errors="replace").strip()
        git_errors.close()
        status = reader.wait()
    if status != 0:
        raise MaterializeError(f"git cat-file --batch failed ({status}): {error}")
    return tuple(skipped)


def _target(tree: Path, path: str) -> Path:
    parts = PurePosixPath(path).parts
    if PurePosixPath(path).is_absolute() or ".." in parts:
        raise MaterializeError(f"a tree entry outside the tree: {path!r}")
    return tree.joinpath(*parts)


def _write_entry(tree: Path, mode: str, path: str, content: bytes) -> None:
    target = _target(tree, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if mode == _MODE_SYMLINK:
        os.symlink(os.fsdecode(content), target)
        return
    target.write_bytes(content)
    if mode == _MODE_EXECUTABLE:
        target.chmod(0o755)


def _write_manifest(home: Path, commit: str, skipped: tuple[SkippedBlob, ...]) -> None:
    data = {"base_commit": commit,
            "skipped": [{"path": s.path, "blob": s.blob} for s in skipped]}
    (home / MANIFEST_FILE).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def _read_manifest(home: Path) -> tuple[SkippedBlob, ...]:
    path = home / MANIFEST_FILE
    if not path.exists():  # a tree cached before manifests: git archive made it whole
        return ()
    data = json.loads(path.read_text(encoding="utf-8"))
    return tuple(SkippedBlob(s["path"], s["blob"]) for s in data["skipped"])


def describe_skipped(skipped: tuple[SkippedBlob, ...]) -> str:
    """For a log line: how many files were left out of a tree, and which."""
    return (f"{len(skipped)} file(s) whose blob is absent from the git directory "
            "(size unknown): " + ", ".join(s.path for s in skipped))
