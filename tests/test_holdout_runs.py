"""tools/holdout_runs.py: held-out runs' base commits recovered from their submissions."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent.parent / "tools"


@pytest.fixture
def holdout():
    spec = importlib.util.spec_from_file_location("holdout_runs", TOOLS / "holdout_runs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(cwd), "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def _commit(work: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        (work / name).write_text(text, encoding="utf-8")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "change")
    return _git(work, "rev-parse", "HEAD")


def test_the_base_is_the_newest_commit_with_every_modified_files_blob(tmp_path, holdout):
    work = tmp_path / "work"
    work.mkdir()
    _git(work, "init", "-q", "-b", "main")
    _commit(work, {"mod.py": "a = 1\n", "other.py": "x = 1\n"})
    _commit(work, {"mod.py": "a = 2\n"})
    wanted = _commit(work, {"other.py": "x = 2\n"})  # mod.py's blob unchanged
    _commit(work, {"mod.py": "a = 3\n"})  # the fix: the blob is gone from here on
    # mod.py's blob again, later, but other.py's is not
    _commit(work, {"mod.py": "a = 2\n", "other.py": "x = 3\n"})
    _git(work, "checkout", "-q", wanted)
    (work / "mod.py").write_text("a = 4\n", encoding="utf-8")
    (work / "other.py").write_text("x = 5\n", encoding="utf-8")
    patch = _git(work, "diff")
    _git(work, "checkout", "-q", "--", ".")
    _git(work, "checkout", "-q", "main")
    blobs = holdout.pre_image_blobs(patch + "\n", ())
    assert [path for path, _ in blobs] == ["mod.py", "other.py"]
    assert holdout.base_commit(work / ".git", blobs) == wanted
    # a blob from the root commit on: the root commit itself may be the base
    root = _git(work, "rev-list", "--max-parents=0", "HEAD")
    root_blob = _git(work, "rev-parse", f"{root}:other.py")[:9]
    assert holdout.base_commit(work / ".git", [("other.py", root_blob)]) is not None
    # a blob no commit holds: no base
    assert holdout.base_commit(work / ".git", [("mod.py", "0123456789")]) is None
    # files the image edits are left out of the search and make the setup patch
    assert [p for p, _ in holdout.pre_image_blobs(patch + "\n", ("other.py",))] == ["mod.py"]
    assert holdout.setup_patch(patch + "\n", ("other.py",)).startswith(
        "diff --git a/other.py b/other.py")


def _patch_at(work: Path, commit: str, files: dict[str, str]) -> str:
    _git(work, "checkout", "-q", commit)
    for name, text in files.items():
        (work / name).write_text(text, encoding="utf-8")
    patch = _git(work, "diff")
    _git(work, "checkout", "-q", "--", ".")
    _git(work, "checkout", "-q", "main")
    return patch + "\n"  # _git strips the output; a patch ends with its newline


def test_a_base_on_a_branch_merged_later_is_found_and_pins_are_searched_too(tmp_path,
                                                                           holdout):
    work = tmp_path / "work"
    work.mkdir()
    _git(work, "init", "-q", "-b", "main")
    _commit(work, {"mod.py": "a = 1\n", "setup.py": "pin = 1\n"})
    _git(work, "checkout", "-q", "-b", "release")
    wanted = _commit(work, {"mod.py": "a = 7\n", "setup.py": "pin = 9\n"})  # the base
    _git(work, "checkout", "-q", "main")
    _commit(work, {"mod.py": "a = 2\n"})
    _git(work, "merge", "-q", "-s", "ours", "-m", "merge release", "release")
    _git(work, "branch", "-q", "-D", "release")  # only reachable through the merge
    patch = _patch_at(work, wanted, {"mod.py": "a = 4\n", "setup.py": "pin = 10\n"})
    git_dir = work / ".git"
    # no first-parent commit holds both blobs: the merged branch's commit does
    assert holdout.base_commit(git_dir, holdout.pre_image_blobs(patch, ())) is None
    assert holdout.recovered_base(git_dir, patch, ("setup.py",)) == wanted
    # an image's pin whose pre-image no commit holds: the base is searched without it
    unheld = patch.replace(_git(work, "rev-parse", f"{wanted}:setup.py")[:7], "0123456")
    assert holdout.recovered_base(git_dir, unheld, ("setup.py",)) == wanted
    assert holdout.recovered_base(git_dir, unheld, ()) is None
    # a path no commit holds is "COMMIT:PATH missing": a commit's name is no blob's
    assert holdout.base_off_first_parent(git_dir, [("nope.py", wanted[:7])]) is None


def test_without_the_results_mirror_it_says_what_to_fetch(tmp_path):
    done = subprocess.run([sys.executable, str(TOOLS / "holdout_runs.py"), str(tmp_path),
                           str(tmp_path / "out")], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and "fetch github:gruckion/mini-swe-agent" in done.stderr
    assert not (tmp_path / "out" / "runs.jsonl").exists()


def test_runs_of_repositories_not_fetched_are_counted_by_repository(tmp_path):
    # a results mirror holding two runs of a repository that was not fetched, and one of
    # a development repository
    work = tmp_path / "results"
    work.mkdir()
    _git(work, "init", "-q", "-b", "main")
    for instance in ("owner__name-1", "owner__name-2", "sympy__sympy-1"):
        folder = work / "swebench_results" / "20251118_gemini-3-pro-74pct" / "trajs" / instance
        folder.mkdir(parents=True)
        (folder / f"{instance}.traj.json").write_text("{}", encoding="utf-8")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "runs")
    mirrors = tmp_path / "mirrors"
    mirrors.mkdir()
    _git(tmp_path, "clone", "-q", "--bare", str(work), str(mirrors / "gruckion+mini-swe-agent"))
    done = subprocess.run([sys.executable, str(TOOLS / "holdout_runs.py"), str(mirrors),
                           str(tmp_path / "out")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    # a development repository's runs are no held-out runs, fetched or not
    assert "(2 runs): owner/name 2 (fetch github:OWNER/NAME)" in done.stderr
    assert "sympy" not in done.stderr
    assert done.stdout.startswith("0 runs in ")


def test_another_harness_runs_folder_is_read_with_its_reports_verdicts(tmp_path):
    """``--runs-from FOLDER --report FILE``: mini-swe-agent's batch layout (ID/ID.traj.json)
    and the SWE-bench harness's report; each run's base is recovered from its submission
    and its verdict read from resolved_ids (absent: unresolved)."""
    work = tmp_path / "work"
    work.mkdir()
    _git(work, "init", "-q", "-b", "main")
    base = _commit(work, {"mod.py": "a = 1\n"})
    _commit(work, {"mod.py": "a = 2\n"})  # the fix: the base's blob is gone from here on
    patch = _patch_at(work, base, {"mod.py": "a = 3\n"})
    mirrors = tmp_path / "mirrors"
    mirrors.mkdir()
    _git(tmp_path, "clone", "-q", "--bare", str(work), str(mirrors / "owner+name"))
    runs = tmp_path / "runs"
    for instance in ("owner__name-1", "owner__name-2"):
        (runs / instance).mkdir(parents=True)
        (runs / instance / f"{instance}.traj.json").write_text(
            json.dumps({"info": {"submission": patch}, "messages": []}), encoding="utf-8")
    (runs / "preds.json").write_text("{}", encoding="utf-8")  # the batch's other files
    # a run of a development repository, and one the report did not evaluate
    for instance in ("sympy__sympy-1", "owner__name-3"):
        (runs / instance).mkdir(parents=True)
        (runs / instance / f"{instance}.traj.json").write_text("{}", encoding="utf-8")
    report = runs / "model.eval.json"
    report.write_text(json.dumps({"resolved_ids": ["owner__name-2"], "completed_ids": [
        "owner__name-1", "owner__name-2", "sympy__sympy-1"]}), encoding="utf-8")

    def holdout_runs(*options: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(TOOLS / "holdout_runs.py"), str(mirrors),
                               str(tmp_path / "out"), *options], capture_output=True,
                              text=True, check=False)

    # the mirrors named relative to the directory the tool runs in: the runs file names
    # them absolutely, so a replay reads it from anywhere
    done = subprocess.run([sys.executable, str(TOOLS / "holdout_runs.py"), "mirrors", "out",
                           "--runs-from", str(runs), "--report", str(report)], cwd=tmp_path,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"2 runs in {tmp_path / 'out' / 'runs.jsonl'} (1 resolved)")
    rows = [json.loads(line) for line in
            (tmp_path / "out" / "runs.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(r["instance_id"], r["base_commit"], r["resolved"]) for r in rows] == [
        ("owner__name-1", base, False), ("owner__name-2", base, True)]
    assert {r["repo_git"] for r in rows} == {str(mirrors / "owner+name")}
    assert (tmp_path / "out" / rows[0]["trajectory"]).read_text(encoding="utf-8") == \
        (runs / "owner__name-1" / "owner__name-1.traj.json").read_text(encoding="utf-8")
    assert "left out: owner__name-3: not among the report's completed_ids" in done.stderr
    assert "left out: 1 runs of the repositories the rules were set on (sympy/sympy 1)" \
        in done.stderr
    # another model's runs of a development repository, kept when asked for
    _git(tmp_path, "clone", "-q", "--bare", str(work), str(mirrors / "sympy+sympy"))
    (runs / "sympy__sympy-1" / "sympy__sympy-1.traj.json").write_text(
        json.dumps({"info": {"submission": patch}, "messages": []}), encoding="utf-8")
    done = holdout_runs("--runs-from", str(runs), "--report", str(report),
                        "--development-repositories")
    assert done.returncode == 0 and done.stdout.startswith("3 runs in"), done.stderr
    assert "rules were set on" not in done.stderr
    sympy_run = json.loads((tmp_path / "out" / "runs.jsonl").read_text(
        encoding="utf-8").splitlines()[2])
    assert (sympy_run["repo"], sympy_run["base_commit"]) == ("sympy/sympy", base)
    done = holdout_runs("--development-repositories")
    assert done.returncode == 2 and "goes with --runs-from" in done.stderr
    # a report that resolves a run which submitted nothing is not these runs' own: said
    (runs / "owner__name-4").mkdir()
    (runs / "owner__name-4" / "owner__name-4.traj.json").write_text(
        json.dumps({"info": {"submission": ""}, "messages": []}), encoding="utf-8")
    report.write_text(json.dumps({"resolved_ids": ["owner__name-2", "owner__name-4"],
                                  "completed_ids": ["owner__name-1", "owner__name-2",
                                                    "owner__name-4"]}), encoding="utf-8")
    done = holdout_runs("--runs-from", str(runs), "--report", str(report))
    assert done.returncode == 0 and done.stdout.startswith("2 runs in"), done.stderr
    assert ("the verdicts resolve 1 run(s) that submitted no patch (owner__name-4): are "
            "they the SWE-bench harness's on these runs, of their model?") in done.stderr
    report.write_text(json.dumps({"resolved_ids": ["owner__name-2"], "completed_ids": [
        "owner__name-1", "owner__name-2", "owner__name-4"]}), encoding="utf-8")
    done = holdout_runs("--runs-from", str(runs), "--report", str(report))
    assert done.returncode == 0 and "submitted no patch" not in done.stderr, done.stderr
    # a trajectory that is not JSON is named
    (runs / "owner__name-1" / "owner__name-1.traj.json").write_text("{", encoding="utf-8")
    done = holdout_runs("--runs-from", str(runs), "--report", str(report))
    assert done.returncode == 2 and "owner__name-1: its trajectory is not JSON" in done.stderr
    # what is wrong is named: one option without the other, a report that is not one
    done = holdout_runs("--runs-from", str(runs))
    assert done.returncode == 2 and "--runs-from and --report go together" in done.stderr
    report.write_text("[1]", encoding="utf-8")
    done = holdout_runs("--runs-from", str(runs), "--report", str(report))
    assert done.returncode == 2 and f"--report {report}: expected the SWE-bench" in done.stderr
    report.write_text("{\"resolved_ids\": []}", encoding="utf-8")
    done = holdout_runs("--runs-from", str(tmp_path / "out" / "trajs"), "--report",
                        str(report))
    assert done.returncode == 2 and "no ID/ID.traj.json in it" in done.stderr
