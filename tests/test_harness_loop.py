"""The worked harness (examples/harness_loop.py, issue 12 item 6) on the requests sdist:
six decisions through the public API, a real pytest run on the planted bug, and the
aging rules held on what its decisions recorded — on SQLite and PostgreSQL."""

from __future__ import annotations

import importlib.util
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest
from conftest import BACKENDS, fresh_pg_database
from sqlalchemy import text

from ctxdb import ContextStore

pytestmark = pytest.mark.network

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "harness_loop.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("harness_loop", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


harness_loop = _load_example()


@pytest.fixture(scope="session")
def sdist_workdir(tmp_path_factory):
    """One download of the sdist for every run of the loop in the session."""
    workdir = tmp_path_factory.mktemp("harness-sdist")
    harness_loop.fetch_sdist(workdir)
    return workdir


@pytest.fixture(scope="module", params=BACKENDS)
def loop(request, sdist_workdir, tmp_path_factory):
    """One run of the loop per backend; the tests read what its decisions recorded."""
    workdir = tmp_path_factory.mktemp(f"loop-{request.param}")
    (workdir / "pristine").mkdir()
    (workdir / "pristine" / harness_loop.SDIST_ROOT).symlink_to(
        sdist_workdir / "pristine" / harness_loop.SDIST_ROOT)
    with ExitStack() as stack:
        if request.param == "sqlite":
            store_url = str(workdir / "ctx08.db")
        else:
            store_url = stack.enter_context(
                fresh_pg_database(request.getfixturevalue("pg_cluster")))
        printed: list[str] = []
        records, _ = harness_loop.run_loop(workdir, store_url, echo=printed.append)
        store = stack.enter_context(ContextStore.open(store_url, recon=workdir / "recon.db"))
        yield records, store, printed


def _live_fates(store, decision_id) -> dict[str, tuple[str, str]]:
    """{provenance's '(kind, from decision N) of `command`' part: (verdict, driver)}."""
    with store.engine.connect() as connection:
        rows = connection.execute(text(
            "SELECT e.provenance, v.verdict, v.driver FROM v_item_verdict v"
            " JOIN evidence_item e ON e.decision_id = v.decision_id AND e.item_id = v.item_id"
            " WHERE v.decision_id = :d AND e.source = 'live' ORDER BY e.item_no"),
            {"d": decision_id}).all()
    return {provenance.split("(", 1)[1]: (verdict, driver) for provenance, verdict, driver in rows}


def _ladder(store, decision_id) -> list[tuple[str, str | None]]:
    with store.engine.connect() as connection:
        return [tuple(row) for row in connection.execute(text(
            "SELECT ladder_step, item_id FROM budget_log WHERE decision_id = :d ORDER BY step_no"),
            {"d": decision_id})]


GREP = f"tool_output, from decision 1) of `{harness_loop.GREP_COMMAND}`"
REPRODUCER = f"traceback, from decision 2) of `{harness_loop.REPRODUCER_COMMAND}`"
FIRST_RUN = f"test_output, from decision 3) of `{harness_loop.PYTEST_COMMAND}`"
SECOND_RUN = f"test_output, from decision 5) of `{harness_loop.PYTEST_COMMAND}`"
RERUN = f"tool_output, from decision 6) of `{harness_loop.REPRODUCER_COMMAND}`"


def test_the_loop_fixes_the_planted_bug_within_its_ceilings(loop):
    records, store, printed = loop
    assert [(r.seq, r.decision_type) for r in records] == [
        (1, "localize"), (2, "other"), (3, "edit"), (4, "repair"), (5, "edit"), (6, "other")]
    assert [r.tests_passed for r in records] == [None, None, False, None, True, None]
    assert all(r.token_count <= r.ceiling for r in records)
    assert records[3].ceiling == harness_loop.REPAIR_CEILING
    assert any(line.startswith("decision 6 other") for line in printed)
    windows = [store.show(r.decision_id) for r in records]
    assert "def __getitem__" in windows[2]  # the edit's target, without an item naming it
    assert "def __setitem__" in windows[4]
    # recon was re-indexed after each edit: the last window shows the fixed line
    assert "self._store[key.lower()] = (key, value)" in windows[5]


