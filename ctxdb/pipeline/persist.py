"""Every write of a decision, inside its one transaction.

``write_inputs`` writes what the gate view reads (the run if new, the decision row, its
obligation, pool, texts, links, impact edges and nearness) — ``write_preview_inputs``
only what the gate reads of it, for the preview —; ``write_outcome`` writes what
the stages decided (the ranking call and its scores, window rows, the audit events, the
budget log) and finishes the decision row. Any error rolls all of it back.
``window_entries`` makes the window's rows before the write lock is taken: the write
transaction only writes.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime

from sqlalchemy import Connection, bindparam, insert, select, update

from .. import models
from ..context import DecisionContext, WindowEntry
from ..request import RequestError
from ..sqlfiles import sql_statement
from ..tokens import content_sha256
from .audit import EVENT_COLUMNS
from .state import Decision
from .vocabulary import BUDGET, IN_WINDOW, MASKED, SPEC_POLICY_SET

_EVIDENCE_COLUMNS = (
    "decision_id", "item_id", "item_no", "source", "kind", "entity_key", "content_sha256",
    "original_sha256", "provenance", "score", "arrival_no", "path", "start_line", "end_line",
    "signature", "in_pool", "fact_key",
)

# Statements built once: building a Core statement per decision costs more than running it.
_INSERT_DECISION = insert(models.decision).returning(models.decision.c.decision_id)
_INSERT_OBLIGATION = insert(models.obligation)
_INSERT_RANK_CALL = insert(models.rank_call).returning(models.rank_call.c.rank_call_id)
_FINISH_DECISION = update(models.decision).where(
    models.decision.c.decision_id == bindparam("finished_id")
)


class RunArmMismatch(RequestError):
    """A run is one arm of the A/B; a request named the other."""


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def settings_json(settings) -> str:
    """What the run records of the settings its decisions were built with, and which
    config files they came from."""
    return json.dumps(
        {"token_ceiling": settings.token_ceiling, "tokenizer": settings.tokenizer,
         "rank_threshold": settings.rank_threshold, "source": settings.source}, sort_keys=True,
    )


def write_inputs(connection: Connection, store, decision: Decision, *,
                 restart: bool = True, policy_set: str | None = None) -> str | None:
    """The decision row and everything the gate reads; returns the representation policy
    set the decision uses (``policy_set``, from ``sql/stages/decision_policy``, or read
    here when the stages begin afresh without one). ``restart``: the stages' state begun
    afresh for this row; otherwise the state the stages left is kept and only takes this
    row's id."""
    decision_id, new_run = _write_decision_row(connection, store, decision, restart=restart)
    if restart:
        if policy_set is None:
            policy_sets = connection.execute(sql_statement("stages/policy_sets")).scalars().all()
            policy_set = (decision.request.variant if decision.request.variant in policy_sets
                          else SPEC_POLICY_SET)
        decision.begin_write(decision_id, new_run, policy_set)
    else:
        decision.take_row(decision_id, new_run)
    _write_obligation(connection, decision)
    decision.text_digests = _write_pool(connection, store, decision)
    _write_gate_inputs(connection, decision)
    return policy_set


def write_preview_inputs(connection: Connection, store, decision: Decision,
                         policy_set: str) -> None:
    """What the gate view reads, for the preview before the write lock (rolled back),
    the stages begun afresh: the rows ``write_inputs`` writes less those the gate does
    not read — the obligation, and on SQLite the pool's texts (its preview writes TEMP
    copies with no foreign keys; PostgreSQL's writes the store's tables, whose pool rows
    need their texts)."""
    decision_id, new_run = _write_decision_row(connection, store, decision, restart=True)
    decision.begin_write(decision_id, new_run, policy_set)
    decision.text_digests = _write_pool(connection, store, decision,
                                        with_texts=connection.dialect.name != "sqlite")
    _write_gate_inputs(connection, decision)


def _write_decision_row(connection: Connection, store, decision: Decision, *,
                        restart: bool) -> tuple[int, bool]:
    """The run if new and the decision row: (its id, whether the run is new)."""
    request, settings = decision.request, decision.settings
    new_run = _ensure_run(connection, store, decision)
    # Decided already (restart=False): the row is written finished, as an UPDATE would
    # rewrite it whole — the request as given is in it, megabytes for a large pool.
    decision.row_outcome = (None, "") if restart else _outcome_columns(decision)
    decision_id = connection.execute(_INSERT_DECISION, {
        "run_id": request.run_id, "instance_id": request.instance_id, "seq": request.seq,
        "decision_type": request.decision_type, "task_text": request.task,
        "decision_question": request.plan_node.decision_question,
        "request_json": decision.request_json, "request_sha256": decision.request_sha256,
        "tokenizer": settings.tokenizer, "token_ceiling": settings.token_ceiling,
        "token_count": decision.row_outcome[0], "flags": decision.row_outcome[1],
        "created_at": _now(),
    }).scalar_one()
    return decision_id, new_run


def _ensure_run(connection: Connection, store, decision: Decision) -> bool:
    """Create the run if it is new (True) and check an existing one's arm and variant."""
    request = decision.request
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


def _check_arm(request, arm: str, variant: str) -> None:
    if (arm, variant) != (request.arm, request.variant):
        raise RunArmMismatch(
            f"request.arm/variant: run {request.run_id!r} is arm {arm!r} variant "
            f"{variant!r}; expected the same, got {request.arm!r}/{request.variant!r}"
        )


