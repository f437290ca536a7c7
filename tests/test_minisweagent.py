"""ctxdb.integrations.minisweagent end to end: mini-swe-agent 2.x's own agent, local
environment, default config and scripted model, with the model wrapped in CtxdbModel,
fixing a bug planted in the requests sdist by real commands (a view, a traceback, a
sed -i fix, pytest, the submit) — on SQLite and PostgreSQL, in both arms of CTX."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import PurePosixPath
from types import SimpleNamespace

import pytest
import yaml
from sqlalchemy import text

from ctxdb import ContextStore, forensics
from ctxdb.agent.adapter import SentMessagesError
from ctxdb.agent.arms import PromptCounter
from ctxdb.agent.loop import LoopRules, item_numbers
from ctxdb.agent.trajectory import read_trajectory
from ctxdb.config import load_settings
from ctxdb.integrations import minisweagent
from ctxdb.integrations.minisweagent import (
    CtxdbModel,
    HistoryError,
    RefusedStepWarning,
    RunRestartedError,
    SentNotRecordedWarning,
    read_history,
)
from ctxdb.request import RequestError
from ctxdb.tokens import get_counter

pytestmark = pytest.mark.network  # requests_root downloads the sdist

UTILS = "src/requests/utils.py"
BUGGY, FIXED = "        value = value.items\n", "        value = value.items()\n"
TASK = ("to_key_val_list({'key': 'val'}) in requests.utils raises TypeError "
        "('builtin_function_or_method' object is not iterable); it should return "
        "[('key', 'val')].")
REPRODUCER = """python -c "from requests.utils import to_key_val_list; \
print(to_key_val_list({'key': 'val'}))\""""
GREP = f"grep -n 'def to_key_val_list' {UTILS}"
VIEW = f"nl -ba {UTILS} | sed -n '345,372p'"
FIX = f"sed -i 's/value = value.items$/value = value.items()/' {UTILS}"
PYTEST = "python -m pytest -q -p no:cacheprovider tests/test_utils.py -k TestToKeyValList"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"
# the scripted replies: (thought, command), or None for a reply the harness rejects
SCRIPT = [("Find the function.", GREP),
          None,  # two commands in one reply: mini-swe-agent's format error
          ("Read it.", VIEW),
          ("Reproduce.", REPRODUCER),
          ("items is not called: call it.", FIX),
          ("Check the change.", "git diff"),
          ("Reproduce again.", REPRODUCER),
          ("Run its tests.", PYTEST),
          ("Submit.", SUBMIT)]
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}


@pytest.fixture(scope="session")
def mswea(tmp_path_factory):
    """mini-swe-agent's modules, imported quietly with its global config in a temporary
    directory (it makes one and reads a .env from it at import)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MSWEA_SILENT_STARTUP", "1")
        patch.setenv("MSWEA_GLOBAL_CONFIG_DIR", str(tmp_path_factory.mktemp("mswea-config")))
        import minisweagent
        from minisweagent.agents.default import DefaultAgent
        from minisweagent.environments.local import LocalEnvironment
        from minisweagent.exceptions import FormatError
        from minisweagent.models.test_models import (
            DeterministicModel,
            DeterministicToolcallModel,
            make_output,
            make_toolcall_output,
        )
        from minisweagent.models.utils.actions_text import parse_regex_actions
    configs = minisweagent.package_dir / "config"
    config = yaml.safe_load((configs / "default.yaml").read_text())
    # the tool-calling configuration mini-swe-agent runs SWE-bench with
    toolcall_config = yaml.safe_load((configs / "benchmarks" / "swebench.yaml").read_text())
    return SimpleNamespace(DefaultAgent=DefaultAgent, LocalEnvironment=LocalEnvironment,
                           FormatError=FormatError, DeterministicModel=DeterministicModel,
                           make_output=make_output, parse_regex_actions=parse_regex_actions,
                           DeterministicToolcallModel=DeterministicToolcallModel,
                           make_toolcall_output=make_toolcall_output,
                           config=config, toolcall_config=toolcall_config)


@pytest.fixture
def tree(requests_root, tmp_path):
    """A git checkout of the sdist with the bug planted and committed."""
    work = tmp_path / "requests"
    shutil.copytree(requests_root, work)
    source = (work / UTILS).read_text()
    assert source.count(FIXED) == 1
    (work / UTILS).write_text(source.replace(FIXED, BUGGY))
    for command in (["init", "-q", "-b", "main"], ["add", "-A"],
                    ["commit", "-q", "-m", "requests 2.32.3, bug planted"]):
        subprocess.run(["git", *command], cwd=work, check=True, env={**os.environ, **GIT_ENV})
    return work


def _environment(mswea, tree):
    """mini-swe-agent's local environment in ``tree``, with its default configuration's
    variables, the sdist's sources first on the path and this interpreter's programs."""
    return mswea.LocalEnvironment(cwd=str(tree), env={
        **mswea.config["environment"]["env"], "PYTHONPATH": "src",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"})


def _scripted_outputs(mswea) -> tuple[list[dict], dict[int, Exception]]:
    """The script as mini-swe-agent's DeterministicModel replies, and the rejected reply
    (by its index) as the FormatError mini-swe-agent's text-based parser raises for it."""
    outputs, rejected = [], {}
    for entry in SCRIPT:
        if entry is None:
            reply = ("Both at once.\n\n```mswea_bash_command\nls\n```\n\n"
                     "```mswea_bash_command\npwd\n```")
            with pytest.raises(mswea.FormatError) as error:
                mswea.parse_regex_actions(
                    reply, action_regex=r"```mswea_bash_command\s*\n(.*?)\n```",
                    format_error_template=mswea.config["model"]["format_error_template"])
            rejected[len(outputs)] = error.value
            outputs.append(mswea.make_output(reply, []))  # never returned
        else:
            thought, command = entry
            outputs.append(mswea.make_output(
                f"THOUGHT: {thought}\n\n```mswea_bash_command\n{command}\n```",
                [{"command": command}]))
    return outputs, rejected


