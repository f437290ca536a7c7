"""One decision, end to end (docs/design.md, "One decision, through the pipeline").

normalise the request → (a) assemble the pool and the gate's inputs, reading recon
before the write transaction → (b) the gate, on the decision's rows written in a
preview that is rolled back (on SQLite into TEMP tables: no write lock) → when a
ranking endpoint is configured, the ONE call with no transaction open → (L) resolve
the residue, cap, (c) render, (d) compress, (e) dedup, (f) order, (g) budget, counting
tokens on a read connection → one write transaction that only writes: the inputs, the
new token counts, the outcome. Any error rolls the whole decision back; none of the
expensive work holds the write lock.

The gate's verdicts are a function of the decision's own rows — written the same in the
preview and the write — and of the store's policy rows (``sql/stages/decision_policy``);
the write reads those rows again and, only if another session changed them since the
preview, decides again under the lock.
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass, field

from ..context import DecisionContext, WindowEntry
from ..entities import is_absolute_key, relative_to_root
from ..recon.reader import ReconReader
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
from ..sqlfiles import sql_statement
from ..tokens import count_cached, count_is_bounded, store_counts
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
from .render import render
from .state import Decision, new_decision, use_request
from .vocabulary import SPEC_POLICY_SET, TOKENS_BOUNDED_FLAG, UNRESOLVED_ENTITY_FLAG
from .window_text import window_text

# decision_policy's rows: the policy set chosen, and the representation table's rows
POLICY_SET_ROW = "policy_set"
REPRESENTATION_POLICY_ROWS = "representation_policy"

# warnings.warn's stacklevel that names the harness's own `store.construct(...)` line:
# _warn_unresolved <- construct <- ContextStore.construct <- the caller
CALLER_STACKLEVEL = 4


@dataclass
class Prepared:
    """What a decision worked out before taking the write lock, for the write to check
    and write."""

    policy_set: str
    policy: list[tuple] | None  # decision_policy's rows at the preview (None: no gate)
    entries: list[WindowEntry] = field(default_factory=list)
    new_counts: dict[str, int] = field(default_factory=dict)  # digest -> count, not cached yet
    decided_again: bool = False  # the stages ran again inside a write transaction


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
    prepared = prepare(store, decision, ranking_on)
    context = store.write(lambda connection: write_decision(connection, store, decision,
                                                            prepared))
    store.runs_seen[decision.request.run_id] = (decision.request.arm, decision.request.variant)
    store.remember_texts(decision.text_digests)  # committed, so never offered again
    if decision.request.arm == ARM_CTX08 and not ranking_on and decision.new_run:
        announce_unavailable(store.url, decision.request.run_id)  # once per run, as it starts
    return context


def prepare(store, decision: Decision, ranking_on: bool) -> Prepared:
    """Everything but the writes, with no write lock held: the gate in a rolled-back
    preview, the ranking call with no transaction open, then the stages and their token
    counts on a read connection."""
    if decision.request.arm == ARM_CURRENT:
        decision.begin_write(None, False, SPEC_POLICY_SET)  # no gate: nothing to preview
        prepared = Prepared(policy_set=SPEC_POLICY_SET, policy=None)
    else:
        prepared = Prepared(*store.preview(lambda connection: preview_gate(connection, store,
                                                                           decision)))
        residue = residue_candidates(decision) if ranking_on else []
        if 1 <= len(residue) <= RESIDUE_MAX:
            node = decision.request.plan_node
            decision.ranking = rank_residue(store.settings, node.obligation,
                                            node.acceptance_criteria, node.decision_question,
                                            residue)
    with store.engine.connect() as reader:
        decide(reader, decision, prepared, prepared.policy)
    return prepared


def preview_gate(connection, store, decision: Decision) -> tuple[str, list[tuple]]:
    """(b) on the decision's rows, written in the preview; returns the policy set and the
    policy rows the gate and rendering read."""
    policy_set, policy = decision_policy(connection, decision)
    persist.write_preview_inputs(connection, store, decision, policy_set)
    run_gate(connection, decision)
    return policy_set, policy


def decision_policy(connection, decision: Decision) -> tuple[str, list[tuple]]:
    """The representation policy set the decision uses and the store's policy rows it
    is decided by (``sql/stages/decision_policy``), in one statement."""
    rows = [tuple(row) for row in connection.execute(
        sql_statement("stages/decision_policy"),
        {"decision_type": decision.request.decision_type,
         "variant": decision.request.variant, "spec_set": SPEC_POLICY_SET})]
    return next(name for policy, name, _ in rows if policy == POLICY_SET_ROW), rows


def representation_policy(policy_set: str, policy: list[tuple]) -> dict[str, str]:
    """Role -> rendering: the representation table (§3.3) among the policy rows."""
    table = {role: rendering for kind, role, rendering in policy
             if kind == REPRESENTATION_POLICY_ROWS}
    if not table:
        raise ValueError(f"representation policy set {policy_set!r} has no rows")
    return table


def decide(connection, decision: Decision, prepared: Prepared,
           policy: list[tuple] | None) -> None:
    """The stages after the gate, on ``connection`` (the token cache is read there; new
    counts go to ``prepared.new_counts``) by the policy rows read with the gate's, then
    the window's rows."""
    tokenizer = decision.settings.tokenizer

    def count(texts):
        return count_cached(connection, tokenizer, texts, pending=prepared.new_counts)

    if decision.request.arm == ARM_CURRENT:
        stuff_everything(decision, count)
    else:
        run_stages_after_gate(decision, count,
                              representation_policy(decision.policy_set, policy))
    if count_is_bounded(window_text(decision.window_task, decision.candidates)):
        decision.flags.append(TOKENS_BOUNDED_FLAG)
    prepared.entries = persist.window_entries(decision)


def write_decision(connection, store, decision: Decision, prepared: Prepared) -> DecisionContext:
    """The write transaction: the decision's rows, the new token counts and the outcome.
    Only when the store's policy rows changed since the preview (another session edited
    them) do the gate and the stages run again here, on these rows. Safe to run again
    (PostgreSQL's retry): it changes the decision only by deciding it again."""
    if prepared.policy is None:  # no gate: no policy rows to check
        persist.write_inputs(connection, store, decision, restart=False)
    else:
        policy_set, policy = decision_policy(connection, decision)
        persist.write_inputs(connection, store, decision, restart=False, policy_set=policy_set)
        if (prepared.decided_again or policy_set != prepared.policy_set
                or policy != prepared.policy):
            prepared.decided_again = True
            decision.begin_write(decision.decision_id, decision.new_run, policy_set)
            run_gate(connection, decision)
            decide(connection, decision, prepared, policy)
    store_counts(connection, decision.settings.tokenizer, prepared.new_counts)
    return persist.write_outcome(connection, decision, prepared.entries)


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
            "request: expected a DecisionRequest, a dict or JSON text, "
            f"got {type(request).__name__}"
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


def run_stages_after_gate(decision: Decision, count, representation: dict[str, str]) -> None:
    """(L), (c)–(g) on what the gate left (``run_gate``); ``representation``: role ->
    rendering (§3.3) of the decision's policy set."""
    resolve_residue(decision)
    cap_admitted(decision)
    render(decision, representation)
    compress(decision)
    dedup(decision)
    order(decision)
    fit_budget(decision, count)
