"""§4, the one ranking call, against a real HTTP server on 127.0.0.1 driven by the
official openai client — on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).parent))

from chatserver import Answer, ChatServer  # noqa: E402
from requests_data import edit_request  # noqa: E402

from ctxdb import ContextStore  # noqa: E402
from ctxdb.config import load_settings  # noqa: E402

# what the store says of each near item's bucket, to hold the fold's events to it
NEARNESS_OF_DECISION = text(
    (Path(__file__).parent / "sql" / "nearness_of_decision.sql").read_text())

SECRET = "BODY_MUST_NOT_REACH_THE_RANKER"


def residue_request(size: int, run_id: str = "rank-run") -> dict:
    """The edit request plus `size` items that share terms with the obligation but have
    no structural link: the gate's residue."""
    request = edit_request(run_id=run_id)
    request["evidence"] = request["evidence"] + [
        {"source": "04", "kind": "retrieved_hit", "entity": f"shop/extra.py::apply_discount_{n}",
         "content": f"def apply_discount_{n}(cart, tax):\n    return cart.{SECRET}_{n}\n",
         "provenance": f"04: bm25 {2 - n / 100:.2f}"}
        for n in range(size)
    ]
    return request


def _store(url, server=None, timeout=5.0):
    settings = load_settings()
    if server is not None:
        settings = replace(settings, rank_base_url=server.base_url, rank_timeout_seconds=timeout)
    return ContextStore.open(url, settings=settings)


def _residue_ids(size):
    # E1-E3 plan node and criteria, E4-E8 the edit request's evidence, then the residue
    return [f"E{9 + n}" for n in range(size)]


def _rows(store, sql, **params):
    with store.engine.connect() as connection:
        return [tuple(r) for r in connection.execute(text(sql), params)]


def _verdicts(store, decision_id, ids):
    rows = dict((r[0], (r[1], r[2])) for r in _rows(
        store, "SELECT item_id, verdict, driver FROM v_item_verdict WHERE decision_id = :d",
        d=decision_id))
    return [rows[i] for i in ids]


def _rankings(ids_scores):
    return json.dumps({"rankings": [{"candidate_id": i, "relevance_score": s}
                                    for i, s in ids_scores]})


def test_good_ranking_admits_at_threshold(store_url):
    ids = _residue_ids(3)
    with ChatServer() as server, _store(store_url, server) as store:
        server.answers.append(Answer(_rankings(zip(ids, (0.9, 0.5, 0.2), strict=True))))
        ctx = store.construct(residue_request(3))
        assert store.verify() == {}
        verdicts = _verdicts(store, ctx.decision_id, ids)
        call = _rows(store, "SELECT parse_status, prompt_tokens, completion_tokens, model,"
                            " response_text, request_json FROM rank_call WHERE decision_id = :d",
                     d=ctx.decision_id)
        scores = _rows(store, "SELECT s.item_id, s.relevance_score, s.verdict FROM rank_score s"
                              " JOIN rank_call c ON c.rank_call_id = s.rank_call_id"
                              " WHERE c.decision_id = :d ORDER BY s.item_id", d=ctx.decision_id)
    assert len(server.requests) == 1
    body = server.requests[0]["body"]
    assert server.requests[0]["path"] == "/v1/chat/completions"
    assert body["temperature"] == 0 and body["max_completion_tokens"] == 1024
    assert body["response_format"]["type"] == "json_schema"
    schema = body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["rankings"]["maxItems"] == 32
    assert body["model"] == "deepseek-v4-pro"
    prompt = json.loads(body["messages"][1]["content"])
    assert list(prompt) == ["current_obligation", "decision_question", "residue"]
    assert [r["id"] for r in prompt["residue"]] == ids
    assert all(set(r) == {"id", "kind", "signature"} for r in prompt["residue"])
    assert prompt["residue"][0]["signature"] == (
        "shop/extra.py::apply_discount_0\ndef apply_discount_0(cart, tax):")
    assert SECRET not in json.dumps(body)  # signatures only, never bodies
    assert verdicts[0][0] == "in_window" and verdicts[1][0] == "in_window"
    assert verdicts[2] == ("rejected", "rank: score 0.20 < 0.5")
    assert call[0][:4] == ("ok", 321, 45, "deepseek-v4-pro")
    assert json.loads(call[0][5]) == body  # the exact request, replayable
    assert {s[0]: (s[1], s[2]) for s in scores} == {
        ids[0]: (0.9, "admit"), ids[1]: (0.5, "admit"), ids[2]: (0.2, "reject")}
    ranked = [e for e in ctx.window if e.item_id in ids[:2]]
    assert all(e.role == "related_symbol" and e.rendering == "signature" for e in ranked)
    assert all(SECRET not in e.text for e in ranked)  # still through render: signature only


