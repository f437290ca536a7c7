"""Recorded agent runs read as steps (ctxdb.agent.trajectory) and the reference arms'
prompts, tokens and cache (ctxdb.agent.arms)."""

from __future__ import annotations

import pytest

from ctxdb.agent.arms import (
    CHAT_MESSAGE_OVERHEAD_TOKENS,
    CHAT_REPLY_PRIMING_TOKENS,
    MASK_KEEP_NEWEST,
    PromptCounter,
    current_prompt,
    mask10_prompt,
    masked_observation_indexes,
    prompt_text,
)
from ctxdb.agent.replay import programs_lacked
from ctxdb.agent.trajectory import (
    FORMAT_V2,
    TOOL_CALLS_TEXT,
    ObservationKind,
    TrajectoryError,
    counted_text,
    parse_trajectory,
    read_trajectory,
)

SYSTEM = "You are a helpful assistant. Reply with ONE bash block."
TASK = ("<pr_description>\nConsider the following PR description:\nFix the tax rounding.\n"
        "</pr_description>\n<instructions>Go.</instructions>")


def turn(command: str, thought: str = "Look around.") -> dict:
    return {"role": "assistant", "content": f"THOUGHT: {thought}\n\n```bash\n{command}\n```"}


def observation(output: str, code: int = 0) -> dict:
    return {"role": "user",
            "content": f"<returncode>{code}</returncode>\n<output>\n{output}</output>"}


def v1_run(n_steps: int = 3) -> dict:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    for i in range(1, n_steps):
        messages += [turn(f"cat file{i}.py"), observation(f"line of file {i}\n")]
    messages += [turn("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A "
                      "&& git diff --cached"),
                 {"role": "user", "content": "diff --git a/x b/x\n"}]
    return {"trajectory_format": "mini-swe-agent-1", "instance_id": "demo__demo-1",
            "info": {"submission": "diff --git a/x b/x\n", "exit_status": "Submitted",
                     "config": {"environment": {"cwd": "/testbed", "timeout": 30}}},
            "messages": messages}


def test_a_v1_run_reads_as_steps_with_commands_observations_and_the_submission():
    run = parse_trajectory(v1_run(3), "demo.traj.json")
    assert run.system_prompt == SYSTEM and run.task == "Fix the tax rounding."
    assert [s.number for s in run.steps] == [1, 2, 3]
    assert run.steps[0].action == "cat file1.py" and run.steps[0].thought == "Look around."
    assert run.steps[0].observation.kind == ObservationKind.OUTPUT
    assert run.steps[0].observation.output == "line of file 1\n"
    assert run.steps[0].observation.returncode == 0
    assert run.steps[-1].is_submit
    assert run.steps[-1].observation.kind == ObservationKind.SUBMISSION
    assert run.command_timeout_s == 30 and run.workdir == "/testbed"
    # decision k: everything before turn k
    assert run.history_before(1) == list(run.messages[:2])
    assert run.history_before(3)[-1]["content"].startswith("<returncode>0")


def test_a_turn_with_several_commands_or_none_is_a_step_with_no_action():
    data = v1_run(2)
    two_blocks = {"role": "assistant", "content": "```bash\nls\n```\nand\n```bash\npwd\n```"}
    error = {"role": "user", "content": "Please always provide EXACTLY ONE action in triple "
                                        "backticks, found 2 actions."}
    none = {"role": "assistant", "content": "I think we are done."}
    data["messages"][2:2] = [two_blocks, error, none, dict(error)]
    run = parse_trajectory(data)
    assert run.steps[0].commands == ("ls", "pwd") and run.steps[0].action is None
    assert run.steps[0].observation.kind == ObservationKind.FORMAT_ERROR
    assert run.steps[1].commands == () and run.steps[1].action is None
    # nothing of it ran, so a window shows the turn whole: the next reply re-sends a block
    assert run.steps[0].reasoning == two_blocks["content"] and "ls" not in run.steps[0].thought
    ran = run.steps[2]
    assert ran.action == "cat file1.py" and ran.reasoning == ran.thought == "Look around."


def test_a_long_output_and_a_timeout_are_told_apart():
    data = v1_run(2)
    data["messages"][3] = {"role": "user", "content": (
        "<returncode>0</returncode>\n<warning>too long</warning><output_head>\nHEAD\n"
        "</output_head>\n<elided_chars>\n99 characters elided\n</elided_chars>\n"
        "<output_tail>\nTAIL\n</output_tail>")}
    data["messages"][4:4] = [turn("sleep 100"), {"role": "user", "content": (
        "The last command <command>sleep 100</command> timed out and has been killed.\n"
        "The output of the command was:\n <output>\n\n</output>\nPlease try another.")}]
    run = parse_trajectory(data)
    assert run.steps[0].observation.kind == ObservationKind.OUTPUT_CUT
    assert run.steps[0].observation.output == "HEAD\nTAIL\n"
    assert run.steps[1].observation.kind == ObservationKind.TIMEOUT


