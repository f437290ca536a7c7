"""A recorded run replayed end to end against real code nobody here wrote: the
requests 2.32.3 sdist from PyPI made a git repository, and a run of a bash-only agent
on it (grep -n, nl -ba | sed -n, a sed -i edit, a python -c edit, submit), written in
mini-swe-agent 1.x's format with the outputs the commands really print. On SQLite and
on PostgreSQL: every decision in three arms, the anchors of each next action, the tree
rebuilt to exactly the submitted patch."""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from ctxdb import models
from ctxdb.ab.reports import CACHED_PRICE_RATIO, run_report
from ctxdb.agent import replay as replay_module
from ctxdb.agent.adapter import waited_horizon
from ctxdb.agent.arms import CHAT_REPLY_PRIMING_TOKENS
from ctxdb.agent.loop import ABLATIONS, LoopRules, ablation_arm, item_numbers
from ctxdb.agent.replay import RunSpec, load_run_specs, replay_run, replay_spec_for_tree, run_replay
from ctxdb.cli import EXIT_INTERRUPTED, EXIT_TERMINATED, main
from ctxdb.db import resolve_url
from ctxdb.store import ContextStore

UTILS = "src/requests/utils.py"
TOOLS = Path(__file__).resolve().parent.parent / "tools"
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"
TASK = ("get_auth_from_url returns ('', '') for a URL without a password; it should "
        "return None for the missing password.")
OLD_TEXT = 'auth = ("", "")'
NEW_TEXT = 'auth = ("", None)'

pytestmark = pytest.mark.network


def _git(*args: str, cwd) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}).stdout


@pytest.fixture(scope="session")
def requests_repository(requests_root, tmp_path_factory):
    """The sdist as a git repository with one commit; returns (bare git dir, commit)."""
    download = tmp_path_factory.mktemp("requests-replay")
    work = download / "requests"
    shutil.copytree(requests_root, work)
    _git("init", "-q", "-b", "main", cwd=work)
    _git("add", "-A", cwd=work)
    _git("commit", "-q", "-m", "requests 2.32.3", cwd=work)
    bare = download / "requests.git"
    _git("clone", "-q", "--bare", str(work), str(bare), cwd=download)
    return bare, _git("rev-parse", "HEAD", cwd=work).strip()


def _shell(command: str, cwd) -> tuple[int, str]:
    done = subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV})
    return done.returncode, done.stdout + done.stderr


def _recorded_run(repository, tmp_path, commands=None) -> tuple[dict, str]:
    """The run, recorded by really running its commands (``(thought, command)`` pairs) in
    a checkout of the repository (the outputs are what they print there); returns the
    trajectory and its patch."""
    bare, commit = repository
    checkout = tmp_path / "agent-checkout"
    _git("clone", "-q", str(bare), str(checkout), cwd=tmp_path)
    _git("checkout", "-q", commit, cwd=checkout)
    commands = commands or [
        ("Find the function.", f"grep -n 'def get_auth_from_url' {UTILS}"),
        ("Read it.", f"nl -ba {UTILS} | sed -n '1018,1032p'"),
        ("A look elsewhere first.", "ls src/requests | head -5"),
        ("Replace the empty password.", f"sed -i 's/{OLD_TEXT}/{NEW_TEXT}/' {UTILS}"),
        ("And the docstring, with Python.",
         "python3 -c \"import pathlib; p = pathlib.Path('" + UTILS + "'); "
         "p.write_text(p.read_text().replace('extract them into a tuple of', "
         "'extract them into a pair of'))\""),
        ("Check.", "git diff --stat"),
    ]
    messages = [{"role": "system", "content": "You are a helpful assistant. ONE bash block."},
                {"role": "user", "content": f"<pr_description>\nConsider the following PR "
                                            f"description:\n{TASK}\n</pr_description>"}]
    for thought, command in commands:
        code, output = _shell(command, checkout)
        messages.append({"role": "assistant",
                         "content": f"THOUGHT: {thought}\n\n```bash\n{command}\n```"})
        messages.append({"role": "user", "content": f"<returncode>{code}</returncode>\n"
                                                    f"<output>\n{output}</output>"})
    _code, output = _shell(SUBMIT, checkout)
    submission = output.split("\n", 1)[1]
    messages += [{"role": "assistant", "content": f"THOUGHT: Done.\n\n```bash\n{SUBMIT}\n```"},
                 {"role": "user", "content": submission}]
    trajectory = {"trajectory_format": "mini-swe-agent-1", "instance_id": "psf__requests-1",
                  "info": {"submission": submission, "exit_status": "Submitted",
                           "config": {"environment": {"cwd": "/testbed", "timeout": 30}}},
                  "messages": messages}
    return trajectory, submission


def _rows(store_url: str, sql: str, **params) -> list:
    engine = sa.create_engine(resolve_url(store_url))
    try:
        with engine.connect() as connection:
            return connection.execute(sa.text(sql), params).all()
    finally:
        engine.dispose()


