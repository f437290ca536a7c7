"""The recon index (ctxdb.recon) on the hand-written fixture repositories.

Most tests take `recon_target` (tests/conftest.py): a fresh SQLite file path or the URL
of an empty PostgreSQL database, so the same assertions run on both backends.
"""

from __future__ import annotations

import argparse
import os
import pickle
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from ctxdb.cli.recon import register
from ctxdb.recon import (
    RECON_SCHEMA_VERSION,
    ReconVersionError,
    check_recon_version,
    index_repository,
    lookup_symbol,
    open_recon,
    recon_tables,
    search_symbols,
)
from ctxdb.recon import indexer as recon_indexer
from ctxdb.recon.extract import Binding, ParsedFile, Reference, Symbol, extract_file
from ctxdb.recon.schema import GENERATION_KEY

REPOS = Path(__file__).resolve().parent.parent / "fixtures" / "repos"
SHOPCART = REPOS / "shopcart"
BROKEN = REPOS / "broken"


def rows(target, sql: str, **params) -> list[tuple]:
    with open_recon(target) as conn:
        return [tuple(r) for r in conn.execute(sa.text(sql), params)]


def edges(target, kind: str) -> set[tuple]:
    """{(src key, dst key or None, dst_name)} of one edge kind."""
    return set(
        rows(
            target,
            "SELECT s.key, d.key, e.dst_name FROM recon.edge e"
            " JOIN recon.symbol s ON s.id = e.src_symbol_id"
            " LEFT JOIN recon.symbol d ON d.id = e.dst_symbol_id WHERE e.kind = :kind",
            kind=kind,
        )
    )


def dump(target) -> dict:
    """Everything in the index, keyed by paths and entity keys (not ids), sorted."""
    files = sorted(
        (p, m, s, n, bool(t), bool(se), bool(nu))
        for p, m, s, n, t, se, nu in rows(
            target,
            "SELECT path, module, sha256, line_count, is_test, syntax_error, not_utf8"
            " FROM recon.file",
        )
    )
    symbols = sorted(
        rows(
            target,
            "SELECT s.key, s.kind, s.name, s.qualname, s.start_line, s.end_line, s.start_byte,"
            " s.end_byte, s.signature, s.doc, p.key, f.path FROM recon.symbol s"
            " JOIN recon.file f ON f.id = s.file_id"
            " LEFT JOIN recon.symbol p ON p.id = s.parent_id",
        ),
        key=repr,
    )
    all_edges = sorted(
        rows(
            target,
            "SELECT e.kind, s.key, d.key, e.dst_name, e.typed_name, e.line FROM recon.edge e"
            " JOIN recon.symbol s ON s.id = e.src_symbol_id"
            " LEFT JOIN recon.symbol d ON d.id = e.dst_symbol_id",
        ),
        key=repr,
    )
    sources = sorted(
        rows(target, "SELECT f.path, t.text FROM recon.file_source t"
                     " JOIN recon.file f ON f.id = t.file_id")
    )
    return {"files": files, "symbols": symbols, "edges": all_edges, "sources": sources}


def symbol(target, key: str) -> dict:
    with open_recon(target) as conn:
        found = lookup_symbol(conn, key)
    assert found is not None, key
    return found


@pytest.fixture
def shopcart_copy(tmp_path):
    dst = tmp_path / "shopcart"
    shutil.copytree(SHOPCART, dst)
    return dst


# --- symbols ------------------------------------------------------------------------------