def test_a_v2_run_reads_its_actions_raw_output_and_interruptions():
    messages = [
        {"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK},
        {"role": "assistant", "content": "Reading.",
         "extra": {"actions": [{"command": "cat a.py"}]}},
        {"role": "user", "content": "<returncode>0</returncode><output>x = 1\n</output>",
         "extra": {"raw_output": "x = 1\n", "returncode": 0}},
        {"role": "assistant", "content": "Oops", "extra": {"actions": []}},
        {"role": "user", "content": "Format error: expected one action",
         "extra": {"interrupt_type": "FormatError"}},
        {"role": "assistant", "content": "Submit.", "extra": {
            "actions": [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}]}},
        {"role": "exit", "content": "diff", "extra": {"exit_status": "Submitted",
                                                      "submission": "diff"}},
    ]
    run = parse_trajectory({"trajectory_format": FORMAT_V2, "messages": messages,
                            "info": {"submission": "diff"}})
    assert [s.action for s in run.steps] == ["cat a.py", None,
                                             "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    assert run.steps[0].observation.output == "x = 1\n"
    assert run.steps[0].observation.returncode == 0
    assert run.steps[1].observation.kind == ObservationKind.FORMAT_ERROR
    assert run.steps[2].observation.kind == ObservationKind.SUBMISSION
    assert all(m["role"] != "exit" for m in run.messages)  # never sent to the model


def test_a_run_without_its_format_is_read_by_its_turns_and_a_wrong_format_is_refused():
    """2.x keeps each turn's commands in extra.actions, 1.x in the turn's text: a file
    that does not say its format is read as its turns are, and one whose turns say
    otherwise is refused by name (read as the other, every turn had no command)."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK},
                {"role": "assistant", "content": "Reading.",
                 "extra": {"actions": [{"command": "cat a.py"}]}},
                {"role": "user", "content": "x = 1\n",
                 "extra": {"raw_output": "x = 1\n", "returncode": 0}}]
    undeclared = parse_trajectory({"messages": messages})
    assert undeclared.trajectory_format == FORMAT_V2
    assert [s.action for s in undeclared.steps] == ["cat a.py"]
    old = v1_run()
    del old["trajectory_format"]
    assert parse_trajectory(old).steps[0].action == "cat file1.py"
    with pytest.raises(TrajectoryError, match=r"read as mini-swe-agent 2.x \('mini-swe-agent-"
                       r"1.1'\), but no assistant turn holds extra.actions.*a 1.x run's "
                       r"trajectory_format is 'mini-swe-agent-1'"):
        parse_trajectory({**v1_run(), "trajectory_format": FORMAT_V2})
    with pytest.raises(TrajectoryError, match=r"read as mini-swe-agent 1.x \('mini-swe-agent-"
                       r"1'\), but 1 assistant turn\(s\) hold extra.actions"):
        parse_trajectory({"trajectory_format": "mini-swe-agent-1", "messages": messages})


def test_a_v2_turn_with_several_actions_keeps_each_command_and_output():
    # a tool-calling model's turn runs each action; the harness answers each
    turn = {"role": "assistant", "content": "Both.", "extra": {
        "actions": [{"command": "echo one"}, {"command": "false"}]}}
    outputs = [{"role": "tool", "content": "<returncode>0</returncode>\none\n",
                "extra": {"raw_output": "one\n", "returncode": 0}},
               {"role": "tool", "content": "<returncode>1</returncode>",
                "extra": {"raw_output": "", "returncode": 1}}]
    after = {"role": "assistant", "content": "Next.", "extra": {"actions": [{"command": "ls"}]}}
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK},
                turn, *outputs, after, {"role": "tool", "content": "a.py",
                                        "extra": {"raw_output": "a.py", "returncode": 0}}]
    run = parse_trajectory({"trajectory_format": FORMAT_V2, "messages": messages})
    assert [s.action for s in run.steps] == ["echo one\nfalse", "ls"]
    both = run.steps[0].observation
    assert both.output == "one\n\n" and both.returncode == 1 and "one" in both.text
    assert both.kind == ObservationKind.OUTPUT
    # the loop reads each action with its own answer (each ran in a shell of its own)
    from ctxdb.agent.loop import loop_step
    step = loop_step(run.steps[0])
    assert [(a.command, a.output, a.returncode) for a in step.actions] == [
        ("echo one", "one\n", 0), ("false", "", 1)]
    assert step.command == "echo one\nfalse" and step.returncode == 1
    assert loop_step(run.steps[1]).actions == ()
    # three actions, two answers (the run ended): the turn as one step, still a valid one
    from ctxdb.agent.adapter import checked_steps
    three = {**turn, "extra": {"actions": [*turn["extra"]["actions"], {"command": "ls"}]}}
    short = parse_trajectory({"trajectory_format": FORMAT_V2,
                              "messages": [*messages[:2], three, *outputs]})
    assert loop_step(short.steps[0]).actions == ()
    assert checked_steps([loop_step(s) for s in short.steps + run.steps])
    # a failed action fails the turn whatever ran after it
    turn["extra"]["actions"].reverse()
    run = parse_trajectory({"trajectory_format": FORMAT_V2,
                            "messages": [*messages[:3], *reversed(outputs), *messages[5:]]})
    assert run.steps[0].action == "false\necho one" and run.steps[0].observation.returncode == 1
    turn["extra"]["actions"].reverse()
    # a turn whose second action never answered, then a rejected reply: a step of its own
    rejected = {"role": "user", "content": "Format error", "extra": {"interrupt_type":
                                                                     "FormatError"}}
    run = parse_trajectory({"trajectory_format": FORMAT_V2,
                            "messages": [*messages[:3], outputs[0], rejected]})
    assert [s.observation.kind for s in run.steps] == [ObservationKind.OUTPUT,
                                                       ObservationKind.FORMAT_ERROR]
    # a turn that edits and then submits: the edit ran, and the step is the submit
    submitting = {"role": "assistant", "content": "Done.", "extra": {"actions": [
        {"command": "sed -i s/a/b/ a.py"},
        {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}]}}
    messages[2:] = [submitting, {"role": "exit", "content": "diff",
                                 "extra": {"exit_status": "Submitted"}}]
    run = parse_trajectory({"trajectory_format": FORMAT_V2, "messages": messages})
    assert run.steps[0].action.startswith("sed -i") and run.steps[0].is_submit


def test_a_v2_reply_the_harness_rejected_unrecorded_is_a_step_of_its_own():
    # mini-swe-agent 2.4 keeps the format error it answered with, not the reply itself
    rejected = {"role": "user", "content": "Format error: expected one action",
                "extra": {"interrupt_type": "FormatError"}}
    turn = {"role": "assistant", "content": "Reading.", "extra": {"actions": [{"command": "ls"}]}}
    output = {"role": "user", "content": "a.py", "extra": {"raw_output": "a.py", "returncode": 0}}
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK},
                rejected, turn, output, rejected, turn, output]
    run = parse_trajectory({"trajectory_format": FORMAT_V2, "messages": messages})
    assert [s.action for s in run.steps] == [None, "ls", None, "ls"]
    assert [s.observation.kind for s in run.steps] == [
        ObservationKind.FORMAT_ERROR, ObservationKind.OUTPUT] * 2
    # the history before each model call ends where that call's reply would have been
    assert [len(run.history_before(k)) for k in (1, 2, 3, 4)] == [2, 3, 5, 6]
    assert run.steps[0].reasoning == ""  # no reply kept: nothing to show
    # ...though 2.4 keeps the rejected reply's text in the error's extra: a window shows
    # it whole, its blocks too (the next reply re-sends one), as a live run's does
    reply = "THOUGHT: Both.\n\n```mswea_bash_command\nls\n```\n\n```mswea_bash_command\npwd\n```"
    kept = {**rejected, "extra": {**rejected["extra"], "model_response": reply}}
    run = parse_trajectory({"trajectory_format": FORMAT_V2,
                            "messages": [*messages[:2], kept, *messages[3:]]})
    assert run.steps[0].action is None and run.steps[0].turn == reply
    assert run.steps[0].reasoning == reply.removeprefix("THOUGHT: ")
    assert run.steps[0].thought == "Both."


@pytest.mark.parametrize(("content", "expected"), [
    (b'{"messages": [', "not JSON"),
    # the parser's "starting at" is given its place once, not "at at"
    (b'{"messages": [{"role": "sys', "not JSON (Unterminated string starting at line 1 column 24)"),
    (b"\xff\xfe{}", "not UTF-8"),
    (b'{"messages": []}', "'messages': expected a non-empty list"),
    (b'{"messages": [{"role": "user", "content": "x"}]}', "messages[0]: expected the system"),
    (b'{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": 5}]}',
     "messages[1].content: expected a string"),
    (b'{"trajectory_format": "other", "messages": [{"role": "system", "content": ""}]}',
     "trajectory_format 'other'"),
])
def test_a_malformed_file_is_refused_naming_the_file_and_the_message(tmp_path, content, expected):
    path = tmp_path / "bad.traj.json"
    path.write_bytes(content)
    with pytest.raises(TrajectoryError) as raised:
        read_trajectory(path)
    assert str(path) in str(raised.value) and expected in str(raised.value)


def test_an_observation_with_no_turn_before_it_is_named_by_index():
    data = v1_run(2)
    data["messages"].insert(3, {"role": "user", "content": "stray"})
    with pytest.raises(TrajectoryError, match=r"messages\[4\]: an observation with no turn"):
        parse_trajectory(data, "x.traj.json")


def test_mask10_keeps_the_ten_newest_observations_and_masks_the_rest():
    run = parse_trajectory(v1_run(15))
    k = 15  # 14 observations before the last turn
    masked = mask10_prompt(run, k)
    current = current_prompt(run, k)
    assert len(masked) == len(current)
    observations = [i for i in range(2, len(current)) if current[i]["role"] == "user"]
    assert len(observations) == 14
    old = observations[: 14 - MASK_KEEP_NEWEST]
    assert masked_observation_indexes(run, k) == frozenset(old)
    for i in old:
        assert masked[i]["content"].startswith("[Old observation omitted")
    for i in observations[14 - MASK_KEEP_NEWEST:]:
        assert masked[i] == current[i]
    assert all(masked[i] == current[i] for i in range(len(current)) if i not in old)


def test_prompt_tokens_and_the_prefix_a_cache_serves():
    counter = PromptCounter(lambda text: len(text.split()))
    first = [{"role": "system", "content": "a b c"}, {"role": "user", "content": "d e"}]
    assert counter.prompt_tokens(first) == (CHAT_REPLY_PRIMING_TOKENS + 3 + 2
                                            + 2 * CHAT_MESSAGE_OVERHEAD_TOKENS)
    appended = first + [{"role": "assistant", "content": "f"}]
    # an append-only history: everything sent before is a cache hit
    assert counter.cached_tokens(first, appended) == 3 + 2 + 2 * CHAT_MESSAGE_OVERHEAD_TOKENS
    changed = [first[0], {"role": "user", "content": "d x y"}]
    # the first message whole, then the shared start "d " of the second
    assert counter.cached_tokens(first, changed) == 3 + CHAT_MESSAGE_OVERHEAD_TOKENS + 1
    assert counter.cached_tokens(None, first) == 0


@pytest.mark.parametrize(("environment", "expected"), [
    ({"cwd": "/../../tmp/x"}, "info.config.environment.cwd '/../../tmp/x': expected an absolute"),
    ({"cwd": "relative"}, "info.config.environment.cwd 'relative'"),
    ({"cwd": "/"}, "info.config.environment.cwd '/'"),
    ({"cwd": 5}, "info.config.environment.cwd 5"),
    ({"timeout": 1e9}, "info.config.environment.timeout 1000000000.0: expected seconds"),
    ({"timeout": float("inf")}, "info.config.environment.timeout inf"),
    ({"timeout": 0}, "info.config.environment.timeout 0"),
    ({"timeout": True}, "info.config.environment.timeout True"),
    ([1, 2], "info.config.environment: expected an object"),
])
def test_where_the_agent_worked_and_its_time_limit_are_checked(environment, expected):
    data = v1_run(2)
    data["info"]["config"] = {"environment": environment}
    with pytest.raises(TrajectoryError) as raised:
        parse_trajectory(data, "x.traj.json")
    assert str(raised.value).startswith("x.traj.json: ") and expected in str(raised.value)


def test_a_directory_given_with_a_trailing_slash_is_that_directory():
    data = v1_run(2)
    data["info"]["config"] = {"environment": {"cwd": "/testbed/"}}
    assert parse_trajectory(data).workdir == "/testbed"


def test_a_tool_calling_turn_counts_its_calls_in_every_arm_that_resends_it():
    """A tool-calling harness sends the agent's commands as the turn's tool calls: the
    current and mask10 arms count them (as ctx08's window shows the command), find the
    anchors they hold, and a call's text that differs is a message that differs."""
    call = {"id": "call_1", "type": "function",
            "function": {"name": "bash", "arguments": '{"command": "cat tax.py"}'}}
    turn = {"role": "assistant", "content": None, "tool_calls": [call],
            "extra": {"actions": [{"command": "cat tax.py", "tool_call_id": "call_1"}]}}
    answer = {"role": "tool", "tool_call_id": "call_1", "content": "<output>x</output>",
              "extra": {"raw_output": "x", "returncode": 0}}
    after = {"role": "assistant", "content": "Done.", "extra": {"actions": [{"command": "ls"}]}}
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK},
                turn, answer, after]
    run = parse_trajectory({"trajectory_format": FORMAT_V2, "messages": messages})
    sent = current_prompt(run, 2)
    assert sent[2] == {"role": "assistant", "content": "",
                       TOOL_CALLS_TEXT: 'bash {"command": "cat tax.py"}'}
    assert run.steps[0].thought == ""  # the command is not reasoning
    assert counted_text(sent[2]) == 'bash {"command": "cat tax.py"}'
    assert counted_text({**sent[2], "content": "Read it."}) == \
        'Read it.\nbash {"command": "cat tax.py"}'
    assert mask10_prompt(run, 2)[2] == sent[2]
    assert "tax.py" in prompt_text(sent)
    counter = PromptCounter(lambda text: len(text.split()))
    assert counter.prompt_tokens(sent) == counter.prompt_tokens(
        [*sent[:2], {"role": "assistant", "content": 'bash {"command": "cat tax.py"}'},
         sent[3]])
    assert counter.prompt_tokens(messages[:4]) == counter.prompt_tokens(sent)  # as given
    other = [*sent[:2], {**sent[2], TOOL_CALLS_TEXT: 'bash {"command": "cat vat.py"}'}]
    # the system and task messages whole, then the call's shared start
    assert counter.cached_tokens(sent, other) == (
        counter.message_tokens(SYSTEM) + counter.message_tokens(TASK)
        + len('bash {"command": "cat'.split()))
    # arguments a provider gives parsed are counted as JSON; a malformed call is named
    parsed = {**call, "function": {"name": "bash", "arguments": {"command": "ls"}}}
    assert counted_text({"role": "assistant", "content": "", "tool_calls": [parsed]}) == \
        'bash {"command": "ls"}'
    broken = {**turn, "tool_calls": [{"id": "x", "function": {"name": "bash"}}]}
    with pytest.raises(TrajectoryError, match=r"messages\[2\]\.tool_calls\[0\]: expected a "
                       "'function' with a string 'name' and 'arguments'"):
        parse_trajectory({"trajectory_format": FORMAT_V2,
                          "messages": [*messages[:2], broken, answer]}, "x")


