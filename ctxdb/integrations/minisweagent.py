"""mini-swe-agent 2.x with ctxdb's window: a model wrapper, so the harness runs unchanged.

mini-swe-agent's agent keeps the whole history in ``agent.messages`` and hands it to
``model.query(messages)`` at every step. ``CtxdbModel`` wraps any of its chat models and,
at each query, reads that history as ctxdb steps, records the decision
(``construct_step``) and sends the harness's own system and instance messages verbatim
followed by ctxdb's window as one user message. The agent, its environment, its
templates and its trajectory file stay mini-swe-agent's own.

The switch (spec §8): ``CTX=current`` sends the harness's messages untouched and still
records each decision, as arm ``current``; ``CTX=ctx08`` (the default) sends the window.

A wrapped model that marks the prompt for its provider's cache (``set_cache_control``,
mini-swe-agent's default for Claude: one mark on the last message) would mark only the
window's end, which the next window never repeats: under ctx08 ``CtxdbModel`` takes the
marking over for each call that sends ctxdb's messages (the model's ``set_cache_control``
is None during the call, then as it was) and sends the window marked where the next one
repeats it (``ctxdb.agent.cache_marks``).
"""

from __future__ import annotations

import contextlib
import os
import uuid
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePath, PurePosixPath
from typing import Any

from sqlalchemy import func, select

from .. import models
from ..agent.adapter import OverCeilingError, SentMessagesError, construct_step
from ..agent.cache_marks import cache_marked_messages
from ..agent.loop import LoopRules, LoopStep, loop_step
from ..agent.trajectory import (
    FORMAT_ERROR_INTERRUPT,
    FORMAT_V2,
    AgentRun,
    TrajectoryError,
    as_chat,
    parse_trajectory,
)
from ..pipeline.vocabulary import HARNESS_SENT_OVER_CEILING_FLAG
from ..request_limits import loop_id_problem
from ..spec import ARM_CTX08, ARM_CURRENT, ARMS

ARM_VARIABLE = "CTX"  # the environment variable that picks the arm (spec §8)
HISTORY_NAME = "mini-swe-agent messages"  # how an error names the history it read
PREFIX_MESSAGES = 2  # the system message and the instance (task) message
RUN_ID_HEX_DIGITS = 12  # of a new run id's random part: unique enough for one store
# a mini-swe-agent model's setting that marks prompts for its provider's cache
CACHE_CONTROL_SETTING = "set_cache_control"


# a chat message as mini-swe-agent keeps it (role, content, and its own extra fields)
Message = dict[str, Any]


class HistoryError(ValueError):
    """A message list ctxdb cannot read as a mini-swe-agent history."""


class RunRestartedError(ValueError):
    """A query whose history does not go on from the run this model recorded: another
    ``agent.run()`` (or another agent) with the same ``CtxdbModel``, which records one run."""


class RefusedStepWarning(UserWarning):
    """ctxdb refused a step's window (``OverCeilingError``); the harness's messages went."""


class SentNotRecordedWarning(UserWarning):
    """Under ``current``, ctxdb could not line the messages sent up with the steps it read
    from them; it recorded the history rebuilt from the steps (under what was sent)."""


def read_history(messages: Sequence[Message]) -> tuple[list[dict[str, str]], list[LoopStep],
                                                       AgentRun]:
    """mini-swe-agent's ``agent.messages`` as ``(prefix, steps, run)``: the system and
    instance messages (role and content), one ``LoopStep`` per model reply so far, and
    the history as ctxdb's trajectory reader sees it (``run.task`` is the task).

    A reply the harness rejected (a format error) is not in the list, only its error
    message is: it becomes a step with no command, so step k is still model call k."""
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise HistoryError(f"{HISTORY_NAME}: messages[{index}]: expected a chat message "
                               "with a role (CtxdbModel wraps chat-completion models, not "
                               "Responses-API ones)")
    if len(messages) < PREFIX_MESSAGES:
        raise HistoryError(f"{HISTORY_NAME}: expected the system message and the instance "
                           f"message first, got {len(messages)} message(s)")
    try:
        run = parse_trajectory({"messages": _with_rejected_turns(messages),
                                "trajectory_format": FORMAT_V2}, HISTORY_NAME)
    except ValueError as exc:
        raise HistoryError(str(exc)) from exc
    prefix = [dict(m) for m in run.messages[:PREFIX_MESSAGES]]
    return prefix, [loop_step(step) for step in run.steps], run


