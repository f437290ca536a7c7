"""Independent jobs in a bounded pool of worker processes (``ab run``, ``replay``).

Each job is one call of a module-level function that catches its own errors and returns
its result; results come back as the jobs finish, and ``progress(done, total)`` is told.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any


def usable_cpu_count() -> int:
    """The cores this process may run on: its affinity mask where the platform keeps one
    (Linux), else every core (macOS and Windows have no ``os.sched_getaffinity``)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


# one worker process per usable core; the CLI shows it in --help, so this module's
# process-pool imports wait until a pool is started
DEFAULT_WORKERS = usable_cpu_count()

# set in a worker process Ctrl-C has reached (the terminal signals every process of the
# command): the jobs queued to it are refused rather than run
_interrupted = False


def _pool_job(function: Callable[..., Any], job: tuple) -> Any:
    global _interrupted
    if _interrupted:
        raise KeyboardInterrupt
    try:
        return function(*job)
    except KeyboardInterrupt:
        _interrupted = True
        raise


def run_each(function: Callable[..., Any], jobs: Sequence[tuple], workers: int,
             progress: Callable[[int, int], None] | None = None) -> list:
    """``function(*job)`` for every job, in ``workers`` processes (in this one for one
    worker or one job); the results in the order the jobs finished."""
    results: list = []
    if progress:
        progress(0, len(jobs))
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            results.append(function(*job))
            if progress:
                progress(len(results), len(jobs))
        return results
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # fork where there is one: the parent holds no open engine or connection by now
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(_pool_job, function, job) for job in jobs]
        try:
            for future in as_completed(futures):
                results.append(future.result())
                if progress:
                    progress(len(results), len(jobs))
        except BaseException:
            # Ctrl-C (or a job's own error): the jobs not yet started are dropped, else
            # leaving the pool would wait for every one of them to run
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return results
