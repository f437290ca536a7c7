"""What every stage after the gate needs to know about the decision itself."""

from __future__ import annotations

from dataclasses import dataclass

from ..entities import entity_key_of_test_id
from ..request import DecisionRequest
from ..terms import terms


# A window must be byte-identical for the same request, so what it prints to name
# its own decision (the masking pointer) is the request's hash, not the row id.
DECISION_REF_PREFIX = "req-"
DECISION_REF_HEX_CHARS = 12


def decision_ref(request_sha256: str) -> str:
    return DECISION_REF_PREFIX + request_sha256[:DECISION_REF_HEX_CHARS]


@dataclass(frozen=True)
class DecisionFacts:
    decision_id: int
    decision_ref: str  # content-addressed name of the decision, stable across re-constructions
    decision_type: str
    target_entity: str | None
    validation_tests: frozenset[str]  # entity keys of required_validation
    insertion_path: str | None
    insertion_line: int | None
    decision_terms: frozenset[str]  # obligation + criteria + question: the sliding window's terms
    policy_set: str = "spec"

    @classmethod
    def from_request(
        cls, decision_id: int, request: DecisionRequest, request_sha256: str, policy_set: str = "spec"
    ):
        node = request.plan_node
        text = " ".join(
            [node.obligation, node.decision_question or "", *node.acceptance_criteria]
        )
        point = node.insertion_point
        return cls(
            decision_id=decision_id,
            decision_ref=decision_ref(request_sha256),
            decision_type=request.decision_type,
            target_entity=node.target_entity,
            validation_tests=frozenset(entity_key_of_test_id(t) for t in node.required_validation),
            insertion_path=point.path if point else None,
            insertion_line=point.line if point else None,
            decision_terms=frozenset(terms(text)),
            policy_set=policy_set,
        )
