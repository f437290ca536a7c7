"""Fusing the signals into one ranking of symbols and one of files.

The rule (weighted reciprocal-rank fusion, Cormack et al. 2009, with per-signal weights):

    fused(s) = Σ over signals σ that found s:  WEIGHTS[σ] / (RRF_K + rank_σ(s))

ranks counted from 1 within each signal's list, test-file symbols left out of every list
(the retriever looks for the code to change; the failing tests are the caller's). The
primary signals (body, names, traceback, tests, imports) are fused first; the secondary
ones are built from that fusion and fused in with their weights: crash — the traceback's
innermost frame in the repository's code (where the error was raised), counted once more
on top of its traceback rank; structure — the
STRUCTURE_FILES best files of that fusion, the modules of the strongest hits: their
symbols in body rank order, taken in turn from each file; members — classes by their
members' scores; methods — the methods of the strongest classes in body rank order;
calls — what the strongest hits call. A gold symbol's rank in the body list over the whole
repository is often in the hundreds, among its own file's symbols it is near the top.

Files: a file's score is its symbols' scores of the primary fusion (module symbols
included), best first, the i-th counted FILE_DECAY**i times: a file with one strong hit
beats one with many weak ones, and a second good hit still counts.

Weights, RRF_K, STRUCTURE_FILES, FILE_DECAY and the secondary signals' constants were set
on the whole development set
(90 SWE-bench instances, sympy and astropy; `ctxdb retrieve --eval`), never per instance.
Ties are broken by entity key (symbols) and path (files); scores are rounded, so the
output is byte-identical whatever the hash seed.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from sqlalchemy import Connection, bindparam

from ..sqlfiles import sql_statement
from . import signals as found_by

SIGNAL_BODY = "body"
SIGNAL_NAMES = "names"
SIGNAL_TRACEBACK = "traceback"
SIGNAL_TESTS = "tests"
SIGNAL_TEST_IMPORTS = "imports"
SIGNAL_STRUCTURE = "structure"
SIGNAL_MEMBERS = "members"
SIGNAL_METHODS = "methods"
SIGNAL_CALLS = "calls"
SIGNAL_CRASH = "crash"
PRIMARY_SIGNALS = (SIGNAL_BODY, SIGNAL_NAMES, SIGNAL_TRACEBACK, SIGNAL_TESTS,
                   SIGNAL_TEST_IMPORTS)
# built from the primary fusion, then fused with it
SECONDARY_SIGNALS = (SIGNAL_CRASH, SIGNAL_STRUCTURE, SIGNAL_MEMBERS, SIGNAL_METHODS,
                     SIGNAL_CALLS)
SIGNALS = (*PRIMARY_SIGNALS, *SECONDARY_SIGNALS)

# Set on the development set (see the module docstring).
WEIGHTS = {
    SIGNAL_BODY: 1.0,
    SIGNAL_NAMES: 1.0,
    # the task's own frames: 1.0 / 1.5 / 2.0 / 3.0 / 4.0 tried (Windows paths read):
    # recall@10 0.590 / 0.601 / 0.601 / 0.610 / 0.610, @5 0.446 / 0.458 / 0.458 / 0.458 /
    # 0.469, @30 0.705 / 0.714 from 1.5 on; from 3.0 astropy loses (@10 0.625 → 0.600,
    # file@5 0.950 → 0.850). Kept at 1.0: at 2.0 and 3.0 the no-ranker edit windows'
    # median went 2,458 → 2,542 tokens, over issue 23's 2,500 (docs/recon.md)
    SIGNAL_TRACEBACK: 1.0,
    SIGNAL_TESTS: 1.0,
    # The crash site, on top of its traceback rank (weight 1.0 at rank 1): the frame the
    # error was raised in is the fault's most likely place among a trace's frames
    # (Schröter et al., "Do stack traces help developers fix bugs?", MSR 2010). 0.5 / 1.0 /
    # 2.0 tried: recall@10 0.601 each (0.590 without); at 1.0 and 2.0 one gold symbol
    # falls from #3 to #4. Raising the whole traceback list instead (1.5 / 2.0) gave the same
    # @10 but moved other retrieved symbols, one no-ranker edit window across the median.
    SIGNAL_CRASH: 0.5,
    # 0.5 / 1.0 tried (with the three below): the same file@5 (0.906), file@1 0.683 / 0.678;
    # it is for the repositories whose test files do not mirror their modules' paths
    SIGNAL_TEST_IMPORTS: 1.0,
    # 2.0 / 3.0 / 4.0 tried with the signals below: recall@10 0.583 / 0.590 / 0.564
    SIGNAL_STRUCTURE: 3.0,  # alone, 1.0 / 2.0 / 3.0 tried: recall@30 0.635 / 0.680 / 0.681
    SIGNAL_MEMBERS: 1.0,  # 1.0 / 2.0 tried: recall@10 0.590 / 0.583, @30 0.705 / 0.689
    SIGNAL_METHODS: 0.5,  # 0.5 / 1.0 tried: recall@10 0.590 / 0.595, @30 0.705 / 0.688
    SIGNAL_CALLS: 1.0,  # 0.5 / 1.0 tried: recall@10 0.578 / 0.590
}
# Cormack et al. use 60; 10 lets each list's top weigh more (recall@10 0.52 → 0.54, MRR
# 0.32 → 0.35 on the development set; 30 lies between). With members, methods, calls and
# imports: 5 / 10 / 20 give recall@10 0.572 / 0.590 / 0.586.
RRF_K = 10
STRUCTURE_FILES = 2  # 1 gives recall@10 0.51, 2 gives 0.54 (with weight 3)
FILE_DECAY = 0.5  # 0.25 / 0.5 / 0.75 / 1.0 tried: file recall@1 0.64 / 0.68 / 0.67 / 0.48
# A class's i-th best member counts MEMBER_DECAY**i of its score (0.25 / 0.5 / 0.75 tried:
# recall@10 0.590 each, @30 0.711 / 0.705 / 0.699; as FILE_DECAY, for the same reason).
MEMBER_DECAY = 0.5
METHOD_CLASSES = 2  # the classes whose methods are opened: 1 / 2 / 3 give 0.590 / 0.590 / 0.584
# The strongest hits whose callees are followed: 3 / 5 / 10 give recall@10 0.578 / 0.590 /
# 0.590, @30 0.711 / 0.705 / 0.693. Callers as well as callees: @30 lower (0.62 against
# 0.65 on a first 34 instances), so callees only.
CALL_SEEDS = 5
# A callee's weight is its caller's score / (1 + its callers) ** EXPONENT, as the tests
# signal's (1.0 gives the same figures on the development set). A class called is its
# construction, and counts (leaving classes out: recall@5 0.446 → 0.423, @10 the same).
CALL_GENERIC_EXPONENT = 0.5
DEFAULT_LIMIT = 30
SCORE_DIGITS = 6  # scores are rounded to this many decimals in the output


@dataclass(frozen=True)
class Candidate:
    """A ranked symbol: its entity key, fused score, and each signal's rank of it."""

    entity_key: str
    score: float
    signals: dict[str, int]  # signal → rank in that signal's list (1 = its best)

    def provenance(self) -> str:
        found = ", ".join(f"{name} #{rank}" for name, rank in self.signals.items())
        return f"04: retrieved, score {self.score:.4f} ({found})"


