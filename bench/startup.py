"""Start-up costs of ctxdb, side by side for one or more source trees (issue 12).

    python bench/startup.py [--runs N] [--code DIR ...]

For each source tree (default: this checkout; pass an older worktree too to compare in
one run), in fresh subprocesses with PYTHONPATH=DIR, interleaved, N times each:

- import_ms:     `import ctxdb` itself (the interpreter's own start excluded);
- help_ms:       `python -m ctxdb.cli --help`, wall time of the whole process;
- open_ms:       ContextStore.open of a store already at head (modules loaded first);
- construct_ms:  the first construct in a fresh process, imports and all: open a
                 store already at head and construct the fixture's edit decision over
                 the fixture's recon index.

Prints medians per tree; the LAST line is the figures as key=value pairs (the first
tree's unprefixed, the others' prefixed by their directory's name).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
EDIT_REQUEST = REPO_ROOT / "fixtures" / "decisions" / "edit.json"
SHOPCART = REPO_ROOT / "fixtures" / "repos" / "shopcart"

IMPORT_PROBE = """
import time
start = time.perf_counter()
import ctxdb
print((time.perf_counter() - start) * 1000)
"""
OPEN_PROBE = """
import sys, time
from ctxdb.store import ContextStore
ContextStore.open(sys.argv[1]).close()  # the store exists at head; modules are loaded
start = time.perf_counter()
ContextStore.open(sys.argv[1]).close()
print((time.perf_counter() - start) * 1000)
"""
CONSTRUCT_PROBE = """
import json, sys, time
start = time.perf_counter()
from ctxdb import ContextStore
request = json.loads(open(sys.argv[3]).read())
with ContextStore.open(sys.argv[1], recon=sys.argv[2]) as store:
    store.construct(request)
print((time.perf_counter() - start) * 1000)
"""


def _python(code: Path, args: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(code))
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                          check=True, cwd=tempfile.gettempdir())


def measure_once(code: Path, work: Path) -> dict[str, float]:
    figures = {"import_ms": float(_python(code, ["-c", IMPORT_PROBE]).stdout.split()[-1])}
    start = time.perf_counter()
    _python(code, ["-m", "ctxdb.cli", "--help"])
    figures["help_ms"] = (time.perf_counter() - start) * 1000
    store = work / f"{code.name}-open.db"
    figures["open_ms"] = float(_python(code, ["-c", OPEN_PROBE, str(store)]).stdout.split()[-1])
    figures["construct_ms"] = float(_python(
        code, ["-c", CONSTRUCT_PROBE, str(store), str(work / f"{code.name}-recon.db"),
               str(EDIT_REQUEST)]).stdout.split()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--code", type=Path, action="append", default=None,
                        help="a source tree (a checkout or worktree); repeat to compare")
    args = parser.parse_args()
    trees = [p.resolve() for p in (args.code or [REPO_ROOT])]
    results: dict[Path, dict[str, list[float]]] = {t: {} for t in trees}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for tree in trees:  # each tree's recon index, written by its own code
            _python(tree, ["-m", "ctxdb.cli", "recon", "index", str(SHOPCART), "--recon",
                           str(work / f"{tree.name}-recon.db")])
        for _ in range(args.runs):
            for tree in trees:  # interleaved: the machine's noise hits every tree alike
                for key, value in measure_once(tree, work).items():
                    results[tree].setdefault(key, []).append(value)
    pairs = []
    for number, tree in enumerate(trees):
        medians = {key: statistics.median(values) for key, values in results[tree].items()}
        print(f"{tree}: " + json.dumps({k: round(v, 1) for k, v in medians.items()}))
        prefix = "" if number == 0 else f"{tree.name}_"
        pairs += [f"{prefix}{key}={value:.1f}" for key, value in medians.items()]
    print(f"runs={args.runs} " + " ".join(pairs))


if __name__ == "__main__":
    main()
