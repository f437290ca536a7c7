"""DecisionContext: the one window handed to the model for one decision (spec §3.7 "Emit")."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .pipeline.state import BudgetStep
from .pipeline.window_text import task_block, window_head
from .request import storable_value
from .request_limits import RequestError


@dataclass(frozen=True)
class WindowEntry:
    position: int
    item_id: str
    role: str
    rendering: str
    tier: str
    block: str
    edge_critical: bool
    token_count: int
    text: str  # exactly what this item adds to the rendered window
    shown_lines: tuple[int, int] | None = None  # file lines whose text it shows


@dataclass(frozen=True)
class DecisionContext:
    decision_id: int
    arm: str
    task: str
    acceptance_criteria: tuple[str, ...]
    current_obligation: str
    window: tuple[WindowEntry, ...]
    token_count: int
    ceiling: int
    tokenizer: str
    budget_log: tuple[BudgetStep, ...] = ()  # the eviction ladder's steps
    flags: tuple[str, ...] = ()
    verdicts: dict[str, int] = field(default_factory=dict)  # final verdict -> item count
    # an agent loop's harness prompt (its system and instruction messages), sent first
    prefix: tuple[dict[str, str], ...] = ()
    # the request's (an agent loop's: derived from its history, docs/agent-loop.md)
    decision_type: str = ""
    # the harness's own messages, sent instead of a loop window that could not fit the
    # ceiling (flag harness_sent_over_ceiling): what ``messages()`` gives then
    harness_sent: tuple[dict[str, Any], ...] = ()

    def render(self) -> str:
        """The exact text to send."""
        return window_head(self.task, self.flags) + "".join(e.text for e in self.window)

    def messages(self, prefix: Sequence[dict[str, str]] | None = None) -> list[dict[str, str]]:
        """The window as OpenAI chat messages: the task block as the system message, the
        items in window order as the user message — their contents joined are exactly
        ``render()`` (but for a step recorded as the harness's own messages, below). With
        ``prefix`` (a harness's own system and instruction messages; default: the ones an
        agent-loop decision was built after, ``self.prefix``), those
        come first, verbatim, and the window follows as one user message. An agent-loop
        window whose task the harness's prompt carries (``task_in_prefix``) has no task
        block: without a prefix it is the user message alone. A decision built after a
        prefix was counted with it: another (``[]`` too) is refused, naming ``prefix``. A
        loop step whose window could not fit the ceiling and was recorded as the
        harness's own messages (``harness_sent``) gives those: what is to be sent."""
        if prefix is not None and self.prefix and not _same_messages(prefix, self.prefix):
            raise RequestError(
                f"prefix: expected the {len(self.prefix)} harness messages decision "
                f"{self.decision_id} was built after and counted with (or none: they are "
                f"the default), got {len(prefix)} messages that differ from them")
        if self.harness_sent:
            return [dict(m) for m in self.harness_sent]
        prefix = self.prefix if prefix is None else prefix
        items = "".join(e.text for e in self.window)
        if prefix:
            head = window_head(self.task, self.flags)
            if not head and not items:
                return [dict(m) for m in prefix]  # an agent loop's first step
            return [dict(m) for m in prefix] + [{"role": "user", "content": head + items}]
        if not window_head(self.task, self.flags):
            return [{"role": "user", "content": items}]
        return [{"role": "system", "content": task_block(self.task)},
                {"role": "user", "content": items}]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["rendered"] = self.render()
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True, ensure_ascii=False)


def _same_messages(given: Sequence[dict[str, Any]], held: Sequence[dict[str, Any]]) -> bool:
    """Whether ``given`` are the messages ``held`` keeps: equal once their texts are as a
    store holds them (a lone surrogate as U+FFFD, ``request.storable_value``)."""
    return isinstance(given, (list, tuple)) and \
        storable_value([dict(m) for m in given]) == [dict(m) for m in held]
