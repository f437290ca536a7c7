"""Per-file extraction: the bytes of one Python file → symbols, references, name bindings.

Pure and database-free, so it runs in worker processes. The version-sensitive part of
tree-sitter's Python API (building the language, parser and query; how captures come
back) is confined to `language`, `_parser`, `load_query` and `sorted_captures`; the rest
works on byte offsets and the stable Node attributes.

Output: a `ParsedFile` holding `Symbol`, `Reference` and `Binding` records (named
tuples: they travel back from a worker process as pickled tuples).
"""

from __future__ import annotations

import builtins
import hashlib
import keyword
import re
from functools import cache, lru_cache, partial
from importlib import resources
from itertools import islice
from operator import attrgetter, le
from typing import NamedTuple

import tree_sitter
import tree_sitter_python

PARSER_NAME = "tree-sitter-python"

_ASCII_DOTTED = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_DOTTED = re.compile(r"[^\W\d]\w*(?:\.[^\W\d]\w*)*\Z")
_SUPER = re.compile(r"super\([^()]*\)\.([^\W\d]\w*)\Z")
# The query (`queries/<name>.scm`) every file is parsed with.
QUERY_NAME = "python"
_DOC_PREFIX = re.compile(r"[rRuU]?(\"\"\"|'''|\"|')")

DOC_LINE_MAX = 300

# Why a file is indexed as a file row alone (`ParsedFile.skipped`, recon.file.skipped).
SKIP_TOO_LARGE = "too_large"
SKIP_TOO_DEEP = "too_deep"
# Files larger than this are not read whole or parsed: tree-sitter's tree and the
# extraction hold about 100 bytes per source byte (a 50 MB file of definitions took
# 5 GB and 52 s). The largest Python file in the development set's trees is 1.5 MB.
MAX_FILE_BYTES = 2 * 1024 * 1024
# Parse trees deeper than this (levels from the module node; a nested call is two) are
# not extracted: tree-sitter's query cursor slows down sharply past some 30k nested
# calls (20k: 0.06 s, 40k: 2.7 s, 100k: 74 s). Real code stays far below (Django's
# deepest tree: 33 levels); CPython itself refuses more than 200 nested parentheses.
MAX_PARSE_DEPTH = 10_000

_BY_SPAN = attrgetter("start_byte", "end_byte")
_BUILTINS = frozenset(name for name in dir(builtins) if not name.startswith("_"))


class Symbol(NamedTuple):
    """A definition of one file. Ordinals count the file's symbols; 0 is the module."""

    ordinal: int  # (not `index`: that would hide tuple.index)
    parent_index: int  # the parent's ordinal; -1 for the module symbol
    key: str  # entity key path::Qual.name, "#2" on a second definition in one scope
    kind: str  # module | class | function | method
    name: str
    qualname: str
    start_line: int  # 1-based, from the first decorator
    end_line: int  # 1-based, inclusive
    start_byte: int
    end_byte: int  # exclusive
    signature: str | None  # decorators + the def/class line(s) through the colon
    doc: str | None  # first docstring line


class Reference(NamedTuple):
    """A name a symbol uses: one per (kind, src_index, dst_name), at its first line."""

    kind: str  # calls | inherits | imports
    src_index: int  # the Symbol.ordinal of the innermost enclosing definition
    dst_name: str  # as written; imports: the absolute dotted name
    line: int
    # dst_name with a variable of known class replaced by the class, else None:
    # ``calc.total`` → ``PriceCalculator.total`` after ``calc = PriceCalculator(...)``;
    # ``self.tax.rate`` → ``TaxPolicy.rate`` after ``self.tax = TaxPolicy()`` or
    # ``self.tax = tax`` with ``tax: TaxPolicy``
    typed_name: str | None


class Binding(NamedTuple):
    """A name the module binds by import ("*" for a star import, once per module starred)."""

    name: str
    target: str  # the absolute dotted name it refers to
    line: int


