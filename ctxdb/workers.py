"""Independent jobs in a bounded pool of worker processes (``ab run``, ``replay``).

Each job is one call of a module-level function that catches its own errors and returns
its result; results come back as the jobs finish, and ``progress(done, total)`` is told.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable, Sequence

# one worker process per core this process may run on (every core where the platform
# cannot say which: macOS has no sched_getaffinity)
DEFAULT_WORKERS = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                   else max(1, os.cpu_count() or 1))


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
    # fork where there is one: the parent holds no open engine or connection by now
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(function, *job) for job in jobs]
        for future in as_completed(futures):
            results.append(future.result())
            if progress:
                progress(len(results), len(jobs))
    return results
