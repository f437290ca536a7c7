"""The store's schema, migrations, views and checks, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from requests_data import edit_request
from sqlalchemy import inspect, text
from sqlalchemy.exc import OperationalError

from ctxdb import ContextStore
from ctxdb.migrate import StoreVersionError, head_revision
from ctxdb.models import metadata
from ctxdb.recon import index_repository

SHOPCART = Path(__file__).resolve().parent.parent / "fixtures" / "repos" / "shopcart"


def test_open_creates_database_at_head(store_url):
    with ContextStore.open(store_url) as store:
        assert store.revision() == head_revision()
        with store.engine.connect() as connection:
            tables = set(inspect(connection).get_table_names())
        assert {t.name for t in metadata.sorted_tables} <= tables
        assert store.view_drift() == []
        assert store.verify() == {}


def test_policy_table_seeded_with_spec_rows(store_url):
    with ContextStore.open(store_url) as store, store.engine.connect() as connection:
        rows = dict(
            connection.execute(
                text("SELECT role, rendering FROM representation_policy WHERE policy_set = 'spec'")
            ).all()
        )
    assert rows["change_target"] == "verbatim"
    assert rows["insertion_point"] == "verbatim"
    assert rows["requirement"] == "verbatim"
    assert rows["related_symbol"] == "signature"
    assert rows["direct_impact"] == "signature"
    assert rows["transitive_impact"] == "digest"
    assert rows["test_reasoned_over"] == "verbatim"
    assert rows["test_named"] == "signature"
    assert rows["config_consumer"] == "signature"
    assert rows["live_current"] == "verbatim"
    assert rows["stale"] == "omitted"


def test_refuses_database_from_newer_ctxdb(store_url):
    with ContextStore.open(store_url) as store, store.engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '9999_future'"))
    with pytest.raises(StoreVersionError, match="9999_future.*newer ctxdb"):
        ContextStore.open(store_url)


def test_view_tampering_is_reported_and_repaired_on_open(store_url):
    with ContextStore.open(store_url) as store:
        with store.engine.begin() as connection:
            connection.execute(text("DROP VIEW v_decision_overview"))
            connection.execute(text("CREATE VIEW v_decision_overview AS SELECT 1 AS decision_id"))
        drift = store.view_drift()
        assert drift and "v_decision_overview" in drift[0]
        assert "view_drift" in store.verify()
    with ContextStore.open(store_url) as store:
        assert store.view_drift() == []


def test_sqlite_connection_settings(tmp_path):
    with ContextStore.open(tmp_path / "s.db") as store, store.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 1000


def test_a_separate_recon_file_is_opened_read_only(pg_url, tmp_path):
    """A PostgreSQL store reading a recon.db file beside it never writes to it, as the
    SQLite store's ATTACH never does: a write through its recon connection fails and
    the file is left as it was, with no journal beside it."""
    recon = tmp_path / "recon.db"
    index_repository(SHOPCART, str(recon))
    before = recon.read_bytes()
    with ContextStore.open(pg_url, recon=str(recon)) as store:
        with store.engine.connect() as connection, \
                store.recon_connection(connection) as recon_connection:
            assert recon_connection.execute(text("SELECT count(*) FROM recon.symbol")).scalar()
            with pytest.raises(OperationalError, match="readonly"):
                recon_connection.execute(text("DELETE FROM recon.symbol"))
    assert recon.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["recon.db"]


def test_check_rows_are_reported(store_url):
    with ContextStore.open(store_url) as store:
        with store.engine.begin() as connection:
            connection.execute(
                text("INSERT INTO run (run_id, arm, created_at) VALUES ('r', 'ctx08', 'now')")
            )
            connection.execute(
                text(
                    "INSERT INTO decision (run_id, instance_id, seq, decision_type, task_text,"
                    " request_json, request_sha256, tokenizer, token_ceiling, token_count,"
                    " created_at) VALUES ('r', 'i', 1, 'edit', 't', '{}', 'x', 'cl100k_base',"
                    " 100, 101, 'now')"
                )
            )
        violations = store.verify()
    assert list(violations) == ["window_over_ceiling"]
    assert violations["window_over_ceiling"][0]["token_count"] == 101


def test_bad_url_is_a_clear_error():
    with pytest.raises(ValueError, match="mysql"):
        ContextStore.open("mysql://localhost/x")


def test_insert_tuples_writes_sparse_rows_exactly(store_url):
    """Rows whose usually-NULL columns are NULL go through a narrower statement; every
    row reads back as given, whichever statement wrote it."""
    from ctxdb import models

    columns = ("decision_id", "step_no", "ladder_step", "item_id", "tokens_before",
               "tokens_after", "detail")
    rows = [
        (1, 1, "fits", None, 10, 10, None),
        (1, 2, "transient", "E3", 10, 7, "masked"),
        (1, 3, "fits", None, 7, 7, None),
        (1, 4, "working_set", "E4", 7, 5, None),
    ]
    with ContextStore.open(store_url) as store, store.write_transaction() as connection:
        connection.execute(text(
            "INSERT INTO run (run_id, arm, variant, created_at) VALUES ('r', 'ctx08', 'v', 'now')"))
        connection.execute(text(
            "INSERT INTO decision (decision_id, run_id, instance_id, seq, decision_type,"
            " task_text, request_json, request_sha256, tokenizer, token_ceiling, created_at)"
            " VALUES (1, 'r', 'i', 1, 'edit', 't', '{}', 'h', 'cl100k_base', 100, 'now')"))
        models.insert_tuples(connection, models.budget_log, columns, rows,
                             sparse=("item_id", "detail"))
        back = [tuple(r) for r in connection.execute(text(
            f"SELECT {', '.join(columns)} FROM budget_log ORDER BY step_no"))]
        with pytest.raises(ValueError, match="sparse columns"):
            models.insert_tuples(connection, models.item_nearness,
                                 ("decision_id", "item_id", "shared_terms"), [(1, "E1", "")],
                                 sparse=("shared_terms",))  # has a default: not NULL if left out
    assert back == rows


def test_insert_tuples_on_sqlite_runs_on_the_driver_in_the_transaction(tmp_path):
    """Inside a SQLite transaction the rows go through the driver's executemany (no
    SQLAlchemy execution for them), in that transaction (a rollback takes them back), and
    a broken row is SQLAlchemy's IntegrityError, as before."""
    from sqlalchemy import event
    from sqlalchemy.exc import IntegrityError

    from ctxdb import models

    columns = ("decision_id", "step_no", "ladder_step", "tokens_before", "tokens_after")
    with ContextStore.open(tmp_path / "ctx08.db") as store:
        executed = []
        event.listen(store.engine, "before_cursor_execute",
                     lambda *args: executed.append(args[2]))
        with store.engine.connect() as connection:
            with connection.begin() as transaction:
                connection.execute(text(
                    "INSERT INTO run (run_id, arm, variant, created_at)"
                    " VALUES ('r', 'ctx08', 'v', 'now')"))
                connection.execute(text(
                    "INSERT INTO decision (decision_id, run_id, instance_id, seq, decision_type,"
                    " task_text, request_json, request_sha256, tokenizer, token_ceiling,"
                    " created_at) VALUES (7, 'r', 'i', 1, 'edit', 't', '{}', 'h',"
                    " 'cl100k_base', 100, 'now')"))
                models.insert_tuples(connection, models.budget_log, columns,
                                     [(7, 1, "fits", 10, 10), (7, 2, "fits", 10, 10)])
                assert connection.execute(text(
                    "SELECT COUNT(*) FROM budget_log WHERE decision_id = 7")).scalar() == 2
                with pytest.raises(IntegrityError, match="FOREIGN KEY"):
                    models.insert_tuples(connection, models.budget_log, columns,
                                         [(8, 1, "fits", 10, 10)])  # no decision 8
                transaction.rollback()
            assert not any(sql.startswith("INSERT INTO budget_log") for sql in executed)
            assert connection.execute(text("SELECT COUNT(*) FROM budget_log")).scalar() == 0


