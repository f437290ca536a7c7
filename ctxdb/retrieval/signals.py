"""The retriever's signals, each a ranked list of recon symbol ids (best first) found one
way. Each is measurable on its own (`ctxdb retrieve --eval`) and `retriever` fuses them.

- ``body``       BM25 of the task's code-aware terms over each symbol's own source text
                 (the recon body index);
- ``names``      the names the task writes (dotted, ``Class.method``, backticked, code
                 blocks, file paths, module names), resolved against recon;
- ``traceback``  the frames of tracebacks in the task or the given traceback, mapped to
                 the innermost symbol holding their line;
- ``tests``      the failing tests: the symbols they call, and those symbols' callees, up
                 to TEST_CALLEE_HOPS edges; and the module a test file is named after;
- ``imports``    the code modules the failing tests' files import, the fewer test files
                 import one the higher;
- ``structure``, ``members``, ``methods``, ``calls``  (in `retriever`, after the others
                 are fused) the siblings, classes, methods and callees of the strongest
                 hits.

Every list may hold module symbols: they never become symbol candidates, but rank files.
Ties are broken by symbol id, so a list depends on nothing but the index and the input.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

from sqlalchemy import Connection, bindparam

from ..entities import entity_key_of_test_id
from ..sqlfiles import sql_statement
from . import mentions as text_mentions

# How deep the body search goes: the structure signal ranks the symbols of the best files
# by their body rank, and a gold symbol's global body rank is often in the hundreds.
BODY_SEARCH_DEPTH = 2000
# A bare name matching more symbols than this says nothing (`__init__`, `doit`, `args`).
NAME_MAX_MATCHES = 24
# `p.degree()` where p is a variable: every `degree` counts, at this share of the weight.
DOTTED_FALLBACK_FACTOR = 0.5
# Hops from a failing test through calls edges: 1 = what the test calls, 2 = what those
# call too (set on the development set: a third hop adds mostly generic helpers).
TEST_CALLEE_HOPS = 2
# Each further hop counts this much of the one before.
TEST_HOP_DECAY = 0.5
# A callee of a failing test that only this test calls is as telling as it gets; one that
# a thousand tests call (symbols(), S) is not: weight 1 / (1 + callers) ** EXPONENT.
TEST_GENERIC_EXPONENT = 0.5

_DJANGO_TEST_ID = re.compile(r"^(?P<name>\w+) \((?P<dotted>[\w.]+)\)$")


class Hit(NamedTuple):
    symbol_id: int
    score: float  # higher is better, comparable within one signal only


def ranked_hits(scores: dict[int, float]) -> list[Hit]:
    return [Hit(symbol_id, score) for symbol_id, score
            in sorted(scores.items(), key=lambda item: (-item[1], item[0]))]


def _rows(connection: Connection, name: str, params: dict, *expanding: str):
    statement = sql_statement(name)
    if expanding:
        statement = statement.bindparams(*(bindparam(n, expanding=True) for n in expanding))
    return connection.execute(statement, params).all()


# --- body ---------------------------------------------------------------------------------


def body_query(terms: list[str], dialect: str) -> str:
    """An OR query of the terms in the backend's syntax; terms hold only [a-z0-9_]."""
    if dialect == "sqlite":
        return " OR ".join(f'"{term}"' for term in terms)
    return " | ".join(f"'{term}'" for term in terms)


def body_signal(connection: Connection, text: str, depth: int = BODY_SEARCH_DEPTH) -> list[Hit]:
    terms = text_mentions.query_terms(text)
    if not terms:
        return []
    dialect = connection.dialect.name
    rows = _rows(connection, f"recon/body_search.{dialect}",
                 {"query": body_query(terms, dialect), "limit": depth})
    return [Hit(symbol_id, -float(score)) for symbol_id, score in rows]


# --- names --------------------------------------------------------------------------------


def _name_matches(mention: str, row) -> bool:
    """Whether a symbol row (name, qualname, module) is what a dotted mention names:
    ``Poly.degree``, ``sympy.polys.polytools.Poly.degree`` or ``polytools.degree``."""
    if "." not in mention:
        return True
    full = f"{row.module}.{row.qualname}"
    return (row.qualname == mention or row.qualname.endswith("." + mention)
            or full == mention or full.endswith("." + mention))


