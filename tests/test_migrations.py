"""Upgrading a database made at the first revision keeps every row it held."""

from __future__ import annotations

import hashlib
from pathlib import Path

from sqlalchemy import text

from ctxdb import ContextStore
from ctxdb.db import make_engine, resolve_url
from ctxdb.migrate import head_revision, script_directory, upgrade_engine

FIRST_REVISION = "0001"
# Tables whose rows are read back at head through a view (a table was split since 0001).
READ_BACK_AT_HEAD = {"evidence_item": "v_evidence_item"}


def _sha256(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


# One row in every table of the first revision, written as an older ctxdb would.
SEED_ROWS = [
    ("run", "INSERT INTO run (run_id, arm, variant, created_at) "
            "VALUES ('run-1', 'current', 'baseline', '2026-11-01T00:00:00+00:00')"),
    ("decision", "INSERT INTO decision (decision_id, run_id, instance_id, seq, decision_type,"
                 " task_text, request_json, request_sha256, tokenizer, token_ceiling, token_count,"
                 " created_at) VALUES (1, 'run-1', 'inst-1', 1, 'edit', 'fix the discount',"
                 " '{\"x\": 1}', 'abc', 'cl100k_base', 24000, 1234, '2026-11-01')"),
    ("obligation", "INSERT INTO obligation (decision_id, obligation_no, source, node_id,"
                   " obligation_text, target_entity) VALUES (1, 1, '07', 'n1', 'apply before tax',"
                   " 'shop/pricing.py::total')"),
    ("impact_edge", "INSERT INTO impact_edge (decision_id, edge_no, head_entity, tail_entity,"
                    " edge_kind, depth, origin) VALUES (1, 1, 'a', 'b', 'CalledBy', 1, '06')"),
    ("evidence_item", "INSERT INTO evidence_item (decision_id, item_id, item_no, source, kind,"
                      " content, content_sha256, provenance, original_content) VALUES"
                      " (1, 'E1', 1, '04',"
                      f" 'retrieved_hit', 'def total(): ...', '{_sha256('def total(): ...')}',"
                      " '04: bm25 0.8', NULL),"
                      " (1, 'E2', 2, '04', 'retrieved_hit', 'def total(): ...',"
                      f" '{_sha256('def total(): ...')}', '04: the same text again', NULL),"
                      " (1, 'E3', 3, 'live', 'tool_output', 'long [cut]',"
                      f" '{_sha256('long [cut]')}', 'live', 'long output, uncut'),"
                      # hand-made rows: one made-up hash for two different texts
                      " (1, 'E4', 4, '04', 'retrieved_hit', 'text four', 'h', '04', NULL),"
                      " (1, 'E5', 5, '04', 'retrieved_hit', 'text five', 'h', '04', NULL)"),
    ("item_event", "INSERT INTO item_event (decision_id, item_id, event_no, stage, action, driver)"
                   " VALUES (1, 'E1', 1, 'gate', 'admit', 'obligation:target_entity')"),
    ("window_item", "INSERT INTO window_item (decision_id, position, item_id, role, rendering,"
                    " tier, block, edge_critical, token_count, rendered_text) VALUES"
                    " (1, 1, 'E1', 'change_target', 'verbatim', 'working_set', 'front', TRUE, 7,"
                    " 'def total(): ...')"),
    ("budget_log", "INSERT INTO budget_log (decision_id, step_no, ladder_step, tokens_before,"
                   " tokens_after) VALUES (1, 1, 'fits', 1234, 1234)"),
    ("rank_call", "INSERT INTO rank_call (rank_call_id, decision_id, model, base_url,"
                  " request_json, parse_status, created_at) VALUES (1, 1, 'm', 'http://x', '{}',"
                  " 'ok', 'now')"),
    ("rank_score", "INSERT INTO rank_score (rank_call_id, item_id, relevance_score, verdict)"
                   " VALUES (1, 'E1', 0.9, 'admit')"),
    ("token_count_cache", "INSERT INTO token_count_cache (tokenizer, content_sha256, token_count)"
                          " VALUES ('cl100k_base', 'h', 7)"),
    ("outcome", "INSERT INTO outcome (run_id, instance_id, solved, recorded_at)"
                " VALUES ('run-1', 'inst-1', TRUE, 'now')"),
    ("gold_fact", "INSERT INTO gold_fact (instance_id, fact_no, fact_kind, entity_key)"
                  " VALUES ('inst-1', 1, 'edited_entity', 'shop/pricing.py::total')"),
]


def _dump(engine, tables, read_back=None):
    read_back = read_back or {}
    with engine.connect() as connection:
        return {
            table: sorted(
                tuple(row) for row in connection.execute(
                    text(f"SELECT * FROM {read_back.get(table, table)}"))
            )
            for table in tables
        }


def test_the_revisions_form_one_line_from_the_first_to_the_newest_file():
    """One base, one head, each revision's parent the one before it; the head is the
    newest file in migrations/versions (numbered names, so the order is the number)."""
    scripts = script_directory()
    by_revision = {s.revision: s for s in scripts.walk_revisions()}
    assert scripts.get_bases() == [FIRST_REVISION]
    assert scripts.get_heads() == [head_revision()]
    chain, revision = [], head_revision()
    while revision is not None:
        chain.append(revision)
        parent = by_revision[revision].down_revision
        assert parent is None or isinstance(parent, str), f"{revision} merges {parent}"
        revision = parent
    assert chain[::-1] == sorted(by_revision)  # linear, and every revision on the line
    files = sorted(p.name for p in (Path(scripts.dir) / "versions").glob("[0-9]*.py"))
    assert files[-1].startswith(head_revision() + "_")
    assert [name.split("_", 1)[0] for name in files] == chain[::-1]


def test_upgrade_from_first_revision_keeps_every_row(store_url):
    url = resolve_url(store_url)
    before, after = upgrade_engine(url, FIRST_REVISION)
    assert (before, after) == (None, FIRST_REVISION)

    engine = make_engine(url)
    with engine.begin() as connection:
        for _table, statement in SEED_ROWS:
            connection.execute(text(statement))
    tables = [table for table, _ in SEED_ROWS]
    seeded = _dump(engine, tables)
    engine.dispose()
    assert all(rows for rows in seeded.values())

    with ContextStore.open(store_url) as store:  # upgrades to head
        assert store.revision() == head_revision()
        upgraded = _dump(store.engine, tables, READ_BACK_AT_HEAD)
        texts = _dump(store.engine, ["evidence_text"])["evidence_text"]
        with store.engine.connect() as connection:
            overview = connection.execute(
                text("SELECT arm, variant, pool_items, window_items, token_count"
                     " FROM v_decision_overview WHERE decision_id = 1")
            ).one()
    # a hash shared by two texts is replaced by each text's own; every other value is kept
    rehashed = {("E4", "text four"), ("E5", "text five")}
    for row in upgraded["evidence_item"]:
        if (row[1], row[6]) in rehashed:
            assert row[7] == _sha256(row[6])
    for table in tables:
        width = len(seeded[table][0])
        if table == "evidence_item":
            keep = [c for c in range(width) if c != 7]  # content_sha256 checked above
            got = [tuple(row[c] for c in keep) for row in upgraded[table]]
            want = [tuple(row[c] for c in keep) for row in seeded[table]]
            assert got == want, table
            continue
        assert [row[:width] for row in upgraded[table]] == seeded[table], table
    assert tuple(overview) == ("current", "baseline", 5, 1, 1234)
    # each distinct text once: E1 and E2 share theirs; E3's cut and uncut texts both kept
    assert sorted(content for _sha, content in texts) == [
        "def total(): ...", "long [cut]", "long output, uncut", "text five", "text four"]


def test_downgrade_to_0004_and_back_keeps_every_text(store_url):
    """Texts moved into evidence_text (0005) go back into the pool rows on downgrade,
    cut items' uncut originals included, and forward again."""
    from alembic import command

    from ctxdb.migrate import alembic_config
    from ctxdb.views import drop_views

    url = resolve_url(store_url)
    upgrade_engine(url, FIRST_REVISION)
    engine = make_engine(url)
    with engine.begin() as connection:
        for _table, statement in SEED_ROWS:
            connection.execute(text(statement))
    engine.dispose()
    upgrade_engine(url)  # head
    engine = make_engine(url, foreign_keys=False)
    with engine.begin() as connection:
        drop_views(connection)
        config = alembic_config()
        config.attributes["connection"] = connection
        command.downgrade(config, "0004")
        down = sorted(tuple(r) for r in connection.execute(text(
            "SELECT item_id, content, original_content FROM evidence_item")))
    engine.dispose()
    with ContextStore.open(store_url) as store:  # up again, views recreated
        assert store.revision() == head_revision() and store.view_drift() == []
        with store.engine.connect() as connection:
            up = sorted(tuple(r) for r in connection.execute(text(
                "SELECT item_id, content, original_content FROM v_evidence_item")))
    expected = [("E1", "def total(): ...", None), ("E2", "def total(): ...", None),
                ("E3", "long [cut]", "long output, uncut"), ("E4", "text four", None),
                ("E5", "text five", None)]
    assert down == expected and up == expected