def _run_agent(mswea, store_url, tree, trajectory, **options):
    """One run of mini-swe-agent's DefaultAgent on ``tree``, saving its trajectory; returns
    (result, agent, the CtxdbModel, what reached the scripted model: per call, the messages
    and whether they were the agent's own list)."""
    received: list[tuple[list[dict], int]] = []
    outputs, rejected = _scripted_outputs(mswea)

    class Recording(mswea.DeterministicModel):
        def query(self, messages, **kwargs):
            received.append((copy.deepcopy(messages), id(messages)))
            if self.current_index + 1 in rejected:  # the reply a real model's parser rejects
                self.current_index += 1
                raise rejected[self.current_index]
            return super().query(messages, **kwargs)

    config = mswea.config
    inner = Recording(outputs=outputs,
                      observation_template=config["model"]["observation_template"])
    result, agent, model = _run_wrapped(mswea, inner, store_url, tree,
                                        {**config["agent"], "output_path": trajectory},
                                        **options)
    return result, agent, model, [(m, same == id(agent.messages)) for m, same in received]


def _run_wrapped(mswea, inner, store_url, tree, agent_config, **options):
    """mini-swe-agent's DefaultAgent on the task in ``tree``, its model ``inner`` wrapped
    in a CtxdbModel made with ``options``; returns (result, agent, the CtxdbModel)."""
    model = CtxdbModel(inner, store_url, instance_id="requests-to-key-val-list", tree=tree,
                       **options)
    agent = mswea.DefaultAgent(model, _environment(mswea, tree), **agent_config)
    try:
        result = agent.run(TASK)
    finally:
        model.close()
    return result, agent, model


def _decisions(store_url, run_id) -> tuple[str, list[tuple[int, str]]]:
    with ContextStore.open(store_url) as store, store.engine.connect() as connection:
        arm = connection.execute(text("SELECT arm FROM run WHERE run_id = :r"),
                                 {"r": run_id}).scalar_one()
        rows = connection.execute(text(
            "SELECT seq, instance_id FROM decision WHERE run_id = :r ORDER BY decision_id"),
            {"r": run_id}).all()
    return arm, [tuple(row) for row in rows]


def _check_submitted(result) -> None:
    assert result["exit_status"] == "Submitted"
    patch = result["submission"]
    assert f"-{BUGGY}+{FIXED}" in patch
    assert patch.count("diff --git") == 1 and f"a/{UTILS}" in patch


def test_ctx08_sends_the_window_after_the_harness_prompt(mswea, store_url, tree, tmp_path,
                                                         monkeypatch):
    monkeypatch.delenv("CTX", raising=False)
    trajectory = tmp_path / "run.traj.json"
    # the test's own rules (a fold at the ninth decision): not moved by the measured
    # defaults; a run this short would not pay for its fold (paying folds), made regardless
    result, agent, model, received = _run_agent(
        mswea, store_url, tree, trajectory,
        rules=LoopRules(fresh_outputs=4, fold_stride=4, paying_folds=False))
    _check_submitted(result)
    calls = len(SCRIPT)
    assert model.arm == "ctx08" and len(received) == calls
    arm, rows = _decisions(store_url, model.run_id)
    assert arm == "ctx08"
    assert rows == [(seq, "requests-to-key-val-list") for seq in range(1, calls + 1)]
    assert len(model.decision_ids) == calls

    harness_prefix = [{"role": m["role"], "content": m["content"]} for m in agent.messages[:2]]
    assert harness_prefix[0]["role"] == "system" and TASK in harness_prefix[1]["content"]
    assert received[0][0] == harness_prefix  # the first step: the harness's prompt alone
    for messages, _ in received[1:]:
        assert messages[:2] == harness_prefix and len(messages) == 3
        assert messages[2]["role"] == "user" and TASK not in messages[2]["content"]

    after_refusal = received[2][0][2]["content"]  # the reply it refused is the newest turn
    assert after_refusal.endswith("```mswea_bash_command\nls\n```\n\n"
                                  "```mswea_bash_command\npwd\n```\n\n"), after_refusal
    last = received[-1][0][2]["content"]
    assert f"[step 1] $ {GREP}\n" in last  # an old command, always shown
    assert "[step 2] $ (no command)" in last  # the rejected reply is a step of its own
    # steps 1-4 are folded: the view stays as lines read from the tree as it is now (the
    # fixed line), the traceback is a pointer
    assert f"369\t{FIXED}" in last and f"369\t{BUGGY}" not in last
    step_4_output = item_numbers(4)[1]
    pointer = next(line for line in last.splitlines()
                   if line.startswith(f"[E{step_4_output} traceback masked:"))
    # the pointer says what the traceback raised; its frames are gone
    assert ("; raised: TypeError: 'builtin_function_or_method' object is not iterable;"
            in pointer), pointer
    assert last.count("object is not iterable") == 1  # the pointer's, the output's gone
    assert "1 passed" not in last and "5 passed" in last  # the test run, fresh and whole
    # the trajectory mini-swe-agent saved names the run, and ctxdb's reader reads it back
    saved = json.loads(trajectory.read_text())
    assert saved["info"]["ctxdb"]["decision_ids"] == model.decision_ids
    assert read_trajectory(trajectory).submission == result["submission"]
    # ...and the instance it ran (a replay of the file records it so)
    assert read_trajectory(trajectory).instance_id == "requests-to-key-val-list"


