"""§4 — the one learned step: relevance ranking of the gate's residue.

Fires iff the gate left 1..RESIDUE_MAX (32) residual items and an endpoint is
configured. ONE chat-completions call through the official ``openai`` client:
temperature 0, max_completion_tokens 1024, a JSON-schema response format, no
retries (the client's own retry is switched off). The prompt is assembled in the
spec's order — current obligation (+ acceptance criteria), decision question,
residue as {id, kind, signature} — signatures only, never bodies or raw output.

A candidate is admitted iff its score ≥ the configured threshold. Any parse
failure, schema violation, out-of-range score, unknown id, more than 32
rankings, HTTP error, a body over RANK_RESPONSE_MAX_BYTES or no answer within the one
deadline (the configured timeout bounds the whole call, not each read) rejects the
whole residue: no second call, and never an exception out of ``construct``.
Model output is data: only the admit/reject verdicts it yields reach the window.

The call is made by :func:`rank_residue` before the decision's write transaction
opens (construct.py), so the store's write lock is never held across it; in the write
transaction :func:`resolve_residue` turns its answer into verdicts — or, for a residue
the step may not rank (over 32, or no endpoint configured), applies the fold rule — and
the call is recorded (persist.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import threading
import time
from dataclasses import dataclass

from ..spec import ADMITTED_MAX, RANK_MAX_COMPLETION_TOKENS, RANK_TEMPERATURE, RESIDUE_MAX
from .gate_inputs import NEAR_HOP_SCORE
from .render import signature_of
from .state import RANK_OK, Attempt, Candidate, PoolItem, RankOutcome, RankScore
from .vocabulary import FOLD, FOLDED, OUTLINE_OF_FOLDED_IN, RANK, RANK_ADMITTED, REJECTED

STAGE = RANK
# The fold rule admits an item this many recon edges from its bucket's symbol at most —
# a neighbour's neighbour (the callee of a callee of a failing test). Set on the whole
# development set with no ranker (docs/ab.md, "The development set"): at 1 hop the localize
# window kept 0.16 of the edited code its pool held, at 2 hops 0.39, for a median of
# 519 -> 1,460 tokens.
FOLD_MAX_RECON_HOPS = 2
# ... or an item whose near_score reaches a direct recon neighbour's structural score: a
# term of its own, or a few terms that few other items share, say as much as an edge.
# Set on the whole development set with no ranker (docs/ab.md, "The development set"): the
# localize window kept 0.851 of the edited code its pool held with recon edges alone,
# 0.942 with this (lone outlines by edges only), for a median of 3,213 -> 3,538 tokens
# (without that exception 0.950 at 3,655; at 1.5, 0.926; at 0.5, 0.967 at 3,894).
FOLD_MIN_NEAR_SCORE = NEAR_HOP_SCORE[1]
# context flags: the residue went through the fold rule, and why
FOLDED_OVER_CAP = "residue_folded_over_32"
FOLDED_NO_RANKER = "residue_folded_no_ranker"

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You rank evidence candidates for one decision of a coding agent. For each candidate, "
    "give relevance_score in [0, 1]: how much the decision needs it to discharge the "
    "current obligation and answer the decision question. Rank every candidate once, by "
    "its candidate_id. Reply with JSON only, matching the given schema."
)
RESPONSE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["rankings"],
    "properties": {
        "rankings": {
            "type": "array",
            "maxItems": RESIDUE_MAX,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["candidate_id", "relevance_score"],
                "properties": {
                    "candidate_id": {"type": "string"},
                    "relevance_score": {"type": "number", "minimum": 0, "maximum": 1},
                },
            },
        }
    },
}
RESPONSE_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "rankings", "strict": True, "schema": RESPONSE_SCHEMA},
}

# parse_status values written to rank_call
OK = RANK_OK
PARSE_ERROR = "parse_error"
SCHEMA_VIOLATION = "schema_violation"
SCORE_OUT_OF_RANGE = "score_out_of_range"
UNKNOWN_CANDIDATE = "unknown_candidate"
TOO_MANY_RANKINGS = "too_many_rankings"
HTTP_ERROR = "http_error"
TIMEOUT = "timeout"
CONNECTION_ERROR = "connection_error"
RESPONSE_TOO_LARGE = "response_too_large"
# The most of a ranking response read: 32 rankings are about 4 KB of JSON; 1 MiB leaves a
# verbose model room and keeps a hostile body out of memory.
RANK_RESPONSE_MAX_BYTES = 1 << 20
ERROR_MAX_CHARS = 500  # how much of an error message rank_call.error keeps
# The residue at write time is not the one ranked: the gate reads only the decision's own
# rows (the same in preview and write) and the store's policy tables, so only a change of
# those between the two can do it.
RESIDUE_CHANGED = "residue_changed"


@dataclass(frozen=True)
class ResidueCandidate:
    item_id: str
    kind: str
    signature: str


def build_request_body(
    model: str,
    obligation: str,
    acceptance_criteria: tuple[str, ...],
    decision_question: str | None,
    residue: list[ResidueCandidate],
    response_format: str = "json_schema",
) -> dict:
    """The exact chat-completions body, in the spec's order, deterministic."""
    user = {
        "current_obligation": {
            "obligation": obligation,
            "acceptance_criteria": list(acceptance_criteria),
        },
        "decision_question": decision_question or "",
        "residue": [{"id": c.item_id, "kind": c.kind, "signature": c.signature} for c in residue],
    }
    return {
        "model": model,
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            # sort_keys=False keeps the spec's order: obligation, question, residue
            {"role": "user", "content": json.dumps(user, ensure_ascii=False, indent=1)},
        ],
        "temperature": RANK_TEMPERATURE,
        "max_completion_tokens": RANK_MAX_COMPLETION_TOKENS,
        "response_format": RESPONSE_FORMAT if response_format == "json_schema"
        else {"type": "json_object"},
    }


