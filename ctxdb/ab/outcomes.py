"""What the harness achieved per run and instance (the A/B's outcomes).

``store`` is anything with ``write_transaction()`` (a ``ContextStore``): this module
is imported by the store, so it must not import the store back.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from .. import models
from ..sqlfiles import sql_statement


def record_outcome(store, run_id: str, instance_id: str, solved: bool, cost_usd=None,
                   model_tokens_in=None, model_tokens_out=None) -> None:
    if not isinstance(solved, bool):
        raise ValueError(f"solved: expected true or false, got {solved!r}")
    for name, value in (("cost_usd", cost_usd), ("model_tokens_in", model_tokens_in),
                        ("model_tokens_out", model_tokens_out)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or value < 0):
            raise ValueError(f"{name}: expected a non-negative number or null, got {value!r}")
    with store.write_transaction() as connection:
        if connection.execute(sql_statement("ab/run_exists"), {"run_id": run_id}).first() is None:
            raise ValueError(f"run_id: no run {run_id!r} in this store (record outcomes after "
                             "`ctxdb ab run`)")
        connection.execute(sql_statement("ab/delete_outcome"),
                           {"run_id": run_id, "instance_id": instance_id})
        models.insert_many(connection, models.outcome, [{
            "run_id": run_id, "instance_id": instance_id, "solved": solved,
            "cost_usd": cost_usd, "model_tokens_in": model_tokens_in,
            "model_tokens_out": model_tokens_out,
            "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }])


def import_outcomes(store, path) -> tuple[int, list[str]]:
    """Record every line of an outcomes JSONL; bad lines are reported, the rest recorded."""
    recorded, errors = 0, []
    with Path(path).open(encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if not isinstance(data, dict):
                    raise ValueError("expected a JSON object")
                missing = [k for k in ("run_id", "instance_id", "solved") if k not in data]
                if missing:
                    raise ValueError(f"field {missing[0]!r}: missing")
                record_outcome(store, data["run_id"], data["instance_id"], data["solved"],
                               data.get("cost_usd"), data.get("model_tokens_in"),
                               data.get("model_tokens_out"))
                recorded += 1
            except (ValueError, json.JSONDecodeError) as exc:
                errors.append(f"{path} line {line_no}: {exc}")
    return recorded, errors

