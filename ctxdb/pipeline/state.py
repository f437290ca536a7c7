"""One decision's state, by lifetime.

* ``NormalisedRequest`` — the request as checked and normalised (``construct.normalise``).
* ``DecisionInput`` — frozen once assembly made the pool and the gate's inputs: the
  request, the pool, links, impact edges and nearness (``by_id`` built once). A preview
  before the ranking call and the write after it read the same object.
* ``DecisionPolicy`` — the store's policy rows, read once per transaction that decides,
  with the representation table read out of them.
* ``Attempt`` — one run of the stages over the inputs (``begin_attempt``): the
  rolled-back preview's, or a write's that decides again. The gate, the ranking step
  and (c)–(g) extend it, each taking the candidates the previous one left; ``persist``
  writes it and the inputs, and changes neither.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ..config import Settings
from ..entities import entity_key_of_test_id, is_module_key
from ..request import DecisionRequest, PlanNode, RequestError
from ..spec import BLOCKS, TIERS
from ..terms import terms
from .audit import AuditLog
from .vocabulary import ASSEMBLE, UNRESOLVED_ENTITY_FLAG
from .window_text import decision_ref, item_block, item_header

if TYPE_CHECKING:  # context.py reads BudgetStep from here
    from ..context import WindowEntry

STABLE_CORE, WORKING_SET, TRANSIENT = TIERS  # §3.7
FRONT, MIDDLE, BACK = BLOCKS  # §3.6


class AssemblyEvent(NamedTuple):
    action: str
    driver: str
    detail: str | None = None
    is_final: bool = False


@dataclass(slots=True)  # 256 per decision: slots make them cheaper to build and read
class PoolItem:
    """One input of the decision, normalized and capped (spec §3.1)."""

    item_no: int
    source: str
    kind: str
    content: str
    provenance: str
    entity_key: str | None = None
    original_content: str | None = None
    score: float | None = None
    arrival_no: int | None = None
    arrived_in_seq: int | None = None  # live state: the decision it arrived in, if known
    in_harness_order: bool = False  # live state from live.events: its order across kinds known
    command: str | None = None  # live.events: what produced it (a re-run supersedes it)
    path: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    signature: str | None = None
    in_pool: bool = True
    events: list[AssemblyEvent] = field(default_factory=list)
    fact_key: str = ""  # §3.5's fact identity (dedup.fact_key), set once at assembly
    # why recon could not give the text of the entity this item names and does not
    # carry (its window text is then a placeholder, and the context is flagged)
    unresolved: str | None = None

    item_id: str = field(init=False)  # 'E<item_no>', read by every stage

    def __post_init__(self) -> None:
        self.item_id = f"E{self.item_no}"

    @property
    def is_outline(self) -> bool:
        """A whole module's symbol item (a skeleton): its signature is its outline
        (render.module_outline), and in the residue it stands for its file's symbols."""
        return self.kind == "symbol" and is_module_key(self.entity_key)


@dataclass(slots=True)
class Candidate:
    """An admitted item's working state as it travels render → budget."""

    item: PoolItem
    driver: str
    role: str = ""
    rendering: str = ""
    text: str = ""  # the rendered body, without the item header
    edge_critical: bool = False
    tier: str = WORKING_SET
    block: str = MIDDLE
    tokens: int = 0
    over_compress_target: bool = False  # §3.4: could not go under 1 KB, flagged for (g)
    also_stands_for: list[str] = field(default_factory=list)  # ids deduped into this one
    masked: bool = False  # §3.4 step 4: the text is a pointer, the raw text stays in the store
    shown_lines: tuple[int, int] | None = None  # file lines of a cut body, for its label

    @property
    def item_id(self) -> str:
        return self.item.item_id

    def header(self) -> str:
        return item_header(self)

    def body_lines(self) -> tuple[int, int] | None:
        """The file lines whose text the window shows (window_item.shown_*_line): the
        kept lines of a cut or slice, the whole span of a verbatim item, else None."""
        if self.masked or self.item.start_line is None:
            return None
        if self.shown_lines is not None and self.rendering in ("verbatim", "truncated"):
            return self.shown_lines
        if self.rendering == "verbatim" and self.item.end_line is not None:
            return (self.item.start_line, self.item.end_line)
        return None

    def block_text(self) -> str:
        return item_block(self)