def test_ctx_current_sends_the_harness_messages_untouched(mswea, store_url, tree,
                                                          monkeypatch, capsys):
    monkeypatch.setenv("CTX", "current")
    result, agent, model, received = _run_agent(mswea, store_url, tree, None,
                                                run_id="mini-current")
    _check_submitted(result)
    assert model.arm == "current" and model.run_id == "mini-current"
    for messages, same_list in received:
        assert same_list  # the agent's own list, not a copy
        assert messages == agent.messages[:len(messages)]
    assert len(received[-1][0]) > 10  # the whole history, every observation
    arm, rows = _decisions(store_url, "mini-current")
    assert arm == "current" and [seq for seq, _ in rows] == list(range(1, len(SCRIPT) + 1))
    # each decision's tokens are those of what the model was sent, templates and all, as
    # the replay counts its current arm (a live A/B compares like with like)
    with ContextStore.open(store_url) as store, store.engine.connect() as connection:
        recorded = connection.execute(text(
            "SELECT token_count FROM decision WHERE run_id = :r ORDER BY seq"),
            {"r": "mini-current"}).scalars().all()
        counter = PromptCounter(get_counter(store.settings.tokenizer).count)
    assert recorded == [counter.prompt_tokens(messages) for messages, _ in received]
    from ctxdb.cli import main

    capsys.readouterr()
    assert main(["show", str(model.decision_ids[-1]), "--db", store_url]) == 0
    assert "eviction steps: none (the current arm sends all it is given)" in \
        capsys.readouterr().out
    # a second run of the instance under that id would share its step numbers: refused
    with pytest.raises(ValueError, match=(r"run_id 'mini-current': the store already holds "
                                          rf"{len(SCRIPT)} decision\(s\) of instance "
                                          "'requests-to-key-val-list'")):
        CtxdbModel(object(), store_url, instance_id="requests-to-key-val-list", tree=tree,
                   run_id="mini-current")
    CtxdbModel(object(), store_url, instance_id="another", tree=tree,
               run_id="mini-current").close()  # a batch of instances may share it
    # ...of one arm: the other arm's model is refused at once, not at its first step
    with pytest.raises(ValueError, match=r"run_id 'mini-current': the store holds it as a "
                       r"run of arm 'current', and a run is one arm; give this 'ctx08' "):
        CtxdbModel(object(), store_url, instance_id="another", tree=tree,
                   run_id="mini-current", arm="ctx08")


# a tool-calling run: (reasoning or None, the turn's commands), each command a tool call
TOOLCALL_SCRIPT = [("Find the function.", [GREP]),
                   (None, [VIEW, REPRODUCER]),  # two calls at once, no text beside them
                   ("items is not called: call it.", [FIX]),
                   ("Run its tests.", [PYTEST]),
                   ("Submit.", [SUBMIT])]


def _run_toolcall_agent(mswea, store_url, tree, arm):
    """A run of mini-swe-agent's DefaultAgent with its SWE-bench configuration's tool
    calls (``swebench.yaml``), scripted; returns (result, the CtxdbModel, the messages the
    scripted model was sent per call)."""
    received: list[list[dict]] = []
    outputs = []
    for number, (thought, commands) in enumerate(TOOLCALL_SCRIPT, start=1):
        ids = [f"call_{number}_{index}" for index in range(len(commands))]
        outputs.append(mswea.make_toolcall_output(
            thought, [{"id": call, "type": "function", "function": {
                "name": "bash", "arguments": json.dumps({"command": command})}}
                for call, command in zip(ids, commands, strict=True)],
            [{"command": command, "tool_call_id": call}
             for call, command in zip(ids, commands, strict=True)]))

    class Recording(mswea.DeterministicToolcallModel):
        def query(self, messages, **kwargs):
            received.append(copy.deepcopy(messages))
            return super().query(messages, **kwargs)

    config = mswea.toolcall_config
    inner = Recording(outputs=outputs,
                      observation_template=config["model"]["observation_template"])
    # (its cost limit is a real model's: the scripted one costs 1 a call)
    result, _agent, model = _run_wrapped(mswea, inner, store_url, tree,
                                         {**config["agent"], "cost_limit": 0},
                                         arm=arm, run_id=f"toolcall-{arm}")
    return result, model, received


