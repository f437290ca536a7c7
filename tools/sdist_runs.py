"""Runs of repositories too big to fetch, replayed on a release's source distribution.

    python tools/sdist_runs.py MIRROR_DIR OUT_DIR --tree REPO=SDIST[@BELOW] ...
        [--sample REPO=N] [--seed N] [--runs-from FOLDER --report FILE]

The search tool's ``fetch`` brings no snapshot over its size limit, so the runs of
django, matplotlib and scikit-learn in the results folder ``tools/holdout_runs.py`` reads
cannot be replayed on their base commits. Their source distributions on PyPI hold the
package and its tests: download the ``.tar.gz`` from its address on
https://pypi.org/simple/NAME/ (``pip download --no-deps --no-binary :all: Django==3.2``
works for Django; for matplotlib and scikit-learn pip builds their build dependencies
from source first). Each ``--tree`` names a repository and a ``.tar.gz`` of it; with
``@BELOW`` it serves the runs whose instance number is below BELOW, and the runs at or
above go to the repository's next ``--tree`` (give them in order, BELOW rising). Each
source distribution becomes a one-commit bare git repository in OUT_DIR/git/ (named by
the archive's SHA-256, so another archive of the same name is not mistaken for it), the
base commit of every run it serves. OUT_DIR/runs.jsonl (for ``ctxdb replay``) and
OUT_DIR/trajs/ are written as ``tools/holdout_runs.py`` writes them; ``--sample`` replays
N of a repository's runs that a tree serves, drawn by one generator seeded with
``--seed`` in the repositories' order; the others' runs all.

The tree is the release's, not the run's base: a file changed between them differs, a
view is read from the release's file, and the replay's tree check does not see it (it
flags an edit whose output differs, not a file that reads otherwise). Tokens and cost
follow the recorded outputs and come close; a lost anchor may be the tree's (a line the
release's file lacks): read each loss (``replay_anchor``) before counting it.

``--runs-from FOLDER --report FILE`` reads another harness run's output instead, as
``tools/holdout_runs.py`` does.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from holdout_runs import (  # noqa: E402
    NO_RESULTS,
    RunsError,
    add_runs_options,
    doubted_verdicts,
    git,
    recorded_runs,
    repo_of,
    resolved_without_a_patch,
    submission_of,
)

from ctxdb.gitenv import HARDENED_GIT, git_env  # noqa: E402
from ctxdb.paths import write_whole  # noqa: E402

_TREE = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)=(?P<sdist>.+?\.tar\.gz)(?:@(?P<below>\d+))?$")
_SAMPLE = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)=(?P<runs>\d+)$")
# a commit's author and date fixed, so the same sdist gives the same commit
_COMMIT_IDENTITY = {"GIT_AUTHOR_NAME": "ctxdb", "GIT_AUTHOR_EMAIL": "ctxdb@localhost",
                    "GIT_COMMITTER_NAME": "ctxdb", "GIT_COMMITTER_EMAIL": "ctxdb@localhost",
                    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
                    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z"}
DIGEST_SHOWN_CHARS = 12  # of an archive's SHA-256, in its repository's directory name


class ToolError(ValueError):
    """A --tree, --sample or archive this tool cannot use, named with what was expected."""


def _run_git(*args: str, cwd: Path | None = None) -> str:
    # without the host's git config (its autocrlf or signing must not change the
    # commit), with a fixed identity
    # (hardened: the archive is someone else's tree)
    done = subprocess.run([*HARDENED_GIT, *args], cwd=cwd, env=git_env(**_COMMIT_IDENTITY),
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ToolError(f"git {' '.join(args[:2])} failed: {done.stderr.strip()}")
    return done.stdout


def parse_trees(values: list[str]) -> dict[str, list[tuple[Path, int | None]]]:
    """``--tree`` values as, per repository, (sdist, instance numbers below which it
    serves, or None: the rest), in the order given."""
    trees: dict[str, list[tuple[Path, int | None]]] = {}
    for value in values:
        match = _TREE.match(value)
        if match is None:
            raise ToolError(f"--tree {value!r}: expected OWNER/NAME=FILE.tar.gz[@BELOW]")
        sdist = Path(match["sdist"]).resolve()
        if not sdist.is_file():
            raise ToolError(f"--tree {value!r}: {sdist}: no such file")
        below = int(match["below"]) if match["below"] else None
        served = trees.setdefault(match["repo"], [])
        if served and served[-1][1] is None:
            raise ToolError(f"--tree {value!r}: {match['repo']}'s tree before it serves "
                            "every run (give @BELOW to all but its last)")
        if served and below is not None and below <= (served[-1][1] or 0):
            raise ToolError(f"--tree {value!r}: expected BELOW above the previous tree's "
                            f"{served[-1][1]}")
        served.append((sdist, below))
    return trees


def parse_samples(values: list[str], trees: Mapping[str, object]) -> dict[str, int]:
    """``--sample`` values as runs to draw per repository, each a repository a tree
    serves, given once."""
    samples: dict[str, int] = {}
    for value in values:
        match = _SAMPLE.match(value)
        if match is None:
            raise ToolError(f"--sample {value!r}: expected OWNER/NAME=RUNS")
        if match["repo"] not in trees:
            raise ToolError(f"--sample {value!r}: no --tree serves {match['repo']} (the "
                            f"trees serve {', '.join(sorted(trees))})")
        if match["repo"] in samples:
            raise ToolError(f"--sample {value!r}: {match['repo']} is sampled already")
        samples[match["repo"]] = int(match["runs"])
    return samples


def tree_for(instance_id: str, served: list[tuple[Path, int | None]]) -> Path | None:
    """The sdist serving a run, by its instance number (``django__django-11138``: 11138)."""
    suffix = instance_id.rsplit("-", 1)[-1]
    if not suffix.isdigit():
        raise ToolError(f"{instance_id}: expected an instance id ending in -NUMBER")
    number = int(suffix)
    for sdist, below in served:
        if below is None or number < below:
            return sdist
    return None


def sdist_repository(sdist: Path, out: Path) -> tuple[Path, str]:
    """The sdist as a bare git repository of one commit under ``out``/git/ (the top
    directory of the archive is the tree's root; every file as the archive holds it): its
    path and the commit. Made in a scratch directory and moved into place whole, so a run
    stopped half way leaves nothing another run would take for it."""
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()[:DIGEST_SHOWN_CHARS]
    bare = out / "git" / f"{sdist.name.removesuffix('.tar.gz')}-{digest}"
    if not (bare / "HEAD").is_file():
        bare.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=bare.parent) as scratch:
            try:
                with tarfile.open(sdist) as archive:
                    archive.extractall(scratch, filter="data")  # no links out, no owners
            except tarfile.TarError as exc:
                raise ToolError(f"{sdist}: not a readable .tar.gz: {exc}") from exc
            tops = list(Path(scratch).iterdir())
            if len(tops) != 1 or not tops[0].is_dir():
                raise ToolError(f"{sdist}: expected one top directory, got "
                                f"{sorted(p.name for p in tops)}")
            work = tops[0]
            if os.path.lexists(work / ".git"):  # its config would be ours once we add to it
                raise ToolError(f"{sdist}: holds a .git of its own ({work.name}/.git); "
                                "expected a source archive")
            _run_git("init", "-q", str(work))
            # the archive's .gitattributes must not convert line ends as files are added
            (work / ".git" / "info").mkdir(exist_ok=True)
            (work / ".git" / "info" / "attributes").write_text("* -text\n")
            _run_git("add", "-A", "-f", cwd=work)
            _run_git("commit", "-q", "--no-verify", "-m", f"{sdist.name} from PyPI", cwd=work)
            made = Path(scratch) / "repo.git"
            # (a local clone of the repository just made: the one transport allowed)
            _run_git("-c", "protocol.file.allow=always", "clone", "-q", "--bare", str(work),
                     str(made))
            made.rename(bare)
    return bare, git(bare, "rev-parse", "HEAD").strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mirrors", type=Path, help="bare git directories as OWNER+NAME/repo")
    parser.add_argument("out", type=Path, help="where runs.jsonl, trajs/ and git/ go")
    parser.add_argument("--tree", action="append", default=[], required=True,
                        help="OWNER/NAME=FILE.tar.gz[@BELOW], in order per repository")
    parser.add_argument("--sample", action="append", default=[],
                        help="OWNER/NAME=RUNS: replay that many of its runs")
    parser.add_argument("--seed", type=int, default=0, help="the sample's seed")
    add_runs_options(parser)
    args = parser.parse_args()
    if not hasattr(tarfile, "data_filter"):
        print("tarfile's extraction filters are needed (Python 3.11.4 or later)",
              file=sys.stderr)
        return 2
    try:
        trees = parse_trees(args.tree)
        samples = parse_samples(args.sample, trees)
    except ToolError as exc:
        print(exc, file=sys.stderr)
        return 2
    try:
        return _write_runs(args, trees, samples)
    except (ToolError, RunsError, RuntimeError) as exc:  # RuntimeError: holdout_runs.git's
        print(exc, file=sys.stderr)
        return 2


def _write_runs(args: argparse.Namespace, trees: dict[str, list[tuple[Path, int | None]]],
                samples: dict[str, int]) -> int:
    args.out = args.out.resolve()  # the runs file names the repositories absolutely
    source = recorded_runs(args)
    if source is None:
        print(f"{args.mirrors}: {NO_RESULTS}", file=sys.stderr)
        return 2
    by_repo: dict[str, list[tuple[str, Callable[[], str]]]] = {}
    for instance_id, read_trajectory in source.runs:
        repo = repo_of(instance_id)
        if repo in trees:
            by_repo.setdefault(repo, []).append((instance_id, read_trajectory))
    (args.out / "trajs").mkdir(parents=True, exist_ok=True)
    draw = random.Random(args.seed)
    rows, unserved = [], []
    doubted: list[str] = []  # runs the verdicts resolve that submitted nothing
    repositories: dict[Path, tuple[Path, str]] = {}  # sdist: its repository and commit
    for repo in sorted(by_repo):
        runs = []  # (instance, trajectory's name, the sdist serving it)
        for instance_id, read_trajectory in sorted(by_repo[repo], key=lambda run: run[0]):
            sdist = tree_for(instance_id, trees[repo])
            if sdist is None:
                unserved.append(instance_id)
            else:
                runs.append((instance_id, read_trajectory, sdist))
        if repo in samples and samples[repo] < len(runs):
            runs = sorted(draw.sample(runs, samples[repo]), key=lambda run: run[0])
        for instance_id, read_trajectory, sdist in runs:
            if sdist not in repositories:
                repositories[sdist] = sdist_repository(sdist, args.out)
            bare, commit = repositories[sdist]
            trajectory = args.out / "trajs" / f"{instance_id}.traj.json"
            text = read_trajectory()
            if resolved_without_a_patch(instance_id, submission_of(text, instance_id),
                                        source):
                doubted.append(instance_id)
            trajectory.write_text(text, encoding="utf-8")
            rows.append({"instance_id": instance_id, "repo": repo, "base_commit": commit,
                         "resolved": source.resolved(instance_id),
                         "trajectory": str(trajectory.relative_to(args.out)),
                         "repo_git": str(bare), "tree": sdist.name})
    # whole or not at all: the replay reads what it finds
    write_whole(args.out / "runs.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    if unserved:
        print(f"no --tree serves {len(unserved)} run(s): {' '.join(unserved)}", file=sys.stderr)
    missing = sorted(set(trees) - set(by_repo))
    if missing:
        print(f"no recorded runs of {', '.join(missing)}", file=sys.stderr)
    for line in source.left_out:
        print(f"left out: {line}", file=sys.stderr)
    if doubted:
        print(doubted_verdicts(doubted), file=sys.stderr)
    resolved = sum(1 for row in rows if row["resolved"])
    print(f"{len(rows)} runs in {args.out / 'runs.jsonl'} ({resolved} resolved)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