def names_signal(connection: Connection, text: str) -> list[Hit]:
    found = text_mentions.mentions(text)
    scores: dict[int, float] = {}
    if found:
        last_parts = sorted({m.name.rsplit(".", 1)[-1] for m in found})
        by_name: dict[str, list] = {}
        for row in _rows(connection, "recon/symbols_with_names", {"names": last_parts}, "names"):
            by_name.setdefault(row.name, []).append(row)
        for mention in found:
            rows = by_name.get(mention.name.rsplit(".", 1)[-1], [])
            matching = [row for row in rows if _name_matches(mention.name, row)]
            weight = mention.weight
            if not matching:  # obj.method on a variable: the method's name alone, weaker
                matching, weight = rows, weight * DOTTED_FALLBACK_FACTOR
            if not matching or len(matching) > NAME_MAX_MATCHES:
                continue
            for row in matching:
                scores[row.id] = scores.get(row.id, 0.0) + weight / len(matching)
        dotted = sorted({m.name for m in found if "." in m.name})
        weight_of = {m.name: m.weight for m in found}
        prefixes: dict[str, float] = {}
        for name in dotted:  # module names, and the modules of module.member
            parts = name.split(".")
            for end in range(len(parts), 0, -1):
                prefix = ".".join(parts[:end])
                prefixes[prefix] = max(prefixes.get(prefix, 0.0), weight_of[name])
        if prefixes:
            for row in _rows(connection, "recon/modules_named", {"modules": sorted(prefixes)},
                             "modules"):
                scores[row.id] = scores.get(row.id, 0.0) + prefixes[row.module]
    for path in text_mentions.paths(text):
        for module_id in _modules_at_path(connection, path):
            scores[module_id] = scores.get(module_id, 0.0) + text_mentions.MENTION_WEIGHT_EXPLICIT
    return ranked_hits(scores)


def _modules_at_path(connection: Connection, path: str) -> list[int]:
    """The module symbol of the recon file a written path names (the longest path that
    is the written one or a suffix of it after a '/'), if any."""
    for row in _rows(connection, "recon/paths_ending_with", {"name": path}):
        module = _rows(connection, "recon/module_of_path", {"path": row.path})
        return [r.id for r in module]
    return []


# --- traceback ----------------------------------------------------------------------------


def traceback_signal(connection: Connection, text: str) -> list[Hit]:
    """The innermost symbol at each frame, innermost frame first. A frame whose line
    falls in another function of this version of the file (the reporter ran another
    release) is taken by its function's name in that file, nearest its line."""
    scores: dict[int, float] = {}
    frames = text_mentions.frames(text)
    for depth, frame in enumerate(frames):
        found = _rows(connection, "recon/paths_ending_with", {"name": frame.path})
        if not found:
            continue
        path = found[0].path
        symbol_id = None
        at_line = _rows(connection, "recon/enclosing_symbol_at_line",
                        {"path": path, "line": frame.line})
        if at_line and (frame.name in (None, at_line[0].name)
                        or (frame.name == "<module>" and at_line[0].kind == "module")):
            symbol_id = at_line[0].id
        elif frame.name and frame.name != "<module>":
            named = _rows(connection, "recon/symbols_named_in_file",
                          {"path": path, "name": frame.name, "line": frame.line})
            symbol_id = named[0].id if named else None
        if symbol_id is None:
            module = _rows(connection, "recon/module_of_path", {"path": path})
            symbol_id = module[0].id if module else None
        if symbol_id is not None and symbol_id not in scores:
            scores[symbol_id] = float(len(frames) - depth)  # innermost highest
    return ranked_hits(scores)


# --- failing tests ------------------------------------------------------------------------


