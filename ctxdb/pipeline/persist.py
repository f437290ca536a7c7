"""Every write of a decision, inside its one transaction.

``write_inputs`` writes the decision's inputs (``DecisionInput``: the run if new, the
decision row, its obligation, pool, texts, links, impact edges and nearness) —
``write_preview_inputs`` only what the gate reads of them, for the preview — and returns
the row it wrote (``DecisionRow``); ``write_outcome`` writes what an ``Attempt`` decided
(the ranking call and its scores, window rows, the audit events, the budget log) and
finishes the decision row. They read the decision's state and never change it. Any
error rolls all of it back.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NamedTuple, cast

from sqlalchemy import Connection, bindparam, insert, select, update

from .. import models
from ..config import Settings
from ..context import DecisionContext
from ..request import DecisionRequest, RequestError
from ..tokens import content_sha256
from .audit import EVENT_COLUMNS
from .state import Attempt, DecisionInput

if TYPE_CHECKING:
    from ..store import ContextStore

_EVIDENCE_COLUMNS = (
    "decision_id", "item_id", "item_no", "source", "kind", "entity_key", "content_sha256",
    "original_sha256", "provenance", "score", "arrival_no", "path", "start_line", "end_line",
    "signature", "in_pool", "fact_key",
)

# Statements built once: building a Core statement per decision costs more than running it.
_INSERT_RANK_CALL = insert(models.rank_call).returning(models.rank_call.c.rank_call_id)
_FINISH_DECISION = update(models.decision).where(
    models.decision.c.decision_id == bindparam("finished_id")
)


class RunArmMismatch(RequestError):
    """A run is one arm of the A/B; a request named the other."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def settings_json(settings: Settings) -> str:
    """What the run records of the settings its decisions were built with, and which
    config files they came from."""
    return json.dumps(
        {"token_ceiling": settings.token_ceiling, "tokenizer": settings.tokenizer,
         "rank_threshold": settings.rank_threshold, "source": settings.source}, sort_keys=True,
    )


class DecisionRow(NamedTuple):
    """What writing a decision's inputs made: its row, and what the rest of the write and
    the store take from it."""

    decision_id: int
    new_run: bool  # this decision started its run
    text_digests: set[str]  # the evidence_text rows the pool refers to
    outcome_columns: tuple[int | None, str]  # token_count and flags the row was given


NOT_DECIDED = (None, "")  # a row written before its stages ran (the preview's)


def write_inputs(connection: Connection, store: ContextStore,
                 attempt: Attempt) -> DecisionRow:
    """The decision row and everything the gate reads, for the attempt that decided it:
    the row is written finished, with the attempt's token count and flags (an UPDATE
    would rewrite it whole — the request as given is in it, megabytes for a large
    pool)."""
    inputs = attempt.inputs
    decision_id, new_run = _write_decision_row(connection, store, inputs,
                                               attempt.outcome_columns)
    _write_obligation(connection, decision_id, inputs.request)
    text_digests = _write_pool(connection, store, decision_id, inputs)
    _write_gate_inputs(connection, decision_id, inputs)
    return DecisionRow(decision_id, new_run, text_digests, attempt.outcome_columns)


def write_preview_inputs(connection: Connection, store: ContextStore,
                         inputs: DecisionInput) -> DecisionRow:
    """What the gate view reads, for the preview before the write lock (rolled back): the
    rows ``write_inputs`` writes less those the gate does not read — the obligation, and
    on SQLite the pool's texts and the pool columns the gate does not read (its preview
    writes TEMP copies with no foreign keys, ``models.PREVIEW_EVIDENCE_COLUMNS`` of the
    pool; PostgreSQL's writes the store's tables, whose pool rows need their texts)."""
    decision_id, new_run = _write_decision_row(connection, store, inputs, NOT_DECIDED)
    if connection.dialect.name == "sqlite":
        text_digests = _write_preview_pool(connection, decision_id, inputs)
    else:
        text_digests = _write_pool(connection, store, decision_id, inputs)
    _write_gate_inputs(connection, decision_id, inputs)
    return DecisionRow(decision_id, new_run, text_digests, NOT_DECIDED)


def _write_decision_row(connection: Connection, store: ContextStore, inputs: DecisionInput,
                        outcome_columns: tuple[int | None, str]) -> tuple[int, bool]:
    """The run if new and the decision row: (its id, whether the run is new)."""
    request, settings = inputs.request, inputs.settings
    new_run = _ensure_run(connection, store, request)
    token_count, flags = outcome_columns
    decision_id = cast(int, models.insert_row(connection, models.decision, {
        "run_id": request.run_id, "instance_id": request.instance_id, "seq": request.seq,
        "decision_type": request.decision_type, "task_text": request.task,
        "decision_question": request.plan_node.decision_question,
        "request_json": inputs.request_json, "request_sha256": inputs.request_sha256,
        "tokenizer": settings.tokenizer, "token_ceiling": settings.token_ceiling,
        "token_count": token_count, "flags": flags, "created_at": _now(),
    }, returning=models.decision.c.decision_id))
    return decision_id, new_run


