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
import re
from functools import cache, partial
from importlib import resources
from operator import attrgetter
from typing import NamedTuple

import tree_sitter
import tree_sitter_python

PARSER_NAME = "tree-sitter-python"

_ASCII_DOTTED = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_DOTTED = re.compile(r"[^\W\d]\w*(?:\.[^\W\d]\w*)*\Z")
_SUPER = re.compile(r"super\([^()]*\)\.([^\W\d]\w*)\Z")
_DOC_PREFIX = re.compile(r"[rRuU]?(\"\"\"|'''|\"|')")

DOC_LINE_MAX = 300

_BY_SPAN = attrgetter("start_byte", "end_byte")
_BUILTINS = frozenset(name for name in dir(builtins) if not name.startswith("_"))


class Symbol(NamedTuple):
    """A definition of one file. Indexes count the file's symbols; 0 is the module."""

    index: int
    parent_index: int  # -1 for the module symbol
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
    src_index: int  # the Symbol.index of the innermost enclosing definition
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

    def __reduce__(self):
        # How a worker sends it back. Pickle saves each record of a list through a
        # Python-level __getnewargs__ call (Django's sdist: ~4x the time of plain
        # tuples); as plain tuples, rebuilt by C calls, the cost is a tuple's.
        return _unpickle_parsed_file, (
            tuple(self[:6]),
            list(map(tuple, self.symbols)),
            list(map(tuple, self.references)),
            list(map(tuple, self.bindings)),
        )


_as_symbol = partial(tuple.__new__, Symbol)
_as_reference = partial(tuple.__new__, Reference)
_as_binding = partial(tuple.__new__, Binding)


def _unpickle_parsed_file(head: tuple, symbols: list, references: list, bindings: list):
    return ParsedFile(
        *head,
        list(map(_as_symbol, symbols)),
        list(map(_as_reference, references)),
        list(map(_as_binding, bindings)),
    )


class _Definition(NamedTuple):
    """A function or class definition as captured, before it becomes a Symbol."""

    start_byte: int  # of the first decorator, when decorated
    end_byte: int
    kind: str  # function | class
    outer: tree_sitter.Node  # the decorated definition, else the definition itself
    node: tree_sitter.Node
    name: tree_sitter.Node
    colon: tree_sitter.Node


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


def sorted_captures(
    query: tree_sitter.Query, node: tree_sitter.Node
) -> dict[str, list[tree_sitter.Node]]:
    """Captured nodes by capture name, each list sorted by (start_byte, end_byte).

    The one function that knows tree-sitter's capture API: 0.25 returns a dict from
    `QueryCursor.captures`, in an order that changes from call to call.
    """
    raw = tree_sitter.QueryCursor(query).captures(node)
    out = {}
    for name in sorted(raw):
        nodes = list(raw[name])
        nodes.sort(key=_BY_SPAN)
        out[name] = nodes
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