def test_a_tool_calling_run_counts_the_commands_its_calls_send(mswea, store_url, tree):
    """With mini-swe-agent's tool-calling configuration the agent's commands travel as
    tool calls beside a turn's text: the current arm counts them as sent, as the ctx08
    window shows them, so a live A/B compares like with like."""
    result, model, received = _run_toolcall_agent(mswea, store_url, tree, "current")
    _check_submitted(result)
    with ContextStore.open(store_url) as store, store.engine.connect() as connection:
        recorded = connection.execute(text(
            "SELECT token_count FROM decision WHERE run_id = :r ORDER BY seq"),
            {"r": model.run_id}).scalars().all()
        cached = connection.execute(text(
            "SELECT cached_tokens FROM v_decision_cached WHERE run_id = :r ORDER BY seq"),
            {"r": model.run_id}).scalars().all()
        counter = PromptCounter(get_counter(store.settings.tokenizer).count)
        sent = store.request_as_given(model.decision_ids[-1])["sent"]
    assert len(recorded) == len(TOOLCALL_SCRIPT)
    assert recorded == [counter.prompt_tokens(messages) for messages in received]
    # what leaving the calls out would have counted: less, by each command sent so far
    without_calls = [counter.prompt_tokens([{"role": m["role"], "content": m["content"] or ""}
                                            for m in messages]) for messages in received]
    commands_sent = [sum(counter.count_text(command) for _, commands in TOOLCALL_SCRIPT[:done]
                         for command in commands) for done in range(len(TOOLCALL_SCRIPT))]
    for counted, bare, commands in zip(recorded, without_calls, commands_sent, strict=True):
        assert counted - bare >= commands, (counted, bare, commands)
    assert commands_sent[-1] > 0
    # the record names each call as counted; an append-only history is served whole
    turn_2 = next(m for m in sent if m.get("tool_calls_text", "").startswith("bash"))
    assert turn_2["content"] == "Find the function."
    assert turn_2["tool_calls_text"] == f"bash {json.dumps({'command': GREP})}"
    assert sum("tool_calls_text" in m for m in sent) == len(TOOLCALL_SCRIPT) - 1
    assert cached == [0, *recorded[:-1]]

    # the ctx08 arm shows the same commands in its window (a turn's several one a line)
    subprocess.run(["git", "reset", "-q", "--hard"], cwd=tree, check=True)  # the bug back
    result, model, received = _run_toolcall_agent(mswea, store_url, tree, "ctx08")
    _check_submitted(result)
    window = received[-1][2]["content"]
    assert f"[step 2] $ {VIEW}\n{REPRODUCER}\n" in window
    assert f"[step 3] $ {FIX}\n" in window and "TypeError" in window


def test_a_model_that_marks_its_prompts_gets_the_window_marked_where_the_next_repeats_it(
        mswea, store_url, tree, monkeypatch):
    """mini-swe-agent marks the last message for a provider that caches only at marks
    (its default for Claude): that would serve nothing of a ctx08 window. CtxdbModel turns
    the model's marking off and sends the window as blocks marked where the next window
    repeats it: what reaches the provider, through mini-swe-agent's own marking code."""
    from minisweagent.models.test_models import DeterministicModelConfig
    from minisweagent.models.utils.cache_control import set_cache_control

    class MarkingConfig(DeterministicModelConfig):
        set_cache_control: str | None = "default_end"

    class Marking(mswea.DeterministicModel):  # marks as LitellmModel does before its call
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.config = MarkingConfig(**kwargs)

        def query(self, messages, **kwargs):
            to_provider.append(set_cache_control(copy.deepcopy(messages),
                                                 mode=self.config.set_cache_control))
            return super().query(messages, **kwargs)

    monkeypatch.delenv("CTX", raising=False)
    outputs = [mswea.make_output(f"THOUGHT: {thought}\n\n```mswea_bash_command\n{command}\n```",
                                 [{"command": command}])
               for thought, command in [entry for entry in SCRIPT if entry is not None]]
    config = mswea.config
    for arm in ("ctx08", "current"):
        subprocess.run(["git", "reset", "-q", "--hard"], cwd=tree, check=True)
        to_provider: list[list[dict]] = []
        inner = Marking(outputs=outputs,
                        observation_template=config["model"]["observation_template"])
        result, _agent, model = _run_wrapped(mswea, inner, store_url, tree, config["agent"],
                                             arm=arm, run_id=f"marks-{arm}")
        _check_submitted(result)
        marked = [[(m["role"], block["text"], "cache_control" in block)
                   for m in messages for block in (
                       m["content"] if isinstance(m["content"], list)
                       else [{"text": m["content"]} | ({"cache_control": 1}
                                                       if "cache_control" in m else {})])]
                  for messages in to_provider]
        if arm == "current":  # the harness's own messages and marking, untouched
            assert inner.config.set_cache_control == "default_end" and not model.cache_marks
            assert all(sum(mark for *_, mark in blocks) == 1 and blocks[-1][2]
                       for blocks in marked)
            continue
        # (the model's own marking was off for each window's call only: back as it was)
        assert inner.config.set_cache_control == "default_end" and model.cache_marks
        assert model.serialize()["info"]["ctxdb"]["cache_marks"] is True
        with ContextStore.open(store_url) as store, store.engine.connect() as connection:
            sent = [store.context(d).messages() for d in model.decision_ids]
            # the store gives back what the model got, marks and blocks as they went
            assert [forensics.messages_sent(connection, d) for d in model.decision_ids] \
                == to_provider
        for blocks, messages in zip(marked, sent, strict=True):
            # the same texts, the window in blocks; the prompt's end always marked
            assert [(role, "".join(t for r, t, _ in blocks if r == role))
                    for role in ("system", "user")] == [
                (role, "".join(m["content"] for m in messages if m["role"] == role))
                for role in ("system", "user")]
            assert blocks[1][2] and sum(mark for *_, mark in blocks) <= 3
        # (the prompt alone; then after the prompt, before the newest reasoning, the end)
        assert [sum(mark for *_, mark in blocks) for blocks in marked] == \
            [1] + [3] * (len(marked) - 1)
        # each request repeats, block for block, its start up to the mark the one before
        # it put before its newest reasoning: a provider serves it from there
        for before, after in itertools.pairwise(marked[1:]):
            middle = [index for index, (*_, mark) in enumerate(before) if mark][1]
            assert [block[:2] for block in after[:middle + 1]] == \
                [block[:2] for block in before[:middle + 1]]
            assert len(after) - middle - 1 <= 20  # within the provider's lookback


