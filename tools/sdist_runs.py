"""Runs of repositories too big to fetch, replayed on a release's source distribution.

    python tools/sdist_runs.py MIRROR_DIR OUT_DIR --tree REPO=SDIST[@BELOW] ...
        [--sample REPO=N] [--seed N]

The search tool's ``fetch`` brings no snapshot over its size limit, so the runs of
django, matplotlib and scikit-learn in the results folder ``tools/holdout_runs.py`` reads
cannot be replayed on their base commits. Their source distributions on PyPI hold the
package and its tests (``pip download --no-deps --no-binary :all: Django==3.2``, or the
file's address on https://pypi.org/simple/NAME/). Each ``--tree`` names a repository and
a ``.tar.gz`` of it; with ``@BELOW`` it serves the runs whose instance number is below
BELOW, and the runs above go to the repository's next ``--tree`` (give them in order).
Each source distribution becomes a one-commit bare git repository in OUT_DIR/git/, the
base commit of every run it serves. OUT_DIR/runs.jsonl (for ``ctxdb replay``) and
OUT_DIR/trajs/ are written as ``tools/holdout_runs.py`` writes them; ``--sample`` replays
N of a repository's runs that a tree serves (drawn with ``--seed``), the rest all.

The tree is the release's, not the run's base: a file changed between them differs, a
view is read from the release's file, and the replay's tree check does not see it (it
flags an edit whose output differs, not a file that reads otherwise). Tokens and cost
follow the recorded outputs and come close; a lost anchor may be the tree's (a line the
release's file lacks): read each loss (``replay_anchor``) before counting it.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from holdout_runs import RESULTS_DIR, RESULTS_REPO, git, git_dir_of, repo_of  # noqa: E402

_TREE = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)=(?P<sdist>.+?\.tar\.gz)(?:@(?P<below>\d+))?$")
_SAMPLE = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)=(?P<runs>\d+)$")
# a commit's author and date fixed, so the same sdist gives the same commit
_COMMIT_ENV = {"GIT_AUTHOR_NAME": "ctxdb", "GIT_AUTHOR_EMAIL": "ctxdb@localhost",
               "GIT_COMMITTER_NAME": "ctxdb", "GIT_COMMITTER_EMAIL": "ctxdb@localhost",
               "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z",
               "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z", "PATH": "/usr/bin:/bin"}


class UsageError(ValueError):
    """A --tree or --sample that does not read, named with what was expected."""


def parse_trees(values: list[str]) -> dict[str, list[tuple[Path, int | None]]]:
    """``--tree`` values as, per repository, (sdist, instance numbers below which it
    serves, or None: the rest), in the order given."""
    trees: dict[str, list[tuple[Path, int | None]]] = {}
    for value in values:
        match = _TREE.match(value)
        if match is None:
            raise UsageError(f"--tree {value!r}: expected OWNER/NAME=FILE.tar.gz[@BELOW]")
        sdist = Path(match["sdist"])
        if not sdist.is_file():
            raise UsageError(f"--tree {value!r}: {sdist}: no such file")
        served = trees.setdefault(match["repo"], [])
        if served and served[-1][1] is None:
            raise UsageError(f"--tree {value!r}: {match['repo']}'s tree before it serves "
                             "every run (give @BELOW to all but its last)")
        served.append((sdist, int(match["below"]) if match["below"] else None))
    return trees


def parse_samples(values: list[str]) -> dict[str, int]:
    samples = {}
    for value in values:
        match = _SAMPLE.match(value)
        if match is None:
            raise UsageError(f"--sample {value!r}: expected OWNER/NAME=RUNS")
        samples[match["repo"]] = int(match["runs"])
    return samples


def tree_for(instance_id: str, served: list[tuple[Path, int | None]]) -> Path | None:
    """The sdist serving a run, by its instance number (``django__django-11138``: 11138)."""
    number = int(instance_id.rsplit("-", 1)[1])
    for sdist, below in served:
        if below is None or number < below:
            return sdist
    return None


def sdist_repository(sdist: Path, out: Path) -> tuple[Path, str]:
    """The sdist as a bare git repository of one commit under ``out``/git/ (the top
    directory of the archive is the tree's root): its path and the commit."""
    name = sdist.name.removesuffix(".tar.gz")
    bare = out / "git" / name / "repo"
    if not (bare / "HEAD").is_file():
        with tempfile.TemporaryDirectory() as scratch:
            with tarfile.open(sdist) as archive:
                archive.extractall(scratch, filter="data")  # no links out, no owners kept
            tops = list(Path(scratch).iterdir())
            if len(tops) != 1 or not tops[0].is_dir():
                raise UsageError(f"{sdist}: expected one top directory, got "
                                 f"{sorted(p.name for p in tops)}")
            work = tops[0]
            for command in (["init", "-q"], ["add", "-A", "-f"],
                            ["commit", "-q", "-m", f"{sdist.name} from PyPI"]):
                subprocess.run(["git", *command], cwd=work, env=_COMMIT_ENV, check=True,
                               capture_output=True)
            bare.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True,
                           capture_output=True)
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
    args = parser.parse_args()
    try:
        trees, samples = parse_trees(args.tree), parse_samples(args.sample)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    results = git_dir_of(args.mirrors, RESULTS_REPO.replace("+", "/"))
    if results is None:
        print(f"{args.mirrors}: no {RESULTS_REPO}/repo (fetch github:gruckion/mini-swe-agent)",
              file=sys.stderr)
        return 2
    by_repo: dict[str, list[tuple[str, str]]] = {}
    for name in git(results, "ls-tree", "-r", "--name-only", "HEAD",
                    f"{RESULTS_DIR}/trajs").split():
        instance_id = name.split("/")[-2]
        if name.endswith(".traj.json") and repo_of(instance_id) in trees:
            by_repo.setdefault(repo_of(instance_id), []).append((instance_id, name))
    (args.out / "trajs").mkdir(parents=True, exist_ok=True)
    draw = random.Random(args.seed)
    rows, unserved = [], []
    for repo in sorted(by_repo):
        runs = []  # (instance, trajectory's name, the sdist serving it)
        for instance_id, name in sorted(by_repo[repo]):
            sdist = tree_for(instance_id, trees[repo])
            if sdist is None:
                unserved.append(instance_id)
            else:
                runs.append((instance_id, name, sdist))
        if repo in samples and samples[repo] < len(runs):
            runs = sorted(draw.sample(runs, samples[repo]))
        for instance_id, name, sdist in runs:
            bare, commit = sdist_repository(sdist, args.out)
            report = json.loads(git(results, "show", f"HEAD:{RESULTS_DIR}/logs/{instance_id}/"
                                                     "report.json"))
            trajectory = args.out / "trajs" / f"{instance_id}.traj.json"
            trajectory.write_text(git(results, "show", f"HEAD:{name}"), encoding="utf-8")
            rows.append({"instance_id": instance_id, "repo": repo, "base_commit": commit,
                         "resolved": bool(report.get("resolved")),
                         "trajectory": str(trajectory.relative_to(args.out)),
                         "repo_git": str(bare), "tree": sdist.name})
    (args.out / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows),
                                         encoding="utf-8")
    if unserved:
        print(f"no --tree serves {len(unserved)} run(s): {' '.join(unserved)}", file=sys.stderr)
    missing = sorted(set(trees) - set(by_repo))
    if missing:
        print(f"no recorded runs of {', '.join(missing)}", file=sys.stderr)
    print(f"{len(rows)} runs in {args.out / 'runs.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
