"""Running the A/B: every instance through every arm and variant.

Instances run in a bounded pool of worker processes, each writing its own decisions;
one instance's failure is logged and the others go on. Runs are ``PREFIX/ARM/VARIANT``.

The ranker (``--ranker``) sets the ranking step's endpoint for the whole run: ``none``
(no endpoint: the settings' ``rank_base_url`` emptied), ``oracle`` (``oracle_ranker``:
a server per instance on 127.0.0.1 scoring the instance's gold facts 1.0), or the URL
of an OpenAI-compatible endpoint. A ctx08 run ranked by the oracle or an endpoint has
its id suffixed (``ab/ctx08/default@oracle``) and every ctx08 run is labelled with its
ranker in ``run.note`` (``ranker: oracle``), which the reports show.
"""

from __future__ import annotations

import contextlib
import dataclasses
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from ..config import Settings, load_settings
from ..recon.schema import create_recon_engine
from ..spec import ARM_CTX08, ARMS
from ..sqlfiles import sql_statement
from ..store import ContextStore
from ..workers import DEFAULT_WORKERS, run_each
from .decisions import LOCALIZATIONS, build_decisions
from .gold import store_gold_facts
from .instances import Instance, load_instances
from .materialize import SkippedBlob, materialize
from .oracle_ranker import OracleRanker, Place, pool_entities
from .variants import DEFAULT, VARIANTS, apply_variant

DEFAULT_CACHE = Path.home() / ".cache" / "ctxdb" / "ab"
RANKER_NONE = "none"
RANKER_ORACLE = "oracle"
RANKER_NOTE_PREFIX = "ranker: "
ENDPOINT_SUFFIX = "endpoint"  # the run id suffix of a run ranked by a URL


def is_ranker_url(ranker: str) -> bool:
    parts = urlsplit(ranker)
    return parts.scheme in ("http", "https") and bool(parts.netloc)




@dataclass
class AbOptions:
    arms: tuple[str, ...] = ARMS
    variants: tuple[str, ...] = (DEFAULT,)
    localization: str = "oracle"
    workers: int = DEFAULT_WORKERS
    cache_dir: Path = DEFAULT_CACHE
    run_prefix: str = "ab"
    ranker: str = RANKER_NONE  # none, oracle, or an endpoint's URL
    settings: Settings | None = None  # None: load_settings(), once, in run_ab

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
        if self.ranker not in (RANKER_NONE, RANKER_ORACLE) and not is_ranker_url(self.ranker):
            raise ValueError(f"--ranker: expected none, oracle or the http(s):// URL of an "
                             f"OpenAI-compatible endpoint, got {self.ranker!r}")


def run_id_for(prefix: str, arm: str, variant: str, ranker: str = RANKER_NONE) -> str:
    """``PREFIX/ARM/VARIANT``, and ``@oracle`` or ``@endpoint`` after a ctx08 run's when it
    is ranked: runs of two rankers never share an id, where the newest construction of a
    decision would replace the other ranker's. The baseline makes no ranking call, so its
    run is the same whatever the ranker."""
    run_id = f"{prefix}/{arm}/{variant}"
    if arm != ARM_CTX08 or ranker == RANKER_NONE:
        return run_id
    return f"{run_id}@{RANKER_ORACLE if ranker == RANKER_ORACLE else ENDPOINT_SUFFIX}"


def ranker_note(ranker: str) -> str:
    """What ``run.note`` says of a ctx08 run's ranker: ``ranker: none|oracle|URL``."""
    return RANKER_NOTE_PREFIX + ranker


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


