"""Issue 12 item 2: an entity recon cannot resolve is never a silent placeholder.

Each such item flags the context (``unresolved_entity:E4``) and warns
(``UnresolvedEntityWarning``); strict construction raises ``UnresolvedEntityError``
naming the item and the key and writes nothing. Absolute paths under the indexed root
are made relative. `ctxdb construct` finds recon where `ctxdb recon index` writes it;
commands that read never create a store.
"""

from __future__ import annotations

import sqlite3
import warnings
from pathlib import Path

import pytest
from sqlalchemy import text

from ctxdb import (
    ContextStore,
    UnresolvedEntityError,
    UnresolvedEntityWarning,
)
from ctxdb.cli import EXIT_BAD_INPUT, EXIT_OK, main
from ctxdb.recon import index_repository
from ctxdb.recon.indexer import indexed_root
from ctxdb.recon.schema import GENERATION_KEY, RECON_ENV, ROOT_KEY

SHOPCART = Path(__file__).resolve().parent.parent / "fixtures" / "repos" / "shopcart"
TARGET = "shopcart/pricing.py::PriceCalculator.total"
UNKNOWN = "shopcart/pricing.py::PriceCalculator.no_such_method"
READ_COMMANDS = (
    ["show", "1"], ["show", "1", "E1"], ["why", "1", "E1"], ["diff", "1", "2"],
    ["verify"], ["report", "runs"], ["db", "current"],
)


def _request(*entities: str, seq: int = 1) -> dict:
    """An edit request whose evidence names ``entities`` without their text (the pool
    item of the n-th entity is E<n + 1>: the plan node is E1)."""
    return {
        "run_id": "loud", "instance_id": "shopcart", "seq": seq, "decision_type": "edit",
        "task": "Tax is charged on the undiscounted amount.",
        "plan_node": {"node_id": "n1", "obligation": "Charge tax after the discount"},
        "evidence": [{"source": "05", "kind": "fault_entity", "entity": key,
                      "provenance": "05: localized"} for key in entities],
    }


def _decision_count(store) -> int:
    with store.engine.connect() as connection:
        return connection.execute(text("SELECT COUNT(*) FROM decision")).scalar_one()


@pytest.fixture
def indexed(recon_target):
    index_repository(SHOPCART, recon_target)
    return recon_target


def test_no_recon_flags_and_warns_each_placeholder(store_url):
    with ContextStore.open(store_url) as store:
        with pytest.warns(UnresolvedEntityWarning) as caught:
            context = store.construct(_request(TARGET, UNKNOWN))
        assert context.flags[:2] == ("unresolved_entity:E2", "unresolved_entity:E3")
        ours = [w for w in caught if w.category is UnresolvedEntityWarning]
        messages = [str(w.message) for w in ours]
        assert len(messages) == 2
        assert {w.filename for w in ours} == {__file__}  # points at the caller's construct
        assert f"item E2 (fault_entity) names entity {TARGET!r}: no recon index" in messages[0]
        assert f"item E3 (fault_entity) names entity {UNKNOWN!r}" in messages[1]
        with store.engine.connect() as connection:
            stored = connection.execute(text("SELECT flags FROM decision")).scalar_one()
        assert stored.split(",")[:2] == ["unresolved_entity:E2", "unresolved_entity:E3"]
        assert f"[{TARGET}: unresolved entity, no recon index was given" in context.render()
        assert store.verify() == {}


def test_unknown_key_is_flagged_and_a_known_one_is_not(store_url, indexed):
    with ContextStore.open(store_url, recon=indexed) as store:
        with pytest.warns(UnresolvedEntityWarning, match=f"{UNKNOWN!r}: not in the recon index"):
            context = store.construct(_request(TARGET, UNKNOWN))
    assert "unresolved_entity:E3" in context.flags
    assert "unresolved_entity:E2" not in context.flags  # TARGET resolved: its code is shown
    assert "    def total(\n" in context.render()


def test_resolved_request_warns_nothing(store_url, indexed):
    with ContextStore.open(store_url, recon=indexed) as store, warnings.catch_warnings():
        warnings.simplefilter("error", UnresolvedEntityWarning)
        context = store.construct(_request(TARGET))
    assert not [f for f in context.flags if f.startswith("unresolved_entity")]


