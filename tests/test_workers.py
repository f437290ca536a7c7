"""ctxdb/workers.py: jobs in a pool of worker processes, stopped as a whole by Ctrl-C,
SIGTERM or their parent's death."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import subprocess
import sys
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


def _killed_or_sleep(number: int) -> int:
    if number == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # the OOM killer's way
    time.sleep(JOB_SECONDS)
    return number


def test_a_worker_killed_outright_is_named_not_a_broken_pool(tmp_path):
    """A worker SIGKILLed under a job: ``WorkerDied`` says what happened and how far the
    jobs got, where concurrent.futures' BrokenProcessPool said neither."""
    with pytest.raises(workers.WorkerDied, match=r"a worker process ended abruptly "
                       r"\(pid \d+, killed by SIGKILL: by someone, or the kernel's OOM "
                       r"killer\) when \d+ of 6 jobs had finished"):
        workers.run_each(_killed_or_sleep, [(n,) for n in range(6)], workers=2)


def _crashed_or_sleep(number: int) -> int:
    if number == 1:
        faulthandler.disable()  # pytest's would print the worker's stack
        os.kill(os.getpid(), signal.SIGSEGV)  # a native library's crash
    if number == 2:
        os._exit(3)  # an exit no job asked for
    time.sleep(JOB_SECONDS)
    return number


@pytest.mark.parametrize(("crashing_job", "said"), [
    (1, r"pid \d+, killed by SIGSEGV"),
    (2, r"pid \d+, exited with status 3"),
])
def test_a_worker_that_crashed_is_named_by_how_it_ended(crashing_job, said):
    """A segfault and a stray exit are told apart from an outright kill."""
    jobs = [(n,) for n in range(6) if n in (0, crashing_job, 4, 5)]
    with pytest.raises(workers.WorkerDied, match=r"a worker process ended abruptly \("
                       + said + r"\) when \d+ of 4 jobs had finished"):
        workers.run_each(_crashed_or_sleep, jobs, workers=2)


def test_a_worker_ctrl_c_reached_refuses_the_jobs_queued_to_it(tmp_path, monkeypatch):
    monkeypatch.setattr(workers, "_interrupted", False)
    with pytest.raises(KeyboardInterrupt):
        workers._pool_job(_mark_or_stop, (str(tmp_path), 0))
    with pytest.raises(KeyboardInterrupt):
        workers._pool_job(_mark_or_stop, (str(tmp_path), 1))
    assert list(tmp_path.iterdir()) == []


def test_a_stop_while_the_handlers_are_put_back_goes_to_the_callers_handler(monkeypatch):
    """An in-process caller's handlers come back whole: a stop landing after the first
    is put back and before the second (a SIGTERM, whose handler is still ours) reaches
    the caller's own handler, once, after both are back — not ours, which would raise
    there and leave the second handler ours for good."""
    caught: list[int] = []

    def callers(signum: int, frame: object) -> None:
        caught.append(signum)

    originals = {signum: signal.signal(signum, callers) for signum in workers.STOP_SIGNALS}
    set_handler = signal.signal
    put_back: list[int] = []

    def put_back_then_stopped(signum, handler):
        done = set_handler(signum, handler)
        if handler is callers:
            put_back.append(signum)
            if len(put_back) == 1:  # between the two, delivered in the other thread's turn
                os.kill(os.getpid(), workers.STOP_SIGNALS[-1])
                time.sleep(JOB_SECONDS / 4)
        return done

    import threading

    idle = threading.Event()  # a thread besides the main one: a harness's HTTP client's
    other = threading.Thread(target=idle.wait, daemon=True)
    other.start()
    try:
        with workers.stops_taken_once():
            monkeypatch.setattr(signal, "signal", put_back_then_stopped)
        monkeypatch.setattr(signal, "signal", set_handler)
        for _ in range(100):  # a Python handler runs at the next instructions
            if caught:
                break
            time.sleep(0.01)
        assert caught == [workers.STOP_SIGNALS[-1]]
        assert all(signal.getsignal(signum) is callers for signum in workers.STOP_SIGNALS)
    finally:
        idle.set()
        for signum, handler in originals.items():
            set_handler(signum, handler)