@dataclass(frozen=True)  # a dataclass: DecisionContext.to_dict shows it as a mapping
class BudgetStep:
    """One eviction-ladder step as the budgeter logged it (a budget_log row)."""

    step_no: int
    ladder_step: str
    item_id: str | None
    tokens_before: int
    tokens_after: int
    detail: str | None = None


# The gate's inputs (gate_inputs.py), written as decision_link, impact_edge and
# item_nearness rows.
@dataclass(frozen=True)
class Link:
    link_kind: str
    entity_key: str
    path: str | None
    start_line: int | None
    end_line: int | None
    detail: str | None = None
    symbol_id: int | None = None


class ImpactEdge(NamedTuple):  # an impact_edge row (edge_no = position + 1)
    head: str
    tail: str
    kind: str
    depth: int
    origin: str


@dataclass(frozen=True, slots=True)
class Nearness:
    shared_terms: list[str] = field(default_factory=list)
    recon_hops: int | None = None
    nearest_link_no: int | None = None
    near_score: float = 0.0  # gate_inputs.near_score: residual iff >= NEAR_MIN_SCORE


# decision_policy's rows (kind, name, value): the policy set chosen, and the
# representation table's rows (role, rendering)
PolicyRow = tuple[str, str, str]
POLICY_SET_ROW = "policy_set"
REPRESENTATION_POLICY_ROWS = "representation_policy"

RANK_OK = "ok"  # rank_call.parse_status of a call whose answer was used


@dataclass
class RankOutcome:
    """What the one call returned, ready for the audit row."""

    model: str
    base_url: str
    request_body: dict[str, Any]  # the chat-completions body as JSON gives it
    status: str
    residue_ids: tuple[str, ...] = ()  # what was ranked, in the prompt's order
    scores: dict[str, float] = field(default_factory=dict)
    response_text: str | None = None
    error: str | None = None
    latency_ms: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == RANK_OK


class RankScore(NamedTuple):
    """One ranked residue item's score and verdict (a rank_score row)."""

    item_id: str
    relevance_score: float | None
    verdict: str


@dataclass(frozen=True)
class NormalisedRequest:
    """A checked request, NUL-free, with its JSON as given and that JSON's hash
    (``construct.normalise``); ``settings`` are the store's under the request's own
    ceiling."""

    request: DecisionRequest
    request_json: str  # as given (JSON escapes NUL as \u0000)
    request_sha256: str
    settings: Settings
    flags: tuple[str, ...] = ()  # what normalising the request found (nul_replaced)


@dataclass(frozen=True)
class ChangeSite:
    """A place the change touches: a file and its first and last line."""

    path: str
    first_line: int
    last_line: int

    def inside(self, path: str | None, start_line: int | None, end_line: int | None) -> bool:
        """Whether the site lies within that span of that file."""
        return (path == self.path and start_line is not None and end_line is not None
                and start_line <= self.first_line and self.last_line <= end_line)


def change_sites_of(node: PlanNode) -> tuple[ChangeSite, ...]:
    """The insertion point and the plan node's change sites, in that order, each once."""
    points = ((node.insertion_point,) if node.insertion_point else ()) + node.change_sites
    sites = (ChangeSite(p.path, p.line, p.end_line or p.line) for p in points)
    return tuple(dict.fromkeys(sites))