def parse_rankings(text: str | None,
                   residue_ids: set[str]) -> tuple[str, dict[str, float], str | None]:
    """(status, scores, error) for a response text; scores only when status is OK."""
    if text is None:
        return PARSE_ERROR, {}, "the response had no message content"
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # nested past the parser: not an answer
        return PARSE_ERROR, {}, _short(f"not JSON: {exc}")
    if not isinstance(data, dict) or set(data) != {"rankings"} or not isinstance(
        data["rankings"], list
    ):
        return SCHEMA_VIOLATION, {}, "expected exactly {\"rankings\": [...]}"
    rankings = data["rankings"]
    if len(rankings) > RESIDUE_MAX:
        return TOO_MANY_RANKINGS, {}, f"{len(rankings)} rankings > {RESIDUE_MAX}"
    scores: dict[str, float] = {}
    for number, entry in enumerate(rankings):
        if not isinstance(entry, dict) or set(entry) != {"candidate_id", "relevance_score"}:
            return (SCHEMA_VIOLATION, {},
                    f"rankings[{number}]: expected candidate_id and relevance_score only")
        candidate, score = entry["candidate_id"], entry["relevance_score"]
        if not isinstance(candidate, str):
            return SCHEMA_VIOLATION, {}, f"rankings[{number}].candidate_id: expected a string"
        if candidate not in residue_ids:
            return (UNKNOWN_CANDIDATE, {},
                    f"rankings[{number}].candidate_id {candidate!r} is not in the residue")
        if candidate in scores:
            return SCHEMA_VIOLATION, {}, f"rankings[{number}]: {candidate} ranked twice"
        if (isinstance(score, bool) or not isinstance(score, (int, float))
                or not math.isfinite(score)):
            return SCHEMA_VIOLATION, {}, f"rankings[{number}].relevance_score: expected a number"
        if not 0.0 <= float(score) <= 1.0:
            return (SCORE_OUT_OF_RANGE, {},
                    f"rankings[{number}].relevance_score {score} outside [0, 1]")
        scores[candidate] = float(score)
    return OK, scores, None