class ParsedFile(NamedTuple):
    """Everything the index keeps of one file."""

    sha256: str
    size_bytes: int
    line_count: int
    syntax_error: bool
    not_utf8: bool
    # the UTF-8 text as bytes (re-encoded after replacement when the file was not
    # UTF-8): bytes travel between processes far cheaper than str
    source: bytes
    symbols: list[Symbol]
    references: list[Reference]
    bindings: list[Binding]
    # the code-aware terms of each symbol's own text (`body_terms`), one line per symbol
    # in symbol order: one string per file pickles, unpickles and reaches the body index
    # as one piece (`split_body_terms` gives the lines back)
    body_terms: str
    # None, or why the file was not parsed (SKIP_TOO_LARGE, SKIP_TOO_DEEP): then it has
    # no symbols, references, bindings, body terms or source text
    skipped: str | None = None

    def __reduce__(self):
        # How a worker sends it back. Pickle saves each record of a list through a
        # Python-level __getnewargs__ call (Django's sdist: ~4x the time of plain
        # tuples); as plain tuples, rebuilt by C calls, the cost is a tuple's.
        return _unpickle_parsed_file, (
            tuple(self[:6]),
            list(map(tuple, self.symbols)),
            list(map(tuple, self.references)),
            list(map(tuple, self.bindings)),
            self.body_terms,
            self.skipped,
        )


_as_symbol = partial(tuple.__new__, Symbol)
_as_reference = partial(tuple.__new__, Reference)
_as_binding = partial(tuple.__new__, Binding)


def _unpickle_parsed_file(head: tuple[str, int, int, bool, bool, bytes], symbols: list,
                          references: list, bindings: list, body_terms: str,
                          skipped: str | None) -> ParsedFile:
    return ParsedFile(
        *head,
        list(map(_as_symbol, symbols)),
        list(map(_as_reference, references)),
        list(map(_as_binding, bindings)),
        body_terms,
        skipped,
    )


class _Definition(NamedTuple):
    """A function or class definition as captured, before it becomes a Symbol."""

    start_byte: int  # of the first decorator, when decorated
    end_byte: int
    kind: str  # function | class
    outer: tree_sitter.Node  # the decorated definition, else the definition itself
    node: tree_sitter.Node
    name_start: int  # the name's span
    name_end: int
    colon_end: int  # the end of the colon closing the def or class line(s)


class _Scopes:
    """The byte spans of a file's symbols, by symbol index, to find the innermost symbol
    around a position. Added in start order, properly nested, the module first."""

    def __init__(self, end_of_file: int) -> None:
        self.starts = [0]
        self.ends = [end_of_file]

    def add(self, start: int, end: int) -> None:
        self.starts.append(start)
        self.ends.append(end)

    def owners(self, positions: list[int]) -> list[int]:
        """For each position (ascending), the index of the innermost symbol holding it."""
        starts, ends = self.starts, self.ends
        n_scopes = len(starts)
        out = []
        holding = [0]  # the symbols holding the current position, innermost last
        following = 1
        for position in positions:
            while following < n_scopes and starts[following] <= position:
                while len(holding) > 1 and ends[holding[-1]] <= starts[following]:
                    holding.pop()
                holding.append(following)
                following += 1
            while len(holding) > 1 and ends[holding[-1]] <= position:
                holding.pop()
            out.append(holding[-1])
        return out


@cache
def language() -> tree_sitter.Language:
    return tree_sitter.Language(tree_sitter_python.language())


@cache
def _parser() -> tree_sitter.Parser:
    return tree_sitter.Parser(language())


@cache
def load_query(name: str) -> tree_sitter.Query:
    """Compile `queries/<name>.scm` once per process."""
    path = resources.files("ctxdb.recon").joinpath("queries").joinpath(f"{name}.scm")
    return tree_sitter.Query(language(), path.read_text("utf-8"))


def prepare_parser() -> None:
    """Make the parser and compile the query now (~30 ms, once per process): before a
    process pool forks, so that its workers inherit them rather than each compiling the
    query, and the process has them for the incremental runs that follow its build."""
    _parser()
    load_query(QUERY_NAME)


