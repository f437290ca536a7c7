"""Where SQL, a migration or the models must spell out a number or word of the spec or
the pipeline's vocabulary, it spells the same one as ``ctxdb.spec`` and
``ctxdb.pipeline.vocabulary``. Each test reads the SQL or rows as shipped."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from sqlalchemy import text

from ctxdb import ContextStore, models
from ctxdb.paths import SQL_DIR
from ctxdb.pipeline import vocabulary as v
from ctxdb.spec import (
    ADMITTED_MAX,
    ARMS,
    BLOCKS,
    DECISION_TYPES,
    IMPACT_EDGE_KINDS,
    POOL_MAX_ITEMS,
    RENDERINGS,
    SOURCE_PRIORITY,
    TIERS,
)

GOLDEN = Path(__file__).resolve().parent / "golden" / "fixture_windows.json"
GATE_RULE = (SQL_DIR / "views" / "20_v_gate_rule.sql").read_text()
GATE_CAPPED = (SQL_DIR / "views" / "21_v_gate.sql").read_text()
# The driver column's CASE in v_gate_rule: everything after `END AS gate_verdict`.
DRIVER_CASE = GATE_RULE.split("END AS gate_verdict", 1)[1].split("END AS driver", 1)[0]


@pytest.fixture
def seeded(store_url):
    with ContextStore.open(store_url) as store, store.engine.connect() as connection:
        yield connection


def _check_values(table, name: str) -> tuple[str, ...]:
    """The quoted values of a `column IN (...)` CHECK constraint of a model table."""
    constraint = next(c for c in table.constraints if c.name == name)
    return tuple(re.findall(r"'([^']*)'", str(constraint.sqltext)))


def test_the_gate_views_cap_where_the_spec_does():
    caps = {int(n) for n in re.findall(r"admit_rank > (\d+)", GATE_CAPPED)}
    caps |= {int(n) for n in re.findall(r"admitted_cap_(\d+)", GATE_CAPPED)}
    caps |= {int(n) for n in re.findall(r"than (\d+) admitted", GATE_CAPPED)}
    assert caps == {ADMITTED_MAX}
    assert set(re.findall(r"pool_cap_(\d+)", GATE_RULE)) == {str(POOL_MAX_ITEMS)}


def test_every_driver_the_gate_view_can_emit_has_a_role(seeded):
    # The driver CASE builds drivers from literals and from exactly these concatenations;
    # a new one must be added here (and to DRIVER_ROLES) or this test fails.
    concatenations = set(re.findall(r"'(\w+:)' \|\| ([\w.]+)", DRIVER_CASE))
    assert concatenations == {(v.OBLIGATION, "e.kind"), (v.OBLIGATION, "obligation_link.link_kind"),
                              (v.IMPACT, "impact.edge_kind"), ("near:", "CASE")}
    policy_links = set(seeded.execute(text("SELECT link_kind FROM gate_link_policy")).scalars())
    requirement_kinds = set(re.findall(r"e\.kind IN \('plan_node', 'acceptance_criteria'\)",
                                       DRIVER_CASE))
    assert requirement_kinds, "the requirement kinds' WHEN moved: update this test"
    emitted = {v.OBLIGATION + kind for kind in v.REQUIREMENT_KINDS}
    emitted |= {v.OBLIGATION + kind for kind in policy_links if kind != v.IMPACT_DIGEST}
    emitted |= {v.IMPACT + kind for kind in IMPACT_EDGE_KINDS}
    emitted |= {literal for literal in re.findall(r"'((?:obligation|impact):\w+)'", DRIVER_CASE)}
    missing = sorted(driver for driver in emitted if driver not in v.DRIVER_ROLES)
    assert missing == []
    # what the fold rule and the ranking step admit under
    for kind in policy_links - {v.IMPACT_DIGEST}:
        assert v.FOLD + kind in v.DRIVER_ROLES
    assert v.RANK_ADMITTED in v.DRIVER_ROLES
    assert set(v.DRIVER_ROLES.values()) <= set(v.ROLE_STRENGTH)


def test_the_gate_view_uses_the_vocabulary_verdicts_and_link_kinds(seeded):
    verdicts = set(re.findall(r"THEN '(\w+)'", GATE_RULE.split("END AS gate_verdict")[0]))
    verdicts |= set(re.findall(r"ELSE '(\w+)'", GATE_RULE.split("END AS gate_verdict")[0]))
    assert verdicts == set(v.GATE_VERDICTS)
    rows = seeded.execute(text("SELECT decision_type, link_kind FROM gate_link_policy")).all()
    assert {kind for _, kind in rows} == set(v.LINK_KINDS)
    assert {decision_type for decision_type, _ in rows} == set(DECISION_TYPES)
    for kind in re.findall(r"link_kind (?:=|IN) \('?([\w', ]+)'?\)?", GATE_RULE):
        for name in re.findall(r"\w+", kind):
            assert name in v.LINK_KINDS, name


def test_the_store_priorities_are_the_spec_priorities(seeded):
    rows = dict(seeded.execute(text("SELECT source, priority FROM source_priority")).all())
    assert rows == SOURCE_PRIORITY


def test_the_policy_rows_use_the_spec_renderings_and_known_roles(seeded):
    rows = seeded.execute(text("SELECT role, rendering FROM representation_policy")).all()
    assert rows
    assert {rendering for _, rendering in rows} <= set(RENDERINGS)
    assert {role for role, _ in rows} <= set(v.ROLE_STRENGTH)
    assert _check_values(models.representation_policy, "ck_policy_rendering") == RENDERINGS


def test_the_models_checks_hold_the_spec_enums():
    assert _check_values(models.run, "ck_run_arm") == ARMS
    assert _check_values(models.decision, "ck_decision_type") == DECISION_TYPES
    assert _check_values(models.impact_edge, "ck_impact_edge_kind") == IMPACT_EDGE_KINDS
    assert _check_values(models.window_item, "ck_window_tier") == TIERS
    assert _check_values(models.window_item, "ck_window_block") == BLOCKS


def test_the_checks_and_forensics_use_the_vocabulary():
    """An action or stage a query names is one the pipeline writes: the final verdicts,
    or an action the golden fixture decisions' audit holds."""
    golden = json.loads(GOLDEN.read_text())
    written = {row[3] for snapshot in golden.values() for row in snapshot["item_event"]}
    assert set(v.FINAL_VERDICTS) <= written
    sql_files = sorted((SQL_DIR / "checks").glob("*.sql")) + sorted(
        (SQL_DIR / "inspect").glob("*.sql")) + sorted((SQL_DIR / "views").glob("*.sql"))
    for path in sql_files:
        sql = path.read_text()
        for action in re.findall(r"action (?:<>|=|IN) \(?'(\w+)'", sql):
            assert action in set(v.FINAL_VERDICTS) | written, (path.name, action)
        for stage in re.findall(r"stage = '(\w+)'", sql):
            assert stage in v.STAGES, (path.name, stage)


def test_the_gate_view_uses_the_nearness_threshold_of_the_pipeline():
    from ctxdb.pipeline.gate_inputs import NEAR_MIN_SCORE

    thresholds = re.findall(r"near\.near_score >= ([\d.]+)", GATE_RULE)
    assert len(thresholds) == 2  # the verdict and its driver
    assert {float(t) for t in thresholds} == {NEAR_MIN_SCORE}
    assert f"{NEAR_MIN_SCORE}" in GATE_RULE.split("CREATE VIEW", 1)[0]  # and its comment
