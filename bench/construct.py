"""Benchmark store.construct on pools drawn from the recon index of Django 5.0.6.

    python bench/construct.py [--cache DIR] [--runs N] [--prior-large N]
    python bench/construct.py --against REV [--against REV2] [--rounds N] [--runs N] ...

Indexes the Django 5.0.6 sdist once (cached beside the sdist; a no-change re-index
after that), then measures, side by side in one run:

- construct latency for pools of 16, 64 and 256 items (entities only: assembly reads
  their text from recon), an edit decision with derive_impact, each call with a new
  request object (so it is validated and serialized afresh), in three states:
  warm — a harness process's steady state: every text already counted, this recon
  generation already read; cold — the token cache emptied (table and process) before
  each call; fresh process — everything the process keeps across decisions dropped
  too (recon reads, hashes, term sets): the first decision over a repository;
- construct latency (256 items, warm) in a store holding 1k decisions and in one
  holding 100k, calls interleaved between the two (prior decisions are copies of a
  real 16-item one, made in SQL: realistic rows without 100k copies of 256 bodies).

And the write lock's hold per decision (``ContextStore.lock_holds``: BEGIN IMMEDIATE to
COMMIT of its write transaction) over every call of the first measurement: p50, p99, max.

Prints medians and p95. The LAST line is the figures as key=value pairs.

``--against REV`` (repeatable) compares instead: REV's own bench/construct.py runs from a
git worktree of REV (its code on the path), then this checkout's, alternately, ``--rounds``
times, each in a fresh process; a table of both sides' figures follows (every round's
value, the median of the rounds, and this checkout's median over REV's). REV's recon index
is kept apart (``CACHE/against/<commit>``, the sdist linked in): an older ctxdb may write
another recon schema. The LAST line is this checkout's medians and the ratios.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from recon_index import DEFAULT_CACHE, SDIST_DIR, ensure_sdist  # noqa: E402
from sqlalchemy import text  # noqa: E402

from ctxdb import ContextStore  # noqa: E402
from ctxdb.caches import forget_process_caches  # noqa: E402
from ctxdb.recon import (  # noqa: E402
    ReconVersionError,
    check_recon_version,
    index_repository,
    search_symbols,
)
from ctxdb.request import DecisionRequest  # noqa: E402
from ctxdb.tokens import forget_counts_in_process  # noqa: E402

RECON_FILE = "django-5.0.6-recon.db"


def django_recon(cache: Path) -> tuple[Path, object]:
    """The Django sdist and its recon index in ``cache``: brought up to date, and built
    again from scratch when an older ctxdb wrote it (another recon schema version)."""
    root = ensure_sdist(cache)
    recon_path = cache / RECON_FILE
    stale = False
    if recon_path.exists():
        try:
            check_recon_version(recon_path)
        except ReconVersionError:
            stale = True
    return recon_path, index_repository(root, str(recon_path), rebuild=stale)


TARGET = "django/db/models/query.py::QuerySet.filter"
POOL_SIZES = (16, 64, 256)
SEED = 8  # spec 08
PRIOR_SMALL = 1_000
PRIOR_BATCH = 1_000


def build_request(connection, size: int, seq: int) -> dict:
    """A realistic edit decision: retrieval hits for the task, then recon neighbours."""
    hits = search_symbols(connection, "filter queryset lookup", limit=size)
    keys = [h["key"] for h in hits if h["kind"] != "module"]
    if len(keys) < size:
        rows = connection.execute(
            text("SELECT key FROM recon.symbol WHERE kind <> 'module' AND key LIKE :prefix"
                 " ORDER BY key"), {"prefix": "django/db/models/%"}
        ).scalars().all()
        rng = random.Random(SEED)
        keys += [k for k in rng.sample(rows, min(len(rows), size * 2)) if k not in keys]
    evidence = [{"source": "05", "kind": "fault_entity", "entity": TARGET,
                 "provenance": "05: localized"}]
    evidence += [
        {"source": "04", "kind": "retrieved_hit", "entity": key, "score": round(10 - n / 40, 3),
         "provenance": f"04: bm25 rank {n + 1}"}
        for n, key in enumerate(keys[: size - 1])
    ]
    return {
        "run_id": "bench", "instance_id": f"pool-{size}", "seq": seq,
        "decision_type": "edit",
        "task": "QuerySet.filter() must reject a lookup on a reverse relation that is not loaded.",
        "plan_node": {
            "node_id": "edit-1",
            "obligation": "Validate reverse-relation lookups in QuerySet.filter",
            "target_entity": TARGET,
            "required_validation": ["tests/queries/tests.py::Queries1Tests.test_ticket7076"],
            "acceptance_criteria": ["filter() on an unloaded reverse relation raises FieldError"],
            "decision_question": "Where does filter() resolve lookups?",
            "insertion_point": {"path": "django/db/models/query.py", "line": 1476},
        },
        "evidence": evidence,
        "derive_impact": True,
        "live": {"test_outputs": ["FAILED tests/queries/tests.py::Queries1Tests::test_ticket7076"]},
    }


# each measured decision's write-lock hold, ms (ContextStore.lock_holds)
LOCK_HOLDS_MS: list[float] = []


def percentile(values, fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def timed(store, request, *, cold: bool = False, fresh_process: bool = False) -> float:
    if cold or fresh_process:
        # not a store write: the store checkpoints its WAL after its own commits
        # (transactions.WAL_CHECKPOINT_PAGES), which then fall on the measured calls alone,
        # as a harness's do
        with store.engine.begin() as connection:
            connection.execute(text("DELETE FROM token_count_cache"))
        forget_counts_in_process()
    if fresh_process:
        forget_process_caches()
    request = dataclasses.replace(request)  # a new object, as each harness decision is
    start = time.perf_counter()
    store.construct(request)
    elapsed = (time.perf_counter() - start) * 1000
    LOCK_HOLDS_MS.append(store.lock_holds[-1] * 1000)  # the decision's own write transaction
    return elapsed


def p95(values):
    return percentile(values, 0.95)


def add_prior_decisions(store, template_id: int, count: int) -> None:
    """Copies of a real decision (all its rows), made in SQL in batches."""
    tables = {
        "evidence_item": "item_id, item_no, source, kind, entity_key, content_sha256,"
                         " original_sha256, provenance, score, arrival_no, path, start_line,"
                         " end_line, signature, in_pool, fact_key",
        "item_event": "item_id, event_no, stage, action, driver, tokens_before, tokens_after,"
                      " is_final, detail",
        "window_item": "position, item_id, role, rendering, tier, block, edge_critical,"
                       " token_count, rendered_sha256",
        "decision_link": "link_no, link_kind, entity_key, path, start_line, end_line, detail",
        "impact_edge": "edge_no, head_entity, tail_entity, edge_kind, depth, origin",
    }
    with store.write_transaction() as connection:
        start = connection.execute(text("SELECT MAX(decision_id) FROM decision")).scalar()
        if not connection.execute(text("SELECT 1 FROM run WHERE run_id = 'prior'")).first():
            connection.execute(text("INSERT INTO run (run_id, arm, variant, created_at)"
                                    " VALUES ('prior', 'ctx08', 'bench-prior', 'bench')"))
    made = 0
    while made < count:
        batch = min(PRIOR_BATCH, count - made)
        with store.write_transaction() as connection:
            connection.execute(text(
                "INSERT INTO decision (decision_id, run_id, instance_id, seq, decision_type,"
                " task_text, decision_question, request_json, request_sha256, tokenizer,"
                " token_ceiling, token_count, flags, created_at)"
                " SELECT :first + n.i, 'prior', 'prior-' || CAST(:first + n.i AS TEXT), 1,"
                " decision_type, task_text, decision_question, request_json, request_sha256,"
                " tokenizer, token_ceiling, token_count, flags, created_at"
                " FROM decision d, (WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1"
                " FROM c WHERE i < :batch) SELECT i FROM c) n WHERE d.decision_id = :template"
            ), {"first": start + made, "batch": batch, "template": template_id})
            for table, columns in tables.items():
                connection.execute(text(
                    f"INSERT INTO {table} (decision_id, {columns})"
                    f" SELECT :first + n.i, {columns} FROM {table} t,"
                    " (WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c"
                    " WHERE i < :batch) SELECT i FROM c) n WHERE t.decision_id = :template"
                ), {"first": start + made, "batch": batch, "template": template_id})
        made += batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help="where the Django sdist and its recon index are kept")
    parser.add_argument("--runs", type=int, default=25, help="timed calls per measurement")
    parser.add_argument("--prior-large", type=int, default=100_000,
                        help="prior decisions for the large-store measurement")
    parser.add_argument("--against", action="append", metavar="REV", default=[],
                        help="compare with REV's bench and code, alternately (repeatable)")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                        help="alternations of each side with --against")
    args = parser.parse_args()
    if args.against:
        compare(args)
        return

    recon_path, stats = django_recon(args.cache)
    print(f"recon: {stats.files_seen} files, {stats.files_parsed} parsed this run", flush=True)

    figures = {}
    with tempfile.TemporaryDirectory() as tmp, ContextStore.open(
        Path(tmp) / "bench.db", recon=str(recon_path)
    ) as store:
        with store.engine.connect() as connection:
            # The harness's library path: a DecisionRequest built once, passed as is.
            requests = {
                n: DecisionRequest.from_dict(build_request(connection, n, n)) for n in POOL_SIZES
            }
        for size in POOL_SIZES:
            fresh, cold, warm = [], [], []
            for _ in range(args.runs):  # interleaved, so machine noise hits all alike
                fresh.append(timed(store, requests[size], fresh_process=True))
                cold.append(timed(store, requests[size], cold=True))
                warm.append(timed(store, requests[size]))
            for state, values in (("warm", warm), ("cold", cold), ("fresh_process", fresh)):
                figures[f"p50_ms_{size}_{state}"] = statistics.median(values)
                figures[f"p95_ms_{size}_{state}"] = p95(values)
            print(f"pool {size:>3}: p50 / p95 ms — warm {figures[f'p50_ms_{size}_warm']:.1f}"
                  f" / {figures[f'p95_ms_{size}_warm']:.1f} · cold"
                  f" {figures[f'p50_ms_{size}_cold']:.1f} / {figures[f'p95_ms_{size}_cold']:.1f}"
                  f" · fresh process {figures[f'p50_ms_{size}_fresh_process']:.1f} /"
                  f" {figures[f'p95_ms_{size}_fresh_process']:.1f}", flush=True)
        holds = list(LOCK_HOLDS_MS)
        figures["lock_hold_ms_p50"] = statistics.median(holds)
        figures["lock_hold_ms_p99"] = percentile(holds, 0.99)
        figures["lock_hold_ms_max"] = max(holds)
        print(f"write lock held per decision ({len(holds)} decisions): p50"
              f" {figures['lock_hold_ms_p50']:.1f} ms, p99 {figures['lock_hold_ms_p99']:.1f} ms,"
              f" max {figures['lock_hold_ms_max']:.1f} ms", flush=True)

    # 1k against 100k prior decisions, side by side: two stores, calls interleaved.
    with tempfile.TemporaryDirectory() as tmp, ContextStore.open(
        Path(tmp) / "small.db", recon=str(recon_path)
    ) as small_store, ContextStore.open(
        Path(tmp) / "large.db", recon=str(recon_path)
    ) as large_store:
        counts = {}
        for store, prior in ((small_store, PRIOR_SMALL), (large_store, args.prior_large)):
            template = store.construct(requests[16]).decision_id
            add_prior_decisions(store, template, prior - 1)
            store.construct(requests[256])  # warm the token cache
            with store.engine.connect() as connection:
                counts[prior] = connection.execute(text("SELECT COUNT(*) FROM decision")).scalar()
        small, large = [], []
        for _ in range(args.runs):
            small.append(timed(small_store, requests[256]))
            large.append(timed(large_store, requests[256]))
        figures["p50_ms_256_warm_prior_1k"] = statistics.median(small)
        figures["p50_ms_256_warm_prior_100k"] = statistics.median(large)
        figures["prior_decisions_large"] = counts[args.prior_large]
        figures["ratio_100k_to_1k"] = statistics.median(large) / statistics.median(small)
        print(f"256 warm, {counts[PRIOR_SMALL]} decisions in the store: p50"
              f" {statistics.median(small):.1f} ms; {counts[args.prior_large]} decisions:"
              f" p50 {statistics.median(large):.1f} ms", flush=True)

    print(" ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                   for k, v in figures.items()))


# --against ---------------------------------------------------------------------------

DEFAULT_ROUNDS = 2
THIS_CHECKOUT = Path(__file__).resolve().parent.parent
THIS_SIDE = "this"
# the figures whose ratios the last line carries
SUMMARY_RATIOS = ("p50_ms_", "lock_hold_ms_p99")


def last_line_figures(output: str) -> dict[str, float]:
    """The key=value pairs of a bench's last line."""
    pairs = (pair.split("=", 1) for pair in output.strip().splitlines()[-1].split())
    return {key: float(value) for key, value in pairs}


