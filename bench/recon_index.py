"""Benchmark the recon indexer on the Django 5.0.6 sdist.

    python bench/recon_index.py [--cache DIR] [--repeat N]

Downloads the sdist once with pip (cache: ~/.cache/ctxdb-bench), extracts it once, then
measures, REPEAT times each and interleaved:

- floor:      tree-sitter parse + one compiled query (queries/python.scm) over every
              file, one process, no database work; measured in the child process (below)
              right before and right after its cold build;
- floor_pool: the same in a process pool of the indexer's size (what the hardware allows);
- cold:       index_repository into a fresh SQLite recon.db, in a subprocess (so the
              peak RSS is its own; pool workers are reported separately), over a copy
              of the tree made right before it (the steps below edit it);
- nochange:   index_repository again with nothing changed (same subprocess): the first
              run after the cold one (it hashes the files whose stat keys the cold run
              could not keep yet), then NOCHANGE_RUNS more, walking the tree, and as
              many telling it nothing changed (`changed=[]`, when the code has it);
- one-file:   for each of SAMPLE_FILES (files of different sizes, and the two the issue
              named), one comment line appended, then a run that walks the tree; again,
              then a run told the path (`changed=[path]`); and a definition appended
              (a new top-level name), then a walking run. Medians over the files.

Where Linux's inotify is there, a walking run of the child (one process, like a harness
re-indexing after every command) stats the files alone: its directories are watched
(ctxdb/recon/watch.py). --stat-walk runs the child without watches, as on a system or
file system without them: every directory is stat'ed too.

Prints medians. The LAST line is the figures as key=value pairs. The figures move
with whatever else runs on the machine: compare cold_s with floor_s of the same run,
and one sitting's figures with each other (run another checkout's code with
PYTHONPATH=that/checkout: the child process imports ctxdb from there, the floor's
parser and query too). The *_cpu_ms figures are the indexing process's CPU time (user +
system) for the same runs: they move less with the load than the elapsed times do, and
leave out waiting for the disk; cold_workers_cpu_ms is the cold run's parser pool's (its
worker processes'), cold_cpu_total_ms the two together.

The cold build against the floor, three ways. ratio_to_floor: the median cold time over
the median floor time (all floors). ratio_to_floor_paired: per repeat, the cold time
over the mean of the two floors around it (just before and just after it, same process),
then the median of those ratios — the host's speed moves by ~1.5x within minutes on a
shared machine, and a pair sees about the same host. cpu_ratio_to_floor: per repeat, the
build's CPU seconds (process and workers) over the mean of its two floors' CPU seconds,
the median of those: what the build costs in work, which the load moves much less than
time (but it says nothing of how well the build spreads over the cores). The parser and
query are dropped before each floor and before the cold build, so each compiles its own
once, as a fresh process does.
"""

from __future__ import annotations

import argparse
import inspect
import json
import multiprocessing
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REQUIREMENT = "Django==5.0.6"
SDIST_DIR = "Django-5.0.6"
DEFAULT_CACHE = Path.home() / ".cache" / "ctxdb-bench"
# The files a one-file change is measured on: the two the issue named, and the files at
# these quantiles of size (bytes) among the non-empty ones.
NAMED_FILES = ("django/utils/text.py", "django/db/models/query.py")
SIZE_QUANTILES = (0.1, 0.3, 0.5, 0.7, 0.9, 0.99)
NOCHANGE_RUNS = 9


def ensure_sdist(cache: Path) -> Path:
    root = cache / SDIST_DIR
    if (root / "PKG-INFO").exists():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    archives = sorted(cache.glob("Django-5.0.6.tar.gz"))
    if not archives:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             "--disable-pip-version-check", REQUIREMENT, "-d", str(cache)],
            check=True,
        )
        archives = sorted(cache.glob("Django-5.0.6.tar.gz"))
    with tarfile.open(archives[0]) as tar:
        tar.extractall(cache, filter="data")
    return root


# --- floor --------------------------------------------------------------------------------


