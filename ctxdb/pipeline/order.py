"""(f) Ordering, spec §3.6: critical content at the edges, support in the middle.

Front block: the requirement (plan obligation, acceptance criteria), then each
change target with its insertion-point code right after it. Back block: the
tests the decision reasons over, the patch, then the failing state with the
freshest failure output last (highest recency attention). Middle: supporting
material — signatures, digests, impact neighbours, tool output — strongest role
first. Tiers (§3.7) are set here too, from the same roles.
"""

from __future__ import annotations

from .options import stage_options
from .state import BACK, FRONT, MIDDLE, STABLE_CORE, TRANSIENT, WORKING_SET, Attempt, Candidate
from .vocabulary import (
    EDGE_CRITICAL_ROLES,
    FAILURE_KINDS,
    ORDER,
    ROLE_STRENGTH,
    STABLE_CORE_ROLES,
)

STAGE = ORDER
LIVE_OUTPUT_KINDS = frozenset({"error", "traceback", "tool_output", "test_output"})


def classify(candidate: Candidate) -> None:
    item = candidate.item
    if candidate.role in STABLE_CORE_ROLES:
        candidate.tier = STABLE_CORE
    elif item.kind in LIVE_OUTPUT_KINDS and item.source == "live":
        candidate.tier = TRANSIENT
    else:
        candidate.tier = WORKING_SET
    candidate.edge_critical = candidate.role in EDGE_CRITICAL_ROLES and item.kind != "tool_output"


def _front(candidates: list[Candidate]) -> list[Candidate]:
    requirements = sorted(
        (c for c in candidates if c.role == "requirement"),
        key=lambda c: (c.item.kind != "plan_node", c.item.item_no),
    )
    targets = sorted((c for c in candidates if c.role == "change_target"),
                     key=lambda c: c.item.item_no)
    points = sorted((c for c in candidates if c.role == "insertion_point"),
                    key=lambda c: c.item.item_no)
    ordered = list(requirements)
    for target in targets:
        ordered.append(target)
        # insertion-point code stays adjacent to the edit target it belongs to
        for point in [p for p in points if p.item.path == target.item.path]:
            ordered.append(point)
            points.remove(point)
    return ordered + points


def _back(candidates: list[Candidate]) -> list[Candidate]:
    tests = sorted((c for c in candidates if c.role == "test_reasoned_over"),
                   key=lambda c: c.item.item_no)
    live = [c for c in candidates if c.edge_critical and c.role == "live_current"]
    patches = [c for c in live if c.item.kind == "patch"]
    failures = sorted(
        (c for c in live if c.item.kind in FAILURE_KINDS),
        key=lambda c: (c.item.arrival_no or 0, c.item.item_no),
    )
    return tests + patches + failures


def order(attempt: Attempt) -> None:
    """Place the working set. The §7.6 probe (variant litm_buried) puts the edge items in
    the middle of the supporting material instead."""
    candidates, audit = attempt.candidates, attempt.audit
    for candidate in candidates:
        classify(candidate)
    front = _front(candidates)
    in_front = {id(c) for c in front}
    back = [c for c in _back(candidates) if id(c) not in in_front]
    placed = {id(c) for c in front + back}
    middle = sorted(
        (c for c in candidates if id(c) not in placed),
        key=lambda c: (ROLE_STRENGTH.index(c.role), c.item.item_no),
    )
    if stage_options(attempt.inputs.request.variant).bury_edge_items:
        half = len(middle) // 2
        middle = middle[:half] + front + back + middle[half:]
        front, back = [], []
    for block, members in ((FRONT, front), (MIDDLE, middle), (BACK, back)):
        for candidate in members:
            candidate.block = block
    ordered = front + middle + back
    for position, candidate in enumerate(ordered, start=1):
        audit.add(
            candidate.item_id, STAGE, "placed", f"{candidate.block} #{position}",
            detail="edge-critical" if candidate.edge_critical else "supporting",
        )
    attempt.candidates = ordered