def test_symbols_keys_kinds_spans_signatures(recon_target):
    stats = index_repository(SHOPCART, recon_target)
    assert stats.files_seen == stats.files_parsed == 18
    assert stats.files_flagged == 0

    total = symbol(recon_target, "shopcart/pricing.py::PriceCalculator.total")
    assert total["kind"] == "method"
    assert (total["start_line"], total["end_line"]) == (47, 68)
    lines = (SHOPCART / "shopcart/pricing.py").read_text().splitlines()
    assert total["signature"] == "\n".join(lines[46:54]).strip()  # multi-line, verbatim
    assert total["signature"].startswith("def total(\n        self,\n")
    assert total["signature"].endswith("    ) -> Quote:")
    assert total["doc"] == "Price `cart` for `region`."
    assert total["path"] == "shopcart/pricing.py"

    # a decorated class: span and signature start at the decorator
    pct = symbol(recon_target, "shopcart/discounts.py::PercentageDiscount")
    assert pct["kind"] == "class"
    assert (pct["start_line"], pct["end_line"]) == (39, 50)
    assert pct["signature"] == '@register_discount("percent")\nclass PercentageDiscount(Discount):'
    assert pct["doc"] == "A percentage of the whole subtotal."

    nested = symbol(recon_target, "shopcart/discounts.py::register_discount.decorate")
    assert (nested["kind"], nested["qualname"]) == ("function", "register_discount.decorate")
    outer = symbol(recon_target, "shopcart/discounts.py::register_discount")
    assert nested["parent_id"] == outer["id"]

    classmethod_ = symbol(recon_target, "shopcart/discounts.py::CouponRegistry.from_config")
    assert classmethod_["signature"] == (
        '@classmethod\n    def from_config(cls, coupons: dict) -> "CouponRegistry":'
    )

    module = symbol(recon_target, "shopcart/cart.py")
    assert (module["kind"], module["qualname"], module["doc"]) == (
        "module", "shopcart.cart", "The shopping cart."
    )
    assert (module["start_line"], module["end_line"]) == (1, 62)

    init = symbol(recon_target, "shopcart/cart.py::Cart.__init__")
    assert init["doc"] is None
    assert init["signature"] == (
        'def __init__(self, inventory: Inventory, currency: str = "EUR") -> None:'
    )


def test_byte_spans_index_the_stored_source(recon_target):
    index_repository(SHOPCART, recon_target)
    for key in (
        "shopcart/pricing.py::PriceCalculator.total",
        "shopcart/discounts.py::PercentageDiscount",
        "shopcart/discounts.py::Tier",
    ):
        sym = symbol(recon_target, key)
        (text,) = rows(
            recon_target,
            "SELECT t.text FROM recon.file_source t JOIN recon.file f ON f.id = t.file_id"
            " WHERE f.path = :path",
            path=sym["path"],
        )[0]
        span = text.encode("utf-8")[sym["start_byte"] : sym["end_byte"]].decode("utf-8")
        assert span.startswith(sym["signature"])
        block = "\n".join(text.splitlines()[sym["start_line"] - 1 : sym["end_line"]])
        assert block.endswith(span) and not block[: len(block) - len(span)].strip()


def test_files_and_test_detection(recon_target):
    index_repository(SHOPCART, recon_target)
    files = {p: bool(t) for p, t in rows(recon_target, "SELECT path, is_test FROM recon.file")}
    assert files["tests/conftest.py"] is True
    assert files["tests/test_pricing.py"] is True
    assert files["shopcart/pricing.py"] is False
    (count,) = rows(recon_target, "SELECT line_count FROM recon.file WHERE path = :p",
                    p="shopcart/cart.py")[0]
    assert count == 62
    modules = dict(rows(recon_target, "SELECT path, module FROM recon.file"))
    assert modules["shopcart/__init__.py"] == "shopcart"
    assert modules["tests/test_cart.py"] == "test_cart"  # tests/ is not a package


# --- edges --------------------------------------------------------------------------------


def test_call_edges(recon_target):
    index_repository(SHOPCART, recon_target)
    calls = edges(recon_target, "calls")
    total = "shopcart/pricing.py::PriceCalculator.total"
    for dst, name in [
        ("shopcart/pricing.py::PriceCalculator.discounts_for", "self.discounts_for"),
        ("shopcart/money.py::round_money", "round_money"),  # from .money import round_money
        ("shopcart/pricing.py::Quote", "Quote"),  # same module
        # self.tax_policy was assigned from a parameter annotated TaxPolicy
        ("shopcart/tax.py::TaxPolicy.tax_for", "self.tax_policy.tax_for"),
    ]:
        assert (total, dst, name) in calls
    assert (total, None, "cart.items") in calls  # untyped parameter: unresolved, name kept

    # self.x through mixin bases; super().x; a decorator is a call
    assert ("shopcart/cart.py::Cart.add", "shopcart/mixins.py::ObservableMixin.notify",
            "self.notify") in calls
    assert ("shopcart/cart.py::Cart.add", "shopcart/inventory.py::Inventory.reserve",
            "self.inventory.reserve") in calls
    assert ("shopcart/models.py::LineItem.to_dict", "shopcart/mixins.py::SerializableMixin.to_dict",
            "super().to_dict") in calls
    assert ("shopcart/discounts.py::PercentageDiscount", "shopcart/discounts.py::register_discount",
            "register_discount") in calls
    assert ("shopcart/cli.py::quote_command", "shopcart/config.py::load_config",
            "load_config") in calls
    # cls.x, and a call through a local constructed from an imported class
    assert ("shopcart/discounts.py::CouponRegistry.from_config",
            "shopcart/discounts.py::make_discount", "make_discount") in calls
    assert ("shopcart/cli.py::quote_command", "shopcart/pricing.py::PriceCalculator.total",
            "calculator.total") in calls
    # builtins are not recorded
    assert not {e for e in calls if e[2] in ("isinstance", "sorted", "dict", "min")}


