"""Each stage on its own: input rows in, expected rows out."""

from __future__ import annotations

import dataclasses

from sqlalchemy import text

from ctxdb import ContextStore, DecisionRequest, load_settings
from ctxdb.entities import entity_key_of_test_id
from ctxdb.pipeline.budget import fit_budget
from ctxdb.pipeline.compress import ast_slice, compress, sliding_window
from ctxdb.pipeline.dedup import dedup, fact_key, normalize_failure
from ctxdb.pipeline.gate_inputs import Link, Nearness
from ctxdb.pipeline.order import order
from ctxdb.pipeline.rank import resolve_residue
from ctxdb.pipeline.render import render
from ctxdb.pipeline.state import (
    Attempt,
    Candidate,
    PoolItem,
    begin_attempt,
    decision_input,
    normalised_request,
)
from ctxdb.sqlfiles import load_sql
from ctxdb.tokens import get_counter

TARGET = "shop/cart.py::Cart.total"


def _attempt(candidates=(), *, target_entity=TARGET, insertion=None, ceiling=None,
             terms=("discount", "tax", "total"), rank_base_url=None, pool=(), links=(),
             nearness=None, **state) -> Attempt:
    """The one way these tests build a stage's input: an attempt as construct begins it,
    its inputs from a request naming the target, validation test and insertion point and
    from the given pool, links and nearness, with the given candidates (and any other
    attempt fields) set."""
    node = {"node_id": "n1", "obligation": " ".join(terms), "target_entity": target_entity,
            "required_validation": ["tests/test_cart.py::test_total"]}
    if insertion is not None:
        node["insertion_point"] = {"path": insertion[0], "line": insertion[1]}
    request = DecisionRequest.from_dict({
        "run_id": "r", "instance_id": "i", "seq": 1, "decision_type": "edit",
        "task": "Fix it.", "plan_node": node})
    settings = load_settings()
    if ceiling is not None:
        settings = dataclasses.replace(settings, token_ceiling=ceiling)
    if rank_base_url is not None:
        settings = dataclasses.replace(settings, rank_base_url=rank_base_url)
    normalised = normalised_request(request, request.to_json(), "0" * 64, settings)
    attempt = begin_attempt(decision_input(normalised, pool, links, nearness=nearness), None)
    attempt.candidates = list(candidates)
    for name, value in state.items():
        setattr(attempt, name, value)
    return attempt


def _item(no, kind="symbol", source="04", entity=None, content="x", **extra):
    item = PoolItem(item_no=no, source=source, kind=kind, content=content,
                    provenance=f"{source}: test", entity_key=entity, **extra)
    item.fact_key = fact_key(kind, entity, content, item.item_id)
    return item


# -- (b) the gate view ---------------------------------------------------------------

GATE_ROWS = """
INSERT INTO run (run_id, arm, created_at) VALUES ('r', 'ctx08', 'now');
INSERT INTO decision (decision_id, run_id, instance_id, seq, decision_type, task_text,
  request_json, request_sha256, tokenizer, token_ceiling, created_at)
  VALUES (7, 'r', 'i', 1, 'localize', 't', '{}', 'h', 'cl100k_base', 24000, 'now');
INSERT INTO decision_link (decision_id, link_no, link_kind, entity_key, path, start_line, end_line)
  VALUES (7, 1, 'target_entity', 'a.py::f', 'a.py', 10, 20),
         (7, 2, 'validation_test', 'tests/t.py::test_f', 'tests/t.py', 1, 5),
         (7, 3, 'validation_callee', 'a.py::helper', 'a.py', 30, 35);
INSERT INTO impact_edge (decision_id, edge_no, head_entity, tail_entity, edge_kind, depth, origin)
  VALUES (7, 1, 'a.py::f', 'b.py::caller', 'CalledBy', 1, '06'),
         (7, 2, 'a.py::f', 'c.py::far', 'CalledBy', 2, '06');
INSERT INTO evidence_text (content_sha256, content) VALUES ('h', 'c');
INSERT INTO evidence_item (decision_id, item_id, item_no, source, kind, entity_key,
  content_sha256, provenance, path, start_line, end_line, in_pool) VALUES
  (7, 'E1', 1, '07', 'plan_node', 'a.py::f', 'h', 'p', NULL, NULL, NULL, TRUE),
  (7, 'E2', 2, '04', 'retrieved_hit', 'a.py::f', 'h', 'p', 'a.py', 10, 20, TRUE),
  (7, 'E3', 3, '04', 'retrieved_hit', 'tests/t.py::test_f', 'h', 'p', NULL, NULL, NULL, TRUE),
  (7, 'E4', 4, '03', 'symbol', 'a.py::helper', 'h', 'p', NULL, NULL, NULL, TRUE),
  (7, 'E5', 5, '06', 'graph_edge', 'b.py::caller', 'h', 'p', NULL, NULL, NULL, TRUE),
  (7, 'E6', 6, '06', 'graph_edge', 'c.py::far', 'h', 'p', NULL, NULL, NULL, TRUE),
  (7, 'E7', 7, '04', 'retrieved_hit', 'a.py:32-33', 'h', 'p', 'a.py', 32, 33, TRUE),
  (7, 'E8', 8, '04', 'retrieved_hit', 'z.py::near', 'h', 'p', NULL, NULL, NULL, TRUE),
  (7, 'E9', 9, '04', 'retrieved_hit', 'z.py::far', 'h', 'p', NULL, NULL, NULL, TRUE),
  (7, 'E10', 10, 'live', 'error', NULL, 'h', 'p', NULL, NULL, NULL, TRUE),
  (7, 'E11', 11, '03', 'symbol', 'a.py::f', 'h', 'p', NULL, NULL, NULL, FALSE);
INSERT INTO item_nearness (decision_id, item_id, shared_terms, recon_hops)
  VALUES (7, 'E8', 'total tax', NULL);
"""


