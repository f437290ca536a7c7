"""The retriever as the A/B runner's component 04: a localize decision's pool for an
instance — the top candidates as 04 retrieved hits (their signals in the provenance),
the failing tests by entity key, and the symbols on the task's traceback frames.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, bindparam

from ..ab.gold import resolve_test_ids
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
    test_ids: tuple[str, ...]  # the failing tests as the harness knows them (required_validation)


def failing_test_ids(connection: Connection, instance: Instance) -> list[str]:
    """FAIL_TO_PASS as the harness knows them (ctxdb.ab.gold.resolve_test_ids)."""
    return resolve_test_ids(connection, instance.fail_to_pass, instance.test_patch)


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
    return LocalizePool(found.symbols, hit_items, test_keys, frame_items, tuple(tests))
