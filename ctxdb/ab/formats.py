"""How a report's numbers are written — one rule for the table, the HTML page and the
plots' labels, so the same figure reads the same everywhere.

- a quantity gets thousands separators (``17,998``), whether SQL answered an integer
  or a float; a float under ``SMALL_FLOAT_LIMIT`` (a share, a precision, a cost) gets
  ``SHARE_DECIMALS`` decimals;
- a relative change (a column named ``d_*``, the ablation's Δ) is a signed percent;
- an identifier (``*_id``, ``clause_no``) is written as stored: a decision id is a
  name, not an amount;
- no value is ``–``.

CSV and JSON keep the raw values: they are for programs.
"""

from __future__ import annotations

MISSING = "–"
SHARE_DECIMALS = 3
SMALL_FLOAT_LIMIT = 100  # below it a float is a share or a rate: decimals, not a count
DELTA_PREFIX = "d_"
PERCENT_DECIMALS = 1
IDENTIFIER_SUFFIXES = ("_id", "_no")


def is_identifier(column: str) -> bool:
    return column.endswith(IDENTIFIER_SUFFIXES)


def format_number(value: float | int) -> str:
    """A quantity: ``1,234`` for counts and large floats, ``0.149`` for small floats."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) < SMALL_FLOAT_LIMIT:
        return f"{value:,.{SHARE_DECIMALS}f}"
    return f"{value:,.0f}"


def format_delta(value: float) -> str:
    """A relative change as a signed percent: ``+12.5%``, ``−4.0%``, ``±0.0%``."""
    percent = 100 * value
    if round(percent, PERCENT_DECIMALS) == 0:
        return f"±{0:.{PERCENT_DECIMALS}f}%"
    sign = "+" if percent > 0 else "−"
    return f"{sign}{abs(percent):,.{PERCENT_DECIMALS}f}%"


def format_percent(share: float) -> str:
    """A share in prose: 0.926 -> ``93%``."""
    return f"{100 * share:,.0f}%"


def format_tick(value: float, step: float, percent: bool = False) -> str:
    """An axis tick: as many decimals as the step needs, thousands separators as
    ``format_number``; ``percent`` writes a share as a percent (0.25 -> 25%)."""
    if percent:
        value, step = 100 * value, 100 * step
    decimals = 0
    while (decimals < SHARE_DECIMALS
           and abs(step * 10 ** decimals - round(step * 10 ** decimals)) > 1e-9):
        decimals += 1
    text = f"{value:,.{decimals}f}"
    return text + "%" if percent else text


def format_cell(column: str, value) -> str:
    """The one way a report cell is written (table and HTML)."""
    if value is None:
        return MISSING
    if isinstance(value, str) or is_identifier(column):
        return str(value)
    if column.startswith(DELTA_PREFIX) and not isinstance(value, bool):
        return format_delta(float(value))
    if isinstance(value, (int, float)):
        return format_number(value)
    return str(value)


def is_number(value) -> bool:
    """Whether a cell holds a number (aligned right in the table and on the page)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)
