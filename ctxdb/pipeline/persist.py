"""Every write of a decision, inside its one transaction.

``write_inputs`` writes the decision's inputs (``DecisionInput``: the run if new, the
decision row, its obligation, pool, texts, links, impact edges and nearness; on SQLite
the pool and what follows it copied from the preview's TEMP tables when the preview
kept them) and returns the row it wrote (``DecisionRow``); ``write_preview_inputs``
writes only what the gate reads of them, for the preview (``KeptPreview``);
``write_outcome`` writes what an ``Attempt`` decided
(the ranking call and its scores, window rows, the audit events, the budget log) and
finishes the decision row. They read the decision's state and never change it. Any
error rolls all of it back.
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NamedTuple, cast

from sqlalchemy import Connection, Table, bindparam, insert, select, update

from .. import models
from ..config import Settings
from ..context import DecisionContext, WindowEntry
from ..request import DecisionRequest, RequestError
from ..tokens import content_sha256
from .audit import EVENT_COLUMNS
from .state import Attempt, DecisionInput, KeptPreview

if TYPE_CHECKING:
    from ..store import ContextStore

_EVIDENCE_COLUMNS = (
    "decision_id", "item_id", "item_no", "source", "kind", "entity_key", "content_sha256",
    "original_sha256", "provenance", "score", "arrival_no", "path", "start_line", "end_line",
    "signature", "in_pool", "fact_key",
)
# evidence_item's columns that are NULL for most rows (models.insert_tuples)
_EVIDENCE_SPARSE = ("original_sha256", "arrival_no")
_LINK_COLUMNS = ("decision_id", "link_no", "link_kind", "entity_key", "path", "start_line",
                 "end_line", "detail")
_EDGE_COLUMNS = ("decision_id", "edge_no", "head_entity", "tail_entity", "edge_kind", "depth",
                 "origin")
# shown lines: only an item shown in part has them
_WINDOW_COLUMNS = ("decision_id", "position", "item_id", "role", "rendering", "tier", "block",
                   "edge_critical", "token_count", "rendered_sha256", "shown_start_line",
                   "shown_end_line")
# recon_hops: NULL for an item near by its shared terms alone, most of them
_NEARNESS_COLUMNS = ("decision_id", "item_id", "shared_terms", "recon_hops",
                     "nearest_link_no", "near_score")

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
    """What the run records of the settings its decisions were built with, which config
    files they came from, and which ctxdb built them (its version: a store outlives
    the code that filled it)."""
    from .. import __version__

    return json.dumps(
        {"token_ceiling": settings.token_ceiling, "tokenizer": settings.tokenizer,
         "rank_threshold": settings.rank_threshold, "source": settings.source,
         "ctxdb_version": __version__}, sort_keys=True,
    )


class DecisionRow(NamedTuple):
    """What writing a decision's inputs made: its row, and what the rest of the write and
    the store take from it."""

    decision_id: int
    new_run: bool  # this decision started its run
    text_digests: set[str]  # the evidence_text rows the pool and the window refer to
    outcome_columns: tuple[int | None, str]  # token_count and flags the row was given
    # the window whose texts were written with the pool's, and those texts by digest
    window_entries: list[WindowEntry]
    window_texts: dict[str, str]


NOT_DECIDED = (None, "")  # a row written before its stages ran (the preview's)


def write_inputs(connection: Connection, store: ContextStore,
                 attempt: Attempt) -> DecisionRow:
    """The decision row and everything the gate reads, for the attempt that decided it:
    the row is written finished, with the attempt's token count and flags (an UPDATE
    would rewrite it whole — the request as given is in it, megabytes for a large
    pool). The pool, links, impact edges and nearness are copied from the preview's rows
    when it kept them on this connection (``attempt.kept_preview``), else written."""
    inputs = attempt.inputs
    decision_id, new_run = _write_decision_row(connection, store, inputs,
                                               attempt.outcome_columns)
    _write_obligation(connection, decision_id, inputs.request)
    # the window's texts too, in the same sorted insert (write_outcome adds a window
    # decided again in this transaction)
    shown = window_texts(attempt.entries)
    others = attempt.request_texts | shown
    kept = attempt.kept_preview
    if kept is None:
        texts = _write_pool(connection, store, decision_id, inputs, others)
        _write_gate_inputs(connection, decision_id, inputs)
    else:
        texts = kept.texts
        _write_texts(connection, store, texts | others)
        _copy_preview_rows(connection, kept.decision_id, decision_id, inputs)
    return DecisionRow(decision_id, new_run, set(texts) | set(others),
                       attempt.outcome_columns, attempt.entries, shown)


def window_texts(entries: list[WindowEntry]) -> dict[str, str]:
    """The texts a window's items add, by digest: each stored once in evidence_text, as a
    loop's windows repeat most of theirs decision after decision."""
    return {content_sha256(e.text): e.text for e in entries}


