"""`ctxdb report replay` (issue 20): the replay reports of sql/reports/replay_*.sql on a
hand-made replay whose every figure is worked out below, on SQLite and PostgreSQL; the
screen, JSON and HTML built from them; the CLI."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from ctxdb import ContextStore
from ctxdb.ab.reports import CACHED_PRICE_RATIO, run_report
from ctxdb.agent.report import SECTIONS, replay_html, replay_json, replay_screen
from ctxdb.cli import EXIT_BAD_INPUT, EXIT_OK, main

RUN, VARIANT_RUN = "replay", "replay-v2"
OTHER_RATIO = 0.5

# (instance, seq) -> action_kind, the same in every arm (the recorded run's action)
ACTIONS = {("a", 1): "other", ("a", 2): "other", ("a", 3): "edit", ("a", 4): "submit",
           ("b", 1): "other", ("b", 2): "edit"}
# run RUN: arm -> instance -> [(prompt_tokens, cached_tokens) per seq from 1]
TOKENS = {
    "current": {"a": [(1000, 0), (2000, 900), (3000, 1900), (4000, 2900)],
                "b": [(1500, 0), (2500, 1400)]},
    "mask10": {"a": [(1000, 0), (2000, 900), (2500, 1000), (2600, 1000)],
               "b": [(1500, 0), (2500, 1400)]},
    "ctx08": {"a": [(800, 0), (900, 0), (1000, 500), (1100, 500)],
              "b": [(700, 0), (750, 600)]},
}
# run VARIANT_RUN: one unevaluated run of instance a, three decisions, no cache
VARIANT_TOKENS = {"current": [300, 100, 200], "ctx08": [50, 60, 70]}
# (instance, seq, anchor_no, class) -> arm -> fate (None: kept)
ANCHORS = {
    ("a", 2, 1, "path"): {"current": None, "mask10": None, "ctx08": None},
    ("a", 2, 2, "identifier"): {"current": None, "mask10": None, "ctx08": "stale"},
    ("a", 3, 1, "edit_text"): {"current": None, "mask10": "masked", "ctx08": None},
    ("a", 3, 2, "identifier"): {"current": None, "mask10": None, "ctx08": "capped"},
    ("a", 3, 3, "path"): {"current": None, "mask10": None, "ctx08": "cut"},
    ("a", 4, 1, "path"): {"current": None, "mask10": None, "ctx08": None},
    ("b", 2, 1, "edit_line"): {"current": None, "mask10": "masked", "ctx08": "cut"},
    # the harness's own prompt had lost it: no arm's to lose, counted nowhere (though
    # ctx08 kept it)
    ("b", 2, 2, "identifier"): {"current": "never_given", "mask10": "never_given",
                                "ctx08": None},
}
# arm ctx08: (run, instance, seq) -> the window the store holds, as (item kind, rendering,
# tokens) per part; seq 1 of each was refused, so it holds none
WINDOWS = {
    (RUN, "a", 2): [("agent_turn", "verbatim", 100), ("tool_output", "verbatim", 300)],
    (RUN, "a", 3): [("agent_turn", "verbatim", 100), ("tool_output", "pointer", 20),
                    ("agent_turn", "verbatim", 150), ("file_view", "view", 250)],
    (RUN, "a", 4): [("agent_turn", "verbatim", 100), ("tool_output", "pointer", 20),
                    ("agent_turn", "verbatim", 150), ("file_view", "view", 250),
                    ("agent_turn", "verbatim", 80)],
    (RUN, "b", 2): [("agent_turn", "verbatim", 200), ("tool_output", "verbatim", 100)],
    (VARIANT_RUN, "a", 2): [("agent_turn", "verbatim", 20)],
}
# (run, instance) -> resolved, tree_matches_submission, tree_lost_at_seq, tree_note
REPLAYS = {
    (RUN, "a"): (True, True, None, None),
    (RUN, "b"): (False, False, 2, "apply: the patch of step 2 did not apply: a.py"),
    (VARIANT_RUN, "a"): (None, False, None, "diff: b.py differs"),
}


def _write_replay(store) -> None:
    run_sql = ("INSERT INTO run (run_id, arm, variant, created_at)"
               " VALUES (:run, 'ctx08', 'default', 'now')")
    replay_sql = (
        "INSERT INTO replay_run (run_id, instance_id, trajectory, trajectory_format, resolved,"
        " decisions, tree_matches_submission, tree_lost_at_seq, tree_note, created_at)"
        " VALUES (:run, :instance, :trajectory, 'mini-swe-agent-1', :resolved, :decisions,"
        " :matches, :lost, :note, 'now')")
    decision_sql = (
        "INSERT INTO replay_decision (run_id, instance_id, seq, arm, decision_id, prompt_tokens,"
        " cached_tokens, action_kind, tree_known, refused) VALUES (:run, :instance, :seq, :arm,"
        " :decision, :prompt, :cached, :action, :known, :refused)")
    window_decision_sql = (
        "INSERT INTO decision (decision_id, run_id, instance_id, seq, decision_type, task_text,"
        " request_json, request_sha256, tokenizer, token_ceiling, created_at) VALUES"
        " (:decision, :run, :instance, :seq, 'edit', 'task', '{}', :sha, 'cl100k_base', 100000,"
        " 'now')")
    text_sql = "INSERT INTO evidence_text (content_sha256, content) VALUES (:sha, 'text')"
    item_sql = (
        "INSERT INTO evidence_item (decision_id, item_id, item_no, source, kind, content_sha256,"
        " provenance) VALUES (:decision, :item, :no, 'live', :kind, :sha, 'live: a step')")
    window_item_sql = (
        "INSERT INTO window_item (decision_id, position, item_id, role, rendering, tier, block,"
        " edge_critical, token_count, rendered_sha256) VALUES (:decision, :no, :item, 'part',"
        " :rendering, 'working_set', 'middle', false, :tokens, :sha)")
    sha = "0" * 64
    decision_ids = {key: number for number, key in enumerate(WINDOWS, start=1)}
    anchor_sql = (
        "INSERT INTO replay_anchor (run_id, instance_id, seq, anchor_no, anchor_class,"
        " anchor_text) VALUES (:run, :instance, :seq, :no, :class, 'text')")
    outcome_sql = (
        "INSERT INTO replay_anchor_outcome (run_id, instance_id, seq, anchor_no, arm, kept,"
        " fate) VALUES (:run, :instance, :seq, :no, :arm, :kept, :fate)")
    decisions = {(RUN, "a"): 4, (RUN, "b"): 2, (VARIANT_RUN, "a"): 3}
    with store.write_transaction() as connection:
        for run in (RUN, VARIANT_RUN):
            connection.execute(text(run_sql), {"run": run})
        for (run, instance), (resolved, matches, lost, note) in REPLAYS.items():
            connection.execute(text(replay_sql), {
                "run": run, "instance": instance, "trajectory": f"{instance}.traj.json",
                "resolved": resolved, "decisions": decisions[(run, instance)],
                "matches": matches, "lost": lost, "note": note})
        connection.execute(text(text_sql), {"sha": sha})
        for (run, instance, seq), parts in WINDOWS.items():
            decision = decision_ids[(run, instance, seq)]
            connection.execute(text(window_decision_sql), {
                "decision": decision, "run": run, "instance": instance, "seq": seq, "sha": sha})
            for number, (kind, rendering, tokens) in enumerate(parts, start=1):
                item = {"decision": decision, "item": f"E{number}", "no": number}
                connection.execute(text(item_sql), {**item, "kind": kind, "sha": sha})
                connection.execute(text(window_item_sql),
                                   {**item, "rendering": rendering, "tokens": tokens,
                                    "sha": sha})
        for arm, by_instance in TOKENS.items():
            for instance, steps in by_instance.items():
                for seq, (prompt, cached) in enumerate(steps, start=1):
                    connection.execute(text(decision_sql), {
                        "run": RUN, "instance": instance, "seq": seq, "arm": arm,
                        "decision": decision_ids.get((RUN, instance, seq))
                        if arm == "ctx08" else None,
                        "prompt": prompt, "cached": cached, "action": ACTIONS[(instance, seq)],
                        "known": seq != 2, "refused": arm == "ctx08" and seq == 1})
        for arm, prompts in VARIANT_TOKENS.items():
            for seq, prompt in enumerate(prompts, start=1):
                connection.execute(text(decision_sql), {
                    "run": VARIANT_RUN, "instance": "a", "seq": seq, "arm": arm,
                    "decision": decision_ids.get((VARIANT_RUN, "a", seq))
                    if arm == "ctx08" else None,
                    "prompt": prompt, "cached": 0, "action": "other",
                    "known": seq != 2, "refused": arm == "ctx08" and seq == 1})
        for (instance, seq, number, anchor_class), fates in ANCHORS.items():
            key = {"run": RUN, "instance": instance, "seq": seq, "no": number}
            connection.execute(text(anchor_sql), {**key, "class": anchor_class})
            for arm, fate in fates.items():
                connection.execute(text(outcome_sql),
                                   {**key, "arm": arm, "kept": fate is None, "fate": fate})


@pytest.fixture
def replay_store(store_url):
    with ContextStore.open(store_url) as store:
        _write_replay(store)
        yield store


def _rows(store, name: str, **params) -> list[dict]:
    with store.engine.connect() as connection:
        report = run_report(connection, name, params or None)
    return [dict(zip(report.columns, row, strict=True)) for row in report.rows]


def _by(rows: list[dict], *keys: str) -> dict:
    return {tuple(r[k] for k in keys): r for r in rows}


# --- the figures, worked out by hand (every test runs on SQLite and PostgreSQL) ---------


def test_arms_tokens_by_hand(replay_store):
    arms = _by(_rows(replay_store, "replay_arms"), "run_id", "arm")
    assert list(arms) == [(RUN, "current"), (RUN, "mask10"), (RUN, "ctx08"),
                          (VARIANT_RUN, "current"), (VARIANT_RUN, "ctx08")]
    current = arms[(RUN, "current")]
    assert (current["runs"], current["resolved_runs"], current["decisions"]) == (2, 1, 6)
    # 1000 1500 2000 2500 3000 4000: the lower middle is the 3rd, p90 the 6th (5.4 up)
    assert (current["median_prompt_tokens"], current["p90_prompt_tokens"]) == (2000, 4000)
    assert current["total_prompt_tokens"] == 14000
    assert current["tokens_per_resolved_run"] == pytest.approx(14000)  # one run resolved
    mask10 = arms[(RUN, "mask10")]  # 1000 1500 2000 2500 2500 2600
    assert (mask10["median_prompt_tokens"], mask10["p90_prompt_tokens"]) == (2000, 2600)
    assert mask10["total_prompt_tokens"] == 12100
    ctx08 = arms[(RUN, "ctx08")]  # 700 750 800 900 1000 1100
    assert (ctx08["median_prompt_tokens"], ctx08["p90_prompt_tokens"]) == (800, 1100)
    assert ctx08["total_prompt_tokens"] == 5250
    assert ctx08["tokens_per_resolved_run"] == pytest.approx(5250)
    # an odd count (100 200 300): the middle one; no run evaluated: nothing per resolved run
    variant = arms[(VARIANT_RUN, "current")]
    assert (variant["runs"], variant["resolved_runs"], variant["decisions"]) == (1, 0, 3)
    assert (variant["median_prompt_tokens"], variant["p90_prompt_tokens"]) == (200, 300)
    assert variant["tokens_per_resolved_run"] is None
    assert variant["cost_per_resolved_run"] is None
    assert variant["cached_share"] == pytest.approx(0.0)


def test_arms_cache_and_cost_at_the_default_ratio_and_another(replay_store):
    default = _by(_rows(replay_store, "replay_arms"), "run_id", "arm")
    assert CACHED_PRICE_RATIO == 0.1
    current = default[(RUN, "current")]
    # cached: 0 + 900 + 1900 + 2900 (run a) + 0 + 1400 (run b) = 7100 of 14000
    assert current["cached_share"] == pytest.approx(7100 / 14000)
    # (14000 - 7100) + 0.1 * 7100; per run: a 4300 + 570 = 4870, b 2600 + 140 = 2740
    assert current["cost_tokens"] == pytest.approx(7610)
    assert current["median_cost_per_run"] == pytest.approx(2740)  # the lower of two
    assert current["cost_per_resolved_run"] == pytest.approx(7610)
    ctx08 = default[(RUN, "ctx08")]  # cached 500 + 500 + 600 = 1600 of 5250
    assert ctx08["cached_share"] == pytest.approx(1600 / 5250)
    assert ctx08["cost_tokens"] == pytest.approx(3650 + 160)

    other = _by(_rows(replay_store, "replay_arms", cached_price_ratio=OTHER_RATIO),
                "run_id", "arm")
    current = other[(RUN, "current")]
    assert current["cached_share"] == pytest.approx(7100 / 14000)  # the ratio prices only
    assert current["cost_tokens"] == pytest.approx(6900 + 0.5 * 7100)
    # per run: a 4300 + 2850 = 7150, b 2600 + 700 = 3300
    assert current["median_cost_per_run"] == pytest.approx(3300)
    assert current["cost_per_resolved_run"] == pytest.approx(10450)
    assert other[(RUN, "ctx08")]["cost_tokens"] == pytest.approx(3650 + 800)
    # a whole-number ratio (a library caller's 1) divides as a fraction still
    whole = _by(_rows(replay_store, "replay_arms", cached_price_ratio=1), "run_id", "arm")
    current = whole[(RUN, "current")]  # cost 14000 over 1 resolved run of 2
    assert isinstance(current["cost_per_resolved_run"], float)
    assert current["cost_per_resolved_run"] == pytest.approx(14000)


def test_arms_give_the_issue_s_ratios(replay_store):
    arms = _by(_rows(replay_store, "replay_arms"), "run_id", "arm")
    ctx08, mask10, current = (arms[(RUN, arm)] for arm in ("ctx08", "mask10", "current"))
    assert ctx08["tokens_of_mask10"] == pytest.approx(5250 / 12100)
    assert ctx08["cost_of_current"] == pytest.approx((3650 + 160) / 7610)
    assert (mask10["tokens_of_mask10"], current["cost_of_current"]) == (1, 1)
    # a store run without a mask10 arm has no token ratio; its ratios are its own
    variant = arms[(VARIANT_RUN, "ctx08")]
    assert variant["tokens_of_mask10"] is None
    assert variant["cost_of_current"] == pytest.approx(
        variant["cost_tokens"] / arms[(VARIANT_RUN, "current")]["cost_tokens"])


def test_arms_count_the_decisions_to_read_with_care(replay_store):
    arms = _by(_rows(replay_store, "replay_arms"), "run_id", "arm")
    # a refused ctx08 request at seq 1 of each of the run's two replays; seq 2 of each
    # made on a tree not known to be the run's, in every arm
    assert arms[(RUN, "ctx08")]["refused_decisions"] == 2
    assert arms[(RUN, "current")]["refused_decisions"] == 0
    assert arms[(RUN, "current")]["tree_unknown_decisions"] == 2
    assert arms[(VARIANT_RUN, "current")]["tree_unknown_decisions"] == 1


def test_recall_counts_only_the_anchors_the_current_arm_kept(replay_store):
    recall = _by(_rows(replay_store, "replay_recall"), "arm", "anchor_class")
    assert {r["run_id"] for r in recall.values()} == {RUN}
    figures = {key: (r["anchors"], r["kept"], r["recall"], r["edit_anchors"], r["edit_kept"],
                     r["edit_recall"]) for key, r in recall.items()}
    approx = pytest.approx
    assert figures == {
        # the reference keeps every anchor it is counted on; b/2/2 (lost by it) is left out
        ("current", "edit_line"): (1, 1, approx(1.0), 1, 1, approx(1.0)),
        ("current", "edit_text"): (1, 1, approx(1.0), 1, 1, approx(1.0)),
        ("current", "identifier"): (2, 2, approx(1.0), 1, 1, approx(1.0)),
        ("current", "path"): (3, 3, approx(1.0), 1, 1, approx(1.0)),
        ("mask10", "edit_line"): (1, 0, approx(0.0), 1, 0, approx(0.0)),
        ("mask10", "edit_text"): (1, 0, approx(0.0), 1, 0, approx(0.0)),
        ("mask10", "identifier"): (2, 2, approx(1.0), 1, 1, approx(1.0)),
        ("mask10", "path"): (3, 3, approx(1.0), 1, 1, approx(1.0)),
        ("ctx08", "edit_line"): (1, 0, approx(0.0), 1, 0, approx(0.0)),
        ("ctx08", "edit_text"): (1, 1, approx(1.0), 1, 1, approx(1.0)),
        # ctx08 kept b/2/2 but current had lost it: 0 of 2, not 1 of 3
        ("ctx08", "identifier"): (2, 0, approx(0.0), 1, 0, approx(0.0)),
        # a/2/1 and a/4/1 kept (neither at an edit), a/3/3 cut (at the edit)
        ("ctx08", "path"): (3, 2, approx(2 / 3), 1, 0, approx(0.0)),
    }
    # on a known tree only: every seq but 2 (seq 2's tree is not the run's), so b/2/1 and
    # the seq-2 anchors drop out; no known edit_line is a recall of None, not of 0
    known = {key: (r["tree_known_anchors"], r["tree_known_kept"], r["tree_known_recall"])
             for key, r in recall.items()}
    assert known == {
        ("current", "edit_line"): (0, 0, None),
        ("current", "edit_text"): (1, 1, approx(1.0)),
        ("current", "identifier"): (1, 1, approx(1.0)),
        ("current", "path"): (2, 2, approx(1.0)),
        ("mask10", "edit_line"): (0, 0, None),
        ("mask10", "edit_text"): (1, 0, approx(0.0)),
        ("mask10", "identifier"): (1, 1, approx(1.0)),
        ("mask10", "path"): (2, 2, approx(1.0)),
        ("ctx08", "edit_line"): (0, 0, None),
        ("ctx08", "edit_text"): (1, 1, approx(1.0)),
        ("ctx08", "identifier"): (1, 0, approx(0.0)),  # a/3/2 capped
        ("ctx08", "path"): (2, 1, approx(0.5)),  # a/3/3 cut, a/4/1 kept
    }


def test_fates_of_the_lost_anchors(replay_store):
    fates = {(r["arm"], r["anchor_class"], r["fate"]): (r["lost_anchors"], r["share_of_anchors"])
             for r in _rows(replay_store, "replay_fates")}
    approx = pytest.approx
    # never_given (b/2/2) is nowhere: the current arm had not kept that anchor
    assert fates == {
        ("mask10", "edit_line", "masked"): (1, approx(1.0)),
        ("mask10", "edit_text", "masked"): (1, approx(1.0)),
        ("ctx08", "edit_line", "cut"): (1, approx(1.0)),
        ("ctx08", "identifier", "capped"): (1, approx(1 / 2)),
        ("ctx08", "identifier", "stale"): (1, approx(1 / 2)),
        ("ctx08", "path", "cut"): (1, approx(1 / 3)),
    }


def test_parts_say_where_each_window_s_tokens_went(replay_store):
    rows = _rows(replay_store, "replay_parts")
    figures = [(r["run_id"], r["arm"], r["part_kind"], r["rendering"], r["parts"], r["tokens"])
               for r in rows]
    # run RUN's four windows (a/2-4, b/2; the refused seq 1 holds none, the other arms
    # no window): 900 + 1,000 + 1,100 + 750 = 3,750 sent, 1,820 of them in parts; the
    # rest the harness's prompt, a part per decision. The variant run's one window (its
    # seq 2, 60 tokens) is its own.
    assert figures == [
        (RUN, "ctx08", "harness_prompt", None, 4, 1930),
        (RUN, "ctx08", "agent_turn", "verbatim", 7, 880),
        (RUN, "ctx08", "file_view", "view", 2, 500),
        (RUN, "ctx08", "tool_output", "verbatim", 2, 400),
        (RUN, "ctx08", "tool_output", "pointer", 2, 40),
        (VARIANT_RUN, "ctx08", "harness_prompt", None, 1, 40),
        (VARIANT_RUN, "ctx08", "agent_turn", "verbatim", 1, 20),
    ]
    assert [r["tokens_per_decision"] for r in rows] == pytest.approx(
        [482.5, 220, 125, 100, 10, 40, 20])
    assert [r["share_of_prompt_tokens"] for r in rows] == pytest.approx(
        [1930 / 3750, 880 / 3750, 500 / 3750, 400 / 3750, 40 / 3750, 40 / 60, 20 / 60])


def test_fidelity_counts_and_miss_causes(replay_store):
    rows = _rows(replay_store, "replay_fidelity")
    figures = [(r["run_id"], r["runs"], r["trees_matching"], r["matching_share"],
                r["trees_lost"], r["miss_cause"], r["misses"]) for r in rows]
    assert figures == [(RUN, 2, 1, pytest.approx(0.5), 1, "apply", 1),
                       (VARIANT_RUN, 1, 0, pytest.approx(0.0), 0, "diff", 1)]


def test_fidelity_without_misses_and_with_notes_without_a_cause(store_url):
    with ContextStore.open(store_url) as store:
        with store.write_transaction() as connection:
            connection.execute(text("INSERT INTO run (run_id, created_at) VALUES "
                                    "('clean', 'now'), ('noted', 'now')"))
            for run, instance, matches, note in (
                    ("clean", "a", True, None), ("noted", "a", False, None),
                    ("noted", "b", False, "no colon here"), ("noted", "c", None, None)):
                connection.execute(text(
                    "INSERT INTO replay_run (run_id, instance_id, trajectory, trajectory_format,"
                    " decisions, tree_matches_submission, tree_note, created_at)"
                    " VALUES (:run, :instance, 't', 'mini-swe-agent-1', 0, :matches, :note,"
                    " 'now')"), {"run": run, "instance": instance, "matches": matches,
                                 "note": note})
        rows = [(r["run_id"], r["trees_matching"], r["miss_cause"], r["misses"])
                for r in _rows(store, "replay_fidelity")]
    # a run not known to match (NULL) is a miss; a note without ':' is its own cause
    assert rows == [("clean", 1, None, 0), ("noted", 0, "no note", 2),
                    ("noted", 0, "no colon here", 1)]


def test_steps_median_over_the_runs_that_reach_each_decision(replay_store):
    steps = {(r["run_id"], r["arm"], r["seq"]): (r["runs"], r["median_prompt_tokens"])
             for r in _rows(replay_store, "replay_steps")}
    # seq 1 and 2: runs a and b (the lower of two); seq 3 and 4: run a alone
    assert [steps[(RUN, "current", seq)] for seq in (1, 2, 3, 4)] == [
        (2, 1000), (2, 2000), (1, 3000), (1, 4000)]
    assert [steps[(RUN, "ctx08", seq)] for seq in (1, 2, 3, 4)] == [
        (2, 700), (2, 750), (1, 1000), (1, 1100)]
    assert steps[(VARIANT_RUN, "current", 2)] == (1, 100)
    assert len(steps) == 3 * 4 + 2 * 3


def test_lengths_group_the_runs_by_their_decisions(replay_store):
    # two groups: run b (2 decisions), then run a (4); the variant run's one run alone
    lengths = _by(_rows(replay_store, "replay_lengths", length_groups=2),
                  "run_id", "length_group", "arm")
    b, a = lengths[(RUN, 1, "ctx08")], lengths[(RUN, 2, "ctx08")]
    assert (b["runs"], b["shortest_run_decisions"], b["longest_run_decisions"]) == (1, 2, 2)
    assert (a["runs"], a["shortest_run_decisions"], a["longest_run_decisions"]) == (1, 4, 4)
    # the shortest group first, each group's arms the reference first
    order = [(r["length_group"], r["arm"])
             for r in _rows(replay_store, "replay_lengths", length_groups=2)
             if r["run_id"] == RUN]
    assert order == [(group, arm) for group in (1, 2) for arm in ("current", "mask10", "ctx08")]
    # a: ctx08 3,800 tokens of mask10's 8,100; cost 2,800 + 0.1 * 1,000 of current's
    # 4,300 + 0.1 * 5,700
    assert a["prompt_tokens"] == 3800 and a["tokens_of_mask10"] == pytest.approx(3800 / 8100)
    assert a["cost_tokens"] == pytest.approx(2900)
    assert a["cost_of_current"] == pytest.approx(2900 / 4870)
    # b: 1,450 of 4,000 tokens; cost 850 + 60 of 2,600 + 140
    assert b["tokens_of_mask10"] == pytest.approx(1450 / 4000)
    assert b["cost_of_current"] == pytest.approx(910 / 2740)
    assert lengths[(RUN, 2, "current")]["cost_of_current"] == pytest.approx(1.0)
    assert lengths[(VARIANT_RUN, 1, "ctx08")]["tokens_of_mask10"] is None  # no mask10 arm
    # the default, quarters: a group per run here, as above
    assert _by(_rows(replay_store, "replay_lengths"), "run_id", "length_group", "arm") \
        == lengths
    # one group holds both runs: ctx08 2,900 + 910 of current's 4,870 + 2,740
    whole = _by(_rows(replay_store, "replay_lengths", length_groups=1),
                "run_id", "length_group", "arm")
    assert whole[(RUN, 1, "ctx08")]["cost_of_current"] == pytest.approx(3810 / 7610)
    # another cache price: a: ctx08 2,800 + 0.5 * 1,000 of current's 4,300 + 0.5 * 5,700
    priced = _by(_rows(replay_store, "replay_lengths", length_groups=2,
                       cached_price_ratio=OTHER_RATIO), "run_id", "length_group", "arm")
    assert priced[(RUN, 2, "ctx08")]["cost_of_current"] == pytest.approx(3300 / 7150)


def test_every_replay_report_answers_the_same_on_sqlite_and_postgresql(tmp_path, pg_url):
    """The seven reports over the same rows on both backends: the same columns, rows and
    figures (PostgreSQL's NUMERIC read as floats, as run_report does), at two ratios."""
    answers = []
    for url in (str(tmp_path / "s.db"), pg_url):
        with ContextStore.open(url) as store:
            _write_replay(store)
            with store.engine.connect() as connection:
                answers.append({
                    (name, ratio): run_report(connection, name, {"cached_price_ratio": ratio})
                    for name in SECTIONS.values() for ratio in (CACHED_PRICE_RATIO, OTHER_RATIO)})
    on_sqlite, on_postgresql = answers
    for key, report in on_sqlite.items():
        assert report.rows, key
        assert on_postgresql[key].columns == report.columns, key
        # a count is a whole number on both (a sum of sums is NUMERIC on PostgreSQL)
        assert [[type(v) for v in row] for row in on_postgresql[key].rows] == [
            [type(v) for v in row] for row in report.rows], (key, sorted({
                (column, type(a).__name__, type(b).__name__)
                for pg_row, row in zip(on_postgresql[key].rows, report.rows, strict=True)
                for column, a, b in zip(report.columns, pg_row, row, strict=True)
                if type(a) is not type(b)}))
        assert on_postgresql[key].rows == [
            tuple(pytest.approx(v) if isinstance(v, float) else v for v in row)
            for row in report.rows], key


# --- screen, JSON, HTML ----------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite"])
def test_the_screen_json_and_page(replay_store):
    with replay_store.engine.connect() as connection:
        screen = replay_screen(connection)
        document = json.loads(replay_json(connection, cached_price_ratio=OTHER_RATIO))
        page = replay_html(connection)
    lines = screen.splitlines()
    assert "a cached prompt token at 0.1 of an input token's price" in screen
    # current: 2 runs, 1 resolved, 6 decisions, median, p90, total, per resolved run, and
    # its tokens over mask10's (14,000 / 12,100)
    assert ["replay", "current", "2", "1", "6", "2,000", "4,000", "14,000", "14,000",
            "1.157"] in [line.split() for line in lines]
    assert ["replay", "current", "0.507", "7,610", "2,740", "7,610", "1.000", "0", "2"] in [
        line.split() for line in lines]  # cached share and cost, over current's
    # the issue's ratios where they are read: 5,250 / 12,100 and 3,810 / 7,610
    assert [line.split()[-1] for line in lines
            if line.split()[:3] == ["replay", "ctx08", "2"]] == ["0.434"]
    assert "0.501" in [line.split()[6] for line in lines
                       if line.split()[:2] == ["replay", "ctx08"] and len(line.split()) == 9]
    assert ["replay", "ctx08", "path", "3", "2", "0.667", "1", "0", "0.000"] in [
        line.split() for line in lines]  # recall as fractions
    assert ["replay", "ctx08", "path", "2", "1", "0.500"] in [
        line.split() for line in lines]  # on a known tree, a table of its own
    assert "Where the lost anchors went" in screen and "apply" in screen
    assert ["replay", "ctx08", "harness_prompt", "–", "4", "1,930", "482", "0.515"] in [
        line.split() for line in lines]  # where the tokens went
    # the steps pivoted: run, seq, runs, then one column per arm, the reference first
    header = next(line for line in lines if line.startswith("run_id") and "seq" in line)
    assert header.split() == ["run_id", "seq", "runs", "current", "mask10", "ctx08"]
    assert any(line.split() == ["replay", "1", "2", "1,000", "1,000", "700"] for line in lines)

    assert list(document) == list(SECTIONS)
    assert document["arms"]["parameters"] == {"cached_price_ratio": OTHER_RATIO}
    assert document["recall"]["parameters"] == {}
    assert document["lengths"]["parameters"] == {"cached_price_ratio": OTHER_RATIO,
                                                 "length_groups": 4}
    assert "By run length" in screen and "By run length" in page
    current = next(r for r in document["arms"]["rows"]
                   if (r["run_id"], r["arm"]) == (RUN, "current"))
    assert current["cost_tokens"] == pytest.approx(10450)

    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 2  # one per run
    assert all(f'data-arm="{arm}"' in page for arm in ("current", "mask10", "ctx08"))
    assert "<polyline" in page and "<script" not in page
    assert "http://" not in page.replace("http://www.w3.org", "")  # no external asset


@pytest.mark.parametrize("backend", ["sqlite"])
def test_the_page_escapes_text_from_the_store(store_url):
    hostile = "<b>&run"
    with ContextStore.open(store_url) as store:
        with store.write_transaction() as connection:
            connection.execute(text("INSERT INTO run (run_id, created_at) VALUES (:r, 'now')"),
                               {"r": hostile})
            connection.execute(text(
                "INSERT INTO replay_run (run_id, instance_id, trajectory, trajectory_format,"
                " decisions, tree_matches_submission, tree_note, created_at) VALUES"
                " (:r, 'a', 't', 'mini-swe-agent-1', 1, false, '<i>why: x', 'now')"),
                {"r": hostile})
            connection.execute(text(
                "INSERT INTO replay_decision (run_id, instance_id, seq, arm, prompt_tokens,"
                " cached_tokens, action_kind, tree_known, refused)"
                " VALUES (:r, 'a', 1, 'current', 10, 0, 'other', true, false)"), {"r": hostile})
        with store.engine.connect() as connection:
            page = replay_html(connection)
    assert hostile not in page and "<i>" not in page
    assert "&lt;b&gt;&amp;run" in page and "&lt;i&gt;why" in page


# --- CLI -------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite"])
def test_cli_report_replay(replay_store, store_url, tmp_path, capsys):
    assert main(["report", "replay", "--db", store_url]) == EXIT_OK
    screen, err = capsys.readouterr()
    assert "7,610" in screen and "mask10" in screen
    assert err == ""

    assert main(["report", "replay", "--db", store_url, "--format", "json",
                 "--cached-price-ratio", "0.5"]) == EXIT_OK
    document = json.loads(capsys.readouterr().out)
    assert list(document) == list(SECTIONS)
    costs = {(r["run_id"], r["arm"]): r["cost_tokens"] for r in document["arms"]["rows"]}
    assert costs[(RUN, "current")] == pytest.approx(10450)

    page_file = tmp_path / "replay.html"
    assert main(["report", "replay", "--db", store_url, "--format", "html",
                 "--output", str(page_file)]) == EXIT_OK
    assert capsys.readouterr().out.strip() == f"wrote {page_file}"
    page = page_file.read_text(encoding="utf-8")
    assert "<svg" in page and all(arm in page for arm in ("current", "mask10", "ctx08"))
    # the A/B page of a replay: no precision to plot, and none drawn as 0
    assert main(["report", "ab", "--db", store_url, "--format", "html",
                 "--output", str(page_file)]) == EXIT_OK
    capsys.readouterr()
    page = page_file.read_text(encoding="utf-8")
    assert "no decision has a precision" in page and "<circle" not in page

    # --arms: only those arms' rows, in every section (a section without arms as it is),
    # and in one report alone; an arm the replays lack is named with those they have
    assert main(["report", "replay", "--db", store_url, "--format", "json",
                 "--arms", "ctx08, mask10"]) == EXIT_OK
    picked = json.loads(capsys.readouterr().out)
    for section, body in picked.items():
        arms = {row["arm"] for row in body["rows"] if "arm" in row}
        assert arms <= {"ctx08", "mask10"} and (arms or section in ("parts", "fidelity")), \
            section
    assert picked["fidelity"] == document["fidelity"]
    assert main(["report", "replay_recall", "--db", store_url, "--format", "json",
                 "--arms", "current"]) == EXIT_OK
    assert {r["arm"] for r in json.loads(capsys.readouterr().out)["rows"]} == {"current"}
    for bad, said in (("ctx8,current", "--arms: no arm 'ctx8' in this store's replays (its "
                                       "arms: ctx08, current, mask10)"),
                      (",", "--arms: no arm named for this store's replays")):
        assert main(["report", "replay", "--db", store_url, "--arms", bad]) == EXIT_BAD_INPUT
        assert said in capsys.readouterr().err
    assert main(["report", "arms", "--db", store_url, "--arms", "ctx08"]) == EXIT_BAD_INPUT
    assert "--arms: picks the arms of a replay report" in capsys.readouterr().err

    # one replay report alone takes the ratio too
    assert main(["report", "replay_arms", "--db", store_url, "--format", "json",
                 "--cached-price-ratio", "1"]) == EXIT_OK
    rows = json.loads(capsys.readouterr().out)["rows"]
    current = next(r for r in rows if (r["run_id"], r["arm"]) == (RUN, "current"))
    assert current["cost_tokens"] == pytest.approx(14000)  # a cache read at full price

    for bad in ("1.5", "-0.1", "nan", "a tenth"):
        assert main(["report", "replay", "--db", store_url,
                     "--cached-price-ratio", bad]) == EXIT_BAD_INPUT
        assert "--cached-price-ratio" in capsys.readouterr().err

    # and the number of length groups, in the whole replay and in its report alone
    assert main(["report", "replay", "--db", store_url, "--format", "json",
                 "--length-groups", "1"]) == EXIT_OK
    lengths = json.loads(capsys.readouterr().out)["lengths"]
    assert lengths["parameters"] == {"cached_price_ratio": CACHED_PRICE_RATIO,
                                     "length_groups": 1}
    assert {r["length_group"] for r in lengths["rows"]} == {1}
    assert main(["report", "replay", "--db", store_url, "--length-groups", "3"]) == EXIT_OK
    assert "By run length: the runs in up to 3 groups" in capsys.readouterr().out
    assert main(["report", "replay_lengths", "--db", store_url, "--format", "json",
                 "--length-groups", "1"]) == EXIT_OK
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert {r["length_group"] for r in rows} == {1}
    assert next(r for r in rows if (r["run_id"], r["arm"]) == (RUN, "ctx08"))["runs"] == 2
    for bad in ("0", "-2", "1.5", "four", str(2**31)):
        assert main(["report", "replay", "--db", store_url,
                     "--length-groups", bad]) == EXIT_BAD_INPUT
        assert "--length-groups" in capsys.readouterr().err


def test_a_store_without_replay_runs_says_so_once(tmp_path, capsys):
    db = tmp_path / "ab.db"
    ContextStore.open(str(db)).close()
    for name in ("replay", "replay_arms", "replay_steps"):
        assert main(["report", name, "--db", str(db)]) == EXIT_OK
        assert capsys.readouterr().err == (f"{name}: no replay runs in {db} (ctxdb replay "
                                           "RUNS.jsonl --db STORE makes them; docs/replay.md)\n")
    # another report of an empty store is not the replay's to explain
    assert main(["report", "runs", "--db", str(db)]) == EXIT_OK
    assert capsys.readouterr().err == ""


def test_a_message_names_a_server_store_without_its_password():
    from types import SimpleNamespace

    from sqlalchemy import create_engine

    from ctxdb.cli.report import _store_shown

    engine = create_engine("postgresql+psycopg://ana:s3cret@db.example/ctx")
    assert _store_shown(SimpleNamespace(engine=engine)) \
        == "postgresql+psycopg://ana:***@db.example/ctx"
    engine.dispose()


@pytest.mark.parametrize("backend", ["sqlite"])
def test_the_canned_query_runs_with_the_default_ratio(replay_store, store_url):
    """Datasette runs a canned query as it stands: the ratio is written in as its default."""
    import sqlite3

    from ctxdb.analyst import canned_queries

    query = {q.name: q for q in canned_queries()}["replay_arms"]
    assert query.params == () and "cached_price_ratio = 0.1" in query.description
    with sqlite3.connect(store_url) as connection:
        connection.row_factory = sqlite3.Row
        rows = connection.execute(query.sql).fetchall()
    current = next(r for r in rows if (r["run_id"], r["arm"]) == (RUN, "current"))
    assert current["cost_tokens"] == pytest.approx(7610)
    # the groups' number too (NTILE's argument)
    lengths = {q.name: q for q in canned_queries()}["replay_lengths"]
    assert lengths.params == () and "length_groups = 4" in lengths.description
    with sqlite3.connect(store_url) as connection:
        groups = {row[1] for row in connection.execute(lengths.sql)}
    assert groups == {1, 2}


def test_a_csv_shows_a_sum_of_floats_without_its_rounding_noise():
    from ctxdb.ab.reports import Report, as_csv

    report = Report("r", "", ["run_id", "cost", "count"], [("x", 0.1 + 0.2, 3),
                                                          ("y", 7815562.900000003, None)])
    assert as_csv(report).splitlines() == ["run_id,cost,count", "x,0.3,3", "y,7815562.9,"]
