"""Run the A/B on the development set (../shared/devset/) and print its figures.

    python bench/devset.py MIRROR_DIR [--output PATH] [--ranker none|oracle|URL]
                           [--limit N] [--workers N] [--db PATH] [--cache DIR]

MIRROR_DIR holds each repository's bare git directory as ``OWNER+NAME/repo`` (or
``OWNER+NAME`` itself), e.g. ``/work/.mirror/sympy+sympy/repo``. The script writes the
development set's instances with ``repo_git`` added to each line (default
~/.cache/ctxdb/devset/instances.jsonl), then runs ``ctxdb ab run`` on the first N
instances in file order (``--limit``; the file is sorted by instance id, so a small N
is astropy's instances first) with the chosen ranker, and prints the A/B report.

The store is one per ranker and limit (``ab-RANKER-firstN.db`` beside the instances
file), made afresh on every run, so the figures are this run's alone; a ``--db`` of
your own is used as it is. Trees and recon indexes are cached (``--cache``): a first
run pays for materialising and indexing every instance, later runs only construct.
Seconds per instance are the run's wall time over its instances (with ``--workers``
> 1, instances overlap).

The LAST line is the figures as key=value pairs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from ctxdb.ab import reports
from ctxdb.ab.instances import InstanceError, listed_rows, load_instances, mirror_git_dir
from ctxdb.ab.materialize import is_cached, materialize
from ctxdb.ab.runner import DEFAULT_CACHE, RANKER_NONE, RANKER_ORACLE, is_ranker_url
from ctxdb.cli import main as ctxdb_main
from ctxdb.store import ContextStore

REPO_ROOT = Path(__file__).resolve().parent.parent
DEVSET = REPO_ROOT.parent / "shared" / "devset" / "instances.jsonl"
DEFAULT_OUTPUT = Path.home() / ".cache" / "ctxdb" / "devset" / "instances.jsonl"
ARMS = ("ctx08", "current")
EXIT_BAD_INPUT = 2  # as the ctxdb command's

DECISION_TYPES = ("localize", "edit")


def write_instances(source: Path, mirror: Path, output: Path) -> int:
    """Copy the instances with ``repo_git`` added; returns how many lines were written."""
    rows = listed_rows(source, ("repo",), "the development set's instances.jsonl "
                       "(../shared/devset/ beside this repository)")
    for row in rows:
        row["repo_git"] = str(mirror_git_dir(mirror, row["repo"]))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows),
                      encoding="utf-8")
    return len(rows)


def first_lines(path: Path, limit: int, output: Path) -> Path:
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    output.write_text("\n".join(lines[:limit]) + "\n", encoding="utf-8")
    return output


def ranker_name(ranker: str) -> str:
    return ranker if ranker in (RANKER_NONE, RANKER_ORACLE) else "endpoint"


def _rows(report: reports.Report) -> list[dict]:
    return [dict(zip(report.columns, row, strict=True)) for row in report.rows]


def _number(value) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def figures_of(store: ContextStore) -> dict[str, object]:
    """Per arm: precision, gold recall and tokens; per arm and decision type: median and
    p95 tokens, mean gold recall; the ctx08 run's ranking calls."""
    with store.engine.connect() as connection:
        arms = _rows(reports.run_report(connection, "arms"))
        tokens = _rows(reports.run_report(connection, "tokens"))
        recall = _rows(reports.run_report(connection, "gold_recall"))
        runs = _rows(reports.run_report(connection, "runs"))
        precision = _rows(reports.run_report(connection, "precision"))
    figures: dict[str, object] = {"instances_done": len({r["instance_id"] for r in precision})}
    for row in arms:
        if row["variant"] != "default":
            continue
        arm = row["arm"]
        for name in ("decisions", "precision_items", "precision_tokens", "gold_recall",
                     "mean_tokens", "max_tokens", "budget_adherence"):
            figures[f"{arm}_{name}"] = row[name]
    for row in tokens:
        if row["variant"] == "default":
            key = f"{row['arm']}_{row['decision_type']}"
            figures[f"{key}_median_tokens"] = row["median_tokens"]
            figures[f"{key}_p95_tokens"] = row["p95_tokens"]
    for arm in ARMS:
        for decision_type in DECISION_TYPES:
            values = [r["gold_recall"] for r in recall
                      if r["arm"] == arm and r["variant"] == "default"
                      and r["decision_type"] == decision_type and r["gold_recall"] is not None]
            if values:
                figures[f"{arm}_{decision_type}_gold_recall"] = statistics.fmean(values)
    ctx08_runs = [r for r in runs if r["arm"] == "ctx08" and r["variant"] == "default"]
    figures["ctx08_rank_calls"] = sum(r["rank_calls"] for r in ctx08_runs)
    figures["ctx08_rank_calls_ok"] = sum(r["rank_calls_ok"] or 0 for r in ctx08_runs)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mirror", type=Path, help="directory of the repositories' git dirs")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT,
                        help=f"the instances with repo_git (default: {DEFAULT_OUTPUT})")
    parser.add_argument("--instances", type=Path, default=DEVSET,
                        help=f"the development set (default: {DEVSET})")
    parser.add_argument("--ranker", default=RANKER_NONE, help="none, oracle or a URL")
    parser.add_argument("--limit", type=int, default=None,
                        help="run the first N instances in file order (default: all)")
    parser.add_argument("--workers", type=int, default=None, help="ab run --workers")
    parser.add_argument("--db", type=Path, default=None,
                        help="the store (default: a fresh one per ranker beside --output)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help=f"materialised trees and recon indexes (default: {DEFAULT_CACHE})")
    args = parser.parse_args()
    if args.ranker not in (RANKER_NONE, RANKER_ORACLE) and not is_ranker_url(args.ranker):
        parser.error("--ranker: expected none, oracle or an http(s):// URL")
    if args.limit is not None and args.limit < 1:
        parser.error("--limit: expected at least 1")

    try:
        total = write_instances(args.instances, args.mirror.resolve(), args.output)
    except InstanceError as exc:
        print(f"devset: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    limit = min(args.limit or total, total)
    print(f"wrote {total} instances with repo_git to {args.output}")
    instances_path = args.output
    if limit < total:
        instances_path = first_lines(args.output, limit,
                                     args.output.with_name(f"{args.output.stem}.first{limit}.jsonl"))
    db = args.db
    if db is None:
        db = args.output.with_name(f"ab-{ranker_name(args.ranker)}-first{limit}.db")
        for stale in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
            stale.unlink(missing_ok=True)
    instances, _errors = load_instances(instances_path)
    cached = sum(is_cached(i, args.cache) for i in instances)

    command = ["ab", "run", str(instances_path), "--db", str(db), "--cache", str(args.cache),
               "--ranker", args.ranker]
    if args.workers is not None:
        command += ["--workers", str(args.workers)]
    print("ctxdb " + " ".join(command), flush=True)
    start = time.perf_counter()
    status = ctxdb_main(command)
    seconds = time.perf_counter() - start
    if status != 0:
        print(f"devset: ctxdb ab run exited {status}", file=sys.stderr)
        return status

    with ContextStore.open(str(db)) as store:
        with store.engine.connect() as connection:
            print()
            print(reports.ab_screen(connection))
        measured = figures_of(store)
    # materialize() of a cached tree only reads its manifest
    skipped = sum(len(materialize(i, args.cache).skipped) for i in instances
                  if is_cached(i, args.cache))
    figures = {"ranker": ranker_name(args.ranker), "instances": limit,
               "trees_cached_before": cached, "files_skipped": skipped,
               "seconds": f"{seconds:.1f}", "seconds_per_instance": f"{seconds / limit:.1f}"}
    figures.update(measured)
    print()
    print(" ".join(f"{key}={_number(value)}" for key, value in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