def rank_residue(settings, obligation, acceptance_criteria, decision_question,
                 residue) -> RankOutcome:
    """Make the ONE call and parse it, within one deadline. Never raises for endpoint or
    model failures: every outcome is a status for the rank_call row.

    The deadline (``rank_timeout_seconds``) bounds the whole call — connect, send and a
    body that trickles in — not each read: the call runs in a thread of its own and the
    decision waits for it at most that long. A call still running then is abandoned (it
    holds no lock and writes nothing) and recorded as a timeout; the thread itself stops
    at its next read past the deadline, or at its read timeout. At most
    RANK_RESPONSE_MAX_BYTES of the body are read."""
    body = build_request_body(
        settings.rank_model, obligation, acceptance_criteria, decision_question, residue,
        settings.rank_response_format,
    )
    outcome = RankOutcome(settings.rank_model, settings.rank_base_url, body, PARSE_ERROR,
                          tuple(c.item_id for c in residue))
    answer: list[_Answer] = []

    def call() -> None:
        try:
            answer.append(_post(settings, body, deadline))
        except Exception as exc:  # anything else the client raises: still one recorded call
            answer.append(_Answer(status=PARSE_ERROR, error=_short(f"{type(exc).__name__}: {exc}")))

    worker = threading.Thread(target=call, name="ctxdb-rank-call", daemon=True)
    start = time.perf_counter()
    deadline = start + settings.rank_timeout_seconds
    worker.start()
    worker.join(settings.rank_timeout_seconds)
    outcome.latency_ms = (time.perf_counter() - start) * 1000
    if not answer:
        outcome.status = TIMEOUT
        outcome.error = (f"no complete answer within the deadline of "
                         f"{settings.rank_timeout_seconds:g} s")
        return outcome
    got = answer[0]
    outcome.prompt_tokens, outcome.completion_tokens = got.prompt_tokens, got.completion_tokens
    outcome.response_text = got.text
    if got.status is not None:
        outcome.status, outcome.error = got.status, got.error
        return outcome
    outcome.status, outcome.scores, outcome.error = parse_rankings(
        got.text, {c.item_id for c in residue})
    return outcome


@dataclass
class _Answer:
    """What the endpoint sent: a message text, or the status of a failed call."""

    text: str | None = None
    status: str | None = None  # None: a message was read; else why not
    error: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


def _post(settings, body: dict, deadline: float) -> _Answer:
    """The HTTP call itself (in the call's thread): the official client's request, the
    body read by hand so its size is capped, then the chat.completion envelope."""
    import httpx
    import openai

    client = openai.OpenAI(
        base_url=settings.rank_base_url,
        api_key=settings.rank_api_key or "unused",
        timeout=settings.rank_timeout_seconds,
        max_retries=0,  # §4: never a second call
    )
    try:
        with client.chat.completions.with_streaming_response.create(**body) as response:
            data = bytearray()
            for chunk in response.iter_bytes():
                if time.perf_counter() > deadline:  # a body that trickles in: give up
                    return _Answer(status=TIMEOUT, error="the answer was still arriving at "
                                                         "the deadline")
                data += chunk
                if len(data) > RANK_RESPONSE_MAX_BYTES:
                    return _Answer(status=RESPONSE_TOO_LARGE,
                                   error=f"the response is over {RANK_RESPONSE_MAX_BYTES} bytes")
    except (openai.APITimeoutError, httpx.TimeoutException) as exc:
        return _Answer(status=TIMEOUT, error=_short(str(exc) or type(exc).__name__))
    except openai.APIStatusError as exc:
        return _Answer(status=HTTP_ERROR, error=_short(f"HTTP {exc.status_code}: {exc.message}"),
                       text=_short(_body_of(exc)))
    except (openai.APIConnectionError, httpx.TransportError) as exc:
        return _Answer(status=CONNECTION_ERROR, error=_short(str(exc) or type(exc).__name__))
    except (openai.OpenAIError, httpx.HTTPError) as exc:
        return _Answer(status=PARSE_ERROR, error=_short(f"{type(exc).__name__}: {exc}"))
    finally:
        client.close()
    return _envelope(bytes(data))


def _body_of(error) -> str:
    """What an error response said (kept on the rank_call row), if it was read."""
    try:
        return error.response.text if error.response is not None else ""
    except Exception:  # a streamed body not read, or not text: nothing to keep
        return ""


def _envelope(data: bytes) -> _Answer:
    """The assistant message of a chat.completion body; a body that is not one (not
    UTF-8, not JSON, nested past the parser, another shape) is a parse error."""
    try:
        envelope = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return _Answer(status=PARSE_ERROR, error=f"the response is not UTF-8 (byte {exc.start})")
    except (ValueError, RecursionError) as exc:
        return _Answer(status=PARSE_ERROR, error=_short(f"the response is not JSON: {exc}"))
    try:
        text = envelope["choices"][0]["message"]["content"]
        if text is not None and not isinstance(text, str):
            raise TypeError("content is not a string")
    except (KeyError, IndexError, TypeError) as exc:
        return _Answer(status=PARSE_ERROR,
                       error=_short(f"not a chat.completion ({type(exc).__name__}: {exc})"))
    usage = envelope.get("usage") if isinstance(envelope, dict) else None
    usage = usage if isinstance(usage, dict) else {}
    return _Answer(text=text, prompt_tokens=_count(usage.get("prompt_tokens")),
                   completion_tokens=_count(usage.get("completion_tokens")))


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _short(text: str) -> str:
    """An error as rank_call.error keeps it: its start, never a whole hostile body."""
    return text if len(text) <= ERROR_MAX_CHARS else text[: ERROR_MAX_CHARS - 1] + "…"


