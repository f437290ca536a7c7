"""DecisionRequest: what the harness hands ctxdb for one model decision.

A dataclass tree, also accepted as JSON; JSON is validated against the
published schema ``decision_request.schema.json`` (shipped in the package).
Errors name the field by its JSON path and say what was expected.
"""

from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from .paths import PACKAGE_DIR

SCHEMA_FILE = PACKAGE_DIR / "decision_request.schema.json"


class RequestError(ValueError):
    """A decision request does not match the schema; the message names the field."""


@dataclass(frozen=True)
class InsertionPoint:
    path: str
    line: int


@dataclass(frozen=True)
class PlanNode:
    node_id: str
    obligation: str
    target_entity: str | None = None
    preconditions: tuple[str, ...] = ()
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


@dataclass(frozen=True)
class LiveState:
    patch: str | None = None
    errors: tuple[str, ...] = ()
    tracebacks: tuple[str, ...] = ()
    tool_outputs: tuple[str, ...] = ()
    test_outputs: tuple[str, ...] = ()


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
            ),
            arm=data.get("arm", "ctx08"),
            variant=data.get("variant", "default"),
        )

    def to_dict(self) -> dict:
        """The request as JSON-ready data; ``from_dict(to_dict())`` round-trips."""
        data = asdict(self)
        data["evidence"] = [
            {k: v for k, v in item.items() if v is not None} for item in data["evidence"]
        ]
        return json.loads(json.dumps(data))  # tuples to lists, stable types

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=False)


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
