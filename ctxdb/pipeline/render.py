"""(c) Representation choice, spec §3.3: role → rendering, from the policy table.

The role of each admitted item is derived deterministically from its kind and
the driver that admitted it; the rendering comes from the
``representation_policy`` rows of the decision's policy set. A role with no row
defaults to ``signature`` and is logged as a table miss. Expansion of a
signature/digest to verbatim is a gated exception: only when the obligation's
target is the entity itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..entities import is_test_entity
from ..spec import COMPRESSED_TARGET_BYTES
from .aging import observation_of, stale_arrivals
from .state import Attempt, Candidate, DecisionInput
from .vocabulary import (
    CHANGE_TARGET_KINDS,
    DRIVER_ROLES,
    IMPACT,
    REJECTED,
    RENDER,
    REQUIREMENT_KINDS,
    TRANSIENT_KINDS,
)
from .window_text import mask_pointer

STAGE = RENDER
DEFAULT_RENDERING = "signature"  # §3.3 caps: "cheapest safe"
# A signature is a header, not a body: a longer one is cut (and marked).
SIGNATURE_MAX_CHARS = 400
# a module's signature is its outline: the header line of each def and class, at most
# this many (the A/B runner's skeletons list 60 symbols, ctxdb.ab.decisions)
MODULE_OUTLINE_MAX_LINES = 60
_HEADER_LINE = re.compile(r"^\s*(?:async\s+)?(?:def|class)\s.*$", re.MULTILINE)

_DEF_LINE = re.compile(r"^\s*(?:@.*\n\s*)*(?:async\s+)?(?:def|class)\s", re.MULTILINE)


# Live state ages (P6, and the observation masking of the paper's §2.8): a tool output
# that arrived more than this many decisions before the current one is masked to its
# pointer, its raw text kept in the store.
TOOL_OUTPUT_MAX_AGE_DECISIONS = 3
def derive_role(candidate: Candidate, inputs: DecisionInput,
                stale: frozenset[int] = frozenset()) -> str:
    """``stale``: the arrival numbers P6 supersedes (``aging.stale_arrivals``)."""
    item = candidate.item
    if item.kind in REQUIREMENT_KINDS and item.source == "07":
        return "requirement"
    if item.kind in TRANSIENT_KINDS and item.source in ("live", "patch"):
        return "stale" if item.arrival_no in stale else "live_current"
    if item.kind in CHANGE_TARGET_KINDS:
        return "change_target"
    if item.entity_key and item.entity_key == inputs.target_entity:
        return "change_target"
    role = DRIVER_ROLES.get(candidate.driver)
    if role is None and candidate.driver.startswith(IMPACT):
        role = "direct_impact"
    if role is None:
        role = "test_named" if is_test_entity(item.entity_key) else "related_symbol"
    if role == "related_symbol" and is_test_entity(item.entity_key):
        role = (
            "test_reasoned_over" if item.entity_key in inputs.validation_tests else "test_named"
        )
    return role


def _header_end(content: str, start: int) -> int:
    """Index just past the colon that ends a def/class header starting at ``start``:
    the first colon outside brackets and string literals (annotations and defaults
    may hold colons and parentheses of their own)."""
    depth, quote, index = 0, None, start
    while index < len(content):
        char = content[index]
        if quote:
            if char == "\\":
                index += 1
            elif content.startswith(quote, index):
                index += len(quote) - 1
                quote = None
        elif char in "\"'":
            quote = content[index : index + 3] if content[index : index + 3] in ('"""', "'''") \
                else char
            index += len(quote) - 1
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == ":" and depth == 0:
            return index + 1
        index += 1
    return len(content)


def truncated_head(content: str) -> str:
    """The leading lines that fit COMPRESSED_TARGET_BYTES, marked when cut."""
    lines, used = content.split("\n"), 0
    kept: list[str] = []
    for line in lines:
        size = len(line.encode("utf-8")) + 1
        if kept and used + size > COMPRESSED_TARGET_BYTES:
            break
        kept.append(line)
        used += size
    if len(kept) < len(lines):
        kept.append(f"# … truncated: {len(kept)} of {len(lines)} lines")
    return "\n".join(kept)


def signature_of(candidate: Candidate) -> str:
    """Name, params, return and one-line doc; from recon when known, else the def/class
    header parsed from the text — never the body (it goes to the ranking prompt)."""
    item = candidate.item
    if item.signature:
        return item.signature
    content = item.content
    if item.entity_key is not None and item.is_outline:
        return module_outline(item.entity_key, content)
    match = _DEF_LINE.search(content)
    if match:
        head = content[match.start() : _header_end(content, match.end())]
        text = "\n".join(line.rstrip() for line in head.split("\n")).strip("\n")
    else:
        text = content.strip().split("\n")[0] if content.strip() else ""
    if len(text) > SIGNATURE_MAX_CHARS:
        text = text[: SIGNATURE_MAX_CHARS - 1] + "…"
    return text