# A job that holds its worker until stopped, then takes UNDO_SECONDS to undo itself (a
# replay deleting its decisions): a second signal in that time must not cut it short.
HOLD_SECONDS = 60
UNDO_SECONDS = 0.5
# How long the processes may take to stop once signalled.
STOP_WAIT_S = 15
# The jobs, one letter each: H holds its worker until stopped, Q ends at once (its
# worker then waits idle for a job that never comes).
POOL_SCRIPT = """
import signal, sys
from ctxdb import workers
from test_workers import _hold
try:
    with workers.stops_taken_once():
        workers.run_each(_hold, [(sys.argv[1], n, kind == "H")
                                 for n, kind in enumerate(sys.argv[2])], workers=2)
except KeyboardInterrupt as stopped:
    sys.exit(143 if isinstance(stopped, workers.Terminated) else 130)
"""


def _hold(marks: str, number: int, holds: bool) -> int:
    if not holds:
        (Path(marks) / f"done-{number}").touch()
        return number
    (Path(marks) / f"started-{number}").write_text(str(os.getpid()))
    try:
        time.sleep(HOLD_SECONDS)
    except KeyboardInterrupt:
        time.sleep(UNDO_SECONDS)
        (Path(marks) / f"undone-{number}").touch()
        raise
    return number


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # an orphan's zombie waits for a reaper: it runs nothing


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("jobs", ["HHHH", "HQ"])
@pytest.mark.parametrize("stop", ["SIGKILL the parent", "SIGTERM the parent",
                                  "SIGTERM the group", "SIGINT the parent",
                                  "SIGINT the group"])
def test_a_stopped_pool_undoes_the_jobs_under_way_and_leaves_no_worker(tmp_path, stop, jobs):
    """Busy workers (HHHH: two held, two queued) or one busy and one idle (HQ: waiting on
    the pool's queue, where a signal must not end it): each job under way is undone once,
    no queued job starts, no worker is left and nothing but the command's line is said."""
    tests_dir = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tests_dir), *filter(None, [os.environ.get("PYTHONPATH")])])}
    parent = subprocess.Popen([sys.executable, "-c", POOL_SCRIPT, str(tmp_path), jobs],
                              env=env, start_new_session=True, stderr=subprocess.PIPE,
                              text=True)
    held = jobs.count("H")
    pids: list[int] = []
    try:
        deadline = time.monotonic() + STOP_WAIT_S
        while len(list(tmp_path.glob("started-*"))) < min(held, 2) \
                or len(list(tmp_path.glob("done-*"))) < jobs.count("Q") \
                or len(pids) < 2:
            assert time.monotonic() < deadline and parent.poll() is None, "no job started"
            time.sleep(0.05)
            pids = _children(parent.pid)
        signum = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM,
                  "SIGINT": signal.SIGINT}[stop.split()[0]]
        if stop.endswith("group"):
            os.killpg(parent.pid, signum)
        else:
            os.kill(parent.pid, signum)
        _, said = parent.communicate(timeout=STOP_WAIT_S)
        deadline = time.monotonic() + STOP_WAIT_S
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
    assert not any(_alive(pid) for pid in pids), "a worker outlived its pool"
    started = sorted(p.name.split("-")[1] for p in tmp_path.glob("started-*"))
    undone = sorted(p.name.split("-")[1] for p in tmp_path.glob("undone-*"))
    assert len(started) == min(held, 2) and undone == started  # no queued job began
    assert parent.returncode == {"SIGKILL": -signal.SIGKILL, "SIGTERM": 143,
                                 "SIGINT": 130}[stop.split()[0]]
    assert "Traceback" not in said, said


def _dispositions(_: int) -> tuple[str, str]:
    return (str(signal.getsignal(signal.SIGINT)), str(signal.getsignal(signal.SIGTERM)))


def test_the_recon_parser_pool_leaves_a_stop_to_its_parent(tmp_path):
    """A replay's or an A/B run's worker forks recon's parser pool with its own signal
    handlers in place: the parsers must not take them (each printed a traceback when the
    pool was terminated), but ignore Ctrl-C and end at the pool's SIGTERM."""
    import sqlalchemy as sa

    from ctxdb.recon import indexer

    if workers.usable_cpu_count() < 2:
        pytest.skip("one core: recon parses without a pool")
    before = {handled: signal.signal(handled, workers._stop_once)
              for handled in (signal.SIGINT, signal.SIGTERM)}
    try:
        engine = sa.create_engine(f"sqlite:///{tmp_path / 'r.db'}")
        with indexer._parser_pool(indexer.POOL_MIN_FILES, engine) as pool:
            seen = set(pool.map(_dispositions, range(8)))
    finally:
        for handled, handler in before.items():
            signal.signal(handled, handler)
    assert seen == {(str(signal.SIG_IGN), str(signal.SIG_DFL))}
