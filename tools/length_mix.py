"""What a set of runs not replayed here would cost, from their lengths alone.

    python tools/length_mix.py MIRROR_DIR --db REPLAY_DB [--db REPLAY_DB ...]

The window saves more of ``current``'s cost the longer the run (``ctxdb report
replay_lengths``), so a set's cost share depends on how long its runs are. The same
harness's runs of the repositories whose snapshots are over the fetch's size limit
(django, matplotlib, scikit-learn) cannot be replayed here, but their lengths can be read
from the recorded runs (gruckion/mini-swe-agent in MIRROR_DIR, as ``tools/holdout_runs.py``
reads them). For each such run this takes the ``NEAREST_RUNS`` replayed runs (of the
given replay stores) nearest to it in decisions, and prints per repository the sum of
their mean ctx08 costs over the sum of their mean current costs: an estimate that holds
the runs' contents to be like the replayed ones, only their lengths told apart.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from holdout_runs import RESULTS_DIR, RESULTS_REPO, git, git_dir_of, repo_of  # noqa: E402

from ctxdb.ab.reports import CACHED_PRICE_RATIO  # noqa: E402

NEAREST_RUNS = 7  # replayed runs an unreplayed run's cost is read from
ESTIMATED_REPOSITORIES = ("django/django", "matplotlib/matplotlib",
                          "scikit-learn/scikit-learn")


def replayed_costs(url: str) -> list[tuple[int, float, float]]:
    """(decisions, current cost, ctx08 cost) of every run a replay store holds."""
    with create_engine(url).connect() as connection:
        rows = connection.execute(text(
            "SELECT instance_id, arm, COUNT(*),"
            " SUM(prompt_tokens - cached_tokens) + :ratio * SUM(cached_tokens)"
            " FROM replay_decision WHERE arm IN ('current', 'ctx08')"
            " GROUP BY instance_id, arm"), {"ratio": CACHED_PRICE_RATIO}).all()
    runs: dict[str, dict[str, tuple[int, float]]] = defaultdict(dict)
    for instance_id, arm, decisions, cost in rows:
        runs[instance_id][arm] = (decisions, float(cost))
    return [(arms["current"][0], arms["current"][1], arms["ctx08"][1])
            for arms in runs.values() if {"current", "ctx08"} <= arms.keys()]


def run_lengths(results: Path) -> dict[str, list[int]]:
    """Repository -> the decisions of each of its recorded runs (``ESTIMATED_REPOSITORIES``
    only), read from the results repository's git directory."""
    lengths: dict[str, list[int]] = defaultdict(list)
    for name in git(results, "ls-tree", "--name-only", f"HEAD:{RESULTS_DIR}/trajs").split():
        if "__" not in name or repo_of(name) not in ESTIMATED_REPOSITORIES:
            continue
        trajectory = f"HEAD:{RESULTS_DIR}/trajs/{name}/{name}.traj.json"
        messages = json.loads(git(results, "show", trajectory))["messages"]
        lengths[repo_of(name)].append(sum(m["role"] == "assistant" for m in messages))
    return lengths


def estimated_cost_share(decisions: list[int],
                         replayed: list[tuple[int, float, float]]) -> float:
    """ctx08's cost over current's for runs of these lengths: each run's costs are the
    means of the ``NEAREST_RUNS`` replayed runs nearest to it in decisions."""
    current = ctx08 = 0.0
    for length in decisions:
        nearest = sorted(replayed, key=lambda run: abs(run[0] - length))[:NEAREST_RUNS]
        current += statistics.fmean(run[1] for run in nearest)
        ctx08 += statistics.fmean(run[2] for run in nearest)
    return ctx08 / current


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mirrors", type=Path, help="where the fetched repositories are")
    parser.add_argument("--db", action="append", required=True,
                        help="a replay store's URL (give several to pool them)")
    args = parser.parse_args()
    results = git_dir_of(args.mirrors, RESULTS_REPO.replace("+", "/"))
    if results is None:
        parser.error(f"{args.mirrors}: no {RESULTS_REPO}/repo "
                     "(fetch github:gruckion/mini-swe-agent)")
    replayed = [run for url in args.db for run in replayed_costs(url)]
    if len(replayed) < NEAREST_RUNS:
        parser.error(f"--db: {len(replayed)} replayed runs, at least {NEAREST_RUNS} needed")
    for repo, decisions in sorted(run_lengths(results).items()):
        print(f"{repo}: {len(decisions)} runs, median {statistics.median(decisions):g} "
              f"decisions; estimated cost {estimated_cost_share(decisions, replayed):.3f}"
              " x current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
