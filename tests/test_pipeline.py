"""The decision pipeline end to end, on SQLite and PostgreSQL, without a recon index."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from requests_data import TARGET, edit_request
from sqlalchemy import text

from ctxdb import ContextStore
from ctxdb.config import load_settings
from ctxdb.pipeline import construct as construct_module
from ctxdb.request import RequestError


def _store(url, **settings):
    base = load_settings()
    if settings:
        from dataclasses import replace

        base = replace(base, **settings)
    return ContextStore.open(url, settings=base)


def _rows(store, sql, **params):
    with store.engine.connect() as connection:
        return [tuple(r) for r in connection.execute(text(sql), params)]


def test_edit_decision_window(store_url):
    with _store(store_url) as store:
        context = store.construct(edit_request())
        assert store.verify() == {}
        order = [(e.item_id, e.role, e.block) for e in context.window]
        verdicts = dict(_rows(store, "SELECT item_id, verdict FROM v_item_verdict"
                                     " WHERE decision_id = :d", d=context.decision_id))
        duplicates = _rows(store, "SELECT item_id, group_size FROM v_duplicate_fact"
                                  " WHERE decision_id = :d", d=context.decision_id)
    assert sorted(duplicates) == [("E4", 2), ("E5", 2)]  # one fact, two items
    assert order[:4] == [
        ("E1", "requirement", "front"),
        ("E2", "requirement", "front"),
        ("E3", "requirement", "front"),
        ("E4", "change_target", "front"),
    ]
    assert order[-1] == ("E11", "live_current", "back")  # the freshest failure sits last
    assert ("E8", "test_reasoned_over", "back") in order
    assert ("E6", "direct_impact", "middle") in order
    assert verdicts == {
        "E1": "in_window", "E2": "in_window", "E3": "in_window", "E4": "in_window",
        "E5": "deduped",  # the same symbol via 04: one rendering (§3.5 class 1)
        "E6": "in_window",  # direct CalledBy consequence
        "E7": "rejected",  # no structural link, not near
        "E8": "in_window", "E9": "in_window",
        "E10": "rejected",  # superseded test output: stale, omitted
        "E11": "in_window",
    }
    rendered = context.render()
    assert rendered.startswith("TASK\nFix the discount")
    assert "also E5" in rendered and "slugify" not in rendered
    assert "L2: return cart.total()" in rendered  # call site of the direct consequence
    assert context.token_count <= context.ceiling
    assert context.tokenizer == "cl100k_base"


def test_same_request_gives_byte_identical_window(store_url):
    with _store(store_url) as store:
        first = store.construct(edit_request())
        second = store.construct(edit_request())
    assert first.decision_id != second.decision_id
    assert first.render() == second.render()
    assert first.token_count == second.token_count


def test_window_is_identical_across_hash_seeds(tmp_path):
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from requests_data import edit_request
        from ctxdb import ContextStore
        with ContextStore.open(sys.argv[1]) as store:
            sys.stdout.write(store.construct(edit_request()).render())
        """
    )
    outputs = []
    for seed in ("0", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        result = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path / f"seed{seed}.db")],
            capture_output=True, text=True, env=env, timeout=120,
        )
        assert result.returncode == 0, result.stderr
        outputs.append(result.stdout)
    assert outputs[0] == outputs[1] and outputs[0].startswith("TASK")


def test_baseline_arm_sends_everything_verbatim(store_url):
    with _store(store_url) as store:
        ctx = store.construct(edit_request(arm="current", run_id="baseline"))
        constructed = store.construct(edit_request())
        assert store.verify() == {}
    assert [e.item_id for e in ctx.window] == [f"E{n}" for n in range(1, 12)]
    assert all(e.rendering == "verbatim" for e in ctx.window)
    assert ctx.token_count > constructed.token_count


