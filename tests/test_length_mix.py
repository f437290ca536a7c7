"""tools/length_mix.py: a set's cost share estimated from its runs' lengths."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import text

from ctxdb import ContextStore

TOOLS = Path(__file__).resolve().parent.parent / "tools"


@pytest.fixture
def length_mix():
    spec = importlib.util.spec_from_file_location("length_mix", TOOLS / "length_mix.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # it imports holdout_runs from beside it
    return module


def test_each_run_costs_what_the_replayed_runs_nearest_in_length_cost(length_mix):
    # (decisions, current cost, ctx08 cost): the short runs keep more of current's cost
    short = [(10 + n, 100.0, 90.0) for n in range(length_mix.NEAREST_RUNS)]
    long = [(100 + n, 1000.0, 500.0) for n in range(length_mix.NEAREST_RUNS)]
    assert length_mix.estimated_cost_share([12], short + long) == pytest.approx(0.9)
    assert length_mix.estimated_cost_share([101, 99], short + long) == pytest.approx(0.5)
    assert length_mix.estimated_cost_share([12, 101], short + long) == pytest.approx(590 / 1100)


def test_lengths_and_costs_are_read_from_the_runs_and_the_store(tmp_path, length_mix):
    work = tmp_path / "results"
    trajs = work / length_mix.RESULTS_DIR / "trajs"
    for name, turns in (("django__django-1", 3), ("django__django-2", 5),
                        ("sympy__sympy-1", 4)):
        messages = [{"role": "system", "content": "s"}] + [
            {"role": role, "content": "x"} for _ in range(turns)
            for role in ("assistant", "user")]
        (trajs / name).mkdir(parents=True)
        (trajs / name / f"{name}.traj.json").write_text(json.dumps({"messages": messages}))
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "runs"]):
        subprocess.run(["git", *args], cwd=work, env=env, check=True)
    # django's runs only (sympy's was replayed, not estimated), by assistant turns
    assert length_mix.run_lengths(work / ".git") == {"django/django": [3, 5]}

    url = f"sqlite:///{tmp_path / 'replay.db'}"
    with ContextStore.open(url) as store, store.write_transaction() as connection:
        connection.execute(text("INSERT INTO run (run_id, created_at) VALUES ('r', 'now')"))
        connection.execute(text(
            "INSERT INTO replay_run (run_id, instance_id, trajectory, trajectory_format,"
            " decisions, created_at) VALUES ('r', 'i', 'i.json', 'mini-swe-agent-1', 2, 'now')"))
        for arm, rows in {"current": [(100, 0), (200, 100)], "ctx08": [(50, 0), (60, 50)],
                          "mask10": [(90, 0), (150, 0)]}.items():
            for seq, (prompt, cached) in enumerate(rows, start=1):
                connection.execute(text(
                    "INSERT INTO replay_decision (run_id, instance_id, seq, arm,"
                    " prompt_tokens, cached_tokens, action_kind, tree_known, refused)"
                    " VALUES ('r', 'i', :seq, :arm, :prompt, :cached, 'other', TRUE, FALSE)"),
                    {"seq": seq, "arm": arm, "prompt": prompt, "cached": cached})
    # current 100 + 100 + 0.1 * 100; ctx08 50 + 10 + 0.1 * 50 (mask10 is not read)
    assert length_mix.replayed_costs(url) == [(2, pytest.approx(210), pytest.approx(65))]
