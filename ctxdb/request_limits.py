"""What a decision request may hold, and how a refusal says what it broke: the limits
(the schema states the same numbers, tested), the errors, a bad value quoted short.

Below both of the request's checks — the schema's on JSON data (`request_schema`) and
the dataclass's own (`DecisionRequest.check`) — so each words a refusal the same way.
"""

from __future__ import annotations

import json
import os
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# What one request may hold (issue 14): bounded work per decision, and every integer fits
# the store's columns on both backends. The schema states the same numbers (tested).
# PostgreSQL `integer` (models.py: seq, lines, depth, token_ceiling are Integer columns).
STORE_INTEGER_MAX = 2**31 - 1
ID_MAX_CHARS = 200  # run_id, instance_id, plan_node.node_id
# what an agent loop's ids may not hold (a window prints them on one line): the control
# characters (NUL, newline, escape, C1) and Unicode's line and paragraph separators
LINE_BREAKING_CATEGORIES = ("Cc", "Zl", "Zp")
VARIANT_MAX_CHARS = 100
# Entity keys, paths and test ids: printed in every item header.
ENTITY_KEY_MAX_CHARS = 1000
TASK_MAX_CHARS = 100_000  # the task text (stable core); SWE-bench statements run to ~10k
# The plan node's texts (obligation, question, preconditions, criteria) and provenance.
SHORT_TEXT_MAX_CHARS = 10_000
# Evidence content, the patch and each live output: kept whole (the pool cuts a copy to
# 8 KB, spec §3.1), so a generated file or a long log still fits.
LONG_TEXT_MAX_CHARS = 1_000_000
# Items in any one list: four times the pool cap (§3.1, 256), so the cap has a choice.
LIST_MAX_ITEMS = 1024
# All the request's text together, and the JSON text of a request.
REQUEST_MAX_CHARS = 16_000_000
REQUEST_JSON_MAX_BYTES = 64 * 1024 * 1024
# How much of a bad value an error quotes (a 10 MB key is never echoed whole).
QUOTE_MAX_CHARS = 40
# CPython refuses to convert longer digit strings to int (the int/str conversion limit);
# the JSON reader keeps them as a stand-in that every check refuses, naming the field.
JSON_INT_DIGITS_MAX = 4300


class RequestError(ValueError):
    """A decision request does not match the schema; the message names the field."""


def loop_id_problem(value: object, run: bool = False) -> str | None:
    """Why ``value`` cannot name an agent loop's run or instance (None: it can): it is
    non-empty text of at most ``ID_MAX_CHARS`` characters (the store's column) with no
    control character and no lone surrogate — a loop window prints it to the model
    (``ctxdb show run:RUN:INSTANCE``) and the store keeps it as UTF-8 text. ``run``: a
    run's id, which holds no ':' either (that name is read at its first ':' after
    ``run:``: runs ``a`` and ``a:b`` would both answer to ``run:a:b:c``)."""
    if not isinstance(value, str) or not value.strip():
        return f"expected non-empty text, got {quote_value(value)}"
    if run and ":" in value:
        return (f"expected no ':', got {quote_value(value)} (a loop window names its run "
                "as run:RUN:INSTANCE, read at the first ':' after run:)")
    if len(value) > ID_MAX_CHARS:
        return f"expected at most {ID_MAX_CHARS} characters, got {len(value)}"
    control = next((c for c in value if unicodedata.category(c) in LINE_BREAKING_CATEGORIES),
                   None)
    if control is not None:
        return (f"expected no control character or line separator, got U+{ord(control):04X} "
                f"in {quote_value(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"expected text UTF-8 can hold, got a lone surrogate at character {exc.start}"
    return None


class RequestEncodingError(RequestError):
    """The request is not UTF-8 text, or a text field holds a lone surrogate (which no
    UTF-8 store can keep); the message names the byte offset or the field."""


REFUSAL_PROBLEMS_SHOWN = 10


class LongInteger:
    """A JSON integer of more than JSON_INT_DIGITS_MAX digits (Python will not convert
    it): no field takes one, so it is refused by name like any value of the wrong type."""

    __slots__ = ("digits",)

    def __init__(self, digits: str):
        self.digits = digits



def json_error_reason(exc: json.JSONDecodeError) -> str:
    """The JSON parser's reason without the dangling "at" some end in ("Unterminated string
    starting at"), for a message that gives the place itself."""
    return exc.msg.removesuffix(" at")


UTF8_BOM = b"\xef\xbb\xbf"


def json_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, Any, str | None]]:
    """Each line of a JSON Lines file that is not blank, as ``(line number, value, None)``,
    or ``(line number, None, why)`` for one that holds no JSON value: bytes that are not
    UTF-8, JSON the parser refuses, nesting deeper than it goes, a number of more digits
    than Python converts. A bad line is named and the lines after it still read (a UTF-8
    byte order mark before the first is skipped); lines end at ``\n`` alone (JSON
    Lines), so a string's U+2028 stays in its line."""
    with Path(path).open("rb") as lines:
        for number, raw in enumerate(lines, start=1):
            raw = raw.removesuffix(b"\n")  # (the line's end: no part of its JSON)
            if number == 1:
                raw = raw.removeprefix(UTF8_BOM)  # an editor's mark, no part of the JSON
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield number, None, (f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at column "
                                     f"{exc.start + 1})")
                continue
            if not line.strip():
                continue
            try:
                yield number, json.loads(line), None
            except json.JSONDecodeError as exc:
                yield number, None, (f"not valid JSON ({json_error_reason(exc)} at column "
                                     f"{exc.colno})")
            except RecursionError:
                yield number, None, "not valid JSON (nested deeper than the parser goes)"
            except ValueError as exc:  # a number past the digits Python converts
                yield number, None, f"not valid JSON ({str(exc).split(';')[0]})"


def quote_value(value: object) -> str:
    """A bad value as an error shows it: short whatever its size (a long text's prefix,
    a list's length), on one line, and never the repr of an arbitrary object."""
    if isinstance(value, str):
        if len(value) <= QUOTE_MAX_CHARS:
            return repr(value)
        return f"{value[:QUOTE_MAX_CHARS]!r}… ({len(value)} characters)"
    if isinstance(value, (bytes, bytearray)):
        cut = "…" if len(value) > QUOTE_MAX_CHARS else ""
        return f"{bytes(value[:QUOTE_MAX_CHARS])!r}{cut} ({len(value)} bytes)"
    if value is None or isinstance(value, (bool, float)):
        return repr(value)
    if isinstance(value, int):
        # 64 bits print in at most 20 digits; a longer integer is described, not printed
        return (repr(value) if value.bit_length() <= 64
                else f"an integer of {value.bit_length()} bits")
    if isinstance(value, LongInteger):
        return f"an integer of {len(value.digits)} digits"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} item(s)"
    if isinstance(value, dict):
        return f"an object of {len(value)} field(s)"
    return f"a {type(value).__name__}"


class EncodingProblem(str):
    """A problem that is a text UTF-8 cannot hold (the refusal is a RequestEncodingError)."""


def refusal(problems: list[str]) -> RequestError:
    """One line naming each problem's field (the first REFUSAL_PROBLEMS_SHOWN)."""
    shown = "; ".join(problems[:REFUSAL_PROBLEMS_SHOWN])
    if len(problems) > REFUSAL_PROBLEMS_SHOWN:
        shown += f"; and {len(problems) - REFUSAL_PROBLEMS_SHOWN} more"
    kind = RequestEncodingError if any(isinstance(p, EncodingProblem) for p in problems) \
        else RequestError
    return kind(f"invalid decision request: {shown}")

