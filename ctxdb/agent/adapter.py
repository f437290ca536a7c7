"""The agent-loop adapter (issue 22): a harness's history in, one recorded decision and
its window out — the same call for the replay and a live loop.

``construct_step`` takes what a bash agent's harness has at the start of a turn — its own
prompt messages (system, instructions with the task), the steps so far and the working
tree — builds the window by ``ctxdb.agent.loop``'s rules, fits it under the store's
ceiling with the harness's prompt counted, and writes it as one decision in one
transaction: the history's parts as ``evidence_item`` rows (kinds ``agent_turn``,
``file_view``, ``harness_note`` and the live output kinds), each part's form and why in
``item_event``, the window in ``window_item``. ``DecisionContext.messages(prefix=...)``
then gives the chat messages to send.

With ``arm="current"`` nothing is folded: the window is the whole history as the harness
would send it, recorded as the ``current`` arm (spec §8's switch, ``CTX=current``).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..context import DecisionContext, WindowEntry
from ..forensics import (
    LOOP_PROVENANCE,
    PREFIX_DIGESTS_FIELD,
    RUN_REF_PREFIX,
    SENT_DIGESTS_FIELD,
    STEP_DIGESTS_FIELD,
    request_as_given,
)
from ..pipeline import persist
from ..pipeline.state import (
    BACK,
    MIDDLE,
    TRANSIENT,
    WORKING_SET,
    BudgetStep,
    PoolItem,
    begin_attempt,
    decision_input,
    normalised_request,
)
from ..pipeline.vocabulary import (
    BUDGET,
    CACHE_MARKED_FLAG,
    EVICTED,
    HARNESS_SENT_OVER_CEILING_FLAG,
    IN_WINDOW,
    MASKED,
    RENDER,
    TASK_IN_PREFIX_FLAG,
    TOKENS_BOUNDED_FLAG,
    TREE_NOT_GIVEN_FLAG,
)
from ..pipeline.window_text import task_block
from ..request import DecisionRequest, PlanNode, RequestError, storable_value
from ..request_limits import loop_id_problem
from ..spec import ARM_CTX08, ARM_CURRENT, ARMS
from ..sqlfiles import sql_statement
from ..tokens import bounded_count, content_sha256, count_is_bounded, get_counter
from .arms import CHAT_MESSAGE_OVERHEAD_TOKENS, CHAT_REPLY_PRIMING_TOKENS

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from ..store import ContextStore
from .loop import (
    AGENT_TURN,
    DEFAULT_WORKDIR,
    FILE_VIEW,
    HARNESS_NOTE,
    LAST_THOUGHT_RULE,
    OUTPUT_PART,
    PARTS_PER_STEP,
    POINTER,
    SHOWN_CUT,
    SHOWN_LINES,
    SHOWN_WHOLE,
    LoopPart,
    LoopRules,
    LoopStep,
    LoopWindow,
    SettledPart,
    SettledParts,
    build_window,
    decision_type_of,
    fold_horizon,
    is_history_item,
    item_numbers,
    leaning_on,
    mask_hint,
    masked_label,
    newest_output,
    observation_kind,
    output_as_shown,
    prompt_names,
    repeated_steps,
    step_of_item,
    tree_change_item,
    view_span,
    with_outcome,
)
from .trajectory import (
    TOOL_CALLS_TEXT,
    ObservationKind,
    TrajectoryError,
    counted_text,
    text_lines,
    tool_calls_text,
)

FILE_READ_MAX_BYTES = 2 * 1024 * 1024  # a larger file is not a source a view shows
FILE_DIGEST_BYTES = 16  # a file's text named for what windows remember of it (not stored)
TOKEN_MEMO_SIZE = 8192  # parts repeat at every step of a run: each counted once
TEXT_REPLACED_FLAG = "text_replaced"  # a NUL or lone surrogate made storable (flags)
# the stride's fold waited (``loop.fold_pays``): ``fold_waited:N``, N the horizon kept
FOLD_WAITED_FLAG = "fold_waited"
# by loop.step_of_item's part number
PART_NAMES = ("command", "output", "reasoning", "changed lines")
# the roles a chat API takes in the harness's opening messages
PREFIX_ROLES = ("system", "developer", "user", "assistant")
# the ceiling's ladder (budget_log.ladder_step), in its order
LADDER_CUT_NEWEST_TO_SHARE = "loop_cut_newest_to_share"
LADDER_DROP_REASONING = "loop_drop_reasoning"
LADDER_FOLD_FRESH = "loop_fold_fresh"
LADDER_FOLD_VIEW = "loop_fold_view"
LADDER_CUT_COMMAND = "loop_cut_command"
LADDER_FOLD_COMMAND = "loop_fold_command"
LADDER_EVICT_OLDEST = "loop_evict_oldest"
LADDER_CUT_NEWEST = "loop_cut_newest"
OVER_CEILING_RULE = "over the ceiling"
# a budget_log detail: the ladder folded the output in the run's previous window too
LADDER_FOLDED_BEFORE = "folded in the previous window too"
# (why a newer output folded while an older one stayed: largest_first)
LADDER_LARGEST_FIRST = "the largest first"
CUT_COMMAND_CHARS = 200  # an old command cut by the ladder keeps its start
# Over the ceiling, the newest output is first cut to this share of it, before anything
# older folds or leaves: one huge output (a 30,000-line log) would otherwise take the
# place of every earlier step, which the agent works from. A mini-swe-agent harness cuts
# outputs at 10,000 characters itself, far below it.
NEWEST_OUTPUT_CEILING_SHARE = 0.5


class TreeFiles:
    """Repository files as the tree holds them now, read once per decision (a file only
    asked for its digest is not decoded: a window asks that of every file a remembered
    view read)."""

    def __init__(self, root: str | Path | None) -> None:
        self.root = Path(root).resolve() if root is not None else None
        self._data: dict[str, bytes | None] = {}
        self._lines: dict[str, list[str] | None] = {}
        self._digests: dict[str, str] = {}

    def __call__(self, path: str) -> list[str] | None:
        if path in self._lines:
            return self._lines[path]
        data = self._bytes(path)
        self._lines[path] = lines = (None if data is None
                                     else text_lines(data.decode("utf-8", "replace")))
        return lines

    def digest(self, path: str) -> str | None:
        """The file's text as a digest (what is read of it is the same while this is), or
        None when it is no text file this reader gives."""
        if self._bytes(path) is None:
            return None
        return self._digests[path]

    def _bytes(self, path: str) -> bytes | None:
        if path not in self._data:
            self._data[path] = data = self._read(path)
            if data is not None:
                self._digests[path] = hashlib.blake2b(
                    data, digest_size=FILE_DIGEST_BYTES).hexdigest()
        return self._data[path]

    def exists(self, path: str) -> bool:
        """Whether the tree holds anything at ``path`` (a file of any kind, a link, a
        directory): a file it cannot read as text is not gone."""
        if self.root is None or "\0" in path:
            return True  # no tree to ask: nothing is said to be gone
        return os.path.lexists(self.root / path)

    def _read(self, path: str) -> bytes | None:
        """The file's bytes, or None when it is no text file under the root."""
        if self.root is None or "\0" in path:
            return None
        try:
            candidate = (self.root / path).resolve()
        except (OSError, RuntimeError):  # a link loop (Python 3.11 raises RuntimeError)
            return None
        if self.root not in candidate.parents or not candidate.is_file():
            return None
        try:
            if candidate.stat().st_size > FILE_READ_MAX_BYTES:
                return None
            data = candidate.read_bytes()
        except OSError:
            return None
        if b"\0" in data:
            return None  # binary
        return data


