"""RequestBuilder: a request from what a harness holds — grep hits, a diff, pytest output,
a traceback, a file path — resolved against a real recon index of the fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxdb import ContextStore, EvidenceInput, RequestBuilder, RequestError
from ctxdb.recon import index_repository

SHOPCART = Path(__file__).resolve().parent.parent / "fixtures" / "repos" / "shopcart"
TOTAL = "shopcart/pricing.py::PriceCalculator.total"
TAXABLE = "shopcart/pricing.py::PriceCalculator.taxable_amount"
PATCH = """--- a/shopcart/pricing.py
+++ b/shopcart/pricing.py
@@ -64,1 +64,1 @@
-        taxable = self.taxable_amount(items, exempt_categories)
+        taxable = self.taxable_amount(items, exempt_categories) - discount
"""
TRACEBACK = f"""Traceback (most recent call last):
  File "/usr/lib/python3.11/unittest/case.py", line 57, in testPartExecutor
    yield
  File "/venv/lib/python3.11/site-packages/shopcart/pricing.py", line 72, in taxable_amount
    pass
  File "{SHOPCART.resolve()}/shopcart/pricing.py", line 65, in total
    tax = self.tax_policy.tax_for(taxable, region)
decimal.InvalidOperation: [<class 'decimal.ConversionSyntax'>]
"""
PYTEST = "shopcart/pricing.py:72: AssertionError\nFAILED tests/test_pricing.py::test_x\n"


def _builder(store=None):
    return RequestBuilder("b", "i", 1, "edit", "Coupons do not reduce the tax.",
                          "Charge tax on the discounted amount", store=store,
                          target_entity=TOTAL)


@pytest.fixture
def recon_store(store_url, tmp_path):
    recon = tmp_path / "recon.db"
    index_repository(SHOPCART, str(recon))
    with ContextStore.open(store_url, recon=str(recon)) as store:
        yield store


def test_lines_become_the_symbols_that_hold_them(recon_store):
    request = (_builder(recon_store)
               .grep_hit("shopcart/pricing.py:64:        taxable = self.taxable_amount(")
               .grep_hit("shopcart/pricing.py:63")  # the same symbol: one item
               .diff(PATCH).traceback(TRACEBACK).pytest_output(PYTEST)
               .file("shopcart/tax.py").build())
    items = [(e.source, e.kind, e.entity) for e in request.evidence]
    assert items == [
        ("04", "retrieved_hit", TOTAL),
        ("05", "changed_entity", TOTAL),
        # the traceback's frame in the indexed tree, not the standard library's, nor one of
        # an installed copy whose path merely ends like a file of the tree
        ("03", "source_code", TOTAL),
        ("03", "source_code", TAXABLE),  # pytest's frame
        ("03", "source_code", "shopcart/tax.py"),
    ]
    assert request.live.patch == PATCH
    assert request.live.tracebacks == (TRACEBACK,) and request.live.test_outputs == (PYTEST,)
    assert "grep hit shopcart/pricing.py:64 taxable" in request.evidence[0].provenance
    context = recon_store.construct(request)
    assert recon_store.verify() == {}
    assert "def total(" in context.render()


def test_events_carry_the_order_and_age_of_observations(recon_store):
    request = (_builder(recon_store).event("tool_output", "$ ls", decision_seq=1)
               .event("test_output", PYTEST).build())
    assert [(e.kind, e.decision_seq) for e in request.live.events] == [
        ("tool_output", 1), ("test_output", None)]
    # the plan node's target first (no item named it), then pytest's frame
    assert [e.entity for e in request.evidence] == [TOTAL, TAXABLE]
    assert request.evidence[0].provenance == "03: the plan node's target"


def test_the_target_enters_the_pool_and_the_window(recon_store):
    """A harness names the target; its code is in the window without an item for it."""
    context = recon_store.construct(_builder(recon_store).build())
    assert "def total(" in context.render()
    with_item = _builder(recon_store).evidence(EvidenceInput(
        source="05", kind="fault_entity", entity=TOTAL, provenance="05: localized")).build()
    assert [e.kind for e in with_item.evidence] == ["fault_entity"]  # named already: not twice
    unknown = RequestBuilder("b", "i", 1, "edit", "t", "o", store=recon_store,
                             target_entity="shopcart/pricing.py::Nowhere").build()
    assert unknown.evidence == ()  # recon has no such symbol: nothing strict would refuse


def test_frames_under_the_harness_workdir_are_frames_of_the_indexed_tree(recon_store):
    # the agent ran in /testbed; recon indexed a copy elsewhere
    traceback = TRACEBACK.replace(str(SHOPCART.resolve()), "/testbed")
    elsewhere = _builder(recon_store).traceback(traceback).build()
    assert [e.provenance for e in elsewhere.evidence] == ["03: the plan node's target"]
    builder = _builder(recon_store)
    builder.workdir = "/testbed"
    request = builder.traceback(traceback).build()
    assert [(e.entity, e.provenance) for e in request.evidence] == [
        (TOTAL, "03: frame 1 (innermost 1) of the traceback: shopcart/pricing.py:65")]


def test_entity_at_names_the_innermost_symbol_holding_a_line(recon_store, store_url):
    assert recon_store.entity_at("shopcart/pricing.py", 64) == TOTAL
    assert recon_store.entity_at("shopcart/missing.py", 3) is None
    assert recon_store.entity_at("shopcart/pricing.py", 0) is None
    with ContextStore.open(store_url) as no_recon:
        assert no_recon.entity_at("shopcart/pricing.py", 64) is None


def test_without_recon_a_line_is_its_span(store_url):
    request = _builder().grep_hit("shopcart/pricing.py:64").traceback(TRACEBACK).build()
    # an absolute frame path cannot be placed without the index: left to the live text
    # no recon to read the target from: no item for it (strict would refuse it)
    assert [e.entity for e in request.evidence] == ["shopcart/pricing.py:64-64"]


@pytest.mark.parametrize("hit", ["shopcart/pricing.py", "pricing.py:0", ":12", ""])
def test_a_grep_hit_that_is_not_path_line_is_refused(hit):
    with pytest.raises(RequestError, match="expected path:LINE or path:LINE:text"):
        _builder().grep_hit(hit)


def test_a_deletion_is_placed_where_it_was_in_the_working_tree(recon_store):
    """The index is of the working tree: a hunk that only deletes is found at the new
    side's line, not at the old side's (which the deletion shifted)."""
    patch = """--- a/shopcart/pricing.py
+++ b/shopcart/pricing.py
@@ -1,3 +1,1 @@
-import os
-import sys
 \"\"\"Turning a cart into a priced quote: subtotal, discounts, tax, total.\"\"\"
@@ -66,3 +64,2 @@
         taxable = self.taxable_amount(items, exempt_categories)
-        tax = self.tax_policy.tax_for(taxable, region)
         total = round_money(subtotal + tax - discount)
"""
    request = _builder(recon_store).diff(patch).build()
    assert [e.entity for e in request.evidence] == ["shopcart/pricing.py:1-1", TOTAL]


def test_a_hunk_header_of_absurd_line_numbers_is_refused_by_its_line():
    from ctxdb.diffs import PatchError

    patch = "--- a/x.py\n+++ b/x.py\n@@ -1 +" + "9" * 5000 + " @@\n+y\n"
    with pytest.raises(PatchError, match="patch line 3: a hunk line number of more than 10"):
        _builder().diff(patch)