def run_side(checkout: Path, cache: Path, args) -> dict[str, float]:
    """One run of ``checkout``'s bench in a fresh process, its own code first on the path."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    command = [sys.executable, str(checkout / "bench" / "construct.py"), "--cache", str(cache),
               "--runs", str(args.runs), "--prior-large", str(args.prior_large)]
    finished = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if finished.returncode != 0:
        sys.exit(f"{checkout}: bench failed ({finished.returncode})\n{finished.stderr}")
    return last_line_figures(finished.stdout)


def revision_cache(cache: Path, commit: str) -> Path:
    """A cache of the revision's own: the sdist linked in, its recon index apart."""
    ensure_sdist(cache)
    own = cache / "against" / commit
    own.mkdir(parents=True, exist_ok=True)
    link = own / SDIST_DIR
    if not link.exists():
        link.symlink_to(cache / SDIST_DIR, target_is_directory=True)
    return own


def git(*arguments: str) -> str:
    return subprocess.run(["git", "-C", str(THIS_CHECKOUT), *arguments], capture_output=True,
                          text=True, check=True).stdout.strip()


def compare(args) -> None:
    commits = {rev: git("rev-parse", "--verify", f"{rev}^{{commit}}") for rev in args.against}
    with tempfile.TemporaryDirectory() as tmp:
        checkouts = {}
        try:
            for rev, commit in commits.items():
                checkout = Path(tmp) / commit[:12]
                git("worktree", "add", "--detach", str(checkout), commit)
                checkouts[rev] = checkout
            sides = {rev: (checkouts[rev], revision_cache(args.cache, commit))
                     for rev, commit in commits.items()}
            sides[THIS_SIDE] = (THIS_CHECKOUT, args.cache)
            figures: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
            for round_no in range(1, args.rounds + 1):
                for side, (checkout, cache) in sides.items():  # alternately, REV first
                    print(f"round {round_no}: {side}", flush=True)
                    figures[side].append(run_side(checkout, cache, args))
        finally:
            for checkout in checkouts.values():
                git("worktree", "remove", "--force", str(checkout))
    print_comparison(figures, args.against)


