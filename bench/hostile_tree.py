"""Probe the recon indexer with hostile trees (issue 14), at the default limits.

    python bench/hostile_tree.py [--big-mb 50] [--depth 100000]

Builds, in a temporary directory, one tree per case and indexes each cold in a
subprocess of its own (so peak RSS is that case's: the indexer process and, separately,
its pool workers):

- big:      one file of definitions of BIG_MB megabytes (``def f_i(): return i``),
            beside a small ordinary module;
- deep:     one file of calls nested DEPTH deep (``x = f(f(f(…)))``, 3 bytes a level);
- specials: a FIFO, a unix socket, a symlink loop, a directory link back up, links
            leaving the root and a dangling link, all named like Python files.

For each case: seconds, peak RSS in MB, and what `IndexStats.skipped` lists. The LAST
line is the figures as key=value pairs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

DEFAULT_BIG_MB = 50
DEFAULT_DEPTH = 100_000


def make_big(root: Path, megabytes: int) -> None:
    (root / "ordinary.py").write_text("def ordinary():\n    return 1\n")
    target = megabytes * 1_000_000
    with open(root / "generated.py", "w") as out:
        written = i = 0
        while written < target:
            chunk = "".join(f"def f_{j}():\n    return {j}\n\n\n" for j in range(i, i + 1000))
            out.write(chunk)
            written += len(chunk)
            i += 1000


def make_deep(root: Path, depth: int) -> None:
    (root / "ordinary.py").write_text("def ordinary():\n    return 1\n")
    (root / "nested.py").write_text("x = " + "f(" * depth + ")" * depth + "\n")


def make_specials(root: Path) -> None:
    (root / "ordinary.py").write_text("def ordinary():\n    return 1\n")
    os.mkfifo(root / "pipe.py")
    here = os.getcwd()
    os.chdir(root)  # a unix socket path is limited to ~108 bytes
    try:
        listener = socket.socket(socket.AF_UNIX)
        listener.bind("sock.py")
        listener.close()
    finally:
        os.chdir(here)
    (root / "loop_a.py").symlink_to("loop_b.py")
    (root / "loop_b.py").symlink_to("loop_a.py")
    (root / "up").symlink_to(".")
    outside = root.parent / f"{root.name}-outside"
    outside.mkdir()
    (outside / "elsewhere.py").write_text("def elsewhere():\n    pass\n")
    (root / "leaves.py").symlink_to(outside / "elsewhere.py")
    (root / "leaves_dir").symlink_to(outside)
    (root / "dangling.py").symlink_to("missing.py")


CASES = {"big": make_big, "deep": make_deep, "specials": make_specials}


def child(root: str, target: str) -> None:
    from ctxdb.recon import index_repository

    stats = index_repository(root, target, progress=False)
    print(json.dumps({
        "seconds": stats.seconds,
        "symbols": stats.symbols,
        "skipped": [list(entry) for entry in stats.skipped],
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "worker_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }))


def run_case(name: str, tmp: Path, big_mb: int, depth: int) -> dict:
    root = tmp / name
    root.mkdir()
    if name == "big":
        make_big(root, big_mb)
    elif name == "deep":
        make_deep(root, depth)
    else:
        make_specials(root)
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(root), str(tmp / f"{name}.db")],
        check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big-mb", type=int, default=DEFAULT_BIG_MB,
                        help=f"size of the file of definitions (default {DEFAULT_BIG_MB})")
    parser.add_argument("--depth", type=int, default=DEFAULT_DEPTH,
                        help=f"nesting of the deep file (default {DEFAULT_DEPTH})")
    parser.add_argument("--child", nargs=2, metavar=("ROOT", "DB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    figures: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="ctxdb-hostile-") as tmp:
        for name in CASES:
            result = run_case(name, Path(tmp), args.big_mb, args.depth)
            peak = max(result["rss_mb"], result["worker_rss_mb"])
            reasons = sorted({reason for _, reason in result["skipped"]})
            print(f"{name}: {result['seconds']:.2f}s, peak RSS {result['rss_mb']:.0f} MB "
                  f"(workers {result['worker_rss_mb']:.0f} MB), {result['symbols']} symbols, "
                  f"skipped {len(result['skipped'])}:")
            for path, reason in result["skipped"]:
                print(f"  {reason:<20} {path}")
            figures[f"{name}_s"] = f"{result['seconds']:.2f}"
            figures[f"{name}_peak_rss_mb"] = f"{peak:.0f}"
            figures[f"{name}_skipped"] = len(result["skipped"])
            figures[f"{name}_reasons"] = ",".join(reasons) or "-"
    figures["big_mb"] = args.big_mb
    figures["depth"] = args.depth
    print(" ".join(f"{k}={v}" for k, v in figures.items()))


if __name__ == "__main__":
    main()
