"""An agent loop's step, timed on the development runs (issue 22, item 7).

    python bench/loop_step.py [--runs PATH] [--limit N] [--stores N]

For the first N runs of the runs file (``bench/replay.py`` writes it: instance id,
trajectory, base commit, repo_git), a scratch checkout of the base commit is made and
every decision of the run is built the way a live harness would at that step:
``construct_step`` over the steps so far and the tree (the adapter, the window's rules,
the file views read from the tree, one write transaction). Timed per decision, warm (the
first decision of each run, which opens the run, is left out):

- ``step_ms_p50`` / ``_p90``: one decision, end to end;
- ``new_store_ms_p50``: ``ContextStore.open`` of a new SQLite file (``--stores`` times).

The tree stays at the base commit (the replay re-runs commands; this times the step,
not the shell). No recon index is read or built: a loop window reads files, not symbols.
The LAST line is the figures as key=value pairs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ctxdb import ContextStore
from ctxdb.agent.adapter import construct_step
from ctxdb.agent.loop import loop_step
from ctxdb.agent.trajectory import read_trajectory
from ctxdb.agent.worktree import ScratchTree

DEFAULT_RUNS = Path.home() / ".cache" / "ctxdb" / "devset" / "replay-runs.jsonl"
DEFAULT_LIMIT = 6
DEFAULT_STORES = 20
MS_PER_S = 1000


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=DEFAULT_RUNS)
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT)
    parser.add_argument("--stores", type=int, default=DEFAULT_STORES)
    args = parser.parse_args(argv)
    if not args.runs.is_file():
        print(f"{args.runs}: no runs file; `python bench/replay.py MIRROR_DIR` writes it",
              file=sys.stderr)
        return 2
    specs = [json.loads(line) for line in args.runs.read_text(encoding="utf-8").splitlines()
             if line.strip()][: args.limit]
    steps_ms: list[float] = []
    with tempfile.TemporaryDirectory() as scratch:
        opens = []
        for n in range(args.stores):
            started = time.perf_counter()
            ContextStore.open(Path(scratch) / f"new-{n}.db").close()
            opens.append((time.perf_counter() - started) * MS_PER_S)
        with ContextStore.open(Path(scratch) / "loop.db") as store:
            for spec in specs:
                run = read_trajectory(spec["trajectory"])
                prefix = [dict(run.messages[0]), dict(run.messages[1])]
                steps = [loop_step(step) for step in run.steps]
                with ScratchTree.create(spec["repo_git"], spec["base_commit"], parent=scratch,
                                        workdir=run.workdir) as tree:
                    for k in range(1, len(steps) + 1):
                        started = time.perf_counter()
                        construct_step(store, run_id="bench", instance_id=spec["instance_id"],
                                       task=run.task, steps=steps[: k - 1], tree=tree.path,
                                       prefix=prefix, seq=k, workdir=run.workdir)
                        if k > 1:
                            steps_ms.append((time.perf_counter() - started) * MS_PER_S)
                print(f"{spec['instance_id']}: {len(steps)} steps", flush=True)
    figures = {
        "runs": len(specs), "decisions": len(steps_ms),
        "step_ms_p50": round(statistics.median(steps_ms), 1),
        "step_ms_p90": round(_percentile(steps_ms, 0.9), 1),
        "new_store_ms_p50": round(statistics.median(opens), 1),
    }
    print(" ".join(f"{key}={value}" for key, value in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