def _floor_one(path: str) -> int:
    import tree_sitter

    from ctxdb.recon.extract import _parser, load_query

    with open(path, "rb") as fh:
        data = fh.read()
    tree = _parser().parse(data)
    captures = tree_sitter.QueryCursor(load_query("python")).captures(tree.root_node)
    return sum(len(nodes) for nodes in captures.values())


def floor_seconds(paths: list[str]) -> float:
    started = time.perf_counter()
    for path in paths:
        _floor_one(path)
    return time.perf_counter() - started


def _forget_parser() -> None:
    """Drop the process's parser and compiled query: the next use compiles them (~30 ms),
    as a fresh process's does."""
    from ctxdb.recon import extract

    extract._parser.cache_clear()
    extract.load_query.cache_clear()


def _floor_in_child(paths: list[str]) -> tuple[float, float]:
    """The floor's elapsed and CPU seconds, measured in this (the child) process."""
    _forget_parser()
    cpu_started = time.process_time()
    elapsed = floor_seconds(paths)
    cpu = time.process_time() - cpu_started
    _forget_parser()
    return elapsed, cpu


def floor_pool_seconds(paths: list[str], workers: int) -> float:
    ctx = multiprocessing.get_context("fork")
    started = time.perf_counter()
    with ctx.Pool(workers) as pool:
        for _ in pool.imap(_floor_one, paths, chunksize=16):
            pass
    return time.perf_counter() - started


# --- cold, no-change and one-file changes, in a child process -----------------------------


def sample_files(root: Path, paths: list[str]) -> list[str]:
    """SAMPLE_FILES: the named files and the files at SIZE_QUANTILES of size."""
    sized = sorted((os.path.getsize(p), os.path.relpath(p, root)) for p in paths
                   if os.path.getsize(p) > 0)
    picked = [rel for rel in NAMED_FILES if (root / rel).is_file()]
    for quantile in SIZE_QUANTILES:
        rel = sized[min(len(sized) - 1, int(quantile * len(sized)))][1]
        if rel not in picked:
            picked.append(rel)
    return picked


def _timed(run, cpu: list[float] | None = None) -> tuple[float, object]:
    """Elapsed seconds of `run()` and its result; its CPU seconds appended to `cpu`."""
    cpu_started = time.process_time()
    started = time.perf_counter()
    stats = run()
    elapsed = time.perf_counter() - started
    if cpu is not None:
        cpu.append(time.process_time() - cpu_started)
    return elapsed, stats


def child(original: str, tmp: str, samples: list[str], stat_walk: bool) -> None:
    """The floor over the `original` tree; then, over a copy of it made in `tmp` just
    before (its files as new as a checkout's), the cold build, the floor again, and the
    no-change and one-file runs."""
    from ctxdb.recon import index_repository
    from ctxdb.recon.indexer import walk_python_files

    if stat_walk:
        from ctxdb.recon import walk

        if hasattr(walk, "open_watch"):  # code with directory watches: none here
            walk.open_watch = lambda: None

    knows_changed = "changed" in inspect.signature(index_repository).parameters
    floor_paths = [full for _, full in walk_python_files(original)]
    floor_before = _floor_in_child(floor_paths)
    root = str(Path(tmp) / Path(original).name)
    target = str(Path(tmp) / "recon.db")
    shutil.copytree(original, root, symlinks=True)
    cold_cpu: list[float] = []
    cold = _timed(lambda: index_repository(root, target), cold_cpu)[1]
    # the pool's workers have exited (and been waited for) by now: their CPU time alone
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)
    floor_after = _floor_in_child(floor_paths)
    first_nochange, _ = _timed(lambda: index_repository(root, target))
    nochange, nochange_known, nochange_cpu, walk_cpu = [], [], [], []
    for _ in range(NOCHANGE_RUNS):
        nochange.append(_timed(lambda: index_repository(root, target), nochange_cpu)[0])
        if knows_changed:
            nochange_known.append(_timed(
                lambda: index_repository(root, target, changed=[]))[0])
    per_file = []
    for number, rel in enumerate(samples):
        path = Path(root) / rel
        with path.open("a") as fh:
            fh.write("# one more comment line\n")
        walked, stats = _timed(lambda: index_repository(root, target), walk_cpu)
        assert stats.files_parsed == 1, (rel, stats)
        known = None
        if knows_changed:
            with path.open("a") as fh:
                fh.write("# and another\n")
            known, stats = _timed(lambda rel=rel: index_repository(root, target, changed=[rel]))
            assert stats.files_parsed == 1, (rel, stats)
        with path.open("a") as fh:
            fh.write(f"\n\ndef ctxdb_bench_added_{number}():\n    return {number}\n")
        defined, stats = _timed(lambda: index_repository(root, target))
        assert stats.files_parsed == 1, (rel, stats)
        per_file.append({"path": rel, "bytes": path.stat().st_size, "walk_s": walked,
                         "walk_cpu_s": walk_cpu[-1],
                         "known_s": known, "def_s": defined,
                         "edges_resolved": getattr(stats, "edges_resolved", None)})
    print(json.dumps({
        "floor_before_s": floor_before[0],
        "floor_before_cpu_s": floor_before[1],
        "floor_after_s": floor_after[0],
        "floor_after_cpu_s": floor_after[1],
        "cold_s": cold.seconds,
        "cold_cpu_s": cold_cpu[0],
        "cold_workers_cpu_s": workers.ru_utime + workers.ru_stime,
        "first_nochange_s": first_nochange,
        "nochange_s": statistics.median(nochange),
        "nochange_known_s": statistics.median(nochange_known) if nochange_known else None,
        "nochange_cpu_s": statistics.median(nochange_cpu),
        "per_file": per_file,
        "files": cold.files_seen,
        "symbols": cold.symbols,
        "edges": cold.edges,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }))