def sorted_captures(
    query: tree_sitter.Query, node: tree_sitter.Node, spans_only: frozenset[str] = frozenset()
) -> dict[str, tuple[list[tree_sitter.Node] | None, list[tuple[int, int]]]]:
    """Captured nodes by capture name, each list sorted by (start_byte, end_byte), with
    those spans (read once here: a Node's attributes are C calls that build objects).
    For the names in `spans_only`, the sorted spans alone (nodes None): a sort of the
    spans themselves, not of indices that then reorder two lists.

    The one function that knows tree-sitter's capture API: 0.25 returns a dict from
    `QueryCursor.captures`, in an order that changes from call to call.
    """
    raw = tree_sitter.QueryCursor(query).captures(node)
    out: dict[str, tuple[list[tree_sitter.Node] | None, list[tuple[int, int]]]] = {}
    for name in sorted(raw):
        spans = list(map(_BY_SPAN, raw[name]))
        if name in spans_only:
            spans.sort()  # equal spans are equal tuples: the order a stable sort keeps
            out[name] = (None, spans)
            continue
        nodes = list(raw[name])
        if not all(map(le, spans, islice(spans, 1, None))):
            order = sorted(range(len(spans)), key=spans.__getitem__)  # stable, as a sort
            nodes = [nodes[i] for i in order]
            spans = [spans[i] for i in order]
        out[name] = (nodes, spans)
    return out


def absolute_module(text: str, module: str, is_package: bool) -> str:
    """`from <text> import ...` seen in `module` → the absolute dotted module name.

    Relative names that climb above the top package are returned unchanged (they
    start with a dot and resolve to nothing).
    """
    level = len(text) - len(text.lstrip("."))
    if level == 0:
        return text
    rest = text[level:]
    package = module.split(".") if is_package else module.split(".")[:-1]
    if level - 1 > len(package):
        return text
    base = package[: len(package) - (level - 1)]
    return ".".join(base + [rest] if rest else base) or rest


def doc_line(literal: str) -> str | None:
    """First non-blank line of a string literal used as a docstring."""
    m = _DOC_PREFIX.match(literal)
    if m is None:  # b"", f"" and friends are not docstrings
        return None
    quote = m.group(1)
    body = literal[m.end() :]
    if body.endswith(quote):
        body = body[: -len(quote)]
    for line in body.splitlines():
        line = line.strip()
        if line:
            return line[:DOC_LINE_MAX]
    return None


def count_lines(text: str) -> int:
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def extract_file(relpath: str, data: bytes, module: str, is_package: bool,
                 max_depth: int = MAX_PARSE_DEPTH) -> ParsedFile:
    """Parse one file into its symbols, references and import bindings.

    One job after another, each reading what the ones before found: definitions (the
    symbols and their spans), docstrings, local types, references, imports. A parse
    tree deeper than `max_depth` gives a file without symbols, marked SKIP_TOO_DEEP.
    """
    sha256 = hashlib.sha256(data).hexdigest()
    size_bytes = len(data)
    text, not_utf8 = _decode(data)
    if not_utf8:
        data = text.encode("utf-8")  # byte offsets always index the stored text's UTF-8
    line_count = count_lines(text)
    root = _parser().parse(data).root_node
    if tree_deeper_than(root, max_depth):
        return unparsed_file(sha256, size_bytes, line_count, not_utf8, SKIP_TOO_DEEP,
                             syntax_error=root.has_error)
    found = _Captured(data, sorted_captures(load_query(QUERY_NAME), root, _SPANS_ONLY))

    symbols, scopes = _definitions(found, relpath, module, line_count)
    _attach_docstrings(found, symbols, scopes)
    local_types = _LocalTypes(found, symbols, scopes)
    references = _references(found, scopes, local_types)
    imports = _Imports(found, module, is_package)
    references += imports.references
    defined_names = {symbol.name for symbol in symbols[1:]}
    references = _without_builtin_calls(references, defined_names, imports.bound_names)
    return ParsedFile(sha256, size_bytes, line_count, root.has_error, not_utf8, data,
                      symbols, references, imports.bindings,
                      join_body_terms(body_terms(data, symbols)))


def unparsed_file(sha256: str, size_bytes: int, line_count: int, not_utf8: bool, reason: str,
                  *, syntax_error: bool = False) -> ParsedFile:
    """A file indexed as its file row alone: no symbols, no text, `skipped` = reason."""
    return ParsedFile(sha256, size_bytes, line_count, syntax_error, not_utf8, b"", [], [], [],
                      "", reason)