def as_sent(messages: Sequence[Message]) -> list[dict[str, str]]:
    """The history as the model is sent it: each message's role, content text and tool
    calls' text (``trajectory.as_chat``)."""
    try:
        return [as_chat(message, f"{HISTORY_NAME}: messages[{index}]")
                for index, message in enumerate(messages)]
    except TrajectoryError as exc:
        raise HistoryError(str(exc)) from exc


def _with_rejected_turns(messages: Sequence[Message]) -> list[Message]:
    """The history with an empty assistant turn before each harness interruption that no
    turn precedes (mini-swe-agent adds a format error's message, not the reply it
    rejected): the trajectory reader pairs every observation with a turn."""
    completed: list[Message] = []
    for index, message in enumerate(messages):
        given_extra = message.get("extra")
        extra: dict[str, Any] = given_extra if isinstance(given_extra, dict) else {}
        if (index >= PREFIX_MESSAGES and extra.get("interrupt_type")
                and message["role"] != "assistant" and completed[-1]["role"] != "assistant"):
            rejected = extra["interrupt_type"] == FORMAT_ERROR_INTERRUPT
            reply = extra.get("model_response") if rejected else ""
            completed.append({"role": "assistant", "extra": {"actions": []},
                              "content": reply if isinstance(reply, str) else ""})
        completed.append(message)
    return completed


def arm_from_environment(arm: str | None = None) -> str:
    """``arm`` when given, else ``$CTX``, else ctx08; checked against the spec's arms."""
    chosen = arm if arm is not None else os.environ.get(ARM_VARIABLE, "").strip() or ARM_CTX08
    if chosen not in ARMS:
        source = "arm" if arm is not None else f"${ARM_VARIABLE}"
        raise ValueError(f"{source}: expected one of {', '.join(ARMS)}, got {chosen!r}")
    return chosen


def _check_new_run(store: Any, run_id: str, instance_id: str, arm: str) -> None:
    """Refuse a run id and instance the store already holds decisions of: a model is one
    run, and two runs under one id would share their step numbers; and a run id the store
    holds as the other arm (a run is one arm: its first step would be refused)."""
    decision = models.decision
    with store.engine.connect() as connection:
        held = connection.execute(select(func.count()).where(
            decision.c.run_id == run_id, decision.c.instance_id == instance_id)).scalar_one()
        run_arm = connection.execute(select(models.run.c.arm).where(
            models.run.c.run_id == run_id)).scalar_one_or_none()
    if run_arm is not None and run_arm != arm:
        raise ValueError(f"run_id {run_id!r}: the store holds it as a run of arm {run_arm!r}, "
                         f"and a run is one arm; give this {arm!r} model its own run_id (or "
                         "none: a new one is made)")
    if held:
        raise ValueError(f"run_id {run_id!r}: the store already holds {held} decision(s) of "
                         f"instance {instance_id!r} under it; give each run its own run_id "
                         "(or none: a new one is made)")


