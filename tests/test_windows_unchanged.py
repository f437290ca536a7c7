"""Every fixture decision writes exactly what it wrote when the golden file was recorded.

The scenarios cover each path of the pipeline: the three fixture decisions on both arms,
the variants that change construction (buried critical items, no digest, a policy set),
tight ceilings that run the eviction ladder, a residue ranked through a real HTTP server,
a failed ranking call, and a residue over 32 that is folded. A refactor that changes no
behaviour leaves the file as it is; a deliberate change of behaviour re-records it:

    CTXDB_RECORD_GOLDEN=1 .venv/bin/pytest tests/test_windows_unchanged.py
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
from pathlib import Path

import pytest
from chatserver import Answer, ChatServer
from window_snapshots import decision_snapshot, record_made_with

from ctxdb import ContextStore, load_settings
from ctxdb.recon import index_repository

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
GOLDEN = Path(__file__).resolve().parent / "golden" / "fixture_windows.json"
RECORD_ENV = "CTXDB_RECORD_GOLDEN"
SEED = 8


def _request(name: str, **changes) -> dict:
    request = json.loads((FIXTURES / "decisions" / f"{name}.json").read_text())
    request.update(changes)
    return request


def _scores(body: dict, high: float = 0.9, low: float = 0.2) -> Answer:
    """Alternating high and low scores, so the ranked residue is split."""
    residue = json.loads(body["messages"][1]["content"])["residue"]
    rankings = [{"candidate_id": c["id"], "relevance_score": high if n % 2 == 0 else low}
                for n, c in enumerate(residue)]
    return Answer(content=json.dumps({"rankings": rankings}))


def _many_hits(recon_path: str) -> dict:
    """A localize decision whose residue is over 32: every fixture symbol as a 04 hit."""
    import sqlite3

    with sqlite3.connect(recon_path) as connection:
        keys = [row[0] for row in connection.execute(
            "SELECT key FROM symbol WHERE kind <> 'module' ORDER BY key")]
    random.Random(SEED).shuffle(keys)
    request = _request("localize", run_id="golden-fold", instance_id="fold")
    request["evidence"] = request["evidence"] + [
        {"source": "04", "kind": "retrieved_hit", "entity": key, "score": 1.0,
         "provenance": f"04: every symbol #{n}"} for n, key in enumerate(keys, start=1)]
    return request


def _construct_all(tmp_path: Path) -> dict[str, dict]:
    recon = str(tmp_path / "recon.db")
    index_repository(FIXTURES / "repos" / "shopcart", recon)
    settings = load_settings()
    snapshots = {}

    def run(name, request, **setting_changes):
        path = tmp_path / f"{name}.db"
        with ContextStore.open(path, recon=recon,
                               settings=dataclasses.replace(settings, **setting_changes)) as store:
            context = store.construct(request)
            snapshots[name] = decision_snapshot(store, context)
            assert store.verify() == {}, name

    for decision in ("localize", "edit", "repair"):
        run(decision, _request(decision))
        run(f"{decision}-current", _request(decision, run_id=f"golden-current-{decision}",
                                            arm="current"))
    for variant in ("litm_buried", "no_impact_digest", "all_verbatim", "no_signatures"):
        run(f"edit-{variant}", _request("edit", run_id=f"golden-{variant}", variant=variant))
    # a change target over 1 KB with the insertion point inside: the AST slice
    wide = _request("edit", instance_id="wide-target")
    wide["plan_node"]["target_entity"] = "shopcart/pricing.py::PriceCalculator"
    wide["evidence"][0]["entity"] = "shopcart/pricing.py::PriceCalculator"
    wide["evidence"].append({"source": "03", "kind": "source_code",
                             "entity": "shopcart/discounts.py", "provenance": "03: the module"})
    run("edit-class-target", wide)
    with ChatServer(responder=lambda body: _scores(body, low=0.9)) as server:
        # everything ranked in, every body verbatim: large related items are windowed
        run("edit-class-target-all_verbatim",
            dict(wide, run_id="golden-wide-verbatim", variant="all_verbatim"),
            rank_base_url=server.base_url)
        for ceiling in (2500, 1200):  # supporting bodies downgraded to signatures
            run(f"edit-class-target-all_verbatim-ceiling-{ceiling}",
                dict(wide, run_id="golden-wide-verbatim", variant="all_verbatim"),
                rank_base_url=server.base_url, token_ceiling=ceiling)
    for ceiling in (900, 400, 120):
        run(f"edit-ceiling-{ceiling}", _request("edit"), token_ceiling=ceiling)
        run(f"repair-ceiling-{ceiling}", _request("repair"), token_ceiling=ceiling)
    with ChatServer(responder=_scores) as server:
        run("localize-ranked", _request("localize"), rank_base_url=server.base_url)
    with ChatServer() as server:
        server.answers.append(Answer(content="not json"))
        run("localize-rank-failed", _request("localize"), rank_base_url=server.base_url)
    run("localize-folded", _many_hits(recon))
    return snapshots


def test_fixture_windows_are_unchanged(tmp_path):
    snapshots = _construct_all(tmp_path)
    if os.environ.get(RECORD_ENV):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(snapshots, indent=1, sort_keys=True, ensure_ascii=False)
                          + "\n")
        record_made_with()
        pytest.skip(f"recorded {GOLDEN}")
    golden = json.loads(GOLDEN.read_text())
    assert sorted(snapshots) == sorted(golden)
    for name in golden:
        for part in golden[name]:
            assert snapshots[name][part] == golden[name][part], f"{name}: {part} changed"


def test_the_scenarios_reach_every_path():
    """The golden file is only worth its paths: each one is exercised."""
    golden = json.loads(GOLDEN.read_text())
    actions = {row[3] for snapshot in golden.values() for row in snapshot["item_event"]}
    for needed in ("masked", "evicted", "folded", "folded_in", "deduped", "ast_slice",
                   "sliding_window", "downgraded", "cut_to_window"):
        assert needed in actions, needed
    assert golden["localize-ranked"]["rank_score"]
    assert golden["localize-rank-failed"]["rank_call"][0][3] == "parse_error"
    assert any("stable_core_only" in s["flags"] for s in golden.values())