def tree_deeper_than(root: tree_sitter.Node, limit: int) -> bool:
    """Whether a node lies more than `limit` levels down (`root` is level 1).

    A subtree of n nodes reaches at most n - 1 levels below its top, so only the
    subtrees large enough to pass the limit are opened: on ordinary code that is the
    module node and a few big classes, and on a hostile chain it stops at the limit.
    """
    pending = [(root, 1)]
    while pending:
        node, level = pending.pop()
        if level > limit:
            return True
        for child in node.children:
            # the child is at level + 1; its deepest node at most descendant_count - 1 below
            if level + child.descendant_count > limit:
                pending.append((child, level + 1))
    return False


# --- code-aware terms (the body full-text index and the queries against it) --------------

_CAMEL_PART = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
# Whole identifiers left out of the body index: Python's keywords and the two receiver
# names are in nearly every body, so they only cost index space and query time.
BODY_STOP_TERMS = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | {"self", "cls"}
# Shorter terms (x, i, n) match everywhere in numeric code and say nothing.
BODY_TERM_MIN_LENGTH = 2
# Distinct identifiers whose terms a process keeps (Django's sdist has ~60k).
IDENTIFIER_TERMS_CACHED = 1 << 17


@lru_cache(maxsize=IDENTIFIER_TERMS_CACHED)
def identifier_terms(identifier: str) -> tuple[str, ...]:
    """The terms one identifier gives: itself lower-cased, then its snake_case and
    CamelCase parts (``separabilityMatrix_cls`` → ``separabilitymatrix_cls``,
    ``separability``, ``matrix``, ``cls``), each once, short ones and keywords out."""
    whole = identifier.lower()
    out = [] if whole in BODY_STOP_TERMS or len(whole) < BODY_TERM_MIN_LENGTH else [whole]
    for piece in identifier.split("_"):
        for part in _CAMEL_PART.findall(piece):
            part = part.lower()
            if len(part) >= BODY_TERM_MIN_LENGTH and part not in out:
                out.append(part)
    return tuple(out)


# Every byte but an ASCII letter, digit or underscore, as a space: what is left of a text
# are its ASCII identifiers (each maybe led by digits), found by one split in C instead
# of a regex match per identifier (Django's sdist has 1.5M). Byte offsets stay put.
_IDENTIFIER_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_SPACE_BUT_IDENTIFIERS = bytes(byte if byte in _IDENTIFIER_BYTES else ord(" ")
                               for byte in range(256))
_DIGITS = b"0123456789"


class _TermsOfWord(dict[bytes, str]):
    """A word of a `_SPACE_BUT_IDENTIFIERS` text → its identifier's terms, space-separated
    ("" for none). A plain dict, not an lru_cache, so that a word seen before costs one
    C-level lookup; emptied when it holds IDENTIFIER_TERMS_CACHED words."""

    def __missing__(self, word: bytes) -> str:
        if word.isalpha() and word[1:].islower():
            # most words (``name``, ``Model``): one part, the word lower-cased, as
            # `identifier_terms` finds, at a fraction of its cost
            terms = word.lower().decode("ascii") if len(word) >= BODY_TERM_MIN_LENGTH else ""
        elif word.islower() and word.replace(b"_", b"").isalpha():
            # snake_case (``get_queryset``): the word, then its parts, as `identifier_terms`
            whole = word.decode("ascii")
            parts = [] if whole in BODY_STOP_TERMS or len(whole) < BODY_TERM_MIN_LENGTH \
                else [whole]
            for part in whole.split("_"):
                if len(part) >= BODY_TERM_MIN_LENGTH and part not in parts:
                    parts.append(part)
            terms = " ".join(parts)
        else:
            # a word led by digits is the identifier after them (a regex would start there)
            identifier = word.lstrip(_DIGITS).decode("ascii")
            terms = " ".join(identifier_terms(identifier)) if identifier else ""
        if len(self) >= IDENTIFIER_TERMS_CACHED:
            self.clear()
        self[word] = terms
        return terms


_terms_of_word = _TermsOfWord().__getitem__


def _joined_terms(words: list[bytes]) -> str:
    return " ".join(filter(None, map(_terms_of_word, words)))


def _words(text: str) -> list[bytes]:
    # a character that is not ASCII becomes "?", and so a space
    return text.encode("ascii", "replace").translate(_SPACE_BUT_IDENTIFIERS).split()