BAD_ANSWERS = {
    "malformed_json": (Answer('{"rankings": [oops'), "parse_error"),
    "out_of_range": (Answer(_rankings([("E9", 1.5)])), "score_out_of_range"),
    "unknown_id": (Answer(_rankings([("E9", 0.9), ("E999", 0.9)])), "unknown_candidate"),
    "thirty_three": (Answer(_rankings([("E9", 0.9)] * 33)), "too_many_rankings"),
    "http_500": (Answer(status=500), "http_error"),
    "extra_field": (Answer(json.dumps({"rankings": [], "note": "admit everything"})),
                    "schema_violation"),
}


@pytest.mark.parametrize("case", sorted(BAD_ANSWERS))
def test_bad_answers_reject_the_whole_residue_without_a_second_call(store_url, case):
    answer, status = BAD_ANSWERS[case]
    ids = _residue_ids(3)
    with ChatServer() as server, _store(store_url, server) as store:
        server.answers.append(answer)
        # must never be asked for
        server.answers.append(Answer(_rankings(zip(ids, (1, 1, 1), strict=True))))
        ctx = store.construct(residue_request(3))
        assert store.verify() == {}
        verdicts = _verdicts(store, ctx.decision_id, ids)
        call = _rows(store, "SELECT parse_status, error FROM rank_call WHERE decision_id = :d",
                     d=ctx.decision_id)
    assert len(server.requests) == 1
    assert call[0][0] == status and call[0][1]
    assert verdicts == [("rejected", f"rank_failed: {status}")] * 3


def test_timeout_is_one_call_and_rejects(store_url):
    ids = _residue_ids(2)
    with ChatServer() as server, _store(store_url, server, timeout=0.5) as store:
        server.answers.append(Answer(_rankings(zip(ids, (1, 1), strict=True)), delay_seconds=2.0))
        ctx = store.construct(residue_request(2))
        verdicts = _verdicts(store, ctx.decision_id, ids)
        call = _rows(store, "SELECT parse_status FROM rank_call WHERE decision_id = :d",
                     d=ctx.decision_id)
    assert len(server.requests) == 1
    assert call == [("timeout",)]
    assert verdicts == [("rejected", "rank_failed: timeout")] * 2


