"""Per-file extraction: the bytes of one Python file → symbols, references, name bindings.

Pure and database-free, so it runs in worker processes. The version-sensitive part of
tree-sitter's Python API (building the language, parser and query; how captures come
back) is confined to `language`, `_parser`, `load_query` and `sorted_captures`; the rest
works on byte offsets and the stable Node attributes.

Output rows (plain tuples, cheap to pickle back from a worker):

- symbol:  (index, parent_index, key, kind, name, qualname,
            start_line, end_line, start_byte, end_byte, signature, doc)
  index 0 is the module symbol; parent_index is -1 for it.
- reference: (kind, src_index, dst_name, line, typed_name) with kind in calls / inherits /
  imports; one row per (kind, src_index, dst_name), at the first line it occurs.
  typed_name is dst_name with a variable of known class replaced by the class
  (``calc.total`` → ``PriceCalculator.total`` after ``calc = PriceCalculator(...)``;
  ``self.tax.rate`` → ``TaxPolicy.rate`` after ``self.tax = TaxPolicy()`` or
  ``self.tax = tax`` with ``tax: TaxPolicy``), else None.
- binding: (name, target, line): a name the module binds by import, with the absolute
  dotted name it refers to ("*" for a star import, once per module starred).
"""

from __future__ import annotations

import builtins
import hashlib
import re
from functools import cache
from importlib import resources
from operator import itemgetter

import tree_sitter
import tree_sitter_python

PARSER_NAME = "tree-sitter-python"

_ASCII_DOTTED = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
_DOTTED = re.compile(r"[^\W\d]\w*(?:\.[^\W\d]\w*)*\Z")
_SUPER = re.compile(r"super\([^()]*\)\.([^\W\d]\w*)\Z")
_DOC_PREFIX = re.compile(r"[rRuU]?(\"\"\"|'''|\"|')")

DOC_LINE_MAX = 300

_SPAN = itemgetter(0, 1)
_BUILTINS = frozenset(name for name in dir(builtins) if not name.startswith("_"))


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


def sorted_captures(query: tree_sitter.Query, node: tree_sitter.Node) -> dict[str, list]:
    """Captures by name: lists of (start_byte, end_byte, node) sorted by (start_byte, end_byte).

    The one function that knows tree-sitter's capture API: 0.25 returns a dict from
    `QueryCursor.captures`, in an order that changes from call to call.
    """
    raw = tree_sitter.QueryCursor(query).captures(node)
    out = {}
    for name in sorted(raw):
        spans = [(n.start_byte, n.end_byte, n) for n in raw[name]]
        spans.sort(key=_SPAN)
        out[name] = spans
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


