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

from sqlalchemy import Connection, insert, select, text, update

from . import models
from .assemble import PoolItem, assemble_pool
from .audit import AuditLog
from .budget import Budgeter, render_window
from .candidate import Candidate
from .compress import compress
from .context import BudgetLogEntry, DecisionContext, WindowEntry
from .dedup import dedup, fact_key
from .facts import DecisionFacts
from .links import (
    DIGEST_KEY_SUFFIX,
    Link,
    ReconSql,
    compute_links,
    compute_nearness,
    derive_impact,
    impact_digest,
)
from .order import order
from .render import load_policy, render
from .request import DecisionRequest, RequestError
from .sqlfiles import load_sql
from .tokens import count_cached


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


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _ensure_run(connection: Connection, request: DecisionRequest, settings_json: str) -> None:
    row = connection.execute(
        select(models.run.c.arm, models.run.c.variant).where(models.run.c.run_id == request.run_id)
    ).first()
    if row is None:
        connection.execute(
            insert(models.run).values(
                run_id=request.run_id, arm=request.arm, variant=request.variant,
                created_at=_now(), settings_json=settings_json,
            )
        )
    elif (row.arm, row.variant) != (request.arm, request.variant):
        raise RunArmMismatch(
            f"request.arm/variant: run {request.run_id!r} is arm {row.arm!r} variant "
            f"{row.variant!r}; expected the same, got {request.arm!r}/{request.variant!r}"
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
    settings = store.settings
    settings_json = json.dumps(
        {"token_ceiling": settings.token_ceiling, "tokenizer": settings.tokenizer,
         "rank_threshold": settings.rank_threshold}, sort_keys=True,
    )
    with store.write_transaction() as connection:
        return _construct(connection, store, request, settings, settings_json)


def _construct(connection, store, request, settings, settings_json) -> DecisionContext:
    _ensure_run(connection, request, settings_json)
    recon = ReconSql(connection) if store.recon_available else None
    pool = assemble_pool(request, recon)
    links = compute_links(request, pool, recon)

    given_edges = [(e.head, e.tail, e.kind, e.depth, "06") for e in request.impact_edges]
    derived = derive_impact(links, recon) if (request.derive_impact and recon) else []
    edges = given_edges + [(e.head, e.tail, e.kind, e.depth, "recon") for e in derived]
    digest = _digest_item(request, edges, len(pool) + 1)
    if digest is not None:
        pool.append(digest)
        links.append(Link("impact_digest", digest.entity_key, None, None, None, "06 digest"))
    nearness = compute_nearness(request, pool, links, recon)

    request_json = request.to_json()
    request_sha256 = hashlib.sha256(request_json.encode("utf-8")).hexdigest()
    decision_id = connection.execute(
        insert(models.decision).values(
            run_id=request.run_id, instance_id=request.instance_id, seq=request.seq,
            decision_type=request.decision_type, task_text=request.task,
            decision_question=request.plan_node.decision_question,
            request_json=request_json,
            request_sha256=request_sha256,
            tokenizer=settings.tokenizer, token_ceiling=settings.token_ceiling, created_at=_now(),
        ).returning(models.decision.c.decision_id)
    ).scalar_one()
    _write_inputs(connection, decision_id, request, pool, links, edges, nearness)

    audit = AuditLog()
    for item in pool:
        for event in item.events:
            if event.is_final:
                audit.final(item.item_id, "assemble", event.action, event.driver, detail=event.detail)
            else:
                audit.add(item.item_id, "assemble", event.action, event.driver, detail=event.detail)
    facts = DecisionFacts.from_request(decision_id, request, request_sha256)
    count = lambda texts: count_cached(connection, settings.tokenizer, texts)  # noqa: E731

    if request.arm == "current":
        outcome = _baseline(pool, request, audit, count)
    else:
        outcome = _pipeline(connection, decision_id, pool, request, facts, settings, audit, count)
    return _persist(connection, decision_id, request, outcome, audit, settings)


def _write_inputs(connection, decision_id, request, pool, links, edges, nearness) -> None:
    node = request.plan_node
    point = node.insertion_point
    connection.execute(insert(models.obligation).values(
        decision_id=decision_id, obligation_no=1, source="07", node_id=node.node_id,
        obligation_text=node.obligation, target_entity=node.target_entity,
        preconditions_json=json.dumps(list(node.preconditions)),
        required_validation_json=json.dumps(list(node.required_validation)),
        acceptance_criteria_json=json.dumps(list(node.acceptance_criteria)),
        insertion_path=point.path if point else None, insertion_line=point.line if point else None,
    ))
    models.insert_many(connection, models.evidence_item, [
        {
            "decision_id": decision_id, "item_id": i.item_id, "item_no": i.item_no,
            "source": i.source, "kind": i.kind, "entity_key": i.entity_key,
            "content": i.content, "content_sha256": i.content_sha256,
            "original_content": i.original_content, "provenance": i.provenance,
            "score": i.score, "arrival_no": i.arrival_no, "path": i.path,
            "start_line": i.start_line, "end_line": i.end_line, "signature": i.signature,
            "in_pool": i.in_pool,
            "fact_key": fact_key(i.kind, i.entity_key, i.content, i.item_id),
        }
        for i in pool
    ])
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


def _pipeline(connection, decision_id, pool, request, facts, settings, audit, count):
    by_id = {item.item_id: item for item in pool}
    rows = connection.execute(text(load_sql("stages/gate_decision")), {"decision_id": decision_id})
    admitted: list[Candidate] = []
    for row in rows:
        if row.gate_verdict == "out_of_pool":
            continue  # already final at assembly
        if row.gate_verdict == "admit":
            audit.add(row.item_id, "gate", "admitted", row.driver)
            admitted.append(Candidate(item=by_id[row.item_id], driver=row.driver))
        elif row.gate_verdict == "residual":
            # The ranking step (§4) is not configured: the residue is rejected (frugal default).
            audit.add(row.item_id, "gate", "residual", row.driver)
            audit.final(row.item_id, "rank", "rejected", "ranker_unavailable")
        else:
            audit.final(row.item_id, "gate", "rejected", row.driver)

    policy = load_policy(connection, facts.policy_set)
    candidates = render(admitted, facts, policy, audit)
    compress(candidates, facts, audit)
    fact_keys = {c.item_id: fact_key(c.item.kind, c.item.entity_key, c.item.content, c.item_id)
                 for c in candidates}
    candidates = dedup(candidates, fact_keys, audit)
    ordered = order(candidates, audit)
    budgeter = Budgeter(request.task, settings.token_ceiling, count, facts, audit)
    window, token_count = budgeter.fit(ordered)
    return _Outcome(window, token_count, budgeter.task, budgeter.steps, budgeter.flags,
                    frozenset(budgeter.masked))


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
    models.insert_many(connection, models.item_event, audit.rows(decision_id))
    if steps:
        models.insert_many(connection, models.budget_log, [
            {"decision_id": decision_id, "step_no": s.step_no, "ladder_step": s.ladder_step,
             "item_id": s.item_id, "tokens_before": s.tokens_before,
             "tokens_after": s.tokens_after, "detail": s.detail}
            for s in steps
        ])
    connection.execute(
        update(models.decision).where(models.decision.c.decision_id == decision_id).values(
            token_count=token_count, flags=",".join(flags),
        )
    )
    verdicts = Counter(e.action for e in audit.events if e.is_final)
    return DecisionContext(
        decision_id=decision_id, arm=request.arm, task=outcome.window_task,
        acceptance_criteria=request.plan_node.acceptance_criteria,
        current_obligation=request.plan_node.obligation, window=tuple(entries),
        token_count=token_count, ceiling=settings.token_ceiling, tokenizer=settings.tokenizer,
        budget_log=tuple(BudgetLogEntry(s.step_no, s.ladder_step, s.item_id, s.tokens_before,
                                        s.tokens_after, s.detail) for s in steps),
        flags=tuple(flags), verdicts=dict(sorted(verdicts.items())),
    )