@dataclass(frozen=True)
class FileCandidate:
    path: str
    score: float


@dataclass(frozen=True)
class Retrieval:
    symbols: tuple[Candidate, ...]
    files: tuple[FileCandidate, ...]
    signal_seconds: dict[str, float] = field(default_factory=dict, compare=False)

    def to_json_dict(self) -> dict:
        return {
            "symbols": [{"entity": c.entity_key, "score": c.score, "signals": c.signals}
                        for c in self.symbols],
            "files": [{"path": f.path, "score": f.score} for f in self.files],
        }


class _Symbol(NamedTuple):
    # a NamedTuple, not a frozen dataclass: a retrieval builds a few thousand of these,
    # and a frozen dataclass's __init__ took ~15% of its time (bench/retrieve.py, sympy)
    id: int
    key: str
    kind: str
    parent_id: int | None
    path: str
    is_test: bool


def _symbols(connection: Connection, ids: Iterable[int]) -> dict[int, _Symbol]:
    ids = sorted(set(ids))
    if not ids:
        return {}
    if connection.dialect.name == "sqlite":
        statement = sql_statement("recon/candidate_symbols_json.sqlite")
        params: dict[str, object] = {"symbol_ids": json.dumps(ids)}
    else:
        statement = sql_statement("recon/candidate_symbols").bindparams(
            bindparam("symbol_ids", expanding=True))
        params = {"symbol_ids": ids}
    rows = connection.execute(statement, params).tuples().all()
    # unpacked in the statement's column order: a Row's attribute lookup costs several
    # times a tuple's unpacking, over a few thousand rows a retrieval
    return {sid: _Symbol(sid, key, kind, parent_id, path, bool(is_test))
            for sid, key, kind, _name, _qualname, parent_id, _file_id, path, is_test, _line
            in rows}