def code_terms(text: str) -> str:
    """The terms of every ASCII identifier in `text`, space-separated, in order, repeats
    kept (BM25 counts them). Words in strings and comments count: an issue quotes error
    messages."""
    return _joined_terms(_words(text))


def body_terms(source: bytes, symbols: list[Symbol]) -> list[str]:
    """Per symbol, the space-separated terms of its qualified name and its *own* text:
    its byte span without the spans of the symbols defined inside it (a class keeps its
    attributes and docstring, its methods are documents of their own; a module keeps its
    top-level statements). So every byte of a file is indexed once, for the innermost
    symbol holding it, and the index grows with the source, not with nesting depth.

    `code_terms` of `own_texts`, computed on the bytes: a byte that is not ASCII (in a
    character, or invalid) separates identifiers as a character that is not does."""
    spaced = source.translate(_SPACE_BUT_IDENTIFIERS)
    out = []
    for symbol, spans in zip(symbols, _own_spans(symbols), strict=True):
        words = _words(symbol.qualname)
        for start, end in spans:
            words += spaced[start:end].split()
        out.append(_joined_terms(words))
    return out


def own_texts(source: bytes, symbols: list[Symbol]) -> list[str]:
    """Per symbol, the text its body terms are made of (`body_terms`): equal texts give
    equal terms."""
    return ["\n".join([symbol.qualname.replace(".", " ")]
                      + [source[start:end].decode("utf-8", "replace") for start, end in spans])
            for symbol, spans in zip(symbols, _own_spans(symbols), strict=True)]


def _own_spans(symbols: list[Symbol]) -> list[list[tuple[int, int]]]:
    """Per symbol, the byte spans of its own text: its span less its children's."""
    children: dict[int, list[Symbol]] = {}
    for symbol in symbols:
        if symbol.parent_index >= 0:
            children.setdefault(symbol.parent_index, []).append(symbol)
    out = []
    for symbol in symbols:
        spans = []
        position = symbol.start_byte
        for child in sorted(children.get(symbol.ordinal, ()), key=_BY_SPAN):
            spans.append((position, child.start_byte))
            position = max(position, child.end_byte)
        spans.append((position, symbol.end_byte))
        out.append(spans)
    return out


# Separates the symbols' terms in `ParsedFile.body_terms` (terms never hold it).
BODY_TERMS_SEPARATOR = "\n"


def join_body_terms(per_symbol: list[str]) -> str:
    return BODY_TERMS_SEPARATOR.join(per_symbol)


def split_body_terms(joined: str, n_symbols: int) -> list[str]:
    """`join_body_terms` undone: one string per symbol (none for a file without any)."""
    return joined.split(BODY_TERMS_SEPARATOR) if n_symbols else []


def _decode(data: bytes) -> tuple[str, bool]:
    """The file's text, and whether it had to be repaired (invalid UTF-8 or NUL bytes)."""
    try:
        text = data.decode("utf-8")
        not_utf8 = False
    except UnicodeDecodeError:
        text = data.decode("utf-8", "replace")
        not_utf8 = True
    if "\x00" in text:  # not Python source either, and PostgreSQL text cannot hold it
        text = text.replace("\x00", "\ufffd")
        not_utf8 = True
    return text, not_utf8


class _Captured:
    """One file's UTF-8 bytes and the nodes the query captured in them (for the names in
    _SPANS_ONLY, their spans alone)."""

    def __init__(self, data: bytes,
                 captures: dict[str, tuple[list[tree_sitter.Node] | None,
                                           list[tuple[int, int]]]],
                 ) -> None:
        self.data = data
        self._captures = captures

    def __getitem__(self, name: str) -> list[tree_sitter.Node]:
        """The nodes of one capture name, in span order (none: an empty list)."""
        nodes = self._captures.get(name, _NO_CAPTURES)[0]
        if nodes is None:
            raise KeyError(f"capture {name!r} is read as spans only (_SPANS_ONLY)")
        return nodes

    def spans(self, name: str) -> list[tuple[int, int]]:
        """The (start_byte, end_byte) of one capture name's nodes, sorted."""
        return self._captures.get(name, _NO_CAPTURES)[1]

    def text(self, node: tree_sitter.Node) -> str:
        return self.data[node.start_byte : node.end_byte].decode("utf-8", "replace")