def test_inherits_edges(recon_target):
    index_repository(SHOPCART, recon_target)
    inherits = {(s, d) for s, d, _ in edges(recon_target, "inherits")}
    assert ("shopcart/cart.py::Cart", "shopcart/mixins.py::SerializableMixin") in inherits
    assert ("shopcart/cart.py::Cart", "shopcart/mixins.py::ObservableMixin") in inherits
    assert ("shopcart/discounts.py::BulkTierDiscount",
            "shopcart/discounts.py::Discount") in inherits
    assert ("shopcart/errors.py::OutOfStock", "shopcart/errors.py::ShopError") in inherits
    assert ("shopcart/errors.py::ShopError", None) in inherits  # Exception: not in the repo


def test_import_edges(recon_target):
    index_repository(SHOPCART, recon_target)
    imports = edges(recon_target, "imports")
    assert ("shopcart/cart.py", "shopcart/inventory.py", "shopcart.inventory.Inventory") in imports
    assert ("shopcart/__init__.py", "shopcart/cart.py", "shopcart.cart.Cart") in imports
    assert ("tests/test_cart.py", "shopcart/errors.py", "shopcart.errors.OutOfStock") in imports
    assert ("shopcart/cart.py", None, "decimal.Decimal") in imports  # outside the repo
    (kinds,) = zip(*rows(recon_target, "SELECT DISTINCT s.kind FROM recon.edge e JOIN"
                                       " recon.symbol s ON s.id = e.src_symbol_id"
                                       " WHERE e.kind = 'imports'"), strict=True)
    assert kinds == ("module",)


def test_tests_edges(recon_target):
    index_repository(SHOPCART, recon_target)
    tests = edges(recon_target, "tests")
    failing = "tests/test_pricing.py::test_fixed_coupon_is_taken_before_tax"
    assert (failing, "shopcart/pricing.py::PriceCalculator.total", "calculator.total") in tests
    assert (failing, "shopcart/discounts.py::FixedAmountDiscount", "FixedAmountDiscount") in tests
    assert ("tests/test_cli.py::test_quote_with_fixed_coupon", "shopcart/cli.py::main",
            "main") in tests
    # every tests edge repeats a resolved calls edge of a test function
    calls = edges(recon_target, "calls")
    assert tests <= calls
    assert all(dst is not None for _, dst, _ in tests)
    assert not {e for e in tests if e[0].startswith("tests/conftest.py")}  # fixtures are not tests


def test_resolution_rules(recon_target, tmp_path):
    """Rules the fixture does not cover: re-exports, star imports, `..`, repo-wide
    unique names (and their ambiguity), nested functions."""
    repo = tmp_path / "repo"
    (repo / "pkg" / "sub").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("from .core import Engine\n")
    (repo / "pkg" / "core.py").write_text(
        "class Engine:\n    def run(self):\n        return 1\n\n\ndef helper():\n    return 2\n"
    )
    (repo / "pkg" / "sub" / "__init__.py").write_text("")
    (repo / "pkg" / "sub" / "deep.py").write_text(
        "from ..core import helper\nfrom pkg import Engine\nfrom .. import core\n\n\n"
        "def go():\n    def inner():\n        return helper()\n"
        "    core.helper()\n    return Engine().run(), inner()\n"
    )
    (repo / "star.py").write_text("from pkg.core import *\n\n\ndef use():\n    return helper()\n")
    (repo / "lonely.py").write_text("def call_unique():\n    return only_here()\n")
    (repo / "elsewhere.py").write_text("def only_here():\n    return 3\n")
    index_repository(repo, recon_target)
    calls = edges(recon_target, "calls")
    assert ("pkg/sub/deep.py::go.inner", "pkg/core.py::helper", "helper") in calls
    assert ("pkg/sub/deep.py::go", "pkg/sub/deep.py::go.inner", "inner") in calls
    assert ("pkg/sub/deep.py::go", "pkg/core.py::Engine", "Engine") in calls  # via pkg/__init__
    assert ("pkg/sub/deep.py::go", "pkg/core.py::helper", "core.helper") in calls
    assert ("star.py::use", "pkg/core.py::helper", "helper") in calls
    assert ("lonely.py::call_unique", "elsewhere.py::only_here", "only_here") in calls
    imports = edges(recon_target, "imports")
    assert ("pkg/sub/deep.py", "pkg/core.py", "pkg.core.helper") in imports
    assert ("pkg/sub/deep.py", "pkg/core.py", "pkg.core") in imports