class CtxdbModel:
    """A mini-swe-agent model that sends ctxdb's window (see the module's docstring).

    ``store``: an open ``ContextStore``, or a store URL/path this model opens and closes
    (``close()``). ``tree``: the directory the agent's commands run in, read for file
    views (None: folded views become pointers). ``workdir``: that directory as the
    commands name it, when they run elsewhere than ``tree`` (a container's ``/testbed``
    with ``tree`` a checkout of it on the host; default: ``tree``). ``task``: the problem
    statement (None: the instance message as the harness rendered it, its template's
    words too; a task the harness's prompt holds is not sent again). ``run_id``: one run
    is one arm, so the default is new per model; one given must not hold decisions of
    ``instance_id`` yet (a batch of instances may share it). One model records one agent
    run: a second ``agent.run()`` is refused (``RunRestartedError``; after a first run
    with no step, by its new history list). ``arm``: overrides
    ``$CTX``, read here, once.
    ``cache_marks``: send ctx08's window marked for a cache that serves only at marks
    (``cache_marked_messages``); None (the default): when the wrapped model marks its
    prompts (``config.set_cache_control``), whose marking the ctx08 arm then takes over
    for the calls that send ctxdb's messages (a refused step is marked the model's
    way)."""

    def __init__(self, model: Any, store: Any, *, instance_id: str, tree: str | Path | None,
                 task: str | None = None, run_id: str | None = None, arm: str | None = None,
                 rules: LoopRules | None = None, cache_marks: bool | None = None,
                 workdir: str | PurePosixPath | None = None) -> None:
        # the arguments are checked before the store is opened: a refused model leaves
        # no new store behind
        self.arm = arm_from_environment(arm)
        self.tree = Path(tree) if tree is not None else None
        if self.tree is not None and not self.tree.is_dir():
            # a typo would turn every file view into a pointer, step after step
            raise ValueError(f"tree: expected the directory the agent's commands run in, got "
                             f"{str(tree)!r} ("
                             + ("not a directory" if self.tree.exists() else "no such directory")
                             + ")")
        if workdir is not None and (not isinstance(workdir, (str, PurePath))
                                    or not PurePosixPath(workdir).is_absolute()):
            raise ValueError(f"workdir: expected the absolute path the agent's commands run "
                             f"in, as they name it (e.g. '/testbed'), got {workdir!r}")
        self.workdir = str(workdir) if workdir is not None else None
        # (no run_id, or an empty one: a new one is made)
        for name, value in (("instance_id", instance_id), ("run_id", run_id or "new")):
            problem = loop_id_problem(value, run=name == "run_id")
            if problem:
                raise ValueError(f"{name}: {problem}")
        if cache_marks is not None and not isinstance(cache_marks, bool):
            raise ValueError(f"cache_marks: expected True, False or None (when the wrapped "
                             f"model marks its prompts), got {cache_marks!r}")
        self.cache_marks = self._cache_marks(model, cache_marks)
        if store is None:
            raise ValueError("store: expected a ContextStore or a store URL, got None")
        if isinstance(store, (str, os.PathLike)):
            from ..store import ContextStore

            store, self._owns_store = ContextStore.open(store), True
        else:
            self._owns_store = False
        self.model, self.store = model, store
        self.instance_id, self.task, self.rules = instance_id, task, rules
        if run_id:
            try:
                _check_new_run(store, run_id, instance_id, self.arm)
            except ValueError:
                self.close()
                raise
        self.run_id = run_id or f"mini-swe-agent-{self.arm}-{uuid.uuid4().hex[:RUN_ID_HEX_DIGITS]}"
        self.decision_ids: list[int] = []  # one per query ctxdb built, in order
        self.refused_steps: list[int] = []  # the steps sent as the harness built them
        # the run's harness prompt and how many steps its latest query held: a history
        # with another prompt or fewer steps is another run, not this one's next step
        self._run_prefix: list[dict[str, str]] | None = None
        self._run_steps = 0
        # the history list of a first query (no step yet) that was answered: asked again
        # with no step, the same list is a retry of that call, another list a new run
        # (mini-swe-agent's agent.run() starts a new list, then extends it step by step)
        self._answered_first: list[Message] | None = None

    def query(self, messages: list[Message], **kwargs: Any) -> Message:
        """Record this step's decision, then ask the wrapped model with ctxdb's messages
        (``current``: with the harness's own, untouched). A step ctxdb refuses (the
        harness's prompt and the least a window holds over the ceiling) is sent as the
        harness built it, recorded as sent where its messages can be read, with a
        ``RefusedStepWarning``, and counted in ``refused_steps``: a harness never loses a
        step to ctxdb's limits. Any other refusal is a mistake to fix: it is raised."""
        prefix, steps, run = read_history(messages)
        self._check_same_run(prefix, len(steps), messages)
        reply = self._query(messages, prefix, steps, run, **kwargs)
        if not steps:
            self._answered_first = messages
        return reply

    def _query(self, messages: list[Message], prefix: list[dict[str, str]],
               steps: list[LoopStep], run: AgentRun, **kwargs: Any) -> Message:
        # the current arm records what goes to the model, the templates' markup too; a
        # ctx08 step records it when its window cannot fit the ceiling and it goes instead
        sent = as_sent(messages)
        try:
            context = self._construct(prefix, steps, run, sent)
        except OverCeilingError as exc:  # (not recorded: its messages could not be read)
            self._refused(len(steps) + 1, str(exc))
            refused_reply: Message = self.model.query(messages, **kwargs)
            return refused_reply
        self.decision_ids.append(context.decision_id)
        if HARNESS_SENT_OVER_CEILING_FLAG in context.flags:
            self._refused(len(steps) + 1, "the harness's prompt and the least a window "
                          f"holds do not fit under the ceiling {context.ceiling} "
                          "([budget].token_ceiling); recorded as sent, "
                          f"{context.token_count} tokens (decision {context.decision_id})")
            fallback_reply: Message = self.model.query(messages, **kwargs)
            return fallback_reply
        if self.arm == ARM_CURRENT:
            reply: Message = self.model.query(messages, **kwargs)
        elif not self.cache_marks:
            reply = self.model.query(context.messages(prefix=prefix), **kwargs)
        else:
            with self._own_marking_off():
                reply = self.model.query(cache_marked_messages(context, prefix), **kwargs)
        return reply

    def _check_same_run(self, prefix: list[dict[str, str]], step_count: int,
                        messages: list[Message]) -> None:
        """Refuse a history that starts another run (before anything is recorded or sent):
        recorded under this run, its steps would read as retries of the earlier run's, or
        clash with them (``StepTakenError``)."""
        if self._run_prefix is None:
            self._run_prefix = prefix
        elif (prefix != self._run_prefix or step_count < self._run_steps
              or (step_count == 0 and self._answered_first is not None
                  and messages is not self._answered_first)):
            what = ("another harness prompt" if prefix != self._run_prefix else
                    f"{step_count} step(s) where the run's latest query held {self._run_steps}"
                    if step_count < self._run_steps else
                    "no step, in another history list than the run's first query, which "
                    "was answered")
            raise RunRestartedError(
                f"{HISTORY_NAME}: the history does not go on from run {self.run_id!r} of "
                f"{self.instance_id!r} that this CtxdbModel recorded ({what}): a CtxdbModel "
                "records one agent run; wrap the model anew for each agent.run()")
        self._run_steps = max(self._run_steps, step_count)

    @contextlib.contextmanager
    def _own_marking_off(self) -> Iterator[None]:
        """The wrapped model's own cache marking off for one call (it would mark the last
        message only, and trips on a message of several blocks), then back as it was: a
        refused step, another wrapper of the model and its saved config keep it."""
        model_config = getattr(self.model, "config", None)
        own = getattr(model_config, CACHE_CONTROL_SETTING, None)
        if not own:
            yield
            return
        setattr(model_config, CACHE_CONTROL_SETTING, None)
        try:
            yield
        finally:
            setattr(model_config, CACHE_CONTROL_SETTING, own)

    def _cache_marks(self, model: Any, cache_marks: bool | None) -> bool:
        """Whether ctx08's windows go marked (never the current arm's: the harness's own
        messages and marks); a model whose marking cannot be turned off is refused."""
        model_config = getattr(model, "config", None)
        own = getattr(model_config, CACHE_CONTROL_SETTING, None)
        if self.arm != ARM_CTX08:
            return False
        marks = bool(own) if cache_marks is None else cache_marks
        if marks and own:
            try:  # (set to what it is: a frozen config refuses it as it would None)
                setattr(model_config, CACHE_CONTROL_SETTING, own)
            except (AttributeError, TypeError, ValueError) as exc:
                raise ValueError(f"model.config.{CACHE_CONTROL_SETTING}: ctxdb marks ctx08's "
                                 f"windows itself and cannot turn the model's own marking "
                                 f"off for its calls ({exc}); give cache_marks=False to "
                                 "leave it") from exc
        return marks

    def _refused(self, step: int, why: str) -> None:
        self.refused_steps.append(step)
        warnings.warn(f"ctxdb refused step {step} of run {self.run_id!r}: {why}; sent the "
                      "harness's own messages", RefusedStepWarning, stacklevel=3)

    def _construct(self, prefix: list[dict[str, str]], steps: list[LoopStep], run: AgentRun,
                   sent: list[dict[str, str]] | None) -> Any:
        task = self.task if self.task is not None else run.task
        current = self.arm == ARM_CURRENT
        try:
            return construct_step(self.store, run_id=self.run_id, instance_id=self.instance_id,
                                  task=task, steps=steps, tree=self.tree, prefix=prefix,
                                  arm=self.arm, rules=self.rules,
                                  sent=sent if current else None,
                                  sent_if_over_ceiling=None if current else sent,
                                  workdir=self.workdir, cache_marks=self.cache_marks)
        except SentMessagesError as exc:
            if not current:  # the messages to send instead could not be read as steps
                raise OverCeilingError(f"{exc}: not recorded") from exc
            # a history shape the reader skips part of (an interactive agent's own
            # commands): the step is still recorded, its messages rebuilt from the steps
            warnings.warn(f"ctxdb could not record step {len(steps) + 1} of run "
                          f"{self.run_id!r} as sent ({exc}); recorded the history rebuilt "
                          "from the steps", SentNotRecordedWarning, stacklevel=3)
            return construct_step(self.store, run_id=self.run_id,
                                  instance_id=self.instance_id, task=task, steps=steps,
                                  tree=self.tree, prefix=prefix, arm=self.arm, rules=self.rules,
                                  workdir=self.workdir, cache_marks=self.cache_marks)

    # the rest of mini-swe-agent's Model protocol: the wrapped model's own
    @property
    def config(self) -> Any:
        return self.model.config

    def format_message(self, **kwargs: Any) -> Message:
        message: Message = self.model.format_message(**kwargs)
        return message

    def format_observation_messages(self, message: Message, outputs: list[dict[str, Any]],
                                    template_vars: dict[str, Any] | None = None
                                    ) -> list[Message]:
        messages: list[Message] = self.model.format_observation_messages(
            message, outputs, template_vars)
        return messages

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        template_vars: dict[str, Any] = self.model.get_template_vars(**kwargs)
        return template_vars

    def serialize(self) -> dict[str, Any]:
        """The wrapped model's, with where ctxdb recorded the run (the trajectory file
        then names its decisions)."""
        data: dict[str, Any] = self.model.serialize()
        data.setdefault("info", {})["ctxdb"] = {
            "run_id": self.run_id, "arm": self.arm, "instance_id": self.instance_id,
            "workdir": self.workdir, "cache_marks": self.cache_marks,
            "decision_ids": list(self.decision_ids), "refused_steps": list(self.refused_steps)}
        return data

    def __getattr__(self, name: str) -> Any:  # anything else a harness reads (cost, stats)
        if name == "model":  # not set yet: __init__ failed before it
            raise AttributeError(name)
        return getattr(self.model, name)

    def close(self) -> None:
        """Close the store if this model opened it."""
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> CtxdbModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
