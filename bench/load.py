"""Concurrent writers on one store: N processes × M decisions each (issue 14).

    python bench/load.py [--url URL | --postgres] [--writers 8] [--decisions 1000]
                         [--heavy-decisions N] [--pools ordinary,heavy]

Each writer process opens the store, makes one decision unmeasured (its start: the
tokenizer's load, the corpus's first counts), then its decisions back to back, all
writers starting together: *ordinary* decisions are the shop-cart edit of the tests (inline
content, no recon); *heavy* ones add 240 items of 8 KB each, drawn from a corpus of 480
texts (a harness sends the same files decision after decision). The store is SQLite in
WAL mode in a temporary directory by default, a URL given, or (``--postgres``) a
throwaway PostgreSQL cluster started as the tests start theirs (tests/pgcluster.py).

Figures per pool: decisions written / attempted, errors surfaced to the caller by
class, decisions a writer saw committed that the store does not hold (lost), latency
p50/p95/p99/max of ``construct``, and the write lock's hold per decision (the store's
``lock_holds``: BEGIN IMMEDIATE to COMMIT on SQLite, the write transaction on
PostgreSQL) p50/p99/max, plus the retries the store made. The LAST line is the figures
as key=value pairs.
"""

from __future__ import annotations

import argparse
import copy
import logging
import multiprocessing
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "tests"))  # the shared request and the PG cluster

HEAVY_EXTRA_ITEMS = 240
HEAVY_ITEM_BYTES = 8 * 1024  # the pool's content cap (spec CONTENT_MAX_BYTES): kept whole
HEAVY_CORPUS = 2 * HEAVY_EXTRA_ITEMS
POOLS = ("ordinary", "heavy")
SEED = 14  # issue 14
WORDS = ("self", "return", "value", "items", "total", "cart", "price", "tax", "discount",
         "order", "line", "record", "query", "filter", "result", "index", "name", "data")


def heavy_text(number: int) -> str:
    """Code-like text of HEAVY_ITEM_BYTES: ordinary words and lines, distinct per number."""
    rng = random.Random(number)
    lines, size = [f"# module part {number}"], 0
    while size < HEAVY_ITEM_BYTES - 80:
        line = f"    {rng.choice(WORDS)}_{rng.randrange(999)} = " + " + ".join(
            rng.choice(WORDS) for _ in range(rng.randrange(2, 8)))
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)[:HEAVY_ITEM_BYTES]


def request_for(pool: str, writer: int, seq: int, corpus: list[str]) -> dict:
    from requests_data import edit_request

    request = edit_request(run_id=f"load-{pool}-w{writer}", instance_id=f"w{writer}", seq=seq)
    if pool == "heavy":
        rng = random.Random(writer * 1_000_003 + seq)
        request["evidence"] = copy.deepcopy(request["evidence"]) + [
            {"source": "04", "kind": "retrieved_hit", "entity": f"shop/part_{n}.py",
             "content": corpus[n], "provenance": f"04: bm25 rank {rank + 10}"}
            for rank, n in enumerate(rng.sample(range(len(corpus)), HEAVY_EXTRA_ITEMS))
        ]
    return request