# --- full-text search ---------------------------------------------------------------------


def test_full_text_search(recon_target):
    index_repository(SHOPCART, recon_target)
    with open_recon(recon_target) as conn:
        hits = search_symbols(conn, "CouponRegistry")
        assert hits[0]["key"] == "shopcart/discounts.py::CouponRegistry"
        assert hits[0]["kind"] == "class"
        # snake_case names are split into words; CamelCase ones are one word
        keys = [h["key"] for h in search_symbols(conn, "coupon registry")]
        assert keys[0] == "shopcart/config.py::ShopConfig.coupon_registry"
        keys = [h["key"] for h in search_symbols(conn, "taxable", limit=50)]
        assert "shopcart/pricing.py::PriceCalculator.taxable_amount" in keys  # name split on _
        assert search_symbols(conn, "zzz_nothing_like_this") == []
        assert search_symbols(conn, '"); DROP TABLE x; --') == []  # only words reach the engine
        if conn.dialect.name == "sqlite":
            raw = conn.execute(sa.text(
                "SELECT s.key FROM recon.symbol_fts JOIN recon.symbol s"
                " ON s.id = symbol_fts.rowid WHERE symbol_fts MATCH :q"
                " ORDER BY bm25(symbol_fts), s.key LIMIT 1"), {"q": "voucher"}).scalar()
        else:
            raw = conn.execute(sa.text(
                "SELECT key FROM recon.symbol WHERE fts @@ plainto_tsquery('simple', :q)"
                " ORDER BY ts_rank(fts, plainto_tsquery('simple', :q)) DESC, key LIMIT 1"),
                {"q": "voucher"}).scalar()
        assert raw == "shopcart/discounts.py::FixedAmountDiscount"  # from its doc line


# --- incremental --------------------------------------------------------------------------


def test_incremental_reparses_only_changed_files(recon_target, shopcart_copy, tmp_path):
    first = index_repository(shopcart_copy, recon_target)
    assert first.files_parsed == 18

    again = index_repository(shopcart_copy, recon_target)
    assert (again.files_parsed, again.files_removed) == (0, 0)
    assert (again.symbols, again.edges) == (first.symbols, first.edges)

    tax = shopcart_copy / "shopcart" / "tax.py"
    tax.write_text(
        tax.read_text().replace(
            '    def tax_for(self, amount: Decimal, region: str) -> Decimal:\n',
            '    def exempt(self, region: str) -> bool:\n'
            '        """True when the region charges no tax."""\n'
            '        return self.rate_for(region) == ZERO\n\n'
            '    def tax_for(self, amount: Decimal, region: str) -> Decimal:\n',
        )
    )
    changed = index_repository(shopcart_copy, recon_target)
    assert (changed.files_parsed, changed.files_removed) == (1, 0)
    assert symbol(recon_target, "shopcart/tax.py::TaxPolicy.exempt")["start_line"] == 22
    assert symbol(recon_target, "shopcart/tax.py::TaxPolicy.tax_for")["start_line"] == 26
    # an unchanged file's edge into the re-parsed file points at the new symbol
    assert ("shopcart/pricing.py::PriceCalculator.total", "shopcart/tax.py::TaxPolicy.tax_for",
            "self.tax_policy.tax_for") in edges(recon_target, "calls")

    (shopcart_copy / "shopcart" / "inventory.py").unlink()
    removed = index_repository(shopcart_copy, recon_target)
    assert (removed.files_parsed, removed.files_removed) == (0, 1)
    left = rows(recon_target, "SELECT count(*) FROM recon.symbol s JOIN recon.file f"
                              " ON f.id = s.file_id WHERE f.path = 'shopcart/inventory.py'")
    assert left == [(0,)]
    assert rows(recon_target, "SELECT count(*) FROM recon.file_source t WHERE NOT EXISTS"
                              " (SELECT 1 FROM recon.file f WHERE f.id = t.file_id)") == [(0,)]
    dangling = rows(recon_target, "SELECT count(*) FROM recon.edge e WHERE NOT EXISTS"
                                  " (SELECT 1 FROM recon.symbol s WHERE s.id = e.src_symbol_id)"
                                  " OR (e.dst_symbol_id IS NOT NULL AND NOT EXISTS"
                                  " (SELECT 1 FROM recon.symbol d WHERE d.id = e.dst_symbol_id))")
    assert dangling == [(0,)]
    # edges into the deleted file are unresolved now, their names kept
    assert ("shopcart/cart.py::Cart.add", None, "self.inventory.reserve") in edges(
        recon_target, "calls"
    )

    # the full-text index followed both changes
    with open_recon(recon_target) as conn:
        assert [h["key"] for h in search_symbols(conn, "exempt")][:1] == [
            "shopcart/tax.py::TaxPolicy.exempt"
        ]
        assert not [h for h in search_symbols(conn, "reserve") if "inventory" in h["key"]]
        if conn.dialect.name == "sqlite":  # external content: index and rows must agree
            conn.execute(sa.text(
                "INSERT INTO recon.symbol_fts(symbol_fts, rank) VALUES ('integrity-check', 1)"
            ))

    # the incremental index equals a cold build of the same tree
    cold = str(tmp_path / "cold.db")
    index_repository(shopcart_copy, cold)
    assert dump(recon_target) == dump(cold)