def test_gate_view_on_rows(store_url):
    with ContextStore.open(store_url) as store:
        with store.engine.begin() as connection:
            for statement in GATE_ROWS.strip().split(";\n"):
                connection.execute(text(statement.strip().rstrip(";")))
        with store.engine.connect() as connection:
            rows = connection.execute(
                text(load_sql("stages/gate_decision")), {"decision_id": 7}
            ).all()
    got = {r.item_id: (r.gate_verdict, r.driver) for r in rows}
    assert got == {
        "E1": ("admit", "obligation:plan_node"),
        # a localize decision has no target: target_entity and impact links do not admit
        "E2": ("reject", "no_structural_link"),
        "E3": ("admit", "obligation:validation_test"),
        "E4": ("admit", "obligation:validation_callee"),
        "E5": ("reject", "no_structural_link"),
        "E6": ("reject", "no_structural_link"),  # transitive edges never admit
        "E7": ("admit", "obligation:validation_callee"),  # a span inside a linked symbol
        "E8": ("residual", "near:shared_terms=total tax"),
        "E9": ("reject", "no_structural_link"),
        "E10": ("admit", "obligation:live_state"),
        "E11": ("out_of_pool", "pool_cap_256"),
    }


def test_gate_view_edit_decision_admits_target_and_direct_impact(store_url):
    with ContextStore.open(store_url) as store:
        with store.engine.begin() as connection:
            for statement in GATE_ROWS.strip().split(";\n"):
                connection.execute(text(statement.strip().rstrip(";")))
            connection.execute(text("UPDATE decision SET decision_type = 'edit'"))
        with store.engine.connect() as connection:
            rows = connection.execute(
                text(load_sql("stages/gate_decision")), {"decision_id": 7}
            ).all()
    got = {r.item_id: (r.gate_verdict, r.driver) for r in rows}
    assert got["E2"] == ("admit", "obligation:target_entity")
    assert got["E5"] == ("admit", "impact:CalledBy")
    assert got["E6"] == ("reject", "no_structural_link")


# -- (c) render ------------------------------------------------------------------------

SPEC_POLICY = {
    "change_target": "verbatim", "insertion_point": "verbatim", "requirement": "verbatim",
    "related_symbol": "signature", "direct_impact": "signature", "transitive_impact": "digest",
    "test_reasoned_over": "verbatim", "test_named": "signature", "config_consumer": "signature",
    "live_current": "verbatim", "stale": "omitted",
}
BODY = 'def f(a, b):\n    """Add."""\n    return a + b\n'


def test_render_roles_and_renderings():
    cases = [
        (Candidate(_item(1, "plan_node", "07"), "obligation:plan_node"), "requirement", "verbatim"),
        (Candidate(_item(2, entity=TARGET, content=BODY), "obligation:target_entity"),
         "change_target", "verbatim"),
        (Candidate(_item(3, entity="a.py::g", content=BODY), "obligation:validation_callee"),
         "related_symbol", "signature"),
        (Candidate(_item(4, entity="b.py::h", content="def h():\n    total()\n"),
                   "impact:CalledBy"),
         "direct_impact", "signature"),
        (Candidate(_item(5, entity="tests/test_cart.py::test_total", content=BODY),
                   "obligation:validation_test"), "test_reasoned_over", "verbatim"),
        (Candidate(_item(6, entity="tests/test_cart.py::test_other",
                         content="def test_other():\n    assert f(1, 2) == 3\n"),
                   "obligation:named_in_criteria"), "test_named", "signature"),
        (Candidate(_item(7, "graph_edge", "06", content="3 callers"), "impact:transitive_digest"),
         "transitive_impact", "digest"),
        (Candidate(_item(8, "test_output", "live", arrival_no=1), "obligation:live_state"),
         "stale", "omitted"),
        (Candidate(_item(9, "test_output", "live", arrival_no=2), "obligation:live_state"),
         "live_current", "verbatim"),
        (Candidate(_item(10, "config", "06", entity="c.toml"), "impact:ConfigConsumer"),
         "config_consumer", "signature"),
    ]
    attempt = _attempt([c for c, _, _ in cases])
    render(attempt, SPEC_POLICY)
    kept, audit = attempt.candidates, attempt.audit
    for candidate, role, rendering in cases:
        assert (candidate.item_id, candidate.role, candidate.rendering) == (
            candidate.item_id, role, rendering)
    assert [c.item_id for c in kept] == [f"E{n}" for n in (1, 2, 3, 4, 5, 6, 7, 9, 10)]
    assert cases[2][0].text == "def f(a, b):"
    assert cases[3][0].text == "def h():\n    L2: total()"
    assert cases[5][0].text == "def test_other():\n    # expects: assert f(1, 2) == 3"
    assert audit.verdict("E8") == "rejected"


