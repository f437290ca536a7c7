"""(b) The hard relevance gate, spec §3.2 — the rule itself is SQL.

``v_gate_rule`` decides each pool item (admit / residual / reject) from the decision's own
rows (pool, structural links, impact edges, nearness, link policy, source priority), so
the same rule answers in a ``sqlite3`` shell; ``v_gate`` adds the 64-item cap for the
reader: ``SELECT * FROM v_gate WHERE decision_id = 42``. The pipeline runs the rule for
one decision (``run_gate``) and caps the admitted set once ranking has added to it
(``cap_admitted``), in ``v_gate``'s order (``cap_order``, which the 256-item pool cap
uses too): when nothing was ranked or folded in, the two cut the same items (tested);
when something was, ``v_item_verdict`` records what the pipeline cut. No model is
consulted.
"""

from __future__ import annotations

import functools
import re
from typing import Any, NamedTuple

from sqlalchemy import Connection

from ..models import GATE_VIEW, PREVIEW_GATE_VIEW
from ..recon.writer import compiled_sql
from ..spec import ADMITTED_MAX
from .state import Attempt, Candidate, PoolItem
from .vocabulary import ADMIT, GATE, OUT_OF_POOL, REJECTED, RESIDUAL

STAGE = GATE


class GateVerdict(NamedTuple):  # a tuple: a 256-item pool makes 256 of them per decision
    item_id: str
    item_no: int
    gate_verdict: str
    driver: str
    priority: int  # the item's source in the store's source_priority table (§3.1)


def cap_order(source_priority: int, item: PoolItem) -> tuple[int, int]:
    """The order of §3.1's and §3.2's caps: source priority, then pool order — live
    state newest first, so a long history loses its oldest outputs first."""
    return (source_priority, -item.arrival_no if item.arrival_no is not None else item.item_no)


GATE_STATEMENT = "stages/gate_decision"


def gate_verdicts(connection: Connection, decision_id: int, *,
                  preview: bool = False) -> list[GateVerdict]:
    """The gate rule's verdict on every item of one decision, in pool order; of a
    decision in SQLite's preview tables (``models.PREVIEW_TABLES``) when ``preview``."""
    sql, order = compiled_sql(GATE_STATEMENT, connection.dialect)
    if preview:
        sql = _preview_gate_sql(sql)
    return list(map(GateVerdict._make, _driver_rows(connection, sql, order,
                                                    {"decision_id": decision_id})))


@functools.cache
def _preview_gate_sql(sql: str) -> str:
    """The gate's statement reading the view over the preview's tables."""
    view = re.compile(rf"\b{GATE_VIEW}\b")
    if len(view.findall(sql)) != 1:
        raise ValueError(f"{GATE_STATEMENT}: expected one reference to {GATE_VIEW}")
    return view.sub(PREVIEW_GATE_VIEW, sql)


def driver_rows(connection: Connection, name: str,
                parameters: dict[str, object]) -> list[tuple[Any, ...]]:
    """The rows of ``sql/<name>.sql`` as plain tuples, run by the driver's cursor inside
    ``connection``'s transaction: SQLAlchemy's result rows cost a third of the gate's
    256-item query (the statement is compiled once per dialect, as recon's writer's)."""
    sql, order = compiled_sql(name, connection.dialect)
    return _driver_rows(connection, sql, order, parameters)


def _driver_rows(connection: Connection, sql: str, order: tuple[str, ...] | None,
                 parameters: dict[str, object]) -> list[tuple[Any, ...]]:
    cursor = connection.connection.cursor()
    try:
        cursor.execute(sql, parameters if order is None
                       else tuple(parameters[key] for key in order))
        return list(cursor.fetchall())
    finally:
        cursor.close()


def run_gate(connection: Connection, attempt: Attempt, decision_id: int, *,
             preview: bool = False) -> list[GateVerdict]:
    """The rule on the rows of ``decision_id`` (the attempt's inputs, as this transaction
    wrote them; in SQLite's preview tables when ``preview``): admitted items become the
    attempt's candidates, residual ones its residue — a module's outline and its file's
    residual symbols as one candidate — and the rejected get their final verdict here.
    Returns the rule's verdicts."""
    by_id, audit, priorities = attempt.inputs.by_id, attempt.audit, attempt.priority
    admitted: list[Candidate] = []
    verdicts = gate_verdicts(connection, decision_id, preview=preview)
    # unpacked, not read by field: 256 rows a decision at 256 items
    for item_id, _item_no, verdict, driver, priority in verdicts:
        priorities[item_id] = priority
        if verdict == OUT_OF_POOL:
            continue  # already final at assembly
        if verdict == ADMIT:
            audit.add(item_id, STAGE, "admitted", driver)
            admitted.append(Candidate(item=by_id[item_id], driver=driver))
        elif verdict == RESIDUAL:
            audit.add(item_id, STAGE, "residual", driver)
            attempt.residue.append(item_id)
        else:
            audit.final(item_id, STAGE, REJECTED, driver)
    attempt.candidates = admitted
    _group_residue_by_outline(attempt)
    return verdicts


def _group_residue_by_outline(attempt: Attempt) -> None:
    """A residual module outline (a whole module's symbol item: a skeleton) and the
    residual symbols of its file are ONE candidate of the residue, the outline standing
    for them: the outline does not compete with the symbols it lists, and a file's many
    hits do not crowd §4's 32. Other items stay candidates of their own."""
    by_id = attempt.inputs.by_id
    outline_of_path: dict[str | None, str] = {}
    for item_id in attempt.residue:
        item = by_id[item_id]
        if item.is_outline:
            outline_of_path.setdefault(item.path, item_id)
    ranked: list[str] = []
    members: dict[str, list[str]] = {}
    for item_id in attempt.residue:
        item = by_id[item_id]
        outline = outline_of_path.get(item.path)
        if outline is None or outline == item_id:
            ranked.append(item_id)
        else:
            members.setdefault(outline, []).append(item_id)
    attempt.residue, attempt.outline_members = ranked, members


def cap_admitted(attempt: Attempt) -> None:
    """§3.2's cap on the whole admitted set (ranked or folded items included): the
    ADMITTED_MAX first in cap order by the store's source_priority; the rest rejected
    at the gate. Leaves the candidates in pool order."""
    admitted, priority = attempt.candidates, attempt.priority
    if len(admitted) > ADMITTED_MAX:
        admitted = sorted(admitted, key=lambda c: cap_order(priority[c.item_id], c.item))
        for candidate in admitted[ADMITTED_MAX:]:
            attempt.audit.final(candidate.item_id, STAGE, REJECTED,
                                 f"admitted_cap_{ADMITTED_MAX}: lower source priority than "
                                 f"{ADMITTED_MAX} admitted items")
        admitted = admitted[:ADMITTED_MAX]
    attempt.candidates = sorted(admitted, key=lambda c: c.item.item_no)
