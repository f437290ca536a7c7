"""One decision, end to end (docs/design.md, "One decision, through the pipeline").

normalise the request → (a) assemble the pool and the gate's inputs, reading recon
before the write transaction → (b) the gate, on the decision's rows written in a
preview (on SQLite into TEMP tables: no write lock; kept there for the write to copy on
a file store, else rolled back) → when a
ranking endpoint is configured, the ONE call with no transaction open → (L) resolve
the residue, cap, (c) render, (d) compress, (e) dedup, (f) order, (g) budget, counting
tokens on a read connection → one write transaction that only writes: the inputs, the
new token counts, the outcome. Any error rolls the whole decision back; none of the
expensive work holds the write lock.

The gate's verdicts are a function of the decision's own rows — written the same in the
preview and the write — and of the store's policy rows (``sql/stages/decision_policy``);
the write reads those rows again (on a SQLite file store only when another connection
committed since the preview: ``PRAGMA data_version``) and, only if another session
changed them, decides again under the lock: a new ``Attempt`` over the same frozen
``DecisionInput`` (state.py), the preview's left as it was.
"""

from __future__ import annotations

import dataclasses
import hashlib
import warnings
from typing import TYPE_CHECKING

from sqlalchemy import Connection

from .. import models
from ..config import Settings
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
from ..tokens import count_cached, count_is_bounded, store_counts
from . import persist
from .assemble import assemble_pool
from .baseline import stuff_everything
from .budget import fit_budget
from .compress import compress
from .dedup import dedup
from .gate import cap_admitted, driver_rows, run_gate
from .gate_inputs import derive_gate_inputs
from .order import order
from .rank import announce_unavailable, residue_candidates, resolve_residue
from .rank_client import rank_residue
from .render import render
from .state import (
    Attempt,
    DecisionInput,
    DecisionPolicy,
    NormalisedRequest,
    PolicyRow,
    TokenCounter,
    begin_attempt,
    decision_input,
    normalised_request,
)
from .vocabulary import (
    BUDGET,
    IN_WINDOW,
    MASKED,
    SPEC_POLICY_SET,
    TOKENS_BOUNDED_FLAG,
    UNRESOLVED_ENTITY_FLAG,
)
from .window_text import window_text

if TYPE_CHECKING:
    from ..store import ContextStore

# warnings.warn's stacklevel that names the harness's own `store.construct(...)` line:
# _warn_unresolved <- construct <- ContextStore.construct <- the caller
CALLER_STACKLEVEL = 4


def construct(store: ContextStore, request: DecisionRequest | dict[str, object] | str, *,
              strict: bool = False) -> DecisionContext:
    normalised = normalise(request, store.settings)
    with store.engine.connect() as connection, store.recon_connection(connection) as rc:
        inputs = assemble(normalised, ReconReader(rc) if store.recon_available else None)
    unresolved = unresolved_entities(inputs)
    if unresolved and strict:
        raise UnresolvedEntityError(unresolved)  # before any write: nothing is kept
    _warn_unresolved(inputs, unresolved)
    request = inputs.request
    ranking_on = request.arm == ARM_CTX08 and bool(store.settings.rank_base_url)
    # SQLite file stores: one connection from the preview through the write, which
    # copies the preview's rows (other stores: None, a connection for each)
    with store.decision_connection() as own_connection:
        preview = prepare(store, inputs, ranking_on, own_connection)
        context, row = store.write(
            lambda connection: write_decision(connection, store, preview), own_connection)
    store.runs_seen[request.run_id] = (request.arm, request.variant)
    store.remember_texts(row.text_digests)  # committed, so never offered again
    if request.arm == ARM_CTX08 and not ranking_on and row.new_run:
        announce_unavailable(store.url, request.run_id)  # once per run, as it starts
    return context