def test_insert_tuples_on_sqlite_carries_many_rows_a_statement_in_order(tmp_path):
    """Rows go SQLITE_ROWS_PER_INSERT to a statement while that many are left, the rest
    one a row: every row reads back, in the order given (the rowids follow it), and a
    row already there is kept once with keep_existing."""
    from ctxdb import models

    per = models.SQLITE_ROWS_PER_INSERT
    texts = [(f"{n:064x}", f"text {n}") for n in range(2 * per + 5)]
    with ContextStore.open(tmp_path / "ctx08.db") as store:
        with store.engine.connect() as connection, connection.begin():
            traced: list[str] = []
            driver = connection.connection.driver_connection
            driver.set_trace_callback(traced.append)
            models.insert_tuples(connection, models.evidence_text,
                                 ("content_sha256", "content"), texts)
            models.insert_tuples(connection, models.evidence_text,
                                 ("content_sha256", "content"), texts[:per + 1],
                                 keep_existing=True)
            driver.set_trace_callback(None)
            back = connection.execute(text(
                "SELECT content_sha256, content FROM evidence_text ORDER BY rowid")).all()
    assert [tuple(row) for row in back] == texts
    rows_a_statement = [statement.count("), (") + 1 for statement in traced]
    assert rows_a_statement == [per, per] + [1] * 5 + [per, 1]


