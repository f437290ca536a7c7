"""What a harness calls: the request types, messages(), show / why / diff, a request's
own lower ceiling — on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses

import pytest
from requests_data import TARGET, edit_request
from sqlalchemy import text

import ctxdb
from ctxdb import ContextStore, RequestError
from ctxdb.config import load_settings


def _query(store, statement, params=None):
    """Rows of one query, on a connection closed at once (a connection left to the
    garbage collector is closed at an arbitrary moment of a later test)."""
    with store.engine.connect() as connection:
        return connection.execute(statement, params or {}).all()



def test_the_request_types_are_exported():
    for name in ("PlanNode", "EvidenceInput", "ImpactEdgeInput", "InsertionPoint", "LiveState"):
        assert getattr(ctxdb, name).__module__ == "ctxdb.request"
    request = ctxdb.DecisionRequest(
        run_id="r", instance_id="i", seq=1, decision_type="edit", task="Fix it.",
        plan_node=ctxdb.PlanNode(node_id="n", obligation="Fix it",
                                 insertion_point=ctxdb.InsertionPoint("a.py", 3)),
        evidence=(ctxdb.EvidenceInput(source="04", kind="retrieved_hit", provenance="04: hit",
                                      content="def f(): ..."),),
    )
    request.check()


def test_messages_are_the_rendered_window_split_in_two(store_url):
    with ContextStore.open(store_url) as store:
        context = store.construct(edit_request())
    messages = context.messages()
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "".join(m["content"] for m in messages) == context.render()
    assert messages[0]["content"].startswith("TASK\n")


def test_show_why_and_diff_as_library_calls(store_url):
    with ContextStore.open(store_url) as store:
        first = store.construct(edit_request(run_id="api"))
        second = store.construct(edit_request(run_id="api", seq=2, evidence=[]))
        assert store.show(first.decision_id) == first.render()
        item = next(e for e in first.window if e.role == "change_target")
        assert store.show(first.decision_id, item.item_id).startswith("def total")
        by_id = store.why(first.decision_id, item.item_id)
        by_entity = store.why(first.decision_id, TARGET)  # its first evidence item
        assert by_id == by_entity and by_id[-1]["is_final"]
        assert [row["stage"] for row in by_id][:2] == ["gate", "render"]
        changes = store.diff(first.decision_id, second.decision_id)
    assert (TARGET, item.item_id) in changes.left


def test_diff_names_facts_readably_whatever_their_item_ids(store_url):
    """Item ids shift between decisions; the diff's keys do not: a live observation is its
    kind, the decision it arrived in and its telling line, and a changed text of the
    same fact is a rewrite, not a fact that left and one that entered."""
    grep = {"kind": "tool_output", "text": "$ grep -n total shop\nshop/cart.py:12: x",
            "decision_seq": 1}
    failing = {"kind": "test_output", "text": "F\nFAILED t.py::test_a\n1 failed in 0.1s",
               "decision_seq": 1}
    passing = {"kind": "test_output", "text": ".\n1 passed in 0.1s", "decision_seq": 2}
    with ContextStore.open(store_url) as store:
        first = store.construct(edit_request(run_id="d", seq=1, live={"events": [grep, failing]}))
        second = store.construct(edit_request(
            run_id="d", seq=2, evidence=[], live={"events": [grep, failing, passing]},
            plan_node={**edit_request()["plan_node"], "obligation": "Now the rounding"}))
        changes = store.diff(first.decision_id, second.decision_id)
    assert [fact for fact, _ in changes.entered] == [
        "test_output (from decision 2): 1 passed in 0.1s"]
    left = [fact for fact, _ in changes.left]
    assert "test_output (from decision 1): 1 failed in 0.1s" in left  # superseded
    names = [fact for fact, _ in changes.entered] + left
    assert not any(name.startswith("tool_output") for name in names)  # the same grep output
    assert ("plan node", "E1", "E1") in changes.rewritten


def test_a_masked_item_of_the_same_text_is_not_rewritten(tmp_path):
    """A pipeline pointer names its own decision's request: the same masked output in two
    windows is the same fact with the same text, whatever the pointer says."""
    big = "\n".join(f"line {n}: build log entry with details" for n in range(400))
    settings = dataclasses.replace(load_settings(), token_ceiling=400)
    with ContextStore.open(tmp_path / "s.db", settings=settings) as store:
        decisions = []
        for seq in (1, 2):
            request = edit_request(seq=seq)
            request["live"]["tool_outputs"] = [big, "$ pytest -x\n1 failed"]
            decisions.append(store.construct(request))
        assert any("masked — ctxdb show req-" in e.text for e in decisions[1].window)
        assert store.diff(*(d.decision_id for d in decisions)).rewritten == []


def test_repeated_fact_names_are_numbered_without_collisions():
    from ctxdb.forensics import unique_names

    assert unique_names(["x: 1", "x: 10", "x: 1"]) == ["x: 1", "x: 10", "x: 1 #2"]
    assert unique_names(["a", "a #2", "a"]) == ["a", "a #2", "a #3"]


def test_a_request_may_lower_the_ceiling_and_never_raise_it(store_url):
    with ContextStore.open(store_url) as store:
        context = store.construct(edit_request(run_id="lower", token_ceiling=300))
        assert context.ceiling == 300 and context.token_count <= 300
        stored = _query(store, text(
            "SELECT token_ceiling FROM decision WHERE decision_id = :d"),
            {"d": context.decision_id})[0][0]
        assert stored == 300
        with pytest.raises(RequestError, match="request.token_ceiling: 99999 is above"):
            store.construct(edit_request(run_id="raise", token_ceiling=99_999))
        with pytest.raises(RequestError, match="request.token_ceiling: '300' is not of type"):
            store.construct(edit_request(run_id="raise", token_ceiling="300"))
        runs = _query(store, text(
            "SELECT run_id FROM run ORDER BY run_id"))
    assert [row[0] for row in runs] == ["lower"]  # the refused requests wrote nothing
