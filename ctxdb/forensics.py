"""Reading decisions back: summaries, an item's path, raw content, window diffs.

Everything here is a query in ``sql/forensics/``; the CLI prints what it returns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import Connection

from .pipeline.budget import cut_task
from .pipeline.window_text import DECISION_REF_PREFIX, TASK_HEADER
from .request import STORE_INTEGER_MAX
from .sqlfiles import sql_statement

_REF = re.compile(rf"^{DECISION_REF_PREFIX}(?P<hex>[0-9a-f]{{8,64}})$")


_ITEM_ID = re.compile(r"E[1-9][0-9]*")  # an item's id in its pool (evidence_item.item_id)


class NotFound(LookupError):
    """The named decision or item does not exist; the message says which."""


def _rows(connection: Connection, name: str, **params):
    return connection.execute(sql_statement(f"forensics/{name}"), params).mappings().all()


def resolve_decision(connection: Connection, ref: str | int) -> int:
    """A decision id from ``42`` or a masking pointer's ``req-3f2a9c1d0b7e``."""
    ref = str(ref)
    match = _REF.match(ref)
    if match:
        prefix = match["hex"]
        rows = _rows(connection, "decision_by_ref", prefix=prefix, prefix_length=len(prefix))
        if not rows:
            raise NotFound(f"no decision whose request hash starts with {prefix!r}")
        return rows[0]["decision_id"]
    if not (ref.isascii() and ref.isdigit()):
        raise NotFound(f"decision {ref[:40]!r}: expected a decision id or "
                       f"{DECISION_REF_PREFIX}<hex>")
    if len(ref) > len(str(STORE_INTEGER_MAX)) or int(ref) > STORE_INTEGER_MAX:
        raise NotFound(f"decision {ref[:40]}: no decision id is above {STORE_INTEGER_MAX}")
    decision_id = int(ref)
    if not _rows(connection, "decision_header", decision_id=decision_id):
        raise NotFound(f"decision {decision_id} does not exist")
    return decision_id


def header(connection: Connection, decision_id: int):
    return _rows(connection, "decision_header", decision_id=decision_id)[0]


def rendered_window(connection: Connection, decision_id: int) -> str:
    """The exact text that was sent, rebuilt from the stored window rows."""
    head = header(connection, decision_id)
    window = _rows(connection, "window_of_decision", decision_id=decision_id)
    task = head["task_text"]
    if "task_truncated" in (head["flags"] or "").split(","):
        steps = _rows(connection, "budget_steps", decision_id=decision_id)
        task = _cut_task(task, head["token_ceiling"], steps)
    body = "".join(row["rendered_text"] for row in window)
    return TASK_HEADER.format(task=task) + body


def _cut_task(task: str, ceiling: int, steps) -> str:
    """The task as a window flagged ``task_truncated`` showed it.

    The store keeps the task uncut; the budgeter's last resort (``Budgeter.
    _evict_for_exactness``) cuts it from the exact count it logs on each recount, so
    the cut is replayed from ``budget_log`` here. tests/test_forensics.py holds the two
    together.
    """
    for previous, step in zip([None, *steps], steps):
        bare_recount = step["ladder_step"] == "exact_recount" and step["item_id"] is None
        # an eviction for exactness logs the evicted item's row just before its recount
        after_eviction = (previous is not None and previous["ladder_step"] == "exact_recount"
                          and previous["item_id"] is not None)
        if not bare_recount or after_eviction:
            continue
        if not task:
            break  # later recounts cut the rest of the stable core, not the task
        task = cut_task(task, ceiling, step["tokens_before"])
    return task