def extract_file(relpath: str, data: bytes, module: str, is_package: bool) -> ParsedFile:
    """Parse one file into its symbols, references and import bindings."""
    sha = hashlib.sha256(data).hexdigest()
    size = len(data)
    try:
        text = data.decode("utf-8")
        not_utf8 = False
    except UnicodeDecodeError:
        text = data.decode("utf-8", "replace")
        not_utf8 = True
    if "\x00" in text:  # not Python source either, and PostgreSQL text cannot hold it
        text = text.replace("\x00", "\ufffd")
        not_utf8 = True
    if not_utf8:
        data = text.encode("utf-8")  # byte offsets always index the stored text's UTF-8
    line_count = count_lines(text)

    tree = _parser().parse(data)
    root = tree.root_node
    syntax_error = root.has_error
    caps = sorted_captures(load_query("python"), root)
    get = caps.get

    def text_of(start: int, end: int) -> str:
        return data[start:end].decode("utf-8", "replace")

    module_doc = None
    for literal in get("docstring.module", ()):
        module_doc = doc_line(text_of(literal.start_byte, literal.end_byte))

    # -- decorated definitions start at their first decorator ------------------------------
    outer_start = {
        inner.start_byte: outer
        for inner, outer in zip(
            get("decorated.inner", ()), get("decorated.outer", ()), strict=True
        )
    }

    # -- definitions -----------------------------------------------------------------------
    defs = []
    for kind in ("function", "class"):
        for d, nm, colon in zip(
            get(f"{kind}.definition", ()),
            get(f"{kind}.name", ()),
            get(f"{kind}.colon", ()),
            strict=True,
        ):
            outer = outer_start.get(d.start_byte)
            if outer is None:
                outer = d
            defs.append(_Definition(outer.start_byte, d.end_byte, kind, outer, d, nm, colon))
    defs.sort(key=lambda d: (d.start_byte, -d.end_byte))  # outer before inner

    symbols = [
        Symbol(0, -1, relpath, "module", module.rsplit(".", 1)[-1], module, 1,
               max(line_count, 1), 0, len(data), None, module_doc)
    ]
    scopes = _Scopes(len(data))
    kinds = ["module"]
    quals = [module]
    def_names: set[str] = set()
    keys_seen: dict[str, int] = {}
    holding = [0]  # the symbols holding this definition, innermost last
    for start, end, kind, outer, d, nm, colon in defs:
        while len(holding) > 1 and scopes.ends[holding[-1]] <= start:
            holding.pop()
        parent = holding[-1]
        name = text_of(nm.start_byte, nm.end_byte)
        def_names.add(name)
        qual = name if parent == 0 else f"{quals[parent]}.{name}"
        if kind == "function" and kinds[parent] == "class":
            kind = "method"
        key = f"{relpath}::{qual}"
        n_seen = keys_seen.get(key, 0) + 1
        keys_seen[key] = n_seen
        if n_seen > 1:  # redefinition in one scope (property setter, if/else variants)
            key = f"{key}#{n_seen}"
        start_line = outer.start_point[0] + 1
        end_row, end_col = d.end_point
        end_line = max(end_row + 1 if end_col else end_row, start_line)
        index = len(symbols)
        symbols.append(
            Symbol(index, parent, key, kind, name, qual, start_line, end_line, start, end,
                   text_of(start, colon.end_byte), None)
        )
        kinds.append(kind)
        quals.append(qual)
        scopes.add(start, end)
        holding.append(index)

    # -- docstrings: the owner of a definition's first-statement string is that definition
    docs = get("docstring.definition", [])
    owners = scopes.owners([literal.start_byte for literal in docs])
    for literal, owner in zip(docs, owners, strict=True):
        if owner > 0:
            doc = doc_line(text_of(literal.start_byte, literal.end_byte))
            symbols[owner] = symbols[owner]._replace(doc=doc)

    # -- local types: x = Class(...), x: Class, self.x = Class(...) ------------------------
    parents = [sym.parent_index for sym in symbols]
    var_types: dict[int, dict[str, str]] = {}  # scope index → variable → class as written
    pairs = list(zip(get("type.var", ()), get("type.var_class", ()), strict=True))
    owners = scopes.owners([var.start_byte for var, _ in pairs])
    for (var, var_class), owner in zip(pairs, owners, strict=True):
        var_types.setdefault(owner, {}).setdefault(
            text_of(var.start_byte, var.end_byte), text_of(var_class.start_byte, var_class.end_byte)
        )

    def var_type(owner: int, var: str) -> str | None:
        scope = owner
        while scope >= 0:
            if kinds[scope] != "class" or scope == owner:  # class bodies do not enclose
                found = var_types.get(scope, {}).get(var)
                if found is not None:
                    return found
            scope = parents[scope]
        return None

    def enclosing_class(owner: int) -> int:
        scope = parents[owner]
        while scope > 0 and kinds[scope] != "class":
            scope = parents[scope]
        return scope  # 0 (the module) when there is none

    attr_types: dict[int, dict[str, str]] = {}  # class index → attribute → class
    triples = list(
        zip(get("type.self", ()), get("type.attr", ()), get("type.attr_class", ()), strict=True)
    )
    owners = scopes.owners([slf.start_byte for slf, _, _ in triples])
    for (slf, attr, value), owner in zip(triples, owners, strict=True):
        if data[slf.start_byte : slf.end_byte] != b"self" or kinds[owner] != "method":
            continue
        text = text_of(value.start_byte, value.end_byte)
        if value.parent.type != "call":  # self.x = x: the class of x, when known
            text = var_type(owner, text)
            if text is None:
                continue
        attr_types.setdefault(enclosing_class(owner), {}).setdefault(
            text_of(attr.start_byte, attr.end_byte), text
        )

    def typed_name(owner: int, name: str) -> str | None:
        """`name` with a variable of known class replaced by that class, else None."""
        head, _, rest = name.partition(".")
        if not rest:
            return None
        if head == "self":
            attr, _, rest = rest.partition(".")
            if rest and attr_types:
                found = attr_types.get(enclosing_class(owner), {}).get(attr)
                if found is not None:
                    return f"{found}.{rest}"
            return None
        if var_types:
            found = var_type(owner, head)
            if found is not None:
                return f"{found}.{rest}"
        return None

    # -- references: calls, decorators, bases → owner = innermost enclosing symbol ---------
    refs = []
    seen: set = set()
    for kind, found in (
        ("calls", _merge(get("reference.call", []), get("reference.decorator", []))),
        ("inherits", get("reference.base", ())),
    ):
        line, line_pos = 1, 0
        owners = scopes.owners([f.start_byte for f in found])
        for node, owner in zip(found, owners, strict=True):
            start = node.start_byte
            raw = data[start : node.end_byte]
            if _ASCII_DOTTED.match(raw):
                name = raw.decode("ascii")
            else:
                name = raw.decode("utf-8", "replace")
                if not _DOTTED.match(name):
                    m = _SUPER.match(name)
                    if m is None:
                        continue
                    name = f"super().{m.group(1)}"
            ident = (kind, owner, name)
            if ident in seen:
                continue
            seen.add(ident)
            line += data.count(b"\n", line_pos, start)
            line_pos = start
            refs.append(Reference(kind, owner, name, line, typed_name(owner, name)))

    # -- imports: module → module edges and the names they bind ----------------------------
    bindings: dict[tuple[str, str], Binding] = {}  # by (name, target)
    bound_names: set = set()

    def bind(name: str, target: str, line: int) -> None:
        if name == "*":
            bindings.setdefault(("*", target), Binding("*", target, line))
        elif name not in bound_names:  # the first binding of a name wins
            bound_names.add(name)
            bindings[(name, target)] = Binding(name, target, line)

    def add_import(target: str, line: int) -> None:
        ident = ("imports", 0, target)
        if ident not in seen:
            seen.add(ident)
            refs.append(Reference("imports", 0, target, line, None))

    def node_text(node) -> str:
        return data[node.start_byte : node.end_byte].decode("utf-8", "replace")

    imports = _merge(get("import.plain", []), get("import.from", []))
    for node in imports:
        line = node.start_point[0] + 1
        if node.type == "import_statement":
            for child in node.named_children:
                if child.type == "dotted_name":
                    target = node_text(child)
                    add_import(target, line)
                    bind(target.split(".", 1)[0], target.split(".", 1)[0], line)
                elif child.type == "aliased_import":
                    nm = child.child_by_field_name("name")
                    alias = child.child_by_field_name("alias")
                    if nm is not None and alias is not None:
                        add_import(node_text(nm), line)
                        bind(node_text(alias), node_text(nm), line)
            continue
        mod_node = node.child_by_field_name("module_name")
        if mod_node is None:
            continue
        base = absolute_module(node_text(mod_node), module, is_package)
        names = node.children_by_field_name("name")
        if not names:
            if any(c.type == "wildcard_import" for c in node.named_children):
                add_import(base, line)
                bind("*", base, line)
            continue
        for child in names:
            if child.type == "aliased_import":
                nm, alias = child.child_by_field_name("name"), child.child_by_field_name("alias")
                if nm is None or alias is None:
                    continue
                local, imported = node_text(alias), node_text(nm)
            else:
                local = imported = node_text(child)
            target = f"{base}.{imported}" if base else imported
            add_import(target, line)
            bind(local, target, line)

    # Calls to Python builtins (a bare name the file neither defines nor imports) are
    # not recorded: they never resolve to repository code.
    refs = [
        r for r in refs
        if not (r.dst_name in _BUILTINS and r.kind == "calls" and r.dst_name not in def_names
                and r.dst_name not in bound_names)
    ]
    return ParsedFile(
        sha, size, line_count, syntax_error, not_utf8, data,
        symbols, refs, list(bindings.values()),
    )


def _merge(a: list, b: list) -> list:
    """Two capture lists as one, still sorted by span."""
    if not b:
        return a
    merged = a + b
    merged.sort(key=_BY_SPAN)
    return merged
