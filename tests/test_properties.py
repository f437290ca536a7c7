"""Invariants that must hold on any pool (hypothesis), on SQLite and PostgreSQL.

For random pools and ceilings: the window never exceeds the ceiling, every pool
item ends with exactly one final verdict, no edge-critical item sits in the
middle span, the stable core is never evicted unless the decision is flagged
(all four are sql/checks/ files run by store.verify()), and identical input
gives identical output.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxdb import ContextStore
from ctxdb.config import MIN_TOKEN_CEILING, load_settings
from ctxdb.spec import EVIDENCE_KINDS, EVIDENCE_SOURCES, IMPACT_EDGE_KINDS
from ctxdb.tokens import get_counter

_runs = itertools.count(1)
ENTITIES = [f"pkg/mod{m}.py::Thing{m}.method{n}" for m in range(3) for n in range(4)] + [
    "tests/test_mod.py::test_thing", "pkg/mod0.py", "pkg/mod1.py:3-9",
    # entity keys at the schema's limit: they are printed in every item header
    "pkg/" + "deep/" * 195 + "m.py::Long.name",
]
TARGET = ENTITIES[0]
WORDS = st.sampled_from(
    "apply discount before tax total cart price line error assert failed config value "
    "timeout session request send retry".split()
)
TEXT = st.lists(WORDS, min_size=1, max_size=400).map(" ".join).map(
    lambda s: "\n".join(s[i : i + 60] for i in range(0, len(s), 60))
)

evidence_item = st.fixed_dictionaries(
    {
        "source": st.sampled_from(EVIDENCE_SOURCES),
        "kind": st.sampled_from(EVIDENCE_KINDS),
        "content": TEXT,
        "provenance": st.text(min_size=1, max_size=240),
    },
    optional={"entity": st.sampled_from(ENTITIES), "score": st.floats(0, 10)},
)
impact_edge = st.fixed_dictionaries(
    {
        "head": st.sampled_from([TARGET, ENTITIES[1]]),
        "tail": st.sampled_from(ENTITIES),
        "kind": st.sampled_from(IMPACT_EDGE_KINDS),
        "depth": st.integers(1, 3),
    }
)
request_body = st.fixed_dictionaries(
    {
        "decision_type": st.sampled_from(["localize", "edit", "repair", "other"]),
        "task": TEXT,
        "plan_node": st.fixed_dictionaries(
            {"node_id": st.just("n1"), "obligation": TEXT},
            optional={
                "target_entity": st.just(TARGET),
                "acceptance_criteria": st.lists(TEXT, max_size=4),
                "required_validation": st.lists(
                    st.just("tests/test_mod.py::test_thing"), max_size=1
                ),
            },
        ),
        "evidence": st.lists(evidence_item, max_size=40),
        "impact_edges": st.lists(impact_edge, max_size=8),
        "live": st.fixed_dictionaries(
            {},
            optional={
                "errors": st.lists(TEXT, max_size=3),
                "tracebacks": st.lists(TEXT, max_size=2),
                "tool_outputs": st.lists(TEXT, max_size=4),
                "test_outputs": st.lists(TEXT, max_size=3),
            },
        ),
    }
)


def _filler(count: int) -> list[dict]:
    """Many pool items across sources and kinds, to push past the 256 and 64 caps."""
    return [
        {"source": EVIDENCE_SOURCES[n % len(EVIDENCE_SOURCES)],
         "kind": EVIDENCE_KINDS[n % len(EVIDENCE_KINDS)],
         "entity": f"pkg/filler{n % 7}.py::Filler.method{n}",
         "content": f"def method{n}(self):\n    return apply_discount_tax({n})\n",
         "provenance": f"filler {n}"}
        for n in range(count)
    ] + [{"source": "06", "kind": "graph_edge", "entity": f"pkg/filler{n}.py::Filler.method{n}",
          "content": "edge", "provenance": "06"} for n in range(count // 10)]


def _check(store, body, ceiling, extra=0):
    body = dict(body, evidence=body["evidence"] + _filler(extra))
    body["impact_edges"] = body["impact_edges"] + [
        {"head": TARGET, "tail": f"pkg/filler{n}.py::Filler.method{n}", "kind": "CalledBy",
         "depth": 1} for n in range(extra // 10)]
    request = dict(body, run_id=f"prop-{next(_runs)}", instance_id="i", seq=1)
    store.settings = replace(store.settings, token_ceiling=ceiling)
    first = store.construct(request)
    second = store.construct(request)
    assert first.token_count <= ceiling
    # recount what is actually sent, independently of the budgeter's own bookkeeping
    assert get_counter(store.settings.tokenizer).count(first.render()) <= ceiling
    assert first.render() == second.render()
    assert first.token_count == second.token_count
    violations = store.verify()
    assert violations == {}, violations


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=request_body, ceiling=st.integers(MIN_TOKEN_CEILING, 3000),
       extra=st.sampled_from([0, 0, 0, 80, 300]))
def test_invariants_hold_on_any_pool_sqlite(tmp_path_factory, body, ceiling, extra):
    path = tmp_path_factory.getbasetemp() / "properties.db"
    with ContextStore.open(path, settings=load_settings()) as store:
        _check(store, body, ceiling, extra)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=request_body, ceiling=st.integers(MIN_TOKEN_CEILING, 3000),
       extra=st.sampled_from([0, 0, 300]))
def test_invariants_hold_on_any_pool_postgresql(pg_cluster, body, ceiling, extra):
    with ContextStore.open(pg_cluster.url("postgres"), settings=load_settings()) as store:
        _check(store, body, ceiling, extra)