def test_render_table_miss_defaults_to_signature_and_is_logged():
    policy = {k: v for k, v in SPEC_POLICY.items() if k != "direct_impact"}
    candidate = Candidate(_item(1, entity="b.py::h", content=BODY), "impact:CalledBy")
    attempt = _attempt([candidate], target_entity=None)
    render(attempt, policy)
    assert candidate.rendering == "signature"
    assert [(e.action, e.driver) for e in attempt.audit.events][0] == (
        "table_miss", "role direct_impact not in policy")


def test_render_expansion_only_for_the_obligation_target():
    related = Candidate(_item(1, entity="a.py::g", content=BODY), "obligation:named_in_criteria")
    render(_attempt([related], target_entity="a.py::g"), SPEC_POLICY)
    assert related.role == "change_target" and related.rendering == "verbatim"


# -- (d) compress ----------------------------------------------------------------------

BIG_FUNCTION = "def total(self):\n" + "".join(
    f"    step_{n} = compute_{n}(self.lines)\n" for n in range(60)
) + "    if self.discount:\n        taxed = taxed * (1 - self.discount)\n    return taxed\n"


def test_ast_slice_around_the_edit():
    edit_line = 100 + BIG_FUNCTION.splitlines().index("        taxed = taxed * (1 - self.discount)")
    span = ast_slice(BIG_FUNCTION, 100, edit_line, 1024)
    assert span == (edit_line - 1, edit_line)  # the enclosing `if` statement


def test_ast_slice_holds_an_edit_site_that_spans_lines_or_gives_up():
    lines = BIG_FUNCTION.splitlines()
    if_line = 100 + lines.index("    if self.discount:")
    return_line = 100 + lines.index("    return taxed")
    # the `if` alone does not reach the return: the slice must hold both, and the
    # smallest statement that does is the whole function, over the 1 KB budget
    assert ast_slice(BIG_FUNCTION, 100, if_line, 1024, return_line) is None
    assert ast_slice(BIG_FUNCTION, 100, if_line, 1024, if_line + 1) == (if_line, if_line + 1)


def test_the_8kb_cut_keeps_the_whole_edit_site_first():
    from ctxdb.pipeline.assemble import _cut_code_around

    body = "\n".join(f"    value_{n} = compute_{n}(items)  # {'x' * 60}" for n in range(400))
    site = (1000 + 150, 1000 + 230)  # 81 lines: about 7 KB, just under the cap
    text, first, last = _cut_code_around(body, 1000, site, frozenset())
    assert first <= site[0] and last >= site[1]
    # from its first line alone it would have kept lines on both sides evenly
    text, first, last = _cut_code_around(body, 1000, (site[0], site[0]), frozenset())
    assert last < site[1]


def test_sliding_window_prefers_the_decision_terms():
    lines = BIG_FUNCTION.split("\n")
    start, end = sliding_window(BIG_FUNCTION, frozenset({"discount", "taxed"}), 120)
    # Every window holding the `taxed = … discount` line scores 2; the earliest of them
    # starts at step_59 and runs to `return taxed` (37 + 22 + 44 + 17 = 120 bytes).
    assert (start, end) == (lines.index("    step_59 = compute_59(self.lines)"),
                            lines.index("    return taxed"))


def test_sliding_window_takes_the_earliest_of_equal_windows():
    text = "alpha discount\nfiller one\nfiller two\nbeta discount\nfiller three"
    assert sliding_window(text, frozenset({"discount"}), 15) == (0, 0)
    assert sliding_window(text, frozenset({"beta"}), 15) == (3, 3)
    # a single line over the budget is taken alone
    assert sliding_window("x" * 50 + " discount\nend", frozenset({"discount"}), 10) == (0, 0)