def _ensure_run(connection: Connection, store: ContextStore, request: DecisionRequest) -> bool:
    """Create the run if it is new (True) and check an existing one's arm and variant."""
    known = store.runs_seen.get(request.run_id)
    if known is not None:  # runs are never deleted: what this store saw committed stays
        _check_arm(request, *known)
        return False
    # Insert-if-absent, then read back: many workers may start the same run at once.
    inserted = connection.execute(
        models.insert_ignoring_duplicates(connection, models.run).values(
            run_id=request.run_id, arm=request.arm, variant=request.variant,
            # the store's settings: a request's own lower ceiling is its decision's alone
            created_at=_now(), settings_json=settings_json(store.settings),
        ).returning(models.run.c.run_id)
    ).first()
    row = connection.execute(
        select(models.run.c.arm, models.run.c.variant).where(models.run.c.run_id == request.run_id)
    ).one()
    _check_arm(request, row.arm, row.variant)
    return inserted is not None  # no row back: another decision made the run first


def _check_arm(request: DecisionRequest, arm: str, variant: str) -> None:
    if (arm, variant) != (request.arm, request.variant):
        raise RunArmMismatch(
            f"request.arm/variant: run {request.run_id!r} is arm {arm!r} variant "
            f"{variant!r}; expected the same, got {request.arm!r}/{request.variant!r}"
        )


def _write_obligation(connection: Connection, decision_id: int,
                      request: DecisionRequest) -> None:
    node = request.plan_node
    point = node.insertion_point
    models.insert_row(connection, models.obligation, {
        "decision_id": decision_id, "obligation_no": 1, "source": "07",
        "node_id": node.node_id, "obligation_text": node.obligation,
        "target_entity": node.target_entity,
        "preconditions_json": json.dumps(list(node.preconditions)),
        "dependencies_json": json.dumps(list(node.dependencies)),
        "required_validation_json": json.dumps(list(node.required_validation)),
        "acceptance_criteria_json": json.dumps(list(node.acceptance_criteria)),
        "insertion_path": point.path if point else None,
        "insertion_line": point.line if point else None,
        "insertion_end_line": point.end_line if point else None,
    })


def _write_preview_pool(connection: Connection, decision_id: int,
                        inputs: DecisionInput) -> set[str]:
    """The pool rows into SQLite's TEMP copy: only the columns the gate reads
    (``PREVIEW_EVIDENCE_COLUMNS``); no texts. Returns the digests the write will refer
    to."""
    rows = [(decision_id, i.item_id, i.item_no, i.source, i.kind, i.entity_key,
             i.arrival_no, i.path, i.start_line, i.end_line, i.in_pool) for i in inputs.pool]
    models.insert_tuples(connection, models.evidence_item, models.PREVIEW_EVIDENCE_COLUMNS,
                         rows, sparse=("arrival_no",))
    return _text_digests(inputs)


def _text_digests(inputs: DecisionInput) -> set[str]:
    digests = set()
    for i in inputs.pool:
        digests.add(content_sha256(i.content))
        if i.original_content is not None:
            digests.add(content_sha256(i.original_content))
    return digests


def _write_pool(connection: Connection, store: ContextStore, decision_id: int,
                inputs: DecisionInput) -> set[str]:
    """The pool rows, each distinct text once by hash; returns the digests it refers
    to."""
    texts: dict[str, str] = {}  # sha256 -> text: each distinct once, kept if the store has it
    rows: list[tuple[object, ...]] = []
    for i in inputs.pool:
        digest = content_sha256(i.content)
        texts[digest] = i.content
        original_sha256 = None
        if i.original_content is not None:
            original_sha256 = content_sha256(i.original_content)
            texts[original_sha256] = i.original_content
        rows.append((
            decision_id, i.item_id, i.item_no, i.source, i.kind, i.entity_key, digest,
            original_sha256, i.provenance, i.score, i.arrival_no, i.path, i.start_line,
            i.end_line, i.signature, i.in_pool, i.fact_key,
        ))
    # In digest order: two PostgreSQL writers inserting the same texts in different
    # orders could each wait on the other's.
    models.insert_tuples(connection, models.evidence_text, ("content_sha256", "content"),
                         [row for row in sorted(texts.items())
                          if row[0] not in store.texts_stored],
                         keep_existing=True)
    models.insert_tuples(connection, models.evidence_item, _EVIDENCE_COLUMNS, rows,
                         sparse=("original_sha256", "arrival_no"))
    return set(texts)


