"""Warm construct latency of this checkout and other revisions, decision by decision in
lockstep: bench/construct.py's edit decisions over the Django recon.

    python bench/construct_lockstep.py --against REV [--against REV2] [--rounds N]

One process per side (REV's code from a git worktree of it, its recon index apart, as
``bench/construct.py --against`` keeps it), each with its own store, every pool warmed
first; then each round asks every side for one warm decision per pool size, in turn, so
no two sides ever decide at once and each side's decisions sit between the others'.
A machine whose speed drifts over seconds (a shared host) moves every side alike, where
``--against``'s runs, a minute apart, each get their own phase of it. Prints the p50 per
side and the median of the per-round ratios against the first revision named. The LAST
line is the figures as key=value pairs.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
DEFAULT_ROUNDS = 150
WARMUP_DECISIONS = 3
READY = "ready"
# the recon index's file in a cache, where a revision's bench without django_recon keeps it
RECON_FILE = "django-5.0.6-recon.db"


def worker(cache: Path) -> None:
    """One side, run in its checkout: a store over its recon index, deciding when told a
    pool size on stdin and answering with the decision's wall time in ms. Its own bench
    and code only (an older bench or ctxdb lacks what this checkout's names)."""
    sys.path[0] = str(Path.cwd() / "bench")
    import construct as side_bench

    from ctxdb import ContextStore
    from ctxdb.request import DecisionRequest

    recon_path = (side_bench.django_recon(cache)[0] if hasattr(side_bench, "django_recon")
                  else cache / RECON_FILE)
    with tempfile.TemporaryDirectory() as tmp, ContextStore.open(
        Path(tmp) / "bench.db", recon=str(recon_path)
    ) as store:
        with store.engine.connect() as connection:
            requests = {n: DecisionRequest.from_dict(side_bench.build_request(connection, n, n))
                        for n in side_bench.POOL_SIZES}
        for request in requests.values():
            for _ in range(WARMUP_DECISIONS):
                store.construct(dataclasses.replace(request))
        print(READY, flush=True)
        for line in sys.stdin:
            request = dataclasses.replace(requests[int(line)])  # a new object, as a harness's
            start = time.perf_counter()
            store.construct(request)
            print(f"{(time.perf_counter() - start) * 1000:.4f}", flush=True)


def start_side(checkout: Path, cache: Path) -> subprocess.Popen[str]:
    """This script as a worker in ``checkout``, its code first on the path."""
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--worker", str(cache)],
        cwd=checkout, env=dict(os.environ, PYTHONPATH=str(checkout)),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    if process.stdout.readline().strip() != READY:
        sys.exit(f"{checkout}: the worker did not start")
    return process


def decide(process: subprocess.Popen[str], size: int) -> float:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(f"{size}\n")
    process.stdin.flush()
    return float(process.stdout.readline())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--against", action="append", metavar="REV", default=[])
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker)
        return
    if not args.against:
        parser.error("name at least one --against REV")
    compare(args)


def compare(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(BENCH))
    from construct import POOL_SIZES, THIS_CHECKOUT, THIS_SIDE, git, revision_cache
    from recon_index import DEFAULT_CACHE

    cache = args.cache or DEFAULT_CACHE
    commits = {rev: git("rev-parse", "--verify", f"{rev}^{{commit}}") for rev in args.against}
    times: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        checkouts: dict[str, Path] = {}
        processes: dict[str, subprocess.Popen[str]] = {}
        try:
            for rev, commit in commits.items():
                checkout = Path(tmp) / commit[:12]
                git("worktree", "add", "--detach", str(checkout), commit)
                checkouts[rev] = checkout
                processes[rev] = start_side(checkout, revision_cache(cache, commit))
            processes[THIS_SIDE] = start_side(THIS_CHECKOUT, cache)
            sides = list(processes)
            times = {(side, size): [] for side in sides for size in POOL_SIZES}
            for round_no in range(args.rounds):
                order = sides if round_no % 2 == 0 else sides[::-1]  # neither always first
                for size in POOL_SIZES:
                    for side in order:
                        times[(side, size)].append(decide(processes[side], size))
        finally:
            for process in processes.values():
                if process.stdin is not None:
                    process.stdin.close()
                process.wait()
            for checkout in checkouts.values():
                git("worktree", "remove", "--force", str(checkout))
    base = args.against[0]
    figures = {}
    for size in POOL_SIZES:
        for side in sides:
            figures[f"p50_ms_{size}_warm_{side}"] = statistics.median(times[(side, size)])
            if side != base:
                figures[f"ratio_{size}_warm_{side}_vs_{base}"] = statistics.median(
                    mine / theirs for mine, theirs in zip(times[(side, size)],
                                                          times[(base, size)], strict=True))
        p50s = " · ".join(f"{side} {figures[f'p50_ms_{size}_warm_{side}']:.2f}" for side in sides)
        print(f"pool {size:>3} warm, p50 ms: {p50s}"
              + " | per-round ratio, median: "
              + " · ".join(f"{side}/{base} {figures[f'ratio_{size}_warm_{side}_vs_{base}']:.3f}"
                           for side in sides if side != base), flush=True)
    print(" ".join(f"{key}={value:.3f}" for key, value in figures.items()))


if __name__ == "__main__":
    main()
