"""Identifier terms: the words two texts must share to be "about the same thing".

Used by the gate's nearness, the sliding window, the decision's own terms and the
A/B runner's gold recall. Snake_case and CamelCase are split, the whole identifier is
kept too, and words too common in code and prose are left out.
"""

from __future__ import annotations

import functools
import re

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CAMEL_PART = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
# Words too common in code and prose to say two texts are about the same thing.
STOP_TERMS = frozenset(
    """
    a an and are as at be by def class for from if in is it not of on or return self the
    this to with none true false test tests should must when then that into cls args kwargs
    """.split()
)
MIN_TERM_LENGTH = 3


@functools.lru_cache(maxsize=1 << 16)
def _word_terms(word: str) -> frozenset[str]:
    parts = [word, *word.split("_"), *_CAMEL_PART.findall(word)]
    return frozenset(
        p for p in (part.lower() for part in parts)
        if len(p) >= MIN_TERM_LENGTH and p not in STOP_TERMS
    )


def terms(text: str) -> frozenset[str]:
    """Identifier-like words of ``text``, lower-cased, split on snake_case and CamelCase."""
    return _text_terms(text or "")


@functools.lru_cache(maxsize=1 << 14)
def _text_terms(text: str) -> frozenset[str]:
    # Cached per text: a harness asks about the same symbols decision after decision.
    found: set[str] = set()
    for word in set(_WORD.findall(text)):
        found |= _word_terms(word)
    return frozenset(found)


def forget_terms() -> None:
    for memo in (_text_terms, _word_terms):
        memo.cache_clear()
