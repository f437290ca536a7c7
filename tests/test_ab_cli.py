"""`ctxdb ab run` and `ctxdb ab outcome` as a user meets them: exit codes, what is
written when a line is bad, and the progress bar on a terminal (a real pty) but not in
a pipe."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import threading
from pathlib import Path

from sqlalchemy import text

from ctxdb import ContextStore
from ctxdb.cli import EXIT_BAD_INPUT, EXIT_OK, main

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURE_INSTANCES = REPO_ROOT / "fixtures" / "swebench" / "instances.jsonl"


def _fixture_lines() -> list[dict]:
    """The fixture's instances with their repo_path made absolute (they run from tmp)."""
    lines = []
    for line in FIXTURE_INSTANCES.read_text().splitlines():
        data = json.loads(line)
        data["repo_path"] = str((FIXTURE_INSTANCES.parent / data["repo_path"]).resolve())
        lines.append(data)
    return lines


def _decisions(db: Path) -> list[tuple]:
    with ContextStore.open(str(db)) as store, store.engine.connect() as connection:
        return [tuple(r) for r in connection.execute(text(
            "SELECT instance_id, COUNT(*) FROM decision GROUP BY instance_id"))]


# -- ab run ---------------------------------------------------------------------------------------

def test_ab_run_runs_the_good_lines_then_exits_2_naming_the_bad(tmp_path, capsys):
    good = _fixture_lines()[0]
    no_repo = {k: v for k, v in good.items() if k != "repo"} | {"instance_id": "no-repo"}
    bad_list = good | {"instance_id": "bad-list", "FAIL_TO_PASS": 3}
    instances = tmp_path / "instances.jsonl"
    instances.write_text("\n".join([json.dumps(no_repo), json.dumps(good), "{not json",
                                    json.dumps(bad_list)]) + "\n")
    db = tmp_path / "ab.db"
    status = main(["ab", "run", str(instances), "--db", str(db), "--workers", "1",
                   "--cache", str(tmp_path / "cache")])
    out, err = capsys.readouterr()
    assert status == EXIT_BAD_INPUT
    assert "ab run: 1 instance(s) done, 4 decisions; 0 failed, 3 bad line(s)" in out
    assert f"not run: {instances} line 1: field 'repo': expected a value (the field is " \
           "missing)" in err
    assert f"not run: {instances} line 3: not valid JSON" in err
    assert "expected one JSON object per line" in err
    assert f"not run: {instances} line 4: field 'FAIL_TO_PASS': expected a list of test " \
           "ids" in err
    assert _decisions(db) == [("shopcart__shopcart-1", 4)]  # the good line did run


def test_ab_run_with_only_bad_lines_writes_no_store(tmp_path, capsys):
    instances = tmp_path / "instances.jsonl"
    instances.write_text('{"instance_id": "x"}\n')
    db = tmp_path / "ab.db"
    assert main(["ab", "run", str(instances), "--db", str(db), "--workers", "1",
                 "--cache", str(tmp_path / "cache")]) == EXIT_BAD_INPUT
    assert f"{instances} line 1: field 'repo'" in capsys.readouterr().err
    assert not db.exists()


# -- ab outcome -----------------------------------------------------------------------------------

def _store_with_runs(db: Path, instances=("i1", "i2", "i3", "i4", "i5")) -> None:
    """Two runs, each with a decision for each of ``instances``."""
    with ContextStore.open(str(db)) as store, store.write_transaction() as connection:
        for run_id, arm in (("ab/ctx08/default", "ctx08"), ("ab/current/default", "current")):
            connection.execute(text("INSERT INTO run (run_id, arm, created_at)"
                                    " VALUES (:r, :a, 'now')"), {"r": run_id, "a": arm})
            for instance in instances:
                connection.execute(text(
                    "INSERT INTO decision (run_id, instance_id, seq, decision_type, task_text,"
                    " request_json, request_sha256, tokenizer, token_ceiling, created_at)"
                    " VALUES (:r, :i, 1, 'edit', 't', '{}', 'h', 'cl100k_base', 1000, 'now')"),
                    {"r": run_id, "i": instance})


def _outcomes(db: Path) -> list[tuple]:
    with ContextStore.open(str(db)) as store, store.engine.connect() as connection:
        return [tuple(r) for r in connection.execute(text(
            "SELECT run_id, instance_id, solved, cost_usd FROM outcome"
            " ORDER BY run_id, instance_id"))]


