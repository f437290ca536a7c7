"""(b) The hard relevance gate, spec §3.2 — the rule itself is SQL.

``v_gate_rule`` decides each pool item (admit / residual / reject) from the decision's own
rows (pool, structural links, impact edges, nearness, link policy, source priority), so
the same rule answers in a ``sqlite3`` shell; ``v_gate`` adds the 64-item cap for the
reader: ``SELECT * FROM v_gate WHERE decision_id = 42``. The pipeline runs the rule for
one decision and caps the admitted set once ranking has added to it, in ``v_gate``'s
order: when nothing was ranked or folded in, the two cut the same items (tested); when
something was, ``v_item_verdict`` records what the pipeline cut. No model is consulted.
"""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import Connection

from .audit import AuditLog
from .candidate import Candidate
from ..spec import ADMITTED_MAX
from ..sqlfiles import sql_statement

ADMIT, RESIDUAL, REJECT, OUT_OF_POOL = "admit", "residual", "reject", "out_of_pool"


class GateVerdict(NamedTuple):  # a tuple: a 256-item pool makes 256 of them per decision
    item_id: str
    item_no: int
    gate_verdict: str
    driver: str
    priority: int  # the item's source in the store's source_priority table (§3.1)


def gate_decision(connection: Connection, decision_id: int) -> list[GateVerdict]:
    """The gate rule's verdict on every item of one decision, in pool order."""
    rows = connection.execute(sql_statement("stages/gate_decision"),
                              {"decision_id": decision_id}).fetchall()
    return list(map(GateVerdict._make, rows))


def cap_admitted(admitted: list[Candidate], audit: AuditLog,
                 priority: dict[str, int]) -> list[Candidate]:
    """§3.2's cap on the whole admitted set (ranked or folded items included): the
    ADMITTED_MAX first by source priority (``priority``: item id -> the store's
    source_priority), then pool order — live state newest first — as ``v_gate`` ranks
    the rule-admitted items; the rest rejected at the gate. Returns pool order."""
    if len(admitted) > ADMITTED_MAX:
        admitted = sorted(admitted, key=lambda c: _cap_order(c, priority))
        for candidate in admitted[ADMITTED_MAX:]:
            audit.final(candidate.item_id, "gate", "rejected",
                        f"admitted_cap_{ADMITTED_MAX}: lower source priority than "
                        f"{ADMITTED_MAX} admitted items")
        admitted = admitted[:ADMITTED_MAX]
    return sorted(admitted, key=lambda c: c.item.item_no)


def _cap_order(candidate: Candidate, priority: dict[str, int]) -> tuple[int, int]:
    item = candidate.item
    return (priority[item.item_id],
            -item.arrival_no if item.arrival_no is not None else item.item_no)
