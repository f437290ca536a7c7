"""The request as JSON: the text parsed (size, encoding, syntax, nesting) and the data
checked against the published schema ``decision_request.schema.json`` (shipped in the
package), each problem worded as the dataclass check words it (`request_limits`).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from .paths import PACKAGE_DIR
from .request_limits import (
    JSON_INT_DIGITS_MAX,
    REQUEST_JSON_MAX_BYTES,
    LongInteger,
    RequestEncodingError,
    RequestError,
    json_error_reason,
    quote_value,
    refusal,
)

SCHEMA_FILE = PACKAGE_DIR / "decision_request.schema.json"


def _parse_int(digits: str) -> int | LongInteger:
    return int(digits) if len(digits) <= JSON_INT_DIGITS_MAX else LongInteger(digits)


def parse_request_json(text: str | bytes) -> Any:
    """JSON text (a str, or bytes that must be UTF-8) as Python data. Every way it can
    fail is a RequestError saying where: size, encoding (RequestEncodingError), syntax,
    nesting. NaN, Infinity and 1e400 parse (as floats) and are refused by the field."""
    if isinstance(text, (bytes, bytearray)):
        if len(text) > REQUEST_JSON_MAX_BYTES:
            raise RequestError(f"request: {len(text)} bytes of JSON, expected at most "
                               f"{REQUEST_JSON_MAX_BYTES} (REQUEST_JSON_MAX_BYTES)")
        data = bytes(text)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            column = exc.start - data.rfind(b"\n", 0, exc.start)
            raise RequestEncodingError(
                f"request is not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} "
                f"(line {line}, column {column}): {exc.reason}") from exc
    elif not isinstance(text, str):
        raise RequestError(f"request: expected JSON text (str or bytes), got {quote_value(text)}")
    if len(text) > REQUEST_JSON_MAX_BYTES:
        raise RequestError(f"request: {len(text)} characters of JSON, expected at most "
                           f"{REQUEST_JSON_MAX_BYTES} (REQUEST_JSON_MAX_BYTES)")
    try:
        return json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        raise RequestError(f"request is not valid JSON: {json_error_reason(exc)} at line "
                           f"{exc.lineno} "
                           f"column {exc.colno}") from exc
    except RecursionError as exc:
        raise RequestError("request is not valid JSON for a decision request: it nests "
                           "deeper than the parser follows (a request nests 4 levels)") from exc


@functools.cache
def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    return schema


@functools.cache
def _validator() -> Any:  # jsonschema ships no types
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(_schema())
    return Draft202012Validator(_schema())


def _path(error: Any) -> str:  # a jsonschema ValidationError
    parts = ["request"]
    for part in error.absolute_path:
        parts.append(f"[{part}]" if isinstance(part, int) else f".{part}")
    return "".join(parts)


def _types(expected: object) -> str:
    return ", ".join(map(repr, expected)) if isinstance(expected, list) else repr(expected)


def _problem(error: Any) -> str:
    """The error in our words: jsonschema's own messages repr the whole value."""
    path, rule, expected, value = (_path(error), error.validator, error.validator_value,
                                   error.instance)
    if rule == "required":
        name = next((n for n in expected if error.message.startswith(repr(n))), "?")
        return f"{path}.{name}: a required field is missing"
    if rule == "additionalProperties":
        known = error.schema.get("properties", {})
        extra = [name for name in value if name not in known]
        more = f" (and {len(extra) - 1} more)" if len(extra) > 1 else ""
        return (f"{path}: unexpected field {quote_value(extra[0] if extra else '?')}{more}; "
                f"expected only {', '.join(known)}")
    if isinstance(value, LongInteger):
        return f"{path}: expected a value in range, got {quote_value(value)}"
    if rule == "type":
        return f"{path}: {quote_value(value)} is not of type {_types(expected)}"
    if rule == "enum":
        return f"{path}: {quote_value(value)} is not one of {expected}"
    if rule == "minLength":
        return f"{path}: expected a non-empty string" if expected == 1 else \
            f"{path}: expected at least {expected} characters"
    if rule == "maxLength":
        return f"{path}: expected at most {expected} characters, got {len(value)}"
    if rule == "maxItems":
        return f"{path}: expected at most {expected} items, got {len(value)}"
    if rule == "minimum":
        return f"{path}: {quote_value(value)} is less than the minimum of {expected}"
    if rule == "maximum":
        return f"{path}: {quote_value(value)} is greater than the maximum of {expected}"
    if rule == "pattern":
        return f"{path}: {quote_value(value)} does not match {expected!r}" if expected != "\\S" \
            else f"{path}: expected some text that is not blank, got {quote_value(value)}"
    if rule == "anyOf" and all("required" in s for s in expected):
        fields = [name for option in expected for name in option["required"]]
        return f"{path}: expected at least one of the fields {', '.join(fields)}"
    return f"{path}: does not match the schema's {rule!r} rule"


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref", "")
    if ref.startswith("#/$defs/"):
        definition: dict[str, Any] = _schema()["$defs"][ref.removeprefix("#/$defs/")]
        return definition
    return node


@functools.cache
def _list_limits() -> tuple[tuple[tuple[str, ...], int], ...]:
    """(field names, maxItems) of each list the schema bounds: looked at before the full
    validation, which would otherwise walk every item of a list of millions."""
    found = []

    def walk(node: dict[str, Any], names: tuple[str, ...]) -> None:
        node = _resolve(node)
        if "maxItems" in node:
            found.append((names, node["maxItems"]))
        for name, child in node.get("properties", {}).items():
            walk(child, names + (name,))

    walk(_schema(), ())
    return tuple(found)


def _oversized_lists(data: Any) -> list[str]:
    problems = []
    for names, most in _list_limits():
        value = data
        for name in names:
            value = value.get(name) if isinstance(value, dict) else None
        if isinstance(value, list) and len(value) > most:
            problems.append(f"request.{'.'.join(names)}: expected at most {most} items, "
                            f"got {len(value)}")
    return problems


def validate_request(data: Any) -> None:
    """Raise RequestError naming the fields that break the schema (the first ten)."""
    problems = _oversized_lists(data)
    if not problems:
        errors = sorted(_validator().iter_errors(data),
                        key=lambda e: list(map(str, e.absolute_path)))
        problems = [_problem(e) for e in errors]
    if problems:
        raise refusal(problems)