def test_budget_pressure_masks_then_downgrades_then_evicts(store_url):
    big_tool_output = "\n".join(f"line {n}: build log entry with details" for n in range(400))
    request = edit_request()
    request["live"]["tool_outputs"] = [big_tool_output, "$ pytest -x\n1 failed"]
    request["live"]["errors"] = ["AssertionError: 108.00000000000001 != 108.0"]
    with _store(store_url, token_ceiling=400) as store:
        ctx = store.construct(request)
        assert store.verify() == {}
        steps = _rows(store, "SELECT ladder_step, item_id, tokens_before, tokens_after"
                             " FROM budget_log WHERE decision_id = :d ORDER BY step_no",
                      d=ctx.decision_id)
        masked = _rows(store, "SELECT item_id FROM v_item_verdict WHERE decision_id = :d"
                              " AND verdict = 'masked'", d=ctx.decision_id)
        [(request_sha,)] = _rows(store, "SELECT request_sha256 FROM decision"
                                        " WHERE decision_id = :d", d=ctx.decision_id)
    assert ctx.token_count <= 400
    ladder = [s[0] for s in steps]
    assert ladder[0] == "measured" and "1_mask_transient" in ladder
    assert ladder.index("1_mask_transient") < min(
        (ladder.index(s) for s in ladder if s.startswith("2")), default=len(ladder)
    )
    assert masked  # the big, older tool output became a pointer
    pointer = next(e for e in ctx.window if e.item_id == masked[0][0])
    assert pointer.text == (
        f"[{masked[0][0]} tool_output masked — "
        f"ctxdb show req-{request_sha[:12]} {masked[0][0]}]\n\n"
    )
    # re-measured after each action: every step's "before" is the previous "after"
    for previous, step in zip(steps[1:], steps[2:], strict=False):
        if step[0] != "exact_recount":
            assert step[2] == previous[3]


def test_stable_core_only_fallback_is_flagged(store_url):
    request = edit_request()
    request["plan_node"]["obligation"] = "Apply the discount before tax. " + "Keep totals. " * 150
    with _store(store_url, token_ceiling=400) as store:
        ctx = store.construct(request)
        assert store.verify() == {}
    assert "stable_core_only" in ctx.flags
    assert ctx.token_count <= 400
    assert {e.tier for e in ctx.window} == {"stable_core"}


def test_bad_request_writes_nothing(store_url):
    bad = edit_request(decision_type="fix-it")
    with _store(store_url) as store:
        with pytest.raises(RequestError, match=r"request.decision_type: 'fix-it' is not one of"):
            store.construct(bad)
        assert _rows(store, "SELECT COUNT(*) FROM decision") == [(0,)]


def test_failure_mid_decision_leaves_no_rows(store_url, monkeypatch):
    import ctxdb.pipeline.construct as construct_module

    def explode(*args, **kwargs):
        raise RuntimeError("simulated crash in (f) ordering")

    monkeypatch.setattr(construct_module, "order", explode)
    with _store(store_url) as store:
        with pytest.raises(RuntimeError, match="simulated crash"):
            store.construct(edit_request())
        for table in ("run", "decision", "evidence_item", "evidence_text", "item_event",
                      "decision_link", "impact_edge", "token_count_cache"):
            assert _rows(store, f"SELECT COUNT(*) FROM {table}") == [(0,)], table
        # nothing of the failed decision is remembered as stored: the same request now
        # writes its texts (and its run) afresh
        monkeypatch.undo()
        context = store.construct(edit_request())
        assert store.verify() == {}
        assert _rows(store, "SELECT COUNT(*) FROM v_evidence_item WHERE decision_id = :d",
                     d=context.decision_id) == [(11,)]


def test_why_view_tells_the_path(store_url):
    with _store(store_url) as store:
        ctx = store.construct(edit_request())
        path = _rows(store, "SELECT stage, action, driver FROM v_why WHERE decision_id = :d"
                            " AND item_id = 'E5' ORDER BY event_no", d=ctx.decision_id)
    assert path[0] == ("gate", "admitted", "obligation:target_entity")
    assert path[-1] == ("dedup", "deduped", "same fact as E4")


def test_gate_cap_keeps_64_by_source_priority(store_url):
    evidence = [
        {"source": "03", "kind": "symbol", "entity": TARGET.replace("total", f"f{n}"),
         "content": f"def f{n}(self): ...", "provenance": "03"}
        for n in range(80)
    ]
    edges = [{"head": TARGET, "tail": e["entity"], "kind": "CalledBy", "depth": 1}
             for e in evidence]
    request = edit_request(evidence=evidence, impact_edges=edges, live={})
    with _store(store_url) as store:
        ctx = store.construct(request)
        capped = _rows(store, "SELECT item_id FROM v_item_verdict WHERE decision_id = :d"
                              " AND driver LIKE 'admitted_cap_64%' ORDER BY item_no",
                       d=ctx.decision_id)
        admitted = _rows(store, "SELECT COUNT(*) FROM item_event WHERE decision_id = :d"
                                " AND stage = 'gate' AND action = 'admitted'", d=ctx.decision_id)
        # the reader's view of the cap (v_gate) cuts the same items the pipeline did
        view_capped = _rows(store, "SELECT item_id FROM v_gate WHERE decision_id = :d"
                                   " AND gate_verdict = 'reject'"
                                   " AND driver LIKE 'admitted_cap_64%' ORDER BY item_no",
                            d=ctx.decision_id)
        ranks = _rows(store, "SELECT MAX(admit_rank) FROM v_gate WHERE decision_id = :d",
                      d=ctx.decision_id)
    # 3 requirement items + 80 impact consequences = 83 admitted by the rule; the 19
    # lowest in source priority (the 03 symbols last in the pool) cut by the cap
    assert admitted == [(83,)] and len(capped) == 19
    assert capped == view_capped and capped[-1] == (f"E{3 + 80}",)
    assert ranks == [(83,)]


