"""The window's text format: the task header, each item's header and block, pointers.

What the model reads is exactly ``TASK_HEADER`` with the task, then each window item's
block in order (``window_text``). ``ctxdb show`` and ``DecisionContext.render`` print the
same bytes from the stored rows.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

from ..entities import is_symbol_key
from .vocabulary import TASK_IN_PREFIX_FLAG


class _Item(Protocol):
    """What the format reads of a window item's pool item (``state.PoolItem``)."""

    @property
    def item_id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def entity_key(self) -> str | None: ...
    @property
    def start_line(self) -> int | None: ...
    @property
    def end_line(self) -> int | None: ...


class WindowItem(Protocol):
    """What the format reads of a window item (``state.Candidate`` has it): read only."""

    @property
    def item(self) -> _Item: ...
    @property
    def role(self) -> str: ...
    @property
    def rendering(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def masked(self) -> bool: ...
    @property
    def also_stands_for(self) -> Sequence[str]: ...
    @property
    def shown_lines(self) -> tuple[int, int] | None: ...

    def block_text(self) -> str: ...


TASK_HEADER = "TASK\n{task}\n\n"
# How a text cut at the pool's 8 KB cap ends (assemble.py): later cuts leave it out.
CONTENT_CUT_MARK_START = "\n[ctxdb: content cut"
HEADER_SEPARATOR = " · "

# A window must be byte-identical for the same request, so what it prints to name its
# own decision (the masking pointer) is the request's hash, not the row id.
DECISION_REF_PREFIX = "req-"
DECISION_REF_HEX_CHARS = 12


def decision_ref(request_sha256: str) -> str:
    return DECISION_REF_PREFIX + request_sha256[:DECISION_REF_HEX_CHARS]


def without_cut_mark(text: str) -> str:
    """A pool text without the mark its 8 KB cut left, so line windows count file lines."""
    at = text.rfind(CONTENT_CUT_MARK_START)
    return text[:at] if at >= 0 else text


def task_block(task: str) -> str:
    return TASK_HEADER.format(task=task)


def window_head(task: str, flags: Collection[str]) -> str:
    """The window's first block: the task's, or none for an agent-loop decision whose
    harness prompt carries the task (flagged ``task_in_prefix``)."""
    return "" if TASK_IN_PREFIX_FLAG in flags else task_block(task)


def item_header(candidate: WindowItem) -> str:
    """``[E5] change target · fault_entity · a.py::f · L10-20 · verbatim · also E7``."""
    item = candidate.item
    parts = [candidate.role.replace("_", " "), item.kind]
    if item.entity_key:
        parts.append(item.entity_key)
    if item.start_line is not None and is_symbol_key(item.entity_key):
        # the lines the body shows: a slice or window of a cut item, else its whole span
        first, last = candidate.shown_lines or (item.start_line, item.end_line)
        parts.append(f"L{first}-{last}")
    parts.append(candidate.rendering)
    if candidate.also_stands_for:
        parts.append("also " + ", ".join(candidate.also_stands_for))
    return f"[{item.item_id}] " + HEADER_SEPARATOR.join(parts)


def item_block(candidate: WindowItem) -> str:
    """The exact text one item adds to the window (header, body, blank line)."""
    body = candidate.text.rstrip("\n")
    if candidate.masked:
        return f"{body}\n\n"  # the pointer names the item itself
    return f"{item_header(candidate)}\n{body}\n\n"


def mask_pointer(candidate: WindowItem, ref: str) -> str:
    """A short pointer that names the item and how to read its raw text back."""
    item = candidate.item
    return f"[{item.item_id} {item.kind} masked — ctxdb show {ref} {item.item_id}]"


def window_text(task: str, ordered: Sequence[WindowItem]) -> str:
    return task_block(task) + "".join(c.block_text() for c in ordered)
