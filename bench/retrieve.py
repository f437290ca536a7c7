"""Measure the retriever on the development set: `ctxdb retrieve --eval`'s figures.

    python bench/retrieve.py [INSTANCES.jsonl] [--cache DIR]

INSTANCES defaults to the development set as `bench/devset.py` writes it
(~/.cache/ctxdb/devset/instances.jsonl); trees and recon indexes come from the A/B
runner's cache (materialised and indexed on first use). Prints the evaluation report,
then, as the LAST line, the figures as key=value pairs: the fused retriever's and the
old stand-in's gold-symbol recall at 5/10/30 (mean over instances, and pooled at 30),
gold-file recall at 1/5/10 and MRR, the ratios all / stand-in of the targeted figures,
the fused retriever's recall per repository (``sympy_sym10=…``), and its latency p50 /
p95 over the sympy instances (warm: every other configuration has run over the same
index first).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from ctxdb.ab.runner import DEFAULT_CACHE
from ctxdb.retrieval import evaluate

DEFAULT_INSTANCES = Path.home() / ".cache" / "ctxdb" / "devset" / "instances.jsonl"
FIGURES = ("symbol_recall@5", "symbol_recall@10", "symbol_recall@30",
           "pooled_symbol_recall@30", "file_recall@1", "file_recall@5", "file_recall@10", "mrr")
TARGETED = ("symbol_recall@10", "symbol_recall@30", "file_recall@5")
# per repository (the fused retriever): a rule that fits one repository only shows there
REPO_FIGURES = ("symbol_recall@5", "symbol_recall@10", "symbol_recall@30", "file_recall@5")
LATENCY_REPO = "sympy/sympy"


def _short(name: str) -> str:
    return (name.replace("pooled_symbol_recall@", "pooled")
            .replace("symbol_recall@", "sym").replace("file_recall@", "file"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("instances", nargs="?", default=str(DEFAULT_INSTANCES))
    parser.add_argument("--cache", default=str(DEFAULT_CACHE))
    args = parser.parse_args()
    scores, errors = evaluate.evaluate(args.instances, Path(args.cache))
    for error in errors:
        print(f"skipped: {error}")
    if not any(score.error is None for score in scores):
        parser.error(f"{args.instances}: no instance could be measured (see the lines above)")
    print(evaluate.report(scores))
    fused = evaluate.overall(scores, evaluate.ALL)
    old = evaluate.overall(scores, evaluate.STAND_IN)
    pairs = [("instances", fused["instances"]),
             ("failed", sum(1 for s in scores if s.error is not None))]
    pairs += [(f"all_{_short(name)}", f"{fused[name]:.3f}") for name in FIGURES]
    pairs += [(f"standin_{_short(name)}", f"{old[name]:.3f}") for name in FIGURES]
    pairs += [(f"ratio_{_short(name)}", f"{fused[name] / old[name]:.2f}" if old[name] else "inf")
              for name in TARGETED]
    for repo in evaluate.repositories(scores):
        per_repo = evaluate.overall(scores, evaluate.ALL, repo)
        owner = repo.split("/", 1)[0]
        pairs.append((f"{owner}_instances", per_repo["instances"]))
        pairs += [(f"{owner}_{_short(name)}", f"{per_repo[name]:.3f}") for name in REPO_FIGURES
                  if per_repo[name] is not None]
    repo_of = {line_id: repo for line_id, repo in _repos(args.instances)}
    latencies = sorted(1000 * s.ranked[evaluate.ALL].seconds for s in scores
                       if s.error is None and repo_of.get(s.instance_id) == LATENCY_REPO)
    if latencies:
        pairs.append(("sympy_p50_ms", f"{statistics.median(latencies):.1f}"))
        pairs.append(("sympy_p95_ms",
                      f"{latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))]:.1f}"))
    print(" ".join(f"{key}={value}" for key, value in pairs))


def _repos(path: str):
    from ctxdb.ab.instances import load_instances

    instances, _errors = load_instances(path)
    return [(instance.instance_id, instance.repo) for instance in instances]


if __name__ == "__main__":
    main()