def write_preview_inputs(connection: Connection, store: ContextStore,
                         inputs: DecisionInput) -> KeptPreview:
    """What the gate view reads, for the preview before the write lock: the rows
    ``write_inputs`` writes less the obligation and the texts. On SQLite into the
    preview's TEMP tables (``models.PREVIEW_TABLES``: nothing of the store is written),
    the pool's rows whole — the write may copy them — and the decision row as far as the
    view reads it; on PostgreSQL into the store's tables (rolled back), whose pool rows
    need their texts. Returns the preview's decision id and the texts its pool refers
    to."""
    if connection.dialect.name != "sqlite":
        decision_id, _new_run = _write_decision_row(connection, store, inputs, NOT_DECIDED)
        texts = _write_pool(connection, store, decision_id, inputs)
        _write_gate_inputs(connection, decision_id, inputs)
        return KeptPreview(decision_id, texts)
    request = inputs.request
    known = store.runs_seen.get(request.run_id)
    if known is not None:  # a new run's arm is checked by the write, which makes the run
        _check_arm(request, *known)
    decision_id = cast(int, models.insert_row(
        connection, models.preview_decision, {"decision_type": request.decision_type},
        returning=models.preview_decision.c.decision_id))
    rows, texts = _pool_rows(decision_id, inputs, int)  # SQLite: models.flag_type
    models.insert_tuples(connection, models.preview_evidence_item, _EVIDENCE_COLUMNS, rows,
                         sparse=_EVIDENCE_SPARSE)
    _write_gate_inputs(connection, decision_id, inputs, models.PREVIEW_TABLES)
    return KeptPreview(decision_id, texts)


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
            f"{variant!r}; expected the same, got {request.arm!r}/{request.variant!r} (a run "
            "is one arm: give this one its own run_id, the request's run_id field, or "
            "another store)"
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


def _pool_rows(decision_id: int, inputs: DecisionInput, flag: type[int] | type[bool]
               ) -> tuple[list[tuple[object, ...]], dict[str, str]]:
    """The pool's evidence_item rows (``_EVIDENCE_COLUMNS``; ``in_pool`` as ``flag``
    makes it, ``models.flag_type``) and the texts they refer to, each distinct once by
    hash."""
    texts: dict[str, str] = {}  # sha256 -> text
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
            i.end_line, i.signature, flag(i.in_pool), i.fact_key,
        ))
    return rows, texts


def _write_texts(connection: Connection, store: ContextStore, texts: dict[str, str]) -> None:
    """The texts the store may not hold yet."""
    # In digest order: two PostgreSQL writers inserting the same texts in different
    # orders could each wait on the other's.
    stored = store.texts_stored
    models.insert_tuples(connection, models.evidence_text, ("content_sha256", "content"),
                         # only the new ones sorted: a warm pool's are all stored
                         sorted(row for row in texts.items() if row[0] not in stored),
                         keep_existing=True)


def _write_pool(connection: Connection, store: ContextStore, decision_id: int,
                inputs: DecisionInput, request_texts: dict[str, str] | None = None
                ) -> dict[str, str]:
    """The pool rows, each distinct text once by hash, with the texts the request names
    (in one sorted insert); returns the texts the pool refers to, by digest."""
    rows, texts = _pool_rows(decision_id, inputs, models.flag_type(connection))
    _write_texts(connection, store, texts | (request_texts or {}))
    models.insert_tuples(connection, models.evidence_item, _EVIDENCE_COLUMNS, rows,
                         sparse=_EVIDENCE_SPARSE)
    return texts


@functools.cache
def _copy_statement(table: Table) -> str:
    """``table``'s rows of one preview decision (the second parameter) copied from the
    preview's TEMP copy as the rows of another (the first): names from the definitions,
    values as parameters."""
    copy = models.PREVIEW_TABLES[table]
    columns = [c.name for c in copy.columns]
    if columns[0] != "decision_id":
        raise ValueError(f"table {copy.name}: decision_id must come first")
    return (f"INSERT INTO {table.name} ({', '.join(columns)})"
            f" SELECT ?, {', '.join(columns[1:])} FROM {copy.name} WHERE decision_id = ?"
            # in the order the preview wrote them, as binding them again would
            f" ORDER BY {copy.name}.rowid")