def summary(connection: Connection, decision_id: int) -> str:
    head = header(connection, decision_id)
    lines = [
        f"decision {decision_id} · run {head['run_id']} ({head['arm']}/{head['variant']}) · "
        f"{head['instance_id']} #{head['seq']} · {head['decision_type']}",
        f"tokens {head['token_count']} / ceiling {head['token_ceiling']} ({head['tokenizer']})"
        + (f" · flags: {head['flags']}" if head["flags"] else ""),
        "items by verdict: " + ", ".join(
            f"{r['verdict']} {r['items']}" for r in _rows(connection, "verdict_counts",
                                                           decision_id=decision_id)
        ),
        "tokens by tier: " + ", ".join(
            f"{r['tier']} {r['tokens']} ({r['items']} items)"
            for r in _rows(connection, "tokens_by_tier", decision_id=decision_id)
        ),
    ]
    calls = _rows(connection, "rank_of_decision", decision_id=decision_id)
    fate = {r["action"]: r["items"] for r in _rows(connection, "residue_fate",
                                                      decision_id=decision_id)}
    if calls:
        call = calls[0]
        latency = f", {call['latency_ms']:.0f} ms" if call["latency_ms"] is not None else ""
        lines.append(
            f"ranking: 1 call to {call['model']} — {call['parse_status']}{latency}; "
            f"{call['candidates']} candidates scored, {call['admitted']} admitted"
            + (f" ({call['error']})" if call["error"] else "")
        )
    elif fate:
        lines.append("ranking: no call — residue " + ", ".join(
            f"{action} {items}" for action, items in sorted(fate.items())))
    steps = [s for s in _rows(connection, "budget_steps", decision_id=decision_id)
             if s["ladder_step"] != "measured"]
    if steps:
        lines.append(f"eviction steps ({len(steps)}):")
        for step in steps:
            lines.append(
                f"  {step['step_no']:>3} {step['ladder_step']:<28} {step['item_id'] or '-':<6}"
                f" {step['tokens_before']} -> {step['tokens_after']}"
            )
    else:
        lines.append("eviction steps: none (the window fit)")
    return "\n".join(lines)


def why(connection: Connection, decision_id: int, item_id: str) -> list:
    rows = _rows(connection, "why_item", decision_id=decision_id, item_id=item_id)
    if not rows:
        raise NotFound(f"decision {decision_id} has no item {item_id!r}")
    return rows


def item_id_of(connection: Connection, decision_id: int, item: str) -> str:
    """An item id as given (``E7``), or the first evidence item of an entity key."""
    if _ITEM_ID.fullmatch(item):
        return item
    rows = _rows(connection, "item_of_entity", decision_id=decision_id, entity_key=item)
    if not rows:
        raise NotFound(f"decision {decision_id} has no item of entity {item[:200]!r}")
    return rows[0]["item_id"]


def item(connection: Connection, decision_id: int, item_id: str):
    rows = _rows(connection, "item_of_decision", decision_id=decision_id, item_id=item_id)
    if not rows:
        raise NotFound(f"decision {decision_id} has no item {item_id!r}")
    return rows[0]


@dataclass(frozen=True)
class WindowDiff:
    entered: list[tuple[str, str]]  # (fact, item id in B)
    left: list[tuple[str, str]]  # (fact, item id in A)
    changed: list[tuple[str, str, str]]  # (fact, rendering in A, rendering in B)


def diff(connection: Connection, decision_a: int, decision_b: int) -> WindowDiff:
    """What entered, left, or changed rendering between two windows, by fact identity."""

    def facts(decision_id):
        out = {}
        for row in _rows(connection, "window_of_decision", decision_id=decision_id):
            fact = row["entity_key"] or row["fact_key"]
            if row["fact_key"].startswith("item:"):
                fact = f"{row['kind']}:{row['entity_key'] or row['item_id']}"
            out.setdefault(fact, (row["item_id"], row["rendering"]))
        return out

    a, b = facts(decision_a), facts(decision_b)
    return WindowDiff(
        entered=[(f, b[f][0]) for f in sorted(set(b) - set(a))],
        left=[(f, a[f][0]) for f in sorted(set(a) - set(b))],
        changed=[(f, a[f][1], b[f][1]) for f in sorted(set(a) & set(b)) if a[f][1] != b[f][1]],
    )
