"""Re-indexing on Django 5.0.6, this checkout's code against another's, in lockstep.

    python bench/recon_pair.py OTHER_CHECKOUT [--cache DIR] [--rounds N]

On a machine other processes load, two runs of bench/recon_index.py minutes apart see
different loads. Here two indexing processes, one importing ctxdb from this checkout and
one from OTHER_CHECKOUT (e.g. a `git worktree add --detach` of main), each on its own
copy of the sdist and its own recon.db, take turns: every measurement is made by both
back to back, the order alternating, ROUNDS times.

- nochange: a run with nothing changed, walking the tree;
- onefile:  one comment line appended to one of SAMPLE_FILES (recon_index.py's: the
            issue's two files and the files at 10–99% of size, in turn), then a run
            walking the tree.

Prints medians; the LAST line is the figures as key=value pairs: elapsed and CPU (user +
system of the indexing process) milliseconds for each code, and this code's over the
other's (the median of the per-round ratios).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_ROUNDS = 40


def serve(root: str, target: str) -> None:
    """The indexing process: one JSON line per command read from stdin."""
    from ctxdb.recon import index_repository

    index_repository(root, target)
    index_repository(root, target)  # the stat keys the cold run could not keep yet
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command, _, rel = line.strip().partition(" ")
        if command == "edit":
            with (Path(root) / rel).open("a") as fh:
                fh.write("# one more comment line\n")
        cpu_started = time.process_time()
        started = time.perf_counter()
        stats = index_repository(root, target)
        print(json.dumps({"s": time.perf_counter() - started,
                          "cpu_s": time.process_time() - cpu_started,
                          "parsed": stats.files_parsed}), flush=True)


class Indexer:
    """An indexing process on its own copy of the tree, importing ctxdb from `code`."""

    def __init__(self, code: Path, tree: Path, workdir: Path) -> None:
        copy = workdir / "tree"
        shutil.copytree(tree, copy, symlinks=True)
        env = dict(os.environ, PYTHONPATH=str(code))
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(copy), str(workdir / "recon.db")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self._reply()

    def _reply(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the indexing process ended (exit {self.process.wait()})")
        return json.loads(line)

    def ask(self, command: str) -> dict:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self._reply()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def _median_ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("other", nargs="?", type=Path, help="the checkout to compare with")
    parser.add_argument("--cache", type=Path, default=None,
                        help="download/extract directory (recon_index.py's default)")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                        help="measurements of each kind, by each code")
    parser.add_argument("--serve", nargs=2, metavar=("ROOT", "DB"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
        return
    if args.other is None:
        parser.error("the other checkout is required")

    this_code = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(this_code))
    sys.path.insert(0, str(this_code / "bench"))
    from recon_index import DEFAULT_CACHE, ensure_sdist, sample_files

    from ctxdb.recon.walk import walk_python_files

    root = ensure_sdist(args.cache or DEFAULT_CACHE)
    samples = sample_files(root, [full for _, full in walk_python_files(root)])
    print(f"{root}: this code {this_code}, the other {args.other.resolve()}; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    figures: dict[str, dict[str, list[float]]] = {
        kind: {"this": [], "other": [], "this_cpu": [], "other_cpu": [], "ratio": [],
               "ratio_cpu": []} for kind in ("nochange", "onefile")}
    with tempfile.TemporaryDirectory(prefix="ctxdb-pair-") as tmp:
        indexers = {}
        for name, code in (("this", this_code), ("other", args.other.resolve())):
            (Path(tmp) / name).mkdir()
            indexers[name] = Indexer(code, root, Path(tmp) / name)
        try:
            for number in range(args.rounds):
                order = ("this", "other") if number % 2 == 0 else ("other", "this")
                rel = samples[number % len(samples)]
                for kind, command in (("nochange", "nochange"), ("onefile", f"edit {rel}")):
                    replies = {name: indexers[name].ask(command) for name in order}
                    want = 1 if kind == "onefile" else 0
                    assert all(r["parsed"] == want for r in replies.values()), (kind, replies)
                    row = figures[kind]
                    for name, reply in replies.items():
                        row[name].append(reply["s"])
                        row[f"{name}_cpu"].append(reply["cpu_s"])
                    row["ratio"].append(replies["this"]["s"] / replies["other"]["s"])
                    row["ratio_cpu"].append(replies["this"]["cpu_s"]
                                            / replies["other"]["cpu_s"])
        finally:
            for indexer in indexers.values():
                indexer.close()
    out = {"rounds": args.rounds, "onefile_files": len(samples)}
    for kind, row in figures.items():
        print(f"{kind}: this {_median_ms(row['this'])} ms (CPU {_median_ms(row['this_cpu'])}), "
              f"the other {_median_ms(row['other'])} ms (CPU {_median_ms(row['other_cpu'])}); "
              f"ratio {statistics.median(row['ratio']):.2f} "
              f"(CPU {statistics.median(row['ratio_cpu']):.2f})")
        out |= {f"{kind}_ms": _median_ms(row["this"]),
                f"{kind}_other_ms": _median_ms(row["other"]),
                f"{kind}_cpu_ms": _median_ms(row["this_cpu"]),
                f"{kind}_other_cpu_ms": _median_ms(row["other_cpu"]),
                f"{kind}_ratio": f"{statistics.median(row['ratio']):.2f}",
                f"{kind}_cpu_ratio": f"{statistics.median(row['ratio_cpu']):.2f}"}
    out["load"] = f"{os.getloadavg()[0]:.2f}"
    print(" ".join(f"{k}={v}" for k, v in out.items()))


if __name__ == "__main__":
    main()
