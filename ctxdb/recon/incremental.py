"""The recon indexer's incremental run: the rows of the files it replaces or removes
deleted, and only the edges a change may move resolved again (see below)."""

from __future__ import annotations

from typing import Any, NamedTuple

from ctxdb.recon import schema
from ctxdb.recon.fulltext import remove_fulltext_entries
from ctxdb.recon.loader import EDGE_COLUMNS, EdgeRecord, Loader
from ctxdb.recon.resolve import (
    ModuleBinding,
    Resolver,
    ResolverFile,
    ResolverSymbol,
    WrittenBase,
    path_module,
)
from ctxdb.recon.writer import Writer

# The parameters of the statements deleting a file's rows, and of an edge's new destination.
FILE_ID = ("file_id",)
EDGE_DESTINATION = ("dst_id", "edge_id")
# A change touching at most this many names finds the edges naming them with one pass over
# the edge table each (~17 ms on Django's); more, with one read of every edge (~90 ms).
MAX_NAME_PASSES = 4


def delete_files(w: Writer, gone: list[int]) -> None:
    """Remove every row of these files (their symbols, edges out, bindings, text)."""
    ids = [(i,) for i in gone]
    remove_fulltext_entries(w, gone)
    clear_replaced_files(w, gone)
    # Edges from other files into the deleted symbols keep a stale id here (PostgreSQL's
    # foreign key sets it NULL); re-resolution afterwards points them at the new symbols.
    w.run_rows("recon/index_delete_symbols_of_file", FILE_ID, ids)
    w.run_rows("recon/index_delete_source_of_file", FILE_ID, ids)
    w.run_rows("recon/index_delete_file", FILE_ID, ids)


def clear_replaced_files(w: Writer, replaced: list[int]) -> None:
    """Remove what a re-parsed file writes anew whatever changed in it (the edges out of
    it, its bindings and stat key); its file row, text and symbols are updated in place
    (`Loader.replace`)."""
    ids = [(i,) for i in replaced]
    w.run_rows("recon/index_delete_edges_of_file", FILE_ID, ids)
    w.run_rows("recon/index_delete_bindings_of_file", FILE_ID, ids)
    w.run_rows("recon/index_delete_file_stat", FILE_ID, ids)


# --- incremental resolution ---------------------------------------------------------------
#
# A re-parsed file keeps its id, and each of its symbols whose key stays keeps its id (its
# row is rewritten only when it moved); an edge elsewhere is resolved again when
# - it resolved into a symbol that is gone (removed, or its file's; a symbol that kept its
#   id is found again by the same lookups unless a name on the way moved: below), or
# - a part of its written or typed name (between dots) is a name whose meaning may have
#   moved: a definition added, removed or re-kinded in a changed file; a name bound by
#   import added, removed or re-targeted; the last part of a module name that appeared,
#   vanished or moved to another file; closed over imports (a name bound to a target
#   holding a moved name has moved too); or
# - it is a call, and a part of its name is a member of a class whose bases moved, or of
#   one of that class's bases before or after (the class's lookups go through them).
# Everything else looks up, step by step, the same names in the same places as before,
# and finds the same symbol. What cannot be bounded by names — a star import whose
# module moved, a changed file's own star imports when another module star-imports it —
# resolves every edge again. A test compares the result with a cold build after each of a
# series of edits.


class StoredSymbol(NamedTuple):
    """A symbol row as the index held it before its file was replaced or removed
    (`recon/index_old_symbols_of_file`)."""

    id: int
    parent_id: int | None
    key: str
    kind: str
    name: str
    qualname: str
    start_line: int
    end_line: int
    start_byte: int
    end_byte: int
    signature: str | None
    doc: str | None


class OldFile(NamedTuple):
    """A file as the index held it before it was replaced or removed."""

    id: int
    path: str
    module: str
    symbols: list[StoredSymbol]  # in id order
    bindings: list[tuple[str, str]]  # (name, target)


class Plan(NamedTuple):
    """What an incremental run reads before deleting the rows of the files it replaces."""

    old_files: list[OldFile]
    into: dict[int, EdgeRecord]  # edges of other files resolved into them, by id
    old_bases: dict[int, list[int]]  # the resolver's class bases before the change
    old_modules: dict[str, str] | None  # module name → path, when paths come or go