# an Anthropic run through litellm: (reasoning, command) per model call
ANTHROPIC_SCRIPT = [("Find the function.", GREP), ("Read it.", VIEW),
                    ("items is not called: call it.", FIX), ("Run its tests.", PYTEST),
                    ("Submit.", SUBMIT)]


def _anthropic_reply(number: int) -> str:
    """The Messages API's answer to call ``number``: its reasoning and a bash tool call."""
    thought, command = ANTHROPIC_SCRIPT[number - 1]
    return json.dumps({
        "id": f"msg_{number}", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": thought},
                    {"type": "tool_use", "id": f"toolu_{number}", "name": "bash",
                     "input": {"command": command}}],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 20}})


def _marked_blocks(body: dict) -> list[tuple[str, str, bool]]:
    """A Messages API request's blocks in order: (role, text, marked)."""
    return [(message["role"], block.get("text", json.dumps(block)), "cache_control" in block)
            for message in body["messages"]
            for block in (message["content"] if isinstance(message["content"], list)
                          else [{"text": message["content"]}])]


@pytest.mark.parametrize("arm", ["ctx08", "current"])
def test_a_claude_run_through_litellm_is_marked_where_the_next_request_repeats_it(
        mswea, store_url, tree, monkeypatch, arm):
    """mini-swe-agent's own LitellmModel, its SWE-bench configuration (tool calls) and a
    Claude model name (so it marks its prompts), against a scripted Messages API server
    on 127.0.0.1: litellm's own conversion carries ctxdb's marks to the provider, and
    each ctx08 request repeats the one before it, block for block, up to a mark it put."""
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no price list download
    from chatserver import Answer, ChatServer
    from minisweagent.models.litellm_model import LitellmModel

    config = mswea.toolcall_config
    with ChatServer() as server:
        server.answers = [Answer(raw_body=_anthropic_reply(number))
                          for number in range(1, len(ANTHROPIC_SCRIPT) + 1)]
        inner = LitellmModel(
            model_name="anthropic/claude-sonnet-4-5-20250929", set_cache_control="default_end",
            cost_tracking="ignore_errors",
            model_kwargs={"api_base": server.base_url.removesuffix("/v1"), "api_key": "test"},
            observation_template=config["model"]["observation_template"],
            format_error_template=config["model"]["format_error_template"])
        result, _agent, model = _run_wrapped(mswea, inner, store_url, tree,
                                             {**config["agent"], "cost_limit": 0},
                                             arm=arm, run_id=f"claude-{arm}")
        _check_submitted(result)
        bodies = [request["body"] for request in server.requests]
    assert len(bodies) == len(ANTHROPIC_SCRIPT)
    assert inner.config.set_cache_control == "default_end"  # the model's own, as it was
    requests = [_marked_blocks(body) for body in bodies]
    if arm == "current":  # the model's own marking: the last block of each request
        assert all([marked for *_, marked in blocks] == [False] * (len(blocks) - 1) + [True]
                   for blocks in requests)
        return
    with ContextStore.open(store_url) as store:
        windows = [store.context(d).messages()[2:] for d in model.decision_ids]
    # the prompt alone; then after the prompt, before the newest reasoning, at the end
    assert [sum(marked for *_, marked in blocks) for blocks in requests] == \
        [1] + [3] * (len(requests) - 1)
    for blocks, window in zip(requests[1:], windows[1:], strict=True):
        assert blocks[0][2] and TASK in blocks[0][1]  # the harness's prompt, marked
        assert "".join(text for _, text, _ in blocks[1:]) == window[0]["content"]
    for before, after in itertools.pairwise(requests[1:]):
        middle = [at for at, (*_, marked) in enumerate(before) if marked][1]
        assert [block[:2] for block in after[:middle + 1]] == \
            [block[:2] for block in before[:middle + 1]]