def retrieve(
    connection: Connection,
    task: str,
    *,
    failing_tests: Sequence[str] = (),
    traceback: str | None = None,
    limit: int = DEFAULT_LIMIT,
    signals: Sequence[str] = SIGNALS,
    weights: dict[str, float] | None = None,
) -> Retrieval:
    """Rank recon symbols and files for a task: the code an issue is about.

    `connection` sees the recon tables as ``recon.*``. `failing_tests`: pytest ids,
    Django ids or bare test names. `traceback`: live output holding frames (the task's
    own are read too). `signals`: which to use (default all; for measuring one alone).
    """
    if not isinstance(task, str):
        raise TypeError(f"task: expected the task text as a string, not {type(task).__name__}")
    unknown = [name for name in signals if name not in SIGNALS]
    if unknown:
        raise ValueError(f"signals: {unknown[0]!r} is not one of {', '.join(SIGNALS)}")
    if limit < 1:
        raise ValueError("limit: expected at least 1")
    weights = {**WEIGHTS, **(weights or {})}
    text = task if not traceback else f"{task}\n{traceback}"
    timings: dict[str, float] = {}
    lists: dict[str, list[found_by.Hit]] = {}
    body: list[found_by.Hit] = []
    finders = {
        SIGNAL_BODY: lambda: found_by.body_signal(connection, text),
        SIGNAL_NAMES: lambda: found_by.names_signal(connection, text),
        SIGNAL_TRACEBACK: lambda: found_by.traceback_signal(connection, text),
        SIGNAL_TESTS: lambda: found_by.tests_signal(connection, failing_tests),
        SIGNAL_TEST_IMPORTS: lambda: found_by.test_imports_signal(connection, failing_tests),
    }
    for name in PRIMARY_SIGNALS:
        if name in signals:
            started = time.perf_counter()
            lists[name] = finders[name]()
            timings[name] = time.perf_counter() - started
    if SIGNAL_BODY in lists:
        body = lists[SIGNAL_BODY]
    elif SIGNAL_STRUCTURE in signals or SIGNAL_METHODS in signals:
        # siblings and methods are ordered by body rank even without the body signal
        body = found_by.body_signal(connection, text)
    info = _symbols(connection, [hit.symbol_id for hits in (*lists.values(), body) for hit in hits])
    ranks = {name: _candidate_ranks(hits, info) for name, hits in lists.items()}
    fused = _fuse(ranks, weights)
    primary_ranked = sorted(fused.items(), key=lambda item: (-item[1], info[item[0]].key))
    files = _rank_files(primary_ranked, info)
    primary = fused
    # the secondary signals walk the primary fusion best first: sorted once, here
    primary_order = [sid for sid, _score in primary_ranked]
    secondary = {
        SIGNAL_CRASH: lambda: _crash_ranks(ranks.get(SIGNAL_TRACEBACK, {})),
        SIGNAL_STRUCTURE: lambda: _structure_ranks(files, info, body),
        SIGNAL_MEMBERS: lambda: _members_ranks(connection, primary, primary_order, info),
        SIGNAL_METHODS: lambda: _methods_ranks(primary_order, info, body),
        SIGNAL_CALLS: lambda: _calls_ranks(connection, primary, primary_order, info),
    }
    for name in SECONDARY_SIGNALS:
        if name in signals:
            started = time.perf_counter()
            ranks[name] = secondary[name]()
            timings[name] = time.perf_counter() - started
    if any(name in signals for name in SECONDARY_SIGNALS):
        fused = _fuse(ranks, weights)
    ordered = sorted(fused.items(), key=lambda item: (-item[1], info[item[0]].key))
    symbols = tuple(itertools.islice(
        (Candidate(info[sid].key, round(score, SCORE_DIGITS),
                   {name: ranks[name][sid] for name in ranks if sid in ranks[name]})
         for sid, score in ordered if info[sid].kind != "module"), limit))
    return Retrieval(symbols, files[:limit], timings)


def _candidate_ranks(hits: list[found_by.Hit], info: dict[int, _Symbol]) -> dict[int, int]:
    """symbol id → rank (from 1) among the list's symbols outside test files."""
    ranks: dict[int, int] = {}
    for hit in hits:
        if not info[hit.symbol_id].is_test and hit.symbol_id not in ranks:
            ranks[hit.symbol_id] = len(ranks) + 1
    return ranks


def _fuse(ranks: dict[str, dict[int, int]], weights: dict[str, float]) -> dict[int, float]:
    fused: dict[int, float] = {}
    for name in SIGNALS:  # a fixed order: float sums must not depend on dict history
        for symbol_id, rank in ranks.get(name, {}).items():
            fused[symbol_id] = fused.get(symbol_id, 0.0) + weights[name] / (RRF_K + rank)
    return fused


def _crash_ranks(traceback_ranks: dict[int, int]) -> dict[int, int]:
    """The traceback's innermost frame outside test files (its rank 1), if any."""
    return {sid: rank for sid, rank in traceback_ranks.items() if rank == 1}