def plan_replacement(w: Writer, resolver: Resolver, gone: list[int],
                      paths_move: bool) -> Plan:
    old_files = []
    for fid in gone:
        symbols = list(map(StoredSymbol._make,
                           w.run("recon/index_old_symbols_of_file", file_id=fid).fetchall()))
        bindings = [tuple(row) for row in
                    w.run("recon/index_old_bindings_of_file", file_id=fid).fetchall()]
        old_files.append(OldFile(fid, resolver.file_path[fid], resolver.file_module[fid],
                                  symbols, bindings))
    gone_symbols = {symbol.id for old in old_files for symbol in old.symbols}
    into = {}
    for old in old_files:
        if not old.symbols:
            continue
        rows = w.run("recon/index_edges_into_file", file_id=old.id).fetchall()
        for edge in map(EdgeRecord._make, rows):
            if edge.src_symbol_id not in gone_symbols:
                into[edge.id] = edge
    old_modules = _module_paths(resolver) if paths_move else None
    return Plan(old_files, into, dict(resolver.bases), old_modules)


def gone_totals(w: Writer, plan: Plan) -> tuple[int, int, int]:
    """What the files an incremental run replaces or removes count for in `_totals`:
    their symbols, the edges out of them, the flagged ones among them."""
    symbols = edges = flagged = 0
    for old in plan.old_files:
        file_edges, file_flagged = w.run("recon/index_file_totals", file_id=old.id).fetchone()
        symbols += len(old.symbols)
        edges += file_edges
        flagged += file_flagged
    return symbols, edges, flagged


def _module_paths(resolver: Resolver) -> dict[str, str]:
    return {name: resolver.file_path[resolver.sym_file[sid]]
            for name, sid in resolver.modules.items()}


def resolve_incrementally(w: Writer, resolver: Resolver, plan: Plan, loader: Loader,
                           next_edge: int) -> tuple[Resolver, int, int, int]:
    """Resolve the new files' edges and the edges elsewhere whose destination may have
    moved (see above); write them. Returns the resolver, now of the new index, how many
    edges were resolved (tests edges follow their calls: not counted), the next free edge
    id (new edges take consecutive ids) and how many edges were deleted."""
    resolver.replace_files([old.id for old in plan.old_files], loader.files, loader.symbols,
                           sorted(loader.bindings), loader.bases)
    names, everything = _moved_names(plan, loader, resolver)
    if everything:
        resolver.rebase(list(resolver.written_bases))
        return resolver, *_write_edges_incremental(w, loader, next_edge)
    # an edge into a symbol that kept its id finds it again, but through a moved name
    # (and then it is selected by that name below)
    selected = {eid: edge for eid, edge in plan.into.items()
                if edge.dst_symbol_id not in loader.symbol_keys}
    _select_edges_naming(w, names, selected, kinds=None)
    # every class of the new files (one may have lost all its bases), and the classes
    # elsewhere whose written bases may resolve otherwise now
    rebased = {symbol.id for symbol in loader.symbols if symbol.kind == "class"}
    rebased |= {edge.src_symbol_id for edge in selected.values() if edge.kind == "inherits"}
    resolver.rebase(rebased)
    _select_edges_naming(w, _names_under_moved_bases(plan, loader, resolver, rebased),
                         selected, kinds=("calls",))

    resolve = resolver.resolve
    updates = []
    test_calls = []
    for edge in selected.values():
        dst = resolve(edge.src_symbol_id, edge.dst_name, edge.kind, edge.typed_name)
        if dst != edge.dst_symbol_id:
            updates.append({"dst_id": dst, "edge_id": edge.id})
        if edge.kind == "calls" and resolver.is_test_function(edge.src_symbol_id):
            test_calls.append(edge._replace(dst_symbol_id=dst))
    w.run_many("recon/index_set_edge_destination", updates)
    next_edge, deleted = _follow_tests_edges(w, test_calls, next_edge)

    rows, new_test_calls = [], []
    for src, ref in loader.references():
        kind, name, typed = ref.kind, ref.dst_name, ref.typed_name
        dst = resolve(src, name, kind, typed)
        rows.append((next_edge, kind, src, dst, name, typed, ref.line))
        if dst is not None and kind == "calls" and resolver.is_test_function(src):
            new_test_calls.append(EdgeRecord(next_edge, kind, src, dst, name, typed, ref.line))
        next_edge += 1
    for call in new_test_calls:
        rows.append(call.as_tests_edge(next_edge))
        next_edge += 1
    w.insert(schema.edge, rows, EDGE_COLUMNS)
    return resolver, len(selected) + len(rows) - len(new_test_calls), next_edge, deleted