def failing_test_symbols(connection: Connection, test_ids: Iterable[str]) -> list[int]:
    """Recon symbol ids of failing tests given as pytest ids (``path::Class::test[p]``),
    Django ids (``test_x (pkg.module.Class)``) or bare names (every test function of that
    name)."""
    keys, names, django = [], [], []
    for test_id in test_ids:
        match = _DJANGO_TEST_ID.match(test_id)
        if match:
            django.append((match["name"], match["dotted"]))
        elif "::" in test_id:
            keys.append(entity_key_of_test_id(test_id))
        else:
            names.append(test_id.split("[", 1)[0])
    ids: dict[int, None] = {}
    if keys:
        for row in _rows(connection, "recon/symbols_by_key_list",
                         {"entity_keys": sorted(set(keys))}, "entity_keys"):
            ids.setdefault(row.id, None)
    wanted = sorted(set(names) | {name for name, _dotted in django})
    if wanted:
        for row in _rows(connection, "recon/test_functions_named", {"names": wanted}, "names"):
            module_path = row.path[:-3].replace("/", ".") if row.path.endswith(".py") else row.path
            qualified = module_path + "." + row.key.split("::", 1)[1]
            if row.name in names or any(
                name == row.name and qualified.endswith(f"{dotted}.{name}")
                for name, dotted in django
            ):
                ids.setdefault(row.id, None)
    return sorted(ids)


def _mirrored_module_path(test_path: str) -> str | None:
    """The module a test file is named after: ``pkg/tests/test_x.py`` → ``pkg/x.py``."""
    directory, _, name = test_path.rpartition("/")
    if not name.startswith("test_") or not name.endswith(".py"):
        return None
    parent, _, last = directory.rpartition("/")
    module_name = name[len("test_"):]
    if last in ("tests", "test"):
        return f"{parent}/{module_name}" if parent else module_name
    return f"{directory}/{module_name}" if directory else module_name


def tests_signal(connection: Connection, test_ids: Iterable[str]) -> list[Hit]:
    tests = failing_test_symbols(connection, test_ids)
    if not tests:
        return []
    scores: dict[int, float] = {}
    frontier = {test: 1.0 for test in tests}
    seen = set(tests)
    for hop in range(TEST_CALLEE_HOPS):
        edges = _rows(connection, "recon/callees_of", {"symbol_ids": sorted(frontier)},
                      "symbol_ids")
        callees = sorted({edge.callee_id for edge in edges if edge.callee_id not in seen})
        if not callees:
            break
        generic = {row.symbol_id: row.test_callers for row in _rows(
            connection, "recon/test_callers_count", {"symbol_ids": callees}, "symbol_ids")}
        reached: dict[int, float] = {}
        for edge in edges:
            if edge.callee_id in seen:
                continue
            weight = frontier[edge.caller_id] * TEST_HOP_DECAY ** hop
            weight /= (1 + generic.get(edge.callee_id, 0)) ** TEST_GENERIC_EXPONENT
            reached[edge.callee_id] = reached.get(edge.callee_id, 0.0) + weight
        for symbol_id in sorted(reached):
            scores[symbol_id] = scores.get(symbol_id, 0.0) + reached[symbol_id]
        seen.update(reached)
        frontier = reached
    best = max(scores.values(), default=1.0)
    for test in _rows(connection, "recon/candidate_symbols", {"symbol_ids": tests}, "symbol_ids"):
        mirrored = _mirrored_module_path(test.path)
        if mirrored is None:
            continue
        for row in _rows(connection, "recon/module_of_path", {"path": mirrored}):
            scores[row.id] = max(scores.get(row.id, 0.0), best)
    return ranked_hits(scores)


# --- the failing tests' imports -----------------------------------------------------------


def test_imports_signal(connection: Connection, test_ids: Iterable[str]) -> list[Hit]:
    """The code modules the failing tests' files import, the fewer test files import a
    module the higher: where a test file's name does not mirror its module's
    (``tests/queries/tests.py``), its imports still say which modules it exercises. Module
    symbols only: they rank files."""
    tests = failing_test_symbols(connection, test_ids)
    if not tests:
        return []
    return ranked_hits({row.module_id: 1.0 / max(1, row.test_importers) for row in _rows(
        connection, "recon/test_file_imports", {"symbol_ids": tests}, "symbol_ids")})

