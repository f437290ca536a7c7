"""The working state of one admitted item as it travels render → budget."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from .assemble import PoolItem

# Roles the §3.6 placement rule calls decision-critical: pinned to the edges.
EDGE_CRITICAL_ROLES = frozenset(
    {"requirement", "change_target", "insertion_point", "test_reasoned_over", "live_current"}
)
# §3.7 tiers by role.
STABLE_CORE_ROLES = frozenset({"requirement"})
TRANSIENT_KINDS = frozenset({"patch", "error", "traceback", "tool_output", "test_output"})
FAILURE_KINDS = frozenset({"error", "traceback", "test_output"})

# Which role survives when two items state the same fact (§3.5 "keep the strongest role").
ROLE_STRENGTH = (
    "change_target",
    "insertion_point",
    "requirement",
    "test_reasoned_over",
    "live_current",
    "direct_impact",
    "config_consumer",
    "related_symbol",
    "test_named",
    "transitive_impact",
    "stale",
)

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Words too common in code and prose to say two texts are about the same thing.
_STOP_TERMS = frozenset(
    """
    a an and are as at be by def class for from if in is it not of on or return self the
    this to with none true false test tests should must when then that into cls args kwargs
    """.split()
)
MIN_TERM_LENGTH = 3


_CAMEL_PART = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


@functools.lru_cache(maxsize=1 << 16)
def _word_terms(word: str) -> frozenset[str]:
    parts = [word, *word.split("_"), *_CAMEL_PART.findall(word)]
    return frozenset(
        p for p in (part.lower() for part in parts)
        if len(p) >= MIN_TERM_LENGTH and p not in _STOP_TERMS
    )


def terms(text: str) -> frozenset[str]:
    """Identifier-like words of ``text``, lower-cased, split on snake_case and CamelCase."""
    return _text_terms(text or "")


@functools.lru_cache(maxsize=1 << 14)
def _text_terms(text: str) -> frozenset[str]:
    # Cached per text: a harness asks about the same symbols decision after decision.
    found: set[str] = set()
    for word in set(_WORD.findall(text)):
        found |= _word_terms(word)
    return frozenset(found)


@dataclass(slots=True)
class Candidate:
    item: PoolItem
    driver: str
    role: str = ""
    rendering: str = ""
    text: str = ""  # the rendered body, without the item header
    edge_critical: bool = False
    tier: str = "working_set"
    block: str = "middle"
    tokens: int = 0
    over_compress_target: bool = False  # §3.4: could not go under 1 KB, flagged for (g)
    also_stands_for: list[str] = field(default_factory=list)  # ids deduped into this one
    masked: bool = False  # §3.4 step 4: the text is a pointer, the raw text stays in the store

    @property
    def item_id(self) -> str:
        return self.item.item_id

    def header(self) -> str:
        item = self.item
        parts = [self.role.replace("_", " "), item.kind]
        if item.entity_key:
            parts.append(item.entity_key)
        if item.start_line is not None and item.entity_key and "::" in item.entity_key:
            parts.append(f"L{item.start_line}-{item.end_line}")
        parts.append(self.rendering)
        if self.also_stands_for:
            parts.append("also " + ", ".join(self.also_stands_for))
        return f"[{item.item_id}] " + " · ".join(parts)

    def block_text(self) -> str:
        """The exact text this item adds to the window (header, body, blank line)."""
        body = self.text.rstrip("\n")
        if self.masked:
            return f"{body}\n\n"  # the pointer names the item itself
        return f"{self.header()}\n{body}\n\n"
