"""Where a warm decision's time goes, stage by stage: bench/construct.py's edit decisions
over the Django recon, each stage's wall time per decision.

    python bench/construct_stages.py [--cache DIR] [--runs N]

Wraps the pipeline's stage functions with a timer (inclusive: a stage's time holds the
stages it calls; the indented rows are parts of the row above), runs ``--runs`` warm
decisions per pool size after a few unmeasured ones, and prints the median ms of each
stage per decision. Timers add a little to every row; compare rows, not the total with
bench/construct.py's. The LAST line is the figures as key=value pairs.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from construct import POOL_SIZES, build_request, django_recon  # noqa: E402
from recon_index import DEFAULT_CACHE  # noqa: E402

from ctxdb import ContextStore  # noqa: E402
from ctxdb.pipeline import construct, gate_inputs, persist  # noqa: E402
from ctxdb.request import DecisionRequest  # noqa: E402

WARMUP_DECISIONS = 5
# (row name, module, function, depth): the pipeline's order; a function called in both
# the preview and the write is timed under the row of the first that calls it
STAGES = (
    ("construct", construct, "construct", 0),
    ("normalise (check, JSON, hash)", construct, "normalise", 1),
    ("assemble (pool, gate inputs)", construct, "assemble", 1),
    ("assemble_pool", construct, "assemble_pool", 2),
    ("derive_gate_inputs", construct, "derive_gate_inputs", 2),
    ("compute_nearness", gate_inputs, "compute_nearness", 3),
    ("prepare (no write lock)", construct, "prepare", 1),
    ("preview_gate", construct, "preview_gate", 2),
    ("write_preview_inputs", persist, "write_preview_inputs", 3),
    ("run_gate", construct, "run_gate", 3),
    ("decide (stages, counts)", construct, "decide", 2),
    ("resolve_residue (fold)", construct, "resolve_residue", 3),
    ("render", construct, "render", 3),
    ("compress", construct, "compress", 3),
    ("dedup", construct, "dedup", 3),
    ("order", construct, "order", 3),
    ("fit_budget", construct, "fit_budget", 3),
    ("window_entries", construct, "window_entries", 3),
    ("write_decision (write lock)", construct, "write_decision", 1),
    ("store_counts", construct, "store_counts", 2),
    ("write_outcome", persist, "write_outcome", 2),
    ("write_inputs (the write; before issue 24 the preview's too)", persist, "write_inputs", 0),
)


def instrument(spent: dict[str, float]) -> None:
    """Each stage's function replaced, where the pipeline looks it up, by a timed one (one
    an older revision lacks stays at 0)."""
    for name, module, attribute, _depth in STAGES:
        original = getattr(module, attribute, None)
        if original is None:
            continue

        @functools.wraps(original)
        def timed(*args, _original=original, _name=name, **kwargs):
            start = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                spent[_name] += time.perf_counter() - start

        setattr(module, attribute, timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--runs", type=int, default=25, help="measured decisions per pool")
    args = parser.parse_args()
    recon_path, _stats = django_recon(args.cache)
    spent: dict[str, float] = defaultdict(float)
    instrument(spent)
    figures = {}
    with tempfile.TemporaryDirectory() as tmp, ContextStore.open(
        Path(tmp) / "bench.db", recon=str(recon_path)
    ) as store:
        with store.engine.connect() as connection:
            requests = {n: DecisionRequest.from_dict(build_request(connection, n, n))
                        for n in POOL_SIZES}
        per_size = {}
        for size in POOL_SIZES:
            for _ in range(WARMUP_DECISIONS):
                store.construct(dataclasses.replace(requests[size]))
            samples: dict[str, list[float]] = defaultdict(list)
            for _ in range(args.runs):
                spent.clear()
                store.construct(dataclasses.replace(requests[size]))
                for name, *_ in STAGES:
                    samples[name].append(spent[name] * 1000)
            per_size[size] = {name: statistics.median(values) for name, values in samples.items()}
    print(f"median ms per warm decision ({args.runs} decisions per pool)")
    print(f"{'stage':<60}" + "".join(f"{size:>9}" for size in POOL_SIZES))
    for name, _module, _attribute, depth in STAGES:
        print(f"{'  ' * depth + name:<60}"
              + "".join(f"{per_size[size][name]:>9.2f}" for size in POOL_SIZES))
        for size in POOL_SIZES:
            figures[f"{_attribute}_ms_{size}"] = per_size[size][name]
    print(" ".join(f"{key}={value:.2f}" for key, value in figures.items()))


if __name__ == "__main__":
    main()
