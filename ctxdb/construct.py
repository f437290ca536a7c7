"""One decision, end to end, in one transaction (DESIGN.md "One decision, end to end").

(a) assemble → write the pool and the gate's inputs → (b) gate (SQL view) →
(c) render → (d) compress → (e) dedup → (f) order → (g) budget → window rows.
Any error rolls the whole decision back: nothing of it is written.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone

from sqlalchemy import Connection, bindparam, insert, select, update

from . import models
from .assemble import PoolItem, apply_pool_cap, assemble_pool
from .audit import EVENT_COLUMNS, AuditLog
from .budget import Budgeter, render_window
from .candidate import Candidate
from .compress import compress
from .context import DecisionContext, WindowEntry
from .dedup import dedup, fact_key
from .facts import DecisionFacts
from .gate import ADMIT, OUT_OF_POOL, RESIDUAL, cap_admitted, gate_decision
from .links import (
    DIGEST_KEY_SUFFIX,
    Link,
    Nearness,
    ReconSql,
    compute_links,
    compute_nearness,
    derive_impact,
    impact_digest,
)
from .order import order
from .rank import RESIDUE_CHANGED, ResidueCandidate, announce_unavailable, rank_residue
from .render import load_policy, render, signature_of
from .request import DecisionRequest, RequestError, has_nul, without_nul
from .spec import RESIDUE_MAX
from .sqlfiles import sql_statement
from .tokens import content_sha256, count_cached
from .ab.variants import LITM_BURIED, NO_IMPACT_DIGEST

SPEC_POLICY_SET = "spec"


@dataclass
class _Outcome:
    window: list[Candidate]
    token_count: int
    window_task: str  # the task as the window shows it (cut only in a pathological case)
    steps: list = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    masked: frozenset[str] = frozenset()


class RunArmMismatch(RequestError):
    """A run is one arm of the A/B; a request named the other."""


_EVIDENCE_COLUMNS = (
    "decision_id", "item_id", "item_no", "source", "kind", "entity_key", "content_sha256",
    "original_sha256", "provenance", "score", "arrival_no", "path", "start_line", "end_line",
    "signature", "in_pool", "fact_key",
)


# Statements built once: building a Core statement per decision costs more than running it.
_INSERT_DECISION = insert(models.decision).returning(models.decision.c.decision_id)
_INSERT_OBLIGATION = insert(models.obligation)
_FINISH_DECISION = update(models.decision).where(
    models.decision.c.decision_id == bindparam("finished_id")
)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _ensure_run(connection: Connection, store, request: DecisionRequest,
                settings_json: str) -> bool:
    """Create the run if it is new (True) and check an existing one's arm and variant."""
    known = store.runs_seen.get(request.run_id)
    if known is not None:  # runs are never deleted: what this store saw committed stays
        _check_arm(request, *known)
        return False
    # Insert-if-absent, then read back: many workers may start the same run at once.
    inserted = connection.execute(
        models.insert_ignoring_duplicates(connection, models.run).values(
            run_id=request.run_id, arm=request.arm, variant=request.variant,
            created_at=_now(), settings_json=settings_json,
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


def _digest_item(request: DecisionRequest, edges, item_no: int) -> PoolItem | None:
    target = request.plan_node.target_entity
    if not target or not any(e[0] == target and e[3] > 1 for e in edges):
        return None
    return PoolItem(
        item_no=item_no, source="06", kind="graph_edge",
        content=impact_digest(target, edges),
        provenance=f"06: digest of the transitive impact of {target}"[:200],
        entity_key=target + DIGEST_KEY_SUFFIX,
    )


def construct(store, request: DecisionRequest | dict | str) -> DecisionContext:
    if isinstance(request, (str, bytes)):
        request = DecisionRequest.from_json(request)
    elif isinstance(request, dict):
        request = DecisionRequest.from_dict(request)
    elif isinstance(request, DecisionRequest):
        request.check()
    else:
        raise RequestError(
            f"request: expected a DecisionRequest, a dict or JSON text, got {type(request).__name__}"
        )
    request_json = request.to_json()  # as given: JSON escapes NUL as \u0000
    flags = []
    # JSON writes NUL as \u0000: only then walk the request (the walk costs ~7 ms at 256 items).
    if "\\u0000" in request_json and has_nul(request):
        request = without_nul(request)
        flags.append("nul_replaced")
    settings = store.settings
    settings_json = json.dumps(
        {"token_ceiling": settings.token_ceiling, "tokenizer": settings.tokenizer,
         "rank_threshold": settings.rank_threshold}, sort_keys=True,
    )
    ranking = None
    if request.arm == "ctx08" and settings.rank_base_url:
        # Find the residue in a transaction that is rolled back, then make the ONE call
        # with no transaction open: the write lock is never held across the network.
        with store.preview_transaction() as connection, store.recon_connection(connection) as rc:
            prepared = _prepare(connection, rc, store, request, request_json, settings,
                                settings_json)
            residue = _residue_candidates(connection, prepared)
        if 1 <= len(residue) <= RESIDUE_MAX:
            node = request.plan_node
            ranking = rank_residue(settings, node.obligation, node.acceptance_criteria,
                                   node.decision_question, residue)
    with store.write_transaction() as connection, store.recon_connection(connection) as rc:
        prepared = _prepare(connection, rc, store, request, request_json, settings,
                            settings_json)
        context = _construct(connection, prepared, request, settings, ranking, flags)
    store.runs_seen[request.run_id] = (request.arm, request.variant)  # committed
    store.remember_texts(prepared.text_digests)  # committed too
    if request.arm == "ctx08" and not settings.rank_base_url and prepared.new_run:
        announce_unavailable(store.url, request.run_id)  # once per run, when it starts
    return context


@dataclass
class _Prepared:
    decision_id: int
    pool: list[PoolItem]
    audit: AuditLog
    facts: DecisionFacts
    new_run: bool  # this decision started its run
    text_digests: set[str]  # the evidence_text rows the decision refers to
    links: list[Link]  # as written to decision_link (link_no = position + 1)
    nearness: dict[str, Nearness]  # as written to item_nearness


def _residue_candidates(connection, prepared: _Prepared) -> list[ResidueCandidate]:
    by_id = {item.item_id: item for item in prepared.pool}
    rows = connection.execute(
        sql_statement("stages/residue_of_decision"), {"decision_id": prepared.decision_id}
    ).all()
    return [
        ResidueCandidate(row.item_id, row.kind,
                         signature_of(Candidate(item=by_id[row.item_id], driver="residual")))
        for row in rows
    ]


def _prepare(connection, recon_connection, store, request, request_json, settings,
             settings_json) -> _Prepared:
    """(a) assembly and the gate's inputs, written as the decision's own rows."""
    new_run = _ensure_run(connection, store, request, settings_json)
    recon = ReconSql(recon_connection) if store.recon_available else None
    pool = assemble_pool(request, recon)
    links = compute_links(request, pool, recon)

    given_edges = [(e.head, e.tail, e.kind, e.depth, "06") for e in request.impact_edges]
    derived = derive_impact(links, recon) if (request.derive_impact and recon) else []
    edges = given_edges + [(e.head, e.tail, e.kind, e.depth, "recon") for e in derived]
    digest = None
    if request.variant != NO_IMPACT_DIGEST:
        digest = _digest_item(request, edges, len(pool) + 1)
    if digest is not None:
        pool.append(digest)
        apply_pool_cap(pool)  # the digest counts against the 256 like any item
        links.append(Link("impact_digest", digest.entity_key, None, None, None, "06 digest"))
    nearness = compute_nearness(request, pool, links, recon)
    if recon is not None:
        recon.confirm_snapshot()

    request_sha256 = hashlib.sha256(request_json.encode("utf-8")).hexdigest()
    decision_id = connection.execute(_INSERT_DECISION, {
        "run_id": request.run_id, "instance_id": request.instance_id, "seq": request.seq,
        "decision_type": request.decision_type, "task_text": request.task,
        "decision_question": request.plan_node.decision_question,
        "request_json": request_json, "request_sha256": request_sha256,
        "tokenizer": settings.tokenizer, "token_ceiling": settings.token_ceiling,
        "created_at": _now(),
    }).scalar_one()
    text_digests = _write_inputs(connection, store, decision_id, request, pool, links, edges,
                                 nearness)

    audit = AuditLog()
    for item in pool:
        for event in item.events:
            if event.is_final:
                audit.final(item.item_id, "assemble", event.action, event.driver, detail=event.detail)
            else:
                audit.add(item.item_id, "assemble", event.action, event.driver, detail=event.detail)
    policy_sets = connection.execute(sql_statement("stages/policy_sets")).scalars().all()
    policy_set = request.variant if request.variant in policy_sets else SPEC_POLICY_SET
    facts = DecisionFacts.from_request(decision_id, request, request_sha256, policy_set)
    return _Prepared(decision_id, pool, audit, facts, new_run, text_digests, links, nearness)


def _construct(connection, prepared: _Prepared, request, settings, ranking,
               flags) -> DecisionContext:
    decision_id, pool, audit = prepared.decision_id, prepared.pool, prepared.audit
    count = lambda texts: count_cached(connection, settings.tokenizer, texts)  # noqa: E731
    if request.arm == "current":
        outcome = _baseline(pool, request, audit, count)
    else:
        outcome = _pipeline(connection, prepared, request, settings, ranking, count)
    outcome.flags = flags + outcome.flags
    return _persist(connection, decision_id, request, outcome, audit, settings)


def _write_inputs(connection, store, decision_id, request, pool, links, edges,
                  nearness) -> set[str]:
    """The decision's inputs as its own rows; returns the digests of its texts."""
    node = request.plan_node
    point = node.insertion_point
    connection.execute(_INSERT_OBLIGATION, {
        "decision_id": decision_id, "obligation_no": 1, "source": "07",
        "node_id": node.node_id, "obligation_text": node.obligation,
        "target_entity": node.target_entity,
        "preconditions_json": json.dumps(list(node.preconditions)),
        "required_validation_json": json.dumps(list(node.required_validation)),
        "acceptance_criteria_json": json.dumps(list(node.acceptance_criteria)),
        "insertion_path": point.path if point else None,
        "insertion_line": point.line if point else None,
    })
    texts = {}  # sha256 -> text: each distinct text once, kept if the store has it already
    rows = []
    for i in pool:
        digest = content_sha256(i.content)
        texts[digest] = i.content
        original_sha256 = None
        if i.original_content is not None:
            original_sha256 = content_sha256(i.original_content)
            texts[original_sha256] = i.original_content
        rows.append((
            decision_id, i.item_id, i.item_no, i.source, i.kind, i.entity_key, digest,
            original_sha256, i.provenance, i.score, i.arrival_no, i.path, i.start_line,
            i.end_line, i.signature, i.in_pool, fact_key(i.kind, i.entity_key, i.content, i.item_id),
        ))
    models.insert_tuples(connection, models.evidence_text, ("content_sha256", "content"),
                         [row for row in texts.items() if row[0] not in store.texts_stored],
                         keep_existing=True)
    models.insert_tuples(connection, models.evidence_item, _EVIDENCE_COLUMNS, rows,
                         sparse=("original_sha256", "arrival_no"))
    if links:
        models.insert_many(connection, models.decision_link, [
            {"decision_id": decision_id, "link_no": n, "link_kind": link.link_kind,
             "entity_key": link.entity_key, "path": link.path, "start_line": link.start_line,
             "end_line": link.end_line, "detail": link.detail}
            for n, link in enumerate(links, start=1)
        ])
    if edges:
        models.insert_many(connection, models.impact_edge, [
            {"decision_id": decision_id, "edge_no": n, "head_entity": h, "tail_entity": t,
             "edge_kind": k, "depth": d, "origin": o}
            for n, (h, t, k, d, o) in enumerate(edges, start=1)
        ])
    if nearness:
        models.insert_many(connection, models.item_nearness, [
            {"decision_id": decision_id, "item_id": item_id,
             "shared_terms": " ".join(n.shared_terms), "recon_hops": n.recon_hops,
             "nearest_link_no": n.nearest_link_no}
            for item_id, n in sorted(nearness.items(), key=lambda kv: int(kv[0][1:]))
        ])
    return set(texts)


def _baseline(pool, request, audit, count):
    """Spec §7 "stuff everything": the whole pool, verbatim, in pool order; no gate, no budget."""
    window = []
    for item in pool:
        if audit.verdict(item.item_id):
            continue  # out of the pool (the 256 cap is assembly's, both arms)
        candidate = Candidate(item=item, driver="baseline:no_gate", role="baseline",
                              rendering="verbatim", text=item.content, tier="working_set",
                              block="middle")
        window.append(candidate)
    counts = count([c.block_text() for c in window])
    for candidate, tokens in zip(window, counts):
        candidate.tokens = tokens
    token_count = count([render_window(request.task, window)])[0]
    return _Outcome(window, token_count, request.task)


def _pipeline(connection, prepared, request, settings, ranking, count):
    decision_id, pool, audit, facts = (
        prepared.decision_id, prepared.pool, prepared.audit, prepared.facts
    )
    by_id = {item.item_id: item for item in pool}
    admitted: list[Candidate] = []
    residual: list[str] = []
    priority: dict[str, int] = {}
    for row in gate_decision(connection, decision_id):
        priority[row.item_id] = row.priority
        if row.gate_verdict == OUT_OF_POOL:
            continue  # already final at assembly
        if row.gate_verdict == ADMIT:
            audit.add(row.item_id, "gate", "admitted", row.driver)
            admitted.append(Candidate(item=by_id[row.item_id], driver=row.driver))
        elif row.gate_verdict == RESIDUAL:
            audit.add(row.item_id, "gate", "residual", row.driver)
            residual.append(row.item_id)
        else:
            audit.final(row.item_id, "gate", "rejected", row.driver)
    admitted += _resolve_residue(connection, prepared, residual, settings, ranking)
    admitted = cap_admitted(admitted, audit, priority)

    policy = load_policy(connection, facts.policy_set)
    candidates = render(admitted, facts, policy, audit)
    compress(candidates, facts, audit)
    fact_keys = {c.item_id: fact_key(c.item.kind, c.item.entity_key, c.item.content, c.item_id)
                 for c in candidates}
    candidates = dedup(candidates, fact_keys, audit)
    ordered = order(candidates, audit, bury_critical=request.variant == LITM_BURIED)
    budgeter = Budgeter(request.task, settings.token_ceiling, count, facts, audit)
    window, token_count = budgeter.fit(ordered)
    return _Outcome(window, token_count, budgeter.task, budgeter.steps, budgeter.flags,
                    frozenset(budgeter.masked))


def _resolve_residue(connection, prepared, residual, settings, ranking) -> list[Candidate]:
    """§4: rank a residue of 1..32, fold a larger one, reject it when ranking is off."""
    audit, by_id = prepared.audit, {item.item_id: item for item in prepared.pool}
    call_id = None
    if ranking is not None:
        # A call that happened is always recorded, with what its answer came to mean.
        ranked = json.loads(ranking.request_body["messages"][1]["content"])["residue"]
        if [c["id"] for c in ranked] != residual:
            ranking.status = RESIDUE_CHANGED
            ranking.error = "the residue at write time differs from the one ranked"
        call_id = _write_rank_call(connection, prepared.decision_id, ranking)
    if not residual:
        return []
    if len(residual) > RESIDUE_MAX:
        return _fold(prepared, by_id, residual)
    if ranking is None:
        reason = ("ranker_unavailable" if not settings.rank_base_url
                  else "rank_not_called: the residue appeared after the call was prepared")
        for item_id in residual:
            audit.final(item_id, "rank", "rejected", reason)
        return []
    admitted, scores = [], []
    for item_id in residual:
        score = ranking.scores.get(item_id) if ranking.ok else None
        if not ranking.ok:
            verdict, reason = "reject", f"rank_failed: {ranking.status}"
        elif score is None:
            verdict, reason = "reject", "rank: not scored by the model"
        elif score >= settings.rank_threshold:
            verdict, reason = "admit", f"rank: score {score:.2f} >= {settings.rank_threshold}"
        else:
            verdict, reason = "reject", f"rank: score {score:.2f} < {settings.rank_threshold}"
        scores.append({"rank_call_id": call_id, "item_id": item_id, "relevance_score": score,
                       "verdict": verdict})
        if verdict == "admit":
            audit.add(item_id, "rank", "admitted", reason)
            admitted.append(Candidate(item=by_id[item_id], driver="rank:admitted"))
        else:
            audit.final(item_id, "rank", "rejected", reason)
    models.insert_many(connection, models.rank_score, scores)
    return admitted


def _write_rank_call(connection, decision_id, ranking) -> int:
    return connection.execute(
        insert(models.rank_call).values(
            decision_id=decision_id, model=ranking.model, base_url=ranking.base_url,
            request_json=json.dumps(ranking.request_body, ensure_ascii=False),
            response_text=ranking.response_text, parse_status=ranking.status,
            error=ranking.error, latency_ms=ranking.latency_ms,
            prompt_tokens=ranking.prompt_tokens, completion_tokens=ranking.completion_tokens,
            created_at=_now(),
        ).returning(models.rank_call.c.rank_call_id)
    ).scalar_one()


def _fold(prepared, by_id, residual) -> list[Candidate]:
    """A residue over 32 is not ranked (§4): each item goes to the obligation bucket it
    is nearest to, and is admitted under that link's driver only if it is a direct
    recon neighbour of the linked symbol; otherwise it is folded away, or rejected
    outright when no bucket is near it."""
    # The decision's item_nearness and decision_link rows, as written moments ago
    # (sql/stages/nearness_of_decision.sql reads the same from the store).
    audit, links = prepared.audit, prepared.links
    admitted = []
    for item_id in residual:
        near = prepared.nearness[item_id]
        if near.nearest_link_no is None:
            audit.final(item_id, "rank", "rejected",
                        f"residue > {RESIDUE_MAX}: no obligation bucket to fold into")
            continue
        link = links[near.nearest_link_no - 1]
        bucket = f"link {near.nearest_link_no} ({link.link_kind} {link.entity_key})"
        if near.recon_hops == 1:
            audit.add(item_id, "rank", "folded_in", f"residue > {RESIDUE_MAX}: {bucket}")
            admitted.append(Candidate(item=by_id[item_id], driver=f"fold:{link.link_kind}"))
        else:
            audit.final(item_id, "rank", "folded",
                        f"residue > {RESIDUE_MAX}: {bucket}, not a direct neighbour")
    return admitted


def _persist(connection, decision_id, request, outcome, audit, settings):
    window, token_count, steps, flags = (
        outcome.window, outcome.token_count, outcome.steps, outcome.flags
    )
    entries = []
    for position, candidate in enumerate(window, start=1):
        verdict = "masked" if candidate.item_id in outcome.masked else "in_window"
        audit.final(candidate.item_id, "budget", verdict, candidate.driver,
                    tokens_after=candidate.tokens, detail=f"position {position}, {candidate.block}")
        entries.append(WindowEntry(
            position, candidate.item_id, candidate.role, candidate.rendering, candidate.tier,
            candidate.block, candidate.edge_critical, candidate.tokens, candidate.block_text(),
        ))
    if entries:
        models.insert_many(connection, models.window_item, [
            {"decision_id": decision_id, "position": e.position, "item_id": e.item_id,
             "role": e.role, "rendering": e.rendering, "tier": e.tier, "block": e.block,
             "edge_critical": e.edge_critical, "token_count": e.token_count,
             "rendered_text": e.text}
            for e in entries
        ])
    models.insert_tuples(connection, models.item_event, EVENT_COLUMNS, audit.rows(decision_id),
                         sparse=("tokens_before", "tokens_after", "detail"))
    if steps:
        models.insert_many(connection, models.budget_log, [
            {"decision_id": decision_id, "step_no": s.step_no, "ladder_step": s.ladder_step,
             "item_id": s.item_id, "tokens_before": s.tokens_before,
             "tokens_after": s.tokens_after, "detail": s.detail}
            for s in steps
        ])
    connection.execute(_FINISH_DECISION, {
        "finished_id": decision_id, "token_count": token_count, "flags": ",".join(flags),
    })
    verdicts = Counter(e.action for e in audit.events if e.is_final)
    return DecisionContext(
        decision_id=decision_id, arm=request.arm, task=outcome.window_task,
        acceptance_criteria=request.plan_node.acceptance_criteria,
        current_obligation=request.plan_node.obligation, window=tuple(entries),
        token_count=token_count, ceiling=settings.token_ceiling, tokenizer=settings.tokenizer,
        budget_log=tuple(steps),
        flags=tuple(flags), verdicts=dict(sorted(verdicts.items())),
    )
