"""What the harness achieved per run and instance (the A/B's outcomes).

``store`` is anything with ``write_transaction()`` (a ``ContextStore``): this module
is imported by the store, so it must not import the store back.

An outcomes file is recorded all or nothing: every line is checked — its JSON, its
fields, that its run is in the store, that no other line gives the same run and
instance, that its run made a decision for the instance — and only a file with no bad
line is written, in one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection

from . import models
from .request_limits import json_lines
from .sqlfiles import sql_statement

if TYPE_CHECKING:
    from .store import ContextStore

REQUIRED_FIELDS = ("run_id", "instance_id", "solved")
NUMBER_FIELDS = ("cost_usd", "model_tokens_in", "model_tokens_out")
KNOWN_FIELDS = REQUIRED_FIELDS + NUMBER_FIELDS


@dataclass(frozen=True)
class Outcome:
    run_id: str
    instance_id: str
    solved: bool
    cost_usd: float | None = None
    model_tokens_in: float | None = None
    model_tokens_out: float | None = None


def check_outcome(run_id: object, instance_id: object, solved: object,
                  cost_usd: object = None, model_tokens_in: object = None,
                  model_tokens_out: object = None) -> Outcome:
    """The outcome, or a ValueError naming the first bad field and what it expects."""
    run, instance = _text_field("run_id", run_id), _text_field("instance_id", instance_id)
    if not isinstance(solved, bool):
        raise ValueError(f"field 'solved': expected true or false, got {solved!r}")
    cost, tokens_in, tokens_out = (
        _number_field(name, value) for name, value in zip(
            NUMBER_FIELDS, (cost_usd, model_tokens_in, model_tokens_out), strict=True))
    return Outcome(run, instance, solved, cost, tokens_in, tokens_out)


def _text_field(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"field {name!r}: expected a non-empty string, got {value!r}")
    return value


def _number_field(name: str, value: object) -> float | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or value < 0):
        raise ValueError(f"field {name!r}: expected a non-negative number or null, "
                         f"got {value!r}")
    return value


def _missing_run(run_id: str) -> str:
    return (f"field 'run_id': no run {run_id!r} in this store (expected the id of a run "
            "`ctxdb ab run` or a harness's agent loop made, such as mini-swe-agent's "
            "CtxdbModel.run_id; record outcomes after it)")


def _missing_instance(outcome: Outcome) -> str:
    return (f"field 'instance_id': run {outcome.run_id!r} made no decision for instance "
            f"{outcome.instance_id!r} (expected an instance the run worked on)")


def _unknown(connection: Connection, outcomes: list[Outcome]) -> dict[Outcome, str]:
    """The outcomes whose run is not in the store, or made no decision for the instance,
    with the error for each."""
    runs = {o.run_id: connection.execute(sql_statement("ab/run_exists"),
                                         {"run_id": o.run_id}).first() is not None
            for o in outcomes}
    errors = {}
    for outcome in outcomes:
        if not runs[outcome.run_id]:
            errors[outcome] = _missing_run(outcome.run_id)
        elif connection.execute(sql_statement("ab/instance_in_run"), {
                "run_id": outcome.run_id, "instance_id": outcome.instance_id}).first() is None:
            errors[outcome] = _missing_instance(outcome)
    return errors


def _write(connection: Connection, outcome: Outcome, recorded_at: str) -> None:
    connection.execute(sql_statement("ab/delete_outcome"),
                       {"run_id": outcome.run_id, "instance_id": outcome.instance_id})
    models.insert_many(connection, models.outcome, [{
        "run_id": outcome.run_id, "instance_id": outcome.instance_id,
        "solved": outcome.solved, "cost_usd": outcome.cost_usd,
        "model_tokens_in": outcome.model_tokens_in,
        "model_tokens_out": outcome.model_tokens_out, "recorded_at": recorded_at,
    }])


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def record_outcome(store: ContextStore, run_id: str, instance_id: str, solved: bool,
                   cost_usd: float | None = None, model_tokens_in: float | None = None,
                   model_tokens_out: float | None = None) -> None:
    """Record one outcome (an outcome recorded again for the same run and instance
    replaces it)."""
    outcome = check_outcome(run_id, instance_id, solved, cost_usd, model_tokens_in,
                            model_tokens_out)
    with store.write_transaction() as connection:
        error = _unknown(connection, [outcome]).get(outcome)
        if error is not None:
            raise ValueError(error)
        _write(connection, outcome, _now())


def parse_outcomes(path: str | Path) -> tuple[list[tuple[int, Outcome]], list[tuple[int, str]]]:
    """(line number, outcome) of the good lines and (line number, error) of the bad ones;
    a second line for the same run and instance is bad (which would win is a guess)."""
    good: list[tuple[int, Outcome]] = []
    bad: list[tuple[int, str]] = []
    first_line: dict[tuple[str, str], int] = {}
    for line_no, data, unread in json_lines(path):
        if unread is not None:
            bad.append((line_no, f"{unread}: expected one JSON object per line"))
            continue
        try:
            if not isinstance(data, dict):
                raise ValueError(f"expected a JSON object, got {type(data).__name__}")
            missing = [k for k in REQUIRED_FIELDS if k not in data]
            if missing:
                raise ValueError(f"field {missing[0]!r}: missing (expected "
                                 f"{', '.join(REQUIRED_FIELDS)}, and optionally "
                                 f"{', '.join(NUMBER_FIELDS)})")
            unknown = sorted(set(data) - set(KNOWN_FIELDS))
            if unknown:
                raise ValueError(f"field {unknown[0]!r}: not an outcome field (expected "
                                 f"{', '.join(KNOWN_FIELDS)})")
            outcome = check_outcome(*(data.get(k) for k in KNOWN_FIELDS))
        except ValueError as exc:
            bad.append((line_no, str(exc)))
            continue
        key = (outcome.run_id, outcome.instance_id)
        if key in first_line:
            bad.append((line_no, f"run {key[0]!r} and instance {key[1]!r} again (also on "
                                 f"line {first_line[key]}): expected one outcome per run "
                                 "and instance"))
            continue
        first_line[key] = line_no
        good.append((line_no, outcome))
    return good, bad


def import_outcomes(store: ContextStore, path: str | Path) -> tuple[int, list[str]]:
    """Record every outcome of a JSONL file in one transaction, or none: returns (how
    many were recorded, one error per bad line naming the line and the field). Any bad
    line means nothing is written."""
    good, bad = parse_outcomes(path)
    recorded_at = _now()
    with store.write_transaction() as connection:
        unknown = _unknown(connection, [outcome for _, outcome in good])
        bad += [(line_no, unknown[o]) for line_no, o in good if o in unknown]
        if bad:
            return 0, [f"{path} line {line_no}: {error}" for line_no, error in sorted(bad)]
        for _, outcome in good:
            _write(connection, outcome, recorded_at)
    return len(good), []