def prepare(store: ContextStore, inputs: DecisionInput, ranking_on: bool,
            connection: Connection | None = None) -> Attempt:
    """Everything but the writes, with no write lock held: the gate in a preview (its
    rows kept on ``connection`` for the write, else rolled back), the ranking call with
    no transaction open, then the stages and their token counts on a read connection.
    Returns the attempt the write takes."""
    if inputs.request.arm == ARM_CURRENT:
        attempt = begin_attempt(inputs, None)  # no gate: nothing to preview
    else:
        attempt = store.preview(
            lambda previewing: preview_gate(previewing, store, inputs,
                                            keep=connection is not None), connection)
        residue = residue_candidates(attempt) if ranking_on else []
        if 1 <= len(residue) <= RESIDUE_MAX:
            node = inputs.request.plan_node
            attempt.ranking = rank_residue(inputs.settings, node.obligation,
                                           node.acceptance_criteria, node.decision_question,
                                           residue)
    with store.engine.connect() as reader:
        decide(reader, attempt)
    return attempt


def preview_gate(connection: Connection, store: ContextStore, inputs: DecisionInput, *,
                 keep: bool = False) -> Attempt:
    """(b) on the decision's rows, written in the preview: an attempt begun by the store's
    policy rows, with the gate's verdicts; ``keep``: the rows stay for the write."""
    # a SQLite file store's own connection, which the write takes too: the store's
    # version read before the policy rows, so an equal one under the write lock says they
    # are unchanged whatever SQLite does with it inside a transaction
    version = models.data_version(connection) if keep else None
    attempt = begin_attempt(inputs, read_policy(connection, inputs.request))
    kept = persist.write_preview_inputs(connection, store, inputs)
    run_gate(connection, attempt, kept.decision_id,
             preview=connection.dialect.name == "sqlite")
    if keep:
        attempt.kept_preview = kept._replace(data_version=version)
    return attempt


def read_policy(connection: Connection, request: DecisionRequest) -> DecisionPolicy:
    """The representation policy set the decision uses and the store's policy rows it
    is decided by (``sql/stages/decision_policy``), in one statement."""
    rows: list[PolicyRow] = sorted(  # in one order, for the write's comparison
        (kind, name, value) for kind, name, value in driver_rows(
            connection, "stages/decision_policy",
            {"decision_type": request.decision_type, "variant": request.variant,
             "spec_set": SPEC_POLICY_SET}))
    return DecisionPolicy.from_rows(rows)


def decide(connection: Connection, attempt: Attempt) -> None:
    """The stages after the gate, on ``connection`` (the token cache is read there; new
    counts go to ``attempt.new_counts``) by the attempt's policy, then the window's
    rows."""
    tokenizer = attempt.inputs.settings.tokenizer

    def count(texts: list[str]) -> list[int]:
        return count_cached(connection, tokenizer, texts, pending=attempt.new_counts)

    if attempt.policy is None:  # the current arm
        stuff_everything(attempt, count)
    else:
        run_stages_after_gate(attempt, count, attempt.policy)
    if count_is_bounded(window_text(attempt.window_task, attempt.candidates)):
        attempt.flags.append(TOKENS_BOUNDED_FLAG)
    attempt.entries = window_entries(attempt)


def window_entries(attempt: Attempt) -> list[WindowEntry]:
    """The window's rows, each candidate's final verdict in the audit: once per attempt,
    before the write transaction."""
    entries = []
    for position, candidate in enumerate(attempt.candidates, start=1):
        attempt.audit.final(candidate.item_id, BUDGET,
                            MASKED if candidate.masked else IN_WINDOW, candidate.driver,
                            tokens_after=candidate.tokens,
                            detail=f"position {position}, {candidate.block}")
        entries.append(WindowEntry(
            position, candidate.item_id, candidate.role, candidate.rendering, candidate.tier,
            candidate.block, candidate.edge_critical, candidate.tokens, candidate.block_text(),
            candidate.body_lines(),
        ))
    return entries


