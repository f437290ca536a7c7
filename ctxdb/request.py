"""DecisionRequest: what the harness hands ctxdb for one model decision.

A dataclass tree, also accepted as JSON; JSON is validated against the
published schema ``decision_request.schema.json`` (shipped in the package).
Errors name the field by its JSON path and say what was expected.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .config import MIN_TOKEN_CEILING
from .request_limits import (
    ENTITY_KEY_MAX_CHARS,
    ID_MAX_CHARS,
    LIST_MAX_ITEMS,
    LONG_TEXT_MAX_CHARS,
    REQUEST_MAX_CHARS,
    SHORT_TEXT_MAX_CHARS,
    STORE_INTEGER_MAX,
    TASK_MAX_CHARS,
    VARIANT_MAX_CHARS,
    EncodingProblem,
    quote_value,
    refusal,
)

# named here too: ctxdb.request is where a caller finds them (docs/request.md, library.md)
from .request_limits import REQUEST_JSON_MAX_BYTES as REQUEST_JSON_MAX_BYTES
from .request_limits import RequestError as RequestError
from .request_schema import parse_request_json, validate_request
from .spec import ARMS, DECISION_TYPES, EVIDENCE_KINDS, EVIDENCE_SOURCES, IMPACT_EDGE_KINDS


class UnresolvedEntity(NamedTuple):
    """A pool item naming an entity whose text recon could not give."""

    item_id: str
    kind: str
    entity_key: str
    reason: str

    def describe(self) -> str:
        return f"item {self.item_id} ({self.kind}) names entity {self.entity_key!r}: {self.reason}"


class UnresolvedEntityError(RequestError):
    """Strict construction refused a request naming entities recon cannot resolve;
    ``unresolved`` lists each item, its key and why. Nothing of the decision is written."""

    def __init__(self, unresolved: list[UnresolvedEntity]):
        self.unresolved = tuple(unresolved)
        super().__init__(
            f"{len(self.unresolved)} item(s) name entities recon cannot resolve, and strict "
            "construction writes no window with a placeholder:\n  "
            + "\n  ".join(u.describe() for u in self.unresolved))


class UnresolvedEntityWarning(UserWarning):
    """A constructed window shows a placeholder for an entity recon could not resolve
    (the context also carries ``unresolved_entity:<item id>``)."""


@dataclass(frozen=True)
class InsertionPoint:
    path: str
    line: int
    end_line: int | None = None  # the edit site's last line, when it spans lines


@dataclass(frozen=True)
class PlanNode:
    node_id: str
    obligation: str
    target_entity: str | None = None
    preconditions: tuple[str, ...] = ()
    # entity keys the obligation depends on (spec §3.2 driver 1: "a dependency of the
    # current obligation"), e.g. the other locations of a multi-location change
    dependencies: tuple[str, ...] = ()
    required_validation: tuple[str, ...] = ()
    acceptance_criteria: tuple[str, ...] = ()
    decision_question: str | None = None
    insertion_point: InsertionPoint | None = None
    # the other places the change touches, when a fix spans several symbols (a nested
    # function and the one around it, a caller and its callee). Unlike the insertion
    # point, a site links no code into the window: it is shown only when an item holding
    # it is already a change target, which is then cut around it (docs/request.md)
    change_sites: tuple[InsertionPoint, ...] = ()


@dataclass(frozen=True)
class EvidenceInput:
    source: str
    kind: str
    provenance: str
    entity: str | None = None
    content: str | None = None
    score: float | None = None


@dataclass(frozen=True)
class ImpactEdgeInput:
    head: str
    tail: str
    kind: str
    depth: int


LIVE_EVENT_KINDS = ("error", "traceback", "tool_output", "test_output")


@dataclass(frozen=True)
class LiveEvent:
    """One observation in the harness's own order: its kind, its text, and the decision
    (``seq``) it arrived in — how old it is, for the aging rules."""

    kind: str
    text: str
    decision_seq: int | None = None
    # what produced it (`pytest tests/x.py`, `python repro.py`): a newer output of the same
    # command supersedes it, whatever either's kind — a passing re-run ends a traceback
    command: str | None = None


@dataclass(frozen=True)
class LiveState:
    patch: str | None = None
    errors: tuple[str, ...] = ()
    tracebacks: tuple[str, ...] = ()
    tool_outputs: tuple[str, ...] = ()
    test_outputs: tuple[str, ...] = ()
    # the observations in one order across kinds, oldest first (after the lists above,
    # whose order across kinds is not known)
    events: tuple[LiveEvent, ...] = ()


@dataclass(frozen=True)
class DecisionRequest:
    run_id: str
    instance_id: str
    seq: int
    decision_type: str
    task: str
    plan_node: PlanNode
    evidence: tuple[EvidenceInput, ...] = ()
    impact_edges: tuple[ImpactEdgeInput, ...] = ()
    derive_impact: bool = False
    live: LiveState = field(default_factory=LiveState)
    arm: str = "ctx08"
    variant: str = "default"
    # a lower ceiling for this decision only; never above the store's (spec §3.7: the
    # constructor does not raise its ceiling)
    token_ceiling: int | None = None

    @classmethod
    def from_json(cls, text: str | bytes) -> DecisionRequest:
        return cls.from_dict(parse_request_json(text))

    @classmethod
    def from_dict(cls, data: Any) -> DecisionRequest:
        """Checked as JSON against the schema (exact paths for a malformed structure),
        then as a dataclass by ``check()``: one set of rules for dicts, JSON and
        dataclasses alike (tests/test_hostile_input.py runs the same cases through all)."""
        validate_request(data)
        request = cls._build(data)
        request.check()
        return request

    @classmethod
    def _build(cls, data: dict[str, Any]) -> DecisionRequest:
        """The dataclass of ``data`` as given: lists become tuples, nothing is coerced
        (a value of the wrong type stays wrong, for ``check()`` to name)."""
        node = dict(data["plan_node"])
        point = node.pop("insertion_point", None)
        live = data.get("live", {})
        return cls(
            run_id=data["run_id"],
            instance_id=data["instance_id"],
            seq=data["seq"],
            decision_type=data["decision_type"],
            task=data["task"],
            plan_node=PlanNode(
                node_id=node["node_id"],
                obligation=node["obligation"],
                target_entity=node.get("target_entity"),
                preconditions=_tuple(node.get("preconditions", ())),
                dependencies=_tuple(node.get("dependencies", ())),
                required_validation=_tuple(node.get("required_validation", ())),
                acceptance_criteria=_tuple(node.get("acceptance_criteria", ())),
                decision_question=node.get("decision_question"),
                insertion_point=InsertionPoint(**point) if point is not None else None,
                change_sites=_objects(InsertionPoint, node.get("change_sites", ())),
            ),
            evidence=_objects(EvidenceInput, data.get("evidence", ())),
            impact_edges=_objects(ImpactEdgeInput, data.get("impact_edges", ())),
            derive_impact=data.get("derive_impact", False),
            live=LiveState(
                patch=live.get("patch"),
                errors=_tuple(live.get("errors", ())),
                tracebacks=_tuple(live.get("tracebacks", ())),
                tool_outputs=_tuple(live.get("tool_outputs", ())),
                test_outputs=_tuple(live.get("test_outputs", ())),
                events=_objects(LiveEvent, live.get("events", ())),
            ),
            arm=data.get("arm", "ctx08"),
            variant=data.get("variant", "default"),
            token_ceiling=data.get("token_ceiling"),
        )

    def to_dict(self) -> dict[str, Any]:
        """The request as JSON-ready data; ``from_dict(to_dict())`` round-trips."""
        node = self.plan_node
        point = node.insertion_point
        return {
            "run_id": self.run_id,
            "instance_id": self.instance_id,
            "seq": self.seq,
            "decision_type": self.decision_type,
            "task": self.task,
            "arm": self.arm,
            "variant": self.variant,
            "plan_node": {
                "node_id": node.node_id,
                "obligation": node.obligation,
                "target_entity": node.target_entity,
                "preconditions": list(node.preconditions),
                "dependencies": list(node.dependencies),
                "required_validation": list(node.required_validation),
                "acceptance_criteria": list(node.acceptance_criteria),
                "decision_question": node.decision_question,
                "insertion_point": _point_dict(point),
                # absent when there are none: older requests keep their hash
                **({"change_sites": [_point_dict(site) for site in node.change_sites]}
                   if node.change_sites else {}),
            },
            "evidence": [
                {k: v for k, v in vars(item).items() if v is not None} for item in self.evidence
            ],
            "impact_edges": [dict(vars(edge)) for edge in self.impact_edges],
            "derive_impact": self.derive_impact,
            "live": {
                "patch": self.live.patch,
                "errors": list(self.live.errors),
                "tracebacks": list(self.live.tracebacks),
                "tool_outputs": list(self.live.tool_outputs),
                "test_outputs": list(self.live.test_outputs),
            } | ({"events": [{k: v for k, v in vars(e).items() if v is not None}
                             for e in self.live.events]} if self.live.events else {}),
        } | ({"token_ceiling": self.token_ceiling} if self.token_ceiling is not None else {})

    def check(self) -> None:
        """Validate a request built in Python (the harness's fast path).

        The same rules as the published schema, checked directly on the dataclass
        without a JSON round trip (jsonschema costs ~0.3 ms per evidence item, more
        than the rest of a construct). tests/test_request.py holds the two to the
        same verdicts.
        """
        if self.__dict__.get(_CHECKED):
            return
        problems = _check_dataclass(self)
        if problems:
            raise refusal(problems)
        if _immutable(self):
            # Frozen all the way down: the verdict cannot change, so a harness that sends
            # the same request object again is not checked again.
            object.__setattr__(self, _CHECKED, True)

    def to_json(self) -> str:
        found = self.__dict__.get(_JSON)
        if found is None:
            found = json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=False)
            if _immutable(self):
                object.__setattr__(self, _JSON, found)
        return found


def entity_keys_named(request: DecisionRequest) -> Iterator[str]:
    """Every entity key and path the request names (what ``with_entity_paths`` rewrites)."""
    node = request.plan_node
    if node.target_entity:
        yield node.target_entity
    yield from node.dependencies
    yield from node.required_validation
    if node.insertion_point is not None:
        yield node.insertion_point.path
    for site in node.change_sites:
        yield site.path
    for item in request.evidence:
        if item.entity:
            yield item.entity
    for edge in request.impact_edges:
        yield edge.head
        yield edge.tail


def with_entity_paths(request: DecisionRequest,
                      rewrite: Callable[[str], str]) -> DecisionRequest:
    """The request with every entity key and path it names passed through ``rewrite``
    (key -> key): the plan node's target, dependencies, validation tests, insertion
    point and change sites, the evidence's entities and the impact edges' ends."""
    node = request.plan_node
    point = node.insertion_point
    node = dataclasses.replace(
        node,
        target_entity=rewrite(node.target_entity) if node.target_entity else None,
        dependencies=tuple(rewrite(key) for key in node.dependencies),
        required_validation=tuple(rewrite(test) for test in node.required_validation),
        insertion_point=dataclasses.replace(point, path=rewrite(point.path)) if point else None,
        change_sites=tuple(dataclasses.replace(site, path=rewrite(site.path))
                           for site in node.change_sites),
    )
    evidence = tuple(dataclasses.replace(item, entity=rewrite(item.entity)) if item.entity
                     else item for item in request.evidence)
    edges = tuple(dataclasses.replace(edge, head=rewrite(edge.head), tail=rewrite(edge.tail))
                  for edge in request.impact_edges)
    return dataclasses.replace(request, plan_node=node, evidence=evidence, impact_edges=edges)


def _point_dict(point: InsertionPoint | None) -> dict[str, Any] | None:
    if point is None:
        return None
    data = {"path": point.path, "line": point.line}
    if point.end_line is not None:  # absent when unset: older requests keep their hash
        data["end_line"] = point.end_line
    return data


# Memos kept on an immutable request object (not dataclass fields: equality ignores them).
_CHECKED, _JSON = "_ctxdb_checked", "_ctxdb_json"


def _immutable(request: DecisionRequest) -> bool:
    """The request is built of this module's frozen classes (exactly: not look-alikes or
    subclasses) and tuples all the way down, so nothing in it can change."""
    node, live, point = request.plan_node, request.live, request.plan_node.insertion_point
    return (
        type(request) is DecisionRequest
        and type(node) is PlanNode
        and type(live) is LiveState
        and (point is None or type(point) is InsertionPoint)
        and all(type(v) is tuple for v in (
            request.evidence, request.impact_edges, node.preconditions, node.dependencies,
            node.required_validation, node.acceptance_criteria, node.change_sites,
            live.errors, live.tracebacks, live.tool_outputs, live.test_outputs, live.events,
        ))
        and all(type(site) is InsertionPoint for site in node.change_sites)
        and all(type(event) is LiveEvent for event in live.events)
        and all(type(item) is EvidenceInput for item in request.evidence)
        and all(type(edge) is ImpactEdgeInput for edge in request.impact_edges)
    )



_MISSING = object()

def _tuple(value: Any) -> Any:
    """A JSON list as the dataclass's tuple; anything else as it is, for check() to name
    (so: Any, whatever the field's type says)."""
    return tuple(value) if isinstance(value, list) else value


def _objects(cls: type, value: Any) -> Any:
    """A JSON list of objects as a tuple of ``cls``; anything else as it is."""
    return tuple(cls(**item) for item in value) if isinstance(value, list) else value


def entity_key_problems(request: DecisionRequest) -> list[str]:
    """Entity keys that are not path::Qual.name, path:START-END or path, by JSON path."""
    from .entities import parse_entity_key

    named = [("request.plan_node.target_entity", request.plan_node.target_entity)]
    named += [(f"request.plan_node.dependencies[{n}]", key)
              for n, key in enumerate(request.plan_node.dependencies)]
    named += [(f"request.evidence[{n}].entity", item.entity)
              for n, item in enumerate(request.evidence)]
    problems = []
    for path, key in named:
        if not isinstance(key, str) or not key:
            continue
        try:
            ref = parse_entity_key(key)
        except ValueError as exc:
            reason = str(exc).removeprefix(f"entity {key!r}: ")
            problems.append(f"{path}: {quote_value(key)}: {reason}")
            continue
        if ref.end_line is not None and ref.end_line > STORE_INTEGER_MAX:
            problems.append(f"{path}: {quote_value(key)}: expected lines from 1 to "
                            f"{STORE_INTEGER_MAX}")
    return problems


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _finite(number: float) -> bool:
    try:
        return math.isfinite(number)
    except OverflowError:  # an int past a float's range
        return False


class _Checks:
    """The dataclass check's findings: each problem by JSON path, in the order the
    schema's fields come, and the request's characters of text so far."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.characters = 0  # all the request's text, against REQUEST_MAX_CHARS

    def text(self, path: str, value: object, max_chars: int, *, optional: bool = False,
             empty: bool = False) -> None:
        if value is None and optional:
            return
        if not isinstance(value, str) or not (value or empty):
            wanted = ("a string" if empty else "a non-empty string") + (" or null" if optional
                                                                        else "")
            self.problems.append(f"{path}: expected {wanted}, got {quote_value(value)}")
            return
        self.characters += len(value)
        if len(value) > max_chars:
            self.problems.append(f"{path}: expected at most {max_chars} characters, "
                                 f"got {len(value)}")
        elif not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                self.problems.append(EncodingProblem(
                    f"{path}: expected text UTF-8 can hold, got a lone surrogate "
                    f"U+{ord(value[exc.start]):04X} at character {exc.start}"))

    def integer(self, path: str, value: object, minimum: int, *,
                optional: bool = False) -> bool:
        """Whether ``value`` is an integer in range (or an allowed null)."""
        if value is None and optional:
            return True
        if (not isinstance(value, int) or isinstance(value, bool)
                or not minimum <= value <= STORE_INTEGER_MAX):
            self.problems.append(f"{path}: expected an integer from {minimum} to "
                                 f"{STORE_INTEGER_MAX}{' or null' if optional else ''}, got "
                                 f"{quote_value(value)}")
            return False
        return True

    def one_of(self, path: str, value: object, allowed: Collection[str]) -> None:
        if not isinstance(value, str) or value not in allowed:
            self.problems.append(f"{path}: {quote_value(value)} is not one of {list(allowed)}")

    def listing(self, path: str, values: object) -> Sequence[object] | None:
        """``values`` when it is a list within LIST_MAX_ITEMS (its items can be checked),
        else None."""
        if not isinstance(values, (tuple, list)):
            self.problems.append(f"{path}: expected a list, got {quote_value(values)}")
            return None
        if len(values) > LIST_MAX_ITEMS:
            self.problems.append(f"{path}: expected at most {LIST_MAX_ITEMS} items, "
                                 f"got {len(values)}")
            return None
        return values

    def strings(self, path: str, values: object, max_chars: int) -> None:
        items = self.listing(path, values)
        if items is not None:
            for number, value in enumerate(items):
                self.text(f"{path}[{number}]", value, max_chars, empty=True)

    def fields(self, path: str, value: object, cls: type) -> dict[str, Any] | None:
        """``value``'s fields of ``cls`` (an object with those attributes will do)."""
        if type(value) is cls:
            return vars(value)  # this module's frozen class: every field is there
        found = {name: getattr(value, name, _MISSING) for name in _field_names(cls)}
        if any(v is _MISSING for v in found.values()):
            self.problems.append(f"{path}: expected a {cls.__name__}, got {quote_value(value)}")
            return None
        return found


def _check_dataclass(request: DecisionRequest) -> list[str]:
    """The schema's rules (and what it cannot say) on the dataclass, by JSON path: its own
    fields, then the plan node's, the evidence's, the impact edges' and the live state's;
    the relations between fields only once the structure holds."""
    checks = _Checks()
    _check_request_fields(checks, request)
    # each part checked whatever the others' verdicts, so every problem is named
    node_sound = _check_plan_node(checks, request.plan_node)
    evidence_sound = _check_evidence(checks, request.evidence)
    _check_impact_edges(checks, request.impact_edges)
    live_sound = _check_live(checks, request.live)
    if checks.characters > REQUEST_MAX_CHARS:
        checks.problems.append(f"request: expected at most {REQUEST_MAX_CHARS} characters of "
                               f"text in all, got {checks.characters}")
    if node_sound and evidence_sound and live_sound and not checks.problems:
        checks.problems += entity_key_problems(request) + live_event_problems(request)
    return checks.problems


def _check_request_fields(checks: _Checks, request: DecisionRequest) -> None:
    checks.text("request.run_id", request.run_id, ID_MAX_CHARS)
    checks.text("request.instance_id", request.instance_id, ID_MAX_CHARS)
    checks.integer("request.seq", request.seq, 1)
    checks.one_of("request.decision_type", request.decision_type, DECISION_TYPES)
    checks.text("request.task", request.task, TASK_MAX_CHARS)
    checks.one_of("request.arm", request.arm, ARMS)
    checks.text("request.variant", request.variant, VARIANT_MAX_CHARS)
    checks.integer("request.token_ceiling", request.token_ceiling, MIN_TOKEN_CEILING,
                   optional=True)
    if not isinstance(request.derive_impact, bool):
        checks.problems.append(f"request.derive_impact: expected true or false, got "
                               f"{quote_value(request.derive_impact)}")


def _check_plan_node(checks: _Checks, plan_node: object) -> bool:
    """Whether the plan node is one (its fields can be read)."""
    path = "request.plan_node"
    node = checks.fields(path, plan_node, PlanNode)
    if node is None:
        return False
    checks.text(f"{path}.node_id", node["node_id"], ID_MAX_CHARS)
    checks.text(f"{path}.obligation", node["obligation"], SHORT_TEXT_MAX_CHARS)
    checks.text(f"{path}.target_entity", node["target_entity"], ENTITY_KEY_MAX_CHARS,
                optional=True, empty=True)
    checks.strings(f"{path}.preconditions", node["preconditions"], SHORT_TEXT_MAX_CHARS)
    checks.strings(f"{path}.dependencies", node["dependencies"], ENTITY_KEY_MAX_CHARS)
    checks.strings(f"{path}.required_validation", node["required_validation"],
                   ENTITY_KEY_MAX_CHARS)
    checks.strings(f"{path}.acceptance_criteria", node["acceptance_criteria"],
                   SHORT_TEXT_MAX_CHARS)
    checks.text(f"{path}.decision_question", node["decision_question"], SHORT_TEXT_MAX_CHARS,
                optional=True, empty=True)
    if node["insertion_point"] is not None:
        _check_insertion_point(checks, node["insertion_point"], f"{path}.insertion_point")
    sites = checks.listing(f"{path}.change_sites", node["change_sites"])
    for number, site in enumerate(sites or ()):
        _check_insertion_point(checks, site, f"{path}.change_sites[{number}]")
    return True


def _check_insertion_point(checks: _Checks, insertion_point: object, path: str) -> None:
    """An insertion point or a change site: a path, its first line and optional last."""
    point = checks.fields(path, insertion_point, InsertionPoint)
    if point is None:
        return
    checks.text(f"{path}.path", point["path"], ENTITY_KEY_MAX_CHARS)
    line_ok = checks.integer(f"{path}.line", point["line"], 1)
    # the edit's last line comes no earlier than its first, when the first is sound
    checks.integer(f"{path}.end_line", point["end_line"], point["line"] if line_ok else 1,
                   optional=True)


def _check_evidence(checks: _Checks, evidence: object) -> bool:
    """Whether the evidence is a list of evidence items (their entities can be parsed)."""
    items = checks.listing("request.evidence", evidence)
    if items is None:
        return False
    sound = True
    for number, item in enumerate(items):
        if type(item) is EvidenceInput and _plainly_sound(item):
            # what the checks below would count, and nothing for them to name
            checks.characters += (len(item.provenance) + len(item.entity or "")
                                  + len(item.content or ""))
            continue
        path = f"request.evidence[{number}]"
        values = checks.fields(path, item, EvidenceInput)
        if values is None:
            sound = False
            continue
        checks.one_of(f"{path}.source", values["source"], EVIDENCE_SOURCES)
        checks.one_of(f"{path}.kind", values["kind"], EVIDENCE_KINDS)
        checks.text(f"{path}.provenance", values["provenance"], SHORT_TEXT_MAX_CHARS,
                    empty=True)
        if values["entity"] is None and values["content"] is None:
            checks.problems.append(f"{path}: expected at least one of the fields entity, "
                                   "content")
        checks.text(f"{path}.entity", values["entity"], ENTITY_KEY_MAX_CHARS, optional=True)
        checks.text(f"{path}.content", values["content"], LONG_TEXT_MAX_CHARS, optional=True,
                    empty=True)
        score = values["score"]
        if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))
                                  or not _finite(score)):
            checks.problems.append(f"{path}.score: expected a finite number or null, got "
                                   f"{quote_value(score)}")
    return sound