def test_incremental_reresolves_names_defined_elsewhere(recon_target, tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("def run():\n    return unique_helper()\n")
    (repo / "b.py").write_text("def unique_helper():\n    return 1\n")
    index_repository(repo, recon_target)
    assert ("a.py::run", "b.py::unique_helper", "unique_helper") in edges(recon_target, "calls")

    (repo / "c.py").write_text("def unique_helper():\n    return 2\n")  # now ambiguous
    assert index_repository(repo, recon_target).files_parsed == 1
    assert ("a.py::run", None, "unique_helper") in edges(recon_target, "calls")

    (repo / "c.py").unlink()  # unique again
    index_repository(repo, recon_target)
    assert ("a.py::run", "b.py::unique_helper", "unique_helper") in edges(recon_target, "calls")


def generation(target) -> str | None:
    found = rows(target, "SELECT value FROM recon.recon_meta WHERE key = :key", key=GENERATION_KEY)
    return found[0][0] if found else None


def test_generation_changes_exactly_when_the_index_does(recon_target, shopcart_copy):
    index_repository(shopcart_copy, recon_target)
    first = generation(recon_target)
    assert first
    index_repository(shopcart_copy, recon_target)  # nothing changed
    assert generation(recon_target) == first
    tax = shopcart_copy / "shopcart" / "tax.py"
    tax.write_text(tax.read_text() + "\n\ndef added():\n    return 1\n")
    index_repository(shopcart_copy, recon_target)
    changed = generation(recon_target)
    assert changed and changed != first
    index_repository(shopcart_copy, recon_target, rebuild=True)
    assert generation(recon_target) not in (None, changed)

    # an index written before generations existed gets one on its next (no-change) run
    with open_recon(recon_target) as conn:
        conn.execute(sa.text("DELETE FROM recon.recon_meta WHERE key = :key"),
                     {"key": GENERATION_KEY})
        conn.commit()
    assert generation(recon_target) is None
    assert index_repository(shopcart_copy, recon_target).files_parsed == 0
    assert generation(recon_target)


def test_rebuild_starts_over(recon_target, shopcart_copy):
    first = index_repository(shopcart_copy, recon_target)
    rebuilt = index_repository(shopcart_copy, recon_target, rebuild=True)
    assert rebuilt.files_parsed == 18
    assert (rebuilt.symbols, rebuilt.edges) == (first.symbols, first.edges)


# --- versions -----------------------------------------------------------------------------


def test_version_mismatch_says_how_to_rebuild(recon_target, shopcart_copy):
    index_repository(shopcart_copy, recon_target)
    assert check_recon_version(recon_target)["schema_version"] == str(RECON_SCHEMA_VERSION)

    engine = recon_indexer.schema.create_recon_engine(recon_target)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE recon.recon_meta SET value = :v WHERE key = 'tree_sitter'"),
                     {"v": "0.0.1"})
    with pytest.raises(ReconVersionError) as info:
        check_recon_version(recon_target)
    message = str(info.value)
    assert "ctxdb recon index PATH --recon" in message and "--rebuild" in message
    assert "tree_sitter 0.0.1" in message
    with pytest.raises(ReconVersionError):
        with open_recon(recon_target):
            pass
    with engine.connect() as conn:  # a connection on which recon is visible works too
        with pytest.raises(ReconVersionError):
            check_recon_version(conn)
    engine.dispose()
    if "://" not in str(recon_target):  # a store opened with it refuses it, naming the version
        from ctxdb import ContextStore

        with pytest.raises(ReconVersionError, match="tree_sitter 0.0.1"):
            ContextStore.open(str(shopcart_copy.parent / "s.db"), recon=recon_target)
    with pytest.raises(ReconVersionError):
        index_repository(shopcart_copy, recon_target)

    index_repository(shopcart_copy, recon_target, rebuild=True)
    check_recon_version(recon_target)


