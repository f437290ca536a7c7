"""tools/sdist_runs.py: runs of repositories too big to fetch, on a release's tree."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

from ctxdb.agent.replay import load_run_specs

TOOLS = Path(__file__).resolve().parent.parent / "tools"
RESULTS = Path("swebench_results") / "20251118_gemini-3-pro-74pct"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env={**GIT_ENV, "HOME": str(cwd)},
                          capture_output=True, text=True, check=True).stdout.strip()


def _sdist(path: Path, top: str, files: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.uid, info.uname = len(data), 4242, "packager"
            archive.addfile(info, io.BytesIO(data))
    return path


def _mirrors(tmp_path: Path, runs: dict[str, bool]) -> Path:
    """A results mirror holding each run's trajectory and verdict."""
    work = tmp_path / "results"
    for instance, resolved in runs.items():
        folder = work / RESULTS / "trajs" / instance
        folder.mkdir(parents=True)
        (folder / f"{instance}.traj.json").write_text(json.dumps({"instance": instance}))
        logs = work / RESULTS / "logs" / instance
        logs.mkdir(parents=True)
        (logs / "report.json").write_text(json.dumps({"resolved": resolved}))
    _git(work, "init", "-q", "-b", "main")
    _git(work, "add", "-A")
    _git(work, "commit", "-qm", "runs")
    mirrors = tmp_path / "mirrors"
    mirrors.mkdir()
    _git(tmp_path, "clone", "-q", "--bare", str(work), str(mirrors / "gruckion+mini-swe-agent"))
    return mirrors


def _tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOLS / "sdist_runs.py"), *args],
                          capture_output=True, text=True, check=False)


def test_each_run_gets_the_release_that_serves_its_number(tmp_path):
    mirrors = _mirrors(tmp_path, {"django__django-11001": True, "django__django-15002": False,
                                  "django__django-16003": True, "flask__flask-1": True})
    old = _sdist(tmp_path / "Django-3.2.tar.gz", "Django-3.2", {"django/__init__.py": "V = 3\n"})
    new = _sdist(tmp_path / "Django-4.1.tar.gz", "Django-4.1", {"django/__init__.py": "V = 4\n"})
    out = tmp_path / "out"
    done = _tool(str(mirrors), str(out), "--tree", f"django/django={old}@15000",
                 "--tree", f"django/django={new}")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [(r["instance_id"], r["tree"], r["resolved"]) for r in rows] == [
        ("django__django-11001", "Django-3.2.tar.gz", True),
        ("django__django-15002", "Django-4.1.tar.gz", False),
        ("django__django-16003", "Django-4.1.tar.gz", True)]  # no --tree for flask
    # (these trajectories submitted nothing: verdicts resolving them are doubted)
    assert ("the verdicts resolve 2 run(s) that submitted no patch (django__django-11001 "
            "django__django-16003)") in done.stderr
    # the base commit holds the sdist's files at the tree's root, whoever packed them
    base = rows[0]["base_commit"]
    git_dir = Path(rows[0]["repo_git"])
    shown = subprocess.run(["git", "--git-dir", str(git_dir), "show",
                            f"{base}:django/__init__.py"], capture_output=True, text=True,
                           check=True).stdout
    assert shown == "V = 3\n" and rows[1]["base_commit"] != base
    # what the replay reads: every line good, each trajectory the run's own
    specs, errors = load_run_specs(out / "runs.jsonl")
    assert errors == [] and len(specs) == 3
    assert json.loads(specs[2].trajectory.read_text()) == {"instance": "django__django-16003"}
    # run again: the same commits (the repository is reused); made afresh elsewhere, from
    # a relative OUT_DIR, the same commit too, its repository named absolutely
    again = _tool(str(mirrors), str(out), "--tree", f"django/django={old}@15000",
                  "--tree", f"django/django={new}")
    assert again.returncode == 0 and (out / "runs.jsonl").read_text().count(base) == 1
    afresh = subprocess.run([sys.executable, str(TOOLS / "sdist_runs.py"), str(mirrors),
                             "elsewhere", "--tree", f"django/django={old}"], cwd=tmp_path,
                            capture_output=True, text=True, check=False)
    assert afresh.returncode == 0, afresh.stderr
    row = json.loads((tmp_path / "elsewhere" / "runs.jsonl").read_text().splitlines()[0])
    assert row["base_commit"] == base and Path(row["repo_git"]).is_absolute()


