"""(b) The hard relevance gate, spec §3.2 — the rule itself is SQL (``v_gate``).

The view reads only the decision's own rows (pool, structural links, impact edges,
nearness, link policy, source priority), so the same rule answers in a ``sqlite3``
shell: ``SELECT * FROM v_gate WHERE decision_id = 42``. This module runs it for one
decision; no model is consulted.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from sqlalchemy import Connection, text

from .sqlfiles import load_sql

ADMIT, RESIDUAL, REJECT, OUT_OF_POOL = "admit", "residual", "reject", "out_of_pool"


class GateVerdict(NamedTuple):  # a tuple: a 256-item pool makes 256 of them per decision
    item_id: str
    item_no: int
    gate_verdict: str
    driver: str
    admit_rank: int | None


def gate_decision(connection: Connection, decision_id: int) -> list[GateVerdict]:
    """The gate's verdict on every item of one decision, in pool order."""
    rows = connection.execute(_gate_query(), {"decision_id": decision_id}).fetchall()
    return list(map(GateVerdict._make, rows))


@functools.cache
def _gate_query():
    return text(load_sql("stages/gate_decision"))
