"""bench/replay.py and bench/devset.py: the development set's figures, their input
refused by name in one line."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from ctxdb.ab.instances import InstanceError

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _load(monkeypatch, name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, f"bench_{name}", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def bench_replay(monkeypatch):
    return _load(monkeypatch, "replay")


@pytest.fixture
def bench_devset(monkeypatch):
    return _load(monkeypatch, "devset")


def _main(module, monkeypatch, *argv: str) -> int:
    monkeypatch.setattr(sys, "argv", [Path(module.__file__).name, *argv])
    return module.main()


def test_a_missing_instances_file_is_one_line_naming_the_option(bench_replay, tmp_path,
                                                               monkeypatch, capsys):
    missing = tmp_path / "elsewhere" / "instances.jsonl"
    status = _main(bench_replay, monkeypatch, str(tmp_path), "--instances", str(missing),
                   "--runs", str(tmp_path / "runs.jsonl"))
    assert status == bench_replay.EXIT_BAD_INPUT
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"replay: error: --instances {missing}: ")
    assert "expected the development runs' instances.jsonl" in line
    # its default is the list beside this repository, wherever that is
    assert bench_replay.DEFAULT_INSTANCES.name == "instances.jsonl"


def test_the_runs_file_names_the_trajectories_beside_the_instances_file(bench_replay,
                                                                         tmp_path, monkeypatch,
                                                                         capsys):
    instances = tmp_path / "devset" / "instances.jsonl"
    instances.parent.mkdir()
    instances.write_text(json.dumps({
        "instance_id": "o__n-1", "repo": "o/n", "base_commit": "abc", "resolved": True,
        "trajectory": "trajs/o__n-1.traj.json", "problem_statement": "…"}) + "\n"
        + json.dumps({"instance_id": "o__n-2"}) + "\n", encoding="utf-8")
    runs = tmp_path / "runs.jsonl"
    with pytest.raises(InstanceError, match=rf"--instances {instances}:2: expected "
                       "a JSON object with instance_id, repo, base_commit"):
        bench_replay.write_runs_file(instances, tmp_path / "mirrors", runs)
    instances.write_text(instances.read_text(encoding="utf-8").splitlines()[0] + "\n",
                         encoding="utf-8")
    with pytest.raises(InstanceError, match="MIRROR_DIR .*: no git directory for o/n"):
        bench_replay.write_runs_file(instances, tmp_path / "mirrors", runs)
    undecodable = tmp_path / "latin1.jsonl"
    undecodable.write_bytes(b'{"instance_id": "caf\xe9"}\n')
    with pytest.raises(InstanceError, match=rf"--instances {undecodable}: not UTF-8 text"):
        bench_replay.write_runs_file(undecodable, tmp_path / "mirrors", runs)
    (tmp_path / "mirrors" / "o+n").mkdir(parents=True)
    (tmp_path / "mirrors" / "o+n" / "HEAD").write_text("ref: refs/heads/main\n")
    bench_replay.write_runs_file(instances, tmp_path / "mirrors", runs)
    (line,) = [json.loads(text) for text in runs.read_text(encoding="utf-8").splitlines()]
    assert line["trajectory"] == str(instances.parent / "trajs" / "o__n-1.traj.json")
    assert line["repo_git"] == str(tmp_path / "mirrors" / "o+n")
    assert "problem_statement" not in line
    assert _main(bench_replay, monkeypatch, str(tmp_path / "no-mirrors"),
                 "--instances", str(instances), "--runs", str(runs)) == bench_replay.EXIT_BAD_INPUT
    assert "MIRROR_DIR" in capsys.readouterr().err


def test_devset_names_a_missing_instances_file_and_a_repository_without_a_git_dir(
        bench_devset, tmp_path, monkeypatch, capsys):
    missing = tmp_path / "instances.jsonl"
    output = ["--output", str(tmp_path / "out" / "instances.jsonl")]
    assert _main(bench_devset, monkeypatch, str(tmp_path), "--instances", str(missing),
                 *output) == bench_devset.EXIT_BAD_INPUT
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"devset: error: --instances {missing}: ")
    missing.write_text(json.dumps({"instance_id": "o__n-1", "repo": "o/n"}) + "\n",
                       encoding="utf-8")
    assert _main(bench_devset, monkeypatch, str(tmp_path), "--instances", str(missing),
                 *output) == bench_devset.EXIT_BAD_INPUT
    assert capsys.readouterr().err == (f"devset: error: MIRROR_DIR {tmp_path}: no git "
                                       f"directory for o/n (looked for {tmp_path}/o+n/repo and "
                                       f"{tmp_path}/o+n)\n")