def test_compress_flags_what_cannot_shrink_and_slices_what_can():
    target = Candidate(_item(1, entity=TARGET, content=BIG_FUNCTION, path="shop/cart.py",
                             start_line=100, end_line=163), "obligation:target_entity",
                       role="change_target", rendering="verbatim", text=BIG_FUNCTION)
    whole = Candidate(_item(2, entity=TARGET, content=BIG_FUNCTION, path="shop/cart.py",
                            start_line=100, end_line=163), "obligation:target_entity",
                      role="change_target", rendering="verbatim", text=BIG_FUNCTION)
    related = Candidate(_item(3, entity="x.py::big", content=BIG_FUNCTION, start_line=1),
                        "obligation:named_in_criteria", role="related_symbol",
                        rendering="verbatim", text=BIG_FUNCTION)
    at_the_edit = _attempt([target, related], insertion=("shop/cart.py", 162))
    no_insertion_point = _attempt([whole])
    compress(at_the_edit)
    compress(no_insertion_point)
    assert "AST slice: lines 161-162" in target.text and len(target.text.encode()) < 1024
    # the label names the lines the body shows, not the symbol's whole span
    assert " · L161-162 · " in target.header() and " · L100-163 · " in whole.header()
    first, last = related.shown_lines
    assert f" · L{first}-{last} · " in related.header() and related.text.startswith(
        f"# … lines {first}-{last} ")
    assert whole.over_compress_target and whole.text == BIG_FUNCTION
    assert related.text.startswith("# … lines ") and len(related.text.encode()) < 1100
    assert [e.action for e in at_the_edit.audit.events] == ["ast_slice", "sliding_window"]
    assert [e.action for e in no_insertion_point.audit.events] == ["flagged_over_1kb"]


# -- (e) dedup ----------------------------------------------------------------------------


def test_fact_keys():
    assert fact_key("retrieved_hit", TARGET, "x", "E1") == fact_key("symbol", TARGET, "y", "E2")
    failure_a = "Traceback at 0x7f3a: boom in 0.12s"
    failure_b = "Traceback   at 0x99ff: boom in 3.40s"
    assert normalize_failure(failure_a) == normalize_failure(failure_b)
    assert (fact_key("test_output", None, failure_a, "E1")
            == fact_key("error", None, failure_b, "E2"))
    assert fact_key("plan_node", None, "o", "E1") != fact_key("plan_node", None, "o", "E2")


def test_dedup_keeps_the_strongest_role_and_drops_contained_filler():
    target = Candidate(_item(3, entity=TARGET, path="shop/cart.py", start_line=10, end_line=30),
                       "x", role="change_target", rendering="verbatim", text="x")
    sliced = Candidate(_item(6, entity="shop/cart.py::Cart", path="shop/cart.py", start_line=1,
                             end_line=90, content="class Cart: ..."),
                       "x", role="change_target", rendering="verbatim", text="# … AST slice")
    inside_sliced = Candidate(_item(7, entity="shop/cart.py::Cart.add", path="shop/cart.py",
                                    start_line=40, end_line=45), "x", role="related_symbol",
                              rendering="signature")
    related = Candidate(_item(2, entity=TARGET), "x", role="related_symbol", rendering="signature")
    inner = Candidate(_item(4, entity="shop/cart.py::Cart.total.helper", path="shop/cart.py",
                            start_line=12, end_line=14), "x", role="related_symbol",
                      rendering="signature")
    other = Candidate(_item(5, entity="shop/util.py::f"), "x", role="related_symbol",
                      rendering="signature")
    attempt = _attempt([related, target, inner, other, sliced, inside_sliced])
    dedup(attempt)
    kept, audit = attempt.candidates, attempt.audit
    # E7 sits inside E6, but E6 shows only a slice: E7 stays
    assert [c.item_id for c in kept] == ["E3", "E5", "E6", "E7"]
    assert target.also_stands_for == ["E2"]
    assert audit.verdict("E2") == "deduped" and audit.verdict("E4") == "deduped"


# -- (f) order ------------------------------------------------------------------------------


def test_order_pins_critical_items_to_the_edges():
    items = [
        Candidate(_item(1, "plan_node", "07"), "x", role="requirement"),
        Candidate(_item(2, entity="a.py::g", path="a.py"), "x", role="related_symbol"),
        Candidate(_item(3, entity=TARGET, path="shop/cart.py"), "x", role="change_target"),
        Candidate(_item(4, "test_output", "live", arrival_no=2), "x", role="live_current"),
        Candidate(_item(5, "error", "live", arrival_no=1), "x", role="live_current"),
        Candidate(_item(6, entity="shop/cart.py::Cart.add", path="shop/cart.py"), "x",
                  role="insertion_point"),
        Candidate(_item(7, "tool_output", "live", arrival_no=3), "x", role="live_current"),
        Candidate(_item(8, "graph_edge", "06"), "x", role="transitive_impact"),
    ]
    attempt = _attempt(items)
    order(attempt)
    placed = attempt.candidates
    assert [(c.item_id, c.block) for c in placed] == [
        ("E1", "front"), ("E3", "front"), ("E6", "front"),  # insertion point next to its target
        ("E7", "middle"), ("E2", "middle"), ("E8", "middle"),  # strongest role first
        ("E5", "back"), ("E4", "back"),  # the freshest failure output is last
    ]
    assert all(c.block != "middle" for c in placed if c.edge_critical)


