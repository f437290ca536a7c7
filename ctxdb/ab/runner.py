"""Running the A/B: every instance through every arm and variant.

Instances run in a bounded pool of worker processes, each writing its own decisions;
one instance's failure is logged and the others go on. Runs are ``PREFIX/ARM/VARIANT``.
"""

from __future__ import annotations

import dataclasses
import os
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from ..recon.schema import create_recon_engine
from ..spec import ARMS
from ..store import ContextStore
from .decisions import LOCALIZATIONS, build_decisions
from .gold import store_gold_facts
from .instances import Instance, load_instances
from .materialize import SkippedBlob, materialize
from .variants import DEFAULT, VARIANTS, apply_variant

DEFAULT_CACHE = Path.home() / ".cache" / "ctxdb" / "ab"


@dataclass
class AbOptions:
    arms: tuple[str, ...] = ARMS
    variants: tuple[str, ...] = (DEFAULT,)
    localization: str = "oracle"
    workers: int = os.cpu_count() or 1
    cache_dir: Path = DEFAULT_CACHE
    run_prefix: str = "ab"

    def validate(self) -> None:
        for arm in self.arms:
            if arm not in ARMS:
                raise ValueError(f"--arms: {arm!r} is not one of {', '.join(ARMS)}")
        for variant in self.variants:
            if variant not in VARIANTS:
                raise ValueError(f"--variants: {variant!r} is not one of {', '.join(VARIANTS)}")
        if self.localization not in LOCALIZATIONS:
            raise ValueError(f"--localization: expected one of {', '.join(LOCALIZATIONS)}")
        if self.workers < 1:
            raise ValueError("--workers: expected at least 1")


def run_id_for(prefix: str, arm: str, variant: str) -> str:
    return f"{prefix}/{arm}/{variant}"


def arm_variants(options: AbOptions) -> list[tuple[str, str]]:
    """(arm, variant) pairs: variants are the constructor's; the baseline runs once."""
    pairs = []
    for arm in options.arms:
        for variant in (options.variants if arm == "ctx08" else (DEFAULT,)):
            pairs.append((arm, variant))
    return pairs


@dataclass
class InstanceResult:
    instance_id: str
    decisions: int = 0
    error: str | None = None
    skipped: tuple[SkippedBlob, ...] = ()  # files of the commit left out of the tree


@dataclass
class AbSummary:
    results: list[InstanceResult] = field(default_factory=list)
    input_errors: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[InstanceResult]:
        return [r for r in self.results if r.error]


def run_instance(db_url: str, instance: Instance, options: AbOptions) -> InstanceResult:
    """Everything for one instance; errors are caught and reported, never raised."""
    result = InstanceResult(instance.instance_id)
    try:
        tree = materialize(instance, Path(options.cache_dir))
        result.skipped = tree.skipped
        recon = str(tree.recon)
        with ContextStore.open(db_url, recon=recon) as store:
            engine = create_recon_engine(recon)
            try:
                with engine.connect() as recon_connection:
                    edited = store_gold_facts(store, instance, recon_connection)
                    base = build_decisions(recon_connection, instance, edited,
                                           options.localization, "pending")
            finally:
                engine.dispose()
            for arm, variant in arm_variants(options):
                run_id = run_id_for(options.run_prefix, arm, variant)
                for request in base:
                    request = dataclasses.replace(request, run_id=run_id, arm=arm)
                    request = apply_variant(request, variant)
                    store.construct(request)
                    result.decisions += 1
    except Exception as exc:  # one instance's failure must not stop the run
        detail = traceback.format_exception_only(type(exc), exc)[-1].strip()
        result.error = f"{instance.instance_id}: {detail}"
    return result


def run_ab(db_url: str, instances_path, options: AbOptions, progress=None) -> AbSummary:
    options.validate()
    instances, errors = load_instances(instances_path)
    summary = AbSummary(input_errors=errors)
    ContextStore.open(db_url).close()  # create/upgrade once, before the workers race
    if options.workers == 1 or len(instances) <= 1:
        for instance in instances:
            summary.results.append(run_instance(db_url, instance, options))
            if progress:
                progress(len(summary.results), len(instances))
        return summary
    import multiprocessing

    # fork where there is one: the parent holds no open engine or connection by now
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with ProcessPoolExecutor(max_workers=options.workers, mp_context=context) as pool:
        futures = [pool.submit(run_instance, db_url, i, options) for i in instances]
        for future in as_completed(futures):
            summary.results.append(future.result())
            if progress:
                progress(len(summary.results), len(instances))
    summary.results.sort(key=lambda r: r.instance_id)
    return summary
