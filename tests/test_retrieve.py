"""The retriever (component 04) on the fixture repository: each signal, the fusion, the
body index's incremental upkeep, determinism, PostgreSQL, the CLI and the evaluation."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ctxdb.cli import EXIT_BAD_INPUT, EXIT_OK, main
from ctxdb.recon import index_repository
from ctxdb.recon.schema import create_recon_engine
from ctxdb.retrieval import SIGNALS, retrieve
from ctxdb.retrieval.mentions import frames, mentions, query_terms
from ctxdb.retrieval.signals import body_signal
from ctxdb.store import ContextStore

REPO_ROOT = Path(__file__).resolve().parent.parent
SHOPCART = REPO_ROOT / "fixtures" / "repos" / "shopcart"
PRICING = "shopcart/pricing.py::PriceCalculator"

# One task per signal, each written so that this signal alone decides what ranks first.
BODY_TASK = "Asking for a quote in an unknown region fails with 'no tax rate for region'"
NAMES_TASK = "Coupon totals differ per cart line, since `round_money` is called on every discount"
TRACEBACK_TASK = "Quoting a cart crashes"
TRACEBACK = "shopcart/money.py:16: decimal.InvalidOperation"
TESTS_TASK = "The quote is wrong"
FAILING_TEST = "tests/test_pricing.py::test_fixed_coupon_is_taken_before_tax"
STRUCTURE_TASK = "`PriceCalculator.total` charges tax on the undiscounted amount"
MEMBERS_TASK = "`discounts_for` and `discount_total` disagree about bulk tiers"
METHODS_TASK = "`PriceCalculator` is wrong"
CALLS_TASK = "`PriceCalculator.discount_total` is off by a cent"
CONFIG_TEST = "tests/test_config.py::test_unknown_region_is_rejected"
# The signals the one-signal tasks above were written for. On a repository of a dozen
# files the members, methods and calls signals, built on every hit's score, can outvote
# the one signal a task was written for (a class whose many members match weakly).
SINGLE_SIGNAL_TASKS_SIGNALS = ("body", "names", "traceback", "tests", "structure")


@pytest.fixture(scope="module")
def shopcart_recon(tmp_path_factory) -> str:
    target = str(tmp_path_factory.mktemp("recon") / "recon.db")
    index_repository(SHOPCART, target, progress=False)
    return target


def ranked(target, task: str, *, without: str | None = None, limit: int = 10,
           signals=SIGNALS, **kwargs):
    signals = [name for name in signals if name != without]
    engine = create_recon_engine(target, read_only=True)
    try:
        with engine.connect() as connection:
            return retrieve(connection, task, limit=limit, signals=signals, **kwargs)
    finally:
        engine.dispose()


def keys(found) -> list[str]:
    return [candidate.entity_key for candidate in found.symbols]


# --- each signal: what it finds, and that the result is lost without it -----------------


def test_body_signal_finds_text_only_a_body_holds(shopcart_recon):
    # "no tax rate for region" is an error message inside TaxPolicy.rate_for's body
    found = ranked(shopcart_recon, BODY_TASK, signals=SINGLE_SIGNAL_TASKS_SIGNALS)
    assert keys(found)[0] == "shopcart/tax.py::TaxPolicy.rate_for"
    assert "body" in found.symbols[0].signals
    assert "shopcart/tax.py::TaxPolicy.rate_for" not in keys(
        ranked(shopcart_recon, BODY_TASK, without="body"))


def test_names_signal_resolves_a_backticked_method(shopcart_recon):
    found = ranked(shopcart_recon, NAMES_TASK)
    assert keys(found)[0] == "shopcart/money.py::round_money"
    assert found.symbols[0].signals["names"] == 1
    assert (keys(ranked(shopcart_recon, NAMES_TASK, without="names"))[0]
            != "shopcart/money.py::round_money")


def test_traceback_signal_maps_a_frame_to_its_symbol(shopcart_recon):
    # line 16 is in round_money; the task and the error name neither it nor money
    found = ranked(shopcart_recon, TRACEBACK_TASK, traceback=TRACEBACK)
    assert keys(found)[0] == "shopcart/money.py::round_money"
    assert found.symbols[0].signals["traceback"] == 1
    assert keys(ranked(shopcart_recon, TRACEBACK_TASK, traceback=TRACEBACK,
                       without="traceback"))[:1] != ["shopcart/money.py::round_money"]


def test_a_frame_of_an_installed_copy_on_windows_is_found(shopcart_recon):
    # a reporter's traceback from site-packages on Windows names the repository's module
    windows = ('Traceback (most recent call last):\n  File "C:\\Python310\\lib\\site-packages'
               '\\shopcart\\money.py", line 16, in round_money\ndecimal.InvalidOperation')
    found = ranked(shopcart_recon, f"{TRACEBACK_TASK}\n{windows}")
    assert keys(found)[0] == "shopcart/money.py::round_money"
    assert found.symbols[0].signals["traceback"] == 1


def test_crash_signal_counts_the_innermost_frame_outside_the_tests_again(shopcart_recon):
    # a test calls to_money (line 11), which calls round_money (line 16), where the error
    # is raised: round_money is the crash site; the test's own frame is never one
    trace = ("Traceback (most recent call last):\n"
             '  File "tests/test_pricing.py", line 10, in test_total_without_discount_adds_tax\n'
             '  File "shopcart/money.py", line 11, in to_money\n'
             '  File "shopcart/money.py", line 16, in round_money\n'
             "decimal.InvalidOperation")
    found = _retrieve_with(shopcart_recon, TRACEBACK_TASK, traceback=trace,
                           signals=["traceback", "crash"])
    by_key = {c.entity_key: c for c in found.symbols}
    assert by_key["shopcart/money.py::round_money"].signals == {"traceback": 1, "crash": 1}
    assert by_key["shopcart/money.py::to_money"].signals == {"traceback": 2}
    without = _retrieve_with(shopcart_recon, TRACEBACK_TASK, traceback=trace,
                             signals=["traceback"])
    assert (by_key["shopcart/money.py::round_money"].score
            > {c.entity_key: c.score for c in without.symbols}["shopcart/money.py::round_money"])


def test_tests_signal_follows_the_failing_test_to_its_callees(shopcart_recon):
    found = ranked(shopcart_recon, TESTS_TASK, failing_tests=[FAILING_TEST], limit=30)
    # what the test calls directly, and what PriceCalculator.total calls in turn
    called = {"shopcart/discounts.py::FixedAmountDiscount", f"{PRICING}.total",
              "shopcart/tax.py::TaxPolicy.tax_for"}
    assert called <= set(keys(found))
    assert all("tests" in found.symbols[keys(found).index(key)].signals for key in called)
    # the imports signal reads the same failing test (its file's imports): both out
    without = _retrieve_with(shopcart_recon, TESTS_TASK, failing_tests=[FAILING_TEST], limit=30,
                             signals=[n for n in SIGNALS if n not in ("tests", "imports")])
    assert "shopcart/discounts.py::FixedAmountDiscount" not in keys(without)
    assert found.files[0].path == "shopcart/pricing.py" != without.files[0].path


def test_bare_test_names_resolve_to_test_functions(shopcart_recon):
    by_id = ranked(shopcart_recon, TESTS_TASK, failing_tests=[FAILING_TEST])
    by_name = ranked(shopcart_recon, TESTS_TASK,
                     failing_tests=["test_fixed_coupon_is_taken_before_tax"])
    assert keys(by_name) == keys(by_id)


def test_structure_signal_surfaces_siblings_of_a_strong_hit(shopcart_recon):
    # names alone finds the method the task names; structure adds its file's other
    # symbols, best body match first (on this small repository the body signal itself
    # reaches every sibling, so it is left out to see what structure adds)
    with_structure = _retrieve_with(shopcart_recon, STRUCTURE_TASK, signals=["names", "structure"])
    names_only = _retrieve_with(shopcart_recon, STRUCTURE_TASK, signals=["names"])
    assert f"{PRICING}.total" in keys(names_only)
    siblings = [c for c in with_structure.symbols
                if c.entity_key.startswith(f"{PRICING}.") and c.entity_key not in keys(names_only)]
    assert len(siblings) >= 3 and all(c.signals == {"structure": c.signals["structure"]}
                                      for c in siblings)


def test_members_signal_ranks_a_class_by_its_methods(shopcart_recon):
    # the task names two methods, never their class: a method added to it is a change
    # to the class
    found = _retrieve_with(shopcart_recon, MEMBERS_TASK, signals=["names", "members"])
    assert keys(found)[0] == PRICING and found.symbols[0].signals == {"members": 1}
    assert PRICING not in keys(_retrieve_with(shopcart_recon, MEMBERS_TASK, signals=["names"]))


def test_methods_signal_opens_the_strongest_class(shopcart_recon):
    # names finds the class the task names; methods adds its methods, best body match
    # first, and nothing outside the class
    found = _retrieve_with(shopcart_recon, METHODS_TASK, signals=["names", "methods"])
    added = [c for c in found.symbols if "methods" in c.signals]
    assert added and all(c.entity_key.startswith(f"{PRICING}.") for c in added)
    assert [c.signals["methods"] for c in added] == list(range(1, len(added) + 1))
    names_only = _retrieve_with(shopcart_recon, METHODS_TASK, signals=["names"])
    assert not any(key.startswith(f"{PRICING}.") for key in keys(names_only))


def test_calls_signal_reaches_the_helper_a_named_method_calls(shopcart_recon):
    found = _retrieve_with(shopcart_recon, CALLS_TASK, signals=["names", "calls"])
    assert "shopcart/money.py::round_money" in keys(found)
    assert found.symbols[keys(found).index("shopcart/money.py::round_money")].signals == {
        "calls": 1}
    assert "shopcart/money.py::round_money" not in keys(
        _retrieve_with(shopcart_recon, CALLS_TASK, signals=["names"]))


def test_imports_signal_maps_a_test_file_to_the_modules_it_imports(shopcart_recon):
    # tests/test_config.py mirrors no module path (the code is under shopcart/): its
    # imports say what it exercises, config (imported by this test file alone) before
    # errors (imported by three)
    found = _retrieve_with(shopcart_recon, TESTS_TASK, failing_tests=[CONFIG_TEST],
                           signals=["imports"])
    assert not found.symbols  # module symbols rank files only
    assert [f.path for f in found.files] == ["shopcart/config.py", "shopcart/errors.py"]


def test_files_are_ranked_by_their_symbols(shopcart_recon):
    found = ranked(shopcart_recon, BODY_TASK)
    assert found.files[0].path == "shopcart/tax.py"
    assert [f.score for f in found.files] == sorted((f.score for f in found.files), reverse=True)


# --- reading a task -------------------------------------------------------------------------


def test_task_reading():
    assert query_terms("PriceCalculator.total_amount: the totals") == [
        "amount", "calculator", "price", "pricecalculator", "total", "total_amount", "totals"]
    found = {m.name: m.weight for m in mentions(
        "`Cart.add` breaks; see shop.money and round_money\n```\n>>> x = Quote(1)\n```")}
    assert found["Cart.add"] > found["round_money"] > found["Quote"]
    assert "shop.money" in found and "x" not in found
    assert frames('File "a/b.py", line 3, in f\n  File "a/c.py", line 9, in g\n') == [
        ("a/c.py", 9, "g"), ("a/b.py", 3, "f")]
    assert frames("pkg/mod.py:12: AssertionError") == [("pkg/mod.py", 12, None)]
    # a reporter on Windows: the frame is named with '/', as the index names files
    assert frames('File "C:\\Python310\\lib\\site-packages\\pkg\\mod.py", line 7, in f') == [
        ("C:/Python310/lib/site-packages/pkg/mod.py", 7, "f")]


def test_bad_input_names_the_argument(shopcart_recon):
    with pytest.raises(ValueError, match="signals: 'bogus'"):
        _retrieve_with(shopcart_recon, signals=["bogus"])
    with pytest.raises(ValueError, match="limit"):
        _retrieve_with(shopcart_recon, limit=0)
    with pytest.raises(TypeError, match="task"):
        _retrieve_with(shopcart_recon, task=None)


def _retrieve_with(target, task=BODY_TASK, **kwargs):
    engine = create_recon_engine(target, read_only=True)
    try:
        with engine.connect() as connection:
            return retrieve(connection, task, **kwargs)
    finally:
        engine.dispose()


# --- the body index ---------------------------------------------------------------------


def body_keys(target, text: str) -> list[str]:
    engine = create_recon_engine(target, read_only=True)
    try:
        with engine.connect() as connection:
            hits = body_signal(connection, text)
            if not hits:
                return []
            from ctxdb.retrieval.retriever import _symbols

            info = _symbols(connection, [h.symbol_id for h in hits])
            return [info[h.symbol_id].key for h in hits]
    finally:
        engine.dispose()


def test_body_index_splits_identifiers_and_keeps_them_whole(shopcart_recon):
    assert "shopcart/cart.py::Cart._line_totals" in body_keys(shopcart_recon, "line_totals")
    assert "shopcart/cart.py::Cart._line_totals" in body_keys(shopcart_recon, "totals")
    # a class's document is its own text: its methods' bodies are theirs
    assert "shopcart/tax.py::TaxPolicy" not in body_keys(shopcart_recon, "KeyError")


def _edit_and_reindex(repo: Path, target: str) -> None:
    money = repo / "shopcart" / "money.py"
    text = money.read_text()
    assert "the way the shop's receipts do" in text
    money.write_text(text.replace("the way the shop's receipts do",
                                  "as the zanzibar ledger requires"))
    index_repository(repo, target, progress=False)


def test_body_index_follows_an_edit_incrementally(recon_target, tmp_path):
    repo = tmp_path / "shopcart"
    shutil.copytree(SHOPCART, repo)
    index_repository(repo, recon_target, progress=False)
    assert body_keys(recon_target, "receipts") == ["shopcart/money.py::round_money"]
    assert body_keys(recon_target, "zanzibar") == []
    _edit_and_reindex(repo, recon_target)
    assert body_keys(recon_target, "zanzibar ledger") == ["shopcart/money.py::round_money"]
    assert body_keys(recon_target, "receipts") == []
    # the same documents as a cold build of the edited tree (order: the backends rank apart)
    cold = str(tmp_path / "cold.db")
    index_repository(repo, cold, progress=False)
    for query in ("tax rate region", "discount amount subtotal", "line_totals"):
        assert sorted(body_keys(recon_target, query)) == sorted(body_keys(cold, query))


def test_postgresql_retrieves_as_sqlite_does(pg_url, shopcart_recon):
    # BM25 and ts_rank score apart, and on this small repository the secondary signals
    # build on those scores: each task with the signals it was written for
    index_repository(SHOPCART, pg_url, progress=False)
    for task, kwargs in ((NAMES_TASK, {}), (TESTS_TASK, {"failing_tests": [FAILING_TEST]}),
                         (TRACEBACK_TASK, {"traceback": TRACEBACK}), (BODY_TASK, {})):
        on_pg = ranked(pg_url, task, signals=SINGLE_SIGNAL_TASKS_SIGNALS, **kwargs)
        on_sqlite = ranked(shopcart_recon, task, signals=SINGLE_SIGNAL_TASKS_SIGNALS, **kwargs)
        assert keys(on_pg)[0] == keys(on_sqlite)[0], task
        assert on_pg.files[0].path == on_sqlite.files[0].path, task
    for task, signals, kwargs in ((MEMBERS_TASK, ["names", "members"], {}),
                                  (CALLS_TASK, ["names", "calls"], {}),
                                  (TESTS_TASK, ["imports"], {"failing_tests": [CONFIG_TEST]})):
        on_pg = _retrieve_with(pg_url, task, signals=signals, **kwargs)
        on_sqlite = _retrieve_with(shopcart_recon, task, signals=signals, **kwargs)
        assert on_pg == on_sqlite, task
    # the CLI reads the database's recon and makes no store there (a reader)
    from pgcluster import public_tables

    from ctxdb.cli import main

    task_file = Path("task.txt")
    task_file.write_text(NAMES_TASK)
    assert main(["retrieve", str(task_file), "--db", pg_url, "--json"]) == 0
    assert public_tables(pg_url) == 0


# --- determinism, the store, the CLI ------------------------------------------------------


def test_byte_identical_across_hash_seeds(shopcart_recon, tmp_path):
    task = tmp_path / "task.txt"
    task.write_text(f"{STRUCTURE_TASK}\n{BODY_TASK}\n{NAMES_TASK}")
    outputs = set()
    for seed in ("0", "1", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(REPO_ROOT))
        result = subprocess.run(
            [sys.executable, "-m", "ctxdb.cli", "retrieve", str(task), "--recon", shopcart_recon,
             "--db", str(tmp_path / f"ctx-{seed}.db"), "--test", FAILING_TEST,
             "--traceback", str(_traceback_file(tmp_path)), "--json"],
            capture_output=True, text=True, env=env, check=True)
        outputs.add(result.stdout)
    assert len(outputs) == 1
    assert json.loads(outputs.pop())["symbols"]


def _traceback_file(tmp_path: Path) -> Path:
    path = tmp_path / "traceback.txt"
    path.write_text(TRACEBACK + "\n")
    return path


def test_store_retrieve(shopcart_recon, tmp_path):
    with ContextStore.open(str(tmp_path / "ctx.db"), recon=shopcart_recon) as store:
        found = store.retrieve(NAMES_TASK, limit=3)
    assert keys(found)[0] == "shopcart/money.py::round_money" and len(found.symbols) == 3


def test_cli_retrieve(shopcart_recon, tmp_path, capsys):
    task = tmp_path / "task.txt"
    task.write_text(NAMES_TASK)
    db = str(tmp_path / "ctx.db")
    assert main(["retrieve", str(task), "--recon", shopcart_recon, "--db", db]) == EXIT_OK
    out = capsys.readouterr().out
    assert "  shopcart/money.py::round_money  (body #" in out.splitlines()[0]
    assert "files:" in out
    assert main(["retrieve", "--recon", shopcart_recon, "--db", db]) == EXIT_BAD_INPUT
    assert "TASK" in capsys.readouterr().err
    assert not Path(db).exists()  # it only reads: the store it made to read through is not kept


def test_cli_retrieve_finds_recon_as_construct_does(shopcart_recon, tmp_path, monkeypatch,
                                                    capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CTXDB_RECON", raising=False)
    monkeypatch.delenv("CTXDB_URL", raising=False)
    (tmp_path / "task.txt").write_text(NAMES_TASK)
    assert main(["retrieve", "task.txt"]) == EXIT_BAD_INPUT
    assert "--recon: no recon index given and no ./recon.db here" in capsys.readouterr().err
    monkeypatch.setenv("CTXDB_RECON", shopcart_recon)
    assert main(["retrieve", "task.txt"]) == EXIT_OK
    assert "shopcart/money.py::round_money" in capsys.readouterr().out.splitlines()[0]
    monkeypatch.delenv("CTXDB_RECON")
    shutil.copy(shopcart_recon, tmp_path / "recon.db")
    assert main(["retrieve", "task.txt"]) == EXIT_OK
    assert "shopcart/money.py::round_money" in capsys.readouterr().out.splitlines()[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["recon.db", "task.txt"]


def test_eval_reports_every_configuration(tmp_path, capsys):
    instances = REPO_ROOT / "fixtures" / "swebench" / "instances.jsonl"
    cache = str(tmp_path / "cache")
    assert main(["retrieve", "--eval", str(instances), "--cache", cache]) == EXIT_OK
    out = capsys.readouterr().out
    for configuration in ("stand-in", "body alone", "all - structure", "all "):
        assert f"\n{configuration}" in out
    assert main(["retrieve", "--eval", str(instances), "--cache", cache, "--json"]) == EXIT_OK
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["instance_id"] for line in lines] == ["shopcart__shopcart-1",
                                                       "shopcart__shopcart-2"]
    first = lines[0]
    assert first["gold_symbols"] == [f"{PRICING}.total"]
    assert first["symbols"][0] == f"{PRICING}.total"
    assert first["figures"]["all"]["symbol_recall@5"] == 1.0


def test_eval_with_a_bad_line_exits_2_naming_it(tmp_path, capsys):
    instances = tmp_path / "instances.jsonl"
    instances.write_text("{not json\n")
    assert main(["retrieve", "--eval", str(instances), "--cache",
                 str(tmp_path / "cache")]) == EXIT_BAD_INPUT
    assert "ctxdb: error: not measured:" in capsys.readouterr().err