@lru_cache(maxsize=TOKEN_MEMO_SIZE)
def _count(tokenizer: str, text: str) -> int:
    return bounded_count(get_counter(tokenizer).count, text)


def message_tokens(tokenizer: str, content: str) -> int:
    return _count(tokenizer, content) + CHAT_MESSAGE_OVERHEAD_TOKENS


# (field, may be null): the text fields of a step
_STEP_TEXT_FIELDS = (("command", True), ("output", False), ("thought", False),
                     ("observation", True), ("kind", False), ("call", True))
_STEP_KINDS = tuple(kind.value for kind in ObservationKind)
_STEP_FIELDS = tuple(LoopStep.__dataclass_fields__)


# what a harness may call a step's fields (its own names, other tools'), and how near a
# misspelt name is (difflib's ratio: 'comand' and 'ouput' are, 'stdout' and 'thought' not)
_STEP_FIELD_ALIASES = {"cmd": "command", "stdout": "output", "stderr": "output",
                       "exit_code": "returncode", "return_code": "returncode",
                       "rc": "returncode", "reasoning": "thought", "thinking": "thought"}
_MISSPELT_FIELD_RATIO = 0.8


def _meant_fields(unknown: set[str]) -> str:
    """`` (did you mean 'command' for 'cmd'?)`` for the unknown names a field goes by
    elsewhere or that misspell one."""
    meant = []
    for name in sorted(map(str, unknown)):
        near = ([_STEP_FIELD_ALIASES[name]] if name in _STEP_FIELD_ALIASES else
                difflib.get_close_matches(name, _STEP_FIELDS, n=1, cutoff=_MISSPELT_FIELD_RATIO))
        meant += [f"{near[0]!r} for {name!r}"] if near else []
    return f" (did you mean {', '.join(meant)}?)" if meant else ""


def checked_steps(values: object, listed_as: str = "steps") -> list[LoopStep]:
    """The history as ``LoopStep``s, each given as one or as its JSON object, checked
    field by field: a bad step is named by its index and field, with what was expected.
    ``listed_as``: where the list is (a step's ``actions`` are checked as steps)."""
    if isinstance(values, (str, bytes, dict)) or not isinstance(values, Sequence):
        raise RequestError(f"{listed_as}: expected a list of steps, got {type(values).__name__}")
    steps = []
    for index, value in enumerate(values):
        where = f"{listed_as}[{index}]"
        derived: set[str] = set()  # fields a JSON turn of several actions left to them
        if isinstance(value, LoopStep):
            fields = {name: getattr(value, name) for name in _STEP_FIELDS}
        elif isinstance(value, dict):
            unknown = set(value) - set(_STEP_FIELDS)
            if unknown:
                raise RequestError(f"{where}: unknown field(s) {sorted(map(str, unknown))}"
                                   f"{_meant_fields(unknown)}; a step's fields are "
                                   f"{', '.join(_STEP_FIELDS)}")
            # a turn of several actions may leave its command and output to them
            derived = {"command", "output"} - set(value) if value.get("actions") else set()
            if "command" not in value and not derived:
                raise RequestError(f"{where}.command: missing (null for a turn with no "
                                   f"command)")
            fields = {name: value.get(name, field.default)
                      for name, field in LoopStep.__dataclass_fields__.items()}
            # (LoopStep.command has no default: a derived one is made below, from the
            # checked actions)
            fields |= {"command": None} if "command" in derived else {}
        else:
            raise RequestError(f"{where}: expected a step object, got {type(value).__name__}")
        for name, nullable in _STEP_TEXT_FIELDS:
            field_value = fields[name]
            if not isinstance(field_value, str) and not (nullable and field_value is None):
                expected = "text or null" if nullable else "text"
                raise RequestError(f"{where}.{name}: expected {expected}, got "
                                   f"{type(field_value).__name__}")
        if fields["kind"] not in _STEP_KINDS:
            raise RequestError(f"{where}.kind: expected one of {list(_STEP_KINDS)}, got "
                               f"{fields['kind']!r}")
        code = fields["returncode"]
        if code is not None and (not isinstance(code, int) or isinstance(code, bool)):
            raise RequestError(f"{where}.returncode: expected an integer or null, got "
                               f"{type(code).__name__}")
        fields["actions"] = _checked_actions(fields["actions"], fields["command"], where,
                                             nested="." in listed_as,
                                             command_given="command" not in derived)
        if "command" in derived:
            fields["command"] = _actions_command(fields["actions"])
        if "output" in derived:
            fields["output"] = "\n".join(action.output for action in fields["actions"])
        if fields["call"] is not None and not fields["call"].strip():
            raise RequestError(f"{where}.call: expected the call's text or null, got "
                               f"{fields['call']!r}")
        if fields["call"] is not None and fields["actions"]:
            raise RequestError(f"{where}.call: expected null in a turn of several actions "
                               "(each action's call is shown)")
        # a command's result left out (a tool message lost on the way) would read as a
        # command that printed nothing
        if isinstance(value, dict) and (fields["command"], fields["call"]) != (None, None) \
                and not fields["actions"] and not {"output", "observation"} & set(value):
            raise RequestError(f"{where}.output: missing (what the command printed; \"\" "
                               f"when it printed nothing)")
        steps.append(LoopStep(**fields))  # a fresh one: its actions a tuple, as stored
    return steps


def _actions_command(actions: Sequence[LoopStep]) -> str | None:
    """A turn's command: its actions' commands, one per line (null when none has one: a
    call with no shell equivalent)."""
    commands = [action.command for action in actions if action.command is not None]
    return "\n".join(commands) if commands else None


def _checked_actions(actions: object, command: object, where: str,
                     nested: bool, command_given: bool = True) -> tuple[LoopStep, ...]:
    """A step's ``actions``: none, or two or more steps each with a command (or a call),
    the step's command, when given, being theirs one per line."""
    if isinstance(actions, (str, bytes, dict)) or not isinstance(actions, Sequence):
        raise RequestError(f"{where}.actions: expected a list of steps, got "
                           f"{type(actions).__name__}")
    if not actions:
        return ()
    if nested:  # an action is one command: it has no actions of its own
        raise RequestError(f"{where}.actions: expected none in an action")
    checked = tuple(checked_steps(actions, f"{where}.actions"))
    if len(checked) < 2:
        raise RequestError(f"{where}.actions: expected two or more (a turn that ran one "
                           f"command is a step without actions)")
    for index, action in enumerate(checked):
        if action.command is None and action.call is None:
            raise RequestError(f"{where}.actions[{index}].command: expected text, got null "
                               "(null only for a tool call with no shell equivalent: call)")
    if command_given and command != _actions_command(checked):
        raise RequestError(f"{where}.command: expected the actions' commands, one per line "
                           "(null when none has one)")
    return checked


def step_json(step: LoopStep) -> dict[str, Any]:
    """A step as the request's JSON keeps it (``actions`` only when it has some, ``call``
    only when it has one: a step without reads as it did before calls were)."""
    given = {name: getattr(step, name) for name in _STEP_FIELDS
             if name != "actions" and (name != "call" or step.call is not None)}
    if step.actions:
        given["actions"] = [step_json(action) for action in step.actions]
    return given


