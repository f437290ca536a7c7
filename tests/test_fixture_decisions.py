"""The three fixture decisions against a real recon index of fixtures/repos/shopcart,
on SQLite (recon.db ATTACHed) and PostgreSQL (schema recon of the same database)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import text

from ctxdb import ContextStore
from ctxdb.recon import index_repository

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
TARGET = "shopcart/pricing.py::PriceCalculator.total"


@pytest.fixture
def store(backend, recon_target, tmp_path):
    index_repository(FIXTURES / "repos" / "shopcart", recon_target)
    if backend == "sqlite":
        opened = ContextStore.open(tmp_path / "ctx08.db", recon=recon_target)
    else:
        opened = ContextStore.open(recon_target)  # recon is schema `recon` of this database
    with opened:
        yield opened


def _request(name):
    return json.loads((FIXTURES / "decisions" / f"{name}.json").read_text())


def _verdicts(store, decision_id):
    with store.engine.connect() as connection:
        rows = connection.execute(
            text("SELECT entity_key, kind, verdict, driver FROM v_item_verdict"
                 " WHERE decision_id = :d ORDER BY item_no"), {"d": decision_id})
        return [tuple(r) for r in rows]


def test_localize_decision(store):
    ctx = store.construct(_request("localize"))
    assert store.verify() == {}
    verdicts = {(e, k): (v, d) for e, k, v, d in _verdicts(store, ctx.decision_id)}
    # what the failing tests call directly is what the obligation depends on
    assert verdicts[(TARGET, "retrieved_hit")] == ("in_window", "obligation:validation_callee")
    # the failing tests themselves are reasoned over: verbatim, at the back edge
    tests = [e for e in ctx.window if e.role == "test_reasoned_over"]
    assert len(tests) == 2 and all(t.rendering == "verbatim" and t.block == "back" for t in tests)
    # semantically near but unlinked: the residue, folded while no ranker is configured —
    # a direct recon neighbour of its bucket's symbol comes in as a signature
    residue = {k: (v, d) for k, (v, d) in verdicts.items() if d.startswith("no ranker: ")
               or d.startswith("fold:")}
    assert 1 <= len(residue) <= 32 and "residue_folded_no_ranker" in ctx.flags
    assert ("shopcart/tax.py::TaxPolicy.tax_for", "retrieved_hit") in residue
    # a recon neighbour of the symbol a failing test calls is folded in, at one edge and
    # at two (FOLD_MAX_RECON_HOPS); what only shares words with the task is folded away
    # unless its near score reaches a recon edge's (FOLD_MIN_NEAR_SCORE)
    assert verdicts[("shopcart/pricing.py::PriceCalculator.taxable_amount", "retrieved_hit")] == (
        "in_window", "fold:validation_callee")
    assert verdicts[("shopcart/tax.py::TaxPolicy.rate_for", "retrieved_hit")][0] == "in_window"
    assert all(v == "in_window" or "not within 2 recon edges" in d
               for v, d in residue.values())
    # an unrelated symbol is rejected without a model
    assert verdicts[("shopcart/inventory.py::Inventory.reserve", "retrieved_hit")] == (
        "rejected", "no_structural_link")
    assert ctx.window[-1].role == "live_current"


def test_edit_decision(store):
    ctx = store.construct(_request("edit"))
    assert store.verify() == {}
    by_role = {}
    for entry in ctx.window:
        by_role.setdefault(entry.role, []).append(entry)
    target = by_role["change_target"][0]
    assert target.rendering == "verbatim" and target.block == "front"
    assert "taxable = self.taxable_amount(items, exempt_categories)" in target.text
    impact = by_role["direct_impact"][0]
    assert "shopcart/cli.py::quote_command" in impact.text
    assert "L45: quote = calculator.total(cart, config.region, coupon)" in impact.text
    digest = by_role["transitive_impact"][0].text.strip().splitlines()[-1]
    # the digest's counts are the real counts of the derived impact edges
    with store.engine.connect() as connection:
        callers = connection.execute(text(
            "SELECT COUNT(*) FROM impact_edge WHERE decision_id = :d AND depth = 1"
            " AND edge_kind = 'CalledBy'"), {"d": ctx.decision_id}).scalar()
        tests = connection.execute(text(
            "SELECT COUNT(*) FROM impact_edge WHERE decision_id = :d"
            " AND edge_kind = 'PreserveObligation'"), {"d": ctx.decision_id}).scalar()
    assert digest.startswith(f"{TARGET}: {callers} callers, 0 config/schema consumers, ")
    assert f", {tests} tests — no direct evidence requires source expansion yet" in digest
    assert ctx.window[0].item_id == "E1" and ctx.window[0].role == "requirement"


def test_repair_decision(store):
    ctx = store.construct(_request("repair"))
    assert store.verify() == {}
    verdicts = _verdicts(store, ctx.decision_id)
    # the traceback's frame in pricing.py:64 links the target; the older run is stale
    with store.engine.connect() as connection:
        links = connection.execute(text(
            "SELECT link_kind, entity_key FROM decision_link WHERE decision_id = :d"
            " AND link_kind = 'traceback_frame' ORDER BY link_no"), {"d": ctx.decision_id}).all()
    assert ("traceback_frame", TARGET) in [tuple(r) for r in links]
    test_outputs = [v for v in verdicts if v[1] == "test_output"]
    assert test_outputs[0][2:] == ("rejected", "stale: omitted (§3.3, P6)")
    assert test_outputs[1][2] == "in_window"
    last = ctx.window[-1]
    assert "TypeError: unsupported operand type(s)" in last.text  # the freshest failure, last
    patch = next(e for e in ctx.window if e.text.split("\n", 1)[0].endswith("patch · verbatim"))
    assert patch.block == "back"


def test_postgresql_store_reads_a_separate_recon_file(pg_url, tmp_path):
    """A shared PostgreSQL store with a per-repository recon.db beside it (the A/B runner)."""
    recon = tmp_path / "recon.db"
    index_repository(FIXTURES / "repos" / "shopcart", str(recon))
    with ContextStore.open(pg_url, recon=str(recon)) as store:
        ctx = store.construct(_request("edit"))
        assert store.verify() == {}
    target = next(e for e in ctx.window if e.role == "change_target")
    assert "taxable = self.taxable_amount(items, exempt_categories)" in target.text


def test_sqlite_and_postgresql_send_the_same_window(pg_url, tmp_path):
    recon = tmp_path / "recon.db"
    index_repository(FIXTURES / "repos" / "shopcart", str(recon))
    index_repository(FIXTURES / "repos" / "shopcart", pg_url)
    windows = []
    for url, recon_target in ((tmp_path / "ctx08.db", str(recon)), (pg_url, None)):
        with ContextStore.open(url, recon=recon_target) as store:
            windows.append([store.construct(_request(name)).render()
                            for name in ("localize", "edit", "repair")])
    assert windows[0] == windows[1]


@pytest.mark.parametrize("writes_generation", [True, False], ids=["current", "older_indexer"])
def test_a_reindexed_repository_is_read_afresh(backend, recon_target, tmp_path, monkeypatch,
                                               writes_generation):
    """Recon reads are kept per index generation: a change to the code shows up in the
    very next decision of the same process, never a stale copy."""
    import shutil

    repo = tmp_path / "shopcart"
    shutil.copytree(FIXTURES / "repos" / "shopcart", repo)
    index_repository(repo, recon_target)
    url = tmp_path / "ctx08.db" if backend == "sqlite" else recon_target
    recon = recon_target if backend == "sqlite" else None
    with ContextStore.open(url, recon=recon) as store:
        before = next(e for e in store.construct(_request("edit")).window
                      if e.role == "change_target")
        assert "taxable = self.taxable_amount(items, exempt_categories)" in before.text
        if not writes_generation:  # an indexer from before generations: it keeps the old one
            from ctxdb.recon import indexer

            monkeypatch.setattr(indexer, "write_generation", lambda writer: None)
            # ... and gives a re-parsed file a new id (this one keeps it)
            monkeypatch.setattr(indexer, "_written_in_place", lambda *args: {})
        pricing = repo / "shopcart" / "pricing.py"
        pricing.write_text(pricing.read_text().replace(
            "taxable = self.taxable_amount(items, exempt_categories)",
            "taxable = self.taxable_amount(items, exempt_categories)  # reindexed"))
        assert index_repository(repo, recon_target).files_parsed == 1
        after = next(e for e in store.construct(_request("edit")).window
                     if e.role == "change_target")
    assert "exempt_categories)  # reindexed" in after.text


def test_a_decisions_recon_reads_on_sqlite_are_one_snapshot(tmp_path):
    """The reads a decision makes of an attached recon file, on the store's connection,
    are one snapshot: a writer either waits for them (a rollback journal) or commits
    unseen (WAL), so the reader takes no second look at the index's identity after them."""
    import sqlite3

    from sqlalchemy import event

    from ctxdb.recon.reader import ReconReader
    from ctxdb.recon.schema import GENERATION_KEY, create_recon_engine

    recon = tmp_path / "recon.db"
    index_repository(FIXTURES / "repos" / "shopcart", str(recon), progress=False)
    generation = text("SELECT value FROM recon.recon_meta WHERE key = :key").bindparams(
        key=GENERATION_KEY)
    with ContextStore.open(tmp_path / "ctx08.db", recon=str(recon)) as store:
        with store.engine.connect() as connection, store.recon_connection(connection) as rc:
            reader = ReconReader(rc)
            assert reader.reads_one_snapshot
            before = rc.execute(generation).scalar_one()
            writer = sqlite3.connect(recon, timeout=0.2)  # a re-index, as far as it gets
            try:
                writer.execute("UPDATE recon_meta SET value = 'next' WHERE key = ?",
                               (GENERATION_KEY,))
                writer.commit()
            except sqlite3.OperationalError as error:
                assert "locked" in str(error)
            finally:
                writer.close()
            assert rc.execute(generation).scalar_one() == before
            statements = []
            event.listen(store.engine, "before_cursor_execute",
                         lambda *args: statements.append(args[2]))
            reader.confirm_snapshot()
            assert statements == []
            rc.commit()  # a later read would be another snapshot: the reader looks again
            assert not reader.reads_one_snapshot
    # a recon engine of its own reads statement by statement: the reader always looks again
    engine = create_recon_engine(str(recon), read_only=True)
    try:
        with engine.connect() as connection:
            assert not ReconReader(connection).reads_one_snapshot
    finally:
        engine.dispose()


def test_reading_recon_elsewhere_does_not_block_a_decision(tmp_path):
    """recon.db is attached read-only: a decision takes no lock on it, so a reader
    holding recon open (another connection, mid-transaction) does not stall the commit."""
    recon = tmp_path / "recon.db"
    index_repository(FIXTURES / "repos" / "shopcart", str(recon))
    with ContextStore.open(tmp_path / "ctx08.db", recon=str(recon)) as store:
        store.construct(_request("edit"))
        with store.engine.connect() as reader:
            reader.execute(text("SELECT COUNT(*) FROM recon.symbol")).all()  # holds a read
            assert store.construct(_request("edit")).token_count > 0
            with pytest.raises(Exception, match="(?i)readonly|read-only"):
                reader.execute(text("DELETE FROM recon.recon_meta"))


def test_process_caches_change_nothing_but_speed(store):
    """Every in-process cache dropped between two constructions of one request: the same
    window, byte for byte (the caches only save reads and recomputation)."""
    from ctxdb.caches import forget_process_caches

    first = store.construct(_request("repair")).render()
    forget_process_caches()
    assert store.construct(_request("repair")).render() == first