def test_an_escaped_sed_pattern_is_stored_as_spelled_and_kept_where_a_window_shows_it(
        requests_repository, tmp_path, window_cuts, cache_marks_tool, capsys):
    # the agent redoes an edit after a revert, copying its own earlier command (here the
    # pattern matches nothing: an edit's anchors come from its command alone)
    redo = f"sed -i 's/{OLD_TEXT}\\/2/{NEW_TEXT}/' {UTILS}"
    trajectory, _submission = _recorded_run(requests_repository, tmp_path, [
        ("Edit.", redo), ("Undo.", f"git checkout {UTILS}"), ("Again.", redo)])
    path = tmp_path / "psf__requests-1.traj.json"
    path.write_text(json.dumps(trajectory), encoding="utf-8")
    bare, commit = requests_repository
    store_url = str(tmp_path / "store.db")
    result = replay_run(store_url, RunSpec(path, "psf__requests-1", bare, commit))
    assert result.error is None, result.error
    spelled = _rows(store_url, "SELECT a.seq, a.anchor_text, a.anchor_spelled, o.kept "
                               "FROM replay_anchor a JOIN replay_anchor_outcome o USING "
                               "(run_id, instance_id, seq, anchor_no) WHERE o.arm = 'ctx08' "
                               "AND a.anchor_class = 'edit_text' ORDER BY a.seq")
    assert [tuple(row) for row in spelled] == [
        (1, OLD_TEXT + "/2", OLD_TEXT + "\\/2", False),  # never shown before the first
        (3, OLD_TEXT + "/2", OLD_TEXT + "\\/2", True)]  # step 1's command shows it
    # tools/window_cuts.py measures its cuts with the same spelling
    decisions = window_cuts.read_decisions(resolve_url(store_url), "ctx08")
    (third,) = [d for d in decisions if d.seq == 3]
    assert [a.spelled for a in third.anchor_values if a.text == OLD_TEXT + "/2"] == [
        OLD_TEXT + "\\/2"]
    # a window's fold horizon is the stride's unless its decision says its fold waited
    assert third.horizon == 0 and third.waited_horizon is None
    waited = dataclasses.replace(third, seq=13, waited_horizon=waited_horizon(
        "task_in_prefix,fold_waited:0"))
    assert waited.horizon == 0 and dataclasses.replace(waited, waited_horizon=None).horizon == 10
    # tools/cache_marks.py plays a cache that serves only at marks over the same windows
    capsys.readouterr()
    assert cache_marks_tool.main(["--db", resolve_url(store_url)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert cache_marks_tool.main(["--db", store_url]) == 0  # a path, as ctxdb takes it
    assert capsys.readouterr().out.splitlines() == table
    with pytest.raises(SystemExit):  # a store that is not there is named, not made
        cache_marks_tool.main(["--db", str(tmp_path / "none.db")])
    assert "none.db does not exist" in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()
    assert [row.split(" | ")[0] for row in table[2:]] == [
        "| current, either cache", "| ctx08, any shared start",
        "| ctx08, one message marked at its end", "| ctx08, ctxdb's marks"]
    (windows,), arms, _resolved = cache_marks_tool.read_runs(resolve_url(store_url))
    assert len(windows) == 4 and arms["ctx08"][0] == sum(tokens for tokens, _ in windows)
    # the harness's prompt at every decision but the first, then more where marked
    prompt = windows[0][0] - CHAT_REPLY_PRIMING_TOKENS
    assert cache_marks_tool.served(windows, cache_marks_tool.one_message) == 3 * prompt
    assert cache_marks_tool.served(windows, cache_marks_tool.ctxdb_marks) > 3 * prompt
    # and does not read a store whose anchors lack it: it says how to upgrade
    older = tmp_path / "older.db"
    shutil.copy(tmp_path / "store.db", older)
    engine = sa.create_engine(resolve_url(str(older)))
    with engine.begin() as connection:
        connection.execute(sa.text("UPDATE alembic_version SET version_num = '0009'"))
    engine.dispose()
    with pytest.raises(SystemExit):
        window_cuts.main(["--db", f"sqlite:///{older}"])
    assert "ctxdb db upgrade" in capsys.readouterr().err
    # a store is given as ctxdb takes it, a path too; a missing one is named, not made
    assert window_cuts.main(["--db", store_url, "--rows", "pointers"]) == 0
    assert capsys.readouterr().out.startswith("4 decisions")  # three steps and the submit
    # an older replay's windows are read at the stride they were built with
    assert window_cuts.main(["--db", store_url, "--rows", "pointers", "--fold-stride", "3"]) == 0
    assert window_cuts.WINDOW_RULES.fold_stride == 3
    assert dataclasses.replace(third, seq=13).horizon == 9
    capsys.readouterr()
    with pytest.raises(SystemExit):
        window_cuts.main(["--db", store_url, "--fold-stride", "0"])
    assert "--fold-stride: a number of steps of at least 1, not 0" in capsys.readouterr().err
    (tmp_path / "empty.db").touch()
    for given, said in ((tmp_path / "nothere.db", "nothere.db does not exist"),
                        (tmp_path, "is a directory"), (tmp_path / "empty.db", "is empty")):
        with pytest.raises(SystemExit):
            window_cuts.main(["--db", str(given)])
        assert said in capsys.readouterr().err
    assert not (tmp_path / "nothere.db").exists()
    with pytest.raises(SystemExit):
        window_cuts.main(["--db", store_url, "--arm", "mask10"])
    assert "windows are stored for the loop arm 'ctx08' only" in capsys.readouterr().err


def test_a_program_the_recorded_environment_lacked_is_lacking_in_the_re_run(
        requests_repository, tmp_path):
    """The recording's step 1 found no `sed` (as if its image lacked it then), so its edit
    was never made; by step 2 it had one and edited otherwise. Re-run here, where `sed`
    exists, step 1 must fail as it did (and step 2, after the last step that found none,
    must not), or the tree would end with an edit the run never made."""
    edit = f"sed -i 's/{OLD_TEXT}/{NEW_TEXT}/' {UTILS}"
    other_edit = f"sed -i 's/extract them into a tuple of/extract them into a pair of/' {UTILS}"
    trajectory, submission = _recorded_run(requests_repository, tmp_path,
                                           [("Edit the docstring.", other_edit)])
    not_found = [{"role": "assistant", "content": f"THOUGHT: Edit.\n\n```bash\n{edit}\n```"},
                 {"role": "user", "content": "<returncode>127</returncode>\n<output>\n"
                                             "bash: line 1: sed: command not found\n</output>"}]
    trajectory["messages"][2:2] = not_found
    path = tmp_path / "psf__requests-1.traj.json"
    path.write_text(json.dumps(trajectory), encoding="utf-8")
    assert replay_module.programs_lacked(replay_module.read_trajectory(path)) == {"sed": 1}
    bare, commit = requests_repository
    result = replay_run(str(tmp_path / "store.db"), RunSpec(path, "psf__requests-1", bare,
                                                            commit))
    assert result.error is None, result.error
    # step 1 failed here too (exit 127 as recorded), step 2 edited with sed as recorded
    assert (result.tree_matches_submission, result.tree_note) == (True, None)
    assert "pair of" in submission and NEW_TEXT not in submission


def test_an_empty_submission_is_not_judged(requests_repository, tmp_path):
    """mini-swe-agent 2.x's default configuration submits what follows its marker, often
    nothing: the tree has the edit, the submission is empty, and that is no mismatch."""
    trajectory, _submission = _recorded_run(requests_repository, tmp_path)
    trajectory["info"]["submission"] = ""
    path = tmp_path / "psf__requests-1.traj.json"
    path.write_text(json.dumps(trajectory), encoding="utf-8")
    bare, commit = requests_repository
    result = replay_run(str(tmp_path / "store.db"), RunSpec(path, "psf__requests-1", bare,
                                                            commit))
    assert result.error is None, result.error
    assert (result.tree_matches_submission, result.tree_note) == (
        None, "the run submitted no patch")


def test_a_recorded_run_replays_end_to_end(requests_repository, store_url, tmp_path):
    trajectory, submission = _recorded_run(requests_repository, tmp_path)
    path = tmp_path / "psf__requests-1.traj.json"
    path.write_text(json.dumps(trajectory), encoding="utf-8")
    bare, commit = requests_repository
    spec = RunSpec(path, "psf__requests-1", bare, commit, resolved=True)

    result = replay_run(store_url, spec, run_id="replay-test")

    assert result.error is None, result.error
    assert result.decisions == 7 and result.refused_decisions == 0
    assert result.tree_matches_submission is True, result.tree_note
    (run,) = _rows(store_url, "SELECT * FROM replay_run")
    assert run.decisions == 7 and run.tree_matches_submission and run.tree_lost_at_seq is None
    decisions = _rows(store_url, "SELECT seq, arm, decision_id, prompt_tokens, cached_tokens, "
                                 "action_kind FROM replay_decision ORDER BY seq, arm")
    arms = ("ctx08", "current", "mask10", *(ablation_arm(rule) for rule in ABLATIONS))
    assert len(decisions) == 7 * len(arms)
    by_arm = {arm: [d for d in decisions if d.arm == arm] for arm in arms}
    # the harness re-sends a growing history; with 6 observations mask10 masks none
    current = [d.prompt_tokens for d in by_arm["current"]]
    assert current == sorted(current) and current[0] < current[-1]
    assert [d.prompt_tokens for d in by_arm["mask10"]] == current
    # an append-only history: each decision's prompt but the first is a cache hit up to
    # what the one before sent
    assert by_arm["current"][0].cached_tokens == 0
    assert all(d.cached_tokens == p.prompt_tokens - 3  # the reply priming is not a prefix
               for p, d in zip(by_arm["current"], by_arm["current"][1:], strict=False))
    assert [d.action_kind for d in by_arm["current"]] == [
        "other", "other", "other", "edit", "edit", "other", "submit"]
    # the ctx08 windows are decisions of the store like any other, lined up by seq
    ctx08 = _rows(store_url, "SELECT d.seq, d.instance_id, d.decision_type FROM decision d "
                             "JOIN replay_decision r ON r.decision_id = d.decision_id "
                             "ORDER BY d.seq")
    assert [(d.seq, d.instance_id) for d in ctx08] == [(k, "psf__requests-1") for k in range(1, 8)]
    assert [d.decision_type for d in ctx08] == ["localize"] * 4 + ["edit"] * 3
    # the sed edit's old text, read three steps earlier, is an anchor of decision 4
    anchors = _rows(store_url, "SELECT seq, anchor_class, anchor_text, held_by_seq "
                               "FROM replay_anchor ORDER BY seq, anchor_no")
    assert (4, "edit_text", OLD_TEXT, 2) in [tuple(a) for a in anchors]
    # the python -c edit's .replace() argument, and a word of it the task never said
    assert (5, "edit_text", "extract them into a tuple of", 2) in [tuple(a) for a in anchors]
    assert (5, "identifier", "extract", 2) in [tuple(a) for a in anchors]
    outcomes = _rows(store_url, "SELECT o.arm, o.kept, o.fate FROM replay_anchor_outcome o "
                                "JOIN replay_anchor a USING (run_id, instance_id, seq, anchor_no) "
                                "WHERE a.seq = 4 AND a.anchor_class = 'edit_text'")
    assert {(o.arm, bool(o.kept)) for o in outcomes} >= {("current", True), ("mask10", True),
                                                         ("ctx08", True)}
    assert all(o.fate is None for o in outcomes if o.kept)
    # the loop window's own parts: every earlier command, the run's task not repeated
    windows = _rows(store_url, "SELECT d.seq, w.item_id, w.rendering, w.rendered_text "
                               "FROM v_window_item w JOIN decision d USING (decision_id) "
                               "ORDER BY d.seq, w.position")
    # each earlier step's command and output, and the newest turn's reasoning last
    assert [w.item_id for w in windows if w.seq == 7] == [
        f"E{n}" for step in range(1, 7) for n in item_numbers(step)[:2]
    ] + [f"E{item_numbers(6)[2]}"]
    assert all(trajectory["messages"][2 * step]["content"].split("```bash\n")[-1].split("\n```")[0]
               in "".join(w.rendered_text for w in windows if w.seq == 7)
               for step in range(1, 7))

    # where the window's tokens went: its parts by kind and rendering, then the harness's
    # own messages, adding up to what the arm sent
    with ContextStore.open(store_url) as store, store.engine.connect() as connection:
        report = run_report(connection, "replay_parts")
    parts = [dict(zip(report.columns, row, strict=True)) for row in report.rows]
    assert {p["arm"] for p in parts} == {"ctx08"}
    sent = sum(d.prompt_tokens for d in by_arm["ctx08"])
    assert sum(p["tokens"] for p in parts) == sent
    assert sum(p["share_of_prompt_tokens"] for p in parts) == pytest.approx(1.0)
    by_part = {(p["part_kind"], p["rendering"]): p for p in parts}
    prompt = by_part["harness_prompt", None]
    assert prompt["parts"] == 7 and 0 < prompt["tokens"] < sent
    window_tokens = _rows(store_url, "SELECT SUM(w.token_count) FROM window_item w "
                                     "JOIN replay_decision r USING (decision_id)")[0][0]
    assert prompt["tokens"] == sent - window_tokens
    # six steps fold nothing: every earlier command and output verbatim in each window
    # (0 + 1 + … + 6 of each), the newest turn's reasoning too
    assert set(by_part) == {("agent_turn", "verbatim"), ("tool_output", "verbatim"),
                            ("harness_prompt", None)}
    assert by_part["tool_output", "verbatim"]["parts"] == sum(range(7))
    assert by_part["agent_turn", "verbatim"]["parts"] == sum(range(7)) + 6

    # a bad time limit is refused before the run's earlier replay goes (NaN erased it)
    for timeout in (float("nan"), 0, 1e9):
        failed = replay_run(store_url, spec, run_id="replay-test", command_timeout_s=timeout)
        assert "command_timeout_s" in failed.error and "expected seconds above 0" in failed.error
        assert len(_rows(store_url, "SELECT 1 FROM replay_decision")) == 7 * len(arms)
    with pytest.raises(ValueError, match="command_timeout_s nan: expected seconds"):
        run_replay(store_url, [spec], run_id="replay-test", command_timeout_s=float("nan"))
    # again: the run is replaced, not added
    assert replay_run(store_url, spec, run_id="replay-test").error is None
    assert len(_rows(store_url, "SELECT 1 FROM replay_decision")) == 7 * len(arms)
    assert len(_rows(store_url, "SELECT 1 FROM decision WHERE run_id = 'replay-test'")) == 7
    with ContextStore.open(store_url) as store:
        assert store.verify() == {}  # every invariant check of the windows holds


def test_the_cli_replays_a_runs_file_and_reports_it(requests_repository, tmp_path, capsys):
    trajectory, _submission = _recorded_run(requests_repository, tmp_path)
    (tmp_path / "trajs").mkdir()
    (tmp_path / "trajs" / "run.traj.json").write_text(json.dumps(trajectory), encoding="utf-8")
    bare, commit = requests_repository
    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps({"instance_id": "psf__requests-1", "repo": "psf/requests",
                                "base_commit": commit, "resolved": False,
                                "trajectory": "trajs/run.traj.json",
                                "repo_git": str(bare)}) + "\n"
                    + json.dumps({"instance_id": "bad", "trajectory": "trajs/none.json"}) + "\n",
                    encoding="utf-8")
    db = tmp_path / "replay.db"
    assert main(["replay", str(runs), "--db", str(db), "--workers", "1"]) == 2  # a bad line
    captured = capsys.readouterr()
    assert "1 run(s) done, 7 decisions" in captured.out
    assert "runs.jsonl:2: base_commit: expected a non-empty string" in captured.err
    assert main(["report", "replay", "--db", str(db), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    arms = {row["arm"]: row for row in report["arms"]["rows"]}
    assert sorted(arms) == sorted(["ctx08", "current", "mask10",
                                   *(ablation_arm(rule) for rule in ABLATIONS)])
    assert all((row["runs"], row["decisions"], row["resolved_runs"]) == (1, 7, 0)
               for row in arms.values())
    assert report["fidelity"]["rows"][0]["trees_matching"] == 1
    # tools/window_cuts.py reads the same windows: cutting nothing keeps what the report's
    # ctx08 arm kept (lines aside: the tool checks them without the tree's lines)
    cuts = subprocess.run([sys.executable, str(TOOLS / "window_cuts.py"),
                           "--db", f"sqlite:///{db}"], capture_output=True, text=True,
                          check=True).stdout.splitlines()
    assert cuts[0].startswith("7 decisions")
    header, nothing = cuts[1].split(), cuts[2].split()
    ctx08_recall = {row["anchor_class"]: row["recall"] for row in report["recall"]["rows"]
                    if row["arm"] == "ctx08"}
    assert "identifier" in ctx08_recall
    for anchor_class in ("edit_text", "identifier", "path"):
        if anchor_class in ctx08_recall:
            column = header.index(anchor_class) - len(header)
            assert float(nothing[column]) == pytest.approx(ctx08_recall[anchor_class], abs=5e-4)
    # one instance of the file again (what a killed replay left half done is replaced)
    assert main(["replay", str(runs), "--db", str(db), "--workers", "1",
                 "--instance-id", "psf__requests-1"]) == 0  # another line's problem aside
    # (the closing line says the run's earlier replay was replaced)
    assert "1 run(s) done, 1 replacing an earlier replay of the run, 7 decisions" in \
        capsys.readouterr().out
    assert main(["replay", str(runs), "--db", str(db), "--instance-id", "psf__requests-2"]) == 2
    assert ("--instance-id 'psf__requests-2': no line of "
            f"{runs} names it (the nearest: psf__requests-1)") in capsys.readouterr().err
    # the instance's own line bad: its problems are named, not "no line", even when the
    # line is no JSON
    assert main(["replay", str(runs), "--db", str(db), "--instance-id", "bad"]) == 2
    assert "runs.jsonl:2: base_commit: expected a non-empty string" in capsys.readouterr().err
    cut = tmp_path / "cut.jsonl"
    cut.write_text('{"instance_id": "psf__requests-9", "trajectory": "t.json"\n')
    assert main(["replay", str(cut), "--db", str(db), "--instance-id", "psf__requests-9"]) == 2
    assert "cut.jsonl:1: not valid JSON" in capsys.readouterr().err
    # options the mode does not use are refused, not ignored
    assert main(["replay", str(runs), "--db", str(db), "--base-commit", "abc1234"]) == 2
    assert "--base-commit: only with --tree" in capsys.readouterr().err
    assert main(["replay", str(runs), "--db", str(db), "--instance-id", "psf__requests-1",
                 "--limit", "1"]) == 2
    assert "--limit: not with --instance-id" in capsys.readouterr().err
    assert len(_rows(f"sqlite:///{db}", "SELECT 1 FROM decision")) == 7


TESTS_FOLD_STRIDE = 10


@pytest.fixture
def cache_marks_tool(monkeypatch):
    """tools/cache_marks.py loaded as a module."""
    spec = importlib.util.spec_from_file_location("cache_marks_tool", TOOLS / "cache_marks.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "cache_marks_tool", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def window_cuts(monkeypatch):
    """tools/window_cuts.py loaded as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("window_cuts", TOOLS / "window_cuts.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "window_cuts", module)  # its dataclasses look it up
    spec.loader.exec_module(module)
    # the tests' own stride: what they check does not move with the measured default
    monkeypatch.setattr(module, "WINDOW_RULES", LoopRules(fold_stride=TESTS_FOLD_STRIDE))
    return module


def test_an_early_fold_shows_the_stride_s_form_from_the_first_decision_it_may(window_cuts):
    from ctxdb.agent.anchors import Anchor, AnchorClass

    def part(step, rendering, tokens, text, part_no=1):
        return window_cuts.Part(step, part_no, rendering, tokens, 1, "ls", text)

    listing = part(1, "verbatim", 300, "alpha_module.py beta_module.py gamma_module.py")
    folded = part(1, "pointer", 20, "[E2 tool output masked; it listed: beta_module.py]")
    alpha = Anchor(AnchorClass.IDENTIFIER, "alpha_module")

    def decision(seq, first, holders=(1,)):  # the parts holding alpha_module
        newer = [part(step, "verbatim", 50, f"output {step}") for step in range(2, seq)]
        parts = (part(1, "verbatim", 5, "[step 1] $ ls", 0), first, *newer)
        return window_cuts.Decision(seq, 1000 + sum(p.tokens for p in parts), parts,
                                    (("identifier", holders),), (alpha,), frozenset(),
                                    run="run-1", harness_cut=(True,) * seq,
                                    listing=(True,) * seq)

    # steps 1 and 2 are the FRESH_OUTPUTS newest at decision 3; the stride folds step 1 at 6
    decisions = [decision(3, listing), decision(4, listing), decision(5, listing),
                 decision(6, folded, holders=())]
    saved, before, after, recall = window_cuts.early_fold(
        decisions, lambda d, p, f: p.step == 1)
    assert saved == 2 * (300 - 20)  # decisions 4 and 5 show the fold early
    assert recall["identifier"] == pytest.approx(1 / 4)  # the fold drops alpha_module there
    # each window pays the cached price for the prompt (1,000) and the whole parts it
    # shares from the start with the window before, the full price for the rest
    ratio = CACHED_PRICE_RATIO
    assert before == pytest.approx(1355 + (50 + ratio * 1355) + (50 + ratio * 1405)
                                   + (220 + ratio * 1005))  # the stride's fold breaks at 6
    # folded early, the break comes at 4 and costs the parts after it; 6 is then cached
    assert after == pytest.approx(1355 + (120 + ratio * 1005) + (50 + ratio * 1125)
                                  + (50 + ratio * 1175))
    nothing = window_cuts.early_fold(decisions, lambda d, p, f: False)
    assert nothing[0] == 0 and nothing[1] == nothing[2] == before
    assert nothing[3]["identifier"] == pytest.approx(3 / 4)


def test_the_new_names_cuts_shorten_only_the_families_they_name(window_cuts):
    from ctxdb.agent.loop import COMMAND_PART, OUTPUT_PART

    command = window_cuts.Part(1, COMMAND_PART, "verbatim", 30, 3, "cat",
                               "[step 1] $ cat <<'EOF' > s.py\nimport only_here\nEOF")
    view = window_cuts.Part(1, OUTPUT_PART, "view", 30, 3, "cat",
                            "[E2 s.py lines 1-2]\n1\timport only_here\n2\tx = 1")
    decision = window_cuts.Decision(30, 100, (command, view), (), (), frozenset())
    cuts = window_cuts.line_cuts()
    # parts older than 20 steps: each family shortens its own kind of part, nothing else
    assert set(cuts["commands older than 20: new names"](decision)) == {0}
    assert set(cuts["views older than 20: lines with a new name"](decision)) == {1}
    assert set(cuts["views, commands older than 20: new names"](decision)) == {0, 1}
    # a part as old as the age is left as it is
    assert cuts["commands older than 20: new names"](
        window_cuts.Decision(21, 100, (command, view), (), (), frozenset())) == {}


def test_the_line_cut_keeps_definitions_and_lines_with_a_name_the_window_lacks(window_cuts):
    view = ("[E6 pkg/mod.py lines 10-15]\n10\tclass Basket:\n11\t    total = compute_total(items)\n"
            "12\t    total = compute_total(items)\n13\t    return total\n"
            "14\t    discount_rate = 0.5\n15\t    return total")
    shown = {"items"}
    assert window_cuts.lines_with_new_names(view, shown, numbered=True).split("\n") == [
        "[E6 pkg/mod.py lines 10-15]", "10\tclass Basket:",
        "11\t    total = compute_total(items)", "…", "14\t    discount_rate = 0.5", "…"]
    assert {"compute_total", "discount_rate", "Basket"} <= shown  # kept names count as shown


def test_the_docstring_cut_keeps_code_and_each_docstring_s_first_line(window_cuts):
    view = ('[E6 pkg/mod.py lines 10-17]\n10\tdef total(items):\n11\t    """Sum the items.\n'
            '12\t\n13\t    >>> total([1])\n14\t    """\n15\t    # every item counts\n'
            "16\t    return sum(items)\n17\tdef one(): '''Just one.'''")
    assert window_cuts.without_docstrings(view, comments_too=False).split("\n") == [
        "[E6 pkg/mod.py lines 10-17]", "10\tdef total(items):", '11\t    """Sum the items.',
        "…", '14\t    """', "15\t    # every item counts", "16\t    return sum(items)",
        "17\tdef one(): '''Just one.'''"]
    assert "15\t    # every item counts" not in window_cuts.without_docstrings(
        view, comments_too=True)


def test_the_symbol_cut_keeps_the_definitions_the_run_named_after_the_view(window_cuts):
    view = ("[E6 pkg/mod.py lines 1-12, as the tree holds them now]\n1\timport os\n"
            "2\tclass Basket:\n3\t    rate = 0.5\n4\t    @property\n5\t    def total(self):\n"
            "6\t        return compute(self.items)\n7\t    def empty(self):\n"
            "8\t        return not self.items\n9\tdef helper(x):\n10\t    y = x + 1\n"
            "11\t    return y\n12\tCONSTANT = os.sep\n\n")
    history = window_cuts.run_history((
        ("", "nl -ba pkg/mod.py", "(the view)"),
        ("I should look at total.", "python repro.py",
         'File "/testbed/pkg/mod.py", line 10, in helper2'),
        ("", "grep -n CONSTANT pkg/other.py", "")))
    part = window_cuts.Part(1, 1, "view", 100, 14, "nl", view)
    decision = window_cuts.Decision(seq=4, prompt_tokens=200, parts=(part,), anchors=(),
                                    anchor_values=(), prompt_names=frozenset(),
                                    history=history)
    # total by name, helper by its line 10, CONSTANT by a name it holds; empty's body and
    # Basket's own lines were not named since: only their first lines stay
    (cut,) = window_cuts.symbol_play(age=2)(decision).values()
    assert cut.split("\n") == [
        "[E6 pkg/mod.py lines 1-12, as the tree holds them now]", "…", "2\tclass Basket:",
        "…", "4\t    @property", "5\t    def total(self):", "6\t        return compute(self.items)",
        "7\t    def empty(self):", "…", "9\tdef helper(x):", "10\t    y = x + 1",
        "11\t    return y", "12\tCONSTANT = os.sep", "", ""]
    assert "2\tclass Basket:" not in window_cuts.symbol_play(age=2, signatures=False)(
        decision)[0]
    assert window_cuts.symbol_play(age=3)(decision) == {}  # the view is not old enough
    # named only before the last step: out of play for a rule that looks one step back
    assert "6\t" not in window_cuts.symbol_play(age=2, recent=1)(decision)[0]
    # a left-out line holding a name the window lacks is put back
    assert "2\tclass Basket:" in window_cuts.with_new_names(
        window_cuts.symbol_play(age=2, signatures=False))(decision)[0]
    scattered = window_cuts.replace(decision, parts=(window_cuts.replace(
        part, text=view.replace("lines 1-12", "lines 1-2, 4, 9-12")),))
    assert window_cuts.spanning_headers(scattered)[0].startswith("[E6 pkg/mod.py lines 1-12,")


def _saved_run(requests_repository, tmp_path) -> tuple[Path, Path, str]:
    """The recorded run saved as a trajectory file, with its git directory and commit."""
    trajectory, _ = _recorded_run(requests_repository, tmp_path)
    path = tmp_path / "run.traj.json"
    path.write_text(json.dumps(trajectory), encoding="utf-8")
    bare, commit = requests_repository
    return path, bare, commit


def test_a_run_that_fails_midway_leaves_nothing_behind(requests_repository, tmp_path,
                                                        monkeypatch):
    path, bare, commit = _saved_run(requests_repository, tmp_path)
    db = str(tmp_path / "s.db")
    calls = []
    original = replay_module.construct_step

    def construct_then_fail(store, **kwargs):
        calls.append(kwargs["seq"])
        if kwargs["seq"] == 4:
            raise RuntimeError("the machine went away at decision 4")
        return original(store, **kwargs)

    monkeypatch.setattr(replay_module, "construct_step", construct_then_fail)
    summary = run_replay(db, [RunSpec(path, "psf__requests-1", bare, commit)], workers=1)
    assert calls == [1, 2, 3, 4]
    (failed,) = summary.failed
    assert "psf__requests-1" in failed.error and "decision 4" in failed.error
    for table in ("decision", "evidence_item", "item_event", "window_item", "replay_run",
                  "replay_decision", "replay_anchor", "replay_in_progress"):
        assert _rows(db, f"SELECT COUNT(*) FROM {table}")[0][0] == 0, table


def test_a_replay_that_meets_another_under_its_run_id_undoes_only_its_own_decisions(
        requests_repository, tmp_path, monkeypatch):
    """Another replay (another process) records step 3 of this run and instance, of
    another history: this one fails by name and leaves the other's decisions be."""
    path, bare, commit = _saved_run(requests_repository, tmp_path)
    db = str(tmp_path / "s.db")
    original = replay_module.construct_step
    theirs = []

    def another_replay_first_at_step_3(store, **kwargs):
        if kwargs["seq"] == 3:  # its step 2 came out otherwise
            *before, last = kwargs["steps"]
            other = [*before, dataclasses.replace(last, output="another run's output\n")]
            theirs.append(original(store, **{**kwargs, "steps": other}).decision_id)
        return original(store, **kwargs)

    monkeypatch.setattr(replay_module, "construct_step", another_replay_first_at_step_3)
    summary = run_replay(db, [RunSpec(path, "psf__requests-1", bare, commit)], workers=1)
    (failed,) = summary.failed
    assert "StepTakenError: seq: the store already holds step 3 of run" in failed.error
    assert failed.refused_decisions == 0  # not counted as a step the harness lost
    assert [row[0] for row in _rows(db, "SELECT decision_id FROM decision")] == theirs
    assert _rows(db, "SELECT COUNT(*) FROM replay_decision")[0][0] == 0


def test_a_replay_that_another_of_its_run_finished_beside_fails_by_name(
        requests_repository, tmp_path, monkeypatch):
    """Two replays of one run and instance at once: the one that writes its rows second
    fails in words, not with the database's constraint error and its SQL; one that starts
    while another runs (its lease live, its process not known to have ended) is refused
    before it takes anything (it used to take the other's decisions, and when both failed
    the run's earlier replay was lost)."""
    path, bare, commit = _saved_run(requests_repository, tmp_path)
    db = str(tmp_path / "s.db")
    original = replay_module._write_replay_rows

    def the_other_finished_first(store, run_id, spec, *rest):
        with store.write_transaction() as connection:
            connection.execute(models.replay_run.insert().values(
                run_id=run_id, instance_id=spec.instance_id, trajectory="other.traj.json",
                trajectory_format="mini-swe-agent", decisions=0, created_at="now"))
        return original(store, run_id, spec, *rest)

    original_step = replay_module.construct_step

    others = []

    def the_other_starts_at_step_3(store, **kwargs):  # and is refused: this one runs
        if kwargs["seq"] == 3:
            others.append(replay_module.ReplayLease.new(kwargs["run_id"],
                                                        kwargs["instance_id"], 1.0))
            with pytest.raises(replay_module.ReplayClashError, match=(
                    r"another replay of run 'replay' on instance 'psf__requests-1' is under "
                    rf"way \(host .*, pid {os.getpid()}, started .*; if it was stopped, its "
                    r"lease runs out at .*\): replay an instance once at a time")):
                replay_module._hold_aside_run(store, kwargs["run_id"], kwargs["instance_id"],
                                              others[-1])
        return original_step(store, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(replay_module, "_write_replay_rows", the_other_finished_first)
        summary = run_replay(db, [RunSpec(path, "psf__requests-1", bare, commit)],
                             workers=1)
    (failed,) = summary.failed
    assert failed.error.startswith(
        "psf__requests-1: ReplayClashError: another replay of run "
        "'replay' on instance 'psf__requests-1' wrote into this store while this one "
        "ran"), failed.error
    assert "INSERT" not in failed.error and "IntegrityError" not in failed.error
    assert _rows(db, "SELECT COUNT(*) FROM decision")[0][0] == 0  # its own undone
    assert _rows(db, "SELECT COUNT(*) FROM replay_decision")[0][0] == 0
    # one that starts while this one runs is refused, and takes nothing of it
    with monkeypatch.context() as patched:
        patched.setattr(replay_module, "construct_step", the_other_starts_at_step_3)
        assert not run_replay(db, [RunSpec(path, "psf__requests-1", bare, commit)],
                              workers=1).failed
    assert others and _rows(db, "SELECT COUNT(*) FROM decision")[0][0] == 7
    assert _rows(db, "SELECT COUNT(*) FROM replay_in_progress") == [(0,)]
    # a broken constraint no other replay explains is said as the database says it
    from sqlalchemy.exc import IntegrityError

    def a_row_of_its_own_is_bad(*args):
        raise IntegrityError("INSERT INTO replay_run", {}, ValueError("NOT NULL: tree_note"))

    monkeypatch.setattr(replay_module, "_write_replay_rows", a_row_of_its_own_is_bad)
    (failed,) = run_replay(db, [RunSpec(path, "psf__requests-1", bare, commit)],
                           workers=1).failed
    assert failed.error == ("psf__requests-1: the store's database failed: ValueError: "
                            "NOT NULL: tree_note")


def test_the_lost_anchors_query_names_the_output_and_the_rule_that_lost_it(
        requests_repository, tmp_path):
    """sql/analyst/lost_anchors.sql on a real replay: the agent read lines, did other
    things for long enough that the file went out of play, then edited one of those lines
    by its number — the query names the step's output that held it, its pointer and the
    rule, and the rule-off arm that kept it."""
    from ctxdb.sqlfiles import sql_files

    commands = [("A look around.", "ls src/requests | head -3"),
                ("Read it.", f"nl -ba {UTILS} | sed -n '1018,1032p'"),
                *((f"Something else, {n}.", f"echo other {n}") for n in range(22)),
                ("Edit line 1020.", f"sed -i '1020s/{OLD_TEXT}/{NEW_TEXT}/' {UTILS}")]
    trajectory, _ = _recorded_run(requests_repository, tmp_path, commands=commands)
    path = tmp_path / "run.traj.json"
    path.write_text(json.dumps(trajectory), encoding="utf-8")
    bare, commit = requests_repository
    db = str(tmp_path / "s.db")
    # two instances of the run, so a decision's id is not its seq
    assert not run_replay(db, [RunSpec(path, instance, bare, commit)
                               for instance in ("psf__requests-0", "psf__requests-1")],
                          workers=1).failed
    (query,) = [f for f in sql_files("analyst") if f.name == "lost_anchors"]
    # the edit is step 25; the output of step 2, which held what it replaced, is E6
    def lost(arm: str) -> list[tuple]:
        return [("replay", instance, 25, arm, decision_id, anchor_class, anchor_text, path,
                 None, "masked", 2, "E6", "pointer", "folded: its files out of play", 1,
                 "ctx08-without-in_play")
                for instance, decision_id in (("psf__requests-0", 25),
                                              ("psf__requests-1", 51))
                for anchor_class, anchor_text, path in (("edit_text", OLD_TEXT, UTILS),
                                                        ("identifier", "auth", None))]

    def rows(**params) -> list[tuple]:
        return [tuple(row) for row in _rows(db, query.sql, **params)]

    assert rows(run_id="", arm="") == lost("ctx08")  # every run, ctx08's window
    assert rows(run_id="replay", arm=None) == lost("ctx08")
    assert rows(run_id="another", arm="") == []
    # a rule-off arm's losses, with ctx08's decision at the step (that arm's windows are
    # not recorded): without in play the file stays in play, and the view kept both
    assert rows(run_id="", arm="ctx08-without-in_play") == []
    assert rows(run_id="", arm="ctx08-without-views") == lost("ctx08-without-views")
    # and part_over_run follows E6 through the run: when it folded, and by which rule
    (over_run,) = [f for f in sql_files("analyst") if f.name == "part_over_run"]
    forms = [(seq, rendering, rule, verdict) for seq, _, rendering, rule, _, verdict, _, _ in
             _rows(db, over_run.sql, run_id="replay", instance_id="psf__requests-1",
                   item_id="E6")]
    assert [seq for seq, *_ in forms] == list(range(3, 27))  # from the step after its own
    assert forms[0] == (3, "verbatim", "fresh", "in_window")
    assert forms[-1] == (26, "pointer", "folded: its files out of play", "masked")
    changes = [form[1:] for before, form in itertools.pairwise(forms)
               if form[1:] != before[1:]]
    assert changes[-1] == ("pointer", "folded: its files out of play", "masked"), forms


def test_a_window_that_cannot_fit_is_counted_as_the_history_a_live_harness_sends(
        requests_repository, tmp_path):
    """Under a ceiling the harness's prompt alone passes, every step is refused: the
    ctx08 arm counts what the mini-swe-agent wrapper sends then, the harness's history."""
    from ctxdb.config import MIN_TOKEN_CEILING, load_settings

    path, bare, commit = _saved_run(requests_repository, tmp_path)
    trajectory = json.loads(path.read_text(encoding="utf-8"))  # a system prompt over it
    trajectory["messages"][0]["content"] += " Think step by step." * MIN_TOKEN_CEILING
    path.write_text(json.dumps(trajectory), encoding="utf-8")
    db = str(tmp_path / "s.db")
    settings = dataclasses.replace(load_settings(), token_ceiling=MIN_TOKEN_CEILING)
    summary = run_replay(db, [RunSpec(path, "psf__requests-1", bare, commit)], workers=1,
                         settings=settings)
    (done,) = summary.results
    assert done.refused_decisions == done.decisions == 7
    counted = {(seq, arm): tokens for seq, arm, tokens in _rows(
        db, "SELECT seq, arm, prompt_tokens FROM replay_decision WHERE arm IN "
            "('ctx08', 'current', 'ctx08-without-views') AND refused = (arm <> 'current')")}
    assert len(counted) == 21 and all(  # a rule-off arm's window too
        counted[(seq, "ctx08")] == counted[(seq, "ctx08-without-views")]
        == counted[(seq, "current")] for seq in range(1, 8))


def test_a_tree_git_cannot_diff_is_a_note_not_a_failed_run(requests_repository, tmp_path):
    """A command put a FIFO where a tracked file was: git cannot diff the tree (the
    recorded harness's own submission failed there too). The run's windows are kept and
    its note says why the tree was not judged."""
    trajectory, _ = _recorded_run(requests_repository, tmp_path, commands=[
        ("Read it.", f"nl -ba {UTILS} | sed -n '1018,1032p'"),
        ("A pipe where the file was.", f"rm {UTILS} && mkfifo {UTILS}"),
        ("Look.", "ls src/requests | head -3"),
    ])
    path = tmp_path / "run.traj.json"
    path.write_text(json.dumps(trajectory), encoding="utf-8")
    bare, commit = requests_repository
    db = str(tmp_path / "s.db")
    summary = run_replay(db, [RunSpec(path, "psf__requests-1", bare, commit)], workers=1)
    assert not summary.failed
    ((matches, note, lost_at),) = _rows(db, "SELECT tree_matches_submission, tree_note, "
                                            "tree_lost_at_seq FROM replay_run")
    assert (matches, lost_at) == (None, None)
    # git's own words (in the host's language), one line
    assert note.startswith("tree not diffable: git add -A failed (128): ") and UTILS in note
    assert "\n" not in note
    assert _rows(db, "SELECT COUNT(*) FROM decision")[0][0] == 4


def test_a_database_lost_mid_run_is_one_line_that_says_what_stays(requests_repository,
                                                                  tmp_path, monkeypatch):
    """The server goes away at step 3 and cannot remove the two decisions the run made:
    the run's line says so in the driver's words, without SQLAlchemy's SQL and link."""
    from sqlalchemy.exc import OperationalError

    path, bare, commit = _saved_run(requests_repository, tmp_path)
    lost = OperationalError("SELECT d.decision_id FROM decision d", {"run_id": "replay"},
                            ConnectionResetError("server closed the connection unexpectedly"))
    original, delete = replay_module.construct_step, replay_module._delete_decisions
    gone = []

    def server_gone_at_step_3(store, **kwargs):
        if kwargs["seq"] == 3:
            gone.append(True)
            raise lost
        return original(store, **kwargs)

    def cannot_delete(connection, decision_ids):
        if gone:
            raise lost
        return delete(connection, decision_ids)

    monkeypatch.setattr(replay_module, "construct_step", server_gone_at_step_3)
    monkeypatch.setattr(replay_module, "_delete_decisions", cannot_delete)
    summary = run_replay(str(tmp_path / "s.db"),
                         [RunSpec(path, "psf__requests-1", bare, commit)], workers=1)
    (failed,) = summary.failed
    assert failed.error == (
        "psf__requests-1: the store's database failed: ConnectionResetError: server closed "
        "the connection unexpectedly (2 decisions it made could not be removed; replaying "
        "the run again replaces them)")
    # its lease stays too: until it runs out, `ctxdb verify` takes the replay for one under
    # way; then it lists what stays, by run and instance, until the run is replayed again
    with ContextStore.open(str(tmp_path / "s.db")) as store:
        assert store.verify() == {}
        (under_way,) = store.replays_under_way()
        assert under_way["instance_id"] == "psf__requests-1"
        _lease_ran_out(store)
        assert store.replays_under_way() == []
        assert store.verify() == {"replay_decisions_without_their_run": [
            {"run_id": "replay", "instance_id": "psf__requests-1", "decisions": 2,
             "first_seq": 1, "last_seq": 2}]}
    monkeypatch.undo()
    summary = run_replay(str(tmp_path / "s.db"),
                         [RunSpec(path, "psf__requests-1", bare, commit)], workers=1)
    assert not summary.failed
    with ContextStore.open(str(tmp_path / "s.db")) as store:
        assert store.verify() == {}


def test_a_replay_again_that_does_not_finish_leaves_the_earlier_replay_as_it_was(
        requests_repository, tmp_path, monkeypatch, store_url):
    """Replaying a stored run again holds its earlier replay aside until the new one is
    written: a failure, or Ctrl-C, puts it back whole (it used to be removed as the new
    one started, so a replay again that did not finish lost it); while the replay runs,
    what it holds aside is no leftover to `verify`, nor read by its windows; written, the
    earlier replay is gone. A replay stopped outright leaves what it held aside named by
    `verify`, and the instance's next replay removes it."""
    path, bare, commit = _saved_run(requests_repository, tmp_path)
    db, spec = store_url, RunSpec(path, "psf__requests-1", bare, commit)
    assert not run_replay(db, [spec], workers=1).failed
    every_row = ("SELECT 'decision', decision_id, instance_id, token_count FROM decision "
                 "UNION ALL SELECT 'replay_decision', seq, arm, prompt_tokens "
                 "FROM replay_decision UNION ALL SELECT 'replay_anchor_outcome', seq, arm, "
                 "CAST(kept AS INTEGER) FROM replay_anchor_outcome UNION ALL SELECT "
                 "'replay_run', decisions, tree_note, CAST(tree_matches_submission AS "
                 "INTEGER) FROM replay_run ORDER BY 1, 2, 3")
    earlier = _rows(db, every_row)
    assert len([row for row in earlier if row[0] == "decision"]) == 7
    original = replay_module.construct_step
    seen: dict = {}

    def stopped_at_step_3(stop):
        def construct(store, **kwargs):
            if kwargs["seq"] == 3:
                with ContextStore.open(db, upgrade=False) as other:
                    seen["verify"] = other.verify()
                    seen["held"] = _rows(db, "SELECT COUNT(*) FROM decision WHERE "
                                             "instance_id LIKE 'held aside by replay %'")
                raise stop
            return original(store, **kwargs)
        return construct

    for stop in (RuntimeError("the machine went away at decision 3"), KeyboardInterrupt()):
        monkeypatch.setattr(replay_module, "construct_step", stopped_at_step_3(stop))
        if isinstance(stop, KeyboardInterrupt):
            with pytest.raises(KeyboardInterrupt):
                replay_run(db, spec)
        else:
            assert "the machine went away" in replay_run(db, spec).error
        assert seen.pop("verify") == {} and seen.pop("held") == [(7,)]
        assert _rows(db, every_row) == earlier, stop
        assert _rows(db, "SELECT COUNT(*) FROM replay_in_progress") == [(0,)]
    # written: the earlier replay goes, nothing held stays
    monkeypatch.setattr(replay_module, "construct_step", original)
    assert not replay_run(db, spec).error
    again = _rows(db, every_row)
    assert len(again) == len(earlier) and again != earlier
    assert {row[2] for row in again if row[0] == "decision"} == {"psf__requests-1"}
    # stopped outright (its lease stays, and runs out): what it held aside is named
    monkeypatch.setattr(replay_module, "_put_back_held", lambda connection, lease: None)
    monkeypatch.setattr(replay_module, "_delete_decisions", lambda connection, ids: None)
    monkeypatch.setattr(replay_module.ReplayLease, "release", lambda self, connection: None)
    monkeypatch.setattr(replay_module, "construct_step", stopped_at_step_3(RuntimeError("x")))
    assert replay_run(db, spec).error
    monkeypatch.undo()
    with ContextStore.open(db) as store:
        _lease_ran_out(store)
        (lease_id,) = _rows(db, "SELECT lease_id FROM replay_in_progress")[0]
        assert store.verify() == {"replay_decisions_without_their_run": [
            {"run_id": "replay", "instance_id": "psf__requests-1, held aside by replay "
             + lease_id, "decisions": 7, "first_seq": 1, "last_seq": 7},
            {"run_id": "replay", "instance_id": "psf__requests-1", "decisions": 2,
             "first_seq": 1, "last_seq": 2}]}
    assert not replay_run(db, spec).error
    with ContextStore.open(db) as store:
        assert store.verify() == {}
    assert _rows(db, "SELECT COUNT(*) FROM decision") == [(7,)]


def test_two_replays_that_start_at_the_same_moment_clash_by_name(requests_repository,
                                                                  tmp_path, monkeypatch,
                                                                  pg_url):
    """On PostgreSQL two replays of one instance can both find no other under way and
    both claim the run: the second's claim breaks the key; it fails as a clash, in words,
    writing nothing (SQLite's write lock lets one look at a time)."""
    path, bare, commit = _saved_run(requests_repository, tmp_path)
    claim = replay_module.ReplayLease.claim

    def another_claimed_first(self, connection):
        with ContextStore.open(pg_url) as other, other.write_transaction() as theirs:
            claim(replay_module.ReplayLease.new(self.run_id, self.instance_id, 1.0), theirs)
        claim(self, connection)

    monkeypatch.setattr(replay_module.ReplayLease, "claim", another_claimed_first)
    result = replay_run(pg_url, RunSpec(path, "psf__requests-1", bare, commit))
    assert result.error == ("psf__requests-1: ReplayClashError: another replay of run "
                            "'replay' on instance 'psf__requests-1' started at the same "
                            "moment: replay an instance once at a time"), result.error
    assert _rows(pg_url, "SELECT COUNT(*) FROM decision") == [(0,)]


def _lease_ran_out(store: ContextStore) -> None:
    """Time passes: every replay's lease in the store ran out a second ago."""
    with store.write_transaction() as connection:
        connection.execute(sa.update(models.replay_in_progress).values(
            expires_at=models.utc_timestamp(-1)))


def test_verify_names_a_replay_under_way_and_counts_its_decisions_once_its_lease_ran_out(
        requests_repository, tmp_path, monkeypatch, capsys, store_url):
    """`ctxdb verify` run while a replay is at its step 3 (from another connection, as an
    operator's would), on both backends: a note names the replay, its host and pid, and
    its two decisions without their replay_run row are not counted (exit 0); they were, as
    a replay killed outright, before the lease. The lease covers a step's command time
    limit and the slack, from the step's start, and a step renews one that ran out.
    Done, the replay leaves no row of it."""
    path, bare, commit = _saved_run(requests_repository, tmp_path)
    db = store_url
    original = replay_module.construct_step
    seen: dict = {}

    def verify_at_step_3(store, **kwargs):
        if kwargs["seq"] == 2:  # time passes: the lease ran out, and the replay renews it
            with ContextStore.open(db) as other:
                _lease_ran_out(other)
        if kwargs["seq"] == 3:
            seen["exit"] = main(["verify", "--db", db])
            seen["out"] = capsys.readouterr().out
            with ContextStore.open(db, upgrade=False) as reader:
                (seen["row"],) = reader.replays_under_way()
        return original(store, **kwargs)

    monkeypatch.setattr(replay_module, "construct_step", verify_at_step_3)
    monkeypatch.setattr(replay_module, "LEASE_RENEWED_AFTER_S", 0)  # at every step
    timeout_s = 7.0
    summary = run_replay(db, [RunSpec(path, "psf__requests-1", bare, commit)], workers=1,
                         command_timeout_s=timeout_s)
    assert not summary.failed
    assert seen["exit"] == 0
    row = seen["row"]
    assert (row["run_id"], row["instance_id"], row["pid"]) == ("replay", "psf__requests-1",
                                                               os.getpid())
    assert seen["out"].startswith(
        "note: a replay under way, its decisions not counted: run replay, instance "
        f"psf__requests-1 (host {row['host']}, pid {os.getpid()}, started "
        f"{row['started_at']}, last step {row['renewed_at']}); if it was stopped, they "
        f"count from {row['expires_at']}\nok: ")
    lease = (datetime.fromisoformat(row["expires_at"])
             - datetime.fromisoformat(row["renewed_at"])).total_seconds()
    assert lease == timeout_s + replay_module.LEASE_SLACK_S
    assert _rows(db, "SELECT COUNT(*) FROM replay_in_progress") == [(0,)]


# How long a test waits for a signal it sent itself to be acted on.
STOP_WAIT_S = 10


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_ctrl_c_is_one_line_and_keeps_only_what_was_recorded(requests_repository, tmp_path,
                                                             monkeypatch, capsys, signal_name):
    """Stopped in its second run: exit 130 (143 for SIGTERM, a supervisor's stop), one
    line, the first run kept, the second's decisions, scratch tree and sandbox gone;
    stopped in its first, no store is left."""
    path, bare, commit = _saved_run(requests_repository, tmp_path)
    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(json.dumps({"instance_id": name, "trajectory": path.name,
                                        "base_commit": commit, "repo_git": str(bare)}) + "\n"
                            for name in ("psf__requests-1", "psf__requests-2")),
                    encoding="utf-8")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    original = replay_module.construct_step
    stop_in = []

    def ctrl_c_at_step_3(store, **kwargs):
        if kwargs["instance_id"] in stop_in and kwargs["seq"] == 3:
            os.kill(os.getpid(), getattr(signal, signal_name))
            time.sleep(STOP_WAIT_S)  # the signal's handler raises before this ends
            pytest.fail(f"{signal_name} did not stop the replay")
        return original(store, **kwargs)

    monkeypatch.setattr(replay_module, "construct_step", ctrl_c_at_step_3)

    def unhandled(signum, frame):  # were the command's handler gone, fail, not end pytest
        pytest.fail("SIGTERM reached the test process past ctxdb's handler")

    previous = signal.signal(signal.SIGTERM, unhandled)
    try:
        for stopped, kept in (("psf__requests-2", ["psf__requests-1"]),
                              ("psf__requests-1", None)):
            stop_in[:] = [stopped]
            db = tmp_path / f"stopped-in-{stopped}.db"
            try:
                status = main(["replay", str(runs), "--db", str(db), "--workers", "1"])
            except KeyboardInterrupt:  # not raised on: it would stop the test session
                pytest.fail("ctxdb replay let Ctrl-C's KeyboardInterrupt out")
            # the handlers the caller had are back (main ignores a second stop meanwhile)
            assert signal.getsignal(signal.SIGTERM) is unhandled
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
            assert status == {"SIGINT": EXIT_INTERRUPTED,
                              "SIGTERM": EXIT_TERMINATED}[signal_name] \
                == {"SIGINT": 130, "SIGTERM": 143}[signal_name]
            said = {"SIGINT": "interrupted", "SIGTERM": "terminated"}[signal_name]
            captured = capsys.readouterr()
            # the scratch tree and the sandbox's root went (the tokenizer's cache may stay)
            assert [p.name for p in scratch.iterdir() if p.name.startswith("ctxdb-")] == []
            if kept:
                assert captured.err == f"ctxdb: {said}\n"
                assert [r[0] for r in _rows(str(db), "SELECT instance_id FROM replay_run")] \
                    == kept
                assert _rows(str(db), "SELECT DISTINCT instance_id FROM decision") == \
                    [(kept[0],)]
            else:
                assert captured.err == \
                    f"ctxdb: {said}: nothing was recorded, {db} was not kept\n"
                assert not db.exists()
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_runs_line_holding_a_line_separator_is_one_line(tmp_path):
    # U+2028 is a line break to str.splitlines but text inside a JSON string
    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps({"instance_id": "a\u2028b"}, ensure_ascii=False) + "\n",
                    encoding="utf-8")
    _specs, errors = load_run_specs(runs, {})
    assert errors and all(error.startswith(f"{runs}:1: ") for error in errors)
    assert not any("not JSON" in error for error in errors)


def test_an_instance_s_own_lines_alone_are_read_for_its_problems(tmp_path):
    """replay --instance-id B: a parsed line of another instance that merely mentions "B"
    is not B's, a cut line spelling "B" (or a non-ASCII id as written) is."""
    from ctxdb.cli.replay import _of_instance

    runs = tmp_path / "runs.jsonl"
    runs.write_text('{"instance_id": "A", "related": ["B"]}\n'
                    '{"instance_id": "B", "trajectory": "t\n'
                    '{"instance_id": "é-1", "trajectory": \n', encoding="utf-8")
    errors = [f"{runs}:1: base_commit: expected a non-empty string",
              f"{runs}:2: not valid JSON (Unterminated string at column 31)",
              f"{runs}:3: not valid JSON (Expecting value at column 35)"]
    assert _of_instance([], errors, "B", runs) == ([], [errors[1]])
    assert _of_instance([], errors, "é-1", runs) == ([], [errors[2]])
    with pytest.raises(ValueError, match="--instance-id 'C': no line of"):
        _of_instance([], errors, "C", runs)


def test_an_unterminated_string_is_placed_once(tmp_path):
    runs = tmp_path / "runs.jsonl"
    runs.write_text('{"instance_id": "a\n', encoding="utf-8")
    assert load_run_specs(runs)[1] == [
        f"{runs}:1: not valid JSON (Unterminated string starting at column 17)"]


def test_load_run_specs_names_each_bad_line_and_field(tmp_path, capsys, monkeypatch):
    (tmp_path / "t.traj.json").write_text("{}", encoding="utf-8")
    repository = tmp_path / "repo"
    repository.mkdir()
    _git("init", "-q", cwd=repository)
    _git("commit", "-q", "--allow-empty", "-m", "base", cwd=repository)
    commit = _git("rev-parse", "HEAD", cwd=repository).strip()
    git_dir = str(repository / ".git")
    plain = tmp_path / "plain"
    plain.mkdir()
    inside = repository / "sub"
    inside.mkdir()
    runs = tmp_path / "runs.jsonl"
    runs.write_text("\n".join([
        "not json",
        json.dumps([1]),
        json.dumps({"instance_id": "a", "trajectory": "t.traj.json", "base_commit": "abc1234",
                    "repo_git": str(tmp_path / "missing")}),
        json.dumps({"instance_id": "b", "trajectory": "none.json", "base_commit": "abc1234",
                    "repo_git": str(tmp_path)}),
        json.dumps({"instance_id": "c", "trajectory": "t.traj.json", "base_commit": "abc1234",
                    "repo_git": str(tmp_path), "resolved": "yes"}),
        json.dumps({"instance_id": "d", "trajectory": "t.traj.json", "base_commit": commit,
                    "repo_git": git_dir}),
        json.dumps({"instance_id": "d", "trajectory": "t.traj.json", "base_commit": commit,
                    "repo_git": git_dir}),
        # a base commit the git directory lacks is named before anything runs
        json.dumps({"instance_id": "e", "trajectory": "t.traj.json", "base_commit": "0" * 40,
                    "repo_git": git_dir}),
        # no repo_git: the one given for its repo (SWE-bench's instance lists name none)
        json.dumps({"instance_id": "f", "trajectory": "t.traj.json", "base_commit": commit,
                    "repo": "owner/name"}),
        json.dumps({"instance_id": "g", "trajectory": "t.traj.json", "base_commit": commit,
                    "repo": "other/name"}),
        # no repo to match a given git directory by
        json.dumps({"instance_id": "h", "trajectory": "t.traj.json", "base_commit": commit}),
        # a directory that is no git directory, on the line or given for its repo
        json.dumps({"instance_id": "i", "trajectory": "t.traj.json", "base_commit": commit,
                    "repo_git": str(plain)}),
        json.dumps({"instance_id": "j", "trajectory": "t.traj.json", "base_commit": commit,
                    "repo": "plain/name"}),
        # a directory inside a checkout (git would take the checkout around it), a file
        json.dumps({"instance_id": "k", "trajectory": "t.traj.json", "base_commit": commit,
                    "repo_git": str(inside)}),
        json.dumps({"instance_id": "l", "trajectory": "t.traj.json", "base_commit": commit,
                    "repo_git": str(tmp_path / "runs.jsonl")}),
        # a ref moves (the tree would not be the run's); an instance id no window can
        # name; a setup no shell runs; a trajectory that is a directory, or whose path
        # the store cannot keep as text
        json.dumps({"instance_id": "m", "trajectory": "t.traj.json", "base_commit": "HEAD",
                    "repo_git": git_dir}),
        json.dumps({"instance_id": "n" * 201, "trajectory": "t.traj.json",
                    "base_commit": commit, "repo_git": git_dir}),
        json.dumps({"instance_id": "o\u0000p", "trajectory": "t.traj.json",
                    "base_commit": commit, "repo_git": git_dir}),
        json.dumps({"instance_id": "q", "trajectory": "t.traj.json", "base_commit": commit,
                    "repo_git": git_dir, "testbed_setup": "true\u0000"}),
        json.dumps({"instance_id": "r", "trajectory": "repo", "base_commit": commit,
                    "repo_git": git_dir}),
        f'{{"instance_id": "s", "trajectory": "\\udce9.json", "base_commit": "{commit}", '
        f'"repo_git": "{git_dir}"}}',
        json.dumps({"instance_id": "t", "trajectory": "t.traj.json\u0000", "base_commit": commit,
                    "repo_git": git_dir}),
    ]), encoding="utf-8")
    (tmp_path / "\udce9.json").write_text("{}", encoding="utf-8")  # (its name: byte 0xe9)
    specs, errors = load_run_specs(runs, {"owner/name": git_dir, "plain/name": str(plain)})
    assert [s.instance_id for s in specs] == ["d", "f"]
    # a checkout serves as well as its git directory, whoever owns it, whatever GIT_DIR says
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "nonexistent"))
    if os.geteuid() == 0:
        for directory, _, names in os.walk(repository):
            for name in [directory, *(os.path.join(directory, n) for n in names)]:
                os.lchown(name, 12345, 12345)
    assert [s.instance_id for s in load_run_specs(runs, {"owner/name": str(repository)})[0]] \
        == ["d", "f"]
    monkeypatch.delenv("GIT_DIR")
    assert errors == [
        f"{runs}:1: not valid JSON (Expecting value at column 1)",
        f"{runs}:2: expected a JSON object",
        f"{runs}:3: repo_git: no such directory {tmp_path / 'missing'}",
        f"{runs}:4: trajectory: no such file {tmp_path / 'none.json'}",
        f"{runs}:5: resolved: expected true, false or null",
        f"{runs}:7: instance_id 'd': already on line 6 (a run is replayed once)",
        f"{runs}:8: base_commit: {'0' * 40!r} is not a commit of {git_dir}",
        f"{runs}:10: repo_git: expected the git directory holding base_commit, on the line "
        "or given for its repo 'other/name' (--repo-git other/name=GIT_DIR)",
        f"{runs}:11: repo: expected OWNER/NAME, which --repo-git needs to match the line (or "
        "repo_git on the line)",
        f"{runs}:12: repo_git: {plain} is not a git directory (expected a bare repository or "
        "a checkout's top)",
        f"{runs}:13: repo_git: {plain} is not a git directory (expected a bare repository or "
        "a checkout's top) (given by --repo-git plain/name=…)",
        f"{runs}:14: repo_git: {inside} is not a git directory (expected a bare repository "
        "or a checkout's top)",
        f"{runs}:15: repo_git: not a directory: {runs}",
        f"{runs}:16: base_commit: expected a commit id (7 to 64 hex digits), got 'HEAD': a "
        "branch, a tag or HEAD can move, so the tree would not be the run's",
        f"{runs}:17: instance_id: expected at most 200 characters, got 201",
        f"{runs}:18: instance_id: expected no control character or line separator, got U+0000 "
        "in 'o\\x00p'",
        f"{runs}:19: testbed_setup: expected a shell command, got text with a NUL byte (no "
        "shell runs one)",
        f"{runs}:20: trajectory: not a file: {repository}",
        f"{runs}:21: trajectory: {str(tmp_path / chr(0xdce9)) + '.json'!r}: expected a path "
        "UTF-8 can hold (the store keeps it as text)",
        f"{runs}:22: trajectory: expected a file's path, got text with a NUL byte",
    ]
    # none given: a line without repo either is told both ways of giving one
    assert [e for e in load_run_specs(runs)[1] if e.startswith(f"{runs}:11:")][0] == (
        f"{runs}:11: repo_git: expected the git directory holding base_commit (or repo on "
        "the line, and --repo-git OWNER/NAME=GIT_DIR for it)")
    # the CLI: nothing replayed, no store left behind, and the closing line says so
    db = tmp_path / "none.db"
    assert main(["replay", str(runs), "--db", str(db), "--limit", "1",
                 "--repo-git", "owner/name=" + str(tmp_path / "missing")]) == 2
    assert not db.exists()
    captured = capsys.readouterr()
    assert "nothing was replayed" in captured.out
    # --limit: the lines after the first N are not read (their problems do not count)
    assert "1 bad line(s)" in captured.out, captured.out
    assert captured.err.splitlines() == [
        f"ctxdb: error: {runs}:1: not valid JSON (Expecting value at column 1)"]
    assert load_run_specs(runs, limit=2)[1] == errors[:2]
    assert main(["replay", str(runs), "--db", str(db), "--repo-git", "nonsense"]) == 2
    assert "--repo-git 'nonsense': expected OWNER/NAME=DIR" in capsys.readouterr().err