def test_insert_row_on_sqlite_gives_the_rowid_through_the_driver(tmp_path):
    """One row on SQLite in a transaction: through the driver, its INTEGER PRIMARY KEY
    given back; a broken row is SQLAlchemy's IntegrityError; only the rowid is given."""
    from sqlalchemy import event
    from sqlalchemy.exc import IntegrityError

    from ctxdb import models

    with ContextStore.open(tmp_path / "ctx08.db") as store:
        executed = []
        event.listen(store.engine, "before_cursor_execute",
                     lambda *args: executed.append(args[2]))
        with store.engine.connect() as connection, connection.begin():
            models.insert_row(connection, models.run, {
                "run_id": "r", "arm": "ctx08", "variant": "v", "created_at": "now"})
            row = {"run_id": "r", "instance_id": "i", "seq": 1, "decision_type": "edit",
                   "task_text": "t", "request_json": "{}", "request_sha256": "h",
                   "tokenizer": "cl100k_base", "token_ceiling": 100, "created_at": "now"}
            first = models.insert_row(connection, models.decision, row,
                                      returning=models.decision.c.decision_id)
            second = models.insert_row(connection, models.decision, row,
                                       returning=models.decision.c.decision_id)
            assert second == first + 1
            assert connection.execute(text("SELECT MAX(decision_id) FROM decision")).scalar() \
                == second
            with pytest.raises(IntegrityError):
                models.insert_row(connection, models.decision, dict(row, decision_type="x"))
            with pytest.raises(ValueError, match="INTEGER PRIMARY KEY"):
                models.insert_row(connection, models.run, dict(
                    run_id="s", arm="ctx08", variant="v", created_at="now"),
                    returning=models.run.c.run_id)
        assert not any(sql.startswith("INSERT") for sql in executed)


def test_insert_tuples_with_one_column_left():
    """Once the sparse columns are out only one is left: each row still goes in whole."""
    from sqlalchemy import Column, Integer, MetaData, Table, Text, create_engine

    from ctxdb import models

    pair = Table("pair", MetaData(), Column("a", Integer), Column("b", Text))
    engine = create_engine("sqlite://")
    with engine.begin() as connection:
        pair.create(connection)
        models.insert_tuples(connection, pair, ("a", "b"), [(1, None), (2, "x"), (3, None)],
                             sparse=("b",))
        back = sorted(tuple(r) for r in connection.execute(text("SELECT a, b FROM pair")))
        with pytest.raises(ValueError, match="every column is sparse"):
            models.insert_tuples(connection, pair, ("b",), [(None,)], sparse=("b",))
    assert back == [(1, None), (2, "x"), (3, None)]


def test_an_in_memory_store_is_made_in_its_own_connection():
    """``sqlite://``: the schema is made on the store's one shared connection (an engine
    of the upgrade's own would make it in another, empty database), foreign keys on."""
    with ContextStore.open("sqlite://") as store:
        context = store.construct(edit_request(run_id="in-memory"))
        assert store.verify() == {}
        with store.engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert connection.exec_driver_sql(
                "SELECT COUNT(*) FROM decision").scalar() == 1
        assert context.token_count > 0
    with ContextStore.open("sqlite://") as other:  # another database: nothing of the first
        with other.engine.connect() as connection:
            assert connection.exec_driver_sql("SELECT COUNT(*) FROM decision").scalar() == 0


@pytest.mark.parametrize("url", ["sqlite:///file::memory:?cache=shared&uri=true",
                                 "sqlite:///file:shared?mode=memory&cache=shared&uri=true"])
def test_a_shared_in_memory_uri_is_refused_with_what_to_use(url):
    from ctxdb import NotAStoreError

    with pytest.raises(NotAStoreError, match="expected sqlite:// for a store in memory"):
        ContextStore.open(url)