def test_ctxdb_marks_the_window_only_where_it_sends_one(tmp_path, tree, monkeypatch):
    """The arms and switches of the marking: a window marked, the wrapped model's own
    marking off for that call only; a refused step, the current arm and
    ``cache_marks=False`` marked the model's way; a frozen config refused by name."""
    monkeypatch.delenv("CTX", raising=False)

    class Config:
        def __init__(self, marking):
            self.set_cache_control = marking

    class Noting:  # says what its marking was when called, and what it got
        def __init__(self, marking="default_end"):
            self.config, self.calls = Config(marking), []

        def query(self, messages, **kwargs):
            self.calls.append((self.config.set_cache_control,
                               any(isinstance(m["content"], list) for m in messages)))
            return {"role": "assistant", "content": "ok"}

    prompt = [{"role": "system", "content": "You are a bash agent."},
              {"role": "user", "content": f"<pr_description>{TASK}</pr_description>"}]
    history = [*prompt, {"role": "assistant", "content": "THOUGHT: list.\n\n"
                         "```mswea_bash_command\nls\n```", "extra": {"actions": [
                             {"command": "ls"}]}},
               {"role": "user", "content": "<returncode>0</returncode>\n<output>\na\n</output>",
                "extra": {"raw_output": "a\n", "returncode": 0}}]
    store = str(tmp_path / "s.db")
    inner = Noting()
    for run_id in ("first", "second"):  # a second wrapper of the same model marks too
        with CtxdbModel(inner, store, instance_id="i", tree=tree, run_id=run_id) as model:
            assert model.cache_marks
            model.query(prompt)
            model.query(history)
    assert inner.calls == [(None, True)] * 4 and inner.config.set_cache_control == "default_end"
    for options, marked in (({"cache_marks": False}, False), ({"arm": "current"}, False)):
        inner = Noting()
        with CtxdbModel(inner, store, instance_id="i", tree=tree, **options) as model:
            assert not model.cache_marks
            model.query(history)
        assert inner.calls == [("default_end", marked)]
    inner = Noting(marking=None)  # a model that marks nothing, asked to
    with CtxdbModel(inner, store, instance_id="i", tree=tree, cache_marks=True) as model:
        model.query(history)
    assert inner.calls == [(None, True)]
    # a refused step goes as the harness built it, marked the model's way
    settings = dataclasses.replace(load_settings(), token_ceiling=64)
    with ContextStore.open(tmp_path / "small.db", settings=settings) as small:
        inner = Noting()
        model = CtxdbModel(inner, small, instance_id="i", tree=tree)
        with pytest.warns(RefusedStepWarning):
            model.query(history)
    assert model.refused_steps == [2] and inner.calls == [("default_end", False)]

    class Frozen(Config):
        def __setattr__(self, name, value):
            if name in self.__dict__:
                raise TypeError("frozen")
            super().__setattr__(name, value)

    inner.config = Frozen("default_end")
    with pytest.raises(ValueError, match=r"model\.config\.set_cache_control: ctxdb marks "
                       r"ctx08's windows itself .*give cache_marks=False"):
        CtxdbModel(inner, str(tmp_path / "never.db"), instance_id="i", tree=tree)
    assert not (tmp_path / "never.db").exists()  # refused before the store was made
    CtxdbModel(inner, store, instance_id="i", tree=tree, cache_marks=False).close()


def test_unreadable_histories_and_arms_are_named(mswea, tmp_path, monkeypatch):
    with pytest.raises(HistoryError, match=r"messages\[0\]: expected the system prompt"):
        read_history([{"role": "user", "content": "x"}, {"role": "user", "content": "y"}])
    with pytest.raises(HistoryError, match="expected the system message and the instance"):
        read_history([{"role": "system", "content": "x"}])
    with pytest.raises(HistoryError, match=r"messages\[1\].*Responses-API"):
        read_history([{"role": "system", "content": "x"}, {"type": "message"}])
    monkeypatch.setenv("CTX", "ctx09")
    with pytest.raises(ValueError, match=r"\$CTX: expected one of ctx08, current, got 'ctx09'"):
        CtxdbModel(object(), str(tmp_path / "s.db"), instance_id="i", tree=None)
    with pytest.raises(ValueError, match="arm: expected one of"):
        CtxdbModel(object(), str(tmp_path / "s.db"), instance_id="i", tree=None, arm="nope")


def test_a_step_ctxdb_refuses_is_sent_as_the_harness_built_it(mswea, tmp_path, tree,
                                                             monkeypatch):
    class Echo:  # a model that says what it was sent
        def query(self, messages, **kwargs):
            return {"role": "assistant", "content": f"{len(messages)} messages"}

        def serialize(self):
            return {}

    settings = dataclasses.replace(load_settings(), token_ceiling=256)
    prompt = [{"role": "system", "content": "You are a bash agent. " * 200},
              {"role": "user", "content": f"<task>{TASK}</task>"}]
    with ContextStore.open(tmp_path / "s.db", settings=settings) as store:
        model = CtxdbModel(Echo(), store, instance_id="big-prompt", tree=tree, run_id="big")
        with pytest.warns(RefusedStepWarning, match=r"refused step 1 of run 'big': the "
                          r"harness's prompt and the least a window holds do not fit under "
                          r"the ceiling 256 \(\[budget\]\.token_ceiling\); recorded as sent, "
                          r"\d+ tokens \(decision 1\)"):
            reply = model.query(prompt)
        assert reply["content"] == "2 messages"  # the harness's own, the run goes on
        assert model.refused_steps == [1] and model.decision_ids == [1]
        assert model.serialize()["info"]["ctxdb"]["refused_steps"] == [1]
        # the store counts what the model got (a live A/B's cost): the harness's messages,
        # flagged, over the ceiling ctxdb's own windows are held to
        context = store.context(1)
        assert "harness_sent_over_ceiling" in context.flags and context.token_count > 256
        assert store.messages_sent(1) == prompt
        assert store.verify() == {}
        # a prompt the store keeps otherwise than given (a NUL) is recorded all the same
        odd = [{**prompt[0], "content": prompt[0]["content"] + "\x00"}, prompt[1]]
        nul = CtxdbModel(Echo(), store, instance_id="big-prompt", tree=tree, run_id="nul")
        with pytest.warns(RefusedStepWarning, match="recorded as sent"):
            nul.query(odd)
        assert {"harness_sent_over_ceiling", "text_replaced"} <= \
            set(store.context(nul.decision_ids[0]).flags)
        # any other refusal is a mistake to fix, not a step to send as the harness built it
        def refuse(*args, **kwargs):
            raise RequestError("steps[0].output: expected text")

        monkeypatch.setattr(minisweagent, "construct_step", refuse)
        with pytest.raises(RequestError, match=r"steps\[0\]\.output"):
            model.query(prompt)

        # a wrong fallback named at a step that fits too: not read as a step to refuse
        def wrong_fallback(*args, **kwargs):
            raise RequestError("sent_if_over_ceiling[0]: expected prefix[0]")

        monkeypatch.setattr(minisweagent, "construct_step", wrong_fallback)
        with pytest.raises(RequestError, match=r"sent_if_over_ceiling\[0\]"):
            model.query(prompt)
        assert model.refused_steps == [1]
        with pytest.raises(ValueError, match="tree: expected the directory .*no such directory"):
            CtxdbModel(Echo(), store, instance_id="typo", tree=tmp_path / "no-such-tree")
        (tmp_path / "a-file").write_text("")
        with pytest.raises(ValueError, match=r"tree: expected the directory .*\(not a directory\)"):
            CtxdbModel(Echo(), store, instance_id="typo", tree=tmp_path / "a-file")
    # refused before a store is made: nothing is left behind
    for options, field in (({"tree": tmp_path / "no-such-tree"}, "tree"),
                           ({"tree": tree, "workdir": "testbed"}, "workdir"),
                           ({"tree": tree, "cache_marks": 1}, "cache_marks"),
                           ({"tree": tree, "run_id": "r" * 201}, "run_id"),
                           ({"tree": tree, "instance_id": "i" * 201}, "instance_id"),
                           ({"tree": tree, "instance_id": " "}, "instance_id")):
        with pytest.raises(ValueError, match=f"^{field}: expected"):
            CtxdbModel(Echo(), str(tmp_path / "never.db"), **{"instance_id": "i", **options})
        assert not (tmp_path / "never.db").exists()