def test_missing_index_is_a_version_error(tmp_path):
    with pytest.raises(ReconVersionError, match="no recon index"):
        check_recon_version(tmp_path / "absent.db")
    assert not (tmp_path / "absent.db").exists()


def test_recon_tables_metadata():
    assert {t.name for t in recon_tables.sorted_tables} == {
        "recon_meta", "file", "file_source", "symbol", "edge", "binding", "skipped_path",
        "file_stat",
    }
    assert all(t.schema == "recon" for t in recon_tables.sorted_tables)


# --- bad input ----------------------------------------------------------------------------


def _broken_copy(tmp_path: Path) -> Path:
    repo = tmp_path / "broken"
    shutil.copytree(BROKEN, repo, symlinks=True)
    outside = tmp_path / "outside.py"
    outside.write_text("def secret():\n    pass\n")
    (repo / "pkg" / "outside_link.py").symlink_to(outside)
    (repo / "pkg" / "inside_link.py").symlink_to(repo / "pkg" / "good.py")
    # everything that must be skipped (made here too: VCS ignore rules drop such dirs)
    for skipped in (".venv/lib", "venv", "build", "dist", "pkg/__pycache__", "x.egg-info",
                    "node_modules/m", ".tox", ".nox", ".git", "myenv"):
        (repo / skipped).mkdir(parents=True, exist_ok=True)
        (repo / skipped / "skipped.py").write_text("def nope():\n    pass\n")
    (repo / "myenv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (repo / "pkg" / "nul.py").write_bytes(b"def before():\n    return '\x00'\n\n\ndef after():\n"
                                          b"    return before()\n")
    return repo


def test_bad_input_is_flagged_not_fatal(recon_target, tmp_path, capfd):
    repo = _broken_copy(tmp_path)
    stats = index_repository(repo, recon_target)
    files = {
        p: (bool(se), bool(nu))
        for p, se, nu in rows(recon_target, "SELECT path, syntax_error, not_utf8 FROM recon.file")
    }
    assert sorted(files) == [
        "pkg/__init__.py", "pkg/bad_syntax.py", "pkg/good.py", "pkg/inside_link.py",
        "pkg/latin1.py", "pkg/nul.py",
    ]
    assert files["pkg/bad_syntax.py"] == (True, False)
    assert files["pkg/latin1.py"][1] is True
    assert files["pkg/nul.py"][1] is True  # NUL bytes: replaced (PostgreSQL text refuses them)
    assert files["pkg/good.py"] == (False, False)
    assert stats.files_flagged == 3

    # the error-tolerant tree still yields the definitions around the error
    for key in ("pkg/bad_syntax.py::fine", "pkg/bad_syntax.py::StillHere.method",
                "pkg/latin1.py::plain"):
        symbol(recon_target, key)
    assert ("pkg/bad_syntax.py::StillHere.method", "pkg/bad_syntax.py::fine",
            "fine") in edges(recon_target, "calls")
    assert ("pkg/nul.py::after", "pkg/nul.py::before", "before") in edges(recon_target, "calls")
    (text,) = rows(recon_target, "SELECT t.text FROM recon.file_source t JOIN recon.file f"
                                 " ON f.id = t.file_id WHERE f.path = 'pkg/latin1.py'")[0]
    assert "caf\ufffd" in text
    assert capfd.readouterr().err == ""  # no progress bar in a pipe


def test_progress_bar_only_when_asked_or_on_a_terminal(tmp_path, capfd):
    index_repository(SHOPCART, tmp_path / "quiet.db")  # stderr is not a terminal here
    assert capfd.readouterr().err == ""
    index_repository(SHOPCART, tmp_path / "loud.db", progress=True)
    assert "recon: [" in capfd.readouterr().err


# --- determinism --------------------------------------------------------------------------