def test_decision_context_json(store_url):
    with _store(store_url) as store:
        ctx = store.construct(json.dumps(edit_request()))
    data = json.loads(ctx.to_json())
    assert data["rendered"] == ctx.render()
    assert data["ceiling"] == 24000 and data["current_obligation"].startswith("Apply")


def test_nul_characters_are_replaced_visibly_and_kept_in_the_request(store_url):
    request = edit_request()
    request["live"]["tool_outputs"] = ["binary\x00output"]
    with _store(store_url) as store:
        ctx = store.construct(request)
        assert store.verify() == {}
        [(stored,)] = _rows(store, "SELECT request_json FROM decision WHERE decision_id = :d",
                            d=ctx.decision_id)
    assert "nul_replaced" in ctx.flags
    assert "binary\u2400output" in ctx.render()
    assert json.loads(stored)["live"]["tool_outputs"] == ["binary\x00output"]


def test_a_run_keeps_its_arm(store_url):
    """A run is one arm of the A/B: a request naming the other is refused, whether this
    store made the run (remembered) or another process did (read from the table)."""
    with _store(store_url) as store:
        store.construct(edit_request(run_id="arm-run"))
        with pytest.raises(RequestError, match="request.arm/variant: run 'arm-run' is arm"):
            store.construct(edit_request(run_id="arm-run", arm="current"))
        decisions = _rows(store, "SELECT COUNT(*) FROM decision WHERE run_id = 'arm-run'")
    with _store(store_url) as other:
        with pytest.raises(RequestError, match="variant 'default'; expected the same"):
            other.construct(edit_request(run_id="arm-run", arm="current"))
        assert _rows(other, "SELECT COUNT(*) FROM decision WHERE run_id = 'arm-run'") == decisions


def test_a_dependency_of_the_obligation_is_admitted_by_it(store_url):
    """Spec §3.2 driver 1: "a dependency of the current obligation" — the plan node's
    dependencies are links of the obligation; the item E7 is rejected without one."""
    request = edit_request()
    request["plan_node"] = dict(request["plan_node"], dependencies=["shop/util.py::slugify"])
    with _store(store_url) as store:
        context = store.construct(request)
        assert store.verify() == {}
        verdict = _rows(store, "SELECT verdict, driver FROM v_item_verdict"
                               " WHERE decision_id = :d AND item_id = 'E7'", d=context.decision_id)
        stored = _rows(store, "SELECT dependencies_json FROM obligation WHERE decision_id = :d",
                       d=context.decision_id)
    assert verdict == [("in_window", "obligation:obligation_dependency")]
    assert json.loads(stored[0][0]) == ["shop/util.py::slugify"]
    assert "def slugify(s):" in context.render()  # a related symbol: its signature


def _held(attempt) -> dict:
    """What an attempt holds, field by field (its audit log by its events)."""
    return {field.name: getattr(attempt, field.name) for field in dataclasses.fields(attempt)
            } | {"audit": list(attempt.audit.events)}


@pytest.mark.parametrize("policy_changed", [False, True], ids=["same_policy", "policy_changed"])
def test_writing_a_decision_changes_neither_its_inputs_nor_its_preview(store_url,
                                                                       policy_changed):
    """Persistence writes the decision's state and never resets it: the inputs and the
    preview's attempt are as they were after the write — also when the policy rows
    changed after the preview, and the write decided again as an attempt of its own."""
    with _store(store_url) as store:
        normalised = construct_module.normalise(edit_request(), store.settings)
        inputs = construct_module.assemble(normalised, None)
        preview = construct_module.prepare(store, inputs, ranking_on=False)
        inputs_before, preview_before = copy.deepcopy(inputs), _held(copy.deepcopy(preview))
        if policy_changed:
            with store.write_transaction() as connection:
                connection.execute(text(
                    "UPDATE representation_policy SET rendering = 'signature'"
                    " WHERE policy_set = 'spec' AND role = 'test_reasoned_over'"))
        context, row = store.write(
            lambda connection: construct_module.write_decision(connection, store, preview))
        assert inputs == inputs_before and _held(preview) == preview_before
        assert row.decision_id == context.decision_id
        assert (context.window == tuple(preview.entries)) is not policy_changed
        assert store.verify() == {}
        with pytest.raises(dataclasses.FrozenInstanceError):
            inputs.pool = ()