def _moved_names(plan: Plan, loader: Loader, resolver: Resolver) -> tuple[set[str], bool]:
    """The names whose meaning may have moved (see above), and whether the change cannot
    be bounded by names (then every edge is resolved again)."""
    old_symbols = {(symbol.key, symbol.kind): symbol.name for old in plan.old_files
                   for symbol in old.symbols}
    new_symbols = {(loader.symbol_keys[s.id], s.kind): s.name for s in loader.symbols}
    names = {old_symbols[k] if k in old_symbols else new_symbols[k]
             for k in old_symbols.keys() ^ new_symbols.keys()}

    new_path = {f.id: f.path for f in loader.files}
    old_bound = {(old.path, name, target) for old in plan.old_files
                 for name, target in old.bindings}
    new_bound = {(new_path[b.file_id], b.name, b.target) for b in loader.bindings}
    moved_modules: set[str] = set()
    for path, name, _ in old_bound ^ new_bound:
        if name == "*":  # its module's members moved, whatever their names
            moved_modules |= _module_keys(resolver, plan, path)
        else:
            names.add(name)
    if plan.old_modules is not None:
        new_modules = _module_paths(resolver)
        moved_modules |= {name for name in plan.old_modules.keys() | new_modules.keys()
                          if plan.old_modules.get(name) != new_modules.get(name)}
    if moved_modules:
        for stars in resolver.stars.values():
            for target in stars:
                parts = target.split(".")
                if any(".".join(parts[:i]) in moved_modules for i in range(1, len(parts) + 1)):
                    return names, True
        names |= {module.rsplit(".", 1)[-1] for module in moved_modules}
    if names:
        _close_over_bindings(names, resolver)
    return names, False


def _module_keys(resolver: Resolver, plan: Plan, path: str) -> set[str]:
    """The module names a file is known by, before and after."""
    keys = {path_module(path)}
    keys |= {old.module for old in plan.old_files if old.path == path}
    keys |= {module for fid, module in resolver.file_module.items()
             if resolver.file_path[fid] == path}
    return keys


def _close_over_bindings(names: set[str], resolver: Resolver) -> None:
    """Add every name bound by import to a target with a moved name among its parts."""
    frontier = set(names)
    while frontier:
        reached = resolver.names_bound_to(frontier) - names
        names |= reached
        frontier = reached


def _names_under_moved_bases(plan: Plan, loader: Loader, resolver: Resolver,
                             rebased: set[int]) -> set[str]:
    """The member names of every class whose bases moved, and of its bases before and
    after: what lookups through its method resolution order may now find elsewhere."""
    old_key = {symbol.id: symbol.key for old in plan.old_files for symbol in old.symbols}
    old_id_of_key = {key: sid for sid, key in old_key.items()}
    new_key = loader.symbol_keys
    moved = []
    for cid in rebased:
        old_cid = old_id_of_key.get(new_key[cid]) if cid in new_key else cid
        if old_cid is None:  # a new class: its name is among the moved names already
            continue
        before = [old_key.get(base, base) for base in plan.old_bases.get(old_cid, ())]
        after = [new_key.get(base, base) for base in resolver.bases.get(cid, ())]
        if before != after:
            moved.append((old_cid, cid))
    if not moved:
        return set()
    old_members: dict[int, list[str]] = {}
    for old in plan.old_files:
        for symbol in old.symbols:
            if symbol.kind != "module" and symbol.parent_id is not None:
                old_members.setdefault(symbol.parent_id, []).append(symbol.name)
    names: set[str] = set()

    def collect(start: int, bases: dict[int, list[int]], members: Any) -> None:
        pending, seen = [start], set()
        while pending:
            cls = pending.pop()
            if cls not in seen:
                seen.add(cls)
                names.update(members(cls))
                pending.extend(bases.get(cls, ()))

    for old_cid, cid in moved:
        collect(old_cid, plan.old_bases,
                lambda c: old_members.get(c, ()) if c in old_key else resolver.members.get(c, ()))
        collect(cid, resolver.bases, lambda c: resolver.members.get(c, ()))
    return names


def _select_edges_naming(w: Writer, names: set[str], selected: dict[int, EdgeRecord],
                         kinds: tuple[str, ...] | None) -> None:
    """Add to `selected` the edges (of these kinds, None: all but tests) with one of these
    names as a part of their written or typed name."""
    if not names:
        return
    if len(names) <= MAX_NAME_PASSES:
        rows = []
        for name in sorted(names):
            rows += w.run("recon/index_edges_naming", name=name).fetchall()
    else:
        rows = w.run("recon/index_edges_all").fetchall()
    for edge in map(EdgeRecord._make, rows):
        if edge.id in selected or (kinds is not None and edge.kind not in kinds):
            continue
        parts = set(edge.dst_name.split("."))
        if edge.typed_name is not None:
            parts.update(edge.typed_name.split("."))
        if not parts.isdisjoint(names):
            selected[edge.id] = edge