@pytest.mark.parametrize("strict_where", ["construct", "open"])
def test_strict_raises_naming_item_and_key_and_writes_nothing(store_url, indexed, strict_where):
    store = ContextStore.open(store_url, recon=indexed, strict=strict_where == "open")
    with store:
        with pytest.raises(UnresolvedEntityError) as raised:
            if strict_where == "construct":
                store.construct(_request(TARGET, UNKNOWN), strict=True)
            else:
                store.construct(_request(TARGET, UNKNOWN))
        assert f"item E3 (fault_entity) names entity {UNKNOWN!r}: not in the recon index" in str(
            raised.value)
        assert [(u.item_id, u.entity_key) for u in raised.value.unresolved] == [("E3", UNKNOWN)]
        assert isinstance(raised.value, ValueError)  # a RequestError: bad input
        assert _decision_count(store) == 0
        if strict_where == "open":  # the store's default yields to the call's
            with pytest.warns(UnresolvedEntityWarning):
                store.construct(_request(TARGET, UNKNOWN), strict=False)
            assert _decision_count(store) == 1


def test_absolute_path_under_the_root_is_made_relative(store_url, indexed):
    absolute = f"{SHOPCART}/{TARGET}"
    request = _request(absolute)
    request["plan_node"]["target_entity"] = absolute
    request["plan_node"]["insertion_point"] = {"path": f"{SHOPCART}/shopcart/pricing.py",
                                               "line": 64}
    with ContextStore.open(store_url, recon=indexed) as store, warnings.catch_warnings():
        warnings.simplefilter("error", UnresolvedEntityWarning)
        context = store.construct(request)
        with store.engine.connect() as connection:
            keys = connection.execute(text(
                "SELECT entity_key FROM evidence_item WHERE entity_key IS NOT NULL"
                " ORDER BY item_no")).scalars().all()
            links = connection.execute(text(
                "SELECT DISTINCT link_kind FROM decision_link")).scalars().all()
    assert keys == [TARGET, TARGET]  # the plan node's target and the fault entity
    assert {"target_entity", "insertion_point"} <= set(links)
    assert "    def total(\n" in context.render()


def test_absolute_path_outside_the_root_is_unresolved(store_url, indexed, tmp_path):
    outside = f"{tmp_path}/elsewhere/pricing.py::PriceCalculator.total"
    with ContextStore.open(store_url, recon=indexed) as store:
        with pytest.warns(UnresolvedEntityWarning,
                          match=f"outside the indexed root {indexed_root(SHOPCART)}"):
            context = store.construct(_request(outside))
    assert "unresolved_entity:E2" in context.flags


def test_empty_index_is_named_as_the_reason(store_url, recon_target, tmp_path):
    empty = tmp_path / "no_python"
    empty.mkdir()
    index_repository(empty, recon_target)
    with ContextStore.open(store_url, recon=recon_target) as store:
        with pytest.raises(UnresolvedEntityError, match="the recon index holds no files"):
            store.construct(_request(TARGET), strict=True)
        assert _decision_count(store) == 0


def test_index_records_its_root_and_an_old_index_gets_one(tmp_path):
    recon = tmp_path / "recon.db"
    index_repository(SHOPCART, recon)

    def meta() -> dict:
        with sqlite3.connect(recon) as connection:
            return dict(connection.execute("SELECT key, value FROM recon_meta"))

    assert meta()[ROOT_KEY] == indexed_root(SHOPCART)
    with sqlite3.connect(recon) as connection:  # an index made before the root was kept
        connection.execute("DELETE FROM recon_meta WHERE key = ?", (ROOT_KEY,))
    before = meta()[GENERATION_KEY]
    index_repository(SHOPCART, recon)  # nothing changed in the files
    assert meta()[ROOT_KEY] == indexed_root(SHOPCART)
    assert meta()[GENERATION_KEY] != before  # what absolute paths mean changed


