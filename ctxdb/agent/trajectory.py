"""A recorded agent run read as OpenAI-style chat messages and as steps.

One reader per harness format, both of mini-swe-agent's ``.traj.json``:

- **1.x** (``trajectory_format: mini-swe-agent-1``, the development runs): the agent's
  turn holds its command as exactly one fenced ``bash`` block; the observation that
  follows is the harness's rendered template (``<returncode>``, ``<output>`` or a head
  and tail with a warning when long), a format error, or a timeout note.
- **2.x** (``trajectory_format: mini-swe-agent-1.1``): the turn's commands are in
  ``extra.actions``; an observation carries ``extra.raw_output`` and
  ``extra.returncode``; the harness marks its own interruptions in
  ``extra.interrupt_type`` (a format error) and ends with an ``exit`` message.

A step is the agent's turn (its reasoning text and its command) and the observation it
got back. A turn with no command is a format error the harness answered (a 1.x reply
with several commands too: 1.x refused it): a step with no action. A 2.x turn with
several actions (tool calls) ran each: its step keeps each one's answer too.
Decision k is the model call that produced turn k: the harness
sent every message before it (``history_before(k)``).
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from ..request_limits import json_error_reason

FORMAT_V1 = "mini-swe-agent-1"
FORMAT_V2 = "mini-swe-agent-1.1"
FORMATS = (FORMAT_V1, FORMAT_V2)

# mini-swe-agent 1.x's action rule: exactly one fenced bash block
V1_ACTION = re.compile(r"```bash\s*\n(.*?)\n```", re.DOTALL)
# what the 1.x observation template and its timeout template render
_RETURNCODE = re.compile(r"<returncode>(-?\d+)</returncode>")
_OUTPUT = re.compile(r"<output>\n?(.*?)</output>", re.DOTALL)
_OUTPUT_HEAD = re.compile(r"<output_head>\n?(.*?)</output_head>", re.DOTALL)
_OUTPUT_TAIL = re.compile(r"<output_tail>\n?(.*?)</output_tail>", re.DOTALL)
_FENCED_BLOCK = re.compile(r"```\w*\s*\n.*?\n```", re.DOTALL)  # a command block, any tag
_TIMED_OUT = re.compile(r"^The last command <command>.*?</command> timed out", re.DOTALL)
# the first line a run's last command prints: the harness submits what follows it
SUBMIT_MARKERS = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "MINI_SWE_AGENT_FINAL_OUTPUT")
# mini-swe-agent 2.x's extra.interrupt_type for a reply its parser rejected
FORMAT_ERROR_INTERRUPT = "FormatError"
# the key of a chat message's tool calls as counted (``tool_calls_text``)
TOOL_CALLS_TEXT = "tool_calls_text"
DEFAULT_WORKDIR = "/testbed"  # where SWE-bench's harnesses run the agent's commands
DEFAULT_COMMAND_TIMEOUT_S = 60  # mini-swe-agent's environment timeout in the development runs
# the most a recorded run may ask for one command: a replay worker is never held longer
MAX_COMMAND_TIMEOUT_S = 600


class TrajectoryError(ValueError):
    """A recorded run that cannot be read: names the file and, where known, the message."""


class ObservationKind(StrEnum):
    OUTPUT = "output"  # the command ran and its output is shown whole
    OUTPUT_CUT = "output_cut"  # the harness showed the output's head and tail only
    TIMEOUT = "timeout"  # the harness killed the command at its time limit
    FORMAT_ERROR = "format_error"  # no command or several: the harness's rule, restated
    SUBMISSION = "submission"  # the run's last observation: the patch it submitted
    NOTE = "note"  # any other message of the harness's own


@dataclass(frozen=True)
class Observation:
    message_index: int
    text: str  # the message exactly as the harness sent it in the history
    kind: ObservationKind
    output: str  # the command's output (what the template wrapped), or the text itself
    returncode: int | None = None


@dataclass(frozen=True)
class Step:
    number: int  # k, from 1: the k-th assistant turn, made by decision k
    message_index: int
    turn: str  # the assistant message as sent back in later histories
    thought: str  # the turn without its command blocks
    commands: tuple[str, ...]
    observation: Observation | None  # None only after a run's last turn
    # a turn of several actions (2.x tool calls): each one's own answer, in order
    # (``observation`` is them merged)
    each_observation: tuple[Observation, ...] = ()

    @property
    def action(self) -> str | None:
        """The command the harness ran — a turn's several actions (2.x tool calls) one per
        line, in the order they ran — or None (a format error: nothing ran)."""
        if not self.commands:
            return None
        if self.observation is not None and self.observation.kind == ObservationKind.FORMAT_ERROR:
            return None
        # (a v1 reply with two blocks was refused: its observation is a format error; a
        # 2.x turn whose last action submitted ran the ones before it)
        return "\n".join(self.commands)

    @property
    def reasoning(self) -> str:
        """The turn as a window shows its reasoning: without its command blocks, which
        are shown as its command — or whole, blocks and all, when the harness ran
        nothing of it (a format error: several blocks, or blocks it could not read). The
        agent's next reply re-sends one of those, and nothing else in a window shows
        them."""
        if self.action is None:
            return _unmarked(self.turn)
        return self.thought

    @property
    def is_submit(self) -> bool:
        action = self.action or ""
        return any(marker in action for marker in SUBMIT_MARKERS)


@dataclass(frozen=True)
class AgentRun:
    path: str
    trajectory_format: str
    instance_id: str | None
    # role, content (and tool calls' text: ``as_chat``), in the harness's order
    messages: tuple[dict[str, str], ...]
    system_prompt: str
    instruction: str  # the first user message: the harness's instructions with the task
    steps: tuple[Step, ...]
    submission: str | None
    exit_status: str | None
    workdir: str = DEFAULT_WORKDIR
    command_timeout_s: float = DEFAULT_COMMAND_TIMEOUT_S

    @property
    def task(self) -> str:
        """The task as the harness gave it: inside ``<pr_description>`` when the
        instruction has one (mini-swe-agent's SWE-bench template), else the whole message."""
        match = re.search(r"<pr_description>\s*(?:Consider the following PR description:\s*)?"
                          r"(.*?)</pr_description>", self.instruction, re.DOTALL)
        return (match.group(1) if match else self.instruction).strip()

    def history_before(self, k: int) -> list[dict[str, str]]:
        """What the harness sent at decision k: every message before turn k."""
        if not 1 <= k <= len(self.steps):
            raise IndexError(f"decision {k}: this run has decisions 1 to {len(self.steps)}")
        return [dict(m) for m in self.messages[: self.steps[k - 1].message_index]]


def as_chat(message: Any, where: str) -> dict[str, str]:
    """A harness's chat message as its role and its content as text (a multimodal
    content's text parts joined; none, of a turn or tool output, as empty), and its tool
    calls' text (``TOOL_CALLS_TEXT``, only when it has some), or the error naming
    ``where``."""
    if not isinstance(message, dict):
        raise TrajectoryError(f"{where}: expected an object, got {type(message).__name__}")
    role, content = message.get("role"), message.get("content")
    if not isinstance(role, str):
        raise TrajectoryError(f"{where}.role: expected a string")
    if isinstance(content, list):  # multimodal content: its text parts, in order
        texts = [part.get("text", "") for part in content if isinstance(part, dict)]
        if not all(isinstance(text, str) for text in texts):
            raise TrajectoryError(f"{where}.content: expected text parts with string 'text'")
        content = "".join(texts)
    if content is None and role in ("assistant", "tool", "exit"):
        content = ""
    if not isinstance(content, str):
        raise TrajectoryError(f"{where}.content: expected a string")
    calls = tool_calls_text(message, where)
    return {"role": role, "content": content} | ({TOOL_CALLS_TEXT: calls} if calls else {})


def tool_calls_text(message: dict, where: str) -> str:
    """A chat message's tool calls (the chat API's ``tool_calls``, where a tool-calling
    harness puts the agent's commands) as the text a prompt's count takes for them: each
    call's function name and arguments as sent, a call a line; "" for none. A message
    this module made gives its ``TOOL_CALLS_TEXT`` back. A call's id, and the framing a
    provider puts around a call, are not counted (nor published)."""
    calls = message.get("tool_calls")
    if calls is None or calls == []:
        kept = message.get(TOOL_CALLS_TEXT, "")
        if not isinstance(kept, str):
            raise TrajectoryError(f"{where}.{TOOL_CALLS_TEXT}: expected a string")
        return kept
    if not isinstance(calls, list):
        raise TrajectoryError(f"{where}.tool_calls: expected a list of calls")
    lines = []
    for number, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(arguments, dict):  # a provider that gives them parsed
            arguments = json.dumps(arguments, ensure_ascii=False)
        if not isinstance(name, str) or not isinstance(arguments, str):
            raise TrajectoryError(f"{where}.tool_calls[{number}]: expected a 'function' with "
                                  "a string 'name' and 'arguments'")
        lines.append(f"{name} {arguments}")
    return "\n".join(lines)


def counted_text(message: dict) -> str:
    """What of a chat message a prompt's count takes: its content, then its tool calls'
    text (``tool_calls_text``) on the lines after it; the content alone when it has none."""
    content = message.get("content") or ""
    calls = tool_calls_text(message, "message")
    return "\n".join(text for text in (content, calls) if text) if calls else content


def read_trajectory(path: str | Path) -> AgentRun:
    """Read one ``.traj.json``; raises TrajectoryError naming the file and message."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TrajectoryError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise TrajectoryError(f"{path}: not UTF-8 at byte {exc.start}") from exc
    except json.JSONDecodeError as exc:
        raise TrajectoryError(f"{path}: not JSON ({json_error_reason(exc)} at line {exc.lineno} "
                              f"column {exc.colno}): truncated or not a trajectory") from exc
    except RecursionError:
        raise TrajectoryError(f"{path}: JSON nested too deeply to be a trajectory") from None
    return parse_trajectory(data, str(path))


def parse_trajectory(data: Any, name: str = "<trajectory>") -> AgentRun:
    if not isinstance(data, dict):
        raise TrajectoryError(f"{name}: expected a JSON object with 'messages'")
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise TrajectoryError(f"{name}: 'messages': expected a non-empty list")
    fmt = data.get("trajectory_format")
    if fmt is not None and fmt not in FORMATS:
        raise TrajectoryError(f"{name}: trajectory_format {fmt!r}: expected one of "
                              f"{', '.join(FORMATS)}")
    fmt = _format_of_turns(messages, fmt, name)
    given_info = data.get("info")
    info: dict = given_info if isinstance(given_info, dict) else {}
    workdir, timeout = _environment(info, name)
    chats = [as_chat(m, f"{name}: messages[{i}]") for i, m in enumerate(messages)]
    if chats[0]["role"] != "system":
        raise TrajectoryError(f"{name}: messages[0]: expected the system prompt, "
                              f"got role {chats[0]['role']!r}")
    if len(chats) < 2 or chats[1]["role"] != "user":
        raise TrajectoryError(f"{name}: messages[1]: expected the task as a user message")
    reader = _steps_v2 if fmt == FORMAT_V2 else _steps_v1
    steps = reader(messages, chats, name)
    submission = info.get("submission")
    # a run of ctxdb's mini-swe-agent model names its instance where the model's info goes
    given_ctxdb = info.get("ctxdb")
    recorded_by_ctxdb: dict = given_ctxdb if isinstance(given_ctxdb, dict) else {}
    instance_id = next((given for given in (data.get("instance_id"),
                                            recorded_by_ctxdb.get("instance_id"))
                        if isinstance(given, str) and given), None)
    return AgentRun(
        path=name, trajectory_format=fmt, instance_id=instance_id,
        messages=tuple(m for m in chats if m["role"] != "exit"),
        system_prompt=chats[0]["content"], instruction=chats[1]["content"],
        steps=tuple(steps),
        submission=submission if isinstance(submission, str) else None,
        exit_status=info.get("exit_status") if isinstance(info.get("exit_status"), str) else None,
        workdir=workdir, command_timeout_s=timeout,
    )


def _format_of_turns(messages: list, declared: str | None, name: str) -> str:
    """The format the turns are in: 2.x keeps every assistant turn's commands in
    ``extra.actions``, 1.x in its text, so a file without ``trajectory_format`` is read
    by its turns, and one whose turns say otherwise than its format is refused (read as
    the other, every turn would be a step with no command)."""
    turns = [m for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
    with_actions = sum(1 for m in turns if "actions" in _extra(m))
    held = FORMAT_V2 if with_actions else FORMAT_V1
    if declared is None:
        return held
    if declared == FORMAT_V2 and turns and not with_actions:
        raise TrajectoryError(f"{name}: read as mini-swe-agent 2.x ({declared!r}), but no "
                              "assistant turn holds extra.actions, where 2.x keeps its "
                              f"commands (a 1.x run's trajectory_format is {FORMAT_V1!r})")
    if declared == FORMAT_V1 and with_actions:
        raise TrajectoryError(f"{name}: read as mini-swe-agent 1.x ({declared!r}), but "
                              f"{with_actions} assistant turn(s) hold extra.actions, as 2.x's "
                              f"do (a 2.x run's trajectory_format is {FORMAT_V2!r})")
    return declared


def _environment(info: dict, name: str) -> tuple[str, float]:
    """Where the agent worked and each command's time limit, checked: the replay mounts
    the tree at that directory and holds a worker that long."""
    config = info.get("config") or {}
    if not isinstance(config, dict):
        raise TrajectoryError(f"{name}: info.config: expected an object")
    environment = config.get("environment") or {}
    if not isinstance(environment, dict):
        raise TrajectoryError(f"{name}: info.config.environment: expected an object")
    cwd = environment.get("cwd") or DEFAULT_WORKDIR
    if isinstance(cwd, str) and len(cwd) > 1:
        cwd = cwd.rstrip("/") or "/"  # (`/testbed/` is `/testbed`)
    if (not isinstance(cwd, str) or not cwd.startswith("/") or cwd == "/"
            or posixpath.normpath(cwd) != cwd or "\0" in cwd):
        raise TrajectoryError(f"{name}: info.config.environment.cwd {cwd!r}: expected an "
                              "absolute, normalized directory other than /")
    timeout = environment.get("timeout", DEFAULT_COMMAND_TIMEOUT_S)
    if (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
            or not 0 < timeout <= MAX_COMMAND_TIMEOUT_S):
        raise TrajectoryError(f"{name}: info.config.environment.timeout {timeout!r}: expected "
                              f"seconds above 0, at most {MAX_COMMAND_TIMEOUT_S}")
    return cwd, float(timeout)


def _thought(turn: str, pattern: re.Pattern[str]) -> str:
    return _unmarked(pattern.sub("", turn))


def _unmarked(turn: str) -> str:
    """A turn without the ``THOUGHT:`` that mini-swe-agent's prompt asks it to open with."""
    return turn.replace("THOUGHT:", "", 1).strip()


def _steps_v1(messages: list, chats: list[dict[str, str]], name: str) -> list[Step]:
    steps: list[Step] = []
    for index in range(2, len(chats)):
        chat = chats[index]
        if chat["role"] == "assistant":
            commands = tuple(c.strip() for c in V1_ACTION.findall(chat["content"]))
            following = chats[index + 1] if index + 1 < len(chats) else None
            observation = None
            if following is not None:
                if following["role"] != "user":
                    raise TrajectoryError(f"{name}: messages[{index + 1}]: expected the "
                                          f"observation of the turn before, got role "
                                          f"{following['role']!r}")
                observation = _observation_v1(index + 1, following["content"], commands)
            steps.append(Step(len(steps) + 1, index, chat["content"],
                              _thought(chat["content"], V1_ACTION), commands, observation))
        elif chat["role"] != "user":
            raise TrajectoryError(f"{name}: messages[{index}]: unexpected role {chat['role']!r}")
        elif chats[index - 1]["role"] != "assistant":
            raise TrajectoryError(f"{name}: messages[{index}]: an observation with no turn "
                                  "before it")
    return steps


def text_lines(text: str) -> list[str]:
    """``text``'s lines as ``nl``, ``sed`` and ``grep -n`` count them: each ended by a
    newline alone (a CRLF's carriage return taken off), where ``str.splitlines`` also ends
    one at a form feed, a lone carriage return or U+2028 and would number every line after
    it otherwise than the agent's commands do."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if "\r" not in text:  # (most files: every window reads each file it shows)
        return lines
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _observation_v1(index: int, text: str, commands: Sequence[str]) -> Observation:
    returncode = _RETURNCODE.search(text)
    code = int(returncode.group(1)) if returncode else None
    if _TIMED_OUT.match(text):
        output = _OUTPUT.search(text)
        return Observation(index, text, ObservationKind.TIMEOUT,
                           output.group(1) if output else text, code)
    if returncode is not None and text.lstrip().startswith("<returncode>"):
        whole = _OUTPUT.search(text)
        if whole is not None:
            return Observation(index, text, ObservationKind.OUTPUT, whole.group(1), code)
        head, tail = _OUTPUT_HEAD.search(text), _OUTPUT_TAIL.search(text)
        if head is not None or tail is not None:
            cut = (head.group(1) if head else "") + (tail.group(1) if tail else "")
            return Observation(index, text, ObservationKind.OUTPUT_CUT, cut, code)
        return Observation(index, text, ObservationKind.OUTPUT, "", code)
    if len(commands) != 1:
        return Observation(index, text, ObservationKind.FORMAT_ERROR, text)
    if any(marker in commands[0] for marker in SUBMIT_MARKERS):
        return Observation(index, text, ObservationKind.SUBMISSION, text)
    return Observation(index, text, ObservationKind.NOTE, text)


def _steps_v2(messages: list, chats: list[dict[str, str]], name: str) -> list[Step]:
    steps: list[Step] = []
    index = 2
    typed = False  # an interactive agent's user typed a command before the model's first step
    while index < len(chats):
        chat, extra = chats[index], _extra(messages[index])
        if (chat["role"] != "assistant" and extra.get("interrupt_type") == FORMAT_ERROR_INTERRUPT
                and chats[index - 1]["role"] != "assistant"):
            # 2.x records the harness's complaint, not the reply it rejected, as a message
            # (2.4 keeps the reply's text in the complaint's extra.model_response): that
            # model call is a step with no command, so step k stays the k-th call
            reply = extra.get("model_response")
            rejected = reply if isinstance(reply, str) else ""
            steps.append(Step(len(steps) + 1, index, rejected,
                              _thought(rejected, _FENCED_BLOCK), (),
                              Observation(index, chat["content"], ObservationKind.FORMAT_ERROR,
                                          chat["content"])))
            index += 1
            continue
        if chat["role"] != "assistant":
            # a command the user typed (mini-swe-agent's interactive agent: a user message
            # with its actions), and what it printed, is no model step
            typed = typed or bool(extra.get("actions"))
            if chat["role"] in ("user", "tool", "exit") and (steps and index > 2 or typed):
                index += 1  # a further observation of a turn with several actions
                continue
            raise TrajectoryError(f"{name}: messages[{index}]: expected an assistant turn, "
                                  f"got role {chat['role']!r}")
        actions = extra.get("actions", [])
        if not isinstance(actions, list) or not all(
                isinstance(a, dict) and isinstance(a.get("command"), str) for a in actions):
            raise TrajectoryError(f"{name}: messages[{index}].extra.actions: expected a list "
                                  "of objects with a string 'command'")
        commands = tuple(a["command"] for a in actions)
        observation = None
        following = index + 1
        observed: list[int] = []  # one observation per action (2.x tool calls run each in turn)
        while (following + len(observed) < len(chats)
               and chats[following + len(observed)]["role"] in ("user", "tool", "exit")
               and len(observed) < max(len(commands), 1)
               and not (observed and _extra(messages[following + len(observed)]).get(
                   "interrupt_type") == FORMAT_ERROR_INTERRUPT)):  # the next call's, rejected
            observed.append(following + len(observed))
        if len(observed) == 1:
            observation = _observation_v2(following, chats[following],
                                          _extra(messages[following]), commands)
        each: list[Observation] = []
        if len(observed) > 1:
            each = [_observation_v2(i, chats[i], _extra(messages[i]),
                                    commands[number:number + 1] or commands[:1])
                    for number, i in enumerate(observed)]
            observation = _observation_v2(following, *_merged_observations(
                [chats[i] for i in observed], [_extra(messages[i]) for i in observed]), commands,
                cut=any(o.kind == ObservationKind.OUTPUT_CUT for o in each))
        steps.append(Step(len(steps) + 1, index, chat["content"],
                          _thought(chat["content"], _FENCED_BLOCK),
                          commands, observation, tuple(each)))
        index += 1
    return steps


def _merged_observations(chats: list[dict[str, str]],
                         extras: list[dict]) -> tuple[dict[str, str], dict]:
    """The observations of a turn's several actions as one, in order: the texts and
    outputs joined, the first non-zero return code (every action runs, so one that failed
    makes the turn's answer a failure, whatever ran after it) else 0, the first
    interruption or exit."""
    codes = [e.get("returncode") for e in extras]
    codes = [c for c in codes if isinstance(c, int) and not isinstance(c, bool)]
    merged: dict = {"raw_output": "\n".join(
        e["raw_output"] if isinstance(e.get("raw_output"), str) else c["content"]
        for c, e in zip(chats, extras, strict=True))}
    if codes:
        merged["returncode"] = next((c for c in codes if c != 0), 0)
    for key in ("interrupt_type", "exit_status", "exception_info"):
        given = [e[key] for e in extras if e.get(key)]
        if given:
            merged[key] = given[0]
    role = "exit" if any(c["role"] == "exit" for c in chats) else chats[0]["role"]
    return {"role": role, "content": "\n".join(c["content"] for c in chats)}, merged


def _extra(message: Any) -> dict:
    extra = message.get("extra") if isinstance(message, dict) else None
    return extra if isinstance(extra, dict) else {}


def _observation_v2(index: int, chat: dict[str, str], extra: dict,
                    commands: Sequence[str], cut: bool | None = None) -> Observation:
    """``cut``: whether the harness cut the output (read from the texts when None)."""
    text = chat["content"]
    interrupt = extra.get("interrupt_type")
    if chat["role"] == "exit" or extra.get("exit_status") == "Submitted":
        return Observation(index, text, ObservationKind.SUBMISSION, text)
    if interrupt == FORMAT_ERROR_INTERRUPT or not commands:
        return Observation(index, text, ObservationKind.FORMAT_ERROR, text)
    code = extra.get("returncode")
    code = code if isinstance(code, int) and not isinstance(code, bool) else None
    raw = extra.get("raw_output")
    output = raw if isinstance(raw, str) else text
    exception = str(extra.get("exception_info") or "")
    if "timeout" in exception.lower() or "timed out" in exception.lower():
        return Observation(index, text, ObservationKind.TIMEOUT, output, code)
    if interrupt:
        return Observation(index, text, ObservationKind.NOTE, output, code)
    if cut is None:
        cut = output not in text
    kind = ObservationKind.OUTPUT_CUT if cut else ObservationKind.OUTPUT
    return Observation(index, text, kind, output, code)
