"""`ctxdb retrieve --eval`: the retriever alone, measured on SWE-bench-format instances.

Each instance is materialised and indexed as ``ctxdb ab run`` does (the same cache and
code: `ctxdb.ab.materialize`). Gold symbols are the instance's ``edited_entity`` gold
facts that are symbols (keys with ``::``; an edit at module level is no symbol); gold
files are the files the gold patch changes. Every configuration runs in the same
process over the same indexes: the retriever with all signals, each primary signal
alone, all but one (the structure signal needs seeds, so it is measured by its removal),
and the A/B runner's old stand-in (BM25 over names, signatures and docstrings).

Figures per configuration: gold-symbol recall at 5/10/30 (the mean over instances of the
share of their gold symbols in the top k, and pooled over all gold symbols at 30),
gold-file recall at 1/5/10, mean reciprocal rank of the first gold symbol (0 when none is
in the list), and latency per query. Failing tests are given as the harness knows them:
a bare test name (sympy's FAIL_TO_PASS) becomes the entity key of the test of that name
in a file the test patch changes.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..ab.decisions import RETRIEVAL_TOP_K, fts_query
from ..ab.gold import edited_entities
from ..ab.instances import Instance, load_instances
from ..ab.materialize import materialize
from ..diffs import parse_unified_diff
from ..entities import is_symbol_key
from ..recon.schema import create_recon_engine
from .localize import failing_test_ids
from .retriever import PRIMARY_SIGNALS, SIGNALS, retrieve

SYMBOL_CUTOFFS = (5, 10, 30)
FILE_CUTOFFS = (1, 5, 10)
LIST_LENGTH = RETRIEVAL_TOP_K  # both the retriever and the stand-in return 30 symbols
STAND_IN = "stand-in"
ALL = "all"


def configurations() -> list[str]:
    """In the order they run; ``all`` last, so its latency is measured warm."""
    return [STAND_IN, *(f"{name} alone" for name in PRIMARY_SIGNALS),
            *(f"all - {name}" for name in SIGNALS), ALL]


def _signals_of(configuration: str) -> tuple[str, ...]:
    if configuration == ALL:
        return SIGNALS
    if configuration.endswith(" alone"):
        return (configuration.removesuffix(" alone"),)
    removed = configuration.removeprefix("all - ")
    return tuple(name for name in SIGNALS if name != removed)


@dataclass
class Ranked:
    symbols: list[str]
    files: list[str]
    seconds: float


@dataclass
class InstanceScore:
    instance_id: str
    gold_symbols: list[str]
    gold_files: list[str]
    ranked: dict[str, Ranked] = field(default_factory=dict)
    error: str | None = None
    repo: str = ""


def gold_of(connection, instance: Instance) -> tuple[list[str], list[str]]:
    symbols = [fact.entity_key for fact in edited_entities(connection, instance.patch)
               if is_symbol_key(fact.entity_key)]
    files: dict[str, None] = {}
    for change in parse_unified_diff(instance.patch):
        path = change.old_path or change.new_path
        if path is not None:
            files.setdefault(path, None)
    return symbols, list(files)


def _stand_in(connection, instance: Instance) -> Ranked:
    started = time.perf_counter()
    hits = [h for h in fts_query(connection, instance.problem_statement) if h["kind"] != "module"]
    seconds = time.perf_counter() - started
    files: dict[str, None] = {}
    for hit in hits:
        files.setdefault(hit["key"].split("::", 1)[0], None)
    return Ranked([h["key"] for h in hits], list(files), seconds)


def score_instance(instance: Instance, cache_dir: Path) -> InstanceScore:
    tree = materialize(instance, cache_dir)
    engine = create_recon_engine(str(tree.recon), read_only=True)
    try:
        with engine.connect() as connection:
            gold_symbols, gold_files = gold_of(connection, instance)
            score = InstanceScore(instance.instance_id, gold_symbols, gold_files,
                                  repo=instance.repo)
            tests = failing_test_ids(connection, instance)
            for configuration in configurations():
                if configuration == STAND_IN:
                    score.ranked[configuration] = _stand_in(connection, instance)
                    continue
                started = time.perf_counter()
                found = retrieve(connection, instance.problem_statement, failing_tests=tests,
                                 limit=LIST_LENGTH, signals=_signals_of(configuration))
                score.ranked[configuration] = Ranked(
                    [c.entity_key for c in found.symbols], [f.path for f in found.files],
                    time.perf_counter() - started)
    finally:
        engine.dispose()
    return score


def evaluate(instances_path, cache_dir: Path,
             progress: Callable[[int, int], None] | None = None) -> tuple[list[InstanceScore],
                                                                           list[str]]:
    instances, errors = load_instances(instances_path)
    scores = []
    if progress and instances:
        progress(0, len(instances))
    for number, instance in enumerate(instances, start=1):
        try:
            scores.append(score_instance(instance, cache_dir))
        except Exception as exc:  # noqa: BLE001 - one instance's failure is reported, not fatal
            scores.append(InstanceScore(instance.instance_id, [], [],
                                        error=f"{type(exc).__name__}: {exc}",
                                        repo=instance.repo))
        if progress:
            progress(number, len(instances))
    return scores, errors


# --- figures ------------------------------------------------------------------------------


def _recall(ranked: list[str], gold: list[str], k: int) -> float:
    return len(set(ranked[:k]) & set(gold)) / len(gold)


def _reciprocal_rank(ranked: list[str], gold: list[str]) -> float:
    for rank, key in enumerate(ranked, start=1):
        if key in gold:
            return 1.0 / rank
    return 0.0


def instance_figures(score: InstanceScore, configuration: str) -> dict:
    ranked = score.ranked[configuration]
    out: dict = {}
    if score.gold_symbols:
        for k in SYMBOL_CUTOFFS:
            out[f"symbol_recall@{k}"] = _recall(ranked.symbols, score.gold_symbols, k)
        out["mrr"] = _reciprocal_rank(ranked.symbols, score.gold_symbols)
    if score.gold_files:
        for k in FILE_CUTOFFS:
            out[f"file_recall@{k}"] = _recall(ranked.files, score.gold_files, k)
    out["latency_ms"] = ranked.seconds * 1000
    return out


def repositories(scores: list[InstanceScore]) -> list[str]:
    return sorted({s.repo for s in scores})


def overall(scores: list[InstanceScore], configuration: str, repo: str | None = None) -> dict:
    """The configuration's figures over every instance, or over one repository's: a rule
    that only fits one repository shows there."""
    done = [s for s in scores if s.error is None and repo in (None, s.repo)]
    rows = [instance_figures(s, configuration) for s in done]

    def mean(key: str) -> float | None:
        values = [row[key] for row in rows if key in row]
        return statistics.fmean(values) if values else None

    out: dict[str, float | int | None] = {"instances": len(done)}
    for k in SYMBOL_CUTOFFS:
        out[f"symbol_recall@{k}"] = mean(f"symbol_recall@{k}")
    gold_total = sum(len(s.gold_symbols) for s in done)
    found = sum(len(set(s.ranked[configuration].symbols[:LIST_LENGTH]) & set(s.gold_symbols))
                for s in done)
    out[f"pooled_symbol_recall@{LIST_LENGTH}"] = found / gold_total if gold_total else None
    for k in FILE_CUTOFFS:
        out[f"file_recall@{k}"] = mean(f"file_recall@{k}")
    out["mrr"] = mean("mrr")
    latencies = sorted(row["latency_ms"] for row in rows)
    out["latency_p50_ms"] = statistics.median(latencies) if latencies else None
    out["latency_p95_ms"] = (latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))]
                             if latencies else None)
    return out


def _cell(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _table(header: list[str], rows: list[list]) -> str:
    cells = [header] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


OVERALL_COLUMNS = ("instances", "symbol_recall@5", "symbol_recall@10", "symbol_recall@30",
                   f"pooled_symbol_recall@{LIST_LENGTH}", "file_recall@1", "file_recall@5",
                   "file_recall@10", "mrr", "latency_p50_ms", "latency_p95_ms")


def report(scores: list[InstanceScore]) -> str:
    """Per instance (the retriever and the stand-in), then overall per configuration."""
    per_instance: list[list[object]] = []
    for s in scores:
        if s.error is not None:
            per_instance.append([s.instance_id, "error: " + s.error] + [None] * 7)
            continue
        fused, old = instance_figures(s, ALL), instance_figures(s, STAND_IN)
        per_instance.append([
            s.instance_id, len(s.gold_symbols), fused.get("symbol_recall@10"),
            fused.get("symbol_recall@30"), old.get("symbol_recall@30"),
            fused.get("file_recall@5"), old.get("file_recall@5"), fused.get("mrr"),
            fused["latency_ms"],
        ])
    first = _table(["instance", "gold_symbols", "all@10", "all@30", "stand-in@30",
                    "all file@5", "stand-in file@5", "all mrr", "all ms"], per_instance)
    rows = []
    for configuration in configurations():
        figures = overall(scores, configuration)
        rows.append([configuration] + [figures[c] for c in OVERALL_COLUMNS])
    second = _table(["configuration", *OVERALL_COLUMNS], rows)
    per_repo = []
    for repo in repositories(scores):
        for configuration in (STAND_IN, ALL):
            figures = overall(scores, configuration, repo)
            per_repo.append([repo, configuration] + [figures[c] for c in OVERALL_COLUMNS])
    third = _table(["repository", "configuration", *OVERALL_COLUMNS], per_repo)
    return (f"{first}\n\nOverall (mean over instances; pooled = over all gold symbols)\n"
            f"{second}\n\nPer repository\n{third}")


def json_lines(scores: list[InstanceScore]) -> list[str]:
    """One object per instance: the fused lists, best first, and their figures."""
    out = []
    for s in scores:
        record: dict = {"instance_id": s.instance_id}
        if s.error is not None:
            record["error"] = s.error
        else:
            ranked = s.ranked[ALL]
            record.update(symbols=ranked.symbols, files=ranked.files,
                          gold_symbols=s.gold_symbols, gold_files=s.gold_files,
                          figures={c: instance_figures(s, c) for c in configurations()})
        out.append(json.dumps(record, sort_keys=True))
    return out
