"""(a) assembly: ids, order, caps, entity keys — and nothing selected."""

from __future__ import annotations

import pytest

from ctxdb.config import load_settings
from ctxdb.entities import EntityRef, is_absolute_key, parse_entity_key, path_of_key
from ctxdb.pipeline.assemble import ResolvedEntity, assemble_pool, cap_content, cap_provenance
from ctxdb.request import DecisionRequest
from ctxdb.spec import CONTENT_MAX_BYTES, POOL_MAX_ITEMS, PROVENANCE_MAX_CHARS


def _request(**overrides):
    data = {
        "run_id": "r1",
        "instance_id": "shopcart-1",
        "seq": 1,
        "decision_type": "edit",
        "task": "Discounts must apply before tax.",
        "plan_node": {
            "node_id": "n1",
            "obligation": "Apply the discount before tax in Cart.total",
            "target_entity": "shopcart/cart.py::Cart.total",
            "acceptance_criteria": ["total() of a 100.00 cart with 10% off and 20% tax is 108.00"],
        },
        "evidence": [
            {"source": "04", "kind": "retrieved_hit", "entity": "shopcart/cart.py::Cart.total",
             "provenance": "04: bm25 7.1"},
            {"source": "03", "kind": "symbol", "content": "def tax_rate(region):",
             "provenance": "03: recon"},
        ],
        "live": {"test_outputs": ["FAILED test_total", "FAILED test_total again"],
                 "errors": ["AssertionError: 110.0 != 108.0"]},
    }
    data.update(overrides)
    return DecisionRequest.from_dict(data)


class FakeRecon:
    """Stands in for recon.db in unit tests; the SQL reader is tested against a real index."""

    def __init__(self, known):
        self.known = known
        self.asked = []

    def resolve(self, ref: EntityRef):
        self.asked.append(ref.key)
        return self.known.get(ref.key)


def test_entity_keys():
    assert parse_entity_key("src/a.py::Session.send") == EntityRef(
        "src/a.py::Session.send", "src/a.py", qualified_name="Session.send"
    )
    assert parse_entity_key("src/a.py:10-20") == EntityRef(
        "src/a.py:10-20", "src/a.py", start_line=10, end_line=20
    )
    assert parse_entity_key("src/a.py") == EntityRef("src/a.py", "src/a.py")
    for bad in ("src/a.py::", "::x", "a.py:20-10", "a.py:x-y", "a.py:0-3"):
        with pytest.raises(ValueError, match="entity"):
            parse_entity_key(bad)


def test_pool_order_ids_and_no_selection():
    recon = FakeRecon(
        {
            "shopcart/cart.py::Cart.total": ResolvedEntity(
                "shopcart/cart.py", 40, 52, "def total(self):\n    ...", "def total(self):"
            )
        }
    )
    pool = assemble_pool(_request(), recon)
    assert [(i.item_id, i.source, i.kind) for i in pool] == [
        ("E1", "07", "plan_node"),
        ("E2", "07", "acceptance_criteria"),
        ("E3", "04", "retrieved_hit"),
        ("E4", "03", "symbol"),
        ("E5", "live", "error"),
        ("E6", "live", "test_output"),
        ("E7", "live", "test_output"),
    ]
    assert all(i.in_pool for i in pool)  # assembly never selects
    hit = pool[2]
    assert hit.content.startswith("def total(self):")
    assert (hit.path, hit.start_line, hit.end_line) == ("shopcart/cart.py", 40, 52)
    assert hit.events == []  # reading from recon is recorded by the span columns
    assert [i.arrival_no for i in pool[4:]] == [1, 2, 3]


def test_unresolved_entity_is_logged_not_dropped():
    pool = assemble_pool(_request(), FakeRecon({}))
    hit = pool[2]
    assert hit.in_pool and hit.unresolved == "not in the recon index"
    assert hit.content == ("[shopcart/cart.py::Cart.total: unresolved entity, "
                           "not in the recon index]")
    assert hit.events[0].action == "entity_unresolved"
    assert hit.events[0].detail == hit.unresolved


def test_content_cap_marks_and_keeps_original():
    big = "é" * CONTENT_MAX_BYTES  # 2 bytes per character
    capped, cut = cap_content(big)
    assert cut and len(capped.encode("utf-8")) <= CONTENT_MAX_BYTES
    assert "content cut to 8192 bytes of 16384" in capped
    assert cap_content("short") == ("short", False)
    request = _request(
        evidence=[{"source": "04", "kind": "retrieved_hit", "content": big, "provenance": "x"}]
    )
    item = assemble_pool(request, None)[2]
    assert item.original_content == big and item.content == capped
    assert [e.action for e in item.events] == ["content_cut"]


def test_provenance_cap():
    long = "04: " + "q" * 300
    capped, cut = cap_provenance(long)
    assert cut and len(capped) == PROVENANCE_MAX_CHARS and capped.endswith("…")
    request = _request(
        evidence=[{"source": "04", "kind": "retrieved_hit", "content": "c", "provenance": long}]
    )
    item = assemble_pool(request, None)[2]
    assert item.provenance == capped
    assert item.events[0].action == "provenance_cut" and item.events[0].detail == long