def print_comparison(figures: dict[str, list[dict[str, float]]], revisions: list[str]) -> None:
    """Each figure: every round's value and the median, per side; this side's median over
    each revision's. The last line: this side's medians and the ratios of the p50s and of
    the lock hold."""
    keys = [key for key in figures[THIS_SIDE][0] if key != "prior_decisions_large"]
    medians = {side: {key: statistics.median(run[key] for run in runs if key in run)
                      for key in keys if any(key in run for run in runs)}
               for side, runs in figures.items()}
    ratios = [f"{THIS_SIDE}/{rev}" for rev in revisions]
    print(" | ".join(["figure", *revisions, THIS_SIDE, *ratios]))
    summary = {}
    for key in keys:
        cells = [key]
        for side in [*revisions, THIS_SIDE]:
            values = [f"{run[key]:.1f}" for run in figures[side] if key in run]
            cells.append(f"{' · '.join(values)} → {medians[side][key]:.1f}" if values else "n/a")
        summary[key] = medians[THIS_SIDE][key]
        for rev in revisions:
            ratio = medians[THIS_SIDE][key] / medians[rev][key] if medians[rev].get(key) else None
            cells.append("n/a" if ratio is None else f"{ratio:.2f}")
            if ratio is not None and key.startswith(SUMMARY_RATIOS):
                summary[f"{key}_vs_{rev}"] = ratio
        print(" | ".join(cells))
    print(" ".join(f"{key}={value:.2f}" for key, value in summary.items()))


if __name__ == "__main__":
    main()
