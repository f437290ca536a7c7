"""(b) The hard relevance gate, spec §3.2 — the rule itself is SQL (``v_gate``).

The view reads only the decision's own rows (pool, structural links, impact edges,
nearness, link policy, source priority), so the same rule answers in a ``sqlite3``
shell: ``SELECT * FROM v_gate WHERE decision_id = 42``. This module runs it for one
decision; no model is consulted.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, text

from .sqlfiles import load_sql

ADMIT, RESIDUAL, REJECT, OUT_OF_POOL = "admit", "residual", "reject", "out_of_pool"


@dataclass(frozen=True)
class GateVerdict:
    item_id: str
    item_no: int
    gate_verdict: str
    driver: str
    admit_rank: int | None


def gate_decision(connection: Connection, decision_id: int) -> list[GateVerdict]:
    """The gate's verdict on every item of one decision, in pool order."""
    rows = connection.execute(text(load_sql("stages/gate_decision")), {"decision_id": decision_id})
    return [GateVerdict(r.item_id, r.item_no, r.gate_verdict, r.driver, r.admit_rank) for r in rows]