def construct_step(store: ContextStore, *, run_id: str, instance_id: str, task: str,
                   steps: Sequence[LoopStep | dict[str, Any]], tree: str | Path | None = None,
                   prefix: Sequence[dict[str, str]] = (), arm: str = ARM_CTX08,
                   seq: int | None = None, rules: LoopRules | None = None,
                   workdir: str | None = None,
                   sent: Sequence[dict[str, Any]] | None = None,
                   cache_marks: bool = False,
                   sent_if_over_ceiling: Sequence[dict[str, Any]] | None = None
                   ) -> DecisionContext:
    """Decision ``seq`` (``len(steps) + 1``, the default) of an agent loop, recorded; see the
    module's docstring. ``prefix``: the harness's own messages, sent before the window
    (when they hold the task, ``task`` is not repeated in the window). ``workdir``: where
    the agent's commands run, as they name it (default: ``tree`` itself; a SWE-bench
    harness's ``/testbed`` when the tree is a copy of it). ``sent`` (the current arm
    only): the messages the harness sends at this step, its prefix first, each a role and
    a content: the decision records them as they are, its turns and observations counted
    message by message (its own templates' markup too), where without them the history
    is rebuilt from the steps (``_history_as_sent``). ``cache_marks`` (ctx08 only): the
    window goes to the model as ``cache_marks.cache_marked_messages`` lays it out; the
    decision is flagged ``cache_marked``, so what the model got can be given back.
    ``sent_if_over_ceiling`` (ctx08 only): the messages the harness sends at this step
    when ctxdb's window cannot fit the ceiling (as ``sent``); then, instead of refusing
    the step (``OverCeilingError``), the decision records them, flagged
    ``harness_sent_over_ceiling``, so a live run's store counts what the model got."""
    history = checked_steps(steps)
    _check(run_id, instance_id, task, prefix, arm, seq)
    if sent_if_over_ceiling is not None and arm != ARM_CTX08:
        raise RequestError(f"sent_if_over_ceiling: only a decision of arm {ARM_CTX08!r} can "
                           f"fall back to the harness's messages; arm {arm!r} sends them")
    if sent_if_over_ceiling is not None:
        # a wrong value is named at the first step, not at the first that falls back
        # (a usage error: not the SentMessagesError of messages a fallback cannot read)
        _check_sent_shape(sent_if_over_ceiling, prefix, "sent_if_over_ceiling", RequestError)
    if sent is not None and arm != ARM_CURRENT:
        raise RequestError(f"sent: only a decision of arm {ARM_CURRENT!r} records the "
                           f"harness's own messages; arm {arm!r} sends ctxdb's window")
    if not isinstance(cache_marks, bool) or (cache_marks and arm != ARM_CTX08):
        raise RequestError(f"cache_marks: expected True or False, and True only for arm "
                           f"{ARM_CTX08!r} (the {ARM_CURRENT!r} arm sends the harness's own "
                           f"messages), got {cache_marks!r} for arm {arm!r}")
    sent_messages = _checked_sent(sent, prefix, "sent") if sent is not None else None
    if tree is not None and not Path(tree).is_dir():
        # a typo would quietly turn every file view into a pointer
        what = "not a directory" if Path(tree).exists() else "no such directory"
        raise RequestError(f"tree: expected the working tree's directory, got {str(tree)!r} "
                           f"({what})")
    if seq is not None and seq != len(history) + 1:
        # step k's window is built from the k-1 steps before it: another number would
        # label one history's window as another step's
        raise RequestError(f"seq: expected {len(history) + 1} (the step after the "
                           f"{len(history)} given), got {seq}; or leave it out")
    seq = len(history) + 1
    # the request as given, JSON-escaped (a lone surrogate or a NUL survives as \u....):
    # each step's JSON is stored once (evidence_text), the request names it by digest —
    # every decision of a run re-sends the history, which would grow the store with the
    # square of the run's length (``request_as_given`` puts it back together)
    step_texts = [json.dumps(step_json(s)) for s in history]
    step_digests = [content_sha256(text) for text in step_texts]
    # the harness's prompt and the messages sent, likewise: each once per run
    prefix_texts = [json.dumps(message) for message in prefix]
    prefix_digests = [content_sha256(text) for text in prefix_texts]
    # as given (a tool call's id too): ``messages_sent`` gives back what went to the model
    def request_json_sent(given_sent: Sequence[dict[str, Any]] | None
                          ) -> tuple[str, list[str], list[str]]:
        """The request as JSON, naming the messages sent when there are some, and those
        messages' texts and digests."""
        texts = [json.dumps(message) for message in given_sent or ()]
        digests = [content_sha256(text) for text in texts]
        return json.dumps({
            "run_id": run_id, "instance_id": instance_id, "seq": seq, "arm": arm,
            "task": task, PREFIX_DIGESTS_FIELD: prefix_digests,
            STEP_DIGESTS_FIELD: step_digests}
            | ({SENT_DIGESTS_FIELD: digests} if given_sent is not None else {})), texts, digests

    request_json, sent_texts, sent_digests = request_json_sent(
        sent if sent_messages is not None else None)
    given = (task, prefix, history)
    task, prefix, history = _storable(task), _storable(list(prefix)), _storable(history)
    flags = [] if (task, prefix, history) == (given[0], list(given[1]), list(given[2])) \
        else [TEXT_REPLACED_FLAG]
    if tree is None and arm != ARM_CURRENT:  # said, since nothing else shows it
        flags.append(TREE_NOT_GIVEN_FLAG)
    rules = rules or LoopRules()
    files = TreeFiles(tree)
    workdir = workdir or (str(files.root) if files.root is not None else DEFAULT_WORKDIR)
    if arm == ARM_CURRENT:
        window = LoopWindow(parts=_history_whole(history) if sent_messages is None else
                            _history_as_sent(history, _storable(sent_messages), sent_messages,
                                             len(prefix), "sent"),
                            decision_type=decision_type_of(history, workdir))
    else:
        window = build_window(
            history, files, rules, workdir, settled_parts(store, run_id, instance_id, seq, rules),
            prompt_names(prefix, task),
            window_fits(store.settings.tokenizer, store.settings.token_ceiling, task, prefix,
                        run_ref(run_id, instance_id), counted_prefix=given[1]))
    settings = store.settings
    # the current arm is the harness's history as it sent it: never fitted
    ceiling = settings.token_ceiling if arm != ARM_CURRENT else None
    try:
        plan = plan_window(window, settings.tokenizer, ceiling, task, prefix,
                           run_ref=run_ref(run_id, instance_id),
                           as_messages=arm == ARM_CURRENT,
                           harness_sends_all=sent_messages is not None,
                           counted_prefix=given[1])
    except OverCeilingError:
        if sent_if_over_ceiling is None:
            raise
        # the harness sends its own messages: recorded as the current arm records them
        # (read only here: a window that fits never needs them)
        # checked against the prefix as given (``prefix`` is as the store keeps it now)
        fallback = _checked_sent(sent_if_over_ceiling, given[1], "sent_if_over_ceiling")
        sent_messages = fallback
        window = LoopWindow(parts=_history_as_sent(history, _storable(fallback), fallback,
                                                   len(prefix), "sent_if_over_ceiling"),
                            decision_type=window.decision_type)
        plan = plan_window(window, settings.tokenizer, None, task, prefix,
                           run_ref=run_ref(run_id, instance_id), as_messages=True,
                           harness_sends_all=True, counted_prefix=given[1])
        request_json, sent_texts, sent_digests = request_json_sent(sent_if_over_ceiling)
        flags.append(HARNESS_SENT_OVER_CEILING_FLAG)
    request = DecisionRequest(
        run_id=run_id, instance_id=instance_id, seq=seq, decision_type=window.decision_type,
        task=task, plan_node=PlanNode(node_id=f"step-{seq}", obligation=task), arm=arm)
    digest = hashlib.sha256(request_json.encode("utf-8", "surrogatepass")).hexdigest()
    normalised = normalised_request(
        request, request_json, digest, settings,
        flags + ([TASK_IN_PREFIX_FLAG] if plan.task_in_prefix else [])
        + ([f"{FOLD_WAITED_FLAG}:{window.horizon}"] if window.fold_waited else [])
        # (the harness's messages sent instead go as it marks them, not as ctxdb would)
        + ([CACHE_MARKED_FLAG] if cache_marks and HARNESS_SENT_OVER_CEILING_FLAG not in flags
           else [])
        # as the pipeline flags a window whose count is an upper bound (docs/tokens.md)
        + ([TOKENS_BOUNDED_FLAG] if any(count_is_bounded(text) for text in (
            plan.header, task, *(counted_text(m) for m in (*given[1], *(sent_messages or ()))),
            *(part.text for part in window.parts))) else []))
    inputs = decision_input(normalised, sorted(
        (_pool_item(part) for part in window.parts + plan.evicted),
        key=lambda item: item.item_no))
    # the loop's rules decided the window (no gate, no policy rows): its one attempt
    attempt = begin_attempt(inputs, None)
    for part in plan.evicted:
        attempt.audit.final(f"E{part.item_no}", BUDGET, EVICTED, OVER_CEILING_RULE,
                            detail=part.why or None)
    entries = []
    tokenizer = settings.tokenizer
    newest = newest_output(window.parts)
    at_back = False  # the newest output and what follows it (the newest reasoning)
    # (the current arm's window, or the harness's messages sent instead, folds nothing)
    fold = fold_detail(window, len(history), rules) \
        if arm != ARM_CURRENT and sent_messages is None else None
    for position, part in enumerate(window.parts, start=1):
        item_id = f"E{part.item_no}"
        detail = fold if step_of_item(part.item_no)[1] == OUTPUT_PART else None
        attempt.audit.add(item_id, RENDER, part.rendering, part.rule,
                          tokens_after=part.tokens,
                          detail="; ".join(d for d in (part.why, detail) if d) or None)
        at_back = at_back or part is newest
        entries.append(WindowEntry(
            position, item_id, "working_memory" if part.kind == AGENT_TURN else "live_current"
            if part.rendering in (SHOWN_WHOLE, SHOWN_CUT) else "live_folded", part.rendering,
            WORKING_SET if part.kind in (AGENT_TURN, FILE_VIEW) else TRANSIENT,
            BACK if at_back else MIDDLE, part is newest,
            part.tokens + (_count(tokenizer, plan.header) if position == 1 else 0),
            (plan.header if position == 1 else "") + part.text,
            # the lines the text shows: a view's own (a pointer or an output shows none)
            view_span(part.text) if part.rendering == SHOWN_LINES else None))
    for entry in entries:
        attempt.audit.final(entry.item_id, BUDGET,
                            MASKED if entry.rendering == POINTER else IN_WINDOW,
                            "loop", tokens_after=entry.token_count,
                            detail=f"position {entry.position}, {entry.block}")
    attempt.entries = entries
    attempt.budget_steps = plan.budget_steps
    attempt.window_task = task  # the flag task_in_prefix keeps it out of the window
    attempt.token_count = plan.total_tokens
    attempt.request_texts = dict(zip(prefix_digests + step_digests + sent_digests,
                                     prefix_texts + step_texts + sent_texts, strict=True))

    def write(connection: Connection) -> tuple[DecisionContext, persist.DecisionRow]:
        # under the write lock: no other writer records a step of the run in between
        _lock_run(connection, run_id, instance_id)
        _check_step_is_new(connection, run_id, instance_id, seq, request_json)
        _check_history_continues(connection, run_id, instance_id, seq, request_json, given[1])
        row = persist.write_inputs(connection, store, attempt)
        return persist.write_outcome(connection, store, row, attempt), row

    context, row = store.write(write)
    store.runs_seen[run_id] = (arm, request.variant)
    store.remember_texts(row.text_digests)
    return replace(context, prefix=tuple(dict(message) for message in prefix),
                   harness_sent=tuple(dict(message) for message in sent_if_over_ceiling or ())
                   if HARNESS_SENT_OVER_CEILING_FLAG in flags else ())


