"""A loop window marked for a prompt cache that serves only at marks (Anthropic's
``cache_control``): ctxdb.agent.cache_marks, and tools/cache_marks.py, which plays such a
cache over a replay's windows."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from ctxdb import ContextStore, forensics
from ctxdb.agent.adapter import construct_step
from ctxdb.agent.arms import CHAT_MESSAGE_OVERHEAD_TOKENS, CHAT_REPLY_PRIMING_TOKENS
from ctxdb.agent.cache_marks import (
    CACHE_MARK,
    PROVIDER_MARKS_MAX,
    cache_marked_messages,
    middle_mark,
    newest_step_start,
)
from ctxdb.agent.loop import LoopStep, item_numbers
from ctxdb.request import RequestError

PREFIX = [{"role": "system", "content": "You are a bash agent. Reply with one command."},
          {"role": "user", "content": "Fix it.\n<task>the sum is wrong</task>"}]
WRAP = "<returncode>0</returncode>\n<output>\n{}</output>".format
STEPS = [LoopStep(f"echo step {k}", f"step {k}\n", thought=f"Step {k}.",
                  observation=WRAP(f"step {k}\n"), returncode=0) for k in range(1, 6)]


@pytest.fixture
def cache_marks_tool(monkeypatch):
    """tools/cache_marks.py loaded as a module (it is a script, not part of the package)."""
    path = Path(__file__).resolve().parent.parent / "tools" / "cache_marks.py"
    spec = importlib.util.spec_from_file_location("cache_marks_tool", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "cache_marks_tool", module)
    spec.loader.exec_module(module)
    return module


def _blocks(messages):
    return [(m["role"], block["text"], block.get("cache_control"))
            for m in messages for block in (m["content"] if isinstance(m["content"], list)
                                            else [{"text": m["content"]}])]


def test_the_window_goes_in_blocks_marked_after_the_prompt_before_the_newest_step_and_at_its_end(
        tmp_path):
    with ContextStore.open(tmp_path / "s.db") as store:
        contexts = [construct_step(store, run_id="r", instance_id="i", task="the sum is wrong",
                                   steps=STEPS[:done], tree=None, prefix=PREFIX)
                    for done in range(len(STEPS) + 1)]
    first = cache_marked_messages(contexts[0], PREFIX)  # the harness's prompt alone
    assert _blocks(first) == [("system", PREFIX[0]["content"], None),
                              ("user", PREFIX[1]["content"], CACHE_MARK)]
    for done, context in enumerate(contexts[1:], start=1):
        marked = cache_marked_messages(context, PREFIX)
        plain = context.messages(prefix=PREFIX)
        assert [(m["role"], "".join(t for _, t, _ in _blocks([m]))) for m in marked] == \
            [(m["role"], m["content"]) for m in plain]  # the same texts
        window = _blocks(marked)[2:]
        assert [text for _, text, _ in window] == [e.text for e in context.window if e.text]
        marks = [index for index, (_, _, mark) in enumerate(window) if mark]
        # the newest reasoning goes last: marked before it and after it
        assert window[-1][1].startswith(f"[step {done}, your reasoning]")
        assert marks == [len(window) - 2, len(window) - 1]
        assert len(marks) + 1 < PROVIDER_MARKS_MAX  # the prompt's, and one for the harness
        assert PREFIX[1]["content"] == marked[1]["content"][0]["text"]  # the prompt's mark
    # a window with a task block (the prompt does not carry the task): its own block
    with ContextStore.open(tmp_path / "t.db") as store:
        context, unprompted = (
            construct_step(store, run_id=run_id, instance_id="i", task="another task",
                           steps=STEPS[:2], tree=None, prefix=prefix)
            for run_id, prefix in (("r", PREFIX), ("unprompted", ())))
    window = _blocks(cache_marked_messages(context, PREFIX))[2:]
    assert "another task" in window[0][1] and window[0][2] is None
    # with no prefix the task block is the system message, sent once, as unmarked
    bare = cache_marked_messages(unprompted, [])
    assert [(m["role"], "".join(t for _, t, _ in _blocks([m]))) for m in bare] == \
        [(m["role"], m["content"]) for m in unprompted.messages(prefix=[])]
    assert bare[0]["role"] == "system" and "another task" in bare[0]["content"]
    with pytest.raises(RequestError, match=r"^prefix: expected the 2 harness messages"):
        cache_marked_messages(context, [])  # counted with a prompt: sent without it


def test_a_window_sent_marked_is_recorded_so_and_given_back_marked(tmp_path):
    """``cache_marks=True`` flags the decision, and the store gives back the marked
    blocks the model got; the current arm, which sends the harness's own messages, is
    refused the switch by name."""
    with ContextStore.open(tmp_path / "s.db") as store:
        marked, plain = (construct_step(store, run_id=run_id, instance_id="i",
                                        task="the sum is wrong", steps=STEPS[:3], tree=None,
                                        prefix=PREFIX, cache_marks=run_id == "marked")
                         for run_id in ("marked", "plain"))
        assert "cache_marked" in marked.flags and "cache_marked" not in plain.flags
        # the same window (but the run it names), sent otherwise
        assert [e.text.replace("run:marked:", "run:plain:") for e in marked.window] == \
            [e.text for e in plain.window]
        with store.engine.connect() as connection:
            assert forensics.messages_sent(connection, marked.decision_id) == \
                cache_marked_messages(marked, PREFIX)
            assert forensics.messages_sent(connection, plain.decision_id) == \
                plain.messages(prefix=PREFIX)
        assert store.messages_sent(marked.decision_id) == cache_marked_messages(marked, PREFIX)
        for arm, switch in (("current", True), ("ctx08", 1)):
            with pytest.raises(RequestError, match=r"^cache_marks: expected True or False"):
                construct_step(store, run_id=f"refused-{arm}", instance_id="i", task="t",
                               steps=STEPS[:1], prefix=PREFIX, arm=arm, cache_marks=switch)


def test_the_newest_steps_items_are_found_by_their_numbers():
    first_command, first_output, first_thought = item_numbers(1)
    second = item_numbers(2)
    assert newest_step_start([f"E{first_command}", f"E{first_output}", f"E{second[0]}",
                              f"E{second[1]}", f"E{second[2]}"]) == 2
    assert newest_step_start([f"E{first_command}", f"E{first_thought}"]) == 0
    assert newest_step_start([]) == 0
    assert newest_step_start(["task", f"E{second[0]}"]) == 1  # an item no step names
    # the middle mark: before the newest reasoning, which the next window drops; with
    # none last, before the newest step
    with_reasoning = [f"E{first_command}", f"E{first_output}", f"E{second[0]}",
                      f"E{second[1]}", f"E{second[2]}"]
    assert middle_mark(with_reasoning) == 4
    assert middle_mark(with_reasoning[:4]) == 2
    assert middle_mark([]) == 0


def test_a_cache_that_serves_only_at_marks_serves_a_window_only_where_one_stood(
        cache_marks_tool):
    tool = cache_marks_tool
    one, two, three = (item_numbers(k) for k in (1, 2, 3))

    def sent(items):  # a decision's tokens: the prompt (100), its window, the framing
        return (100 + CHAT_REPLY_PRIMING_TOKENS + sum(t for _, t, _ in items)
                + (CHAT_MESSAGE_OVERHEAD_TOKENS if items else 0))

    # four decisions: the prompt alone, then windows that keep their start and drop the
    # newest reasoning each time
    windows = [[],
               [(f"E{one[0]}", 10, "a"), (f"E{one[1]}", 10, "b"), (f"E{one[2]}", 10, "c")],
               [(f"E{one[0]}", 10, "a"), (f"E{one[1]}", 10, "b"),
                (f"E{two[0]}", 10, "d"), (f"E{two[1]}", 10, "e"), (f"E{two[2]}", 10, "f")],
               [(f"E{one[0]}", 10, "a"), (f"E{one[1]}", 10, "b"),
                (f"E{two[0]}", 10, "d"), (f"E{two[1]}", 10, "e"),
                (f"E{three[0]}", 10, "g"), (f"E{three[2]}", 10, "h")]]
    windows = [(sent(items), items) for items in windows]
    # one message marked at its end: only the prompt, which the first decision marked
    assert tool.served(windows, tool.one_message) == 0 + 100 + 100 + 100
    # ctxdb's marks: each window is marked before its newest reasoning, which the next
    # drops; the third repeats the second's two items before it, the fourth the third's
    # four (the framing with them)
    assert tool.served(windows, tool.ctxdb_marks) == \
        0 + 100 + (100 + CHAT_MESSAGE_OVERHEAD_TOKENS + 20) \
        + (100 + CHAT_MESSAGE_OVERHEAD_TOKENS + 40)
    # a provider looks back only so far: a window that repeats 99 items of the one before
    # but adds more than that many blocks after them is served its prompt alone
    steps = [(f"E{item_numbers(k)[0]}", 1, str(k)) for k in range(1, 130)]
    many = [(sent(items), items) for items in ([], steps[:100], steps)]
    assert tool.served(many, tool.ctxdb_marks) == 0 + 100 + 100
    # ...where up to 21 new items leave the mark before the newest step (20 blocks back
    # from the new one's) within reach
    for new, reached in ((11, True), (21, True), (22, False)):
        near = [(sent(items), items)
                for items in ([], steps[:100], steps[:99] + steps[100:100 + new])]
        assert tool.served(near, tool.ctxdb_marks) == \
            0 + 100 + 100 + (CHAT_MESSAGE_OVERHEAD_TOKENS + 99) * reached, new