_NO_CAPTURES: tuple[list, list] = ([], [])
# The captures extraction reads by their spans alone (`_Captured.spans`), never as nodes:
# the calls alone are 166k of the 420k nodes Django's sdist captures.
_SPANS_ONLY = frozenset((
    "function.name", "function.colon", "class.name", "class.colon", "decorated.inner",
    "docstring.definition", "reference.call", "reference.decorator", "reference.base",
    "type.var", "type.var_class",
))


def _definitions(
    found: _Captured, relpath: str, module: str, line_count: int
) -> tuple[list[Symbol], _Scopes]:
    """The module symbol, then a Symbol per class, function and method in source order
    (key, qualname, parent, span from the first decorator, signature; no docstring
    yet), and each symbol's scope."""
    end_of_file = len(found.data)
    symbols = [
        Symbol(0, -1, relpath, "module", module.rsplit(".", 1)[-1], module, 1,
               max(line_count, 1), 0, end_of_file, None, None)
    ]
    scopes = _Scopes(end_of_file)
    keys_seen: dict[str, int] = {}
    holding = [symbols[0]]  # the symbols holding this definition, innermost last
    for definition in _captured_definitions(found):
        start, end = definition.start_byte, definition.end_byte
        while len(holding) > 1 and holding[-1].end_byte <= start:
            holding.pop()
        parent = holding[-1]
        name = found.data[definition.name_start : definition.name_end].decode("utf-8",
                                                                              "replace")
        qual = name if parent.ordinal == 0 else f"{parent.qualname}.{name}"
        kind = definition.kind
        if kind == "function" and parent.kind == "class":
            kind = "method"
        key = f"{relpath}::{qual}"
        n_seen = keys_seen.get(key, 0) + 1
        keys_seen[key] = n_seen
        if n_seen > 1:  # redefinition in one scope (property setter, if/else variants)
            key = f"{key}#{n_seen}"
        start_line = definition.outer.start_point[0] + 1
        end_row, end_col = definition.node.end_point
        end_line = max(end_row + 1 if end_col else end_row, start_line)
        ordinal = len(symbols)
        signature = found.data[start : definition.colon_end].decode("utf-8", "replace")
        symbol = Symbol(ordinal, parent.ordinal, key, kind, name, qual, start_line, end_line,
                        start, end, signature, None)
        symbols.append(symbol)
        scopes.add(start, end)
        holding.append(symbol)
    return symbols, scopes


def _captured_definitions(found: _Captured) -> list[_Definition]:
    """Every function and class definition, outer before inner; a decorated one starts
    at its first decorator."""
    # the spans the captures come with, not the nodes' (each a C call building a tuple)
    decorated = {
        inner_start: (outer, outer_start)
        for (inner_start, _), outer, (outer_start, _) in zip(
            found.spans("decorated.inner"), found["decorated.outer"],
            found.spans("decorated.outer"), strict=True)
    }
    definitions = []
    for kind in ("function", "class"):
        for (start, end), definition, (name_start, name_end), (_, colon_end) in zip(
            found.spans(f"{kind}.definition"), found[f"{kind}.definition"],
            found.spans(f"{kind}.name"), found.spans(f"{kind}.colon"),
            strict=True,
        ):
            outer, outer_start = decorated.get(start, (definition, start))
            definitions.append(_Definition(outer_start, end, kind, outer, definition,
                                           name_start, name_end, colon_end))
    definitions.sort(key=lambda d: (d.start_byte, -d.end_byte))
    return definitions


def _attach_docstrings(found: _Captured, symbols: list[Symbol], scopes: _Scopes) -> None:
    """Each symbol's first docstring line: the module's, and a definition's from the
    string that is the first statement of its body (its owner is that definition)."""
    for node in found["docstring.module"]:
        symbols[0] = symbols[0]._replace(doc=doc_line(found.text(node)))
    literals = found.spans("docstring.definition")
    owners = scopes.owners([start for start, _ in literals])
    for (start, end), owner in zip(literals, owners, strict=True):
        if owner > 0:
            literal = found.data[start:end].decode("utf-8", "replace")
            symbols[owner] = symbols[owner]._replace(doc=doc_line(literal))