def test_a_problem_on_many_lines_is_named_on_the_first_ones_and_the_rest_counted(
        tmp_path, capsys):
    from ctxdb.cli.replay import SAME_PROBLEM_LINES_NAMED

    (tmp_path / "t.traj.json").write_text("{}", encoding="utf-8")
    more = 2
    lines = [{"instance_id": f"i{n}", "trajectory": "t.traj.json", "base_commit": "abc",
              "repo": "owner/name"} for n in range(SAME_PROBLEM_LINES_NAMED + more)]
    lines.insert(1, {"instance_id": "other", "trajectory": "t.traj.json"})
    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    db = tmp_path / "none.db"
    assert main(["replay", str(runs), "--db", str(db)]) == 2
    captured = capsys.readouterr()
    problem = ("repo_git: expected the git directory holding base_commit, on the line or "
               "given for its repo 'owner/name' (--repo-git owner/name=GIT_DIR)")
    assert captured.err.splitlines() == [
        f"ctxdb: error: {runs}:1: {problem}",
        f"ctxdb: error: {runs}:2: base_commit: expected a non-empty string",
        f"ctxdb: error: {runs}:2: repo_git: expected the git directory holding base_commit "
        "(or repo on the line, and --repo-git OWNER/NAME=GIT_DIR for it)",
        f"ctxdb: error: {runs}:3: {problem}",
        f"ctxdb: error: {runs}:4: {problem}",
        f"ctxdb: error: {runs}: and {more} more lines with the same problem as line 4 "
        f"(the last: line {len(lines)})",
    ]
    assert f"{len(lines)} bad line(s)" in captured.out
    assert not db.exists()