_announced_unavailable: set[tuple[str, str]] = set()


def announce_unavailable(store_url: str, run_id: str) -> None:
    """Say once per run (of this store, in this process) that ranking is off; never crash."""
    if (store_url, run_id) not in _announced_unavailable:
        _announced_unavailable.add((store_url, run_id))
        log.warning(
            "ctxdb: no ranking endpoint configured (CTXDB_RANK_BASE_URL / [rank].base_url): "
            "run %s folds the gate's residue instead (flag %s)", run_id, FOLDED_NO_RANKER
        )


def residue_candidates(attempt: Attempt) -> list[ResidueCandidate]:
    """The gate's residue as the ranking prompt shows it: id, kind, signature — the
    signature under its entity key, so two `def raw_amount(self, …)` of two classes
    read apart."""
    by_id = attempt.inputs.by_id
    return [
        ResidueCandidate(item_id, by_id[item_id].kind, _named_signature(by_id[item_id]))
        for item_id in attempt.residue
    ]


def _named_signature(item: PoolItem) -> str:
    signature = signature_of(Candidate(item=item, driver="residual"))
    if item.entity_key and item.entity_key not in signature:
        return f"{item.entity_key}\n{signature}"
    return signature


def resolve_residue(attempt: Attempt) -> None:
    """§4: the ranked residue's verdicts. A residue the step may not rank — over 32, or
    no endpoint configured — goes through the fold rule, flagged on the context; a call
    that was made and failed rejects the whole residue. Admitted items join the
    attempt's candidates."""
    ranking, residue, audit = attempt.ranking, attempt.residue, attempt.audit
    settings = attempt.inputs.settings
    if ranking is not None and list(ranking.residue_ids) != residue:
        # A call that happened is always recorded, with what its answer came to mean
        # (for this attempt: the call's own outcome stays as it was for another).
        ranking = attempt.ranking = dataclasses.replace(
            ranking, status=RESIDUE_CHANGED,
            error="the residue at write time differs from the one ranked")
    if not residue:
        return
    if len(residue) > RESIDUE_MAX:
        attempt.flags.append(FOLDED_OVER_CAP)
        if not settings.rank_base_url:
            attempt.flags.append(FOLDED_NO_RANKER)  # it could not have ranked any residue
        attempt.candidates += _fold(attempt, f"residue > {RESIDUE_MAX}")
        return
    if ranking is None and not settings.rank_base_url:
        attempt.flags.append(FOLDED_NO_RANKER)
        attempt.candidates += _fold(attempt, "no ranker")
        return
    if ranking is None:
        for item_id in _with_members(attempt):
            audit.final(item_id, STAGE, REJECTED,
                        "rank_not_called: the residue appeared after the call was prepared")
        return
    by_id, threshold = attempt.inputs.by_id, settings.rank_threshold
    members = attempt.outline_members
    for item_id in residue:
        score = ranking.scores.get(item_id) if ranking.ok else None
        if not ranking.ok:
            verdict, reason = "reject", f"rank_failed: {ranking.status}"
        elif score is None:
            verdict, reason = "reject", "rank: not scored by the model"
        elif score >= threshold:
            verdict, reason = "admit", f"rank: score {score:.2f} >= {threshold}"
        else:
            verdict, reason = "reject", f"rank: score {score:.2f} < {threshold}"
        attempt.rank_scores.append(RankScore(item_id, score, verdict))
        for ranked_as in [item_id, *members.get(item_id, ())]:
            why = reason if ranked_as == item_id else f"{reason} (its file's outline {item_id})"
            if verdict == "admit":  # then capped with the gate's by source priority (§3.2)
                audit.add(ranked_as, STAGE, "admitted", why)
                attempt.candidates.append(Candidate(item=by_id[ranked_as], driver=RANK_ADMITTED))
            else:
                audit.final(ranked_as, STAGE, REJECTED, why)


def _with_members(attempt: Attempt) -> list[str]:
    """Every residual item: the residue's candidates and the symbols their outlines
    stand for."""
    out = []
    for item_id in attempt.residue:
        out.append(item_id)
        out.extend(attempt.outline_members.get(item_id, ()))
    return out


