"""The A/B variants (spec §7.5 ablation, §7.6 lost-in-the-middle probe).

Each variant is a run of its own with everything else fixed. Source ablations
remove one context source from the request before construction; representation
ablations select another row set of ``representation_policy`` (migration 0004);
``litm_buried`` places the decision-critical items in the middle of the window.
"""

from __future__ import annotations

import dataclasses

from ..pipeline.options import LITM_BURIED, NO_IMPACT_DIGEST
from ..request import DecisionRequest, LiveState

DEFAULT = "default"
NO_RETRIEVED_CODE = "no_retrieved_code"
NO_HISTORY = "no_history"
NO_CONSTRAINTS = "no_constraints"
NO_PLAN_OBLIGATION = "no_plan_obligation"
ALL_VERBATIM = "all_verbatim"
NO_SIGNATURES = "no_signatures"
NO_DIGESTS = "no_digests"

# The obligation text a request keeps when its plan obligation is ablated: the node
# must still say something, so it says only what the task already says.
GENERIC_OBLIGATION = "Resolve the task."

VARIANTS = {
    DEFAULT: "the constructor as specified",
    NO_IMPACT_DIGEST: "§7.5 source: without the impact-DAG digest",
    NO_RETRIEVED_CODE: "§7.5 source: without retrieved code (04 hits)",
    NO_HISTORY: "§7.5 source: without history / live state",
    NO_CONSTRAINTS: "§7.5 source: without constraints (acceptance criteria)",
    NO_PLAN_OBLIGATION: "§7.5 source: without the plan obligation's own words",
    ALL_VERBATIM: "§7.5 representation: everything verbatim",
    NO_SIGNATURES: "§7.5 representation: bodies instead of signatures",
    NO_DIGESTS: "§7.5 representation: no digests",
    LITM_BURIED: "§7.6 probe: decision-critical items buried mid-window",
}


def apply_variant(request: DecisionRequest, variant: str) -> DecisionRequest:
    """The request as this variant sends it (source ablations edit the request)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r}: expected one of {', '.join(VARIANTS)}")
    node = request.plan_node
    request = dataclasses.replace(request, variant=variant)
    if variant == NO_RETRIEVED_CODE:
        return dataclasses.replace(
            request, evidence=tuple(e for e in request.evidence if e.source != "04")
        )
    if variant == NO_HISTORY:
        return dataclasses.replace(request, live=LiveState())
    if variant == NO_CONSTRAINTS:
        return dataclasses.replace(
            request, plan_node=dataclasses.replace(node, acceptance_criteria=())
        )
    if variant == NO_PLAN_OBLIGATION:
        return dataclasses.replace(
            request,
            plan_node=dataclasses.replace(
                node, obligation=GENERIC_OBLIGATION, decision_question=None
            ),
        )
    return request
