"""The working state of one admitted item as it travels render → budget."""

from __future__ import annotations

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