@dataclass(frozen=True)
class DecisionInput:
    """The decision's inputs, fixed once assembled: the request, the pool and the gate's
    inputs (links, impact edges, nearness). Every attempt at deciding it — the preview,
    a write that decides again — reads the same object; nothing writes to it."""

    request: DecisionRequest  # with its absolute paths made relative to recon's root
    request_json: str  # as given (JSON escapes NUL as \u0000)
    request_sha256: str
    settings: Settings
    request_flags: tuple[str, ...]  # what normalising the request found (nul_replaced)
    pool: tuple[PoolItem, ...] = ()
    links: tuple[Link, ...] = ()  # link_no = position + 1
    edges: tuple[ImpactEdge, ...] = ()  # edge_no = position + 1
    nearness: Mapping[str, Nearness] = field(default_factory=dict)  # item id -> why near
    # Derived once from the fields above (__post_init__): what the stages read
    by_id: Mapping[str, PoolItem] = field(init=False, repr=False, compare=False)
    ref: str = field(init=False)  # content-addressed name, stable across re-constructions
    target_entity: str | None = field(init=False)
    validation_tests: frozenset[str] = field(init=False)  # entity keys of required_validation
    insertion_path: str | None = field(init=False)
    insertion_line: int | None = field(init=False)
    insertion_end_line: int | None = field(init=False)  # the edit site's last line
    # every place the change touches, the insertion point first: (path, first, last line)
    change_sites: tuple[ChangeSite, ...] = field(init=False)
    terms: frozenset[str] = field(init=False)  # obligation + criteria + question

    def __post_init__(self) -> None:
        node = self.request.plan_node
        point = node.insertion_point
        derived = {
            "by_id": {item.item_id: item for item in self.pool},
            "ref": decision_ref(self.request_sha256),
            "target_entity": node.target_entity,
            "validation_tests": frozenset(entity_key_of_test_id(t)
                                          for t in node.required_validation),
            "insertion_path": point.path if point else None,
            "insertion_line": point.line if point else None,
            "insertion_end_line": point.end_line if point else None,
            "change_sites": change_sites_of(node),
            "terms": obligation_terms(node),
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)  # frozen: set once, here


def decision_input(normalised: NormalisedRequest, pool: Sequence[PoolItem] = (),
                   links: Sequence[Link] = (), edges: Sequence[ImpactEdge] = (),
                   nearness: Mapping[str, Nearness] | None = None) -> DecisionInput:
    """The decision's inputs from its normalised request and what assembly made of it."""
    return DecisionInput(
        request=normalised.request, request_json=normalised.request_json,
        request_sha256=normalised.request_sha256, settings=normalised.settings,
        request_flags=normalised.flags, pool=tuple(pool), links=tuple(links),
        edges=tuple(edges), nearness=dict(nearness or {}),
    )


@dataclass(frozen=True)
class DecisionPolicy:
    """The store's policy rows a decision is decided by (``sql/stages/decision_policy``),
    read once per transaction that decides: the representation policy set it uses and
    the rows themselves (a write compares them with the preview's), with §3.3's
    representation table read out of them."""

    policy_set: str
    rows: tuple[PolicyRow, ...]
    representation: Mapping[str, str]  # role -> rendering

    @classmethod
    def from_rows(cls, rows: Sequence[PolicyRow]) -> DecisionPolicy:
        policy_set = next(name for kind, name, _ in rows if kind == POLICY_SET_ROW)
        representation = {role: rendering for kind, role, rendering in rows
                          if kind == REPRESENTATION_POLICY_ROWS}
        if not representation:
            raise ValueError(f"representation policy set {policy_set!r} has no rows")
        return cls(policy_set, tuple(rows), representation)


TokenCounter = Callable[[list[str]], list[int]]  # texts -> their token counts


class KeptPreview(NamedTuple):
    """A preview's rows left in its TEMP tables for the decision's write to copy."""

    decision_id: int  # the preview's own id of the decision, in those tables
    texts: dict[str, str]  # the texts its pool rows refer to, by digest
    # SQLite's data_version of the store as the preview read its policy rows (on the
    # decision's own connection): the same under the write lock means no other
    # connection committed since, so the rows are unchanged (None: not read)
    data_version: int | None = None