class _LocalTypes:
    """The classes of local names, so a call on a name can be resolved through its class.

    Variables: ``x = Class(...)`` and a parameter annotated ``x: Class``, per scope.
    Attributes: ``self.x = Class(...)``, or ``self.x = x`` with x of known class, in a
    method: per class. The first assignment of a name wins.
    """

    def __init__(self, found: _Captured, symbols: list[Symbol], scopes: _Scopes) -> None:
        self._kinds = [symbol.kind for symbol in symbols]
        self._parents = [symbol.parent_index for symbol in symbols]
        self._variables: dict[int, dict[str, str]] = {}  # scope → variable → class as written
        self._attributes: dict[int, dict[str, str]] = {}  # class → attribute → class
        self._collect_variables(found, scopes)
        self._collect_attributes(found, scopes)

    def _collect_variables(self, found: _Captured, scopes: _Scopes) -> None:
        data = found.data
        pairs = list(zip(found.spans("type.var"), found.spans("type.var_class"), strict=True))
        owners = scopes.owners([variable[0] for variable, _ in pairs])
        for ((start, end), (class_start, class_end)), owner in zip(pairs, owners, strict=True):
            self._variables.setdefault(owner, {}).setdefault(
                data[start:end].decode("utf-8", "replace"),
                data[class_start:class_end].decode("utf-8", "replace"),
            )

    def _collect_attributes(self, found: _Captured, scopes: _Scopes) -> None:
        triples = list(zip(found["type.self"], found["type.attr"], found["type.attr_class"],
                           strict=True))
        owners = scopes.owners([receiver.start_byte for receiver, _, _ in triples])
        for (receiver, attribute, value), owner in zip(triples, owners, strict=True):
            if found.text(receiver) != "self" or self._kinds[owner] != "method":
                continue
            assigned = value.parent  # the call the class is written in, or the assignment
            if assigned is None:
                raise ValueError(f"line {value.start_point[0] + 1}: the class captured for "
                                 f"self.{found.text(attribute)} is in no assignment")
            value_class = found.text(value)
            if assigned.type != "call":  # self.x = x: the class of x, when known
                variable_class = self._variable_class(owner, value_class)
                if variable_class is None:
                    continue
                value_class = variable_class
            self._attributes.setdefault(self._enclosing_class(owner), {}).setdefault(
                found.text(attribute), value_class
            )

    def typed_name(self, owner: int, name: str) -> str | None:
        """`name` (used in symbol `owner`) with a variable of known class replaced by
        that class, else None."""
        head, _, rest = name.partition(".")
        if not rest:
            return None
        if head == "self":
            attribute, _, rest = rest.partition(".")
            if rest and self._attributes:
                found = self._attributes.get(self._enclosing_class(owner), {}).get(attribute)
                if found is not None:
                    return f"{found}.{rest}"
            return None
        if self._variables:
            found = self._variable_class(owner, head)
            if found is not None:
                return f"{found}.{rest}"
        return None

    def _variable_class(self, owner: int, variable: str) -> str | None:
        scope = owner
        while scope >= 0:
            if self._kinds[scope] != "class" or scope == owner:  # class bodies do not enclose
                found = self._variables.get(scope, {}).get(variable)
                if found is not None:
                    return found
            scope = self._parents[scope]
        return None

    def _enclosing_class(self, owner: int) -> int:
        scope = self._parents[owner]
        while scope > 0 and self._kinds[scope] != "class":
            scope = self._parents[scope]
        return scope  # 0 (the module) when there is none


def _references(
    found: _Captured, scopes: _Scopes, local_types: _LocalTypes
) -> list[Reference]:
    """Calls (a bare decorator too) and base classes written as dotted names (or
    ``super().name``), each owned by the innermost enclosing symbol: calls first, then
    inherits, each in source order, once per (kind, owner, name)."""
    data = found.data
    typed_name = local_types.typed_name
    references = []
    seen: set[tuple[str, int, str]] = set()
    # one str object per name: the pickle sent to the indexer's process then holds a
    # name repeated in a file once (and unpickles it once)
    names: dict[bytes, str] = {}
    for kind, spans in (
        ("calls", _merge_spans(found.spans("reference.call"),
                               found.spans("reference.decorator"))),
        ("inherits", found.spans("reference.base")),
    ):
        line, line_pos = 1, 0
        owners = scopes.owners([start for start, _ in spans])
        for (start, end), owner in zip(spans, owners, strict=True):
            raw = data[start:end]
            name = names.get(raw)
            if name is None:
                if _ASCII_DOTTED.match(raw):
                    name = raw.decode("ascii")
                else:
                    name = raw.decode("utf-8", "replace")
                    if not _DOTTED.match(name):
                        m = _SUPER.match(name)
                        name = "" if m is None else f"super().{m.group(1)}"
                names[raw] = name
                if not name:
                    continue
            elif not name:
                continue
            ident = (kind, owner, name)
            if ident in seen:
                continue
            seen.add(ident)
            line += data.count(b"\n", line_pos, start)
            line_pos = start
            # only a dotted name can be typed
            typed = typed_name(owner, name) if "." in name else None
            references.append(Reference(kind, owner, name, line, typed))
    return references