def test_ab_outcome_is_all_or_nothing(tmp_path, capsys):
    db = tmp_path / "ab.db"
    _store_with_runs(db)
    good = {"run_id": "ab/ctx08/default", "instance_id": "i1", "solved": True, "cost_usd": 0.1}
    path = tmp_path / "outcomes.jsonl"
    path.write_text("\n".join([
        json.dumps(good),
        json.dumps({"run_id": "ab/ctx08/default", "instance_id": "i2", "solved": "yes"}),
        "[1, 2]",
        json.dumps({"run_id": "ab/nope", "instance_id": "i3", "solved": False}),
        json.dumps({"run_id": "ab/current/default", "instance_id": "i1"}),
        "",
        json.dumps(good | {"solved": False}),
        json.dumps({"run_id": "ab/current/default", "instance_id": "i4", "solved": True,
                    "cost": 0.2}),
        json.dumps({"run_id": "ab/current/default", "instance_id": "i5", "solved": True,
                    "model_tokens_in": -1}),
    ]) + "\n")
    assert main(["ab", "outcome", str(path), "--db", str(db)]) == EXIT_BAD_INPUT
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        f"ctxdb: error: {path} line 2: field 'solved': expected true or false, got 'yes'",
        f"ctxdb: error: {path} line 3: expected a JSON object, got list",
        f"ctxdb: error: {path} line 4: field 'run_id': no run 'ab/nope' in this store "
        "(expected the id of a run `ctxdb ab run` or a harness's agent loop made, such as "
        "mini-swe-agent's CtxdbModel.run_id; record outcomes after it)",
        f"ctxdb: error: {path} line 5: field 'solved': missing (expected run_id, "
        "instance_id, solved, and optionally cost_usd, model_tokens_in, model_tokens_out)",
        f"ctxdb: error: {path} line 7: run 'ab/ctx08/default' and instance 'i1' again (also "
        "on line 1): expected one outcome per run and instance",
        f"ctxdb: error: {path} line 8: field 'cost': not an outcome field (expected run_id, "
        "instance_id, solved, cost_usd, model_tokens_in, model_tokens_out)",
        f"ctxdb: error: {path} line 9: field 'model_tokens_in': expected a non-negative "
        "number or null, got -1",
        f"ctxdb: error: 7 bad line(s) in {path}: nothing recorded",
    ]
    assert _outcomes(db) == []  # the good line 1 was not recorded either

    path.write_text(json.dumps(good) + "\n" + json.dumps(
        {"run_id": "ab/current/default", "instance_id": "i1", "solved": False}) + "\n")
    assert main(["ab", "outcome", str(path), "--db", str(db)]) == EXIT_OK
    assert capsys.readouterr().out == "recorded 2 outcome(s)\n"
    assert _outcomes(db) == [("ab/ctx08/default", "i1", True, 0.1),
                             ("ab/current/default", "i1", False, None)]


def test_ab_outcome_never_creates_a_store(tmp_path, capsys):
    path = tmp_path / "outcomes.jsonl"
    path.write_text(json.dumps({"run_id": "r", "instance_id": "i", "solved": True}) + "\n")
    db = tmp_path / "missing.db"
    assert main(["ab", "outcome", str(path), "--db", str(db)]) == EXIT_BAD_INPUT
    assert "does not exist" in capsys.readouterr().err
    assert not db.exists()


# -- the progress bar ------------------------------------------------------------------------------

def _run_cli(args: list[str], cwd: Path, stderr_on_a_terminal: bool) -> tuple[int, str]:
    """Run ``python -m ctxdb.cli ARGS`` with stderr on a pty (a terminal) or a pipe;
    returns (exit status, everything written to stderr)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    command = [sys.executable, "-m", "ctxdb.cli", *args]
    if not stderr_on_a_terminal:
        done = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        return done.returncode, done.stderr
    leader, follower = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:  # read as it comes: a full pty buffer would block the child
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the child closed the terminal
                return
            if not chunk:
                return
            chunks.append(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                                   stderr=follower)
        os.close(follower)
        status = process.wait()
    finally:
        reader.join(timeout=60)
        os.close(leader)
    return status, b"".join(chunks).decode(errors="replace")


def test_progress_bar_on_a_terminal_silence_in_a_pipe(tmp_path):
    instances = tmp_path / "instances.jsonl"
    instances.write_text("\n".join(json.dumps(d) for d in _fixture_lines()) + "\n")
    cache = str(tmp_path / "cache")
    run = ["ab", "run", str(instances), "--workers", "1", "--cache", cache]

    status, err = _run_cli(run + ["--db", str(tmp_path / "tty.db")], tmp_path, True)
    assert status == EXIT_OK
    assert "ab run: [" in err and "] 0/2 instances" in err  # drawn before the first one
    assert "ab run: [" + "#" * 30 + "] 2/2 instances" in err
    assert "recon: [" not in err  # materialising draws no second bar under it

    status, err = _run_cli(run + ["--db", str(tmp_path / "pipe.db")], tmp_path, False)
    assert status == EXIT_OK
    assert "ab run: [" not in err and "\r" not in err

    evaluate = ["retrieve", "--eval", str(instances), "--cache", cache]
    status, err = _run_cli(evaluate, tmp_path, True)
    assert status == EXIT_OK and "retrieve --eval: [" in err and "2/2 instances" in err
    status, err = _run_cli(evaluate, tmp_path, False)
    assert status == EXIT_OK and "retrieve --eval: [" not in err


def test_ab_outcome_given_a_trajectory_names_ten_lines_and_says_what_the_file_is(tmp_path,
                                                                                 capsys):
    db = str(tmp_path / "o.db")
    assert main(["db", "upgrade", "--db", db]) == EXIT_OK
    trajectory = tmp_path / "run.traj.json"  # what mini-swe-agent saves: one document
    trajectory.write_text(json.dumps({"info": {"ctxdb": {"run_id": "r"}},
                                      "messages": [{"role": "user", "content": "x"}] * 30},
                                     indent=2), encoding="utf-8")
    lines = len(trajectory.read_text(encoding="utf-8").splitlines())
    capsys.readouterr()
    assert main(["ab", "outcome", str(trajectory), "--db", db]) == EXIT_BAD_INPUT
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 12 and said[10] == f"ctxdb: error: and {lines - 10} more bad lines"
    assert said[11] == (
        f"ctxdb: error: {lines} bad line(s) in {trajectory}: nothing recorded; the file is one "
        'JSON document, a trajectory: its line is {"run_id": info.ctxdb.run_id, '
        '"instance_id": info.ctxdb.instance_id, "solved": the evaluation\'s verdict}, where '
        "an outcome file holds one JSON object per line")
