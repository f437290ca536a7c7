"""The replay's speed on the development runs (../shared/devset/trajectories/).

    python bench/replay.py MIRROR_DIR [--limit N | --all] [--workers N] [--db PATH]
                           [--runs PATH] [--instances PATH]

MIRROR_DIR holds each repository's bare git directory as ``OWNER+NAME/repo`` (or
``OWNER+NAME``), e.g. ``/work/.mirror/sympy+sympy/repo``. The script reads the
development runs' list (``--instances``, default
../shared/devset/trajectories/instances.jsonl beside this repository; trajectory paths are
relative to it), writes it with ``repo_git`` added to each line (``--runs``, default
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

from ctxdb.ab.instances import InstanceError, listed_rows, mirror_git_dir
from ctxdb.agent.replay import load_run_specs, run_replay
from ctxdb.agent.report import replay_screen
from ctxdb.db import resolve_url

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_INSTANCES = REPO_ROOT.parent / "shared" / "devset" / "trajectories" / "instances.jsonl"
DEFAULT_RUNS = Path.home() / ".cache" / "ctxdb" / "devset" / "replay-runs.jsonl"
DEFAULT_LIMIT = 6
EXIT_BAD_INPUT = 2  # as the ctxdb command's
EXIT_NOTHING_REPLAYED = 1
INSTANCE_KEYS = ("instance_id", "repo", "base_commit", "resolved", "trajectory")


class BadInput(Exception):
    """A one-line error naming the option or file and what was expected."""


def write_runs_file(instances: Path, mirrors: Path, target: Path) -> Path:
    """The development runs with ``repo_git`` (and absolute trajectory paths)."""
    lines = []
    for row in listed_rows(instances, INSTANCE_KEYS, "the development runs' instances.jsonl "
                           "(../shared/devset/trajectories/ beside this repository)"):
        given = {key: row[key] for key in INSTANCE_KEYS}
        given["trajectory"] = str(instances.resolve().parent / given["trajectory"])
        given["repo_git"] = str(mirror_git_dir(mirrors, given["repo"]))
        lines.append(json.dumps(given))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mirrors", type=Path, metavar="MIRROR_DIR",
                        help="directory of the repositories' git dirs (OWNER+NAME/repo)")
    parser.add_argument("--limit", type=int, default=DEFAULT_LIMIT, metavar="N",
                        help=f"replay the first N runs (default: {DEFAULT_LIMIT})")
    parser.add_argument("--all", action="store_true", help="every run, and the report")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="worker processes (default: 1, figures not shared)")
    parser.add_argument("--db", default=None, metavar="PATH",
                        help="the store (default: a fresh file beside --runs)")
    parser.add_argument("--runs", type=Path, default=DEFAULT_RUNS, metavar="PATH",
                        help=f"the runs file written (default: {DEFAULT_RUNS})")
    parser.add_argument("--instances", type=Path, default=DEFAULT_INSTANCES, metavar="PATH",
                        help=f"the development runs' list (default: {DEFAULT_INSTANCES})")
    args = parser.parse_args()
    try:
        if args.limit < 1:
            raise BadInput(f"--limit {args.limit}: expected at least 1")
        if args.workers < 1:
            raise BadInput(f"--workers {args.workers}: expected at least 1")
        if not args.mirrors.is_dir():
            raise BadInput(f"MIRROR_DIR {args.mirrors}: expected a directory of the "
                           "repositories' git dirs (OWNER+NAME/repo)")
        runs = write_runs_file(args.instances, args.mirrors.resolve(), args.runs)
    except (BadInput, InstanceError) as exc:
        print(f"replay: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    specs, errors = load_run_specs(runs)
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return EXIT_BAD_INPUT
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
    counts = (f"runs={len(rows)} failed={len(summary.failed)} decisions={decisions} "
              f"workers={args.workers} wall_s={wall:.1f}")
    if not decisions:  # no rate to give: still a last line of figures
        print(counts)
        return EXIT_NOTHING_REPLAYED
    print(f"{counts} "
          f"replay_decisions_per_s={decisions / replay_seconds:.2f} "
          f"replay_ms_per_decision={1000 * replay_seconds / decisions:.0f} "
          f"rerun_s_per_run_p50={statistics.median(reruns):.2f} "
          f"rerun_s_per_run_max={reruns[-1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