def module_outline(path: str, content: str) -> str:
    """A module's signature: the header line of each def and class in it, in order."""
    headers = [line.rstrip() for line in _HEADER_LINE.findall(content)]
    lines = [f"# {path}: outline"] + headers[:MODULE_OUTLINE_MAX_LINES]
    if len(headers) > MODULE_OUTLINE_MAX_LINES:
        lines.append(f"# … {len(headers) - MODULE_OUTLINE_MAX_LINES} more")
    return "\n".join(lines)


def _test_name_and_expectation(candidate: Candidate) -> str:
    signature = signature_of(candidate)
    for line in candidate.item.content.splitlines():
        stripped = line.strip()
        if stripped.startswith("assert") or "pytest.raises" in stripped:
            return f"{signature}\n    # expects: {stripped[:160]}"
    return signature


def _call_site_lines(candidate: Candidate, head_name: str | None) -> list[str]:
    if not head_name:
        return []
    lines = []
    start = candidate.item.start_line or 1
    for offset, line in enumerate(candidate.item.content.split("\n")):
        if re.search(rf"\b{re.escape(head_name)}\b", line) and not _DEF_LINE.match(line):
            lines.append(f"    L{start + offset}: {line.strip()[:160]}")
    return lines


def rendered_text(candidate: Candidate, inputs: DecisionInput) -> str:
    rendering = candidate.rendering
    item = candidate.item
    if rendering in ("verbatim", "digest"):
        return item.content
    if rendering == "truncated":
        return truncated_head(item.content)
    if candidate.role == "test_named":
        return _test_name_and_expectation(candidate)
    signature = signature_of(candidate)
    if candidate.role in ("direct_impact", "config_consumer") and inputs.target_entity:
        # §3.3: signatures + only the call sites / binding line, never consumer bodies
        head_name = inputs.target_entity.rsplit("::", 1)[-1].rsplit(".", 1)[-1]
        sites = _call_site_lines(candidate, head_name)
        if sites:
            return signature + "\n" + "\n".join(sites)
    return signature


def render(attempt: Attempt, policy: Mapping[str, str]) -> None:
    """Assign role and rendering by ``policy`` (role -> rendering); the candidates that
    stay (stale ones are dropped)."""
    candidates, audit, inputs = attempt.candidates, attempt.audit, attempt.inputs
    stale = stale_arrivals(observation_of(c.item) for c in candidates
                           if c.item.arrival_no is not None)
    kept = []
    for candidate in candidates:
        candidate.role = derive_role(candidate, inputs, stale)
        rendering = policy.get(candidate.role)
        if rendering is None:
            rendering = DEFAULT_RENDERING
            audit.add(candidate.item_id, STAGE, "table_miss",
                      f"role {candidate.role} not in policy")
        if (
            rendering in ("signature", "digest")
            and inputs.target_entity
            and candidate.item.entity_key == inputs.target_entity
        ):
            audit.add(candidate.item_id, STAGE, "expanded",
                      "obligation target is the entity itself")
            rendering = "verbatim"
        candidate.rendering = rendering
        if rendering == "omitted":
            audit.final(candidate.item_id, STAGE, REJECTED, f"{candidate.role}: omitted (§3.3, P6)")
            continue
        candidate.text = rendered_text(candidate, inputs)
        audit.add(candidate.item_id, STAGE, "rendered", f"{candidate.role} -> {rendering}")
        _mask_if_old(candidate, attempt)
        kept.append(candidate)
    attempt.candidates = kept


def _mask_if_old(candidate: Candidate, attempt: Attempt) -> None:
    """A tool output older than TOOL_OUTPUT_MAX_AGE_DECISIONS decisions: its pointer."""
    item, seq = candidate.item, attempt.inputs.request.seq
    if (item.kind == "tool_output" and item.arrived_in_seq is not None
            and seq - item.arrived_in_seq > TOOL_OUTPUT_MAX_AGE_DECISIONS):
        candidate.masked = True
        candidate.rendering = "truncated"
        candidate.text = mask_pointer(candidate, attempt.inputs.ref)
        attempt.audit.add(item.item_id, STAGE, "masked_by_age",
                           f"from decision {item.arrived_in_seq}, {seq - item.arrived_in_seq}"
                           f" decisions ago (> {TOOL_OUTPUT_MAX_AGE_DECISIONS})")