def _follow_tests_edges(w: Writer, calls: list[EdgeRecord],
                        next_edge: int) -> tuple[int, int]:
    """Each test function's resolved call gives a tests edge (same site): after these calls
    were resolved again, insert, move or delete their tests edges. Returns the next id and
    how many were deleted."""
    by_source: dict[int, list[EdgeRecord]] = {}
    for call in calls:
        by_source.setdefault(call.src_symbol_id, []).append(call)
    fresh, moved, stale = [], [], []
    for src, src_calls in sorted(by_source.items()):
        existing = {name: (eid, dst) for eid, dst, name in
                    w.run("recon/index_tests_edges_of_symbol", src_id=src).fetchall()}
        for call in src_calls:
            found = existing.get(call.dst_name)
            if call.dst_symbol_id is None:
                if found is not None:
                    stale.append({"edge_id": found[0]})
            elif found is None:
                fresh.append(call.as_tests_edge(next_edge))
                next_edge += 1
            elif found[1] != call.dst_symbol_id:
                moved.append({"dst_id": call.dst_symbol_id, "edge_id": found[0]})
    w.run_many("recon/index_delete_edge", stale)
    w.run_many("recon/index_set_edge_destination", moved)
    w.insert(schema.edge, fresh, EDGE_COLUMNS)
    return next_edge, len(stale)


def _write_edges_incremental(w: Writer, loader: Loader,
                             next_edge: int) -> tuple[int, int, int]:
    """Insert the new files' edges, then resolve every edge again. Returns how many edges
    were resolved (tests edges not counted), the next free edge id and how many edges
    were deleted."""
    new_edges = []
    for src, ref in loader.references():
        new_edges.append((next_edge, ref.kind, src, None, ref.dst_name, ref.typed_name, ref.line))
        next_edge += 1
    w.insert(schema.edge, new_edges, EDGE_COLUMNS)
    return _reresolve(w, next_edge)


def _reresolve(w: Writer, next_edge: int) -> tuple[int, int, int]:
    """Resolve every edge again from the stored rows; write only what changed. Returns
    how many edges were resolved (tests edges not counted), the next free edge id and how
    many edges were deleted."""
    files = list(map(ResolverFile._make, w.run("recon/index_resolver_files").fetchall()))
    symbols = list(map(ResolverSymbol._make, w.run("recon/index_resolver_symbols").fetchall()))
    # sorted here, not in SQL: collations differ between backends
    bindings = sorted(map(ModuleBinding._make,
                          w.run("recon/index_resolver_bindings").fetchall()))
    edges = list(map(EdgeRecord._make, w.run("recon/index_edges_by_id").fetchall()))
    resolver = Resolver(
        files, symbols, bindings,
        [WrittenBase(e.src_symbol_id, e.dst_name, e.typed_name)
         for e in edges if e.kind == "inherits"],
    )
    tests_from = resolver.test_functions()
    updates = []
    # (src, dst_name) → the call edge, newly resolved, that a tests edge must repeat
    wanted_tests: dict[tuple[int, str], EdgeRecord] = {}
    old_tests = []
    for edge in edges:
        if edge.kind == "tests":
            old_tests.append(edge)
            continue
        new = resolver.resolve(edge.src_symbol_id, edge.dst_name, edge.kind, edge.typed_name)
        if new != edge.dst_symbol_id:
            updates.append((new, edge.id))
        if new is not None and edge.kind == "calls" and edge.src_symbol_id in tests_from:
            wanted_tests[(edge.src_symbol_id, edge.dst_name)] = edge._replace(dst_symbol_id=new)
    w.run_rows("recon/index_set_edge_destination", EDGE_DESTINATION, updates)

    stale = []
    moved = []
    for old in old_tests:
        want = wanted_tests.pop((old.src_symbol_id, old.dst_name), None)
        if want is None:
            stale.append((old.id,))
        elif want.dst_symbol_id != old.dst_symbol_id:
            moved.append((want.dst_symbol_id, old.id))
    w.run_rows("recon/index_delete_edge", ("edge_id",), stale)
    w.run_rows("recon/index_set_edge_destination", EDGE_DESTINATION, moved)
    fresh = []
    for call in wanted_tests.values():
        fresh.append(call.as_tests_edge(next_edge))
        next_edge += 1
    w.insert(schema.edge, fresh, EDGE_COLUMNS)
    return len(edges) - len(old_tests), next_edge, len(stale)