def fold_detail(window: LoopWindow, done: int, rules: LoopRules) -> str:
    """What ``ctxdb why`` says of an output's form: where the fold horizon stood (outputs
    of steps up to it are folded), and when the stride's fold waited, why."""
    detail = f"fold horizon: step {window.horizon}"
    if window.fold_waited:
        detail += (f"; the fold to step {fold_horizon(done, rules)} waited: re-sending "
                   "uncached the parts from the first one it changes would cost more, "
                   "beyond their cached price, than its shrink saves at the cached price "
                   f"in {done} steps, the run's length so far (paying folds)")
    return detail


class StepTakenError(RequestError):
    """The store holds this step of the run and instance from another history, or an
    earlier step from a history this one does not continue."""


class OverCeilingError(RequestError):
    """The harness's prompt and the least a window holds do not fit under the ceiling."""


class SentMessagesError(RequestError):
    """The harness's messages given as sent (``sent``, or ``sent_if_over_ceiling`` at a
    step that falls back) cannot be recorded: not chat messages with the prefix first, or
    not lining up with the steps. The message names the argument."""


@dataclass
class WindowPlan:
    """A loop window fitted under the ceiling: what construct_step records."""

    window: LoopWindow
    header: str  # the window's first line: how to read a masked part back
    task_in_prefix: bool
    budget_steps: list[BudgetStep]
    total_tokens: int  # the harness's prefix, the window message and the reply priming
    evicted: list[LoopPart] = field(default_factory=list)  # dropped by the ladder

    def text(self, task: str) -> str:
        return ("" if self.task_in_prefix else task_block(task)) + self.window.text(self.header)


def plan_window(window: LoopWindow, tokenizer: str, ceiling: int | None, task: str,
                prefix: Sequence[dict[str, str]], run_ref: str,
                as_messages: bool = False, harness_sends_all: bool = False,
                counted_prefix: Sequence[dict[str, str]] | None = None) -> WindowPlan:
    """Count ``window`` with the harness's ``prefix`` and fit it under ``ceiling`` (None:
    as it is). ``as_messages``: each part is one chat message of the harness's own
    history (the current arm), counted with its chat overhead and no header.
    ``harness_sends_all``: the harness's messages are all that is sent (a current
    decision given them): they carry the task however they do, so no task block is.
    ``counted_prefix``: the prefix as sent, when ``prefix`` is the text the store keeps
    (a NUL's stand-in is not what the model reads)."""
    fixed, header, task_in_prefix = _fixed_tokens(window, tokenizer, task, prefix, run_ref,
                                                  as_messages, harness_sends_all,
                                                  counted_prefix)
    for part in window.parts:
        part.tokens = (_count(tokenizer, part.text) if not as_messages
                       else sum(message_tokens(tokenizer, m) for m in part.messages)
                       if part.messages else message_tokens(tokenizer, part.content))
    evicted: list[LoopPart] = []
    budget_steps = _fit(window, tokenizer, ceiling, fixed, evicted) if ceiling is not None else []
    return WindowPlan(window, header, task_in_prefix, budget_steps,
                      fixed + sum(p.tokens for p in window.parts), evicted)