def _plainly_sound(item: EvidenceInput) -> bool:
    """Whether ``_check_evidence`` would find nothing wrong in ``item``, decided without
    naming its fields' paths (most items: a known source and kind, ASCII text within its
    limits, a finite score). False only sends the item through the full checks, which
    name what is wrong; at 256 items this skips ~1,500 f-strings and calls a decision."""
    entity, content, provenance, score = item.entity, item.content, item.provenance, item.score
    return (type(item.source) is str and item.source in EVIDENCE_SOURCES
            and type(item.kind) is str and item.kind in EVIDENCE_KINDS
            and type(provenance) is str and len(provenance) <= SHORT_TEXT_MAX_CHARS
            and provenance.isascii()
            and (entity is not None or content is not None)
            and (entity is None or (type(entity) is str
                                    and 0 < len(entity) <= ENTITY_KEY_MAX_CHARS
                                    and entity.isascii()))
            and (content is None or (type(content) is str
                                     and len(content) <= LONG_TEXT_MAX_CHARS
                                     and content.isascii()))
            and (score is None or (type(score) in (int, float) and _finite(score))))


def _check_impact_edges(checks: _Checks, impact_edges: object) -> None:
    edges = checks.listing("request.impact_edges", impact_edges)
    if edges is None:
        return
    for number, edge in enumerate(edges):
        path = f"request.impact_edges[{number}]"
        values = checks.fields(path, edge, ImpactEdgeInput)
        if values is None:
            continue
        checks.text(f"{path}.head", values["head"], ENTITY_KEY_MAX_CHARS)
        checks.text(f"{path}.tail", values["tail"], ENTITY_KEY_MAX_CHARS)
        checks.one_of(f"{path}.kind", values["kind"], IMPACT_EDGE_KINDS)
        checks.integer(f"{path}.depth", values["depth"], 1)


