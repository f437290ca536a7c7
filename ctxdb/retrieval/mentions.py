"""What a task text says in code terms: its query terms, the names it mentions and its
traceback frames. Pure functions over text; resolving them against recon is `signals`.
"""

from __future__ import annotations

import builtins
import keyword
import re
from collections import Counter
from typing import NamedTuple

from ..recon.extract import code_terms

# Words of English prose that say nothing about which code an issue is about. Python's
# keywords are not in the body index at all (`BODY_STOP_TERMS`), these are: docstrings
# and comments are full of them.
ENGLISH_STOP_TERMS = frozenset(
    """
    about above after again all also am an and any are as at be because been before being
    below between both but by can could did do does doing done down during each else
    even ever every few for from further get gets got had has have having he her here
    hers him his how however if in into is it its itself just let like may me might more
    most much must my no nor not now of off on once one only or other our out over own
    same see seems she should since so some such than that the their them then there
    these they this those though through to too under until up upon us very was way we
    well were what when where whether which while who whom why will with within without
    would yet you your also using use used want wants would work works working expected
    instead following example issue bug fix problem error output result results code
    thanks please think know make makes made need needs still get getting return returns
    returned way something doesn don isn won can't cannot currently
    """.split()
)
# Fewer query terms than this is a short issue; more are cut to the most frequent (an
# FTS5 OR query costs a posting-list read per term; 64 keeps p50 well under the target).
QUERY_MAX_TERMS = 64
QUERY_TERM_MIN_LENGTH = 2

# HTML comments: issue templates' instructions ("Please check that the development
# version still produces the same bug ...") are not about the code.
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
_CODE_BLOCK = re.compile(r"```[^\n]*\n(.*?)(?:```|\Z)", re.S)
_BACKTICKED = re.compile(r"`([^`\n]+)`")
_DOCTEST_LINE = re.compile(r"^\s*(?:>>>|\.\.\.|In \[\d+\]:)\s?(.*)$", re.M)
_DOTTED_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_IDENTIFIER = re.compile(r"(?<![\w.])[A-Za-z_]\w*")
_CALLED = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*\(")
_PYTHON_PATH = re.compile(r"(?<![\w.])((?:[\w.-]+/)*[\w-]+\.py)\b")
_CAMEL_INSIDE = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]")
# Traceback frames: CPython's and pytest's ("path.py:12: in name" / "path.py:12: Error").
_PYTHON_FRAME = re.compile(r'File "(?P<path>[^"\n]+)", line (?P<line>\d+)'
                           r"(?:, in (?P<name>[\w<>.]+))?")
_PYTEST_FRAME = re.compile(r"^(?P<path>[\w./\\-]+\.py):(?P<line>\d+):"
                           r"(?: in (?P<name>[\w<>.]+))?", re.M)

# How much one mention of a name counts, by where it was written: inside backticks or as
# a dotted name the writer meant code; a code block also holds the example's variables.
MENTION_WEIGHT_EXPLICIT = 1.0
MENTION_WEIGHT_PROSE = 0.7  # snake_case / CamelCase / called words in running text
MENTION_WEIGHT_CODE = 0.5  # any identifier inside a code block or doctest line
_NOT_NAMES = frozenset(keyword.kwlist) | frozenset(dir(builtins)) | {"self", "cls"}
NAME_MIN_LENGTH = 2


class Mention(NamedTuple):
    """A name the task writes: ``Class.method``, ``module.path.name`` or ``name``."""

    name: str
    weight: float


class Frame(NamedTuple):
    path: str
    line: int
    name: str | None  # the function, ``<module>``, or None (pytest's error lines)


def without_template(text: str) -> str:
    return _HTML_COMMENT.sub(" ", text or "")


def query_terms(text: str) -> list[str]:
    """The body-index terms of `text` (the same code-aware terms the index holds), stop
    words out, the most frequent first (ties alphabetical), at most QUERY_MAX_TERMS."""
    counts = Counter(
        term for term in code_terms(without_template(text)).split()
        if len(term) >= QUERY_TERM_MIN_LENGTH and term not in ENGLISH_STOP_TERMS
    )
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [term for term, _count in ranked[:QUERY_MAX_TERMS]]


def _code_spans(text: str) -> list[str]:
    return _CODE_BLOCK.findall(text) + _DOCTEST_LINE.findall(text)


def mentions(text: str) -> list[Mention]:
    """The names `text` mentions, each once with its strongest weight, in first-seen
    order: dotted names and backticked identifiers (explicit), snake_case, CamelCase and
    called words of the prose, and every identifier of its code blocks and doctests."""
    text = without_template(text)
    found: dict[str, float] = {}

    def add(name: str, weight: float) -> None:
        name = name.strip(".")
        if len(name) < NAME_MIN_LENGTH or name in _NOT_NAMES:
            return
        if weight > found.get(name, 0.0):
            found[name] = weight

    for span in _BACKTICKED.findall(text):
        for name in _DOTTED_NAME.findall(span):
            add(name, MENTION_WEIGHT_EXPLICIT)
        # `Cart.add` names Cart.add, not Cart: its head may be a variable or a module
        for name in _IDENTIFIER.findall(_DOTTED_NAME.sub(" ", span)):
            add(name, MENTION_WEIGHT_EXPLICIT)
    prose = _CODE_BLOCK.sub(" ", text)
    for name in _DOTTED_NAME.findall(prose):
        if not _PYTHON_PATH.fullmatch(name):  # a file name, handled by paths()
            add(name, MENTION_WEIGHT_EXPLICIT)
    for name in _IDENTIFIER.findall(prose):
        if "_" in name.strip("_") or _CAMEL_INSIDE.search(name):
            add(name, MENTION_WEIGHT_PROSE)
    for name in _CALLED.findall(prose):
        add(name, MENTION_WEIGHT_PROSE)
    for span in _code_spans(text):
        for name in _DOTTED_NAME.findall(span):
            add(name, MENTION_WEIGHT_CODE)
        for name in _IDENTIFIER.findall(span):
            add(name, MENTION_WEIGHT_CODE)
    return [Mention(name, weight) for name, weight in found.items()]


def paths(text: str) -> list[str]:
    """Python file paths `text` names (``astropy/io/ascii/rst.py``), first-seen order."""
    seen: dict[str, None] = {}
    for path in _PYTHON_PATH.findall(without_template(text)):
        seen.setdefault(path.replace("\\", "/"), None)
    return list(seen)


def frames(text: str) -> list[Frame]:
    """Traceback frames in `text`, innermost (the last written) first; a Windows path
    (``C:\\Python310\\lib\\site-packages\\pkg\\mod.py``) with '/' between its parts, as
    recon's paths are, so its tail can meet a file of the index."""
    out = []
    for pattern in (_PYTHON_FRAME, _PYTEST_FRAME):
        for match in pattern.finditer(text or ""):
            path = match["path"].replace("\\", "/")
            out.append((match.start(), Frame(path, int(match["line"]), match["name"])))
    out.sort(key=lambda item: item[0])
    return [frame for _position, frame in reversed(out)]