def test_a_sample_is_drawn_and_a_run_no_tree_serves_is_named(tmp_path):
    mirrors = _mirrors(tmp_path, {f"django__django-{n}": True for n in (11, 12, 13, 14, 20)})
    sdist = _sdist(tmp_path / "Django-3.2.tar.gz", "Django-3.2", {"setup.py": "\n"})

    def drawn(out: Path, *sample: str) -> tuple[list[str], str]:
        done = _tool(str(mirrors), str(out), "--tree", f"django/django={sdist}@20", *sample)
        assert done.returncode == 0, done.stderr
        return ([json.loads(line)["instance_id"]
                 for line in (out / "runs.jsonl").read_text().splitlines()], done.stderr)

    every, said = drawn(tmp_path / "all")
    assert every == [f"django__django-{n}" for n in (11, 12, 13, 14)]
    assert "no --tree serves 1 run(s): django__django-20" in said
    sample, _ = drawn(tmp_path / "a", "--sample", "django/django=2", "--seed", "3")
    assert len(set(sample)) == 2 and set(sample) <= set(every)
    assert drawn(tmp_path / "b", "--sample", "django/django=2", "--seed", "3")[0] == sample


def test_bad_trees_samples_and_archives_are_named(tmp_path):
    sdist = _sdist(tmp_path / "Django-3.2.tar.gz", "Django-3.2", {"setup.py": "\n"})
    nowhere = tmp_path / "nope.tar.gz"
    for arguments, said in (
            (["--tree", f"django={sdist}"], "expected OWNER/NAME=FILE.tar.gz[@BELOW]"),
            (["--tree", f"django/django={nowhere}"], f"{nowhere}: no such file"),
            (["--tree", f"django/django={sdist}", "--tree", f"django/django={sdist}@10"],
             "serves every run"),
            (["--tree", f"django/django={sdist}@20", "--tree", f"django/django={sdist}@10"],
             "expected BELOW above the previous tree's 20"),
            (["--tree", f"django/django={sdist}", "--sample", "django/Django=3"],
             "no --tree serves django/Django (the trees serve django/django)"),
            (["--tree", f"django/django={sdist}", "--sample", "django/django=3",
              "--sample", "django/django=4"], "django/django is sampled already"),
            (["--tree", f"django/django={sdist}"], "fetch github:gruckion/mini-swe-agent")):
        done = _tool(str(tmp_path), str(tmp_path / "out"), *arguments)
        assert done.returncode == 2 and said in done.stderr, (arguments, done.stderr)
    # archives it cannot use: named, and nothing half-made is left to be taken later
    mirrors = _mirrors(tmp_path, {"django__django-1": True})
    two_tops = tmp_path / "two" / "Django-3.2.tar.gz"
    two_tops.parent.mkdir()
    with tarfile.open(two_tops, "w:gz") as archive:
        for top in ("a", "b"):
            info = tarfile.TarInfo(f"{top}/setup.py")
            archive.addfile(info, io.BytesIO(b""))
    broken = tmp_path / "broken" / "Django-3.2.tar.gz"
    broken.parent.mkdir()
    broken.write_bytes(b"not gzip")
    # an archive with a repository of its own, whose config would run a command of its
    # choosing as soon as git adds the files (core.fsmonitor): refused, nothing run
    ran = tmp_path / "fsmonitor-ran"
    armed = _sdist(tmp_path / "armed" / "Django-3.2.tar.gz", "Django-3.2", {
        "setup.py": "\n", ".git/HEAD": "ref: refs/heads/main\n",
        ".git/config": f"[core]\n\tfsmonitor = touch {ran}\n"}) \
        if (tmp_path / "armed").mkdir() is None else None
    for archive_path, said in ((two_tops, "expected one top directory, got ['a', 'b']"),
                               (broken, "not a readable .tar.gz"),
                               (armed, "holds a .git of its own (Django-3.2/.git)")):
        out = tmp_path / f"out-{archive_path.parent.name}"
        done = _tool(str(mirrors), str(out), "--tree", f"django/django={archive_path}")
        assert done.returncode == 2 and f"{archive_path}: {said}" in done.stderr, done.stderr
        assert list((out / "git").iterdir()) == []
    assert not ran.exists()
