"""§4's ranking call: the client of the ranking endpoint.

ONE chat-completions call through the official ``openai`` client: temperature 0,
max_completion_tokens 1024, a JSON-schema response format, no retries (the client's own
retry is switched off). The prompt is assembled in the spec's order — current obligation
(+ acceptance criteria), decision question, residue as {id, kind, signature} —
signatures only, never bodies or raw output.

Any parse failure, schema violation, out-of-range score, unknown id, more than 32
rankings, HTTP error, a body over RANK_RESPONSE_MAX_BYTES or no answer within the one
deadline (the configured timeout bounds the whole call, not each read) is the call's
status (``RankOutcome``), never an exception: the ranking stage (rank.py) then rejects
the whole residue, with no second call. Model output is data: only the scores it parses
to leave this module.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config import Settings
from ..spec import RANK_MAX_COMPLETION_TOKENS, RANK_TEMPERATURE, RESIDUE_MAX
from .state import RANK_OK, RankOutcome

if TYPE_CHECKING:  # imported by the call itself: the client loads only when ranking is on
    import openai

# a chat-completions request body, as JSON holds it
RequestBody = dict[str, Any]

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
) -> RequestBody:
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


def rank_residue(settings: Settings, obligation: str, acceptance_criteria: tuple[str, ...],
                 decision_question: str | None,
                 residue: list[ResidueCandidate]) -> RankOutcome:
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


def _post(settings: Settings, body: RequestBody, deadline: float) -> _Answer:
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


def _body_of(error: openai.APIStatusError) -> str:
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


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _short(text: str) -> str:
    """An error as rank_call.error keeps it: its start, never a whole hostile body."""
    return text if len(text) <= ERROR_MAX_CHARS else text[: ERROR_MAX_CHARS - 1] + "…"