# -- (g) budget ---------------------------------------------------------------------------------


def test_budget_ladder_order_and_exact_fit():
    count = get_counter("cl100k_base").count
    big = "\n".join(f"log line {n} with words" for n in range(300))
    window = [
        Candidate(_item(1, "plan_node", "07", content="Fix total"), "x", role="requirement",
                  rendering="verbatim", text="Fix total", tier="stable_core", block="front",
                  edge_critical=True),
        Candidate(_item(2, "tool_output", "live", content=big, arrival_no=1), "x",
                  role="live_current", rendering="verbatim", text=big, tier="transient"),
        Candidate(_item(3, entity="a.py::g", content=BODY), "x", role="related_symbol",
                  rendering="verbatim", text=BODY, tier="working_set"),
        Candidate(_item(4, "test_output", "live", content="FAILED x", arrival_no=2), "x",
                  role="live_current", rendering="verbatim", text="FAILED x", tier="transient",
                  block="back", edge_critical=True),
    ]
    attempt = _attempt(window, ceiling=256)
    fit_budget(attempt, lambda texts: [count(t) for t in texts])
    fitted, exact = attempt.candidates, attempt.token_count
    assert exact <= 256
    assert [s.ladder_step for s in attempt.budget_steps] == ["measured", "1_mask_transient"]
    assert fitted[1].masked and fitted[3].text == "FAILED x"  # the freshest failure is kept


def test_test_ids_to_entity_keys():
    assert entity_key_of_test_id("tests/t.py::TestA::test_b[1-2]") == "tests/t.py::TestA.test_b"
    assert entity_key_of_test_id("tests/t.py::test_c") == "tests/t.py::test_c"


# -- §4 folding a residue over 32 -------------------------------------------------------


def test_fold_admits_the_recon_neighbourhood_and_the_lexically_as_near_of_their_bucket():
    from ctxdb.pipeline.rank import FOLD_MIN_NEAR_SCORE

    pool = [PoolItem(n, "04", "retrieved_hit", f"def f{n}(): ...", "04", f"a.py::f{n}")
            for n in range(1, 6)]
    links = [Link("target_entity", "a.py::target", "a.py", 1, 9),
             Link("validation_callee", "a.py::helper", "a.py", 20, 29)]
    nearness = {
        "E1": Nearness(["total"], 1, 2),  # a direct neighbour of link 2: folded in
        "E2": Nearness(["total"], 2, 1),  # two hops from link 1: folded in
        # shared terms only, as near as a recon edge: folded in
        "E3": Nearness(["total", "tax"], None, 1, FOLD_MIN_NEAR_SCORE),
        # shared terms only, less near: folded away
        "E4": Nearness(["total", "tax"], None, 1, FOLD_MIN_NEAR_SCORE - 0.0001),
        "E5": Nearness(["total"], None, None, 2.0),  # no link at all: no bucket
    }
    residue = [f"E{n}" for n in range(1, 34)]  # over 32: folded, never ranked
    pool += [_item(n, "retrieved_hit", entity=f"a.py::g{n}") for n in range(6, 34)]
    nearness.update({f"E{n}": Nearness(["total"], None, None) for n in range(6, 34)})
    attempt = _attempt(pool=pool, links=links, nearness=nearness, residue=residue)
    resolve_residue(attempt)
    assert [(c.item_id, c.driver) for c in attempt.candidates] == [
        ("E1", "fold:validation_callee"), ("E2", "fold:target_entity"),
        ("E3", "fold:target_entity")]
    events = {e.item_id: (e.action, e.driver, e.detail, e.is_final)
              for e in attempt.audit.events}
    assert events["E1"] == ("folded_in", "residue > 32: link 2 (validation_callee a.py::helper)",
                            None, False)
    # the driver is one text per bucket and reason (verdicts group by it), the item's
    # own score is the detail
    assert events["E3"] == ("folded_in", "residue > 32: link 1 (target_entity a.py::target),"
                                         " as near as a recon edge", "near score 1 >= 1", False)
    assert events["E4"] == ("folded", "residue > 32: link 1 (target_entity a.py::target),"
                                      " not within 2 recon edges", "near score 0.9999 < 1", True)
    assert events["E5"] == ("rejected", "residue > 32: no obligation bucket to fold into", None,
                            True)