# Endpoints that misbehave after a 200 (issue 14): each is one recorded call with its
# status, the residue rejected, and the decision done within the deadline plus a second
# (a bound on behaviour, not a speed figure: a trickled answer used to take minutes).
DEADLINE_SECONDS = 1.0
DEADLINE_GRACE_SECONDS = 1.0
HOSTILE = {
    "trickles one byte a second": (Answer("{}", trickle_seconds=1.0), "timeout"),
    "hangs after the headers": (Answer("{}", hang_seconds=10.0), "timeout"),
    "not UTF-8": (Answer(raw_bytes=b"\xff\xfe" * 1000), "parse_error"),
    "junk": (Answer(raw_bytes=b"%PDF-1.4 " * 100_000), "parse_error"),
    "nested past the parser": (Answer(raw_body="[" * 100_000 + "]" * 100_000), "parse_error"),
    "a message nested past the parser": (Answer("[" * 100_000 + "]" * 100_000), "parse_error"),
    "not a chat.completion": (Answer(raw_body='{"choices": 3}'), "parse_error"),
    "5 MB": (Answer(raw_bytes=b" " * (5 << 20)), "response_too_large"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_endpoint_costs_one_recorded_call_within_the_deadline(store_url, case):
    import time

    answer, status = HOSTILE[case]
    ids = _residue_ids(2)
    with ChatServer() as server, _store(store_url, server, timeout=DEADLINE_SECONDS) as store:
        server.answers.append(answer)
        start = time.perf_counter()
        ctx = store.construct(residue_request(2))
        took = time.perf_counter() - start
        assert store.verify() == {}
        verdicts = _verdicts(store, ctx.decision_id, ids)
        call = _rows(store, "SELECT parse_status, LENGTH(error) FROM rank_call"
                            " WHERE decision_id = :d", d=ctx.decision_id)
    assert len(server.requests) == 1
    assert call[0][0] == status and 0 < call[0][1] <= 500
    assert verdicts == [("rejected", f"rank_failed: {status}")] * 2
    assert took < DEADLINE_SECONDS + DEADLINE_GRACE_SECONDS
    # the abandoned call's thread stops too: at its next read past the deadline
    import threading

    for _ in range(50):
        if not any(t.name == "ctxdb-rank-call" for t in threading.enumerate()):
            break
        time.sleep(0.1)
    assert not any(t.name == "ctxdb-rank-call" for t in threading.enumerate())


def test_residue_over_32_folds_without_a_call(store_url):
    with ChatServer() as server, _store(store_url, server) as store:
        ctx = store.construct(residue_request(33))
        assert store.verify() == {}
        verdicts = _verdicts(store, ctx.decision_id, _residue_ids(33))
        calls = _rows(store, "SELECT COUNT(*) FROM rank_call WHERE decision_id = :d",
                      d=ctx.decision_id)
        with store.engine.connect() as connection:
            buckets = {
                row.item_id: f"residue > 32: link {row.nearest_link_no}"
                             f" ({row.nearest_link_kind} {row.nearest_entity})"
                for row in connection.execute(NEARNESS_OF_DECISION,
                                              {"decision_id": ctx.decision_id})
            }
    assert server.requests == [] and calls == [(0,)]
    # no recon: nothing is a recon neighbour of an obligation link, so each is folded
    # into its nearest bucket and dropped there
    assert {v for v, _ in verdicts} == {"folded"}
    assert "residue_folded_over_32" in ctx.flags
    assert all(d.startswith("residue > 32: link 1 (target_entity") for _, d in verdicts)
    # the bucket each names is the one the stored nearness rows give
    assert [d.split(", not within")[0] for _, d in verdicts] == [
        buckets[i] for i in _residue_ids(33)]


def test_empty_residue_makes_no_call(store_url):
    with ChatServer() as server, _store(store_url, server) as store:
        ctx = store.construct(edit_request(run_id="no-residue"))
        assert store.verify() == {}
    assert server.requests == [] and ctx.token_count > 0


def test_no_endpoint_folds_the_residue_flags_it_and_says_so_once(store_url, caplog):
    """§4's deterministic rule stands in for a ranking step that cannot fire: the residue
    is folded (not rejected as if a call had failed), and the context says so."""
    with _store(store_url) as store, caplog.at_level(logging.WARNING, logger="ctxdb.pipeline.rank"):
        first = store.construct(residue_request(4, run_id="offline-run"))
        store.construct(residue_request(4, run_id="offline-run"))
        verdicts = _verdicts(store, first.decision_id, _residue_ids(4))
        calls = _rows(store, "SELECT COUNT(*) FROM rank_call WHERE decision_id = :d",
                      d=first.decision_id)
    assert "residue_folded_no_ranker" in first.flags and calls == [(0,)]
    # no recon here: no residue item is a recon neighbour of its bucket, and four items
    # sharing the same terms are each less near than an edge, so each is folded away
    assert [v for v, _ in verdicts] == ["folded"] * 4
    assert all(d.startswith("no ranker: link 1 (target_entity")
               and d.endswith("not within 2 recon edges") for _, d in verdicts)
    warnings = [r for r in caplog.records if "offline-run" in r.getMessage()]
    assert len(warnings) == 1


def test_no_endpoint_folds_in_what_is_lexically_as_near_as_a_recon_edge(store_url):
    """Two residue items sharing the obligation's terms only between them score 1.2 each
    (gate_inputs.near_score): as near as a direct recon neighbour, so folded in."""
    with _store(store_url) as store:
        ctx = store.construct(residue_request(2, run_id="offline-near"))
        events = _rows(store, "SELECT item_id, driver, detail FROM item_event"
                       " WHERE decision_id = :d AND stage = 'rank' ORDER BY item_id",
                       d=ctx.decision_id)
    ids = _residue_ids(2)
    assert sorted(e.item_id for e in ctx.window if e.item_id in ids) == sorted(ids)
    assert events == [(i, "no ranker: link 1 (target_entity shop/cart.py::Cart.total), "
                          "as near as a recon edge", "near score 1.2 >= 1") for i in sorted(ids)]


def test_same_request_same_ranking_same_window(store_url):
    ids = _residue_ids(2)
    with ChatServer() as server, _store(store_url, server) as store:
        server.answers += [Answer(_rankings(zip(ids, (0.8, 0.1), strict=True)))] * 2
        first = store.construct(residue_request(2))
        second = store.construct(residue_request(2))
    assert first.render() == second.render()
    assert len(server.requests) == 2 and server.requests[0]["body"] == server.requests[1]["body"]


def test_cli_summary_and_why_show_the_call(tmp_path, capsys, monkeypatch):
    from ctxdb.cli import main

    ids = _residue_ids(2)
    request_file = tmp_path / "request.json"
    request_file.write_text(json.dumps(residue_request(2)))
    db = str(tmp_path / "c.db")
    with ChatServer() as server:
        server.answers.append(Answer(_rankings(zip(ids, (0.75, 0.25), strict=True))))
        monkeypatch.setenv("CTXDB_RANK_BASE_URL", server.base_url)
        assert main(["construct", str(request_file), "--db", db, "--summary"]) == 0
    out = capsys.readouterr().out
    assert "ranking: 1 call to deepseek-v4-pro — ok" in out
    assert "2 candidates scored, 1 admitted" in out
    assert main(["why", "1", ids[0], "--db", db]) == 0
    assert "rank      admitted             rank: score 0.75 >= 0.5" in capsys.readouterr().out
    monkeypatch.delenv("CTXDB_RANK_BASE_URL")
    assert main(["construct", str(request_file), "--db", db, "--summary"]) == 0
    # both share the obligation's terms between them only: as near as a recon edge
    assert "ranking: no call — residue folded_in 2" in capsys.readouterr().out


def test_the_write_lock_is_free_while_the_call_is_in_flight(tmp_path):
    """Another writer commits while the ranking call waits: no lock is held across it."""
    import sqlite3
    import threading
    import time

    db = tmp_path / "lock.db"
    ids = _residue_ids(2)
    with ChatServer() as server, _store(str(db), server) as store:
        server.answers.append(Answer(_rankings(zip(ids, (0.9, 0.1), strict=True)),
                                     delay_seconds=1.5))
        result = {}
        worker = threading.Thread(
            target=lambda: result.setdefault("ctx", store.construct(residue_request(2))))
        worker.start()
        deadline = time.monotonic() + 5
        while not server.requests and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.requests, "the ranking call never arrived"
        other = sqlite3.connect(db, timeout=0.2, isolation_level=None)
        started = time.monotonic()
        other.execute("BEGIN IMMEDIATE")  # raises 'database is locked' if a writer holds it
        other.execute("INSERT INTO run (run_id, arm, created_at) VALUES ('other', 'ctx08', 'x')")
        other.execute("COMMIT")
        other.close()
        waited = time.monotonic() - started
        worker.join(10)
    assert waited < 0.5
    assert result["ctx"].token_count > 0


def test_json_object_mode_for_endpoints_without_json_schema(store_url):
    ids = _residue_ids(1)
    with ChatServer() as server:
        settings = replace(load_settings(), rank_base_url=server.base_url,
                           rank_response_format="json_object")
        with ContextStore.open(store_url, settings=settings) as store:
            server.answers.append(Answer(_rankings([(ids[0], 0.8)])))
            ctx = store.construct(residue_request(1))
    assert server.requests[0]["body"]["response_format"] == {"type": "json_object"}
    assert ids[0] in [e.item_id for e in ctx.window]


def test_cap_counts_ranked_items_in_the_store_priority_order(store_url):
    """Ranking can push the admitted set over 64: the cap then cuts by the store's
    source_priority (live state newest first), ranked items included — which v_gate,
    seeing only the rule's admissions, cannot know (v_item_verdict records the cut)."""
    ids = _residue_ids(3)
    request = residue_request(3, run_id="cap-run")
    symbols = [f"shop/cart.py::Helper{n}.run" for n in range(62)]
    request["evidence"] += [{"source": "03", "kind": "symbol", "entity": key,
                             "content": f"def run(self): return {n}", "provenance": "03"}
                            for n, key in enumerate(symbols)]
    request["impact_edges"] = [{"head": "shop/cart.py::Cart.total", "tail": key,
                                "kind": "CalledBy", "depth": 1} for key in symbols]
    with ChatServer() as server, _store(store_url, server) as store:
        server.answers.append(Answer(_rankings(zip(ids, (0.9, 0.9, 0.9), strict=True))))
        ctx = store.construct(request)
        assert store.verify() == {}
        admitted = _rows(store, """
            SELECT e.item_id, sp.priority, e.arrival_no, e.item_no
            FROM evidence_item e JOIN source_priority sp ON sp.source = e.source
            WHERE e.decision_id = :d AND EXISTS (
                SELECT 1 FROM item_event ev WHERE ev.decision_id = e.decision_id
                  AND ev.item_id = e.item_id AND ev.action = 'admitted'
                  AND ev.stage IN ('gate', 'rank'))""", d=ctx.decision_id)
        cut = {r[0] for r in _rows(store, "SELECT item_id FROM v_item_verdict WHERE"
                                          " decision_id = :d AND driver LIKE 'admitted_cap_64%'",
                                   d=ctx.decision_id)}
        view_cut = {r[0] for r in _rows(store, "SELECT item_id FROM v_gate WHERE decision_id = :d"
                                               " AND driver LIKE 'admitted_cap_64%'",
                                        d=ctx.decision_id)}
    in_order = sorted(admitted, key=lambda r: (r[1], -r[2] if r[2] is not None else r[3]))
    assert len(in_order) > 64 and set(ids) <= {r[0] for r in admitted}
    assert cut == {r[0] for r in in_order[64:]}
    assert not cut & set(ids)  # 04 hits rank above the 03 symbols and the live state
    assert view_cut < cut  # the view cuts fewer: it does not count the 3 ranked items


def test_an_unexpected_client_failure_is_a_recorded_call_not_a_wait(store_url, monkeypatch):
    """Whatever the client raises in the call's thread is the call's status at once —
    not a thread that dies and a decision that waits out the deadline."""
    import time

    from ctxdb.pipeline import rank_client

    def broken(settings, body, deadline):
        raise RuntimeError("client bug")

    monkeypatch.setattr(rank_client, "_post", broken)
    with ChatServer() as server, _store(store_url, server, timeout=5.0) as store:
        start = time.perf_counter()
        ctx = store.construct(residue_request(2))
        took = time.perf_counter() - start
        call = _rows(store, "SELECT parse_status, error FROM rank_call WHERE decision_id = :d",
                     d=ctx.decision_id)
    assert call == [("parse_error", "RuntimeError: client bug")]
    assert took < 5.0  # it did not wait for the deadline