def _write_obligation(connection: Connection, decision: Decision) -> None:
    node = decision.request.plan_node
    point = node.insertion_point
    connection.execute(_INSERT_OBLIGATION, {
        "decision_id": decision.decision_id, "obligation_no": 1, "source": "07",
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


def _write_pool(connection: Connection, store, decision: Decision, *,
                with_texts: bool = True) -> set[str]:
    """The pool rows, each distinct text once by hash (``with_texts``); returns the
    digests it refers to."""
    decision_id = decision.decision_id
    texts = {}  # sha256 -> text: each distinct text once, kept if the store has it already
    rows = []
    for i in decision.pool:
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
    if with_texts:
        models.insert_tuples(connection, models.evidence_text, ("content_sha256", "content"),
                             [row for row in sorted(texts.items())
                              if row[0] not in store.texts_stored],
                             keep_existing=True)
    models.insert_tuples(connection, models.evidence_item, _EVIDENCE_COLUMNS, rows,
                         sparse=("original_sha256", "arrival_no"))
    return set(texts)


def _write_gate_inputs(connection: Connection, decision: Decision) -> None:
    decision_id = decision.decision_id
    if decision.links:
        models.insert_many(connection, models.decision_link, [
            {"decision_id": decision_id, "link_no": n, "link_kind": link.link_kind,
             "entity_key": link.entity_key, "path": link.path, "start_line": link.start_line,
             "end_line": link.end_line, "detail": link.detail}
            for n, link in enumerate(decision.links, start=1)
        ])
    if decision.edges:
        models.insert_many(connection, models.impact_edge, [
            {"decision_id": decision_id, "edge_no": n, "head_entity": e.head,
             "tail_entity": e.tail, "edge_kind": e.kind, "depth": e.depth, "origin": e.origin}
            for n, e in enumerate(decision.edges, start=1)
        ])
    if decision.nearness:
        models.insert_many(connection, models.item_nearness, [
            {"decision_id": decision_id, "item_id": item_id,
             "shared_terms": " ".join(n.shared_terms), "recon_hops": n.recon_hops,
             "nearest_link_no": n.nearest_link_no, "near_score": n.near_score}
            for item_id, n in sorted(decision.nearness.items(), key=lambda kv: int(kv[0][1:]))
        ])


def window_entries(decision: Decision) -> list[WindowEntry]:
    """The window's rows, each candidate's final verdict in the audit: once per run of
    the stages, before the write transaction."""
    entries = []
    for position, candidate in enumerate(decision.candidates, start=1):
        decision.audit.final(candidate.item_id, BUDGET,
                             MASKED if candidate.masked else IN_WINDOW, candidate.driver,
                             tokens_after=candidate.tokens,
                             detail=f"position {position}, {candidate.block}")
        entries.append(WindowEntry(
            position, candidate.item_id, candidate.role, candidate.rendering, candidate.tier,
            candidate.block, candidate.edge_critical, candidate.tokens, candidate.block_text(),
            candidate.body_lines(),
        ))
    return entries


def write_outcome(connection: Connection, decision: Decision,
                  entries: list[WindowEntry]) -> DecisionContext:
    """The stages' verdicts, the window (``window_entries``) and the audit; returns the
    context to send. Writes only: it may run again if PostgreSQL retries the transaction."""
    decision_id, audit, request = decision.decision_id, decision.audit, decision.request
    _write_ranking(connection, decision)
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
    steps = decision.budget_steps
    if steps:
        models.insert_many(connection, models.budget_log, [
            {"decision_id": decision_id, "step_no": s.step_no, "ladder_step": s.ladder_step,
             "item_id": s.item_id, "tokens_before": s.tokens_before,
             "tokens_after": s.tokens_after, "detail": s.detail}
            for s in steps
        ])
    if decision.row_outcome != _outcome_columns(decision):  # decided in this transaction
        token_count, flags = _outcome_columns(decision)
        connection.execute(_FINISH_DECISION, {
            "finished_id": decision_id, "token_count": token_count, "flags": flags,
        })
    verdicts = Counter(e.action for e in audit.events if e.is_final)
    return DecisionContext(
        decision_id=decision_id, arm=request.arm, task=decision.window_task,
        acceptance_criteria=request.plan_node.acceptance_criteria,
        current_obligation=request.plan_node.obligation, window=tuple(entries),
        token_count=decision.token_count, ceiling=decision.settings.token_ceiling,
        tokenizer=decision.settings.tokenizer, budget_log=tuple(steps),
        flags=tuple(decision.flags), verdicts=dict(sorted(verdicts.items())),
    )


def _outcome_columns(decision: Decision) -> tuple[int, str]:
    """decision.token_count and .flags as the row holds them."""
    return decision.token_count, ",".join(decision.flags)


def _write_ranking(connection: Connection, decision: Decision) -> None:
    """A call that happened is always recorded, with what its answer came to mean."""
    ranking = decision.ranking
    if ranking is None:
        return
    call_id = connection.execute(_INSERT_RANK_CALL, {
        "decision_id": decision.decision_id, "model": ranking.model,
        "base_url": ranking.base_url,
        "request_json": json.dumps(ranking.request_body, ensure_ascii=False),
        "response_text": ranking.response_text, "parse_status": ranking.status,
        "error": ranking.error, "latency_ms": ranking.latency_ms,
        "prompt_tokens": ranking.prompt_tokens, "completion_tokens": ranking.completion_tokens,
        "created_at": _now(),
    }).scalar_one()
    if decision.rank_scores:
        models.insert_many(connection, models.rank_score, [
            {"rank_call_id": call_id, "item_id": s.item_id,
             "relevance_score": s.relevance_score, "verdict": s.verdict}
            for s in decision.rank_scores
        ])