def test_folding_fills_only_the_room_the_gate_left_under_the_admitted_cap():
    """60 symbols and the live traceback admitted by the gate, 40 residue hits each as
    near as a recon edge: the fold takes the 3 places left, and the cap never reaches
    the traceback (live items come last in source priority)."""
    from ctxdb.pipeline.gate import cap_admitted
    from ctxdb.pipeline.rank import FOLD_MIN_NEAR_SCORE
    from ctxdb.spec import ADMITTED_MAX, SOURCE_PRIORITY

    admitted = [_item(n, "symbol", "06", entity=f"a.py::dep{n}") for n in range(1, 61)]
    traceback = _item(61, "traceback", "live", content="Traceback ...", arrival_no=1)
    hits = [_item(n, "retrieved_hit", "04", entity=f"b.py::hit{n}") for n in range(62, 102)]
    candidates = [Candidate(item=i, driver="obligation:obligation_dependency")
                  for i in admitted] + [Candidate(item=traceback, driver="obligation:live")]
    attempt = _attempt(
        candidates, pool=[*admitted, traceback, *hits],
        links=[Link("target_entity", "a.py::target", "a.py", 1, 9)],
        residue=[h.item_id for h in hits],
        nearness={h.item_id: Nearness(["tax"], None, 1, FOLD_MIN_NEAR_SCORE) for h in hits})
    attempt.priority = {i.item_id: SOURCE_PRIORITY[i.source]
                         for i in [*admitted, traceback, *hits]}
    resolve_residue(attempt)  # 40 > 32: folded
    cap_admitted(attempt)
    kept = [c.item_id for c in attempt.candidates]
    assert len(kept) == ADMITTED_MAX and traceback.item_id in kept
    assert kept[-3:] == ["E62", "E63", "E64"]  # the fold's first three, in residue order
    events = {e.item_id: e for e in attempt.audit.events if e.is_final}
    assert events["E65"].action == "folded"
    assert events["E65"].driver.endswith(f"no room left under the {ADMITTED_MAX}-item cap")


def _folded_file(room: int, members: int) -> Attempt:
    """An attempt whose gate left `room` places under the admitted cap, its residue one
    file: an outline (E100) standing for `members` symbols (E101…), each a direct recon
    neighbour of the target's link; the fold rule run."""
    from ctxdb.spec import ADMITTED_MAX

    admitted = [_item(n, "symbol", "06", entity=f"a.py::dep{n}")
                for n in range(1, ADMITTED_MAX - room + 1)]
    outline = _item(100, "symbol", "03", entity="b.py", content="def f(): ...", path="b.py")
    hits = [_item(100 + k, "retrieved_hit", entity=f"b.py::f{k}", path="b.py")
            for k in range(1, members + 1)]
    attempt = _attempt([Candidate(item=i, driver="obligation:obligation_dependency")
                        for i in admitted],
                       pool=[*admitted, outline, *hits],
                       links=[Link("target_entity", "a.py::target", "a.py", 1, 9)],
                       residue=[outline.item_id],
                       outline_members={outline.item_id: [h.item_id for h in hits]},
                       nearness={i.item_id: Nearness([], 1, 1, 1.0) for i in [outline, *hits]})
    resolve_residue(attempt)
    return attempt


def _final_events(attempt):
    finals = [e for e in attempt.audit.events if e.is_final]
    assert len({e.item_id for e in finals}) == len(finals)  # one final verdict each
    return {e.item_id: e for e in finals}


def test_when_room_runs_out_inside_a_file_each_item_still_has_one_verdict():
    from ctxdb.spec import ADMITTED_MAX

    attempt = _folded_file(room=2, members=3)
    assert [c.item_id for c in attempt.candidates[ADMITTED_MAX - 2:]] == ["E101", "E102"]
    final = _final_events(attempt)
    assert final["E103"].action == "folded" and final["E100"].action == "folded"


def test_an_outline_whose_code_had_no_room_says_so():
    from ctxdb.spec import ADMITTED_MAX

    attempt = _folded_file(room=0, members=2)
    assert _final_events(attempt)["E100"].driver == (
        f"no ranker: its file's code in reach; no room left under the {ADMITTED_MAX}-item cap")


def test_a_lone_module_outline_is_folded_in_by_recon_edges_only():
    """A residual module outline with no residual symbols of its own is not folded in on
    shared terms: its whole skeleton would come in for them."""
    outline = _item(1, "symbol", "03", entity="b.py", content="class B: ...", path="b.py")
    residue = [outline.item_id] + [f"E{n}" for n in range(2, 35)]  # over 32: folded
    pool = [outline] + [_item(n, "retrieved_hit", entity=f"c.py::g{n}") for n in range(2, 35)]
    nearness = {f"E{n}": Nearness(["total"], None, None) for n in range(2, 35)}
    nearness["E1"] = Nearness(["tax"], None, 1, 5.0)
    attempt = _attempt(pool=pool, links=[Link("target_entity", "a.py::target", "a.py", 1, 9)],
                       nearness=nearness, residue=residue)
    resolve_residue(attempt)
    assert attempt.candidates == []
    final = {e.item_id: e for e in attempt.audit.events if e.is_final}
    assert final["E1"].action == "folded"
    assert final["E1"].detail == "a module outline: folded in by recon edges only"