def test_commands_run_in_a_container_are_read_against_the_tree_that_mirrors_it(tmp_path,
                                                                              tree):
    """A SWE-bench harness runs the agent's commands in a container's ``/testbed`` while
    ``tree`` is its checkout on the host: with ``workdir`` the file the agent printed by
    its container path is a view of the tree's file once folded; without, a pointer."""
    class Echo:
        def query(self, messages, **kwargs):
            return {"role": "assistant", "content": "ok"}

        def serialize(self):
            return {}

    view = f"nl -ba /testbed/{UTILS} | sed -n '345,372p'"
    printed = "".join(f"   {number}\t{line}\n" for number, line in enumerate(
        (tree / UTILS).read_text().splitlines()[344:372], start=345))
    history = [{"role": "system", "content": "You are a bash agent."},
               {"role": "user", "content": f"<pr_description>{TASK}</pr_description>"}]
    for command, output in [(view, printed)] + [(f"echo {k}", f"{k}\n") for k in range(14)]:
        history += [{"role": "assistant", "content": f"THOUGHT: go.\n\n```mswea_bash_command"
                     f"\n{command}\n```", "extra": {"actions": [{"command": command}]}},
                    {"role": "user", "content": f"<returncode>0</returncode>\n<output>\n"
                     f"{output}</output>", "extra": {"raw_output": output, "returncode": 0}}]
    windows = {}
    for workdir in (PurePosixPath("/testbed"), None):
        with CtxdbModel(Echo(), str(tmp_path / "s.db"), instance_id="i", tree=tree,
                        workdir=workdir, run_id=f"in-{workdir}") as model:
            model.query(history)
            workdir = workdir and str(workdir)
            windows[workdir] = model.store.context(model.decision_ids[-1]).render()
        assert model.serialize()["info"]["ctxdb"]["workdir"] == workdir
    assert f"{UTILS} lines 345-372" in windows["/testbed"]
    assert "        value = value.items\n" in windows["/testbed"]
    assert f"{UTILS} lines 345-372" not in windows[None]


