"""The replay's speed on the development runs (../shared/devset/trajectories/).

    python bench/replay.py MIRROR_DIR [--limit N] [--workers N] [--db PATH] [--runs PATH]

MIRROR_DIR holds each repository's bare git directory as ``OWNER+NAME/repo`` (or
``OWNER+NAME``), e.g. ``/work/.mirror/sympy+sympy/repo``. The script writes the runs file
with ``repo_git`` added to each line (``--runs``, default
~/.cache/ctxdb/devset/replay-runs.jsonl), replays the first N runs (``--limit``, default
6; the file is sorted by instance id) into a fresh store, and reads back from
``replay_run`` how long each part took:

- ``replay_decisions_per_s``: decisions over the seconds spent on everything but
  re-running commands (reading the run, building and recording the loop windows and the
  ablation arms, counting the arms, measuring anchors, writing): the replay itself;
- ``rerun_s_per_run_p50`` / ``_max``: re-running a run's commands in the sandbox.

With one worker (the default) the figures are not shared with another replay process.
The LAST line is the figures as key=value pairs. With ``--all`` it replays every run
and also prints the replay report (the figures of docs/replay.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import sqlalchemy as sa

from ctxdb.agent.replay import load_run_specs, run_replay
from ctxdb.agent.report import replay_screen
from ctxdb.db import resolve_url

REPO_ROOT = Path(__file__).resolve().parent.parent
TRAJECTORIES = REPO_ROOT.parent / "shared" / "devset" / "trajectories"
DEFAULT_RUNS = Path.home() / ".cache" / "ctxdb" / "devset" / "replay-runs.jsonl"
DEFAULT_LIMIT = 6


def git_dir_of(mirrors: Path, repo: str) -> Path:
    base = mirrors / repo.replace("/", "+")
    return base / "repo" if (base / "repo").is_dir() else base


def write_runs_file(mirrors: Path, target: Path) -> Path:
    """The development runs with ``repo_git`` (and absolute trajectory paths)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for line in (TRAJECTORIES / "instances.jsonl").read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        lines.append(json.dumps({
            "instance_id": row["instance_id"], "repo": row["repo"],
            "base_commit": row["base_commit"], "resolved": row["resolved"],
            "trajectory": str(TRAJECTORIES / row["trajectory"]),
            "repo_git": str(git_dir_of(mirrors, row["repo"]))}))
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mirrors", type=Path)
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT)
    parser.add_argument("--all", action="store_true", help="every run, and the report")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--db", default=None, help="the store (default: a fresh file)")
    parser.add_argument("--runs", type=Path, default=DEFAULT_RUNS)
    args = parser.parse_args()
    specs, errors = load_run_specs(write_runs_file(args.mirrors, args.runs))
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 2
    if not args.all:
        specs = specs[: args.limit]
    db = args.db or str(args.runs.parent / f"replay-{'all' if args.all else args.limit}.db")
    if args.db is None:
        for suffix in ("", "-wal", "-shm"):
            Path(db + suffix).unlink(missing_ok=True)
    started = time.perf_counter()
    summary = run_replay(db, specs, workers=args.workers)
    wall = time.perf_counter() - started
    for failed in summary.failed:
        print(f"failed: {failed.error}", file=sys.stderr)
    engine = sa.create_engine(resolve_url(db))
    with engine.connect() as connection:
        rows = connection.execute(sa.text(
            "SELECT decisions, rerun_seconds, replay_seconds FROM replay_run")).all()
        if args.all:
            print(replay_screen(connection))
    engine.dispose()
    decisions = sum(r.decisions for r in rows)
    replay_seconds = sum(r.replay_seconds for r in rows)
    reruns = sorted(r.rerun_seconds for r in rows)
    print(f"runs={len(rows)} failed={len(summary.failed)} decisions={decisions} "
          f"workers={args.workers} wall_s={wall:.1f} "
          f"replay_decisions_per_s={decisions / replay_seconds:.2f} "
          f"replay_ms_per_decision={1000 * replay_seconds / decisions:.0f} "
          f"rerun_s_per_run_p50={statistics.median(reruns):.2f} "
          f"rerun_s_per_run_max={reruns[-1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