def test_the_renderer_and_the_indexer_agree_on_what_a_test_is():
    """One rule (ctxdb.entities.is_test_path): the renderer once missed conftest.py and
    ``test/`` directories, and took ``mytests/`` for a test directory."""
    from ctxdb.entities import is_test_entity, is_test_path
    from ctxdb.pipeline.render import derive_role

    cases = {"tests/conftest.py": True, "conftest.py": True, "pkg/test/helpers.py": True,
             "pkg/tests/unit/util.py": True, "pkg/test_util.py": True, "pkg/util_test.py": True,
             "mytests/helpers.py": False, "pkg/testing.py": False, "pkg/util.py": False}
    for path, expected in cases.items():
        assert is_test_path(path) is expected, path
        assert is_test_entity(f"{path}::helper") is expected, path
        candidate = Candidate(item=_item(1, entity=f"{path}::helper"), driver="rank:admitted")
        role = derive_role(candidate, _attempt().inputs, frozenset())
        assert role == ("test_named" if expected else "related_symbol"), path


def test_nearness_names_the_lowest_numbered_link_of_its_anchor():
    """Several links can share a symbol (the target is also named in the criteria): the
    bucket is the first of them, as the gate view takes the first link that reaches."""
    from types import SimpleNamespace

    from ctxdb.pipeline.gate_inputs import compute_nearness

    class Recon:  # the two reads nearness makes of recon
        def symbol(self, key):
            return SimpleNamespace(id={"a.py::caller": 7}.get(key))

        def neighbours(self, ids):
            graph = {5: (7,), 7: (5,)}
            return {i: graph.get(i, ()) for i in ids}

    links = [Link("target_entity", "a.py::f", "a.py", 1, 9, None, 5),
             Link("validation_test", "tests/t.py::test_f", "tests/t.py", 1, 3, None, 9),
             Link("named_in_criteria", "a.py::f", "a.py", 1, 9, "f", 5)]
    caller = _item(4, "retrieved_hit", entity="a.py::caller")
    near = compute_nearness(_attempt().inputs.request, [caller], links, Recon())
    assert (near["E4"].recon_hops, near["E4"].nearest_link_no) == (1, 1)


def test_the_residue_is_shown_to_the_ranker_under_its_entity_key():
    """Two `def raw_amount(self, …)` of two classes must read apart in the prompt."""
    from ctxdb.pipeline.rank import residue_candidates

    pool = [_item(1, "retrieved_hit", entity="d.py::Fixed.raw_amount",
                  content="def raw_amount(self, subtotal):\n    return self.value\n"),
            _item(2, "retrieved_hit", entity="d.py::Percent.raw_amount",
                  content="def raw_amount(self, subtotal):\n    return subtotal * self.rate\n")]
    shown = residue_candidates(_attempt(pool=pool, residue=["E1", "E2"]))
    assert [c.signature for c in shown] == [
        "d.py::Fixed.raw_amount\ndef raw_amount(self, subtotal):",
        "d.py::Percent.raw_amount\ndef raw_amount(self, subtotal):"]


def test_private_identifiers_in_the_obligation_are_named_identifiers():
    from ctxdb.pipeline.gate_inputs import _CODE_NAME

    named = set(_CODE_NAME.findall(
        "Make _make_repr quote keys; Model._cache and __init__ stay; call fit() once"))
    assert {"_make_repr", "Model._cache", "__init__", "fit"} <= named


# -- nearness as a score; a module's outline and its file's symbols as one candidate -----


def test_near_score_adds_recon_hops_and_the_rarity_of_each_shared_term():
    from ctxdb.pipeline.gate_inputs import near_score

    assert near_score(1, []) == 1.0  # a direct neighbour of a linked symbol
    assert near_score(2, []) == 0.5
    assert near_score(None, [1, 1]) == 2.0  # two terms no other tested item shares
    assert near_score(None, [30, 30]) == round(2 / 30, 4)  # terms every hit shares
    assert near_score(1, [2, 4]) == 1.75
    assert near_score(3, []) == 0.0  # beyond two hops: no structural part