def run_child(root: Path, samples: list[str], stat_walk: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="ctxdb-bench-") as tmp:
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(root), tmp,
             json.dumps(samples), *(["--stat-walk"] if stat_walk else [])],
            check=True, capture_output=True, text=True,
        ).stdout
    return json.loads(out.strip().splitlines()[-1])


def _median_ms(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    return f"{statistics.median(known) * 1000:.1f}" if known else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help=f"download/extract directory (default {DEFAULT_CACHE})")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement")
    parser.add_argument("--stat-walk", action="store_true",
                        help="no inotify watches in the child: walks stat every directory")
    parser.add_argument("--child", nargs=3, metavar=("ROOT", "TMP", "SAMPLES"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], json.loads(args.child[2]), args.stat_walk)
        return

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from ctxdb.recon.extract import count_lines
    from ctxdb.recon.indexer import walk_python_files
    from ctxdb.workers import usable_cpu_count

    root = ensure_sdist(args.cache)
    paths = [full for _, full in walk_python_files(root)]
    lines = sum(count_lines(Path(p).read_bytes().decode("utf-8", "replace")) for p in paths)
    workers = usable_cpu_count()
    load = os.getloadavg()[0]
    print(f"{root}: {len(paths)} files, {lines} lines; {workers} CPUs; load average {load:.2f}")
    if load > 0.5:
        print("note: other processes are using the CPUs; the figures will be pessimistic")

    samples = sample_files(root, paths)
    floors, pools, colds, nochanges, rss, worker_rss = [], [], [], [], [], []
    colds_cpu, colds_workers_cpu = [], []
    # per repeat: the cold build over the mean of the floors around it, in time and CPU
    paired_ratios, cpu_ratios, floors_cpu, colds_cpu_total = [], [], [], []
    first_nochanges, nochanges_known, nochanges_cpu, per_file = [], [], [], []
    for i in range(args.repeat):
        pools.append(floor_pool_seconds(paths, workers))
        result = run_child(root, samples, args.stat_walk)
        pair_floor = (result["floor_before_s"] + result["floor_after_s"]) / 2
        pair_floor_cpu = (result["floor_before_cpu_s"] + result["floor_after_cpu_s"]) / 2
        floors += [result["floor_before_s"], result["floor_after_s"]]
        floors_cpu += [result["floor_before_cpu_s"], result["floor_after_cpu_s"]]
        colds.append(result["cold_s"])
        colds_cpu.append(result["cold_cpu_s"])
        colds_workers_cpu.append(result["cold_workers_cpu_s"])
        colds_cpu_total.append(result["cold_cpu_s"] + result["cold_workers_cpu_s"])
        paired_ratios.append(result["cold_s"] / pair_floor)
        cpu_ratios.append(colds_cpu_total[-1] / pair_floor_cpu)
        first_nochanges.append(result["first_nochange_s"])
        nochanges.append(result["nochange_s"])
        nochanges_known.append(result["nochange_known_s"])
        nochanges_cpu.append(result["nochange_cpu_s"])
        per_file += result["per_file"]
        rss.append(result["rss_mb"])
        worker_rss.append(result["worker_rss_mb"])
        print(f"run {i + 1}: floor {result['floor_before_s']:.2f}s / "
              f"{result['floor_after_s']:.2f}s (CPU {result['floor_before_cpu_s']:.2f}s / "
              f"{result['floor_after_cpu_s']:.2f}s)  floor_pool {pools[-1]:.2f}s  "
              f"cold {colds[-1]:.2f}s (CPU {colds_cpu[-1]:.2f}s, "
              f"workers {colds_workers_cpu[-1]:.2f}s; ratio {paired_ratios[-1]:.2f}, "
              f"CPU ratio {cpu_ratios[-1]:.2f})  "
              f"nochange {nochanges[-1] * 1000:.1f} ms "
              f"(CPU {nochanges_cpu[-1] * 1000:.1f} ms) "
              f"(changed=[]: {_median_ms([nochanges_known[-1]])} ms; first "
              f"{first_nochanges[-1]:.3f}s)  rss {rss[-1]:.0f} MB "
              f"(workers {worker_rss[-1]:.0f} MB)  "
              f"{result['symbols']} symbols {result['edges']} edges", flush=True)
        for change in result["per_file"]:
            print(f"  {change['path']} ({change['bytes']} bytes): comment "
                  f"{change['walk_s'] * 1000:.1f} ms (CPU {change['walk_cpu_s'] * 1000:.1f} ms), "
                  f"told the path "
                  f"{_median_ms([change['known_s']])} ms; definition added "
                  f"{change['def_s'] * 1000:.1f} ms ({change['edges_resolved']} edges "
                  f"resolved)", flush=True)

    cold = statistics.median(colds)
    floor = statistics.median(floors)
    figures = {
        "files": len(paths),
        "lines": lines,
        "cold_s": f"{cold:.2f}",
        "floor_s": f"{floor:.2f}",
        "floor_pool_s": f"{statistics.median(pools):.2f}",
        "ratio_to_floor": f"{cold / floor:.2f}",
        "ratio_to_floor_paired": f"{statistics.median(paired_ratios):.2f}",
        "cpu_ratio_to_floor": f"{statistics.median(cpu_ratios):.2f}",
        "cold_cpu_ms": _median_ms(colds_cpu),
        "cold_workers_cpu_ms": _median_ms(colds_workers_cpu),
        "cold_cpu_total_ms": _median_ms(colds_cpu_total),
        "floor_cpu_ms": _median_ms(floors_cpu),
        "nochange_s": f"{statistics.median(nochanges):.3f}",
        "nochange_ms": _median_ms(nochanges),
        "nochange_known_ms": _median_ms(nochanges_known),
        "nochange_cpu_ms": _median_ms(nochanges_cpu),
        "first_nochange_s": f"{statistics.median(first_nochanges):.3f}",
        "onefile_ms": _median_ms([c["walk_s"] for c in per_file]),
        "onefile_known_ms": _median_ms([c["known_s"] for c in per_file]),
        "onefile_cpu_ms": _median_ms([c["walk_cpu_s"] for c in per_file]),
        "onefile_def_ms": _median_ms([c["def_s"] for c in per_file]),
        "onefile_files": len(samples),
        "files_per_s": f"{len(paths) / cold:.0f}",
        "lines_per_s": f"{lines / cold:.0f}",
        "rss_mb": f"{statistics.median(rss):.0f}",
        "worker_rss_mb": f"{statistics.median(worker_rss):.0f}",
        "workers": workers,
    }
    print(" ".join(f"{k}={v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