def test_failure_frames_in_events_link_their_symbols(loop):
    records, store, _ = loop
    why = store.why(records[4].decision_id,
                    "src/requests/structures.py::CaseInsensitiveDict.__delitem__")
    assert ("gate", "admitted", "obligation:traceback_frame") in [
        (row["stage"], row["action"], row["driver"]) for row in why]


def test_a_tight_ceiling_cuts_the_freshest_failure_not_the_window(loop):
    records, store, _ = loop
    repair = records[3]
    fates = _live_fates(store, repair.decision_id)
    assert fates[GREP][0] == "masked" and fates[REPRODUCER][0] == "masked"
    assert fates[FIRST_RUN][0] == "in_window"  # the freshest failure is never masked
    ladder = _ladder(store, repair.decision_id)
    masked = [item for step, item in ladder if step == "1_mask_transient"]
    assert masked == [_item_of(store, repair.decision_id, GREP),
                      _item_of(store, repair.decision_id, REPRODUCER)]  # oldest first
    steps = [step for step, _ in ladder]
    assert "2e_cut_freshest_failure" in steps and "stable_core_only" not in steps
    window = store.show(repair.decision_id)
    assert "cut to its last lines to fit the budget" in window
    assert "short test summary info" in window  # pytest's summary is among the last lines
    assert "def __getitem__" in window  # the change target stays


def test_a_stale_failure_links_nothing(loop):
    """Decision 6: the superseded pytest run's frames point into code edited since
    (its line 58 is now __iter__); none of them is a link, only the current failures'."""
    records, store, _ = loop
    with store.engine.connect() as connection:
        frames = connection.execute(text(
            "SELECT entity_key FROM decision_link WHERE decision_id = :d"
            " AND link_kind = 'traceback_frame'"), {"d": records[5].decision_id}).scalars().all()
    assert frames == []  # the first run and the reproducer's traceback are both superseded


def test_live_state_ages_across_the_loop(loop):
    records, store, _ = loop
    edit, confirm = records[4], records[5]
    # decision 5: the grep output of decision 1 is 4 decisions old: masked to its pointer,
    # its raw text one call away
    fates = _live_fates(store, edit.decision_id)
    assert fates[GREP][0] == "masked"
    assert fates[REPRODUCER] == ("in_window", "obligation:live_state")  # not re-run yet
    why = store.why(edit.decision_id, _item_of(store, edit.decision_id, GREP))
    assert "masked_by_age" in [row["action"] for row in why]
    raw = store.show(edit.decision_id, _item_of(store, edit.decision_id, GREP))
    assert raw.startswith(f"$ {harness_loop.GREP_COMMAND}\n")
    # decision 6: the newer pytest run supersedes the older; the reproducer's passing
    # re-run supersedes its traceback (the same command), whatever the kinds
    fates = _live_fates(store, confirm.decision_id)
    assert fates[FIRST_RUN][0] == "rejected" and fates[REPRODUCER][0] == "rejected"
    assert fates[FIRST_RUN][1] == fates[REPRODUCER][1] == "stale: omitted (§3.3, P6)"
    assert fates[SECOND_RUN][0] == fates[RERUN][0] == "in_window"
    assert "Traceback (most recent call last)" not in store.show(confirm.decision_id)


def _item_of(store, decision_id, provenance_part) -> str:
    with store.engine.connect() as connection:
        return connection.execute(text(
            "SELECT item_id FROM evidence_item WHERE decision_id = :d AND provenance LIKE :p"),
            {"d": decision_id, "p": f"%({provenance_part}"}).scalar_one()
