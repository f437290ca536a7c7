"""Upgrading a database made at the first revision keeps every row it held."""

from __future__ import annotations

import hashlib
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text

from ctxdb import ContextStore
from ctxdb.db import make_engine, resolve_url
from ctxdb.migrate import head_revision, script_directory, upgrade_engine
from ctxdb.models import metadata
from ctxdb.paths import MIGRATIONS_DIR
from ctxdb.recon import index_repository
from ctxdb.recon.schema import RECON_SCHEMA

FIRST_REVISION = "0001"
SHOPCART = Path(__file__).resolve().parent.parent / "fixtures" / "repos" / "shopcart"
# What a store's database holds that ctxdb/models.py rightly does not describe: alembic's
# own version table (autogenerate leaves it out by itself), and the recon index, schema
# "recon" in the same PostgreSQL database or the ATTACHed recon.db on SQLite (its tables
# are ctxdb/recon/schema.py's, on SQLite with FTS5's). Views are not tables.
NOT_MODELLED_TABLES = {"alembic_version"}
NOT_MODELLED_SCHEMAS = {RECON_SCHEMA}
# Tables whose rows are read back at head through a view (a table was split since 0001).
READ_BACK_AT_HEAD = {"evidence_item": "v_evidence_item", "window_item": "v_window_item"}


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
                    " 'def total(): ...'),"
                    " (1, 2, 'E3', 'live_current', 'truncated', 'transient', 'back', FALSE, 3,"
                    " 'long …')"),
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


def _model_differences(connection) -> list:
    """What autogenerate would change to make the database match ctxdb/models.py, in
    every schema the database has but those named above."""

    def include_name(name, type_, _parent_names) -> bool:
        if type_ == "schema":
            return name not in NOT_MODELLED_SCHEMAS
        if type_ == "table":
            return name not in NOT_MODELLED_TABLES
        return True

    context = MigrationContext.configure(connection, opts={
        "compare_type": True, "include_schemas": True, "include_name": include_name,
    })
    return compare_metadata(context, metadata)


def test_models_match_migrations(backend, store_url, tmp_path):
    """ctxdb.models mirrors head, in a store with a recon index beside it: autogenerate
    finds nothing to change; a table a migration made but models.py lacks, it finds."""
    if backend == "sqlite":
        recon = str(tmp_path / "recon.db")
        index_repository(SHOPCART, recon)
    else:
        recon = None  # the schema recon of the same database
        index_repository(SHOPCART, store_url)
    with ContextStore.open(store_url, recon=recon) as store, store.engine.connect() as connection:
        assert _model_differences(connection) == []
        connection.execute(text("CREATE TABLE unmodelled (id INTEGER PRIMARY KEY)"))
        found = [(d[0], d[1].name) for d in _model_differences(connection)]
        connection.rollback()
    assert found == [("remove_table", "unmodelled")]


def test_the_revision_chain_is_linear_and_ends_at_the_newest_file():
    scripts = script_directory()
    chain = list(reversed(list(scripts.walk_revisions())))  # base first
    assert scripts.get_bases() == [FIRST_REVISION] == [chain[0].revision]
    assert scripts.get_heads() == [head_revision()] == [chain[-1].revision]
    assert chain[0].down_revision is None
    for previous, revision in zip(chain, chain[1:], strict=False):
        assert revision.down_revision == previous.revision, revision.path
    # each numbered file in versions/ is one link, in order: the head is the newest file
    files = sorted(path.name for path in (MIGRATIONS_DIR / "versions").glob("*.py"))
    assert [Path(revision.path).name for revision in chain] == files


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
    assert tuple(overview) == ("current", "baseline", 5, 2, 1234)
    # each distinct text once: E1 and E2 share theirs, and E1's window text; E3's cut and
    # uncut texts both kept, and the text its window showed (0011)
    assert sorted(content for _sha, content in texts) == [
        "def total(): ...", "long [cut]", "long output, uncut", "long …", "text five",
        "text four"]


def _seeded_down_and_up(store_url, revision: str, read_down: str, read_up: str):
    """The seed rows written at the first revision, the store upgraded to head, then
    downgraded to ``revision`` and upgraded again by opening it: the rows ``read_up``
    reads at head before, ``read_down`` reads at ``revision``, and ``read_up`` after."""
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
        at_head = [tuple(r) for r in connection.execute(text(read_up))]
        drop_views(connection)
        config = alembic_config()
        config.attributes["connection"] = connection
        command.downgrade(config, revision)
        down = [tuple(r) for r in connection.execute(text(read_down))]
    engine.dispose()
    with ContextStore.open(store_url) as store:  # up again, views recreated
        assert store.revision() == head_revision() and store.view_drift() == []
        with store.engine.connect() as connection:
            up = [tuple(r) for r in connection.execute(text(read_up))]
    return at_head, down, up