def _check_live(checks: _Checks, live_state: object) -> bool:
    """Whether the live state is one and its events a list (their order can be checked)."""
    live = checks.fields("request.live", live_state, LiveState)
    if live is None:
        return False
    checks.text("request.live.patch", live["patch"], LONG_TEXT_MAX_CHARS, optional=True,
                empty=True)
    for name in ("errors", "tracebacks", "tool_outputs", "test_outputs"):
        checks.strings(f"request.live.{name}", live[name], LONG_TEXT_MAX_CHARS)
    events = checks.listing("request.live.events", live["events"])
    if events is None:
        return False
    for number, event in enumerate(events):
        _check_live_event(checks, f"request.live.events[{number}]", event)
    return True


def _check_live_event(checks: _Checks, path: str, event: object) -> None:
    values = checks.fields(path, event, LiveEvent)
    if values is None:
        return
    checks.one_of(f"{path}.kind", values["kind"], LIVE_EVENT_KINDS)
    checks.text(f"{path}.text", values["text"], LONG_TEXT_MAX_CHARS)
    command = values["command"]
    checks.text(f"{path}.command", command, SHORT_TEXT_MAX_CHARS, optional=True)
    if isinstance(command, str) and command and not command.strip():
        checks.problems.append(f"{path}.command: expected a non-empty string or null, "
                               f"got {quote_value(command)}")