def _fixed_tokens(window: LoopWindow, tokenizer: str, task: str,
                  prefix: Sequence[dict[str, str]], run_ref: str,
                  as_messages: bool, harness_sends_all: bool = False,
                  counted_prefix: Sequence[dict[str, str]] | None = None
                  ) -> tuple[int, str, bool]:
    """What a window sends besides its parts, in tokens (the harness's prefix, the chat
    overhead, the header, the task unless the prefix holds it); the header; and whether
    the prefix holds the task (``harness_sends_all``: the harness's messages do)."""
    task_in_prefix = harness_sends_all or any(
        task.strip() and task.strip() in m.get("content", "") for m in prefix)
    empty = not window.parts and task_in_prefix  # the first step: the harness's prompt alone
    header = "" if empty or as_messages else mask_hint(run_ref) + "\n\n"
    fixed = (sum(message_tokens(tokenizer, m["content"])
                 for m in (prefix if counted_prefix is None else counted_prefix))
             + CHAT_REPLY_PRIMING_TOKENS
             + (0 if empty or as_messages else CHAT_MESSAGE_OVERHEAD_TOKENS)
             + _count(tokenizer, header)
             + (0 if task_in_prefix else _count(tokenizer, task_block(task))))
    return fixed, header, task_in_prefix


def window_fits(tokenizer: str, ceiling: int, task: str, prefix: Sequence[dict[str, str]],
                run_ref: str, counted_prefix: Sequence[dict[str, str]] | None = None
                ) -> Callable[[LoopWindow], bool]:
    """Whether a loop window, sent with the harness's ``prefix``, fits under ``ceiling``
    as built (before the ladder): a fold that would not pay waits only when it does.
    ``counted_prefix``: as ``plan_window``'s."""
    def fits(window: LoopWindow) -> bool:
        fixed, _, _ = _fixed_tokens(window, tokenizer, task, prefix, run_ref, False,
                                    counted_prefix=counted_prefix)
        return fixed + sum(_count(tokenizer, part.text) for part in window.parts) <= ceiling
    return fits


def _storable(value: Any) -> Any:
    """Texts a store can hold, on every backend alike: a lone surrogate (undecodable
    bytes) becomes U+FFFD, a NUL the pipeline's visible stand-in."""
    if isinstance(value, list):  # (of steps too)
        return [_storable(v) for v in value]
    if isinstance(value, LoopStep):
        texts: dict[str, Any] = {name: _storable(getattr(value, name))
                                 for name in _STEP_FIELDS if name != "actions"}
        return LoopStep(**texts, actions=tuple(map(_storable, value.actions)))
    return storable_value(value)


def settled_parts(store: ContextStore, run_id: str, instance_id: str, seq: int,
                  rules: LoopRules) -> SettledParts | None:
    """What the newest earlier decision of this run and instance showed for the parts a
    loop window keeps as shown until its fold horizon moves (``loop.SettledParts``)."""
    if not rules.settled:
        return None
    with store.engine.connect() as connection:
        rows = connection.execute(sql_statement("forensics/previous_window_of_run"), {
            "run_id": run_id, "instance_id": instance_id, "seq": seq, "view": SHOWN_LINES,
            "pointer": POINTER, "parts_per_step": PARTS_PER_STEP,
            "note_part": tree_change_item(1) % PARTS_PER_STEP,
            "fold_fresh": LADDER_FOLD_FRESH, "fold_view": LADDER_FOLD_VIEW}).mappings().all()
    if not rows:
        return None
    done = step_of_item(rows[-1]["item_no"])[0]
    header = mask_hint(run_ref(run_id, instance_id)) + "\n\n"
    parts, history = {}, {}
    for row in rows:
        if is_history_item(row["item_no"]):
            history[row["item_no"]] = row["content_sha256"]
        text = row["rendered_text"]
        if text is None:
            continue
        if text.startswith(header):  # the window's first part carries its header line
            text = text[len(header):]
        parts[row["item_no"]] = SettledPart(row["content_sha256"], row["rendering"], text,
                                            row["note_content"])
    return SettledParts.settling(done, parts, history, rules,
                                 waited_horizon(rows[-1]["flags"]),
                                 frozenset(row["item_no"] for row in rows if row["ladder_folded"]))


def waited_horizon(flags: str | None) -> int | None:
    """The fold horizon a window kept when its fold waited (its decision's
    ``fold_waited:N`` flag among ``flags``, comma-separated), else None."""
    for flag in (flags or "").split(","):
        name, _, horizon = flag.partition(":")
        if name == FOLD_WAITED_FLAG and horizon.isdigit():
            return int(horizon)
    return None


def run_ref(run_id: str, instance_id: str) -> str:
    """How a loop window names its run for ``ctxdb show`` (its newest decision)."""
    return f"{RUN_REF_PREFIX}{run_id}:{instance_id}"


def _lock_run(connection: Connection, run_id: str, instance_id: str) -> None:
    """Hold the run's lock to the end of this write transaction: SQLite's write lock
    already serializes writers (``BEGIN IMMEDIATE``); PostgreSQL's READ COMMITTED lets two
    transactions pass ``_check_step_is_new`` at once, so one waits here for the other."""
    if connection.dialect.name == "postgresql":
        connection.execute(sql_statement("forensics/lock_run"),
                           {"run_key": json.dumps([run_id, instance_id])})


def _check_step_is_new(connection: Connection, run_id: str, instance_id: str, seq: int,
                       request_json: str) -> None:
    """Refuse a step the store already holds of this run and instance, built from another
    history (task, harness prompt, steps): two loops under one run id would read each
    other's windows (the settled parts) and count as one run. The same history again (a
    harness asking anew, or sending it otherwise) is recorded again."""
    history = ("task", PREFIX_DIGESTS_FIELD, STEP_DIGESTS_FIELD)
    held = connection.execute(sql_statement("forensics/step_of_run"), {
        "run_id": run_id, "instance_id": instance_id, "seq": seq}).all()
    mine = json.loads(request_json) if held else {}
    for other, other_json in held:
        given = json.loads(other_json)
        # (a request stored before revision 0011 holds its steps inline: not compared)
        if all(key in given for key in history) and \
                any(given[key] != mine[key] for key in history):
            raise StepTakenError(
                f"seq: the store already holds step {seq} of run {run_id!r} on instance "
                f"{instance_id!r} (decision {other}), built from another history; give "
                "each loop its own run_id (two loops under one would read each other's "
                "windows)")