def test_a_server_that_refuses_the_connection_is_named_without_the_password(tmp_path):
    """The library's own error, not the driver's: the URL (password hidden) and why."""
    import socket

    from ctxdb import StoreUnreachable

    with socket.socket() as probe:  # a port nothing listens on once it is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(StoreUnreachable) as refused:
        ContextStore.open(f"postgresql+psycopg://nobody:s3cret@127.0.0.1:{port}/none")
    message = str(refused.value)
    assert message.startswith(f"database postgresql+psycopg://nobody:***@127.0.0.1:{port}/none: "
                              "cannot connect: ")
    assert "Connection refused" in refused.value.reason and "s3cret" not in message
    assert isinstance(refused.value, ConnectionError)
    # a SQLite file is no server: SQLite's own error, not a server's wording
    from sqlalchemy.exc import OperationalError

    with pytest.raises(OperationalError) as unopened:
        ContextStore.open(f"sqlite:///file:{tmp_path / 'none.db'}?mode=ro&uri=true")
    assert not isinstance(unopened.value, StoreUnreachable), unopened.value


def test_a_database_the_server_lacks_is_unreachable_by_name(pg_cluster):
    from ctxdb import StoreUnreachable

    with pytest.raises(StoreUnreachable, match='database "ctxdb_never_made" does not exist'):
        ContextStore.open(pg_cluster.url("ctxdb_never_made"))


def test_foreign_keys_are_off_while_an_in_memory_store_is_upgraded(monkeypatch):
    from ctxdb import migrate
    from ctxdb.db import make_engine

    seen, upgrade = [], migrate._upgrade

    def looking(engine, target):
        with engine.connect() as connection:
            seen.append(connection.connection.driver_connection.execute(
                "PRAGMA foreign_keys").fetchone()[0])
        return upgrade(engine, target)

    monkeypatch.setattr(migrate, "_upgrade", looking)
    engine = make_engine("sqlite://")
    try:
        migrate.upgrade_in_memory(engine)
        with engine.connect() as connection:
            after = connection.connection.driver_connection.execute(
                "PRAGMA foreign_keys").fetchone()[0]
    finally:
        engine.dispose()
    assert (seen, after) == ([0], 1)


def _preview_rows_left(store: ContextStore) -> int:
    """Rows in the preview's TEMP tables of the connection the next decision gets."""
    from ctxdb.models import PREVIEW_TABLES

    with store._previews().connect() as connection:
        return sum(connection.exec_driver_sql(f"SELECT COUNT(*) FROM {copy.name}").scalar()
                   for copy in PREVIEW_TABLES.values())


def test_preview_rows_copied_then_emptied_and_dropped_with_a_failed_decision(
        tmp_path, monkeypatch):
    """A SQLite file store's decision keeps its preview's rows on its own connection for
    its write to copy: the write empties them as it commits; a decision that fails after
    its preview leaves none behind for the next one on that connection."""
    from ctxdb.pipeline import persist

    with ContextStore.open(f"sqlite:///{tmp_path / 'ctx.db'}") as store:
        first = store.construct(edit_request(run_id="copied"))
        assert _preview_rows_left(store) == 0
        with store.engine.connect() as connection:  # the copy is the decision's pool
            items = connection.exec_driver_sql(
                "SELECT item_id FROM evidence_item WHERE decision_id = ? ORDER BY rowid",
                (first.decision_id,)).scalars().all()
        assert items and items == sorted(items, key=lambda item: int(item[1:]))

        def fail(*_args, **_kwargs):
            raise RuntimeError("injected: the outcome's write")

        monkeypatch.setattr(persist, "write_outcome", fail)
        with pytest.raises(RuntimeError, match="injected"):
            store.construct(edit_request(run_id="failed"))
        monkeypatch.undo()
        assert _preview_rows_left(store) == 0
        store.construct(edit_request(run_id="after"))
        assert store.verify() == {}
        assert _preview_rows_left(store) == 0


def test_decisions_in_flight_each_hold_a_preview_connection(tmp_path):
    """A decision holds its preview connection through the ranker call: the preview pool
    must not run out under more concurrent decisions than SQLAlchemy's 5 + 10."""
    with ContextStore.open(f"sqlite:///{tmp_path / 'ctx.db'}") as store:
        engine = store._previews()
        held = [engine.connect() for _ in range(20)]  # a bounded pool blocks at the 16th
        try:
            assert all(c.exec_driver_sql("SELECT 1").scalar() == 1 for c in held)
        finally:
            for connection in held:
                connection.close()