def test_one_run_replays_on_a_tree_at_hand(requests_repository, tmp_path, capsys):
    trajectory, _submission = _recorded_run(requests_repository, tmp_path)
    path = tmp_path / "psf__requests-1.traj.json"
    path.write_text(json.dumps(trajectory), encoding="utf-8")
    bare, commit = requests_repository
    checkout = tmp_path / "my-checkout"
    _git("clone", "-q", str(bare), str(checkout), cwd=tmp_path)
    before = _git("status", "--porcelain", cwd=checkout)
    db = tmp_path / "one.db"
    assert main(["replay", str(path), "--tree", str(checkout), "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "replay (run id replay): 1 run(s) done, 7 decisions (0 refused); tree gives the " \
        "submitted patch in 1 of 1" in out
    # the report it points to reads the store given (a bare `ctxdb report replay` would
    # read ./ctx08.db)
    assert out.rstrip().endswith(f"`ctxdb report replay --db {db}` shows the arms."), out
    # an option of a runs file is refused with --tree, not ignored
    for option in (["--limit", "1"], ["--workers", "2"], ["--repo-git", "o/n=/tmp"]):
        assert main(["replay", str(path), "--tree", str(checkout), "--db", str(db),
                     *option]) == 2
        assert f"ctxdb: error: {option[0]}: only with RUNS.jsonl (--tree replays one run" \
            in capsys.readouterr().err
    # the tree at hand is read, never changed: the run's edits went to a scratch copy
    assert _git("status", "--porcelain", cwd=checkout) == before == ""
    assert _git("rev-parse", "HEAD", cwd=checkout).strip() == commit
    assert _rows(str(db), "SELECT instance_id FROM replay_run")[0][0] == "psf__requests-1"
    # the library call takes paths as strings too
    assert replay_spec_for_tree(str(path), str(checkout)) == replay_spec_for_tree(path, checkout)
    # a base commit the tree lacks is refused by name before anything runs (exit 2); any
    # name of one the tree has is taken, as the commit it names now
    for missing in ("0" * 40, "no-such-branch"):
        assert main(["replay", str(path), "--tree", str(checkout), "--db", str(db),
                     "--base-commit", missing]) == 2
        assert f"--base-commit {missing}: not a commit of {checkout}" in \
            capsys.readouterr().err
    _git("tag", "base", cwd=checkout)
    assert replay_spec_for_tree(path, checkout, "base").base_commit == commit
    assert replay_spec_for_tree(path, checkout, commit[:8]).base_commit == commit
    # a run that submitted nothing is no tree that missed its patch: the summary says so
    trajectory["info"].pop("submission")
    path.write_text(json.dumps(trajectory), encoding="utf-8")
    assert main(["replay", str(path), "--tree", str(checkout), "--db", str(db),
                 "--run-id", "unsubmitted"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("replay (run id unsubmitted): 1 run(s) done")
    assert "tree gives the submitted patch in 0 of 1 (1 without a submission)" in out


def test_a_here_document_folds_to_its_new_names_only_once_the_agent_stops_naming_it(
        window_cuts):
    from ctxdb.agent.loop import COMMAND_PART, OUTPUT_PART

    assert window_cuts.here_document_files(
        "[step 3] $ cat <<'EOF' > /testbed/repro.py\nimport sympy\nEOF\npython repro.py") == [
        "/testbed/repro.py"]
    assert window_cuts.here_document_files("[step 3] $ tee -a out.py <<EOF\nx = 1\nEOF") == [
        "out.py"]
    assert window_cuts.here_document_files("[step 3] $ cat repro.py > copy.py") == []
    # a script run from a here-document: the file is its output, not the script
    assert window_cuts.here_document_files(
        "[step 3] $ python - <<'EOF' > out.txt\nprint(1)\nEOF") == []
    script = ("[step 1] $ cat <<'EOF' > repro.py\nimport sympy\nfrom sympy import only_here\n"
              "print(sympy.S(1))\nEOF")
    command = window_cuts.Part(1, COMMAND_PART, "verbatim", 40, 5, "cat", script)
    output = window_cuts.Part(1, OUTPUT_PART, "pointer", 8, 1, "cat", "[E2 no output]")

    def decision(seq, named_at):  # the agent's command names repro.py at these steps
        steps = [("", "python repro.py" if n in named_at else "ls", "") for n in range(1, seq)]
        return window_cuts.Decision(seq, 200, (command, output), (), (),
                                    frozenset({"sympy", "print"}),
                                    history=window_cuts.run_history(tuple(steps)))

    first_fold = window_cuts.here_documents(first_fold_only=True)
    # step 1 folds at the stride of horizon 10 (decision 13): not named from step 2 to 10
    assert first_fold(decision(12, named_at=())) == {}  # not folded yet
    assert first_fold(decision(13, named_at=())) == {0: (
        "[step 1] $ cat <<'EOF' > repro.py\n…\nfrom sympy import only_here\n…")}
    assert first_fold(decision(13, named_at=(10,))) == {}  # named: in play at its fold
    # judged at its own fold only; at every fold, the file goes out of play later
    assert first_fold(decision(23, named_at=(10,))) == {}
    assert set(window_cuts.here_documents(first_fold_only=False)(
        decision(23, named_at=(10,)))) == {0}
    # judged at the first fold 10 steps on (horizon 20): not before, and only if no step
    # since named it
    looking = window_cuts.here_documents(first_fold_only=True, look_steps=10)
    assert looking(decision(13, named_at=())) == {}
    assert looking(decision(23, named_at=(15,))) == {}
    assert set(looking(decision(23, named_at=()))) == {0}


def test_the_breaks_count_what_a_fold_re_sends_before_the_outputs_it_folds(window_cuts):
    from ctxdb.agent.loop import COMMAND_PART, OUTPUT_PART

    def window(seq, view_text):
        parts = [window_cuts.Part(1, OUTPUT_PART, "view", 100, 2, "cat", view_text)]
        parts += [window_cuts.Part(step, OUTPUT_PART, "verbatim", 10, 1, "ls", f"out {step}")
                  for step in range(2, seq)]
        parts.insert(0, window_cuts.Part(1, COMMAND_PART, "verbatim", 5, 1, "cat", "$ cat"))
        return window_cuts.Decision(seq, 1000, tuple(parts), (), (), frozenset(), run="r")

    # decision 23 folds steps 11 to 20 (horizon 10 -> 20); the view of step 1 changed too
    folds, avoidable, necessary, causes, tokens = window_cuts.fold_breaks(
        [window(22, "[E2 a.py line 1]\n1\tx = 1"), window(23, "[E2 a.py line 1]\n1\tx = 2")])
    assert (folds, causes) == (1, {"view -> view": 1})
    assert avoidable == 100 + 9 * 10  # the view and the outputs of steps 2 to 10
    assert tokens == {"view -> view": avoidable}
    assert necessary == 12 * 10  # steps 11 to 22
    folds, avoidable, *_ = window_cuts.fold_breaks(
        [window(22, "[E2 a.py line 1]\n1\tx = 1"), window(23, "[E2 a.py line 1]\n1\tx = 1")])
    assert (folds, avoidable) == (1, 0)


def test_input_a_replay_cannot_use_is_refused_before_the_earlier_replay_goes(
        requests_repository, tmp_path, capsys):
    """A run id no window can name, an empty runs file, a recorded command no shell runs,
    a base commit that is a ref: each refused by name before anything is removed or
    written. Before, a run id of 300 characters (or none) made every ctx08 window a
    'refusal' counted as the harness's prompt alone (0.30 x mask10), exit 0, and a NUL
    in a command failed the run mid-way with 'embedded null byte', the instance's earlier
    replay gone."""
    path, bare, commit = _saved_run(requests_repository, tmp_path)
    db = tmp_path / "s.db"
    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps({"instance_id": "psf__requests-1", "trajectory": path.name,
                                "base_commit": commit, "repo_git": str(bare)}) + "\n",
                    encoding="utf-8")
    for run_id in ("", "r" * 201):
        assert main(["replay", str(runs), "--db", str(db), "--run-id", run_id]) == 2
        assert "--run-id: expected" in capsys.readouterr().err and not db.exists()
    (tmp_path / "empty.jsonl").write_text("\n\n", encoding="utf-8")
    assert main(["replay", str(tmp_path / "empty.jsonl"), "--db", str(db)]) == 2
    assert "empty.jsonl: no runs in it" in capsys.readouterr().err and not db.exists()
    # a library caller's own RunSpec is held to the same rules, and nothing is made for it
    latin1 = tmp_path / "\udce9.traj.json"  # (its name: byte 0xe9)
    latin1.write_bytes(path.read_bytes())
    for spec, said in ((RunSpec(path, "a\x00b", bare, commit), "instance_id: expected no "
                        "control character or line separator, got U+0000"),
                       (RunSpec(latin1, "psf__requests-1", bare, commit),
                        f"trajectory: {str(latin1)!r}: expected a path UTF-8 can hold")):
        (failed,) = run_replay(str(db), [spec], workers=1).failed
        assert said in failed.error, failed.error
        assert _rows(str(db), "SELECT COUNT(*) FROM decision")[0][0] == 0
    db.unlink()
    assert main(["replay", str(runs), "--db", str(db)]) == 0
    decisions = _rows(str(db), "SELECT COUNT(*) FROM decision")[0][0]
    assert decisions > 0
    trajectory = json.loads(path.read_text(encoding="utf-8"))
    trajectory["messages"][10]["content"] = "THOUGHT: x\n\n```bash\nls\0 -la\n```"
    path.write_text(json.dumps(trajectory), encoding="utf-8")
    assert main(["replay", str(runs), "--db", str(db)]) == 1
    assert ("step 5 (messages[10]): its command holds a NUL byte, which no shell runs"
            in capsys.readouterr().err)
    assert _rows(str(db), "SELECT COUNT(*) FROM decision")[0][0] == decisions


def test_a_nul_only_in_a_reply_the_harness_refused_is_no_command_that_ran():
    """A format error's blocks never ran, so a NUL in one does not stop the replay; one
    in a command that ran does, naming its step."""
    from ctxdb.agent.trajectory import TrajectoryError, parse_trajectory

    def run_of(reply: str, observation: str):
        return parse_trajectory({"trajectory_format": "mini-swe-agent-1", "messages": [
            {"role": "system", "content": "s"}, {"role": "user", "content": "t"},
            {"role": "assistant", "content": reply},
            {"role": "user", "content": observation}]})

    refused = run_of("Two.\n\n```bash\nls\0\n```\n\n```bash\npwd\n```",
                     "Please always provide EXACTLY ONE action in triple backticks.")
    assert refused.steps[0].action is None
    replay_module._commands_a_shell_cannot_run(refused)
    with pytest.raises(TrajectoryError, match=r"step 1 \(messages\[2\]\): its command holds "
                       "a NUL byte"):
        replay_module._commands_a_shell_cannot_run(run_of(
            "One.\n\n```bash\nls\0\n```", "<returncode>0</returncode>\n<output>\n</output>"))