def test_nearness_kept_per_text_equals_nearness_derived_afresh():
    """Item terms are kept per (entity, signature, text digest) and shared terms per pair
    of term sets: a decision decided from the memos has the nearness of one decided
    with none, term for term, and an item whose text changed under the same entity and
    signature gets its new text's terms, not the kept ones."""
    from ctxdb.pipeline.gate_inputs import (
        NEAR_CONTENT_CHARS,
        compute_nearness,
        forget_item_terms,
        item_terms_uncached,
    )
    from ctxdb.terms import terms

    def pool(total_body: str):
        return [_item(1, "retrieved_hit", entity="cart.py::Cart.total", signature="def total(self)",
                      content=total_body),
                _item(2, "retrieved_hit", entity="cart.py::apply_discount",
                      content="def apply_discount(total, discount_rate):\n    return tax"),
                _item(3, "retrieved_hit", entity="cart.py::tax_for",
                      content="x = 1\n" * NEAR_CONTENT_CHARS + "discount total tax")]

    attempt = _attempt(terms=("discount", "tax", "total", "subtotal"))
    request = attempt.inputs.request
    node = request.plan_node
    decision_terms = terms(" ".join([request.task, node.obligation, node.decision_question or "",
                                     *node.acceptance_criteria]))
    forget_item_terms()
    afresh = compute_nearness(request, pool("def total(self): return self.subtotal"), [], None)
    kept = compute_nearness(request, pool("def total(self): return self.subtotal"), [], None)
    assert kept == afresh and set(afresh) == {"E1", "E2"}  # E3's terms lie past the head
    for item in pool("def total(self): return self.subtotal"):
        shared = sorted(decision_terms & item_terms_uncached(item.entity_key, item.signature,
                                                              item.content))
        assert afresh.get(item.item_id, Nearness(shared)).shared_terms == shared
    changed = compute_nearness(request, pool("def total(self): return self.discount"), [], None)
    assert afresh["E1"].shared_terms == ["subtotal", "total"]
    assert changed["E1"].shared_terms == ["discount", "total"]


def test_nearness_scores_only_the_items_it_gives_a_row(monkeypatch):
    """An item with no recon path to a link and too few shared terms gets no nearness
    row, and no score is worked out for it."""
    from ctxdb.pipeline import gate_inputs

    scored = []
    real_score = gate_inputs.near_score
    monkeypatch.setattr(gate_inputs, "near_score",
                        lambda hops, sharing: scored.append(sharing) or real_score(hops, sharing))
    pool = [_item(1, "retrieved_hit", entity="cart.py::apply_discount",
                  content="def apply_discount(total, discount_rate):\n    return tax"),
            _item(2, "retrieved_hit", entity="cart.py::unrelated", content="def unrelated(): ...")]
    request = _attempt(terms=("discount", "tax", "total")).inputs.request
    near = gate_inputs.compute_nearness(request, pool, [], None)
    assert set(near) == {"E1"} and len(scored) == 1


def _outline_pool():
    outline = _item(1, "symbol", "03", entity="a.py",
                    content="# a.py: module skeleton\ndef f1():  # L1\ndef f2():  # L5")
    hits = [_item(n, "retrieved_hit", entity=f"a.py::f{n - 1}", content=f"def f{n - 1}(): ...")
            for n in (2, 3)]
    lone = _item(4, "retrieved_hit", entity="b.py::g", content="def g(): ...")
    for item in [outline, *hits, lone]:
        item.path = item.entity_key.split("::")[0]
    return [outline, *hits, lone]


def test_an_outline_stands_for_its_files_residual_symbols_in_the_ranking():
    from ctxdb.pipeline.gate import _group_residue_by_outline
    from ctxdb.pipeline.rank import residue_candidates
    from ctxdb.pipeline.state import RankOutcome

    attempt = _attempt(pool=_outline_pool(), residue=["E1", "E2", "E3", "E4"],
                       rank_base_url="http://127.0.0.1:9")
    _group_residue_by_outline(attempt)
    assert attempt.residue == ["E1", "E4"] and attempt.outline_members == {"E1": ["E2", "E3"]}
    shown = {c.item_id: c.signature for c in residue_candidates(attempt)}
    assert shown["E1"].splitlines() == ["# a.py: outline", "def f1():  # L1", "def f2():  # L5"]
    attempt.ranking = RankOutcome("m", "u", {}, "ok", ("E1", "E4"), scores={"E1": 0.9, "E4": 0.1})
    resolve_residue(attempt)
    # the file's symbols follow its outline's score; the lone hit has its own
    assert [c.item_id for c in attempt.candidates] == ["E1", "E2", "E3"]
    verdicts = {e.item_id: e.driver for e in attempt.audit.events}
    assert verdicts["E2"] == "rank: score 0.90 >= 0.5 (its file's outline E1)"
    assert verdicts["E4"] == "rank: score 0.10 < 0.5"


def test_folding_admits_an_outline_only_with_its_folded_in_code():
    from ctxdb.pipeline.gate import _group_residue_by_outline

    links = [Link("validation_callee", "a.py::helper", "a.py", 20, 29)]
    nearness = {"E1": Nearness([], None, 1), "E2": Nearness([], 1, 1),
                "E3": Nearness(["f2", "x"], None, 1), "E4": Nearness(["g", "x"], None, 1)}
    attempt = _attempt(pool=_outline_pool(), links=links, nearness=nearness,
                       residue=["E1", "E2", "E3", "E4"])
    _group_residue_by_outline(attempt)
    resolve_residue(attempt)  # no endpoint: the fold rule
    assert [(c.item_id, c.driver) for c in attempt.candidates] == [
        ("E2", "fold:validation_callee"), ("E1", "fold:outline_of_folded_in")]
    assert "residue_folded_no_ranker" in attempt.flags