def _write_gate_inputs(connection: Connection, decision_id: int,
                       inputs: DecisionInput) -> None:
    if inputs.links:
        models.insert_many(connection, models.decision_link, [
            {"decision_id": decision_id, "link_no": n, "link_kind": link.link_kind,
             "entity_key": link.entity_key, "path": link.path, "start_line": link.start_line,
             "end_line": link.end_line, "detail": link.detail}
            for n, link in enumerate(inputs.links, start=1)
        ])
    if inputs.edges:
        models.insert_many(connection, models.impact_edge, [
            {"decision_id": decision_id, "edge_no": n, "head_entity": e.head,
             "tail_entity": e.tail, "edge_kind": e.kind, "depth": e.depth, "origin": e.origin}
            for n, e in enumerate(inputs.edges, start=1)
        ])
    if inputs.nearness:
        models.insert_many(connection, models.item_nearness, [
            {"decision_id": decision_id, "item_id": item_id,
             "shared_terms": " ".join(n.shared_terms), "recon_hops": n.recon_hops,
             "nearest_link_no": n.nearest_link_no, "near_score": n.near_score}
            for item_id, n in sorted(inputs.nearness.items(), key=lambda kv: int(kv[0][1:]))
        ])


def write_outcome(connection: Connection, row: DecisionRow,
                  attempt: Attempt) -> DecisionContext:
    """What ``attempt`` decided for the decision ``row``: the ranking call, the window
    (``attempt.entries``) and the audit; finishes the row when it was written before the
    attempt decided. Returns the context to send. Writes only: it may run again if
    PostgreSQL retries the transaction."""
    decision_id, audit, entries = row.decision_id, attempt.audit, attempt.entries
    inputs = attempt.inputs
    request, settings = inputs.request, inputs.settings
    _write_ranking(connection, decision_id, attempt)
    if entries:
        models.insert_many(connection, models.window_item, [
            {"decision_id": decision_id, "position": e.position, "item_id": e.item_id,
             "role": e.role, "rendering": e.rendering, "tier": e.tier, "block": e.block,
             "edge_critical": e.edge_critical, "token_count": e.token_count,
             "rendered_text": e.text,
             "shown_start_line": e.shown_lines[0] if e.shown_lines else None,
             "shown_end_line": e.shown_lines[1] if e.shown_lines else None}
            for e in entries
        ])
    models.insert_tuples(connection, models.item_event, EVENT_COLUMNS, audit.rows(decision_id),
                         sparse=("tokens_before", "tokens_after", "detail"))
    steps = attempt.budget_steps
    if steps:
        models.insert_many(connection, models.budget_log, [
            {"decision_id": decision_id, "step_no": s.step_no, "ladder_step": s.ladder_step,
             "item_id": s.item_id, "tokens_before": s.tokens_before,
             "tokens_after": s.tokens_after, "detail": s.detail}
            for s in steps
        ])
    if row.outcome_columns != attempt.outcome_columns:  # decided after the row was written
        token_count, flags = attempt.outcome_columns
        connection.execute(_FINISH_DECISION, {
            "finished_id": decision_id, "token_count": token_count, "flags": flags,
        })
    verdicts = Counter(e.action for e in audit.events if e.is_final)
    return DecisionContext(
        decision_id=decision_id, arm=request.arm, task=attempt.window_task,
        acceptance_criteria=request.plan_node.acceptance_criteria,
        current_obligation=request.plan_node.obligation, window=tuple(entries),
        token_count=attempt.token_count, ceiling=settings.token_ceiling,
        tokenizer=settings.tokenizer, budget_log=tuple(steps),
        flags=tuple(attempt.flags), verdicts=dict(sorted(verdicts.items())),
    )


def _write_ranking(connection: Connection, decision_id: int, attempt: Attempt) -> None:
    """A call that happened is always recorded, with what its answer came to mean."""
    ranking = attempt.ranking
    if ranking is None:
        return
    call_id = connection.execute(_INSERT_RANK_CALL, {
        "decision_id": decision_id, "model": ranking.model,
        "base_url": ranking.base_url,
        "request_json": json.dumps(ranking.request_body, ensure_ascii=False),
        "response_text": ranking.response_text, "parse_status": ranking.status,
        "error": ranking.error, "latency_ms": ranking.latency_ms,
        "prompt_tokens": ranking.prompt_tokens, "completion_tokens": ranking.completion_tokens,
        "created_at": _now(),
    }).scalar_one()
    if attempt.rank_scores:
        models.insert_many(connection, models.rank_score, [
            {"rank_call_id": call_id, "item_id": s.item_id,
             "relevance_score": s.relevance_score, "verdict": s.verdict}
            for s in attempt.rank_scores
        ])