def _sqlite_dump(path) -> list[str]:
    """The whole file as SQL, but for the snapshot generation (random by design)."""
    con = sqlite3.connect(path)
    try:
        return [line for line in con.iterdump() if f"'{GENERATION_KEY}'" not in line]
    finally:
        con.close()


_INDEX_IN_SUBPROCESS = (
    "import sys; from ctxdb.recon import index_repository; "
    "index_repository(sys.argv[1], sys.argv[2])"
)


def test_deterministic_across_runs_hash_seeds_and_pool(tmp_path, monkeypatch):
    one, two = tmp_path / "one.db", tmp_path / "two.db"
    index_repository(SHOPCART, one)
    index_repository(SHOPCART, two)
    reference = _sqlite_dump(one)
    assert reference == _sqlite_dump(two)

    for seed in ("0", "4242"):
        out = tmp_path / f"seed{seed}.db"
        env = dict(os.environ, PYTHONHASHSEED=seed)
        subprocess.run([sys.executable, "-c", _INDEX_IN_SUBPROCESS, str(SHOPCART), str(out)],
                       check=True, env=env)
        assert _sqlite_dump(out) == reference, f"PYTHONHASHSEED={seed}"

    monkeypatch.setattr(recon_indexer, "POOL_MIN_FILES", 1)  # parse in worker processes
    monkeypatch.setattr(recon_indexer, "POOL_CHUNK", 1)
    monkeypatch.setattr(recon_indexer, "usable_cpu_count", lambda: 3)
    pooled = tmp_path / "pooled.db"
    index_repository(SHOPCART, pooled)
    assert _sqlite_dump(pooled) == reference


# files the pool test parses, one a chunk: each result crosses the result pipe alone
POOL_TEST_FILES = 60
# the worker-handler's turns in that run: at most this many waiting (2 seen: its start
# and the pool's close), more than this many spinning
WAITING_TURNS = 3
SPINNING_TURNS = 10
# the result-handler's pause after each result it takes: the results after it wait in
# the pipe meanwhile, as they do on a loaded machine (on a quiet one CPython's pool
# turned only 5 times over the whole run, too few to tell it apart)
RESULT_PAUSE_S = 0.005


@pytest.mark.parametrize("cpython_pool", [False, True])
def test_the_parser_pools_worker_handler_waits_for_its_workers(tmp_path, monkeypatch,
                                                               cpython_pool):
    """CPython's Pool also wakes its worker-handler thread on the result pipe, and so
    loops for as long as a result waits there; the parser pool's thread waits for its
    workers' exits and its own notices (a turn or two a run)."""
    import multiprocessing.pool

    tree = tmp_path / "tree"
    tree.mkdir()
    for number in range(POOL_TEST_FILES):
        (tree / f"module_{number}.py").write_text(
            f"def function_{number}():\n    return helper({number})\n")
    turns = []
    maintain = multiprocessing.pool.Pool._maintain_pool

    def counted(*args):
        turns.append(1)
        return maintain(*args)

    monkeypatch.setattr(multiprocessing.pool.Pool, "_maintain_pool", staticmethod(counted))
    handle_results = multiprocessing.pool.Pool._handle_results

    def slowly(outqueue, get, cache):
        def get_then_pause():
            result = get()
            time.sleep(RESULT_PAUSE_S)
            return result

        return handle_results(outqueue, get_then_pause, cache)

    monkeypatch.setattr(multiprocessing.pool.Pool, "_handle_results", staticmethod(slowly))
    monkeypatch.setattr(recon_indexer, "POOL_MIN_FILES", 1)
    monkeypatch.setattr(recon_indexer, "POOL_CHUNK", 1)
    monkeypatch.setattr(recon_indexer, "usable_cpu_count", lambda: 2)
    if cpython_pool:
        monkeypatch.setattr(recon_indexer, "_parser_pool_class",
                            lambda: multiprocessing.pool.Pool)
    stats = index_repository(tree, tmp_path / "recon.db")
    assert stats.files_parsed == POOL_TEST_FILES
    if cpython_pool:  # the check tells the two apart, results waiting in the pipe
        assert len(turns) > SPINNING_TURNS
    else:
        assert len(turns) <= WAITING_TURNS


def test_a_parsed_file_comes_back_from_a_worker_as_the_same_records():
    data = (SHOPCART / "shopcart" / "pricing.py").read_bytes()
    parsed = extract_file("shopcart/pricing.py", data, "shopcart.pricing", False)
    assert parsed.symbols and parsed.references and parsed.bindings
    back = pickle.loads(pickle.dumps(parsed, protocol=pickle.HIGHEST_PROTOCOL))
    assert back == parsed and type(back) is ParsedFile
    assert {type(s) for s in back.symbols} == {Symbol}
    assert {type(r) for r in back.references} == {Reference}
    assert {type(b) for b in back.bindings} == {Binding}
    assert back.symbols[1].key == parsed.symbols[1].key