def test_the_caps_are_not_looked_at_for_text_and_provenance_that_fit(monkeypatch):
    from ctxdb.pipeline import assemble

    looked = []
    monkeypatch.setattr(assemble, "cap_content",
                        lambda text, keep_tail=False: looked.append("content") or (text, False))
    monkeypatch.setattr(assemble, "cap_provenance",
                        lambda text: looked.append("provenance") or (text, False))
    monkeypatch.setattr(assemble, "_focus_of",
                        lambda item, request: looked.append("sites") or (None, ()))
    assemble_pool(_request(), None)
    assert looked == []
    big = "x" * (CONTENT_MAX_BYTES + 1)
    assemble_pool(_request(evidence=[{"source": "04", "kind": "retrieved_hit", "content": big,
                                      "provenance": "p" * (PROVENANCE_MAX_CHARS + 1)}]), None)
    assert looked == ["content", "provenance"]


def test_pool_cap_keeps_by_source_priority():
    evidence = [
        {"source": "03", "kind": "symbol", "content": f"def f{n}():", "provenance": "03"}
        for n in range(POOL_MAX_ITEMS)
    ] + [{"source": "06", "kind": "graph_edge", "content": "a -> b", "provenance": "06"}]
    pool = assemble_pool(_request(evidence=evidence, live={}), None)
    kept = [i for i in pool if i.in_pool]
    dropped = [i for i in pool if not i.in_pool]
    assert len(kept) == POOL_MAX_ITEMS
    assert all(i.source == "03" for i in dropped)  # 07 and 06 outrank 03
    assert dropped[-1].item_no == len(pool) - 1  # the latest 03 items go first
    assert dropped[0].events[-1].is_final


BIG_CLASS = "class Cart:\n" + "".join(
    f"    def method_{n}(self):\n        return self.lines[{n}] * {n}  # padding padding\n"
    for n in range(200)) + (
    "    def total(self):\n        return self.subtotal() * (1 - self.discount)\n")
BIG_CLASS_LINES = BIG_CLASS.count("\n")


def _big_class_request(insertion_line=None):
    node = {"node_id": "n1", "obligation": "Apply the discount in total",
            "target_entity": "shopcart/cart.py::Cart"}
    if insertion_line is not None:
        node["insertion_point"] = {"path": "shopcart/cart.py", "line": insertion_line}
    return _request(plan_node=node, live={}, evidence=[
        {"source": "05", "kind": "fault_entity", "entity": "shopcart/cart.py::Cart",
         "provenance": "05: localized"}])


def _big_class_recon():
    return FakeRecon({"shopcart/cart.py::Cart": ResolvedEntity(
        "shopcart/cart.py", 10, 10 + BIG_CLASS_LINES - 1, BIG_CLASS, "class Cart:")})


def test_code_over_the_cap_is_cut_around_the_insertion_point_not_its_head():
    edit_line = 10 + 150 * 2 + 1  # inside method_150
    item = assemble_pool(_big_class_request(edit_line), _big_class_recon())[1]
    assert len(item.content.encode("utf-8")) <= CONTENT_MAX_BYTES
    assert item.original_content == BIG_CLASS and "class Cart:" not in item.content
    assert "method_150(self)" in item.content and item.start_line < edit_line < item.end_line
    kept = item.content.split("\n[ctxdb: content cut to lines ")[0].split("\n")
    assert kept == BIG_CLASS.split("\n")[item.start_line - 10 : item.end_line - 10 + 1]
    assert f"cut to lines {item.start_line}-{item.end_line} of 10-" in item.content
    assert item.events[0].action == "content_cut"


def test_code_over_the_cap_without_an_insertion_point_keeps_the_lines_it_names():
    item = assemble_pool(_big_class_request(), _big_class_recon())[1]
    assert "def total(self):" in item.content and "self.discount" in item.content
    assert item.end_line == 10 + BIG_CLASS_LINES - 1


def test_later_cuts_count_file_lines_only_not_the_cap_mark():
    """The 8 KB cut's mark is no file line: a window cut from the cut text stays inside
    the kept lines (and its terms never pull the window toward the mark)."""
    from ctxdb.pipeline.compress import compress
    from ctxdb.pipeline.state import (
        Candidate,
        begin_attempt,
        decision_input,
        normalised_request,
    )

    request = _big_class_request()
    item = assemble_pool(request, _big_class_recon())[1]
    related = Candidate(item=item, driver="rank:admitted", role="related_symbol",
                        rendering="verbatim", text=item.content)
    # a decision whose own words are the mark's: only the mark could draw the window
    words = _request(plan_node={"node_id": "n1", "obligation": "the full original content text"})
    attempt = begin_attempt(decision_input(
        normalised_request(words, words.to_json(), "0" * 64, load_settings())), None)
    attempt.candidates = [related]
    compress(attempt)
    first, last = related.shown_lines
    assert item.start_line <= first <= last <= item.end_line
    assert "[ctxdb: content cut" not in related.text


@pytest.mark.parametrize("key", [
    "/abs/a.py", "/abs/a.py::f", "/abs/a.py:3-9", "rel/a.py", "rel/a.py::C.m", "a.py:1-2",
    "", "::f", ":1-2", "//x.py", "./a.py", "C:/win.py", "rel/odd:/x.py", "/",
])
def test_an_absolute_key_is_one_whose_path_is_absolute(key):
    import posixpath

    assert is_absolute_key(key) is posixpath.isabs(path_of_key(key))