def write_decision(connection: Connection, store: ContextStore,
                   preview: Attempt) -> tuple[DecisionContext, persist.DecisionRow]:
    """The write transaction: the decision's rows, the new token counts and the outcome.
    Only when the store's policy rows changed since the preview (another session edited
    them) do the gate and the stages run again here, on these rows, as a new attempt.
    Safe to run again (PostgreSQL's retry): ``preview`` is read, never changed."""
    attempt = preview
    row = persist.write_inputs(connection, store, preview)
    if preview.policy is not None:  # a gate: were its policy rows changed meanwhile?
        kept = preview.kept_preview
        # on the preview's own connection: nothing committed since, nothing to read again
        unchanged = (kept is not None and kept.data_version is not None
                     and kept.data_version == models.data_version(connection))
        policy = preview.policy if unchanged else read_policy(connection,
                                                              preview.inputs.request)
        if policy != preview.policy:
            attempt = begin_attempt(preview.inputs, policy, ranking=preview.ranking,
                                    new_counts=preview.new_counts)
            run_gate(connection, attempt, row.decision_id)
            decide(connection, attempt)
    store_counts(connection, attempt.inputs.settings.tokenizer, attempt.new_counts)
    return persist.write_outcome(connection, store, row, attempt), row


def normalise(request: DecisionRequest | dict[str, object] | str | bytes,
              settings: Settings) -> NormalisedRequest:
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
    return normalised_request(request, request_json, request_sha256, settings, flags)


def assemble(normalised: NormalisedRequest, recon: ReconReader | None) -> DecisionInput:
    """(a) The pool and the gate's inputs; recon read once, in a read transaction of its
    own (one snapshot on SQLite), before the write transaction."""
    request = relative_paths(normalised.request, recon)
    pool = assemble_pool(request, recon)
    gate_inputs = derive_gate_inputs(request, pool, recon)
    if recon is not None:
        recon.confirm_snapshot()
    return decision_input(
        normalised if request is normalised.request
        else dataclasses.replace(normalised, request=request),
        gate_inputs.pool, gate_inputs.links, gate_inputs.edges, gate_inputs.nearness)


def relative_paths(request: DecisionRequest, recon: ReconReader | None) -> DecisionRequest:
    """The request with the absolute paths under the indexed root made the relative keys
    recon knows them by; one outside it (or with no root recorded) stays as given and is
    unresolved. The request itself when there is nothing to change."""
    if recon is None or not any(is_absolute_key(key) for key in entity_keys_named(request)):
        return request
    root = recon.root()
    if root is None:
        return request

    def relative(key: str) -> str:
        return (relative_to_root(key, root) or key) if is_absolute_key(key) else key

    return with_entity_paths(request, relative)


def unresolved_entities(inputs: DecisionInput) -> list[UnresolvedEntity]:
    return [UnresolvedEntity(item.item_id, item.kind, item.entity_key, item.unresolved)
            for item in inputs.pool if item.unresolved and item.entity_key is not None]


def _warn_unresolved(inputs: DecisionInput, unresolved: list[UnresolvedEntity]) -> None:
    """One warning per unresolved item (a category the harness can filter or make an
    error): the window is built, with a placeholder where the entity's text would be."""
    request = inputs.request
    for entity in unresolved:
        warnings.warn(
            f"decision {request.run_id} #{request.seq}: {entity.describe()}; the window "
            f"shows a placeholder (flag {UNRESOLVED_ENTITY_FLAG}:{entity.item_id})",
            UnresolvedEntityWarning, stacklevel=CALLER_STACKLEVEL,
        )


def run_stages_after_gate(attempt: Attempt, count: TokenCounter,
                          policy: DecisionPolicy) -> None:
    """(L), (c)–(g) on what the gate left (``run_gate``), by ``policy``'s representation
    table (§3.3)."""
    resolve_residue(attempt)
    cap_admitted(attempt)
    render(attempt, policy.representation)
    compress(attempt)
    dedup(attempt)
    order(attempt)
    fit_budget(attempt, count)
