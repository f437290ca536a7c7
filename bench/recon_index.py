"""Benchmark the recon indexer on the Django 5.0.6 sdist.

    python bench/recon_index.py [--cache DIR] [--repeat N]

Downloads the sdist once with pip (cache: ~/.cache/ctxdb-bench), extracts it once, then
measures, REPEAT times each and interleaved:

- floor:      tree-sitter parse + one compiled query (queries/python.scm) over every
              file, one process, no database work;
- floor_pool: the same in a process pool of the indexer's size (what the hardware allows);
- cold:       index_repository into a fresh SQLite recon.db, in a subprocess (so the
              peak RSS is its own; pool workers are reported separately);
- nochange:   index_repository again with nothing changed (same subprocess).

Prints medians. The LAST line is the figures as key=value pairs. The figures move
with whatever else runs on the machine: compare cold_s with floor_s of the same run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
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


def floor_pool_seconds(paths: list[str], workers: int) -> float:
    ctx = multiprocessing.get_context("fork")
    started = time.perf_counter()
    with ctx.Pool(workers) as pool:
        for _ in pool.imap(_floor_one, paths, chunksize=16):
            pass
    return time.perf_counter() - started


# --- cold + no-change, in a child process -------------------------------------------------


def child(root: str, target: str) -> None:
    from ctxdb.recon import index_repository

    cold = index_repository(root, target)
    nochange = index_repository(root, target)
    print(json.dumps({
        "cold_s": cold.seconds,
        "nochange_s": nochange.seconds,
        "nochange_parsed": nochange.files_parsed,
        "files": cold.files_seen,
        "symbols": cold.symbols,
        "edges": cold.edges,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }))


def run_child(root: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="ctxdb-bench-") as tmp:
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(root), str(Path(tmp) / "recon.db")],
            check=True, capture_output=True, text=True,
        ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help=f"download/extract directory (default {DEFAULT_CACHE})")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measurement")
    parser.add_argument("--child", nargs=2, metavar=("ROOT", "DB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from ctxdb.recon.extract import count_lines
    from ctxdb.recon.indexer import _pool_size, walk_python_files

    root = ensure_sdist(args.cache)
    paths = [full for _, full in walk_python_files(root)]
    lines = sum(count_lines(Path(p).read_bytes().decode("utf-8", "replace")) for p in paths)
    workers = _pool_size()
    load = os.getloadavg()[0]
    print(f"{root}: {len(paths)} files, {lines} lines; {workers} CPUs; load average {load:.2f}")
    if load > 0.5:
        print("note: other processes are using the CPUs; the figures will be pessimistic")

    floors, pools, colds, nochanges, rss, worker_rss = [], [], [], [], [], []
    for i in range(args.repeat):
        floors.append(floor_seconds(paths))
        pools.append(floor_pool_seconds(paths, workers))
        result = run_child(root)
        assert result["nochange_parsed"] == 0, result
        colds.append(result["cold_s"])
        nochanges.append(result["nochange_s"])
        rss.append(result["rss_mb"])
        worker_rss.append(result["worker_rss_mb"])
        print(f"run {i + 1}: floor {floors[-1]:.2f}s  floor_pool {pools[-1]:.2f}s  "
              f"cold {colds[-1]:.2f}s  nochange {nochanges[-1]:.3f}s  rss {rss[-1]:.0f} MB "
              f"(workers {worker_rss[-1]:.0f} MB)  "
              f"{result['symbols']} symbols {result['edges']} edges", flush=True)

    cold = statistics.median(colds)
    floor = statistics.median(floors)
    figures = {
        "files": len(paths),
        "lines": lines,
        "cold_s": f"{cold:.2f}",
        "floor_s": f"{floor:.2f}",
        "floor_pool_s": f"{statistics.median(pools):.2f}",
        "ratio_to_floor": f"{cold / floor:.2f}",
        "nochange_s": f"{statistics.median(nochanges):.3f}",
        "files_per_s": f"{len(paths) / cold:.0f}",
        "lines_per_s": f"{lines / cold:.0f}",
        "rss_mb": f"{statistics.median(rss):.0f}",
        "worker_rss_mb": f"{statistics.median(worker_rss):.0f}",
        "workers": workers,
    }
    print(" ".join(f"{k}={v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