def extract_file(relpath: str, data: bytes, module: str, is_package: bool) -> tuple:
    """Parse one file. Returns (sha256, size_bytes, line_count, syntax_error, not_utf8,
    source, symbols, refs, bindings); `source` is the UTF-8 text as bytes (re-encoded
    after replacement when the file was not UTF-8) — bytes travel between processes
    far cheaper than str.
    """
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
    for s, e, _ in get("docstring.module", ()):
        module_doc = doc_line(text_of(s, e))

    # -- decorated definitions start at their first decorator ------------------------------
    outer_start = {
        inner[0]: outer[2]
        for inner, outer in zip(
            get("decorated.inner", ()), get("decorated.outer", ()), strict=True
        )
    }

    # -- definitions -----------------------------------------------------------------------
    defs = []  # (span start, span end, kind, outer node, definition node, name, colon)
    for kind in ("function", "class"):
        for d, nm, colon in zip(
            get(f"{kind}.definition", ()),
            get(f"{kind}.name", ()),
            get(f"{kind}.colon", ()),
            strict=True,
        ):
            outer = outer_start.get(d[0])
            if outer is None:
                outer = d[2]
            defs.append((outer.start_byte, d[1], kind, outer, d[2], nm, colon))
    defs.sort(key=lambda t: (t[0], -t[1]))

    symbols = [
        (0, -1, relpath, "module", module.rsplit(".", 1)[-1], module, 1, max(line_count, 1),
         0, len(data), None, module_doc)
    ]
    scopes = [(0, len(data), 0)]  # (start_byte, end_byte, symbol index), in start order
    kinds = ["module"]
    quals = [module]
    def_names: set[str] = set()
    keys_seen: dict[str, int] = {}
    stack = [scopes[0]]
    for start, end, kind, outer, d, nm, colon in defs:
        while len(stack) > 1 and stack[-1][1] <= start:
            stack.pop()
        parent = stack[-1][2]
        name = text_of(nm[0], nm[1])
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
            (index, parent, key, kind, name, qual, start_line, end_line, start, end,
             text_of(start, colon[1]), None)
        )
        kinds.append(kind)
        quals.append(qual)
        scope = (start, end, index)
        scopes.append(scope)
        stack.append(scope)

    # -- docstrings: the owner of a definition's first-statement string is that definition
    docs = get("docstring.definition", [])
    for (s, e, _), owner in zip(docs, _owners(scopes, [d[0] for d in docs]), strict=True):
        if owner > 0:
            symbols[owner] = symbols[owner][:-1] + (doc_line(text_of(s, e)),)

    # -- local types: x = Class(...), x: Class, self.x = Class(...) ------------------------
    parents = [sym[1] for sym in symbols]
    var_types: dict[int, dict[str, str]] = {}  # scope index → variable → class as written
    pairs = list(zip(get("type.var", ()), get("type.var_class", ()), strict=True))
    owners = _owners(scopes, [p[0][0] for p in pairs])
    for ((s, e, _), (cs, ce, _)), owner in zip(pairs, owners, strict=True):
        var_types.setdefault(owner, {}).setdefault(text_of(s, e), text_of(cs, ce))

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
    owners = _owners(scopes, [t[0][0] for t in triples])
    for (slf, attr, value), owner in zip(triples, owners, strict=True):
        if data[slf[0] : slf[1]] != b"self" or kinds[owner] != "method":
            continue
        text = text_of(value[0], value[1])
        if value[2].parent.type != "call":  # self.x = x: the class of x, when known
            text = var_type(owner, text)
            if text is None:
                continue
        attr_types.setdefault(enclosing_class(owner), {}).setdefault(
            text_of(attr[0], attr[1]), text
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
        owners = _owners(scopes, [f[0] for f in found])
        for (start, end, _), owner in zip(found, owners, strict=True):
            raw = data[start:end]
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
            refs.append((kind, owner, name, line, typed_name(owner, name)))

    # -- imports: module → module edges and the names they bind ----------------------------
    bindings: dict[tuple[str, str], tuple[str, str, int]] = {}
    bound_names: set = set()

    def bind(name: str, target: str, line: int) -> None:
        if name == "*":
            bindings.setdefault(("*", target), ("*", target, line))
        elif name not in bound_names:  # the first binding of a name wins
            bound_names.add(name)
            bindings[(name, target)] = (name, target, line)

    def add_import(target: str, line: int) -> None:
        ident = ("imports", 0, target)
        if ident not in seen:
            seen.add(ident)
            refs.append(("imports", 0, target, line, None))

    def node_text(node) -> str:
        return data[node.start_byte : node.end_byte].decode("utf-8", "replace")

    imports = [(s, 0, n) for s, _, n in get("import.plain", ())]
    imports += [(s, 1, n) for s, _, n in get("import.from", ())]
    imports.sort(key=_SPAN)
    for _, is_from, node in imports:
        line = node.start_point[0] + 1
        if not is_from:
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
        if not (r[2] in _BUILTINS and r[0] == "calls" and r[2] not in def_names
                and r[2] not in bound_names)
    ]
    return (
        sha, size, line_count, syntax_error, not_utf8, data,
        symbols, refs, list(bindings.values()),
    )


def _merge(a: list, b: list) -> list:
    """Two capture lists as one, still sorted by span."""
    if not b:
        return a
    merged = a + b
    merged.sort(key=_SPAN)
    return merged


def _owners(scopes: list[tuple[int, int, int]], starts: list[int]) -> list[int]:
    """For each position (ascending), the index of the innermost scope containing it.

    `scopes` are (start_byte, end_byte, symbol index) in start order, properly nested,
    the module first.
    """
    out = []
    stack = [scopes[0]]
    si = 1
    n_scopes = len(scopes)
    for start in starts:
        while si < n_scopes and scopes[si][0] <= start:
            scope = scopes[si]
            while len(stack) > 1 and stack[-1][1] <= scope[0]:
                stack.pop()
            stack.append(scope)
            si += 1
        while len(stack) > 1 and stack[-1][1] <= start:
            stack.pop()
        out.append(stack[-1][2])
    return out
