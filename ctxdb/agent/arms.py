"""The replay's prompts per arm, their tokens, and what a prompt cache would serve.

- ``current``: exactly what the run's harness sent at decision k — every message before
  turn k.
- ``mask10``: the same, with every observation older than the ``MASK_KEEP_NEWEST`` (10)
  newest replaced by a one-line placeholder (the observation-masking baseline of
  Lindenbauer et al. 2025, "The Complexity Trap", and SWE-agent's ``LastNObservations``).
- ``ctx08``: the harness's own system and instruction messages, then ctxdb's window as
  one user message (the window is sent with the harness's prompt, so it is counted too).

Tokens: each message's content (and its tool calls' text: ``counted_text``) counted with
the store's tokenizer, plus
``CHAT_MESSAGE_OVERHEAD_TOKENS`` per message (the role and separators of the chat
format: OpenAI's cookbook counts 3 per message and 3 to prime the reply).

A prompt cache serves the longest prefix a prompt shares with one sent before
(providers bill it at ``cached_price_ratio`` of the input price). The replay counts the
prefix shared with the same arm's previous decision: whole messages while they are equal,
then the common start of the first message that differs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..spec import ARM_CTX08 as ARM_CTX08  # the arms the replay shares with the A/B
from ..spec import ARM_CURRENT as ARM_CURRENT
from .trajectory import AgentRun, counted_text

ARM_MASK10 = "mask10"
MASK_KEEP_NEWEST = 10  # observations kept whole by the mask10 arm
CHAT_MESSAGE_OVERHEAD_TOKENS = 3
CHAT_REPLY_PRIMING_TOKENS = 3


def mask_placeholder(text: str) -> str:
    """The one line an old observation becomes in the mask10 arm."""
    lines = text.count("\n") + 1
    return f"[Old observation omitted: {lines} line{'s' if lines != 1 else ''}.]"


def current_prompt(run: AgentRun, k: int) -> list[dict[str, str]]:
    return run.history_before(k)


def mask10_prompt(run: AgentRun, k: int,
                  keep_newest: int = MASK_KEEP_NEWEST) -> list[dict[str, str]]:
    """The history with every observation but the newest ``keep_newest`` replaced by its
    placeholder (``masked_observation_indexes``)."""
    messages = run.history_before(k)
    for index in masked_observation_indexes(run, k, keep_newest):
        messages[index] = {"role": messages[index]["role"],
                           "content": mask_placeholder(messages[index]["content"])}
    return messages


def masked_observation_indexes(run: AgentRun, k: int,
                               keep_newest: int = MASK_KEEP_NEWEST) -> frozenset[int]:
    """Message indexes the mask10 arm replaces at decision k: observations are the
    messages after the instruction that are not the agent's turns, all but the newest
    ``keep_newest`` of them."""
    indexes = [i for i, m in enumerate(run.messages[: run.steps[k - 1].message_index])
               if i >= 2 and m["role"] != "assistant"]
    return frozenset(indexes[: max(0, len(indexes) - keep_newest)])


def prompt_text(messages: Sequence[dict[str, str]]) -> str:
    """The prompt as one text, for finding what it holds."""
    return "\n".join(counted_text(m) for m in messages)


@dataclass
class PromptCounter:
    """Counts prompts with one tokenizer, each distinct message once (a run re-sends the
    same messages at every decision)."""

    count_text: Callable[[str], int]

    def __post_init__(self) -> None:
        self._counts: dict[str, int] = {}

    def message_tokens(self, content: str) -> int:
        key = hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()
        count = self._counts.get(key)
        if count is None:
            count = self._counts[key] = self.count_text(content)
        return count + CHAT_MESSAGE_OVERHEAD_TOKENS

    def prompt_tokens(self, messages: Sequence[dict[str, str]]) -> int:
        return CHAT_REPLY_PRIMING_TOKENS + sum(self.message_tokens(counted_text(m))
                                               for m in messages)

    def cached_tokens(self, previous: Sequence[dict[str, str]] | None,
                      messages: Sequence[dict[str, str]]) -> int:
        """Tokens of the prefix ``messages`` shares with ``previous`` (0 with none)."""
        if not previous:
            return 0
        cached = 0
        for before, now in zip(previous, messages, strict=False):
            text = counted_text(now)
            if before == now:
                cached += self.message_tokens(text)
                continue
            if before["role"] == now["role"]:
                common = _common_prefix_length(counted_text(before), text)
                if common:
                    # the shared start of the message, counted on its own: at most the
                    # message's tokens (a token may straddle the point they part)
                    cached += min(self.count_text(text[:common]), self.message_tokens(text))
            break
        return min(cached, self.prompt_tokens(messages))


def _common_prefix_length(first: str, second: str) -> int:
    """Length of the common start of two texts (bisected on slices: fast on long texts)."""
    low, high = 0, min(len(first), len(second))
    while low < high:
        middle = (low + high + 1) // 2
        if first[:middle] == second[:middle]:
            low = middle
        else:
            high = middle - 1
    return low
