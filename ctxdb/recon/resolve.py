"""Name resolution: an edge's written name (``self.send``, ``models.Cart``) → a symbol id.

Simple, deterministic rules; the only type information is the hint the extractor
records as ``typed_name`` (a variable replaced by the class it was built from or
annotated with), which is tried before the name as written:

- ``self.x`` / ``cls.x``: member ``x`` of the enclosing class, else of its resolved
  bases (depth-first, left to right; each class once).
- ``super().x``: the same search, skipping the enclosing class itself.
- a bare name: a definition nested in an enclosing function, then a top-level
  definition of the same module, then a name the module imports (following
  re-exports through ``__init__`` modules), then star imports, then — only for a
  bare call/base name that is neither imported nor a builtin — the unique top-level
  function or class of that name in the whole repository.
- a dotted name ``a.b.c``: resolve ``a`` as above, then each part as a member of a
  module (its definitions, its imports, its submodules) or of a class (with bases).
- imports: the longest prefix of the absolute dotted name that is a module of the
  repository (``pkg.models.Cart`` → module ``pkg.models``).

Modules are known by their dotted name (walking up ``__init__.py`` packages) and, when
that does not clash, by their path with dots (``tests/helpers.py`` → ``tests.helpers``).

Inherits edges are resolved first (class members without bases), then calls and
imports (class members with bases). Everything works from plain rows, so a cold build
and an incremental one resolve through the same code.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

_BUILTINS = frozenset(dir(builtins))
_AMBIGUOUS = -1
# The heads of a name resolved through the enclosing class (`Resolver.resolve_name`).
_RECEIVERS = frozenset(("self", "cls", "super()"))


class ResolverFile(NamedTuple):
    id: int
    path: str
    module: str  # dotted module name
    is_test: bool


class ResolverSymbol(NamedTuple):
    id: int
    file_id: int
    parent_id: int | None  # None for a module symbol
    kind: str
    name: str


class ModuleBinding(NamedTuple):
    """A name a module binds by import ("*": a star import of `target`)."""

    file_id: int
    name: str
    target: str  # absolute dotted name


class WrittenBase(NamedTuple):
    """A base class as a class statement writes it (an inherits edge before resolution)."""

    class_id: int
    base_name: str
    typed_name: str | None


def module_names(paths: Iterable[str]) -> dict[str, str]:
    """Relative posix path → dotted module name, walking up ``__init__.py`` packages."""
    paths = list(paths)
    init_dirs = {p.rsplit("/", 1)[0] if "/" in p else "" for p in paths
                 if p.rsplit("/", 1)[-1] == "__init__.py"}
    out = {}
    for p in paths:
        parts = p.split("/")
        stem = parts[-1][:-3] if parts[-1].endswith(".py") else parts[-1]
        dirs = parts[:-1]
        i = len(dirs)
        while i > 0 and "/".join(dirs[:i]) in init_dirs:
            i -= 1
        names = dirs[i:] if stem == "__init__" else dirs[i:] + [stem]
        out[p] = ".".join(names) or stem
    return out


def path_module(path: str) -> str:
    """``tests/helpers.py`` → ``tests.helpers``; ``pkg/__init__.py`` → ``pkg``."""
    stem = path[:-3] if path.endswith(".py") else path
    if stem.endswith("/__init__"):
        stem = stem[: -len("/__init__")]
    return stem.replace("/", ".")


def is_test_function(is_test_file: bool, kind: str, name: str) -> bool:
    return is_test_file and kind in ("function", "method") and name.startswith("test")


class Resolver:
    """Resolve written names against one repository's files, symbols and bindings.

    files:    ResolverFile rows in file id order
    symbols:  ResolverSymbol rows in symbol id order
    bindings: ModuleBinding rows, sorted (one per name; star imports: name "*")
    inherits: WrittenBase rows in edge id order
    """

    def __init__(
        self,
        files: Iterable[ResolverFile],
        symbols: Iterable[ResolverSymbol],
        bindings: Iterable[ModuleBinding],
        inherits: Iterable[WrittenBase],
    ) -> None:
        self.file_path: dict[int, str] = {}
        self.file_module: dict[int, str] = {}
        self.file_is_test: dict[int, bool] = {}
        self.sym_file: dict[int, int] = {}
        self.sym_parent: dict[int, int | None] = {}
        self.sym_kind: dict[int, str] = {}
        self.sym_name: dict[int, str] = {}
        self.children: dict[tuple[int, str], int] = {}
        self.module_sym: dict[int, int] = {}
        # for updates in place (`replace_files`): each file's symbols, each scope's
        # member names, and every top-level function or class of a name
        self.file_symbols: dict[int, list[int]] = {}
        self.members: dict[int, list[str]] = {}
        self.top_definitions: dict[str, list[int]] = {}
        self.unique_top: dict[str, int] = {}
        self.bindings: dict[int, dict[str, str]] = {}
        self.stars: dict[int, list[str]] = {}
        # part of an import target → the names bound to targets holding it, with how many
        # bindings; built on first use by `names_bound_to`, then kept up to date
        self._bound_by_part: dict[str, dict[str, int]] | None = None
        self.written_bases: dict[int, list[WrittenBase]] = {}
        self.bases: dict[int, list[int]] = {}
        self.modules: dict[str, int] = {}
        self._mro: dict[int, list[int]] = {}
        self._absolute: dict[str, int | None] = {}
        self._in_progress: set[object] = set()
        self._cycle = False
        self._add(files, symbols, bindings, inherits)
        for name, definitions in self.top_definitions.items():
            if len(definitions) == 1:
                self.unique_top[name] = definitions[0]
        self._index_modules()
        self._resolve_bases(list(self.written_bases))

    def _add(
        self,
        files: Iterable[ResolverFile],
        symbols: Iterable[ResolverSymbol],
        bindings: Iterable[ModuleBinding],
        inherits: Iterable[WrittenBase],
    ) -> set[str]:
        """Take in these rows (files new to the resolver); returns the names of the
        top-level functions and classes added."""
        for file in files:
            self.file_path[file.id] = file.path
            self.file_module[file.id] = file.module
            self.file_is_test[file.id] = bool(file.is_test)
            self.file_symbols.setdefault(file.id, [])
        top_names = set()
        for symbol in symbols:
            sid, fid, parent = symbol.id, symbol.file_id, symbol.parent_id
            kind, name = symbol.kind, symbol.name
            self.sym_file[sid] = fid
            self.sym_parent[sid] = parent
            self.sym_kind[sid] = kind
            self.sym_name[sid] = name
            self.file_symbols[fid].append(sid)
            if kind == "module":
                self.module_sym[fid] = sid
                continue
            if parent is None:
                raise ValueError(f"symbol {sid} ({kind} {name!r}) has no parent: only a "
                                 "module symbol is outside every scope")
            self.children.setdefault((parent, name), sid)  # first definition wins
            self.members.setdefault(parent, []).append(name)
            if kind in ("function", "class") and self.sym_kind.get(parent) == "module":
                self.top_definitions.setdefault(name, []).append(sid)
                top_names.add(name)
        for binding in bindings:
            if binding.name == "*":
                self.stars.setdefault(binding.file_id, []).append(binding.target)
            else:
                bound = self.bindings.setdefault(binding.file_id, {})
                if binding.name not in bound:
                    bound[binding.name] = binding.target
                    self._count_binding(binding.name, binding.target, 1)
        for base in inherits:
            self.written_bases.setdefault(base.class_id, []).append(base)
        return top_names

    def _index_modules(self) -> None:
        """Module name → module symbol; a name two files claim is not used."""
        index: dict[str, int] = {}
        for fid, module in self.file_module.items():
            if fid in self.module_sym:
                index[module] = self.module_sym[fid] if module not in index else _AMBIGUOUS
        canonical = set(self.file_module.values())
        for fid, path in self.file_path.items():
            alias = path_module(path)
            if fid in self.module_sym and alias not in canonical:
                index[alias] = self.module_sym[fid] if alias not in index else _AMBIGUOUS
        self.modules = {k: v for k, v in index.items() if v != _AMBIGUOUS}

    def _resolve_bases(self, class_ids: Iterable[int]) -> None:
        """Resolve the written bases of these classes again.

        Bases are resolved without class bases (a base named Outer.Inner finds Inner
        among Outer's own members only), so the result does not depend on order.
        """
        class_ids = list(class_ids)
        kept, self.bases = self.bases, {}
        self.forget_lookups()
        resolved = {
            cid: [self.resolve(base.class_id, base.base_name, "inherits", base.typed_name)
                  for base in self.written_bases.get(cid, ())]
            for cid in class_ids
        }
        self.bases = kept
        self.forget_lookups()
        for cid, found in resolved.items():
            self.bases.pop(cid, None)
            for dst in found:
                if dst is not None and self.sym_kind.get(dst) == "class" and dst != cid:
                    self.bases.setdefault(cid, []).append(dst)

    def forget_lookups(self) -> None:
        """Drop the memoized lookups (after the rows changed)."""
        self._mro.clear()
        self._absolute.clear()

    # -- updates in place ------------------------------------------------------------------

    def replace_files(
        self,
        removed: Iterable[int],
        files: Iterable[ResolverFile],
        symbols: Iterable[ResolverSymbol],
        bindings: Iterable[ModuleBinding],
        inherits: Iterable[WrittenBase],
    ) -> None:
        """Remove the files `removed` (ids) and everything in them, then add these rows
        (of new file ids). Bases are not resolved again: `rebase` the classes whose
        bases may have moved (the new ones, and those whose written bases were
        resolved into the removed files or may resolve otherwise now)."""
        files = list(files)
        removed = list(removed)
        # module symbols of the removed files by path: when the same paths come back
        # under the same module names, the module index only needs their new symbols
        old_modules = {self.file_path[fid]: (self.file_module[fid], self.module_sym.get(fid))
                       for fid in removed if fid in self.file_path}
        touched_top: set[str] = set()
        for fid in removed:
            for sid in self.file_symbols.pop(fid, ()):
                parent, name = self.sym_parent.pop(sid), self.sym_name.pop(sid)
                kind = self.sym_kind.pop(sid)
                del self.sym_file[sid]
                self.written_bases.pop(sid, None)
                self.bases.pop(sid, None)
                self.members.pop(sid, None)
                if kind == "module" or parent is None:  # `_add` refuses others without a parent
                    continue
                if self.children.get((parent, name)) == sid:
                    del self.children[(parent, name)]
                definitions = self.top_definitions.get(name)
                if definitions is not None and sid in definitions:
                    definitions.remove(sid)
                    if not definitions:
                        del self.top_definitions[name]
                    touched_top.add(name)
            for name, target in self.bindings.get(fid, {}).items():
                self._count_binding(name, target, -1)
            for table in (self.file_path, self.file_module, self.file_is_test,
                          self.module_sym, self.bindings, self.stars):
                table.pop(fid, None)
        touched_top |= self._add(files, symbols, bindings, inherits)
        # the members lists of scopes in removed files went with them; those of
        # surviving scopes only ever list names of their own file's symbols
        for name in touched_top:
            definitions = self.top_definitions.get(name, [])
            if len(definitions) == 1:
                self.unique_top[name] = definitions[0]
            else:
                self.unique_top.pop(name, None)
        new_modules = {file.path: (file.module, self.module_sym.get(file.id)) for file in files}
        if {path: module for path, (module, _) in old_modules.items()} == \
                {path: module for path, (module, _) in new_modules.items()}:
            symbol_pairs = [(old_sym, new_modules[path][1])
                            for path, (_, old_sym) in old_modules.items()]
            moved = {old_sym: new_sym for old_sym, new_sym in symbol_pairs
                     if old_sym is not None and new_sym is not None}
            if len(moved) == len(symbol_pairs):
                moved = {old_sym: new_sym for old_sym, new_sym in moved.items()
                         if old_sym != new_sym}  # a re-parsed module keeps its symbol id
                if moved:
                    self.modules = {name: moved.get(sid, sid)
                                    for name, sid in self.modules.items()}
            else:  # a file gained or lost its module symbol (it became too large to parse)
                self._index_modules()
        else:
            self._index_modules()
        self.forget_lookups()

    def names_bound_to(self, parts: Iterable[str]) -> set[str]:
        """The names some module binds by import to a target holding one of these parts
        (between dots)."""
        if self._bound_by_part is None:
            self._bound_by_part = {}
            for bound in self.bindings.values():
                for name, target in bound.items():
                    self._count_binding(name, target, 1)
        found: set[str] = set()
        for part in parts:
            found.update(self._bound_by_part.get(part, ()))
        return found

    def _count_binding(self, name: str, target: str, step: int) -> None:
        if self._bound_by_part is None:
            return
        for part in set(target.split(".")):
            names = self._bound_by_part.setdefault(part, {})
            names[name] = names.get(name, 0) + step
            if names[name] == 0:
                del names[name]
                if not names:
                    del self._bound_by_part[part]

    def rebase(self, class_ids: Iterable[int]) -> None:
        """Resolve these classes' written bases again (after `replace_files`)."""
        self._resolve_bases(class_ids)

    # -- entry point -----------------------------------------------------------------------

    def resolve(self, src: int, name: str, kind: str, typed: str | None = None) -> int | None:
        """The symbol `name` (as written in `src`) refers to, or None.

        `typed` is the same name with a variable of known class replaced by the class;
        it is tried first.
        """
        if kind == "imports":
            return self.module_prefix(name)
        if typed is not None:
            found = self.resolve_name(src, typed)
            if found is not None:
                return found
        return self.resolve_name(src, name)

    def resolve_name(self, src: int, name: str) -> int | None:
        if "." not in name:  # most names: no list of parts to build
            return None if name in _RECEIVERS else self.bare(src, name, True)
        parts = name.split(".")
        head = parts[0]
        if head in _RECEIVERS:
            if len(parts) != 2:
                return None
            cls = self.enclosing_class(src)
            if cls is None:
                return None
            mro = self.mro(cls)
            for c in mro[1:] if head == "super()" else mro:
                found = self.children.get((c, parts[1]))
                if found is not None:
                    return found
            return None
        ent = self.bare(src, head, len(parts) == 1)
        for part in parts[1:]:
            if ent is None:
                return None
            ent = self.member(ent, part)
        return ent

    def is_test_function(self, sid: int) -> bool:
        """A ``test*`` function or method in a test file (its calls give tests edges)."""
        return is_test_function(self.file_is_test[self.sym_file[sid]], self.sym_kind[sid],
                                self.sym_name[sid])

    def test_functions(self) -> set[int]:
        """Ids of test functions: ``test*`` functions and methods in test files."""
        return {
            sid
            for sid, fid in self.sym_file.items()
            if is_test_function(self.file_is_test[fid], self.sym_kind[sid], self.sym_name[sid])
        }

    # -- rules -----------------------------------------------------------------------------

    def enclosing_class(self, sid: int) -> int | None:
        s = self.sym_parent.get(sid)
        while s is not None:
            if self.sym_kind[s] == "class":
                return s
            s = self.sym_parent.get(s)
        return None

    def mro(self, cls: int) -> list[int]:
        """The class and its resolved bases, depth-first, left to right, each once."""
        cached = self._mro.get(cls)
        if cached is not None:
            return cached
        if cls in self._in_progress:  # an inheritance cycle (invalid code)
            self._cycle = True
            return [cls]
        with self._guard(cls):
            order = [cls]
            seen = {cls}
            for base in self.bases.get(cls, ()):
                for c in self.mro(base):
                    if c not in seen:
                        seen.add(c)
                        order.append(c)
            if not self._cycle:
                self._mro[cls] = order
        return order

    @contextmanager
    def _guard(self, item: object) -> Iterator[None]:
        """Cycle guard for the memoized lookups.

        A result computed while a cycle was cut short depends on where the lookup
        started, so it is not memoized; memoized results never depend on order.
        """
        outer = self._cycle
        self._cycle = False
        self._in_progress.add(item)
        try:
            yield
        finally:
            self._in_progress.discard(item)
            self._cycle = self._cycle or outer

    def bare(self, src: int, name: str, global_ok: bool) -> int | None:
        s: int | None = src
        # bound once: a cold build walks these scopes for ~90k names
        kind, children, parent = self.sym_kind, self.children, self.sym_parent
        while s is not None and kind[s] != "module":
            if kind[s] != "class" or s == src:  # class bodies do not enclose their methods
                found = children.get((s, name))
                if found is not None:
                    return found
            s = parent.get(s)
        fid = self.sym_file[src]
        found = self.children.get((self.module_sym[fid], name))
        if found is not None:
            return found
        target = self.bindings.get(fid, {}).get(name)
        if target is not None:
            return self.absolute(target)
        for star in self.stars.get(fid, ()):
            found = self.absolute(f"{star}.{name}")
            if found is not None:
                return found
        if global_ok and name not in _BUILTINS:
            return self.unique_top.get(name)
        return None

    def member(self, ent: int, name: str) -> int | None:
        kind = self.sym_kind[ent]
        if kind == "class":
            for c in self.mro(ent):
                found = self.children.get((c, name))
                if found is not None:
                    return found
            return None
        if kind != "module":
            return None
        found = self.children.get((ent, name))
        if found is not None:
            return found
        fid = self.sym_file[ent]
        target = self.bindings.get(fid, {}).get(name)
        if target is not None:
            found = self.absolute(target)
            if found is not None:
                return found
        sub = self.modules.get(f"{self.file_module[fid]}.{name}")
        if sub is not None:
            return sub
        for star in self.stars.get(fid, ()):
            found = self.absolute(f"{star}.{name}")
            if found is not None:
                return found
        return None

    def absolute(self, dotted: str) -> int | None:
        """An absolute dotted name (``pkg.mod.Class.method``) → symbol id."""
        if dotted in self._absolute:
            return self._absolute[dotted]
        if dotted in self._in_progress:  # re-exports that import each other
            self._cycle = True
            return None
        with self._guard(dotted):
            parts = dotted.split(".")
            ent = None
            for i in range(len(parts), 0, -1):
                ent = self.modules.get(".".join(parts[:i]))
                if ent is not None:
                    break
            if ent is not None:
                for part in parts[i:]:
                    ent = self.member(ent, part)
                    if ent is None:
                        break
            if not self._cycle:
                self._absolute[dotted] = ent
        return ent

    def module_prefix(self, dotted: str) -> int | None:
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            found = self.modules.get(".".join(parts[:i]))
            if found is not None:
                return found
        return None