class _Imports:
    """The import statements: one imports reference (from the module symbol) per module
    or name imported, at its first line, and the names the module binds (the first
    binding of a name wins; a star import once per module starred)."""

    def __init__(self, found: _Captured, module: str, is_package: bool) -> None:
        self.references: list[Reference] = []
        self.bound_names: set[str] = set()
        self._found = found
        self._module = module
        self._is_package = is_package
        self._targets: set[str] = set()
        self._bindings: dict[tuple[str, str], Binding] = {}  # by (name, target)
        for node in _merge(found["import.plain"], found["import.from"]):
            line = node.start_point[0] + 1
            if node.type == "import_statement":
                self._read_import(node, line)
            else:
                self._read_from_import(node, line)

    @property
    def bindings(self) -> list[Binding]:
        return list(self._bindings.values())

    def _read_import(self, node: tree_sitter.Node, line: int) -> None:
        """``import a.b`` binds a; ``import a.b as c`` binds c to a.b."""
        text = self._found.text
        for child in node.named_children:
            if child.type == "dotted_name":
                target = text(child)
                self._add(target, line)
                top = target.split(".", 1)[0]
                self._bind(top, top, line)
            elif child.type == "aliased_import":
                name = child.child_by_field_name("name")
                alias = child.child_by_field_name("alias")
                if name is not None and alias is not None:
                    self._add(text(name), line)
                    self._bind(text(alias), text(name), line)

    def _read_from_import(self, node: tree_sitter.Node, line: int) -> None:
        """``from m import x [as y]`` binds x (or y) to m.x, m made absolute; ``from m
        import *`` imports m."""
        text = self._found.text
        module_node = node.child_by_field_name("module_name")
        if module_node is None:
            return
        base = absolute_module(text(module_node), self._module, self._is_package)
        names = node.children_by_field_name("name")
        if not names:
            if any(c.type == "wildcard_import" for c in node.named_children):
                self._add(base, line)
                self._bind("*", base, line)
            return
        for child in names:
            if child.type == "aliased_import":
                name = child.child_by_field_name("name")
                alias = child.child_by_field_name("alias")
                if name is None or alias is None:
                    continue
                local, imported = text(alias), text(name)
            else:
                local = imported = text(child)
            target = f"{base}.{imported}" if base else imported
            self._add(target, line)
            self._bind(local, target, line)

    def _add(self, target: str, line: int) -> None:
        if target not in self._targets:
            self._targets.add(target)
            self.references.append(Reference("imports", 0, target, line, None))

    def _bind(self, name: str, target: str, line: int) -> None:
        if name == "*":
            self._bindings.setdefault(("*", target), Binding("*", target, line))
        elif name not in self.bound_names:
            self.bound_names.add(name)
            self._bindings[(name, target)] = Binding(name, target, line)


def _without_builtin_calls(
    references: list[Reference], defined_names: set[str], bound_names: set[str]
) -> list[Reference]:
    """Calls to Python builtins (a bare name the file neither defines nor imports) are
    not recorded: they never resolve to repository code."""
    return [
        r for r in references
        if not (r.dst_name in _BUILTINS and r.kind == "calls" and r.dst_name not in defined_names
                and r.dst_name not in bound_names)
    ]


def _merge(a: list, b: list) -> list:
    """Two capture lists as one, still sorted by span."""
    if not b:
        return a
    merged = a + b
    merged.sort(key=_BY_SPAN)
    return merged


def _merge_spans(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Two capture lists' spans as one, still sorted."""
    return sorted(a + b) if b else a