@functools.cache
def _empty_statement(table: Table) -> str:
    return f"DELETE FROM {models.PREVIEW_TABLES[table].name}"


def _copy_preview_rows(connection: Connection, preview_id: int, decision_id: int,
                       inputs: DecisionInput) -> None:
    """The pool, links, impact edges and nearness of the preview ``preview_id`` (kept on
    this connection: SQLite) as the rows of ``decision_id``, one statement a table, then
    the preview's tables emptied — in this transaction: a write that fails leaves them
    as they were."""
    copied = [models.evidence_item]
    if inputs.links:
        copied.append(models.decision_link)
    if inputs.edges:
        copied.append(models.impact_edge)
    if inputs.nearness:
        copied.append(models.item_nearness)
    for table in copied:
        models.execute_driver(connection, _copy_statement(table), (decision_id, preview_id))
    for table in (models.decision, *copied):
        models.execute_driver(connection, _empty_statement(table), ())


def _write_gate_inputs(connection: Connection, decision_id: int, inputs: DecisionInput,
                       tables: Mapping[Table, Table] | None = None) -> None:
    """The links, impact edges and nearness; into ``tables``' copy of each store table
    when given (the preview's)."""
    def into(table: Table) -> Table:
        return table if tables is None else tables[table]

    # rows as tuples in the columns' order: a dict a row costs more than binding it
    if inputs.links:
        models.insert_tuples(connection, into(models.decision_link), _LINK_COLUMNS, [
            (decision_id, n, link.link_kind, link.entity_key, link.path, link.start_line,
             link.end_line, link.detail)
            for n, link in enumerate(inputs.links, start=1)
        ])
    if inputs.edges:
        models.insert_tuples(connection, into(models.impact_edge), _EDGE_COLUMNS, [
            (decision_id, n, e.head, e.tail, e.kind, e.depth, e.origin)
            for n, e in enumerate(inputs.edges, start=1)
        ])
    if inputs.nearness:
        models.insert_tuples(connection, into(models.item_nearness), _NEARNESS_COLUMNS, [
            (decision_id, item_id, " ".join(n.shared_terms), n.recon_hops, n.nearest_link_no,
             n.near_score)
            for item_id, n in sorted(inputs.nearness.items(), key=lambda kv: int(kv[0][1:]))
        ], sparse=("recon_hops",))


def write_outcome(connection: Connection, store: ContextStore, row: DecisionRow,
                  attempt: Attempt) -> DecisionContext:
    """What ``attempt`` decided for the decision ``row``: the ranking call, the window
    (``attempt.entries``) and the audit; finishes the row when it was written before the
    attempt decided. Returns the context to send. Writes only: it may run again if
    PostgreSQL retries the transaction."""
    decision_id, audit, entries = row.decision_id, attempt.audit, attempt.entries
    inputs = attempt.inputs
    request, settings = inputs.request, inputs.settings
    _write_ranking(connection, decision_id, attempt)
    flag = models.flag_type(connection)
    if entries:
        texts = row.window_texts if entries is row.window_entries else window_texts(entries)
        # a window decided again after write_inputs (another session changed the policy
        # rows meanwhile: rare): its new texts in a second sorted insert — two PostgreSQL
        # writers may then wait on each other, which the write's retry undoes — and the
        # preview window's texts stay, referred to by nothing (texts are never deleted)
        if not row.text_digests.issuperset(texts):
            _write_texts(connection, store,
                         {h: t for h, t in texts.items() if h not in row.text_digests})
            row.text_digests.update(texts)
        digest_of = {t: h for h, t in texts.items()}
        models.insert_tuples(connection, models.window_item, _WINDOW_COLUMNS, [
            (decision_id, e.position, e.item_id, e.role, e.rendering, e.tier, e.block,
             flag(e.edge_critical), e.token_count, digest_of[e.text],
             e.shown_lines[0] if e.shown_lines else None,
             e.shown_lines[1] if e.shown_lines else None)
            for e in entries
        ], sparse=("shown_start_line", "shown_end_line"))
    models.insert_tuples(connection, models.item_event, EVENT_COLUMNS,
                         audit.rows(decision_id, flag),
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
        decision_type=request.decision_type,
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
