"""(e) Deduplication, spec §3.5: one rendering per distinct fact, before order and budget.

Fact identity (``fact_key``, computed at assembly and stored on the pool item,
so ``v_duplicate_fact`` shows the same groups in SQL):

* symbol identity — the entity key of code items (classes 1 and 3: the same
  definition reached through 03 and 04, a target also listed as related);
* normalized failure text — errors, tracebacks and test output with addresses,
  timings and whitespace normalized (class 2);
* definition site — config items by entity, else by normalized text;
* everything else — the item's own id (never a duplicate).

Within a group the strongest role survives (``ROLE_STRENGTH``), ties to the
lower item number; every other member's id is listed on the survivor
(``also E7``) and its final verdict is ``deduped`` with the survivor named.
Class 4 (one item under several obligations) is one pool item already: the
gate records the first link that reached it as its driver.

Mid-relevance filler: a signature-rendered item whose span lies inside a change
target or test the window shows whole and verbatim adds nothing the window does
not already show; it is dropped as ``deduped`` with the container named.
"""

from __future__ import annotations

import hashlib
import re

from .state import Attempt, Candidate
from .vocabulary import DEDUP, DEDUPED, FAILURE_KINDS, ROLE_STRENGTH, SYMBOL_FACT_KINDS

STAGE = DEDUP
CONTAINER_ROLES = frozenset({"change_target", "insertion_point", "test_reasoned_over"})
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_TIMING = re.compile(r"\b\d+(?:\.\d+)?\s*(?:s|ms|sec|seconds)\b")
_SPACE = re.compile(r"\s+")


def normalize_failure(text: str) -> str:
    text = _ADDRESS.sub("0x?", text)
    text = _TIMING.sub("?s", text)
    return _SPACE.sub(" ", text).strip()


def fact_key(kind: str, entity_key: str | None, content: str, item_id: str) -> str:
    if kind in SYMBOL_FACT_KINDS and entity_key:
        return f"symbol:{entity_key}"
    if kind in FAILURE_KINDS:
        digest = hashlib.sha256(normalize_failure(content).encode("utf-8")).hexdigest()
        return f"failure:{digest[:32]}"
    if kind == "config":
        if entity_key:
            return f"definition:{entity_key}"
        digest = hashlib.sha256(_SPACE.sub(" ", content).strip().encode("utf-8")).hexdigest()
        return f"definition:{digest[:32]}"
    return f"item:{item_id}"


def _strength(candidate: Candidate) -> tuple[int, int]:
    return (ROLE_STRENGTH.index(candidate.role), candidate.item.item_no)


def _inside(inner: Candidate, outer: Candidate) -> bool:
    a, b = inner.item, outer.item
    if a.path is None or a.path != b.path:
        return False
    if a.start_line is None or a.end_line is None or b.start_line is None or b.end_line is None:
        return False
    return (
        b.start_line <= a.start_line
        and a.end_line <= b.end_line
        and (a.start_line, a.end_line) != (b.start_line, b.end_line)
    )


def dedup(attempt: Attempt) -> None:
    audit = attempt.audit
    groups: dict[str, list[Candidate]] = {}
    for candidate in attempt.candidates:
        groups.setdefault(candidate.item.fact_key, []).append(candidate)
    survivors = []
    for key in sorted(groups, key=lambda k: min(c.item.item_no for c in groups[k])):
        members = sorted(groups[key], key=_strength)
        keep = members[0]
        for duplicate in members[1:]:
            keep.also_stands_for.append(duplicate.item_id)
            audit.final(
                duplicate.item_id, STAGE, DEDUPED, f"same fact as {keep.item_id}", detail=key
            )
        survivors.append(keep)

    # Containers show their whole text (not an AST slice or window compress cut) and hold
    # roles the budgeter cuts last, so what they contain stays shown.
    verbatim = [c for c in survivors if c.rendering == "verbatim"
                and c.role in CONTAINER_ROLES and c.text == c.item.content]
    kept = []
    for candidate in survivors:
        container = None
        if candidate.rendering in ("signature", "digest") and candidate.role != "transitive_impact":
            container = next((v for v in verbatim if _inside(candidate, v)), None)
        if container is not None:
            audit.final(
                candidate.item_id, STAGE, DEDUPED,
                f"filler: inside {container.item_id}, shown verbatim",
            )
            continue
        kept.append(candidate)
    kept.sort(key=lambda c: c.item.item_no)
    attempt.candidates = kept