def live_event_problems(request: DecisionRequest) -> list[str]:
    """An event cannot arrive after the decision it is given to."""
    problems = []
    for number, event in enumerate(request.live.events):
        at = getattr(event, "decision_seq", None)
        if at is None:
            continue
        if (not isinstance(at, int) or isinstance(at, bool) or at < 1
                or (isinstance(request.seq, int) and at > request.seq)):
            problems.append(f"request.live.events[{number}].decision_seq: expected an integer "
                            f"from 1 to the request's seq ({quote_value(request.seq)}), or null, "
                            f"got {quote_value(at)}")
    return problems


NUL = "\x00"
# PostgreSQL text cannot hold NUL; every backend shows the same visible stand-in, so a
# window is byte-identical on both. The request as given (request_json, where JSON
# escapes it as \u0000) keeps the original.
NUL_STAND_IN = "\u2400"


def storable_text(value: str) -> str:
    """A text a store can hold, on every backend alike: a NUL becomes the visible
    stand-in, a lone surrogate (undecodable bytes) U+FFFD."""
    if NUL in value:
        value = value.replace(NUL, NUL_STAND_IN)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        # through UTF-16: one U+FFFD for each lone surrogate (its three UTF-8 bytes
        # would give three), and a high one before a low one is the character they make
        value = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return value


def storable_value(value: Any) -> Any:
    """A JSON-like value (texts in lists and dicts) with each text ``storable_text``."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, list):
        return [storable_value(v) for v in value]
    if isinstance(value, dict):
        return {k: storable_value(v) for k, v in value.items()}
    return value


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace(NUL, NUL_STAND_IN)
    if isinstance(value, tuple):
        return tuple(_without_nul(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(
            value,
            **{f.name: _without_nul(getattr(value, f.name)) for f in dataclasses.fields(value)},
        )
    return value


def has_nul(request: DecisionRequest) -> bool:
    return bool(_without_nul(request) != request)


def without_nul(request: DecisionRequest) -> DecisionRequest:
    """The request with NUL characters replaced by a visible stand-in (U+2400)."""
    replaced: DecisionRequest = _without_nul(request)
    return replaced
