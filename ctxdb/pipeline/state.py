"""One decision's state, as the stages read and extend it.

``Decision`` is made from the request (``new_decision``), filled by assembly with the
pool and the gate's inputs — which stay as they are for the rest of the decision, so a
preview before the ranking call and the write after it share them — and then, for each
transaction that writes its rows (``begin_write``: the rolled-back preview, or a write
that decides again), by the gate, the ranking step and the stages (c)–(g), each taking
the candidates the previous one left — before the write lock is taken. ``persist``
writes it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import NamedTuple

from ..config import Settings
from ..entities import entity_key_of_test_id, is_module_key
from ..request import DecisionRequest, RequestError
from ..spec import BLOCKS, TIERS
from ..terms import terms
from .audit import AuditLog
from .vocabulary import ASSEMBLE, SPEC_POLICY_SET, UNRESOLVED_ENTITY_FLAG
from .window_text import decision_ref, item_block, item_header

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
        if self.rendering == "verbatim":
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


@dataclass(slots=True)
class Nearness:
    shared_terms: list[str] = field(default_factory=list)
    recon_hops: int | None = None
    nearest_link_no: int | None = None
    near_score: float = 0.0  # gate_inputs.near_score: residual iff >= NEAR_MIN_SCORE


RANK_OK = "ok"  # rank_call.parse_status of a call whose answer was used


@dataclass
class RankOutcome:
    """What the one call returned, ready for the audit row."""

    model: str
    base_url: str
    request_body: dict
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


@dataclass
class Decision:
    request: DecisionRequest
    request_json: str  # as given (JSON escapes NUL as \u0000)
    request_sha256: str
    settings: Settings
    request_flags: tuple[str, ...]  # what normalising the request found (nul_replaced)
    # What the stages read about the decision itself
    ref: str  # content-addressed name, stable across re-constructions (masking pointers)
    target_entity: str | None
    validation_tests: frozenset[str]  # entity keys of required_validation
    insertion_path: str | None
    insertion_line: int | None
    insertion_end_line: int | None  # the edit site's last line, when it spans lines
    terms: frozenset[str]  # obligation + criteria + question: the sliding window's terms
    # (a) assembly and the gate's inputs: fixed once made
    pool: list[PoolItem] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)  # link_no = position + 1
    edges: list[ImpactEdge] = field(default_factory=list)  # edge_no = position + 1
    nearness: dict[str, Nearness] = field(default_factory=dict)  # item id -> why near
    # Per write (a preview before the ranking call is rolled back and begun again)
    flags: list[str] = field(default_factory=list)  # the context's flags, request's first
    decision_id: int | None = None
    new_run: bool = False  # this decision started its run
    policy_set: str = SPEC_POLICY_SET
    text_digests: set[str] = field(default_factory=set)  # the evidence_text rows it uses
    row_outcome: tuple[int | None, str] = (None, "")  # token_count, flags the row was given
    audit: AuditLog = field(default_factory=AuditLog)
    # (b) gate and (L) ranking
    residue: list[str] = field(default_factory=list)  # what the ranking step takes, pool order
    # a residual module outline -> the residual symbols of its file: one candidate of
    # the residue, not an outline competing with the symbols it lists (gate.py)
    outline_members: dict[str, list[str]] = field(default_factory=dict)
    priority: dict[str, int] = field(default_factory=dict)  # item id -> source priority
    ranking: RankOutcome | None = None  # the one call, when it was made
    rank_scores: list[RankScore] = field(default_factory=list)
    # (c)–(g): the working set each stage leaves for the next, then the window
    candidates: list[Candidate] = field(default_factory=list)
    token_count: int = 0
    window_task: str = ""  # the task as the window shows it (cut only when pathological)
    budget_steps: list[BudgetStep] = field(default_factory=list)

    @property
    def by_id(self) -> dict[str, PoolItem]:
        return {item.item_id: item for item in self.pool}

    def take_row(self, decision_id: int, new_run: bool) -> None:
        """The stages already ran (before the write lock): only the row is this one."""
        self.decision_id, self.new_run = decision_id, new_run

    def begin_write(self, decision_id: int | None, new_run: bool, policy_set: str) -> None:
        """Start the stages afresh for a decision row: the assembly events are its first."""
        self.decision_id, self.new_run, self.policy_set = decision_id, new_run, policy_set
        self.flags = list(self.request_flags) + [
            f"{UNRESOLVED_ENTITY_FLAG}:{item.item_id}" for item in self.pool if item.unresolved]
        self.audit = AuditLog()
        self.residue, self.priority, self.rank_scores = [], {}, []
        self.outline_members = {}
        self.candidates, self.budget_steps = [], []
        self.token_count, self.window_task = 0, self.request.task
        for item in self.pool:
            for event in item.events:
                if event.is_final:
                    self.audit.final(item.item_id, ASSEMBLE, event.action, event.driver,
                                     detail=event.detail)
                else:
                    self.audit.add(item.item_id, ASSEMBLE, event.action, event.driver,
                                   detail=event.detail)


def obligation_terms(node) -> frozenset[str]:
    """The decision's own terms: what the obligation, its question and criteria name."""
    return terms(" ".join([node.obligation, node.decision_question or "",
                           *node.acceptance_criteria]))


def check_request_ceiling(request: DecisionRequest, settings: Settings) -> None:
    """A request may only lower the store's ceiling (spec §3.7)."""
    if request.token_ceiling is not None and request.token_ceiling > settings.token_ceiling:
        raise RequestError(
            f"request.token_ceiling: {request.token_ceiling} is above the store's ceiling "
            f"{settings.token_ceiling}; a request may only lower it (spec §3.7)")


def new_decision(request: DecisionRequest, request_json: str, request_sha256: str,
                 settings: Settings, flags: list[str] | None = None) -> Decision:
    check_request_ceiling(request, settings)
    if request.token_ceiling is not None:
        settings = dataclasses.replace(settings, token_ceiling=request.token_ceiling)
    return Decision(
        request=request, request_json=request_json, request_sha256=request_sha256,
        settings=settings, request_flags=tuple(flags or ()), flags=list(flags or ()),
        ref=decision_ref(request_sha256), window_task=request.task, **_read_from(request),
    )


def use_request(decision: Decision, request: DecisionRequest) -> None:
    """Build the decision from ``request`` instead (the same request with its absolute
    paths made relative): what the stages read of it follows."""
    decision.request, decision.window_task = request, request.task
    for name, value in _read_from(request).items():
        setattr(decision, name, value)


def _read_from(request: DecisionRequest) -> dict:
    """The fields of Decision the stages read about the request itself."""
    node = request.plan_node
    point = node.insertion_point
    return dict(
        target_entity=node.target_entity,
        validation_tests=frozenset(entity_key_of_test_id(t) for t in node.required_validation),
        insertion_path=point.path if point else None,
        insertion_line=point.line if point else None,
        insertion_end_line=point.end_line if point else None,
        terms=obligation_terms(node),
    )