def test_odd_shapes_are_refused_by_name_not_with_a_traceback(tmp_path):
    data = v1_run(2)
    data["info"]["config"] = "not an object"
    with pytest.raises(TrajectoryError, match="info.config: expected an object"):
        parse_trajectory(data, "x")
    data = v1_run(2)
    data["messages"][2]["content"] = [{"type": "text", "text": 5}]
    with pytest.raises(TrajectoryError, match=r"messages\[2\].content: expected text parts"):
        parse_trajectory(data, "x")
    deep = tmp_path / "deep.traj.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(TrajectoryError, match="nested too deeply"):
        read_trajectory(deep)


def test_the_programs_a_recorded_environment_lacked_are_read_from_the_shells_own_words():
    data = v1_run(1)
    steps = [
        ("printf ',s/a/b/\\nw\\n' | ed -s x.py", "bash: line 1: ed: command not found\n", 127),
        ("unzip -l dist.zip", "bash: unzip: command not found\n", 127),
        ("msgfmt x.po", "/bin/sh: 1: msgfmt: not found\n", 127),
        ("sh -c 'antlr4 g4'", "sh: 1: antlr4: not found\n", 127),
        ("./fix.sh", "./fix.sh: line 3: dvipng: command not found\n", 0),
        # a line an output quotes, about a program the command never names
        ("cat build.log", "bash: line 1: make: command not found\n", 0),
        # not bash's word for a missing program at all
        ("python3 run.py", "python3: can't open file 'run.py'\nbash: type: ed: not found\n", 2),
        ("ed -s x.py < script", "ok\n", 0),  # the agent got ed later: its last word counts
        ("which ed2 || echo none", "bash: line 1: ed: command not found\n", 0),
    ]
    data["messages"][2:2] = [message for command, output, code in steps
                             for message in (turn(command), observation(output, code))]
    lacked = programs_lacked(parse_trajectory(data, "demo.traj.json"))
    assert lacked == {"ed": 1, "unzip": 2, "msgfmt": 3, "antlr4": 4, "dvipng": 5}
