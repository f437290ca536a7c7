"""Gold facts of a SWE-bench-style instance: what a decision truly needed (spec §7.2).

Deterministic, from the instance alone and the recon index of its repository:

* edited_entity — every symbol of the base commit whose span holds a line the gold
  ``patch`` changes or deletes; a pure insertion goes to the smallest symbol that holds
  the lines on both sides of it. A change outside every symbol (an import, a module
  constant) is a fact about the changed lines, keyed ``path:START-END`` — one per hunk —
  not about the module whose span holds every line; a new file is its module. Each
  fact records the first and last base-commit line changed inside it;
* test_function — the test functions the ``test_patch`` adds or changes (their lines
  on the new side, in the index of the tree with the test patch applied);
* fail_to_pass — the ``FAIL_TO_PASS`` ids as entity keys (pytest node ids, or
  Django-style ``test_name (pkg.module.Class)``).

Gold facts are written to ``gold_fact`` (``store_gold_facts``) and never shown to
the constructor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import Connection, bindparam

from .. import models
from ..diffs import parse_unified_diff
from ..entities import entity_key_of_test_id, parse_entity_key, path_of_key
from ..sqlfiles import sql_statement
from .instances import Instance

_DJANGO_TEST_ID = re.compile(r"^(?P<name>\w+) \((?P<dotted>[\w.]+)\)$")


@dataclass(frozen=True)
class GoldFact:
    fact_kind: str
    entity_key: str
    detail: str
    changed_lines: tuple[int, int] | None = None  # base-commit lines changed inside it
    symbol_kind: str | None = None  # recon's kind of a def/class fact (function, class, …)


def _enclosing(connection: Connection, path: str, first: int, last: int):
    return connection.execute(
        sql_statement("recon/enclosing_symbol_of_span"),
        {"path": path, "first_line": first, "last_line": last},
    ).first()


def edited_entities(connection: Connection, patch: str) -> list[GoldFact]:
    facts: dict[str, list] = {}  # key -> [detail, first changed line, last, symbol kind]

    def note(key: str, detail: str, first: int | None, last: int | None,
             kind: str | None = None) -> None:
        fact = facts.setdefault(key, [detail, first, last, kind])
        if first is not None:
            fact[1] = first if fact[1] is None else min(fact[1], first)
            fact[2] = last if fact[2] is None else max(fact[2], last)

    for change in parse_unified_diff(patch):
        if change.old_path is None:  # a new file: its module
            if change.new_path is not None:
                note(change.new_path, "new file", None, None)
            continue
        path = change.old_path
        module_level: dict[int, list[int]] = {}  # hunk -> changed lines outside any symbol
        for line in change.changed_old_lines:
            row = _enclosing(connection, path, line, line)
            if row is None:
                module_level.setdefault(change.hunk_of(line), []).append(line)
            else:
                note(row.key, f"{path}:{line} changed", line, line, row.kind)
        for before, after in change.insertions:
            first, last = max(before, 1), max(after, 1)
            row = _enclosing(connection, path, first, last)
            if row is None:
                module_level.setdefault(change.hunk_of(last), []).extend((first, last))
            else:
                note(row.key, f"{path}: insertion after line {before}", first, last, row.kind)
        for lines in module_level.values():
            first, last = min(lines), max(lines)
            note(f"{path}:{first}-{last}", f"{path}:{first}-{last} changed at module level",
                 first, last)
    return [GoldFact("edited_entity", key, detail, (first, last) if first is not None else None,
                     kind)
            for key, (detail, first, last, kind) in facts.items()]


def changed_tests(connection: Connection, test_patch: str) -> list[GoldFact]:
    facts: dict[str, str] = {}
    for change in parse_unified_diff(test_patch):
        if change.new_path is None:
            continue
        for line in change.added_new_lines:
            row = _enclosing(connection, change.new_path, line, line)
            while row is not None and not row.name.startswith("test"):
                # a helper inside the test: the test function holding it, if any
                row = (_enclosing(connection, change.new_path, row.start_line - 1,
                                  row.end_line + 1)
                       if row.start_line > 1 else None)
            if row is not None and row.kind in ("function", "method"):
                facts.setdefault(row.key, f"{change.new_path}:{line} added or changed")
    return [GoldFact("test_function", key, detail) for key, detail in facts.items()]


def test_ids_resolved(connection: Connection, test_ids,
                      test_patch: str) -> list[tuple[str, list[str]]]:
    """Each FAIL_TO_PASS id with the ids a harness knows it by: pytest and Django ids as
    given; a bare name (sympy's) as the entity key of each test of that name in a file
    the test patch changes, or the name alone when no such file has one."""
    patched = {change.new_path for change in parse_unified_diff(test_patch)}
    bare = sorted({t.split("[", 1)[0] for t in test_ids if "::" not in t and " (" not in t})
    keys: dict[str, list[str]] = {}
    if bare:
        statement = sql_statement("recon/test_functions_named").bindparams(
            bindparam("names", expanding=True))
        for row in connection.execute(statement, {"names": bare}):
            if row.path in patched:
                keys.setdefault(row.name, []).append(row.key)
    out = []
    for test_id in test_ids:
        name = test_id.split("[", 1)[0]
        out.append((test_id, keys.get(name, [test_id]) if name in bare else [test_id]))
    return out


def resolve_test_ids(connection: Connection, test_ids, test_patch: str) -> list[str]:
    """The FAIL_TO_PASS ids as the harness knows them (test_ids_resolved), each once."""
    return list(dict.fromkeys(
        found for _, ids in test_ids_resolved(connection, test_ids, test_patch) for found in ids))


def fail_to_pass_keys(connection: Connection, test_ids: list[str],
                      test_patch: str = "") -> list[GoldFact]:
    out = []
    for test_id, known_as in test_ids_resolved(connection, test_ids, test_patch):
        if known_as != [test_id]:  # a bare name found in the files the test patch changes
            out += [GoldFact("fail_to_pass", key, test_id) for key in known_as]
            continue
        match = _DJANGO_TEST_ID.match(test_id)
        if match is None:
            out.append(GoldFact("fail_to_pass", entity_key_of_test_id(test_id), test_id))
            continue
        dotted = match["dotted"]
        rows = connection.execute(sql_statement("recon/test_symbols_named"),
                                  {"name": match["name"]}).all()
        key = next((r.key for r in rows if f"{r.module}.{r.qualname}".endswith(
            f"{dotted}.{match['name']}")
            or f"{r.module}.{r.qualname}" == f"{dotted}.{match['name']}"),
            None)
        out.append(GoldFact("fail_to_pass",
                            key or f"{dotted.replace('.', '/')}.py::{match['name']}",
                            test_id))
    return out


def gold_facts(connection: Connection, patch: str, test_patch: str,
               fail_to_pass: list[str]) -> list[GoldFact]:
    facts = edited_entities(connection, patch) + changed_tests(connection, test_patch)
    facts += fail_to_pass_keys(connection, fail_to_pass, test_patch)
    seen, unique = set(), []
    for fact in facts:
        if (fact.fact_kind, fact.entity_key) not in seen:
            seen.add((fact.fact_kind, fact.entity_key))
            unique.append(fact)
    return unique


def _place_of(recon_connection, key: str) -> tuple[str, int | None, int | None, str | None]:
    """Where a fact sits in the base commit — a symbol's span, a line span's own lines,
    or just the path of a module — and a symbol's def/class line."""
    try:
        ref = parse_entity_key(key)
    except ValueError:  # a test id recon cannot resolve: its path is all we know
        return path_of_key(key), None, None, None
    if ref.qualified_name is None:
        return ref.path, ref.start_line, ref.end_line, None
    row = recon_connection.execute(sql_statement("recon/symbol_by_key"),
                                   {"entity_key": key}).first()
    if row is None:
        return ref.path, None, None, None
    return row.path, row.start_line, row.end_line, def_line(row.signature)


def def_line(signature: str | None) -> str | None:
    """A signature's def/class line (its first, decorators skipped), stripped."""
    lines = [line.strip() for line in (signature or "").splitlines() if line.strip()]
    return next((line for line in lines if not line.startswith("@")), lines[0] if lines else None)


def store_gold_facts(store, instance: Instance, recon_connection) -> list[GoldFact]:
    """Write an instance's gold facts, replacing earlier ones; returns its edited
    entities (their facts, in patch order). ``store`` is anything with
    ``write_transaction()`` (a ``ContextStore``)."""
    facts = gold_facts(recon_connection, instance.patch, instance.test_patch,
                       list(instance.fail_to_pass))
    places = {fact.entity_key: _place_of(recon_connection, fact.entity_key) for fact in facts}
    with store.write_transaction() as connection:
        connection.execute(sql_statement("ab/delete_gold_facts"),
                           {"instance_id": instance.instance_id})
        models.insert_many(connection, models.gold_fact, [
            {"instance_id": instance.instance_id, "fact_no": number, "fact_kind": f.fact_kind,
             "entity_key": f.entity_key, "detail": f.detail, "path": places[f.entity_key][0],
             "start_line": places[f.entity_key][1], "end_line": places[f.entity_key][2],
             "head_text": places[f.entity_key][3],
             "changed_start_line": f.changed_lines[0] if f.changed_lines else None,
             "changed_end_line": f.changed_lines[1] if f.changed_lines else None}
            for number, f in enumerate(facts, start=1)
        ])
    return [f for f in facts if f.fact_kind == "edited_entity"]
