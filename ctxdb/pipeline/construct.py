"""One decision, end to end (DESIGN.md "One decision, end to end").

normalise the request → (a) assemble the pool and the gate's inputs, reading recon
before the write transaction →
when a ranking endpoint is configured, find the residue in a rolled-back preview and
make the ONE call with no transaction open → one write transaction: persist the inputs,
(b) gate, (L) resolve the residue, cap, (c) render, (d) compress, (e) dedup, (f) order,
(g) budget, persist the outcome. Any error rolls the whole decision back.
"""

from __future__ import annotations

import hashlib
import warnings

from ..context import DecisionContext
from ..recon.reader import ReconReader
from ..entities import is_absolute_key, relative_to_root
from ..request import (
    DecisionRequest,
    RequestError,
    UnresolvedEntity,
    UnresolvedEntityError,
    UnresolvedEntityWarning,
    entity_keys_named,
    has_nul,
    with_entity_paths,
    without_nul,
)
from ..spec import ARM_CTX08, ARM_CURRENT, RESIDUE_MAX
from ..tokens import count_cached
from . import persist
from .assemble import assemble_pool
from .baseline import stuff_everything
from .budget import fit_budget
from .compress import compress
from .dedup import dedup
from .gate import cap_admitted, run_gate
from .gate_inputs import derive_gate_inputs
from .order import order
from .rank import (
    announce_unavailable,
    rank_residue,
    residue_candidates,
    resolve_residue,
)
from .render import load_policy, render
from .state import Decision, new_decision, use_request
from .vocabulary import UNRESOLVED_ENTITY_FLAG

# warnings.warn's stacklevel that names the harness's own `store.construct(...)` line:
# _warn_unresolved <- construct <- ContextStore.construct <- the caller
CALLER_STACKLEVEL = 4


def construct(store, request: DecisionRequest | dict | str, *,
              strict: bool = False) -> DecisionContext:
    decision = normalise(request, store.settings)
    with store.engine.connect() as connection, store.recon_connection(connection) as rc:
        assemble(decision, ReconReader(rc) if store.recon_available else None)
    unresolved = unresolved_entities(decision)
    if unresolved and strict:
        raise UnresolvedEntityError(unresolved)  # before any write: nothing is kept
    _warn_unresolved(decision, unresolved)
    ranking_on = decision.request.arm == ARM_CTX08 and bool(store.settings.rank_base_url)
    if ranking_on:
        # Find the residue in a transaction that is rolled back, then make the ONE call
        # with no transaction open: the write lock is never held across the network.
        with store.preview_transaction() as connection:
            persist.write_inputs(connection, store, decision)
            run_gate(connection, decision)
        residue = residue_candidates(decision)
        if 1 <= len(residue) <= RESIDUE_MAX:
            node = decision.request.plan_node
            decision.ranking = rank_residue(store.settings, node.obligation,
                                            node.acceptance_criteria, node.decision_question,
                                            residue)
    with store.write_transaction() as connection:
        persist.write_inputs(connection, store, decision)
        count = lambda texts: count_cached(connection, decision.settings.tokenizer, texts)  # noqa: E731
        if decision.request.arm == ARM_CURRENT:
            stuff_everything(decision, count)
        else:
            run_stages(connection, decision, count)
        context = persist.write_outcome(connection, decision)
    store.runs_seen[decision.request.run_id] = (decision.request.arm, decision.request.variant)
    store.remember_texts(decision.text_digests)  # committed, so never offered again
    if decision.request.arm == ARM_CTX08 and not ranking_on and decision.new_run:
        announce_unavailable(store.url, decision.request.run_id)  # once per run, as it starts
    return context


def normalise(request: DecisionRequest | dict | str, settings) -> Decision:
    """A checked request, NUL-free, with its JSON as given and that JSON's hash."""
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
    request_sha256 = hashlib.sha256(request_json.encode("utf-8")).hexdigest()
    return new_decision(request, request_json, request_sha256, settings, flags)


def assemble(decision: Decision, recon: ReconReader | None) -> None:
    """(a) The pool and the gate's inputs; recon read once, in a read transaction of its
    own (one snapshot on SQLite), before the write transaction."""
    make_paths_relative(decision, recon)
    decision.pool = assemble_pool(decision.request, recon)
    derive_gate_inputs(decision, recon)
    if recon is not None:
        recon.confirm_snapshot()


def make_paths_relative(decision: Decision, recon: ReconReader | None) -> None:
    """Absolute paths under the indexed root become the relative keys recon knows them
    by; one outside it (or with no root recorded) stays as given and is unresolved."""
    if recon is None or not any(is_absolute_key(key)
                                for key in entity_keys_named(decision.request)):
        return
    root = recon.root()
    if root is None:
        return

    def relative(key: str) -> str:
        return (relative_to_root(key, root) or key) if is_absolute_key(key) else key

    use_request(decision, with_entity_paths(decision.request, relative))


def unresolved_entities(decision: Decision) -> list[UnresolvedEntity]:
    return [UnresolvedEntity(item.item_id, item.kind, item.entity_key, item.unresolved)
            for item in decision.pool if item.unresolved]


def _warn_unresolved(decision: Decision, unresolved: list[UnresolvedEntity]) -> None:
    """One warning per unresolved item (a category the harness can filter or make an
    error): the window is built, with a placeholder where the entity's text would be."""
    request = decision.request
    for entity in unresolved:
        warnings.warn(
            f"decision {request.run_id} #{request.seq}: {entity.describe()}; the window "
            f"shows a placeholder (flag {UNRESOLVED_ENTITY_FLAG}:{entity.item_id})",
            UnresolvedEntityWarning, stacklevel=CALLER_STACKLEVEL,
        )


def run_stages(connection, decision: Decision, count) -> None:
    """(b)–(g) over the rows persist.write_inputs has just written."""
    run_gate(connection, decision)
    resolve_residue(decision)
    cap_admitted(decision)
    render(decision, load_policy(connection, decision.policy_set))
    compress(decision)
    dedup(decision)
    order(decision)
    fit_budget(decision, count)
