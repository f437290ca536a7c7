"""An agent loop's step, timed on the development runs (issue 22, item 7).

    python bench/loop_step.py [--runs PATH] [--limit N] [--stores N]

For the first N runs of the runs file (``bench/replay.py`` writes it: instance id,
trajectory, base commit, repo_git), a scratch checkout of the base commit is made and
every decision of the run is built the way a live harness would at that step:
``construct_step`` over the steps so far and the tree (the adapter, the window's rules,
the file views read from the tree, one write transaction). Timed per decision, warm (the
first decision of each run, which opens the run, is left out):

- ``step_ms_p50`` / ``_p90``: one decision, end to end;
- ``new_store_ms_p50``: ``ContextStore.open`` of a new SQLite file (``--stores`` times);
- ``late_step_ms_p50`` / ``_p90``: the decisions past step ``LATE_STEP_FROM`` of the
  ``--longest`` N longest runs of the file (0: none), where a window has the most to
  rebuild (mini-swe-agent stops at 250 steps).

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
DEFAULT_LONGEST = 2
FIRST_TIMED_STEP = 2  # the first decision of a run opens it: not a warm step
LATE_STEP_FROM = 100  # the development runs' four longest run past it (111-132 steps)
MS_PER_S = 1000


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=DEFAULT_RUNS)
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT)
    parser.add_argument("--stores", type=int, default=DEFAULT_STORES)
    parser.add_argument("--longest", type=int, default=DEFAULT_LONGEST)
    args = parser.parse_args(argv)
    if min(args.limit, args.stores, args.longest) < 0:
        parser.error("--limit, --stores and --longest: expected counts (0 or more)")
    if not args.runs.is_file():
        print(f"{args.runs}: no runs file; `python bench/replay.py MIRROR_DIR` writes it",
              file=sys.stderr)
        return 2
    every = [json.loads(line) for line in args.runs.read_text(encoding="utf-8").splitlines()
             if line.strip()]
    specs = every[: args.limit]
    lengths = [len(read_trajectory(spec["trajectory"]).steps) for spec in every] \
        if args.longest else []
    longest = [every[at] for at in sorted(range(len(lengths)),
                                          key=lambda at: -lengths[at])[: args.longest]]
    steps_ms: list[float] = []
    late_ms: list[float] = []
    with tempfile.TemporaryDirectory() as scratch:
        opens = []
        for n in range(args.stores):
            started = time.perf_counter()
            ContextStore.open(Path(scratch) / f"new-{n}.db").close()
            opens.append((time.perf_counter() - started) * MS_PER_S)
        with ContextStore.open(Path(scratch) / "loop.db") as store:
            passes = [*((spec, FIRST_TIMED_STEP, steps_ms) for spec in specs),
                      *((spec, LATE_STEP_FROM + 1, late_ms) for spec in longest)]
            for run_no, (spec, timed_from, timed) in enumerate(passes):
                run = read_trajectory(spec["trajectory"])
                prefix = [dict(run.messages[0]), dict(run.messages[1])]
                steps = [loop_step(step) for step in run.steps]
                with ScratchTree.create(spec["repo_git"], spec["base_commit"], parent=scratch,
                                        workdir=run.workdir) as tree:
                    for k in range(1, len(steps) + 1):
                        started = time.perf_counter()
                        construct_step(store, run_id=f"bench-{run_no}",
                                       instance_id=spec["instance_id"], task=run.task,
                                       steps=steps[: k - 1], tree=tree.path, prefix=prefix,
                                       seq=k, workdir=run.workdir)
                        if k >= timed_from:
                            timed.append((time.perf_counter() - started) * MS_PER_S)
                print(f"{spec['instance_id']}: {len(steps)} steps", flush=True)
    figures = {
        "runs": len(specs), "decisions": len(steps_ms),
        "step_ms_p50": round(statistics.median(steps_ms), 1),
        "step_ms_p90": round(_percentile(steps_ms, 0.9), 1),
        "new_store_ms_p50": round(statistics.median(opens), 1),
    }
    if late_ms:
        figures |= {"late_decisions": len(late_ms),
                    "late_step_ms_p50": round(statistics.median(late_ms), 1),
                    "late_step_ms_p90": round(_percentile(late_ms, 0.9), 1)}
    print(" ".join(f"{key}={value}" for key, value in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