def _check_history_continues(connection: Connection, run_id: str, instance_id: str,
                             seq: int, request_json: str,
                             prefix: Sequence[dict[str, Any]]) -> None:
    """Refuse a step whose history (task, harness prompt, steps) does not continue the
    one the run's newest earlier step on the instance was built from: a harness that
    changed or reordered a step it sent, or a second loop under the run id, would
    otherwise be recorded as one run (and read the other's windows). ``prefix``: the
    harness's prompt as given, to say when only its keys' order differs."""
    held = connection.execute(sql_statement("forensics/previous_step_of_run"), {
        "run_id": run_id, "instance_id": instance_id, "seq": seq}).first()
    if held is None:
        return
    other, other_seq, other_json = held
    given, mine = json.loads(other_json), json.loads(request_json)
    # (a request stored before revision 0011 holds its steps inline: not compared)
    if not all(key in given for key in ("task", PREFIX_DIGESTS_FIELD, STEP_DIGESTS_FIELD)):
        return
    theirs, ours = given[STEP_DIGESTS_FIELD], mine[STEP_DIGESTS_FIELD]
    if given["task"] != mine["task"]:
        field, what = "task", "another task"
    elif given[PREFIX_DIGESTS_FIELD] != mine[PREFIX_DIGESTS_FIELD]:
        field, what = "prefix", "another harness prompt"
        held_prefix = request_as_given(connection, other).get("prefix")
        if isinstance(held_prefix, list) and _same_but_order(prefix, held_prefix):
            # equal as dicts, not as sent: the JSON (and the prompt cache) keeps key order
            what += ": the same messages, their keys in another order"
    elif len(ours) < len(theirs):
        field, what = "steps", f"{len(ours)} steps where it had {len(theirs)}"
    else:
        changed = next((index for index, (a, b) in
                        enumerate(zip(theirs, ours[:len(theirs)], strict=True)) if a != b),
                       None)
        if changed is None:
            return
        field, what = f"steps[{changed}]", f"step {changed + 1} otherwise than it was"
    raise StepTakenError(
        f"{field}: the store holds step {other_seq} of run {run_id!r} on instance "
        f"{instance_id!r} (decision {other}), built from a history this step's does not "
        f"continue ({what}); give each step the whole history before it as it was, and "
        "each loop its own run_id")


def _same_but_order(given: Sequence[dict[str, Any]], held: list[Any]) -> bool:
    """Whether two prompts hold the same messages but for their keys' order (as JSON: a
    1 and a true are not the same value)."""
    return json.dumps([dict(m) for m in given], sort_keys=True) == json.dumps(
        held, sort_keys=True)


def _check(run_id: object, instance_id: object, task: object, prefix: Sequence[object],
           arm: object, seq: object) -> None:
    if not isinstance(task, str) or not task.strip():
        raise RequestError("task: expected non-empty text")
    for name, value in (("run_id", run_id), ("instance_id", instance_id)):
        problem = loop_id_problem(value, run=name == "run_id")
        if problem:
            raise RequestError(f"{name}: {problem}")
    if arm not in ARMS:
        raise RequestError(f"arm: expected one of {ARMS}, got {arm!r}")
    if seq is not None and (not isinstance(seq, int) or isinstance(seq, bool) or seq < 1):
        raise RequestError(f"seq: expected a positive integer, got {seq!r}")
    if not isinstance(prefix, (list, tuple)):
        raise RequestError(f"prefix: expected a list of chat messages, got "
                           f"{type(prefix).__name__}")
    for index, message in enumerate(prefix):
        if not isinstance(message, dict):
            raise RequestError(f"prefix[{index}]: expected a chat message (a dict with role "
                               f"and content text), got {type(message).__name__}")
        for key in ("role", "content"):
            if not isinstance(message.get(key), str):
                got = "nothing" if key not in message else type(message[key]).__name__
                raise RequestError(f"prefix[{index}].{key}: expected text, got {got}")
        if message["role"] not in PREFIX_ROLES:
            raise RequestError(f"prefix[{index}].role: expected one of {PREFIX_ROLES}, got "
                               f"{message['role']!r}")
        try:  # the request is kept whole, as JSON (decision.request_json)
            json.dumps(message, allow_nan=False)  # (NaN is no JSON)
        except (TypeError, ValueError) as exc:
            raise RequestError(f"prefix[{index}]: expected values JSON can hold ({exc})") \
                from exc


def _checked_sent(sent: Sequence[dict[str, Any]], prefix: Sequence[dict[str, str]],
                  field: str) -> list[dict[str, str]]:
    """``sent`` as role-and-content messages, checked (``SentMessagesError``): a list of
    chat messages, the prefix first. A message's tool calls are read as their text
    (``TOOL_CALLS_TEXT``): they are sent, and counted so. ``field``: the argument's name,
    for its errors."""
    _check_sent_shape(sent, prefix, field, SentMessagesError)
    messages = []
    for index, message in enumerate(sent):
        content = message.get("content")
        try:
            calls = tool_calls_text(message, f"{field}[{index}]")
        except TrajectoryError as exc:
            raise SentMessagesError(str(exc)) from None
        try:  # the messages are kept as given, as JSON (decision.request_json)
            json.dumps(message, allow_nan=False)  # (NaN is no JSON)
        except (TypeError, ValueError) as exc:
            raise SentMessagesError(f"{field}[{index}]: expected values JSON can hold ({exc})") \
                from exc
        messages.append({"role": message["role"], "content": content or ""}
                        | ({TOOL_CALLS_TEXT: calls} if calls else {}))
    return messages


def _check_sent_shape(sent: object, prefix: Sequence[dict[str, str]], field: str,
                      error: type[RequestError]) -> None:
    """``sent`` is a list of messages, each a text role and a text content (or none), the
    prefix first: what ``_checked_sent`` reads, checked without reading each message's
    whole text (a step checks its ``sent_if_over_ceiling`` so, though only a step that
    falls back reads it). ``error``: what a wrong one raises."""
    if isinstance(sent, (str, bytes, dict)) or not isinstance(sent, Sequence):
        raise error(f"{field}: expected a list of chat messages, got {type(sent).__name__}")
    for index, message in enumerate(sent):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(message, dict) or not isinstance(message.get("role"), str) \
                or not isinstance(content, (str, type(None))):
            raise error(f"{field}[{index}]: expected a chat message with a role and "
                        "content text (or none)")
    for index, expected in enumerate(prefix):
        if index >= len(sent) or (sent[index]["role"], sent[index]["content"] or "") \
                != (expected["role"], expected["content"]):
            raise error(f"{field}[{index}]: expected prefix[{index}] (the harness's "
                        "prefix first, as given in prefix)")