def _fold(attempt: Attempt, why: str) -> list[Candidate]:
    """§4's deterministic rule for a residue the step may not rank: each item goes to
    the obligation bucket (link) it is nearest to, and is admitted under that link's
    driver — rendered as its role's cheapest form, a signature in the spec's policy —
    only if it is within FOLD_MAX_RECON_HOPS recon edges of the linked symbol or its
    near_score reaches FOLD_MIN_NEAR_SCORE; otherwise it is folded away, or rejected
    outright when no bucket is near it. A file's outline that stands for residual
    symbols is not folded itself: it follows them, admitted when one of them is.

    The fold fills only the room the gate left under §3.2's ADMITTED_MAX, in residue
    order: what the gate admitted itself (the live failure, the patch) is never pushed
    out by the cap for an item folded in. (What the ranking step admits is §4's own
    verdict and is capped with the gate's admissions by source priority, as §3.2 says;
    the fold's reach is this module's choice, so it only fills room.)"""
    audit, by_id = attempt.audit, attempt.inputs.by_id
    room = ADMITTED_MAX - len(attempt.candidates)
    admitted: list[Candidate] = []

    def admit(item_id: str, reach: Reach) -> bool:
        nonlocal room
        if room <= 0:
            audit.final(item_id, STAGE, FOLDED, f"{why}: {reach.why}; no room left under the "
                                                f"{ADMITTED_MAX}-item cap", detail=reach.detail)
            return False
        room -= 1
        audit.add(item_id, STAGE, "folded_in", f"{why}: {reach.why}", detail=reach.detail)
        admitted.append(Candidate(item=by_id[item_id], driver=reach.driver))
        return True

    for item_id in attempt.residue:
        members = attempt.outline_members.get(item_id)
        if members is None:
            reach = _fold_reach(attempt, item_id, why)
            if reach is not None:
                admit(item_id, reach)
            continue
        reached = folded_in = False
        for member in members:
            reach = _fold_reach(attempt, member, why)
            if reach is not None:
                reached = True
                folded_in = admit(member, reach) or folded_in
        if folded_in:
            admit(item_id, Reach(OUTLINE_OF_FOLDED_IN, "the outline of folded-in code"))
        elif reached:  # its code was in reach, the cap had no room for it
            audit.final(item_id, STAGE, FOLDED, f"{why}: its file's code in reach; no room "
                                                f"left under the {ADMITTED_MAX}-item cap")
        else:
            audit.final(item_id, STAGE, FOLDED, f"{why}: no code of its file folded in")
    return admitted


@dataclass(frozen=True)
class Reach:
    """How the fold rule reached an item: the driver it is admitted under, why (the
    audit's driver: one text per bucket and reason, so verdicts group) and the item's
    own figure (the audit's detail)."""

    driver: str
    why: str
    detail: str | None = None


def _fold_reach(attempt: Attempt, item_id: str, why: str) -> Reach | None:
    """How the fold rule reaches the item from its bucket; None when it does not, the
    item's final verdict recorded. A module outline with no residual symbols of its own
    is reached by recon edges only: on shared terms alone its whole skeleton would come
    in."""
    audit, inputs = attempt.audit, attempt.inputs
    links, near = inputs.links, inputs.nearness[item_id]
    if near.nearest_link_no is None:
        audit.final(item_id, STAGE, REJECTED, f"{why}: no obligation bucket to fold into")
        return None
    link = links[near.nearest_link_no - 1]
    bucket = f"link {near.nearest_link_no} ({link.link_kind} {link.entity_key})"
    if near.recon_hops is not None and near.recon_hops <= FOLD_MAX_RECON_HOPS:
        return Reach(FOLD + link.link_kind, bucket)
    lexical_reach = not inputs.by_id[item_id].is_outline
    score = f"near score {near.near_score:g}"
    if lexical_reach and near.near_score >= FOLD_MIN_NEAR_SCORE:
        return Reach(FOLD + link.link_kind, f"{bucket}, as near as a recon edge",
                     f"{score} >= {FOLD_MIN_NEAR_SCORE:g}")
    audit.final(item_id, STAGE, FOLDED,
                f"{why}: {bucket}, not within {FOLD_MAX_RECON_HOPS} recon edges",
                detail=(f"{score} < {FOLD_MIN_NEAR_SCORE:g}" if lexical_reach
                        else "a module outline: folded in by recon edges only"))
    return None