@dataclass
class Attempt:
    """One run of the stages over a decision's inputs — the gate, the ranking step and
    (c)–(g) — for one transaction that decides: the rolled-back preview, or a write that
    decides again because the policy rows changed in between. Begun by ``begin_attempt``
    (the assembly events its audit's first), extended by each stage, then written as it
    is: persistence reads it and never resets it."""

    inputs: DecisionInput
    policy: DecisionPolicy | None  # what it was decided by (None: the current arm, no gate)
    flags: list[str]  # the context's flags, the request's first
    audit: AuditLog
    window_task: str  # the task as the window shows it (cut only when pathological)
    ranking: RankOutcome | None = None  # the one call, when it was made
    # the preview's rows when they stay on the decision's connection for the write to
    # copy (SQLite: store.decision_connection); None when they were rolled back
    kept_preview: KeptPreview | None = None
    # (b) gate and (L) ranking
    residue: list[str] = field(default_factory=list)  # what the ranking step takes, pool order
    # a residual module outline -> the residual symbols of its file: one candidate of
    # the residue, not an outline competing with the symbols it lists (gate.py)
    outline_members: dict[str, list[str]] = field(default_factory=dict)
    priority: dict[str, int] = field(default_factory=dict)  # item id -> source priority
    rank_scores: list[RankScore] = field(default_factory=list)
    # (c)–(g): the working set each stage leaves for the next, then the window
    candidates: list[Candidate] = field(default_factory=list)
    token_count: int = 0
    budget_steps: list[BudgetStep] = field(default_factory=list)
    # what the write takes: the window's rows, and the token counts not cached yet
    entries: list[WindowEntry] = field(default_factory=list)
    new_counts: dict[str, int] = field(default_factory=dict)  # text digest -> count
    # texts the request as stored names by digest (an agent loop's steps), written to
    # evidence_text with the pool's: digest -> text
    request_texts: dict[str, str] = field(default_factory=dict)

    @property
    def outcome_columns(self) -> tuple[int, str]:
        """token_count and flags as the decision row holds them."""
        return self.token_count, ",".join(self.flags)


def begin_attempt(inputs: DecisionInput, policy: DecisionPolicy | None, *,
                  ranking: RankOutcome | None = None,
                  new_counts: Mapping[str, int] | None = None) -> Attempt:
    """A fresh run of the stages: the request's flags and one per unresolved entity, the
    assembly events as its audit's first. ``ranking``: the call already made for the
    decision; ``new_counts``: counts an earlier attempt made and the write has not
    cached yet."""
    audit = AuditLog()
    for item in inputs.pool:
        for event in item.events:
            if event.is_final:
                audit.final(item.item_id, ASSEMBLE, event.action, event.driver,
                            detail=event.detail)
            else:
                audit.add(item.item_id, ASSEMBLE, event.action, event.driver,
                          detail=event.detail)
    flags = [*inputs.request_flags,
             *(f"{UNRESOLVED_ENTITY_FLAG}:{item.item_id}" for item in inputs.pool
               if item.unresolved)]
    return Attempt(inputs=inputs, policy=policy, flags=flags, audit=audit,
                   window_task=inputs.request.task, ranking=ranking,
                   new_counts=dict(new_counts or {}))


def obligation_terms(node: PlanNode) -> frozenset[str]:
    """The decision's own terms: what the obligation, its question and criteria name."""
    return terms(" ".join([node.obligation, node.decision_question or "",
                           *node.acceptance_criteria]))


def check_request_ceiling(request: DecisionRequest, settings: Settings) -> None:
    """A request may only lower the store's ceiling (spec §3.7)."""
    if request.token_ceiling is not None and request.token_ceiling > settings.token_ceiling:
        raise RequestError(
            f"request.token_ceiling: {request.token_ceiling} is above the store's ceiling "
            f"{settings.token_ceiling}; a request may only lower it (spec §3.7)")


def normalised_request(request: DecisionRequest, request_json: str, request_sha256: str,
                       settings: Settings,
                       flags: Sequence[str] = ()) -> NormalisedRequest:
    """The request with the settings it is decided under: the store's, its own lower
    ceiling applied (checked: a request may only lower it)."""
    check_request_ceiling(request, settings)
    if request.token_ceiling is not None:
        settings = dataclasses.replace(settings, token_ceiling=request.token_ceiling)
    return NormalisedRequest(request, request_json, request_sha256, settings, tuple(flags))