def run_instance(db_url: str, instance: Instance, options: AbOptions,
                 settings: Settings) -> InstanceResult:
    """Everything for one instance; errors are caught and reported, never raised."""
    result = InstanceResult(instance.instance_id)
    try:
        tree = materialize(instance, Path(options.cache_dir))
        result.skipped = tree.skipped
        recon = str(tree.recon)
        with contextlib.ExitStack() as stack:
            oracle = None
            if options.ranker == RANKER_ORACLE:
                oracle = stack.enter_context(OracleRanker())
                rank_base_url = oracle.base_url
            else:
                rank_base_url = "" if options.ranker == RANKER_NONE else options.ranker
            settings = dataclasses.replace(settings, rank_base_url=rank_base_url)
            with ContextStore.open(db_url, recon=recon, settings=settings) as store:
                result.decisions = _construct_instance(store, instance, recon, options, oracle)
    except Exception as exc:  # one instance's failure must not stop the run
        detail = traceback.format_exception_only(type(exc), exc)[-1].strip()
        result.error = f"{instance.instance_id}: {detail}"
    return result


def _construct_instance(store: ContextStore, instance: Instance, recon: str,
                        options: AbOptions, oracle: OracleRanker | None) -> int:
    engine = create_recon_engine(recon)
    try:
        with engine.connect() as recon_connection:
            edited = store_gold_facts(store, instance, recon_connection)
            base = build_decisions(recon_connection, instance, edited,
                                   options.localization, "pending")
    finally:
        engine.dispose()
    gold_places = []
    if oracle is not None:
        with store.engine.connect() as connection:
            gold_places = [Place(*row) for row in connection.execute(
                sql_statement("ab/gold_fact_places"), {"instance_id": instance.instance_id})]
    decisions = 0
    for arm, variant in arm_variants(options):
        run_id = run_id_for(options.run_prefix, arm, variant, options.ranker)
        for request in base:
            request = dataclasses.replace(request, run_id=run_id, arm=arm)
            request = apply_variant(request, variant)
            if oracle is not None and arm == ARM_CTX08:
                oracle.expect(pool_entities(store, request), gold_places)
            store.construct(request)
            decisions += 1
    return decisions


def _ctx08_runs(options: AbOptions) -> list[tuple[str, str]]:
    """(run id, variant) of the ctx08 runs this run writes."""
    return [(run_id_for(options.run_prefix, arm, variant, options.ranker), variant)
            for arm, variant in arm_variants(options) if arm == ARM_CTX08]


def check_one_ranker_per_variant(store: ContextStore, options: AbOptions) -> None:
    """Refuse to add a ranker's ctx08 runs to a store whose runs of the same variant were
    ranked otherwise: the reports group runs by arm and variant and would average the two."""
    note = ranker_note(options.ranker)
    with store.engine.connect() as connection:
        for _run_id, variant in _ctx08_runs(options):
            other = connection.execute(sql_statement("ab/runs_ranked_otherwise"), {
                "arm": ARM_CTX08, "variant": variant, "note": note,
                "ranker_note_pattern": RANKER_NOTE_PREFIX + "%",
            }).first()
            if other is not None:
                raise ValueError(
                    f"--ranker {options.ranker}: this store already holds run {other.run_id} "
                    f"({other.note}); the reports group runs by arm and variant, so a run with "
                    "another ranker needs its own --db")


def label_runs(store: ContextStore, options: AbOptions) -> None:
    """Write each ctx08 run's ranker into ``run.note`` (a run not yet made is left alone)."""
    note = ranker_note(options.ranker)
    with store.write_transaction() as connection:
        for run_id, _variant in _ctx08_runs(options):
            connection.execute(sql_statement("ab/label_run"), {"run_id": run_id, "note": note})


def run_ab(db_url: str, instances_path, options: AbOptions, progress=None) -> AbSummary:
    options.validate()
    settings = options.settings or load_settings()
    instances, errors = load_instances(instances_path)
    summary = AbSummary(input_errors=errors)
    if not instances:  # nothing to run: the store is not created or touched
        return summary
    # create/upgrade once, before the workers race
    with ContextStore.open(db_url, settings=settings) as store:
        check_one_ranker_per_variant(store, options)
    summary.results = run_each(run_instance, [(db_url, instance, options, settings)
                                              for instance in instances],
                               options.workers, progress)
    with ContextStore.open(db_url, settings=settings) as store:
        label_runs(store, options)
    summary.results.sort(key=lambda r: r.instance_id)
    return summary