def _history_as_sent(steps: Sequence[LoopStep], sent: Sequence[dict[str, str]],
                     raw: Sequence[dict[str, str]], skipped: int,
                     field: str) -> list[LoopPart]:
    """The current arm's window as the harness sent it (``sent`` after its first
    ``skipped``, the prefix; its texts as the store keeps them, ``raw`` as given): per
    step, its turn — the assistant message, when the harness's history holds one (not a
    reply it rejected) — and its observation, the messages that join to what the step
    shows (one per action of a turn with several). Each part is counted message by
    message, as given (``LoopPart.messages``). A message no step accounts for (a command a
    user typed into an interactive harness, and its output) goes with the part before it,
    counted there; a step whose observation no later message holds is refused
    (``SentMessagesError`` naming ``field``, the argument ``sent`` came as)."""
    parts: list[LoopPart] = []
    unplaced: list[int] = []  # messages before the first part: they go with it
    at = skipped
    for number, step in enumerate(steps, start=1):
        found = next(((start, placed) for start in range(at, len(sent))
                      if (placed := _step_messages(sent, start, step)) is not None), None)
        if found is None:
            raise SentMessagesError(
                f"{field}[{at}]: no message from here on holds step {number}'s "
                f"observation as steps[{number - 1}] shows it (give each step's observation "
                "as the harness sent it, markup and all, when it is not the output alone)")
        start, (turn_at, observed) = found
        _place(parts, unplaced, range(at, start), sent, raw)
        turn_no, output_no, _thought_no = item_numbers(number)
        if turn_at is not None:  # with its tool calls, where the harness sent the commands
            turn = counted_text(sent[turn_at])
            parts.append(LoopPart(turn_no, number, AGENT_TURN, turn, f"{turn}\n\n", SHOWN_WHOLE,
                                  "current, as sent", command=step.command,
                                  messages=(counted_text(raw[turn_at]),)))
        if observed:
            shown = "\n".join(sent[i]["content"] for i in observed)
            parts.append(LoopPart(output_no, number, observation_kind(step), shown,
                                  f"{shown}\n\n", SHOWN_WHOLE, "current, as sent",
                                  command=step.command,
                                  messages=tuple(raw[i]["content"] for i in observed)))
        _place(parts, unplaced, (), sent, raw)
        at = (observed[-1] if observed else start) + 1
    _place(parts, unplaced, range(at, len(sent)), sent, raw)
    if unplaced:  # no step yet (a user typed commands before the model's first): a part
        texts = [counted_text(sent[i]) for i in unplaced]
        parts.append(LoopPart(item_numbers(1)[0], 1, HARNESS_NOTE, "\n".join(texts),
                              "".join(f"{text}\n\n" for text in texts), SHOWN_WHOLE,
                              "current, as sent: before the model's first step",
                              messages=tuple(counted_text(raw[i]) for i in unplaced)))
    return parts


def _step_messages(sent: Sequence[dict[str, str]], start: int,
                   step: LoopStep) -> tuple[int | None, list[int]] | None:
    """Where ``step`` stands in ``sent`` when it starts at ``start``: its turn's index
    (None: no assistant message there) and its observation's, or None when the messages
    from there do not join to what the step shows. A turn with nothing after it (the
    history's end) has no observation, when the step shows none."""
    turn = start if sent[start]["role"] == "assistant" else None
    if turn is None and (step.command is not None or step.has_call):
        return None  # a step that ran a command had its turn sent: it starts there
    at = start + (turn is not None)
    if turn is not None and not step.shown and (at == len(sent)
                                                or sent[at]["role"] == "assistant"):
        return turn, []  # a turn nothing answered (yet): the history's end, or no action
    observed: list[int] = []
    joined = -1  # the length of the observed messages joined by newlines
    while at < len(sent) and sent[at]["role"] != "assistant" and joined < len(step.shown):
        observed.append(at)
        joined += len(sent[at]["content"]) + 1
        at += 1
        if joined == len(step.shown) and \
                "\n".join(sent[i]["content"] for i in observed) == step.shown:
            return turn, observed
    return None


def _place(parts: list[LoopPart], unplaced: list[int], indexes: Sequence[int],
           sent: Sequence[dict[str, str]], raw: Sequence[dict[str, str]]) -> None:
    """Messages no step accounts for, with the part before them (before the first part:
    kept in ``unplaced`` until there is one, then put before its own)."""
    unplaced.extend(indexes)
    if not parts or not unplaced:
        return
    part = parts[-1] if indexes else parts[0]
    texts = [counted_text(sent[i]) for i in unplaced]
    counted = tuple(counted_text(raw[i]) for i in unplaced)
    if indexes:
        part.content = "\n".join([part.content, *texts])
        part.text += "".join(f"{text}\n\n" for text in texts)
        part.messages += counted
    else:
        part.content = "\n".join([*texts, part.content])
        part.text = "".join(f"{text}\n\n" for text in texts) + part.text
        part.messages = counted + part.messages
    unplaced.clear()


def _history_whole(steps: Sequence[LoopStep]) -> list[LoopPart]:
    parts = []
    for number, step in enumerate(steps, start=1):
        turn_no, output_no, _thought_no = item_numbers(number)
        turn = (step.thought.strip() + "\n" if step.thought.strip() else "") + (
            step.said if step.command is not None or step.has_call else "")
        parts.append(LoopPart(turn_no, number, AGENT_TURN, turn, f"[step {number}] {turn}\n",
                              SHOWN_WHOLE, "current", command=step.command))
        # (a bare output's outcome, and a turn's several outputs, said as the ctx08
        # window says them: the arms see alike)
        shown = with_outcome(output_as_shown(output_no, step), step)
        parts.append(LoopPart(output_no, number, observation_kind(step), step.shown,
                              f"{shown.rstrip()}\n\n", SHOWN_WHOLE, "current",
                              command=step.command))
    return parts


def _pool_item(part: LoopPart) -> PoolItem:
    return PoolItem(
        item_no=part.item_no, source="live", kind=part.kind, content=part.content,
        # a view is of its (first) file: `ctxdb why DECISION --entity PATH` finds it
        entity_key=part.path if part.kind == FILE_VIEW and part.path else None,
        provenance=LOOP_PROVENANCE.format(step=part.step,
                                          part=PART_NAMES[step_of_item(part.item_no)[1]]),
        arrival_no=part.item_no, arrived_in_seq=part.step, in_harness_order=True,
        command=part.command, path=part.path,
        start_line=part.lines[0] if part.lines else None,
        end_line=part.lines[1] if part.lines else None)