def test_downgrade_to_0004_and_back_keeps_every_text(store_url):
    """Texts moved into evidence_text (0005) go back into the pool rows on downgrade,
    cut items' uncut originals included, and forward again."""
    read = "SELECT item_id, content, original_content FROM {} ORDER BY item_id"
    _at_head, down, up = _seeded_down_and_up(store_url, "0004", read.format("evidence_item"),
                                             read.format("v_evidence_item"))
    expected = [("E1", "def total(): ...", None), ("E2", "def total(): ...", None),
                ("E3", "long [cut]", "long output, uncut"), ("E4", "text four", None),
                ("E5", "text five", None)]
    assert down == expected and up == expected


def test_downgrade_to_0010_and_back_keeps_every_window_text(store_url):
    """Window texts moved into evidence_text (0011) go back into the window rows on
    downgrade, and forward again, each row with its own text."""
    read = "SELECT position, item_id, rendered_text{} FROM {} ORDER BY position"
    at_head, down, up = _seeded_down_and_up(
        store_url, "0010", read.format("", "window_item"),
        read.format(", rendered_sha256", "v_window_item"))
    expected = [(1, "E1", "def total(): ..."), (2, "E3", "long …")]
    assert down == expected
    assert at_head == up == [(*row, _sha256(row[2])) for row in expected]


def test_the_light_reading_of_the_revisions_agrees_with_alembic(store_url):
    """Opening a store at head reads the revisions from the files and the stamp with one
    SELECT, without alembic: both must say what alembic says."""
    from ctxdb.migrate import _revisions, current_revision, known_revisions

    scripts = script_directory()
    assert known_revisions() == {s.revision for s in scripts.walk_revisions()}
    assert _revisions() == {s.revision: s.down_revision for s in scripts.walk_revisions()}
    assert head_revision() == scripts.get_current_head()
    engine = make_engine(resolve_url(store_url))
    try:
        with engine.connect() as connection:
            assert current_revision(connection) is None  # nothing has run on it yet
        ContextStore.open(store_url).close()
        with engine.connect() as connection:
            assert current_revision(connection) == head_revision()
            assert current_revision(connection) == (
                MigrationContext.configure(connection).get_current_revision())
    finally:
        engine.dispose()


def _catalog_and_rows(path: Path) -> tuple[list, dict]:
    """Every schema object's SQL, and every table's rows (views' install times aside)."""
    import sqlite3

    connection = sqlite3.connect(path)
    try:
        # a table's columns and constraints, one per line, in any order: alembic's batch
        # copies write a table's constraints in no fixed order
        catalog = sorted(((kind, name, table, sorted(line.strip().rstrip(",")
                                                       for line in (sql or "").splitlines()))
                          for kind, name, table, sql in connection.execute(
                              "SELECT type, name, tbl_name, sql FROM sqlite_master")), key=str)
        rows = {}
        for (table,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            columns = [c[1] for c in connection.execute(f'PRAGMA table_info("{table}")')
                       if c[1] != "installed_at"]
            rows[table] = sorted(connection.execute(
                f'SELECT {", ".join(columns)} FROM "{table}"').fetchall(), key=str)
        return catalog, rows
    finally:
        connection.close()


def test_a_new_sqlite_store_is_made_as_the_migrations_would_make_it(tmp_path):
    fast, migrated = tmp_path / "fast.db", tmp_path / "migrated.db"
    ContextStore.open(fast).close()  # the direct path: an empty file becomes head
    upgrade_engine(resolve_url(migrated))  # every migration in turn
    fast_catalog, fast_rows = _catalog_and_rows(fast)
    assert (fast_catalog, fast_rows) == _catalog_and_rows(migrated)
    assert fast_rows["alembic_version"] == [(head_revision(),)]
    assert fast_rows["representation_policy"]  # seed rows came with it
    with ContextStore.open(fast) as store:
        assert store.revision() == head_revision() and store.view_drift() == []


def test_an_upgrade_that_leaves_space_free_says_how_to_return_it(tmp_path, capsys):
    """0011 rebuilds window_item without its texts: on SQLite the old pages stay free in
    the file, and `ctxdb db upgrade` says so."""
    from ctxdb.cli import main

    path = tmp_path / "old.db"
    upgrade_engine(resolve_url(str(path)), FIRST_REVISION)
    engine = make_engine(resolve_url(str(path)))
    with engine.begin() as connection:
        for _table, statement in SEED_ROWS:
            connection.execute(text(statement))
        connection.execute(text("UPDATE window_item SET rendered_text = :long"),
                           {"long": "x" * 3_000_000})
    engine.dispose()
    assert main(["db", "upgrade", "--db", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"upgraded {FIRST_REVISION} -> {head_revision()}"
    assert out[1].endswith("MB of the file is free after the upgrade: `VACUUM` in the "
                           "sqlite3 shell returns it to the disk")
    assert float(out[1].split()[0]) >= 3.0
    assert main(["db", "upgrade", "--db", str(path)]) == 0  # nothing to do: nothing said
    assert capsys.readouterr().out == f"already at {head_revision()}\n"