def writer_process(url: str, pool: str, writer: int, decisions: int, start, results) -> None:
    from ctxdb import ContextStore

    logging.getLogger("ctxdb").setLevel(logging.ERROR)  # the no-ranker notice, once per run
    corpus = [heavy_text(n) for n in range(HEAVY_CORPUS)] if pool == "heavy" else []
    requests = [request_for(pool, writer, seq, corpus) for seq in range(1, decisions + 1)]
    latencies, holds, errors, committed = [], [], Counter(), []
    with ContextStore.open(url) as store:
        # one decision first, not measured: the process's start (tokenizer load, the
        # corpus's first counts) is not contention
        store.construct(request_for(pool, writer, 1, corpus)
                        | {"run_id": f"warmup-{pool}-w{writer}"})
        start.wait()
        for request in requests:
            began = time.perf_counter()
            try:
                context = store.construct(request)
            except Exception as exc:  # what the caller would see, counted by class
                errors[type(exc).__name__] += 1
                continue
            latencies.append((time.perf_counter() - began) * 1000)
            holds.append(store.lock_holds[-1] * 1000)
            committed.append(context.decision_id)
        retries = store.write_retries
    results.put((latencies, holds, dict(errors), committed, retries))


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def run_pool(url: str, pool: str, writers: int, decisions: int) -> dict:
    from sqlalchemy import text

    from ctxdb import ContextStore

    ContextStore.open(url).close()  # created (or upgraded) once, before the writers
    context = multiprocessing.get_context("spawn")
    # all writers and this process: the clock starts once every writer is ready
    start, results = context.Barrier(writers + 1), context.Queue()
    processes = [context.Process(target=writer_process,
                                 args=(url, pool, n, decisions, start, results))
                 for n in range(writers)]
    for process in processes:
        process.start()
    start.wait()
    began = time.perf_counter()
    outcomes = [results.get() for _ in processes]
    wall = time.perf_counter() - began
    for process in processes:
        process.join()
    latencies = [v for o in outcomes for v in o[0]]
    holds = [v for o in outcomes for v in o[1]]
    errors = Counter()
    for outcome in outcomes:
        errors.update(outcome[2])
    committed = [d for o in outcomes for d in o[3]]
    with ContextStore.open(url) as store, store.engine.connect() as connection:
        present = set(connection.execute(
            text("SELECT decision_id FROM decision WHERE run_id LIKE :runs"),
            {"runs": f"load-{pool}-w%"}).scalars())
    figures = {
        f"{pool}_attempted": writers * decisions,
        f"{pool}_written": len(present),
        f"{pool}_lost": len(set(committed) - present),
        f"{pool}_errors": sum(errors.values()),
        **{f"{pool}_errors_{name}": count for name, count in sorted(errors.items())},
        f"{pool}_retries": sum(o[4] for o in outcomes),
        f"{pool}_latency_ms_p50": percentile(latencies, 0.5),
        f"{pool}_latency_ms_p95": percentile(latencies, 0.95),
        f"{pool}_latency_ms_p99": percentile(latencies, 0.99),
        f"{pool}_latency_ms_max": max(latencies, default=float("nan")),
        f"{pool}_lock_hold_ms_p50": percentile(holds, 0.5),
        f"{pool}_lock_hold_ms_p99": percentile(holds, 0.99),
        f"{pool}_lock_hold_ms_max": max(holds, default=float("nan")),
        f"{pool}_decisions_per_s": len(committed) / wall,
    }
    print(f"{pool}: {figures[f'{pool}_written']}/{writers * decisions} written,"
          f" {figures[f'{pool}_errors']} errors {dict(errors)}, {figures[f'{pool}_lost']} lost,"
          f" {figures[f'{pool}_retries']} retries; latency ms p50/p95/p99/max"
          f" {figures[f'{pool}_latency_ms_p50']:.1f}/{figures[f'{pool}_latency_ms_p95']:.1f}/"
          f"{figures[f'{pool}_latency_ms_p99']:.1f}/{figures[f'{pool}_latency_ms_max']:.1f};"
          f" lock hold ms p50/p99/max {figures[f'{pool}_lock_hold_ms_p50']:.1f}/"
          f"{figures[f'{pool}_lock_hold_ms_p99']:.1f}/{figures[f'{pool}_lock_hold_ms_max']:.1f};"
          f" {figures[f'{pool}_decisions_per_s']:.1f} decisions/s", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target = parser.add_mutually_exclusive_group()
    target.add_argument("--url", help="the store (default: a new SQLite file)")
    target.add_argument("--postgres", action="store_true",
                        help="a throwaway PostgreSQL cluster (tests/pgcluster.py)")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--decisions", type=int, default=1000, help="per writer")
    parser.add_argument("--heavy-decisions", type=int,
                        help="per writer in the heavy pool (default: --decisions)")
    parser.add_argument("--pools", default=",".join(POOLS),
                        help=f"comma-separated, of {', '.join(POOLS)}")
    args = parser.parse_args()
    pools = [p for p in args.pools.split(",") if p]
    unknown = sorted(set(pools) - set(POOLS))
    if unknown:
        parser.error(f"--pools: unknown {unknown}; expected some of {', '.join(POOLS)}")

    cluster = None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            if args.postgres:
                from pgcluster import PostgresCluster

                cluster = PostgresCluster()
                cluster.start()
                url, backend = cluster.create_database("ctxdb_load"), "postgresql"
            else:
                url = args.url or str(Path(tmp) / "load.db")
                backend = "postgresql" if url.startswith("postgresql") else "sqlite"
            per_writer = {"ordinary": args.decisions,
                          "heavy": args.heavy_decisions or args.decisions}
            print(f"{backend}: {args.writers} writers × "
                  + ", ".join(f"{per_writer[p]} {p}" for p in pools) + " decisions", flush=True)
            figures = {"backend": backend, "writers": args.writers}
            for pool in pools:
                figures.update(run_pool(url, pool, args.writers, per_writer[pool]))
        finally:
            if cluster is not None:
                cluster.stop()
    print(" ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                   for k, v in figures.items()))


if __name__ == "__main__":
    main()
