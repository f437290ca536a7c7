"""ctxdb/workers.py: jobs in a pool of worker processes, stopped as a whole by Ctrl-C."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ctxdb import workers

JOBS = 20
JOB_SECONDS = 0.2


def _mark_or_stop(done_dir: str, number: int) -> int:
    """Job 0 is stopped by Ctrl-C; every other one marks that it ran."""
    if number == 0:
        raise KeyboardInterrupt
    time.sleep(JOB_SECONDS)
    (Path(done_dir) / str(number)).touch()
    return number


def test_ctrl_c_in_a_pool_runs_no_job_that_had_not_started(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        workers.run_each(_mark_or_stop, [(str(tmp_path), n) for n in range(JOBS)], workers=2)
    # the other worker's job under way and perhaps one queued ran, not all the rest
    assert len(list(tmp_path.iterdir())) < JOBS // 2


def test_a_worker_ctrl_c_reached_refuses_the_jobs_queued_to_it(tmp_path, monkeypatch):
    monkeypatch.setattr(workers, "_interrupted", False)
    with pytest.raises(KeyboardInterrupt):
        workers._pool_job(_mark_or_stop, (str(tmp_path), 0))
    with pytest.raises(KeyboardInterrupt):
        workers._pool_job(_mark_or_stop, (str(tmp_path), 1))
    assert list(tmp_path.iterdir()) == []
