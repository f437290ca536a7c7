"""The retriever as the A/B runner's component 04: a localize decision's pool for an
instance — the top candidates as 04 retrieved hits (their signals in the provenance),
the failing tests by entity key, and the symbols on the task's traceback frames.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, bindparam

from ..ab.gold import parse_unified_diff
from ..ab.instances import Instance
from ..entities import entity_key_of_test_id, is_test_entity
from ..request import EvidenceInput
from ..sqlfiles import sql_statement
from .retriever import Candidate, retrieve
from .signals import traceback_signal

LOCALIZE_TOP_K = 30  # as many hits as the stand-in gave: the pool's size is unchanged


@dataclass(frozen=True)
class LocalizePool:
    candidates: tuple[Candidate, ...]
    hit_items: tuple[EvidenceInput, ...]
    test_keys: tuple[str, ...]  # the failing tests as entity keys
    frame_items: tuple[EvidenceInput, ...]


def failing_test_ids(connection: Connection, instance: Instance) -> list[str]:
    """FAIL_TO_PASS as the harness knows them: pytest and Django ids as given; a bare
    name (sympy's) as the entity key of each test of that name in a file the test patch
    changes, or the name alone (matching any test file) when no such file has one."""
    patched = {change.new_path for change in parse_unified_diff(instance.test_patch)}
    bare = sorted({t.split("[", 1)[0] for t in instance.fail_to_pass
                   if "::" not in t and " (" not in t})
    keys: dict[str, list[str]] = {}
    if bare:
        statement = sql_statement("recon/test_functions_named").bindparams(
            bindparam("names", expanding=True))
        for row in connection.execute(statement, {"names": bare}):
            if row.path in patched:
                keys.setdefault(row.name, []).append(row.key)
    out: dict[str, None] = {}
    for test_id in instance.fail_to_pass:
        name = test_id.split("[", 1)[0]
        for found in (keys.get(name, [test_id]) if name in bare else [test_id]):
            out.setdefault(found, None)
    return list(out)


def localize_pool(connection: Connection, instance: Instance) -> LocalizePool:
    tests = failing_test_ids(connection, instance)
    found = retrieve(connection, instance.problem_statement, failing_tests=tests,
                     limit=LOCALIZE_TOP_K)
    hit_items = tuple(
        EvidenceInput(source="04", kind="retrieved_hit", entity=c.entity_key, score=c.score,
                      provenance=c.provenance())
        for c in found.symbols
    )
    test_keys = tuple(dict.fromkeys(entity_key_of_test_id(t) for t in tests))
    statement = sql_statement("recon/candidate_symbols").bindparams(
        bindparam("symbol_ids", expanding=True))
    frame_ids = [hit.symbol_id for hit in traceback_signal(connection, instance.problem_statement)]
    keys_at_frames = {row.id: row.key for row in connection.execute(
        statement, {"symbol_ids": frame_ids})} if frame_ids else {}
    frame_items = tuple(
        EvidenceInput(source="03", kind="source_code", entity=keys_at_frames[sid],
                      provenance=f"03: on traceback frame {depth} of the task (innermost 1)")
        for depth, sid in enumerate(frame_ids, start=1)
        if "::" in keys_at_frames.get(sid, "") and not is_test_entity(keys_at_frames[sid])
    )
    return LocalizePool(found.symbols, hit_items, test_keys, frame_items)
