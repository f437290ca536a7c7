"""Held-out runs: the same harness on repositories the loop rules were not measured on.

    python tools/holdout_runs.py MIRROR_DIR OUT_DIR [--runs-from FOLDER --report FILE]

The development runs (../shared/devset/trajectories/) are mini-swe-agent 1.15 with
Gemini 3 Pro on the sympy and astropy instances of SWE-bench Verified, copied from the
public results in the GitHub repository gruckion/mini-swe-agent
(``swebench_results/20251118_gemini-3-pro-74pct/``). The same folder holds the runs of
every other Verified instance. This script writes OUT_DIR/runs.jsonl (for ``ctxdb
replay``) and OUT_DIR/trajs/ for those of the repositories whose bare git directories
are in MIRROR_DIR as ``OWNER+NAME/repo`` (the search tool's ``fetch``), with the
evaluation's verdict (``logs/ID/report.json``).

SWE-bench's base commits are not in that folder, and its dataset cannot be downloaded
here, so each run's base commit is recovered from its own submission: the ``index
OLD..NEW`` line of every file the patch modifies names the file's blob before the run.
The base is the newest commit on the repository's first-parent history where every
such file has that blob; failing that (a base on a release branch merged later, as
sphinx 3.x's), the newest such commit reachable from HEAD. It agrees with the real base
on every file the submission touched, and may differ elsewhere (commits between the real
base and the fix); the replay's tree check (``replay_run.tree_lost_at_seq``) flags a run
whose commands then left a tree other than the run's. A run whose blobs no commit holds
is left out and named. SWE-bench's sphinx image edits setup.py and tox.ini before the
agent starts (pins); the submission carries those edits, applied as the run's
``testbed_setup``. Their blobs before the edits are the base's, so they are searched
too; where no commit holds them with the others', the base is searched without them
and a pin that does not apply is left out. The search off the first-parent history asks
``git cat-file`` for every commit's blob of every such file (4 s for astropy's 42,000
commits and three files).

``--runs-from FOLDER --report FILE`` reads another harness run's output instead (another
model's, say): FOLDER as mini-swe-agent's batch run writes it (``ID/ID.traj.json``), FILE
the SWE-bench harness's report on it (a JSON object whose ``resolved_ids`` lists the
resolved instances; every other run counts as unresolved). Verdicts that resolve a run
which submitted no patch are named on stderr: they are not these runs' own.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ctxdb.paths import write_whole  # noqa: E402

RESULTS_REPO = "gruckion+mini-swe-agent"
RESULTS_DIR = "swebench_results/20251118_gemini-3-pro-74pct"
# files SWE-bench's image setup edits before the run, by repository
IMAGE_SETUP_FILES = {"sphinx-doc/sphinx": ("setup.py", "tox.ini")}
DEVELOPMENT_REPOSITORIES = ("sympy/sympy", "astropy/astropy")  # the rules were set on these
SETUP_PATCH_END = "CTXDB_SETUP_PATCH_END"
_DIFF_HEADER = re.compile(r"^diff --git a/(\S+) b/\S+$")
_INDEX_LINE = re.compile(r"^index ([0-9a-f]+)\.\.[0-9a-f]+")


def git(git_dir: Path, *args: str) -> str:
    done = subprocess.run(["git", "--git-dir", str(git_dir), *args], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args[:2])} in {git_dir}: {done.stderr.strip()}")
    return done.stdout


class RunsError(Exception):
    """Recorded runs that cannot be read as given: the message names the file."""


class RecordedRuns(NamedTuple):
    """Recorded runs to replay: each run's instance and how to read its trajectory, the
    evaluation's verdict by instance, and the runs left out (each with why)."""

    runs: list[tuple[str, Callable[[], str]]]  # (instance id, its trajectory's text)
    resolved: Callable[[str], bool]
    left_out: list[str]


def results_runs(mirrors: Path) -> RecordedRuns | None:
    """The Gemini 3 Pro runs of the results folder (RESULTS_DIR), None if not fetched."""
    results = git_dir_of(mirrors, RESULTS_REPO.replace("+", "/"))
    if results is None:
        return None
    runs = []
    for name in git(results, "ls-tree", "-r", "--name-only", "HEAD",
                    f"{RESULTS_DIR}/trajs").split():
        if name.endswith(".traj.json"):
            runs.append((name.split("/")[-2],
                         lambda name=name: git(results, "show", f"HEAD:{name}")))

    def resolved(instance_id: str) -> bool:
        report = json.loads(git(results, "show",
                                f"HEAD:{RESULTS_DIR}/logs/{instance_id}/report.json"))
        return bool(report.get("resolved"))

    return RecordedRuns(runs, resolved, [])


