"""DecisionRequest: what the harness hands ctxdb for one model decision.

A dataclass tree, also accepted as JSON; JSON is validated against the
published schema ``decision_request.schema.json`` (shipped in the package).
Errors name the field by its JSON path and say what was expected.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .config import MIN_TOKEN_CEILING
from .paths import PACKAGE_DIR

SCHEMA_FILE = PACKAGE_DIR / "decision_request.schema.json"
# The schema's maxLength for entity keys: they are printed in every item header.
ENTITY_KEY_MAX_CHARS = 1000


class RequestError(ValueError):
    """A decision request does not match the schema; the message names the field."""


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
    def from_json(cls, text: str | bytes) -> "DecisionRequest":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RequestError(f"request is not valid JSON: {exc}") from exc
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Any) -> "DecisionRequest":
        validate_request(data)
        request = cls._build(data)
        # what the schema cannot say: relations between fields, as the dataclass check does
        problems = entity_key_problems(request) + live_event_problems(request)
        if problems:
            raise RequestError("invalid decision request:\n  " + "\n  ".join(problems[:10]))
        return request

    @classmethod
    def _build(cls, data: dict) -> "DecisionRequest":
        node = dict(data["plan_node"])
        point = node.pop("insertion_point", None)
        live = data.get("live") or {}
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
                preconditions=tuple(node.get("preconditions", ())),
                dependencies=tuple(node.get("dependencies", ())),
                required_validation=tuple(node.get("required_validation", ())),
                acceptance_criteria=tuple(node.get("acceptance_criteria", ())),
                decision_question=node.get("decision_question"),
                insertion_point=InsertionPoint(**point) if point else None,
            ),
            evidence=tuple(EvidenceInput(**item) for item in data.get("evidence", ())),
            impact_edges=tuple(ImpactEdgeInput(**edge) for edge in data.get("impact_edges", ())),
            derive_impact=bool(data.get("derive_impact", False)),
            live=LiveState(
                patch=live.get("patch"),
                errors=tuple(live.get("errors", ())),
                tracebacks=tuple(live.get("tracebacks", ())),
                tool_outputs=tuple(live.get("tool_outputs", ())),
                test_outputs=tuple(live.get("test_outputs", ())),
                events=tuple(LiveEvent(**event) for event in live.get("events", ())),
            ),
            arm=data.get("arm", "ctx08"),
            variant=data.get("variant", "default"),
            token_ceiling=data.get("token_ceiling"),
        )

    def to_dict(self) -> dict:
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
            raise RequestError("invalid decision request:\n  " + "\n  ".join(problems[:10]))
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


def entity_keys_named(request: DecisionRequest):
    """Every entity key and path the request names (what ``with_entity_paths`` rewrites)."""
    node = request.plan_node
    if node.target_entity:
        yield node.target_entity
    yield from node.dependencies
    yield from node.required_validation
    if node.insertion_point is not None:
        yield node.insertion_point.path
    for item in request.evidence:
        if item.entity:
            yield item.entity
    for edge in request.impact_edges:
        yield edge.head
        yield edge.tail


def with_entity_paths(request: DecisionRequest, rewrite) -> DecisionRequest:
    """The request with every entity key and path it names passed through ``rewrite``
    (key -> key): the plan node's target, dependencies, validation tests and insertion
    point, the evidence's entities and the impact edges' ends."""
    node = request.plan_node
    point = node.insertion_point
    node = dataclasses.replace(
        node,
        target_entity=rewrite(node.target_entity) if node.target_entity else None,
        dependencies=tuple(rewrite(key) for key in node.dependencies),
        required_validation=tuple(rewrite(test) for test in node.required_validation),
        insertion_point=dataclasses.replace(point, path=rewrite(point.path)) if point else None,
    )
    evidence = tuple(dataclasses.replace(item, entity=rewrite(item.entity)) if item.entity
                     else item for item in request.evidence)
    edges = tuple(dataclasses.replace(edge, head=rewrite(edge.head), tail=rewrite(edge.tail))
                  for edge in request.impact_edges)
    return dataclasses.replace(request, plan_node=node, evidence=evidence, impact_edges=edges)


def _point_dict(point: InsertionPoint | None) -> dict | None:
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
            node.required_validation, node.acceptance_criteria, live.errors, live.tracebacks,
            live.tool_outputs, live.test_outputs, live.events,
        ))
        and all(type(event) is LiveEvent for event in live.events)
        and all(type(item) is EvidenceInput for item in request.evidence)
        and all(type(edge) is ImpactEdgeInput for edge in request.impact_edges)
    )


@functools.cache
def _validator():
    from jsonschema import Draft202012Validator

    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _path(error) -> str:
    parts = ["request"]
    for part in error.absolute_path:
        parts.append(f"[{part}]" if isinstance(part, int) else f".{part}")
    return "".join(parts)


def _message(error) -> str:
    if error.validator == "anyOf" and all("required" in s for s in error.validator_value):
        fields = [name for option in error.validator_value for name in option["required"]]
        return f"expected at least one of the fields {', '.join(fields)}"
    return error.message


def validate_request(data: Any) -> None:
    """Raise RequestError naming every field that breaks the schema (first ten)."""
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        lines = [f"{_path(e)}: {_message(e)}" for e in errors[:10]]
        raise RequestError("invalid decision request:\n  " + "\n  ".join(lines))


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
        if isinstance(key, str) and key:
            try:
                parse_entity_key(key)
            except ValueError as exc:
                problems.append(f"{path}: {exc}")
    return problems


def _check_dataclass(request: DecisionRequest) -> list[str]:
    from .spec import (
        ARMS,
        DECISION_TYPES,
        EVIDENCE_KINDS,
        EVIDENCE_SOURCES,
        IMPACT_EDGE_KINDS,
    )

    problems: list[str] = []

    def text(path: str, value, *, optional: bool = False, max_length: int | None = None):
        if value is None and optional:
            return
        if not isinstance(value, str) or not value:
            problems.append(f"{path}: expected a non-empty string, got {value!r}")
        elif max_length is not None and len(value) > max_length:
            problems.append(f"{path}: expected at most {max_length} characters")

    def one_of(path: str, value, allowed):
        if value not in allowed:
            problems.append(f"{path}: {value!r} is not one of {list(allowed)}")

    def strings(path: str, values):
        for number, value in enumerate(values):
            if not isinstance(value, str):
                problems.append(f"{path}[{number}]: expected a string, got {value!r}")

    text("request.run_id", request.run_id, max_length=200)
    text("request.instance_id", request.instance_id, max_length=200)
    if not isinstance(request.seq, int) or isinstance(request.seq, bool) or request.seq < 1:
        problems.append(f"request.seq: expected an integer >= 1, got {request.seq!r}")
    one_of("request.decision_type", request.decision_type, DECISION_TYPES)
    text("request.task", request.task)
    one_of("request.arm", request.arm, ARMS)
    ceiling = request.token_ceiling
    if ceiling is not None and (not isinstance(ceiling, int) or isinstance(ceiling, bool)
                                or ceiling < MIN_TOKEN_CEILING):
        problems.append(f"request.token_ceiling: expected an integer >= {MIN_TOKEN_CEILING}"
                        f" or null, got {str(ceiling)[:40]!r}")
    text("request.variant", request.variant, max_length=100)
    node = request.plan_node
    text("request.plan_node.node_id", node.node_id, max_length=200)
    text("request.plan_node.obligation", node.obligation)
    if node.target_entity is not None and not isinstance(node.target_entity, str):
        problems.append("request.plan_node.target_entity: expected a string or null")
    elif node.target_entity is not None and len(node.target_entity) > ENTITY_KEY_MAX_CHARS:
        problems.append(f"request.plan_node.target_entity: expected at most "
                        f"{ENTITY_KEY_MAX_CHARS} characters")
    for name in ("preconditions", "dependencies", "required_validation", "acceptance_criteria"):
        strings(f"request.plan_node.{name}", getattr(node, name))
    point = node.insertion_point
    if point is not None:
        text("request.plan_node.insertion_point.path", point.path)
        if not isinstance(point.line, int) or isinstance(point.line, bool) or point.line < 1:
            problems.append("request.plan_node.insertion_point.line: expected an integer >= 1")
        elif point.end_line is not None and (
            not isinstance(point.end_line, int) or isinstance(point.end_line, bool)
            or point.end_line < point.line
        ):
            problems.append("request.plan_node.insertion_point.end_line: expected an integer "
                            ">= line, or null")
    problems += entity_key_problems(request)
    for number, item in enumerate(request.evidence):
        path = f"request.evidence[{number}]"
        one_of(f"{path}.source", item.source, EVIDENCE_SOURCES)
        one_of(f"{path}.kind", item.kind, EVIDENCE_KINDS)
        if not isinstance(item.provenance, str):
            problems.append(f"{path}.provenance: expected a string")
        if item.entity is None and item.content is None:
            problems.append(f"{path}: expected at least one of the fields entity, content")
        text(f"{path}.entity", item.entity, optional=True, max_length=ENTITY_KEY_MAX_CHARS)
        if item.content is not None and not isinstance(item.content, str):
            problems.append(f"{path}.content: expected a string")
        if item.score is not None and (
            isinstance(item.score, bool) or not isinstance(item.score, (int, float))
        ):
            problems.append(f"{path}.score: expected a number or null")
    for number, edge in enumerate(request.impact_edges):
        path = f"request.impact_edges[{number}]"
        text(f"{path}.head", edge.head)
        text(f"{path}.tail", edge.tail)
        one_of(f"{path}.kind", edge.kind, IMPACT_EDGE_KINDS)
        if not isinstance(edge.depth, int) or isinstance(edge.depth, bool) or edge.depth < 1:
            problems.append(f"{path}.depth: expected an integer >= 1")
    live = request.live
    if live.patch is not None and not isinstance(live.patch, str):
        problems.append("request.live.patch: expected a string or null")
    for name in ("errors", "tracebacks", "tool_outputs", "test_outputs"):
        strings(f"request.live.{name}", getattr(live, name))
    if not isinstance(live.events, (tuple, list)):
        problems.append("request.live.events: expected a list")
        return problems
    for number, event in enumerate(live.events):
        path = f"request.live.events[{number}]"
        if not isinstance(event, LiveEvent):
            problems.append(f"{path}: expected a LiveEvent")
            continue
        one_of(f"{path}.kind", event.kind, LIVE_EVENT_KINDS)
        text(f"{path}.text", event.text)
        if event.command is not None and (not isinstance(event.command, str)
                                          or not event.command.strip()):
            problems.append(f"{path}.command: expected a non-empty string or null")
    problems += live_event_problems(request)
    return problems


def live_event_problems(request: DecisionRequest) -> list[str]:
    """An event cannot arrive after the decision it is given to (both paths)."""
    problems = []
    for number, event in enumerate(request.live.events):
        at = getattr(event, "decision_seq", None)
        if at is None:
            continue
        if (not isinstance(at, int) or isinstance(at, bool) or at < 1
                or (isinstance(request.seq, int) and at > request.seq)):
            problems.append(f"request.live.events[{number}].decision_seq: expected an integer "
                            f"from 1 to the request's seq ({request.seq}), or null")
    return problems


NUL = "\x00"
# PostgreSQL text cannot hold NUL; every backend shows the same visible stand-in, so a
# window is byte-identical on both. The request as given (request_json, where JSON
# escapes it as \u0000) keeps the original.
NUL_STAND_IN = "\u2400"


def _without_nul(value):
    if isinstance(value, str):
        return value.replace(NUL, NUL_STAND_IN)
    if isinstance(value, tuple):
        return tuple(_without_nul(v) for v in value)
    if dataclasses.is_dataclass(value):
        return dataclasses.replace(
            value, **{f.name: _without_nul(getattr(value, f.name)) for f in dataclasses.fields(value)}
        )
    return value


def has_nul(request: DecisionRequest) -> bool:
    return _without_nul(request) != request


def without_nul(request: DecisionRequest) -> DecisionRequest:
    """The request with NUL characters replaced by a visible stand-in (U+2400)."""
    return _without_nul(request)
