"""A loop window laid out for a prompt cache that serves only where a request marks it.

OpenAI's and DeepSeek's caches serve the longest start a prompt shares with one sent
before, wherever it ends: a ctx08 window's unchanged start is served as it is. Anthropic's
serves a start only at a mark (``cache_control``) that an earlier request put at a content
block's end, looked for at most ``PROVIDER_LOOKBACK_BLOCKS`` blocks back from each of the
request's own marks, at most ``PROVIDER_MARKS_MAX`` marks a request. mini-swe-agent marks
the last message only (``set_cache_control: default_end``, its default for Claude): with
the window one message, nothing of it is ever served, only the harness's prompt.

``cache_marked_messages`` sends the same text, the window split into one text block per
item, with three marks: the end of the harness's prompt, the end of what the next window
repeats until a fold (``middle_mark``: all but the newest reasoning, which goes last so
that the next window drops it alone), and the end. The next request finds the middle
mark a few blocks back from its own. Played over the development runs' replayed windows
(``tools/cache_marks.py``, the window rules at a2bbe48), that serves 24.90 M of ctx08's
27.74 M tokens (a cache that serves any shared start: 25.12 M), where the one mark at
the end serves 6.29 M, the harness's prompt alone: a cost 0.682 of the current arm's,
against 2.83 (a cache write priced as an input token; Anthropic bills 1.25). A mark
before the newest step's items instead, which leaves that step's command and output
unserved at every step, served 22.43 M of 26.74 M at 58ad949's rules (0.838).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..context import DecisionContext
from ..pipeline.window_text import window_head
from .loop import THOUGHT_PART, step_of_item

# Anthropic's prompt caching: at most 4 marks a request (this layout makes 3, leaving the
# harness one); a mark finds an earlier one at most about 20 content blocks back
# (docs.anthropic.com, "Prompt caching", 2026)
PROVIDER_MARKS_MAX = 4
PROVIDER_LOOKBACK_BLOCKS = 20
CACHE_MARK = {"type": "ephemeral"}  # the mark's value: the provider's default lifetime
_ITEM_NUMBER = re.compile(r"E(\d+)")


def _step_and_part(item_id: str) -> tuple[int, int]:
    """(step, part) of a loop window's item id; (0, -1) for one that names no step."""
    match = _ITEM_NUMBER.fullmatch(item_id)
    return step_of_item(int(match.group(1))) if match else (0, -1)


def newest_step_start(item_ids: Sequence[str]) -> int:
    """Index of the first of the newest step's items (its command, output, reasoning,
    note) in a loop window's items; 0 when none names a step."""
    steps = [_step_and_part(item_id)[0] for item_id in item_ids]
    if not steps:
        return 0
    newest, start = max(steps), len(steps)
    while start > 0 and steps[start - 1] == newest:
        start -= 1
    return start


def middle_mark(item_ids: Sequence[str]) -> int:
    """Index of the first item after the middle mark: the window's last item when that is
    the newest reasoning (the next window drops it and keeps everything before it, until
    a fold), else the newest step's first."""
    if item_ids and _step_and_part(item_ids[-1])[1] == THOUGHT_PART:
        return len(item_ids) - 1
    return newest_step_start(item_ids)


def _block(text: str, marked: bool) -> dict[str, Any]:
    return {"type": "text", "text": text} | ({"cache_control": dict(CACHE_MARK)}
                                             if marked else {})


def cache_marked_messages(context: DecisionContext,
                          prefix: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``context.messages(prefix=prefix)`` with cache marks: the last prefix message and
    the window as text blocks (the window one block per item, the task block, when it
    has one, its own), marked at the end of the prefix, at ``middle_mark`` and at the
    end. The blocks' texts joined are the messages' texts, unchanged. An empty
    text is no block (a provider refuses one). A step recorded as the harness's own
    messages (no window fitted: ``context.harness_sent``) is those messages, unmarked:
    the harness marks its own."""
    messages: list[dict[str, Any]] = [dict(m) for m in context.messages(prefix=prefix)]
    if context.harness_sent:
        return messages
    marked_prefix = len(prefix) - 1
    if marked_prefix >= 0 and isinstance(messages[marked_prefix].get("content"), str) \
            and messages[marked_prefix]["content"]:
        messages[marked_prefix]["content"] = [_block(messages[marked_prefix]["content"],
                                                     marked=True)]
    if len(messages) == len(prefix):  # the first step: the harness's prompt alone
        return messages
    # the task block opens the window message after a prefix (without one it is the
    # system message, marked or not as the prefix would be: not at all)
    head = window_head(context.task, context.flags) if prefix else ""
    entries = [e for e in context.window if e.text]
    texts = ([head] if head else []) + [e.text for e in entries]
    if not texts:  # no window text (a provider refuses an empty list too): as it is
        return messages
    middle = len(texts) - len(entries) + middle_mark([e.item_id for e in entries])
    marks = {len(texts) - 1} | ({middle - 1} if middle > 0 else set())
    messages[-1]["content"] = [_block(text, index in marks) for index, text in enumerate(texts)]
    return messages