def folder_runs(folder: Path, report: Path) -> RecordedRuns:
    """The runs of a mini-swe-agent batch run's output folder (``ID/ID.traj.json``), judged
    by the SWE-bench harness's report ``report`` (its ``resolved_ids``). When the report
    lists the runs it evaluated (``completed_ids``), a run it did not is left out: it has
    no verdict to count it by."""
    if not folder.is_dir():
        raise RunsError(f"--runs-from {folder}: not a folder")
    try:
        verdicts = json.loads(report.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunsError(f"--report {report}: not a readable JSON file ({exc})") from None
    listed = {key: verdicts.get(key) if isinstance(verdicts, dict) else None
              for key in ("resolved_ids", "completed_ids")}
    if not _ids(listed["resolved_ids"]) or not (listed["completed_ids"] is None
                                                or _ids(listed["completed_ids"])):
        raise RunsError(f"--report {report}: expected the SWE-bench harness's report, a "
                        "JSON object whose resolved_ids (and completed_ids, if given) list "
                        "instance ids")
    evaluated = listed["completed_ids"]
    runs, left_out = [], []
    for path in sorted(folder.glob("*/*.traj.json")):
        instance_id = path.parent.name
        if path.name != f"{instance_id}.traj.json":
            continue
        if evaluated is not None and instance_id not in evaluated:
            left_out.append(f"{instance_id}: not among the report's completed_ids")
            continue
        runs.append((instance_id, lambda path=path: _trajectory_text(path)))
    if not runs and not left_out:
        raise RunsError(f"--runs-from {folder}: no ID/ID.traj.json in it")
    return RecordedRuns(runs, set(listed["resolved_ids"]).__contains__, left_out)


def _ids(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _trajectory_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RunsError(f"{path}: not a readable text file ({exc})") from None


def submission_of(text: str, instance_id: str) -> str:
    """The patch a trajectory's run submitted (``info.submission``; none: empty)."""
    try:
        trajectory = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RunsError(f"{instance_id}: its trajectory is not JSON ({exc})") from None
    info = trajectory.get("info") if isinstance(trajectory, dict) else None
    submission = info.get("submission") if isinstance(info, dict) else None
    return submission if isinstance(submission, str) else ""


def resolved_without_a_patch(instance_id: str, patch: str, source: RecordedRuns) -> bool:
    """Whether the verdicts call a run resolved that submitted no patch (``patch``, its
    ``submission_of``): a report of other runs (another model's, or another batch's)
    would; these runs' own cannot."""
    return not patch.strip() and source.resolved(instance_id)


def doubted_verdicts(instance_ids: list[str]) -> str:
    """What the tools print when ``resolved_without_a_patch`` held for some runs."""
    return (f"the verdicts resolve {len(instance_ids)} run(s) that submitted no patch "
            f"({' '.join(sorted(instance_ids))}): are they the SWE-bench harness's on these "
            "runs, of their model?")


def recorded_runs(args: argparse.Namespace) -> RecordedRuns | None:
    """The runs the tool's arguments name: ``--runs-from`` and ``--report`` go together."""
    if (args.runs_from is None) != (args.report is None):
        raise RunsError("--runs-from and --report go together: a folder of runs and the "
                        "SWE-bench harness's report on them")
    if args.runs_from is not None:
        return folder_runs(args.runs_from, args.report)
    return results_runs(args.mirrors)


def add_runs_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs-from", type=Path, metavar="FOLDER",
                        help="a mini-swe-agent batch run's output (ID/ID.traj.json) to read "
                             "instead of the Gemini 3 Pro results folder")
    parser.add_argument("--report", type=Path, metavar="FILE",
                        help="the SWE-bench harness's report on --runs-from's runs")


NO_RESULTS = (f"no {RESULTS_REPO}/repo (fetch github:gruckion/mini-swe-agent, or give "
              "--runs-from and --report)")


def git_dir_of(mirrors: Path, repo: str) -> Path | None:
    base = mirrors / repo.replace("/", "+")
    for candidate in (base / "repo", base):
        if (candidate / "HEAD").is_file():
            return candidate
    return None


def repo_of(instance_id: str) -> str:
    owner, rest = instance_id.split("__", 1)
    return f"{owner}/{rest.rsplit('-', 1)[0]}"


def pre_image_blobs(patch: str, skipped: tuple[str, ...]) -> list[tuple[str, str]]:
    """(path, abbreviated blob before the patch) of every file the patch modifies."""
    blobs, current = [], None
    for line in patch.splitlines():
        header = _DIFF_HEADER.match(line)
        if header:
            current = header.group(1)
            continue
        index = _INDEX_LINE.match(line)
        if index and current and current not in skipped and set(index.group(1)) != {"0"}:
            blobs.append((current, index.group(1)))
            current = None
    return blobs


def setup_patch(patch: str, files: tuple[str, ...]) -> str:
    """The patch's sections of ``files`` (the image's own edits)."""
    sections = re.split(r"(?m)^(?=diff --git )", patch)
    return "".join(s for s in sections
                   if (m := _DIFF_HEADER.match(s.split("\n", 1)[0])) and m.group(1) in files)


def commits_with_blob(git_dir: Path, path: str, blob: str) -> set[str]:
    """The first-parent commits at which ``path`` has the blob ``blob`` (abbreviated)."""
    changes = []  # (commit, blob after it), oldest first
    commit = None
    for line in git(git_dir, "log", "--first-parent", "--format=C %H", "--raw",
                    "--no-abbrev", "HEAD", "--", path).splitlines():
        if line.startswith("C "):
            commit = line[2:]
        elif line.startswith(":") and commit:
            changes.append((commit, line.split()[3]))
    changes.reverse()
    found: set[str] = set()
    for i, (start, after) in enumerate(changes):
        if after.startswith(blob):
            end = changes[i + 1][0] + "^" if i + 1 < len(changes) else "HEAD"
            # start and what follows it up to end (start^@: nothing for a root commit)
            found.update(git(git_dir, "rev-list", "--first-parent", end, "--not",
                             f"{start}^@").split())
    return found


def base_commit(git_dir: Path, blobs: list[tuple[str, str]]) -> str | None:
    candidates: set[str] | None = None
    for path, blob in blobs:
        found = commits_with_blob(git_dir, path, blob)
        candidates = found if candidates is None else candidates & found
        if not candidates:
            return None
    if not candidates:
        return None
    for commit in git(git_dir, "rev-list", "--first-parent", "HEAD").split():
        if commit in candidates:
            return commit  # the newest
    return None


def base_off_first_parent(git_dir: Path, blobs: list[tuple[str, str]]) -> str | None:
    """The newest commit reachable from HEAD, on any branch merged into it, where every
    path has its blob: a base on a release branch (sphinx 3.x) that was merged later."""
    commits = git(git_dir, "rev-list", "HEAD").split()  # newest first
    queries = "".join(f"{commit}:{path}\n" for commit in commits for path, _ in blobs)
    done = subprocess.run(["git", "--git-dir", str(git_dir), "cat-file",
                           "--batch-check=%(objecttype) %(objectname)"], input=queries,
                          capture_output=True, text=True, check=True)
    # one line per query: "blob NAME", or "COMMIT:PATH missing" (whose commit's name
    # could start as the blob's does: only a blob line is read)
    found = done.stdout.splitlines()
    for number, commit in enumerate(commits):
        held = found[number * len(blobs):(number + 1) * len(blobs)]
        if all(line.startswith("blob " + blob) for line, (_, blob)
               in zip(held, blobs, strict=True)):
            return commit
    return None


def recovered_base(git_dir: Path, patch: str, setup_files: tuple[str, ...]) -> str | None:
    """The run's base: the newest first-parent commit holding the blob of every file the
    submission modifies (the image's own edits included: their pre-image is the base's),
    else the newest such commit of a merged branch; failing both, the same search for
    the others' blobs alone (the image's pins then may not apply)."""
    every = pre_image_blobs(patch, ())
    if not every:
        return None
    base = base_commit(git_dir, every) or base_off_first_parent(git_dir, every)
    others = pre_image_blobs(patch, setup_files)
    if base is None and others and len(others) < len(every):
        base = base_commit(git_dir, others) or base_off_first_parent(git_dir, others)
    return base


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mirrors", type=Path, help="bare git directories as OWNER+NAME/repo")
    parser.add_argument("out", type=Path, help="where runs.jsonl and trajs/ go")
    add_runs_options(parser)
    parser.add_argument("--development-repositories", action="store_true",
                        help="with --runs-from: keep the runs of "
                             + " and ".join(DEVELOPMENT_REPOSITORIES)
                             + " too (another model's runs of them were not what the rules "
                               "were set on)")
    args = parser.parse_args()
    if args.development_repositories and args.runs_from is None:
        parser.error("--development-repositories goes with --runs-from")
    try:
        return _write_runs(args)
    except RunsError as exc:
        print(exc, file=sys.stderr)
        return 2


def _write_runs(args: argparse.Namespace) -> int:
    # the runs file names the repositories absolutely: it is read from anywhere
    args.mirrors, args.out = args.mirrors.resolve(), args.out.resolve()
    source = recorded_runs(args)
    if source is None:
        print(f"{args.mirrors}: {NO_RESULTS}", file=sys.stderr)
        return 2
    (args.out / "trajs").mkdir(parents=True, exist_ok=True)
    rows, skipped = [], list(source.left_out)
    unfetched: Counter[str] = Counter()  # runs of repositories with no mirror here
    developed: Counter[str] = Counter()  # runs of the repositories the rules were set on
    doubted: list[str] = []  # runs the verdicts resolve that submitted nothing
    for instance_id, read_trajectory in source.runs:
        repo = repo_of(instance_id)
        if repo in DEVELOPMENT_REPOSITORIES and not args.development_repositories:
            developed[repo] += 1
            continue
        git_dir = git_dir_of(args.mirrors, repo)
        if git_dir is None:
            unfetched[repo] += 1
            continue
        text = read_trajectory()
        patch = submission_of(text, instance_id)
        if resolved_without_a_patch(instance_id, patch, source):
            doubted.append(instance_id)
        setup_files = IMAGE_SETUP_FILES.get(repo, ())
        base = recovered_base(git_dir, patch, setup_files)
        if base is None:
            skipped.append(f"{instance_id}: " + (
                "no file modified" if not pre_image_blobs(patch, ()) else
                "no commit reachable from HEAD has its files' blobs"))
            continue
        trajectory = args.out / "trajs" / f"{instance_id}.traj.json"
        trajectory.write_text(text, encoding="utf-8")
        row = {"instance_id": instance_id, "repo": repo, "base_commit": base,
               "resolved": source.resolved(instance_id),
               "trajectory": str(trajectory.relative_to(args.out)), "repo_git": str(git_dir)}
        setup = setup_patch(patch, setup_files) if setup_files else ""
        if setup:
            # a pin that does not apply at the recovered base is left out; the tree check
            # then flags the run where its tree parts from the recorded one
            row["testbed_setup"] = (f"git apply <<'{SETUP_PATCH_END}' || true\n{setup}"
                                    f"{SETUP_PATCH_END}")
        rows.append(row)
    rows.sort(key=lambda row: row["instance_id"])
    # whole or not at all: the replay reads what it finds
    write_whole(args.out / "runs.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    for line in skipped:
        print(f"left out: {line}", file=sys.stderr)
    if developed and args.runs_from is not None:  # the results folder's are known to be
        print(f"left out: {sum(developed.values())} runs of the repositories the rules were "
              "set on (" + ", ".join(f"{repo} {count}" for repo, count in
                                     developed.most_common()) + ")", file=sys.stderr)
    if unfetched:
        print(f"not fetched into {args.mirrors} ({sum(unfetched.values())} runs): "
              + ", ".join(f"{repo} {count}" for repo, count in unfetched.most_common())
              + " (fetch github:OWNER/NAME)", file=sys.stderr)
    if doubted:
        print(doubted_verdicts(doubted), file=sys.stderr)
    resolved = sum(1 for row in rows if row["resolved"])
    print(f"{len(rows)} runs in {args.out / 'runs.jsonl'} ({resolved} resolved); "
          f"{len(skipped)} left out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