def test_absolute_path_with_no_root_recorded_says_reindex(tmp_path):
    recon = tmp_path / "recon.db"
    index_repository(SHOPCART, recon)
    with sqlite3.connect(recon) as connection:
        connection.execute("DELETE FROM recon_meta WHERE key IN (?, ?)", (ROOT_KEY, GENERATION_KEY))
    with ContextStore.open(tmp_path / "ctx08.db", recon=recon) as store:
        with pytest.raises(UnresolvedEntityError, match="records no root"):
            store.construct(_request(f"{SHOPCART}/{TARGET}"), strict=True)


# --- the command line -----------------------------------------------------------------------


@pytest.fixture
def request_file(tmp_path) -> Path:
    import json

    path = tmp_path / "request.json"
    path.write_text(json.dumps(_request(TARGET)), encoding="utf-8")
    return path


def test_a_store_file_it_may_not_write_is_named_so_not_as_a_postgresql_role(
        tmp_path, capsys, request_file):
    """SQLite's 'readonly database' is told as a file this user may not write (it was
    told as a PostgreSQL role's want of privilege: an adversarial trial)."""
    db = tmp_path / "s.db"
    assert main(["construct", str(request_file), "--db", str(db)]) == EXIT_OK
    capsys.readouterr()
    read_only = f"sqlite:///file:{db}?mode=ro&uri=true"
    assert main(["construct", str(request_file), "--db", read_only]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert ("the database refused this command: attempt to write a readonly database; "
            "expected a database file this user may write") in err and " role " not in err


def test_construct_finds_recon_where_recon_index_writes_it(tmp_path, monkeypatch, capsys,
                                                           request_file):
    monkeypatch.delenv(RECON_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["recon", "index", str(SHOPCART)]) == EXIT_OK  # writes ./recon.db
    assert main(["construct", str(request_file), "--summary", "--strict"]) == EXIT_OK
    captured = capsys.readouterr()
    assert "unresolved_entity" not in captured.out + captured.err

    elsewhere = tmp_path / "elsewhere.db"
    Path("recon.db").rename(elsewhere)
    monkeypatch.setenv(RECON_ENV, str(elsewhere))
    assert main(["construct", str(request_file), "--summary", "--strict"]) == EXIT_OK
    assert "unresolved_entity" not in capsys.readouterr().out


def test_construct_without_recon_warns_and_strict_exits_2(tmp_path, monkeypatch, capsys,
                                                          request_file):
    monkeypatch.delenv(RECON_ENV, raising=False)
    monkeypatch.chdir(tmp_path)  # no ./recon.db here
    assert main(["construct", str(request_file), "--summary"]) == EXIT_OK
    captured = capsys.readouterr()
    assert "flags: unresolved_entity:E2" in captured.out
    assert (f"ctxdb: warning: decision loud #1: item E2 (fault_entity) names entity "
            f"{TARGET!r}: no recon index was given") in captured.err

    request_file.write_text(request_file.read_text().replace('"seq": 1', '"seq": 2'))
    assert main(["construct", str(request_file), "--strict"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"item E2 (fault_entity) names entity {TARGET!r}" in err
    with sqlite3.connect(tmp_path / "ctx08.db") as connection:
        assert connection.execute("SELECT seq FROM decision").fetchall() == [(1,)]


@pytest.mark.parametrize("command", READ_COMMANDS, ids=lambda c: " ".join(c))
def test_read_commands_never_create_a_store(tmp_path, capsys, command):
    missing = tmp_path / "typo.db"
    assert main([*command, "--db", str(missing)]) == EXIT_BAD_INPUT
    assert f"store database {missing} does not exist" in capsys.readouterr().err
    assert not missing.exists()


def test_a_missing_store_given_as_a_relative_url_is_named_where_it_was_looked_for(
        tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["show", "1", "--db", "sqlite:///typo.db"]) == EXIT_BAD_INPUT
    assert f"store database {tmp_path / 'typo.db'} does not exist" in capsys.readouterr().err


def test_read_commands_leave_a_postgresql_url_to_the_server(pg_url, capsys):
    assert main(["db", "current", "--db", pg_url]) == EXIT_OK
    assert "(empty)" in capsys.readouterr().out