def test_same_index_on_both_backends(recon_target, tmp_path):
    index_repository(SHOPCART, recon_target)
    reference = tmp_path / "reference.db"
    index_repository(SHOPCART, reference)
    assert dump(recon_target) == dump(str(reference))


# --- CLI ----------------------------------------------------------------------------------


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="ctxdb")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_index_show_stats(tmp_path, capsys):
    db = str(tmp_path / "recon.db")
    assert _cli("recon", "index", str(SHOPCART), "--recon", db) == 0
    out = capsys.readouterr().out
    assert "18 files (18 parsed, 0 removed, 0 flagged, 0 skipped)" in out

    assert _cli("recon", "show", "shopcart/pricing.py::PriceCalculator.total", "--recon", db) == 0
    out = capsys.readouterr().out
    assert "shopcart/pricing.py::PriceCalculator.total  (method)" in out
    assert "span       shopcart/pricing.py:47-68" in out
    assert "signature  def total(" in out
    assert "doc        Price `cart` for `region`." in out
    assert "calls     shopcart/tax.py::TaxPolicy.tax_for  [self.tax_policy.tax_for, line 65]" in out
    assert "tests     tests/test_pricing.py::test_fixed_coupon_is_taken_before_tax" in out

    assert _cli("recon", "stats", "--recon", db) == 0
    out = capsys.readouterr().out
    assert "method" in out and "inherits" in out and "tests" in out


def test_cli_unknown_entity_exits_2_naming_it(tmp_path, capsys):
    db = str(tmp_path / "recon.db")
    _cli("recon", "index", str(SHOPCART), "--recon", db)
    capsys.readouterr()
    assert _cli("recon", "show", "shopcart/cart.py::Cart.checkout", "--recon", db) == 2
    err = capsys.readouterr().err
    assert err.startswith("ctxdb: error: no entity 'shopcart/cart.py::Cart.checkout'"), err


def test_cli_recon_defaults_to_env(tmp_path, capsys, monkeypatch):
    db = tmp_path / "from-env.db"
    monkeypatch.setenv("CTXDB_RECON", str(db))
    assert _cli("recon", "index", str(SHOPCART)) == 0
    assert db.exists()
    assert _cli("recon", "stats") == 0
    assert str(db) in capsys.readouterr().out


def test_cli_missing_index_exits_2(tmp_path, capsys):
    assert _cli("recon", "stats", "--recon", str(tmp_path / "nope.db")) == 2
    assert f"ctxdb recon index PATH --recon {tmp_path / 'nope.db'}" in capsys.readouterr().err


def test_every_recon_command_has_help():
    parser = argparse.ArgumentParser(prog="ctxdb")
    sub = parser.add_subparsers()
    register(sub)
    recon = sub.choices["recon"]
    assert recon.description
    (recon_sub,) = [a for a in recon._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {a.dest: a.help for a in recon_sub._choices_actions}
    assert set(helps) == {"index", "show", "stats"}
    for name, parser_ in recon_sub.choices.items():
        assert helps[name] and parser_.description, name
        for action in parser_._actions:
            assert action.help, f"recon {name} {action.dest}"


def test_statements_in_sqlites_parameter_style_are_what_sqlalchemy_compiles():
    """The indexer puts ``sql/`` statements in the qmark style itself (SQLAlchemy's compile
    costs ~0.4 ms a statement): the same text and parameter order, for every statement
    SQLite may run, and for escaped colons and casts."""
    from sqlalchemy.dialects import sqlite

    from ctxdb.recon.writer import qmark_sql
    from ctxdb.sqlfiles import SQL_DIR

    dialect = sqlite.dialect()
    texts = [path.read_text("utf-8") for path in sorted(Path(SQL_DIR).rglob("*.sql"))
             if not path.name.endswith(".postgresql.sql")]
    assert len(texts) > 100
    texts += ["SELECT '\\:x', :a, b::int, :b, :a FROM t WHERE c = '\\:' AND d = :$e"]
    for text in texts:
        compiled = sa.text(text).compile(dialect=dialect)
        assert qmark_sql(text) == (str(compiled), tuple(compiled.positiontup)), text