def _structure_ranks(files: tuple[FileCandidate, ...], info: dict[int, _Symbol],
                     body: list[found_by.Hit]) -> dict[int, int]:
    """Neighbours of the strongest hits: the symbols of the STRUCTURE_FILES best files
    (the strongest hits' modules, their classes' members among them), each file's in
    body rank order, taken in turn from each file (its best, then each one's second, …)."""
    seed_files = [f.path for f in files[:STRUCTURE_FILES]]
    if not seed_files:
        return {}
    per_file: dict[str, list[int]] = {path: [] for path in seed_files}
    for hit in body:
        symbol = info[hit.symbol_id]
        if symbol.path in per_file and symbol.kind != "module":
            per_file[symbol.path].append(hit.symbol_id)
    ranks: dict[int, int] = {}
    for depth in range(max(len(ids) for ids in per_file.values())):
        for path in seed_files:
            if depth < len(per_file[path]):
                ranks.setdefault(per_file[path][depth], len(ranks) + 1)
    return ranks


def _members_ranks(connection: Connection, primary: dict[int, float], primary_order: list[int],
                   info: dict[int, _Symbol]) -> dict[int, int]:
    """Classes by their members' primary scores, best first, the i-th counted
    MEMBER_DECAY**i times: a change that adds a method is a change to its class, whose
    own text (its body minus its methods) holds little the task writes."""
    parent_ids = {parent for sid in primary
                  if (parent := info[sid].parent_id) is not None and info[sid].kind != "module"}
    info.update(_symbols(connection, [pid for pid in parent_ids if pid not in info]))
    scores: dict[int, float] = {}
    counted: dict[int, int] = {}
    for sid in primary_order:
        parent = info[sid].parent_id
        if parent is None or info[sid].kind == "module" or info[parent].kind != "class":
            continue
        seen = counted.get(parent, 0)
        scores[parent] = scores.get(parent, 0.0) + primary[sid] * MEMBER_DECAY ** seen
        counted[parent] = seen + 1
    return _candidate_ranks(found_by.ranked_hits(scores), info)


def _methods_ranks(primary_order: list[int], info: dict[int, _Symbol],
                   body: list[found_by.Hit]) -> dict[int, int]:
    """The methods of the METHOD_CLASSES strongest classes, each class's in body rank
    order, taken in turn: the class a task names is where its fix often lies, in a
    method the task's words barely touch."""
    classes = [sid for sid in primary_order
               if info[sid].kind == "class" and not info[sid].is_test][:METHOD_CLASSES]
    if not classes:
        return {}
    per_class: dict[int, list[int]] = {sid: [] for sid in classes}
    for hit in body:
        parent = info[hit.symbol_id].parent_id
        if parent in per_class:
            per_class[parent].append(hit.symbol_id)
    ranks: dict[int, int] = {}
    for depth in range(max(len(ids) for ids in per_class.values())):
        for sid in classes:
            if depth < len(per_class[sid]):
                ranks.setdefault(per_class[sid][depth], len(ranks) + 1)
    return ranks


def _calls_ranks(connection: Connection, primary: dict[int, float], primary_order: list[int],
                 info: dict[int, _Symbol]) -> dict[int, int]:
    """What the CALL_SEEDS strongest hits call: the helper a named function delegates
    to. A callee counts its caller's score over √(1 + its callers), so a helper called
    from everywhere weighs little."""
    seeds = [sid for sid in primary_order
             if info[sid].kind != "module" and not info[sid].is_test][:CALL_SEEDS]
    if not seeds:
        return {}
    statement = sql_statement("recon/callees_with_callers").bindparams(
        bindparam("symbol_ids", expanding=True))
    scores: dict[int, float] = {}
    for row in connection.execute(statement, {"symbol_ids": seeds}):
        if row.callee_id in seeds:
            continue
        weight = primary[row.caller_id] / (1 + row.callers) ** CALL_GENERIC_EXPONENT
        scores[row.callee_id] = scores.get(row.callee_id, 0.0) + weight
    info.update(_symbols(connection, [sid for sid in scores if sid not in info]))
    return _candidate_ranks(found_by.ranked_hits(scores), info)


def _rank_files(ordered: list[tuple[int, float]],
                info: dict[int, _Symbol]) -> tuple[FileCandidate, ...]:
    per_file: dict[str, float] = {}
    counted: dict[str, int] = {}
    for sid, score in ordered:
        path = info[sid].path
        seen = counted.get(path, 0)
        per_file[path] = per_file.get(path, 0.0) + score * FILE_DECAY ** seen
        counted[path] = seen + 1
    files = sorted(per_file.items(), key=lambda item: (-item[1], item[0]))
    return tuple(FileCandidate(path, round(score, SCORE_DIGITS)) for path, score in files)
