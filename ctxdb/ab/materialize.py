"""An instance's repository at its base commit with the test patch applied, indexed.

Cached by repository, commit and test patch: a tree is built in a staging directory
and renamed into place only when complete, so workers racing for one tree are safe.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..recon import index_repository
from .instances import Instance

RECON_FILE = "recon.db"
TREE_DIR = "tree"
READY_MARK = ".ctxdb-ready"


def _safe_name(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", value)[:80]


def materialize(instance: Instance, cache_dir: Path) -> Path:
    """A cached directory holding the tree (base commit + test patch) and its recon.db."""
    key = hashlib.sha256(
        "\0".join([instance.repo, instance.base_commit, instance.test_patch]).encode()
    ).hexdigest()[:16]
    home = cache_dir / f"{_safe_name(instance.repo)}-{key}"
    if (home / READY_MARK).exists():
        return home
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="staging-", dir=cache_dir))
    try:
        tree = staging / TREE_DIR
        if instance.repo_path is not None:
            shutil.copytree(instance.repo_path, tree, symlinks=True,
                            ignore=shutil.ignore_patterns(".git", "__pycache__"))
        else:
            tree.mkdir()
            archive = subprocess.run(
                ["git", "-C", str(instance.repo_git), "archive", instance.base_commit],
                capture_output=True, check=False,
            )
            if archive.returncode != 0:
                raise RuntimeError(f"git archive {instance.base_commit} failed: "
                                   f"{archive.stderr.decode(errors='replace').strip()}")
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        if instance.test_patch.strip():
            applied = subprocess.run(
                ["git", "apply", "--whitespace=nowarn", "-"], cwd=tree,
                input=instance.test_patch.encode(), capture_output=True, check=False,
            )
            if applied.returncode != 0:
                raise RuntimeError("the test_patch does not apply at the base commit: "
                                   + applied.stderr.decode(errors="replace").strip())
        index_repository(tree, str(staging / RECON_FILE))
        (staging / READY_MARK).write_text(instance.base_commit + "\n")
        try:
            staging.rename(home)
        except OSError:  # another worker made it first: theirs is as good
            shutil.rmtree(staging, ignore_errors=True)
        return home
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
