"""Fusing the signals into one ranking of symbols and one of files.

The rule (weighted reciprocal-rank fusion, Cormack et al. 2009, with per-signal weights):

    fused(s) = Σ over signals σ that found s:  WEIGHTS[σ] / (RRF_K + rank_σ(s))

ranks counted from 1 within each signal's list, test-file symbols left out of every list
(the retriever looks for the code to change; the failing tests are the caller's). The
primary signals (body, names, traceback, tests) are fused first; the structure signal is
then built from the STRUCTURE_FILES best files of that fusion — the modules of the
strongest hits: their symbols in body rank order, taken in turn from each file — and
fused in with its weight. A gold symbol's rank in the body list over the whole
repository is often in the hundreds, among its own file's symbols it is near the top.

Files: a file's score is its symbols' scores of the primary fusion (module symbols
included), best first, the i-th counted FILE_DECAY**i times: a file with one strong hit
beats one with many weak ones, and a second good hit still counts.

Weights, RRF_K, STRUCTURE_FILES and FILE_DECAY were set on the whole development set
(90 SWE-bench instances, sympy and astropy; `ctxdb retrieve --eval`), never per instance.
Ties are broken by entity key (symbols) and path (files); scores are rounded, so the
output is byte-identical whatever the hash seed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import Connection, bindparam

from ..sqlfiles import sql_statement
from . import signals as found_by

SIGNAL_BODY = "body"
SIGNAL_NAMES = "names"
SIGNAL_TRACEBACK = "traceback"
SIGNAL_TESTS = "tests"
SIGNAL_STRUCTURE = "structure"
PRIMARY_SIGNALS = (SIGNAL_BODY, SIGNAL_NAMES, SIGNAL_TRACEBACK, SIGNAL_TESTS)
SIGNALS = (*PRIMARY_SIGNALS, SIGNAL_STRUCTURE)

# Set on the development set (see the module docstring).
WEIGHTS = {
    SIGNAL_BODY: 1.0,
    SIGNAL_NAMES: 1.0,
    SIGNAL_TRACEBACK: 1.0,
    SIGNAL_TESTS: 1.0,
    SIGNAL_STRUCTURE: 3.0,  # 1.0 / 2.0 / 3.0 tried: recall@30 0.635 / 0.680 / 0.681
}
# Cormack et al. use 60; 10 lets each list's top weigh more (recall@10 0.52 → 0.54, MRR
# 0.32 → 0.35 on the development set; 30 lies between).
RRF_K = 10
STRUCTURE_FILES = 2  # 1 gives recall@10 0.51, 2 gives 0.54 (with weight 3)
FILE_DECAY = 0.5  # 0.25 / 0.5 / 0.75 / 1.0 tried: file recall@1 0.64 / 0.68 / 0.67 / 0.48
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


@dataclass(frozen=True)
class _Symbol:
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
    statement = sql_statement("recon/candidate_symbols").bindparams(
        bindparam("symbol_ids", expanding=True))
    return {row.id: _Symbol(row.id, row.key, row.kind, row.parent_id, row.path, bool(row.is_test))
            for row in connection.execute(statement, {"symbol_ids": ids})}


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
    }
    for name in PRIMARY_SIGNALS:
        if name in signals:
            started = time.perf_counter()
            lists[name] = finders[name]()
            timings[name] = time.perf_counter() - started
    if SIGNAL_BODY in lists:
        body = lists[SIGNAL_BODY]
    elif SIGNAL_STRUCTURE in signals:  # siblings are ordered by body rank even without it
        body = found_by.body_signal(connection, text)
    info = _symbols(connection, [hit.symbol_id for hits in (*lists.values(), body) for hit in hits])
    ranks = {name: _candidate_ranks(hits, info) for name, hits in lists.items()}
    fused = _fuse(ranks, weights)
    files = _rank_files(sorted(fused.items(), key=lambda item: (-item[1], info[item[0]].key)),
                        info)
    if SIGNAL_STRUCTURE in signals:
        started = time.perf_counter()
        structure = _structure_ranks(files, info, body)
        timings[SIGNAL_STRUCTURE] = time.perf_counter() - started
        ranks[SIGNAL_STRUCTURE] = structure
        fused = _fuse(ranks, weights)
    ordered = sorted(fused.items(), key=lambda item: (-item[1], info[item[0]].key))
    symbols = tuple(
        Candidate(info[sid].key, round(score, SCORE_DIGITS),
                  {name: ranks[name][sid] for name in ranks if sid in ranks[name]})
        for sid, score in ordered if info[sid].kind != "module"
    )[:limit]
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
