"""A live agent loop's cost under a prompt cache, from the store alone: v_decision_cached
counts what each decision shares with the one before it, `ctxdb report loop_cost` prices
it per arm (issue 22, item 5)."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import os

import pytest
from requests_data import edit_request
from sqlalchemy import text

from ctxdb import ContextStore, forensics, models
from ctxdb.agent.adapter import construct_step
from ctxdb.agent.arms import (
    CHAT_MESSAGE_OVERHEAD_TOKENS,
    CHAT_REPLY_PRIMING_TOKENS,
    PromptCounter,
)
from ctxdb.agent.cache_marks import cache_marked_messages
from ctxdb.agent.loop import LoopStep
from ctxdb.cli import main as cli_main
from ctxdb.outcomes import record_outcome
from ctxdb.tokens import get_counter

PREFIX = [{"role": "system", "content": "You are a bash agent. Reply with one command."},
          {"role": "user", "content": "Fix it.\n<task>function_3 subtracts</task>"}]
STEPS_RUN = 16  # past the first fold: a ctx08 window changes before its end there
# a fold's first change: the first part it folds (the header's and the first step's)
FOLD_CHANGES_FROM = 2
RATIO = 0.1  # the report's default cached price ratio
WRAP = "<returncode>0</returncode>\n<output>\n{}</output>".format


MODULE = "".join(f"def function_{n}(a, b):\n    return a + b\n\n\n" for n in range(12))
EDIT = "sed -i 's/return a + b/return b + a/' pkg/mod.py"
EDIT_STEP = 6  # the step whose command edits the file step 1 printed
# steps 2 and 3 print long logs: the first fold shrinks the window by more than it
# re-sends (paying folds), so it is made
LONG_LOG_STEPS = 3
LONG_LOG_LINES = 200
SOLO_STEPS = 3  # decisions of a ctx08 run of an instance the current arm did not run


def _long_log(step: int) -> str:
    return "".join(f"step {step}: line {n} of a long log\n" for n in range(LONG_LOG_LINES))


def _history(root):
    """Steps that print a file, then do other things, edit that file and go on; and the
    messages a harness would have sent for them."""
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text(MODULE, encoding="utf-8")
    steps, sent = [], list(PREFIX)
    for k in range(1, STEPS_RUN + 1):
        command, output = ((EDIT, "") if k == EDIT_STEP else ("cat pkg/mod.py", MODULE)
                           if k == 1 else (f"echo step {k}", f"step {k}\n" * (5 + k))
                           if k > LONG_LOG_STEPS else (f"run {k}", _long_log(k)))
        steps.append(LoopStep(command, output, thought=f"Look at step {k}.",
                              observation=WRAP(output), returncode=0))
        sent += [{"role": "assistant", "content": f"THOUGHT: Look at step {k}.\n\n```bash\n"
                                                  f"{command}\n```"},
                 {"role": "user", "content": WRAP(output)}]
    return steps, sent


def _cached_rows(store):
    with store.engine.connect() as connection:
        return {row.decision_id: row for row in connection.exec_driver_sql(
            "SELECT c.decision_id, c.run_id, c.seq, c.token_count, c.cached_tokens,"
            " c.previous_decision_id, c.first_changed_position, c.cached_at_marks_tokens,"
            " c.cache_marked FROM v_decision_cached c ORDER BY c.run_id, c.seq")}


def _served_at_marks(before, now) -> int:
    """What a cache that serves only at marks serves of ``now`` after ``before`` (one
    decision back, no lookback limit), read from the marked messages themselves: the
    longest marked start of ``before`` that ``now`` repeats block for block, counted as
    v_decision_cached counts (all but the window's items, then the items served)."""
    fixed = now.token_count - sum(entry.token_count for entry in now.window)
    if not before.window:  # the harness's prompt alone: all of it is served
        return before.token_count
    blocks = [cache_marked_messages(c, PREFIX)[-1]["content"] for c in (before, now)]
    marked = [i for i, block in enumerate(blocks[0]) if "cache_control" in block]
    texts = [[block["text"] for block in b] for b in blocks]
    served = max([0] + [i + 1 for i in marked if texts[1][:i + 1] == texts[0][:i + 1]])
    items = [entry for entry in now.window if entry.text]  # a block each, after any task's
    return fixed + sum(entry.token_count for entry in items[:served - (len(texts[1])
                                                                       - len(items))])


PARKED_SEQ = 10_000  # a step number no run of these tests reaches


def test_a_marks_only_cache_serves_a_window_up_to_a_mark_the_one_before_put(store_url,
                                                                           tmp_path):
    """Windows no live run makes (construct_step refuses a history that does not go on
    from the one before), which a store may hold all the same (one written before that
    check): one that is the start of the one before, and one that changed just before the
    previous newest step's mark. The first is built, set past the run's steps, the
    second built, then the first numbered as the step before it, as such a store holds
    them."""
    steps, _sent = _history(tmp_path / "tree")
    bare = [dataclasses.replace(step, thought="") for step in steps]  # no reasoning last
    changed = dataclasses.replace(bare[0], output="other\n", observation=WRAP("other\n"))

    def renumber(store, decision_id: int, seq: int) -> None:
        with store.write_transaction() as connection:
            connection.execute(text("UPDATE decision SET seq = :seq "
                                    "WHERE decision_id = :decision_id"),
                               {"seq": seq, "decision_id": decision_id})

    with ContextStore.open(store_url) as store:
        cases = {"start of the one before": (bare[:3], bare[:1]),
                 "changed before its newest step": (bare[:2], [changed, bare[1]])}
        built = {}
        for name, (first, second) in cases.items():
            windows = []
            for shown in (first, second):
                windows.append(construct_step(store, run_id=name, instance_id="i",
                                              task="function_3 subtracts", steps=shown,
                                              tree=tmp_path / "tree", prefix=PREFIX))
                if len(windows) == 1:  # past any step: no later step reads it as earlier
                    renumber(store, windows[0].decision_id, PARKED_SEQ)
            renumber(store, windows[0].decision_id, len(second))
            built[name] = windows
        rows = _cached_rows(store)
    for name, (before, now) in built.items():
        besides_items = now.token_count - sum(entry.token_count for entry in now.window)
        row = rows[now.decision_id]
        assert row.cached_at_marks_tokens == _served_at_marks(before, now), name
        # the one before marked before its newest step and at its end: neither is a
        # start this window repeats (its first items are, but no mark stood there)
        assert row.cached_at_marks_tokens == besides_items, name
        assert row.cached_tokens > besides_items, name  # any shared start is served


def test_a_decision_counts_as_sent_marked_by_its_flag_exactly(store_url, tmp_path):
    steps, _sent = _history(tmp_path / "tree")
    flags = {"": 0, "cache_marked": 1, "task_in_prefix,cache_marked,fold_waited:10": 1,
             "cacheXmarked": 0, "CACHE_MARKED": 0, "cache_marked_not": 0, "xcache_marked": 0}
    with ContextStore.open(store_url) as store:
        decisions = {}
        for number, flag in enumerate(flags):
            decisions[flag] = construct_step(store, run_id=f"r{number}", instance_id="i",
                                             task="t", steps=steps[:1], tree=tmp_path / "tree",
                                             prefix=PREFIX).decision_id
            with store.write_transaction() as connection:
                connection.execute(models.decision.update().where(
                    models.decision.c.decision_id == decisions[flag]).values(flags=flag))
        rows = _cached_rows(store)
    assert {flag: rows[decision].cache_marked for flag, decision in decisions.items()} == flags


def test_each_decision_counts_what_it_shares_with_the_one_before(store_url, tmp_path,
                                                                capsys):
    steps, sent = _history(tmp_path / "tree")
    with ContextStore.open(store_url) as store:
        counter = PromptCounter(get_counter(store.settings.tokenizer).count)
        runs = {"ctx08": [], "current": []}
        for done in range(STEPS_RUN + 1):
            if done == EDIT_STEP:  # the edit ran: the tree holds its change from here on
                edited = MODULE.replace("return a + b", "return b + a")
                (tmp_path / "tree" / "pkg" / "mod.py").write_text(edited, encoding="utf-8")
            for arm, decisions in runs.items():
                shown = sent[:len(PREFIX) + 2 * done] if arm == "current" else None
                # the ctx08 run's windows go marked, as the wrapper sends them to Claude
                context = construct_step(store, run_id=f"live-{arm}", instance_id="i",
                                         task="function_3 subtracts", steps=steps[:done],
                                         tree=tmp_path / "tree", prefix=PREFIX, arm=arm,
                                         sent=shown, cache_marks=arm == "ctx08")
                messages = shown if arm == "current" else context.messages(prefix=PREFIX)
                decisions.append((context, messages))
        rows = _cached_rows(store)
        with store.engine.connect() as connection:  # what the model got, given back
            for context, _ in runs["ctx08"]:
                assert forensics.messages_sent(connection, context.decision_id) == \
                    cache_marked_messages(context, PREFIX) != context.messages(prefix=PREFIX)
                assert "cache_marked" in context.flags
                assert rows[context.decision_id].cache_marked == 1
        assert not any(rows[c.decision_id].cache_marked for c, _ in runs["current"])
        for arm, decisions in runs.items():
            previous, shown_before = None, {}
            for context, messages in decisions:
                row = rows[context.decision_id]
                exact = counter.cached_tokens(previous, messages)
                previous = messages
                assert row.token_count == context.token_count
                shown = {e.position: e.text for e in context.window}
                before, shown_before = shown_before, shown
                if row.previous_decision_id is None:
                    assert row.cached_tokens == 0
                    continue
                # by whole items: the replay's count, give or take the framing (the
                # reply's priming, which this counts as served, and the changed message's
                # own) and the shared start of the first changed item, which the replay
                # counts and this does not
                position = row.first_changed_position
                common = os.path.commonprefix([shown.get(position, ""),
                                               before.get(position, "")])
                missed = counter.count_text(common)
                assert (exact - missed - 1 <= row.cached_tokens
                        <= exact + CHAT_REPLY_PRIMING_TOKENS + CHAT_MESSAGE_OVERHEAD_TOKENS), \
                    (arm, context.decision_id, exact, row.cached_tokens)
            if arm == "current":  # an append-only history: all the last prompt is served
                for (before, _), (now, _) in itertools.pairwise(decisions):
                    assert rows[now.decision_id].cached_tokens == before.token_count
                    assert rows[now.decision_id].cached_at_marks_tokens == before.token_count
            else:  # served at marks: up to the last mark the window before put at a start
                # this one repeats block for block (cache_marked_messages's own blocks)
                for (before, _), (now, _) in itertools.pairwise(decisions):
                    assert rows[now.decision_id].cached_at_marks_tokens == \
                        _served_at_marks(before, now), now.decision_id
                    assert rows[now.decision_id].cached_at_marks_tokens <= \
                        rows[now.decision_id].cached_tokens
        # a fold changes a ctx08 window near its start: little of it is served then
        # (from the first decision with a window: the one before it sent the prompt alone)
        ctx08 = [rows[c.decision_id] for c, _ in runs["ctx08"][1:]]
        folds = [(before, after) for before, after in itertools.pairwise(ctx08)
                 if after.first_changed_position is not None
                 and after.first_changed_position <= FOLD_CHANGES_FROM]
        assert folds
        assert all(after.cached_tokens < before.token_count / 2 for before, after in folds)

        # the report: each arm's cost with cache reads at a tenth, per solved instance
        record_outcome(store, "live-ctx08", "i", True)
        record_outcome(store, "live-current", "i", False)
        # not a live loop's: a pipeline decision, and a replay's record of its windows
        store.construct(edit_request(run_id="pipeline"))
        construct_step(store, run_id="replayed", instance_id="i", task="t", steps=steps[:2],
                       tree=tmp_path / "tree", prefix=PREFIX)
        with store.write_transaction() as connection:
            connection.execute(models.replay_run.insert().values(
                run_id="replayed", instance_id="i", trajectory="i.traj.json",
                trajectory_format="mini-swe-agent", decisions=2, created_at="now"))
        # another task of as many tokens, sent in the window: nothing is served (a
        # pipeline run's decisions: a loop refuses a step of another task than its last)
        for seq, task in ((4, "zebra one"), (5, "zebra two")):
            retasked = store.construct(edit_request(run_id="retasked", instance_id="i",
                                                    seq=seq, task=task))
        assert _cached_rows(store)[retasked.decision_id].cached_tokens == 0
        # an instance the current arm did not run: counted, not compared
        for done in range(SOLO_STEPS):
            construct_step(store, run_id="solo", instance_id="j", task="function_3 subtracts",
                           steps=steps[:done], tree=tmp_path / "tree", prefix=PREFIX)
    capsys.readouterr()
    assert cli_main(["report", "loop_cost", "--db", store_url, "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    by_arm = {row["arm"]: row for row in report["rows"]}
    assert sorted(by_arm) == ["ctx08", "current"]
    assert [(by_arm[arm]["instances"], by_arm[arm]["instance_runs"],
             by_arm[arm]["paired_instances"]) for arm in ("ctx08", "current")] == \
        [(2, 2, 1), (1, 1, 1)]
    with ContextStore.open(store_url) as store:
        rows = _cached_rows(store)
    for arm in ("ctx08", "current"):
        runs_of_arm = (f"live-{arm}", "solo") if arm == "ctx08" \
            else (f"live-{arm}",)
        mine = [row for row in rows.values() if row.run_id in runs_of_arm]
        tokens = sum(row.token_count for row in mine)
        cached = sum(row.cached_tokens for row in mine)
        got = by_arm[arm]
        assert (got["decisions"], got["tokens"], got["cached_tokens"]) == (
            STEPS_RUN + 1 + (arm == "ctx08") * SOLO_STEPS, tokens, cached)
        assert abs(got["cost_tokens"] - (tokens - cached + RATIO * cached)) < 1e-6
        assert got["cached_share"] == cached / tokens
        at_marks = sum(row.cached_at_marks_tokens for row in mine)
        assert got["cached_at_marks_tokens"] == at_marks <= cached
        assert abs(got["cost_at_marks_tokens"] - (tokens - at_marks + RATIO * at_marks)) < 1e-6
        # the live ctx08 run went marked, the solo one not, nor the current arm
        assert got["cache_marked_decisions"] == (STEPS_RUN + 1 if arm == "ctx08" else 0)
    assert by_arm["ctx08"]["solved"] == 1 and by_arm["current"]["solved"] == 0
    assert by_arm["ctx08"]["cost_per_solved"] == by_arm["ctx08"]["cost_tokens"]
    assert by_arm["ctx08"]["instances_with_outcome"] == 1
    assert by_arm["current"]["cost_per_solved"] is None
    assert by_arm["current"]["cost_of_current"] == 1.0
    # against current on instance i alone, by its graded run (solo's j has no outcome)
    for column, cached_column in (("cost_of_current", "cached_tokens"),
                                  ("cost_at_marks_of_current", "cached_at_marks_tokens")):
        assert abs(by_arm["ctx08"][column]
                   - _run_cost(rows, "live-ctx08", cached_column)
                   / _run_cost(rows, "live-current", cached_column)) < 1e-9, column
        assert by_arm["current"][column] == 1.0
    # the window's changes inside what it repeats cost it more where only marks serve
    assert by_arm["ctx08"]["cached_at_marks_tokens"] < by_arm["ctx08"]["cached_tokens"]


def _run_cost(rows, run_id, cached_column="cached_tokens"):
    """A run's cost in token units, a cached token at ``RATIO``."""
    mine = [row for row in rows.values() if row.run_id == run_id]
    return sum(row.token_count - (1 - RATIO) * getattr(row, cached_column) for row in mine)


def test_arms_compare_on_the_instances_both_ran_by_their_graded_runs(store_url, tmp_path,
                                                                    capsys):
    """cost_of_current pairs instances, not runs: an instance one arm alone ran is left
    out, an instance run several times counts the mean of its graded runs (of all, when
    none is graded), each variant against its own current arm; solved counts instances."""
    steps, _ = _history(tmp_path / "tree")
    # run: (arm, variant, instance, decisions, outcome: solved, or None for none)
    runs = {"a1": ("ctx08", "default", "i", 4, True),
            "a2": ("ctx08", "default", "i", 1, None),  # left unfinished, run again as a1
            "a3": ("ctx08", "default", "k", 3, True),
            "a4": ("ctx08", "default", "k", 5, True),  # k solved twice: one instance
            "a5": ("ctx08", "default", "j", 2, None),  # current did not run j
            "c1": ("current", "default", "i", 3, False),
            "c2": ("current", "default", "k", 2, True),
            "b1": ("ctx08", "v2", "i", 2, None),
            "b2": ("ctx08", "v2", "i", 5, None),
            "d1": ("current", "v2", "i", 4, None),
            "e1": ("ctx08", "v3", "i", 3, None)}  # no current arm of v3
    with ContextStore.open(store_url) as store:
        for run_id, (arm, variant, instance, decisions, solved) in runs.items():
            for done in range(decisions):
                construct_step(store, run_id=run_id, instance_id=instance, task="t",
                               steps=steps[:done], tree=tmp_path / "tree", prefix=PREFIX,
                               arm=arm)
            with store.write_transaction() as connection:  # the schema's variants
                connection.execute(models.run.update().where(
                    models.run.c.run_id == run_id).values(variant=variant))
            if solved is not None:
                record_outcome(store, run_id, instance, solved)
        rows = _cached_rows(store)
    capsys.readouterr()
    assert cli_main(["report", "loop_cost", "--db", store_url, "--format", "json"]) == 0
    report = {(row["arm"], row["variant"]): row
              for row in json.loads(capsys.readouterr().out)["rows"]}
    cost = functools.partial(_run_cost, rows)
    ctx08 = report[("ctx08", "default")]
    assert (ctx08["instances"], ctx08["instance_runs"], ctx08["instances_with_outcome"],
            ctx08["solved"], ctx08["paired_instances"]) == (3, 5, 2, 2, 2)
    assert ctx08["cost_per_solved"] == pytest.approx(ctx08["cost_tokens"] / 2)
    assert ctx08["cost_of_current"] == pytest.approx(
        (cost("a1") + (cost("a3") + cost("a4")) / 2) / (cost("c1") + cost("c2")))
    assert report[("ctx08", "v2")]["cost_of_current"] == pytest.approx(
        (cost("b1") + cost("b2")) / 2 / cost("d1"))
    assert report[("ctx08", "v2")]["paired_instances"] == 1
    assert (report[("ctx08", "v3")]["paired_instances"],
            report[("ctx08", "v3")]["cost_of_current"]) == (0, None)
    assert report[("current", "default")]["solved"] == 1
    # the A/B screen counts raw tokens: on live loop runs it points to this report
    assert cli_main(["report", "ab", "--db", store_url]) == 0
    assert "their cost under a prompt cache, paired by instance, is `ctxdb report " \
        "loop_cost`" in capsys.readouterr().out


def test_a_store_without_live_loop_runs_says_why_the_report_is_empty(store_url, tmp_path,
                                                                    capsys):
    steps, _ = _history(tmp_path / "tree")
    with ContextStore.open(store_url) as store:  # a pipeline decision: not a loop's
        store.construct(edit_request(run_id="pipeline"))
    capsys.readouterr()
    assert cli_main(["report", "loop_cost", "--db", store_url, "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["rows"] == []
    assert "loop_cost: no live agent-loop runs in" in err and "ctxdb report replay" in err
    assert cli_main(["report", "ab", "--db", store_url]) == 0
    assert "ctxdb report loop_cost" not in capsys.readouterr().out  # no loop run: no word
    with ContextStore.open(store_url) as store:
        construct_step(store, run_id="live", instance_id="i", task="t", steps=steps[:1],
                       tree=tmp_path / "tree", prefix=PREFIX)
    assert cli_main(["report", "loop_cost", "--db", store_url]) == 0
    assert capsys.readouterr().err == ""


def test_a_step_sent_as_the_harness_built_it_serves_its_prompt_from_the_cache(store_url,
                                                                             tmp_path):
    """A window, then a step whose window could not fit (sent as the harness's messages,
    flag harness_sent_over_ceiling), then a window again: at each change the harness's
    prompt is served, as the replay's counter of the messages sent says."""
    from ctxdb.config import MIN_TOKEN_CEILING, load_settings

    steps, sent = _history(tmp_path / "tree")
    # a prompt a window fits beside at the usual ceiling, not at the least one
    prefix = [{**PREFIX[0], "content": PREFIX[0]["content"] + " Be careful." * 60},
              PREFIX[1]]
    sent = [*prefix, *sent[len(PREFIX):]]
    settings = load_settings()
    sent_by_decision = {}
    for done, ceiling in ((1, settings.token_ceiling), (2, MIN_TOKEN_CEILING),
                          (3, settings.token_ceiling)):
        shown = sent[:len(prefix) + 2 * done]
        with ContextStore.open(store_url, settings=dataclasses.replace(
                settings, token_ceiling=ceiling)) as store:
            context = construct_step(store, run_id="fallback", instance_id="i",
                                     task="function_3 subtracts", steps=steps[:done],
                                     tree=tmp_path / "tree", prefix=prefix,
                                     sent_if_over_ceiling=shown)
        fell_back = "harness_sent_over_ceiling" in context.flags
        assert fell_back == (ceiling == MIN_TOKEN_CEILING), done
        sent_by_decision[context.decision_id] = (
            shown if fell_back else context.messages(prefix=prefix))
    with ContextStore.open(store_url) as store:
        rows = _cached_rows(store)
        counter = PromptCounter(get_counter(store.settings.tokenizer).count)
    (first, fallback, after) = sorted(sent_by_decision)
    for before, now in ((first, fallback), (fallback, after)):
        exact = counter.cached_tokens(sent_by_decision[before], sent_by_decision[now])
        served = rows[now].cached_tokens
        assert exact - CHAT_MESSAGE_OVERHEAD_TOKENS <= served \
            <= exact + CHAT_REPLY_PRIMING_TOKENS + CHAT_MESSAGE_OVERHEAD_TOKENS, \
            (now, exact, served)
        assert served > counter.count_text(prefix[0]["content"])  # the prompt, not 0