def test_a_current_step_is_counted_as_sent_whatever_the_harness_added(tmp_path, monkeypatch):
    """An interactive agent's own commands (``/u``: a user command and its output, which
    the history reader skips) are counted with the step before them; a history ctxdb
    cannot line up with its messages is still recorded, rebuilt, with a warning."""
    class Echo:
        def query(self, messages, **kwargs):
            return {"role": "assistant", "content": f"{len(messages)} messages"}

    wrap = "<returncode>0</returncode>\n<output>\n{}</output>".format
    history = [
        {"role": "system", "content": "You are a bash agent."},
        {"role": "user", "content": f"<pr_description>{TASK}</pr_description>"},
        {"role": "assistant", "content": "THOUGHT: list.\n\n```mswea_bash_command\nls\n```",
         "extra": {"actions": [{"command": "ls"}]}},
        {"role": "user", "content": wrap("a.py\n"),
         "extra": {"raw_output": "a.py\n", "returncode": 0}},
        {"role": "user", "content": "User command: \n```bash\nls -a\n```",
         "extra": {"actions": [{"command": "ls -a"}]}},
        {"role": "user", "content": wrap(".\n..\na.py\n"),
         "extra": {"raw_output": ".\n..\na.py\n", "returncode": 0}}]
    (tmp_path / "tree").mkdir()
    # the user's commands before the model's first step too (agent.mode=human, then /y)
    typed_first = [*history[:2], *history[4:], *history[2:4]]
    first = CtxdbModel(Echo(), str(tmp_path / "s.db"), instance_id="i", tree=tmp_path / "tree",
                       arm="current", run_id="typed-first")
    assert first.query(typed_first[:4])["content"] == "4 messages"
    assert first.query(typed_first)["content"] == "6 messages"
    first.close()
    model = CtxdbModel(Echo(), str(tmp_path / "s.db"), instance_id="i", tree=tmp_path / "tree",
                       arm="current", run_id="typed")
    assert model.query(history)["content"] == "6 messages"  # the harness's own, untouched

    construct = minisweagent.construct_step

    def rebuilt_only(*args, sent=None, **kwargs):  # a history that does not line up
        if sent is not None:
            raise SentMessagesError("sent[4]: no message from here on holds step 2's "
                                    "observation")
        return construct(*args, **kwargs)

    monkeypatch.setattr(minisweagent, "construct_step", rebuilt_only)
    with pytest.warns(SentNotRecordedWarning, match=r"could not record step 2 of run 'typed' "
                      r"as sent \(sent\[4\]: .*\); recorded the history rebuilt"):
        model.query(history)
    model.close()
    with ContextStore.open(tmp_path / "s.db") as store, store.engine.connect() as connection:
        recorded = connection.execute(text(
            "SELECT token_count FROM decision WHERE run_id = 'typed' ORDER BY decision_id")
        ).scalars().all()
        recorded_first = connection.execute(text(
            "SELECT token_count FROM decision WHERE run_id = 'typed-first' "
            "ORDER BY decision_id")).scalars().all()
        counter = PromptCounter(get_counter(store.settings.tokenizer).count)
    assert recorded_first == [counter.prompt_tokens(typed_first[:4]),
                              counter.prompt_tokens(typed_first)]
    assert recorded[0] == counter.prompt_tokens(history)
    assert recorded[1] < recorded[0]  # rebuilt: no markup, the typed command not counted


def test_a_second_agent_run_with_one_model_is_refused_before_it_records(tmp_path):
    """A CtxdbModel records one run: a history that does not go on from it (the next
    agent.run() starts again with no steps, or with another task) is refused before it
    records or sends anything; before, the second run went into the first one's steps."""
    class Echo:
        sent = 0

        def query(self, messages, **kwargs):
            Echo.sent += 1
            return {"role": "assistant", "content": "ok"}

    wrap = "<returncode>0</returncode>\n<output>\n{}</output>".format
    prompt = [{"role": "system", "content": "You are a bash agent."},
              {"role": "user", "content": f"<pr_description>{TASK}</pr_description>"}]
    turn = [{"role": "assistant", "content": "THOUGHT: list.\n\n```mswea_bash_command\nls\n```",
             "extra": {"actions": [{"command": "ls"}]}},
            {"role": "user", "content": wrap("a.py\n"),
             "extra": {"raw_output": "a.py\n", "returncode": 0}}]
    (tmp_path / "tree").mkdir()
    store = str(tmp_path / "s.db")
    with CtxdbModel(Echo(), store, instance_id="i", tree=tmp_path / "tree",
                    run_id="once") as model:
        model.query(prompt)
        model.query(prompt + turn)
        model.query(prompt + turn)  # the same step asked again: still this run
        with pytest.raises(RunRestartedError, match=r"does not go on from run 'once' of 'i' "
                           r"that this CtxdbModel recorded \(0 step\(s\) where the run's "
                           r"latest query held 1\)"):
            model.query(prompt)
        other_task = [prompt[0], {"role": "user", "content": "<pr_description>Another."
                                                              "</pr_description>"}]
        with pytest.raises(RunRestartedError, match=r"another harness prompt"):
            model.query(other_task + turn)
    assert Echo.sent == 3
    assert _decisions(store, "once")[1] == [(1, "i"), (2, "i"), (2, "i")]


def test_a_second_agent_run_after_a_first_that_submitted_at_once_is_refused(mswea, tmp_path):
    """A first agent.run() that submits at its first call leaves no step: the next run's
    first query held no step either, and used to be recorded as a retry of that call,
    its steps then as the first run's. mini-swe-agent's agent.run() starts a new history
    list, so another list is another run; the same list asked again is still a retry."""
    tree = tmp_path / "tree"
    tree.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=tree, check=True)
    submit = mswea.make_output(f"THOUGHT: Nothing to do.\n\n```mswea_bash_command\n{SUBMIT}"
                               "\n```", [{"command": SUBMIT}])
    inner = mswea.DeterministicModel(
        outputs=[submit, submit, submit],
        observation_template=mswea.config["model"]["observation_template"])
    store = str(tmp_path / "s.db")
    with CtxdbModel(inner, store, instance_id="i", tree=tree, run_id="at-once") as model:
        agent = mswea.DefaultAgent(model, _environment(mswea, tree), **mswea.config["agent"])
        assert agent.run(TASK)["exit_status"] == "Submitted"
        with pytest.raises(RunRestartedError, match=r"no step, in another history list than "
                           r"the run's first query, which was answered"):
            agent.run(TASK)
    assert _decisions(store, "at-once")[1] == [(1, "i")]
    with CtxdbModel(inner, store, instance_id="i", tree=tree, run_id="retried") as model:
        first = list(agent.messages[:2])
        model.query(first)
        model.query(first)  # the same list asked again: a retry of the first call
        with pytest.raises(RunRestartedError, match=r"no step, in another history list"):
            model.query(list(first))
    assert _decisions(store, "retried")[1] == [(1, "i"), (1, "i")]