def _fit(window: LoopWindow, tokenizer: str, ceiling: int, fixed: int,
         evicted: list[LoopPart]) -> list[BudgetStep]:
    """The ceiling's ladder for a loop window, each step logged: cut a newest output of
    more than ``NEWEST_OUTPUT_CEILING_SHARE`` of the ceiling to what fits of its end in
    that share, or in the room the window leaves when that is more; drop the
    newest reasoning; fold the older outputs shown whole or elided, then the folded views,
    the largest first (``LoopWindow.ladder_largest_first``; else the oldest first) — all
    those the run's previous window had folded so first, as it had them
    (``LoopWindow.ladder_folded_before``); cut the long commands to their start, then
    fold the oldest commands (a rung that would not shrink a part leaves it); then evict
    the oldest steps, each whole; then cut the newest output to what fits of its end. A
    window the ladder cannot bring under the ceiling (the harness's own prompt is over it)
    is refused."""
    log: list[BudgetStep] = []

    def total() -> int:
        return fixed + sum(p.tokens for p in window.parts)

    def logged(part: LoopPart, ladder: str, before: int, detail: str | None = None,
               tokens_before: int | None = None) -> None:
        """The ladder's step, in budget_log and in what `ctxdb why` says of the part (with
        its size before, which its item_event does not hold)."""
        log.append(BudgetStep(len(log) + 1, ladder, f"E{part.item_no}", before, total(),
                              detail))
        said = f", {detail}" if detail else ""
        if tokens_before is not None:
            said += f", {tokens_before} tokens before"
        part.why = "; ".join(why for why in (part.why, f"the ceiling's ladder, step "
                                             f"{len(log)} ({ladder}{said})") if why)

    def replace_text(part: LoopPart, text: str, rendering: str, ladder: str,
                     detail: str | None = None) -> bool:
        tokens = _count(tokenizer, text)
        if tokens >= part.tokens:  # a short part's pointer or cut note is no smaller
            return False
        before, tokens_before = total(), part.tokens
        part.text, part.rendering, part.rule = text, rendering, OVER_CEILING_RULE
        part.tokens = tokens
        logged(part, ladder, before, detail, tokens_before)
        return True

    outputs = [p for p in window.parts if p.kind != AGENT_TURN]
    newest = newest_output(window.parts)
    newest_text = newest.text if newest is not None else ""  # each cut is of it whole
    share = int(ceiling * NEWEST_OUTPUT_CEILING_SHARE)
    if newest is not None and total() > ceiling and newest.tokens > share:
        # no shorter than the window has room for: only as much goes as must
        room = max(share, ceiling - (total() - newest.tokens))
        replace_text(newest, _tail_that_fits(newest_text, newest.item_no, room, tokenizer),
                     SHOWN_CUT, LADDER_CUT_NEWEST_TO_SHARE)
    for part in [p for p in window.parts if p.rule == LAST_THOUGHT_RULE]:
        if total() <= ceiling:
            return log
        before = total()
        window.parts.remove(part)
        evicted.append(part)
        logged(part, LADDER_DROP_REASONING, before, tokens_before=part.tokens)
    folding = [p for p in outputs if p is not newest and p.rendering in (SHOWN_WHOLE, SHOWN_CUT)]
    views = [p for p in outputs if p is not newest and p.rendering == SHOWN_LINES]
    if total() <= ceiling:
        return log
    if window.ladder_largest_first:
        # one long output (a 521-line grep) goes before the short ones the agent reads
        # from; outputs still before views (stable: the oldest first among equals)
        folding.sort(key=lambda part: -part.tokens)
        views.sort(key=lambda part: -part.tokens)
    folding += views
    # what the previous window's ladder folded, first and all of it: the window goes on
    # as that one did (sticky_ladder), whatever room that leaves
    sticky = window.ladder_folded_before
    folding = ([p for p in folding if p.item_no in sticky]
               + [p for p in folding if p.item_no not in sticky])

    def fold(part: LoopPart) -> None:
        # the parts true only beside it go with it: later views that leave out lines it
        # shows, the views a note corrects (kept alone, they would show stale lines)
        for each in [part, *(p for p in leaning_on(part, window.parts) if p is not newest)]:
            label = each.label or masked_label(each.kind, each.content)
            if replace_text(each, f"[E{each.item_no} {label}]\n\n", POINTER,
                            LADDER_FOLD_VIEW if each.kind == FILE_VIEW else LADDER_FOLD_FRESH,
                            LADDER_FOLDED_BEFORE if each.item_no in sticky
                            else f"with E{part.item_no}" if each is not part
                            else LADDER_LARGEST_FIRST if window.ladder_largest_first
                            else None):
                window.ladder_folded.add(each.item_no)

    # an output whose lines a shown output leaves out as repeated waits until that one is
    # folded: folded first, the window would hold those lines nowhere (one the previous
    # window folded does not wait: the window goes on as that one did, for the cache)
    waiting: list[LoopPart] = []
    for part in folding:
        if total() <= ceiling and part.item_no not in sticky:
            return log
        if part.rendering == POINTER:
            continue  # (folded with a part it stood beside)
        if part.item_no not in sticky and part.kind != FILE_VIEW \
                and part.step in repeated_steps(window.parts):
            waiting.append(part)
            continue
        fold(part)
    for part in waiting:
        if total() <= ceiling:
            return log
        if part.rendering != POINTER and part.step not in repeated_steps(window.parts):
            fold(part)
    commands = [p for p in window.parts if p.kind == AGENT_TURN and p.rule != LAST_THOUGHT_RULE]
    for part in commands:
        if total() <= ceiling:
            return log
        if len(part.text) > CUT_COMMAND_CHARS:
            replace_text(part, part.text[:CUT_COMMAND_CHARS]
                         + f"… [E{part.item_no} cut: over the ceiling]\n", SHOWN_CUT,
                         LADDER_CUT_COMMAND)
    for part in commands[:-1]:  # the newest command stays: the newest output is its answer
        if total() <= ceiling:
            return log
        replace_text(part, f"[step {part.step}] {part.label} "
                           f"[E{part.item_no}]\n", POINTER, LADDER_FOLD_COMMAND)
    newest_command = commands[-1] if commands else None
    by_step: dict[int, list[LoopPart]] = {}  # (in the window's order: the oldest first)
    for part in window.parts:
        if part is not newest and part is not newest_command:
            by_step.setdefault(part.step, []).append(part)
    for parts in by_step.values():
        if total() <= ceiling:
            return log
        # the oldest steps leave the window whole (no output stays without its command,
        # nor a command without its output): the store keeps them
        for part in parts:
            before = total()
            window.parts.remove(part)
            evicted.append(part)
            logged(part, LADDER_EVICT_OLDEST, before, tokens_before=part.tokens)
    if newest is not None and total() > ceiling:
        room = ceiling - (total() - newest.tokens)
        replace_text(newest, _tail_that_fits(newest_text, newest.item_no, room, tokenizer),
                     SHOWN_CUT, LADDER_CUT_NEWEST)
    if total() > ceiling:
        raise OverCeilingError(
            f"token_ceiling: the harness's prompt and the least a window holds come to "
            f"{total()} tokens, over the ceiling {ceiling} ([budget].token_ceiling in "
            f"ctxdb.toml or the file $CTXDB_CONFIG names)")
    return log


def _tail_that_fits(text: str, item_no: int, room: int, tokenizer: str) -> str:
    """The end of a part's text that fits in ``room`` tokens with its note: its last whole
    lines, as many as fit (a binary search), and of the line before them the end that
    fits in what they leave (a long line leaves its end, not nothing: an output's
    closing markup after one long line would otherwise be all that is shown)."""
    lines = text.rstrip("\n").splitlines()

    def cut(kept: int, chars: int = 0) -> str:
        whole = lines[len(lines) - kept:]
        if not chars:
            return (f"[E{item_no} cut to its last {kept} of {len(lines)} lines: over the "
                    f"ceiling]\n" + "\n".join(whole) + "\n\n")
        before = lines[len(lines) - kept - 1]
        if not kept:
            note = f"[E{item_no} cut to the end of its last line: over the ceiling]\n"
        else:
            note = (f"[E{item_no} cut to the end of line {len(lines) - kept} and its last "
                    f"{kept} of {len(lines)} lines: over the ceiling]\n")
        return note + "\n".join([before[len(before) - chars:], *whole]) + "\n\n"

    def most_that_fits(high: int, text_of: Callable[[int], str]) -> int:
        low = 0
        while low < high:
            middle = (low + high + 1) // 2
            if _count(tokenizer, text_of(middle)) <= room:
                low = middle
            else:
                high = middle - 1
        return low

    kept = most_that_fits(len(lines), cut)
    if kept == len(lines):
        return cut(kept)
    before = lines[len(lines) - kept - 1]
    return cut(kept, most_that_fits(len(before), lambda chars: cut(kept, chars)))
