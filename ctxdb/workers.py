"""Independent jobs in a bounded pool of worker processes (``ab run``, ``replay``).

Each job is one call of a module-level function that catches its own errors and returns
its result; results come back as the jobs finish, and ``progress(done, total)`` is told.

Stopping: Ctrl-C (SIGINT) and SIGTERM (a supervisor's stop, ``timeout``) end a command
alike — the job under way in each worker undoes itself on the way out (a replay's run:
its decisions, scratch tree and sandbox) and no queued job starts. The parent passes
the signal on to its workers, so one sent to the parent alone stops them too; the parent
(``stops_taken_once``, the CLI's) and each worker act on the first signal only, so an
undoing or the pool's shutdown is not itself cut short by a second, and a worker waiting
for a job only notes it (there it may hold the pool's queue).
A worker whose parent dies (SIGKILL) is sent SIGTERM by the kernel
(``PR_SET_PDEATHSIG``, Linux), undoes its job and exits, rather than running every
queued job for no one and then waiting for ever. A signal the command was started
ignoring stays ignored.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM reached the command: undone on the way out as Ctrl-C is (a
    ``KeyboardInterrupt``, so every cleanup that handles one handles it)."""


# the signals that stop a command: Ctrl-C, and a supervisor's stop (`timeout`, `kill`)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stops_taken_once() -> Iterator[None]:
    """Within it, in this process, the first SIGINT raises ``KeyboardInterrupt`` and the
    first SIGTERM ``Terminated``, so the work under way undoes itself on the way out;
    every later stop is only noted, so that undoing runs to its end (a replay's run in
    this process, a pool's shutdown) and the command's status stays the first stop's.
    A signal this process was started ignoring (``cmd &`` in a script ignores Ctrl-C)
    stays ignored; the handlers before are put back after (SIG_DFL for one set outside
    Python), a stop landing meanwhile raised again for them. The main thread only: a
    handler cannot be set from another."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    taken: list[int] = []
    # set when the caller's handlers are being put back: a stop landing then (in any
    # thread's turn) is held and raised again once they are all back, for them to take
    restoring: list[int] = []

    def stop(signum: int, frame: object) -> None:
        if restoring:
            restoring.append(signum)
            return
        if taken:
            return
        taken.append(signum)
        raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt

    before = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    before = {signum: handler for signum, handler in before.items()
              if handler is not signal.SIG_IGN}
    for signum in before:
        signal.signal(signum, stop)
    try:
        yield
    finally:
        restoring.append(0)  # (0: the mark; the signals held follow it)
        for signum, handler in before.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        for held in restoring[1:] if not taken else ():  # (after a first: only noted)
            signal.raise_signal(held)


def usable_cpu_count() -> int:
    """The cores this process may run on: its affinity mask where the platform keeps one
    (Linux), else every core (macOS and Windows have no ``os.sched_getaffinity``)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


# one worker process per usable core; the CLI shows it in --help, so this module's
# process-pool imports wait until a pool is started
DEFAULT_WORKERS = usable_cpu_count()

# set in a worker process Ctrl-C or SIGTERM has reached (the terminal signals every
# process of the command; the parent passes a signal on): the jobs queued to it are
# refused rather than run
_interrupted = False
# whether the worker is running a job (else it waits on the pool's queue, holding its
# lock at times: a signal must not end it there, or the pool breaks and hangs)
_in_job = False
# prctl(2)'s option: the signal a process gets when the thread that made it ends
PR_SET_PDEATHSIG = 1
# what an orphaned worker exits with once its job is undone (no parent to tell)
ORPHANED_WORKER_EXIT = 128 + signal.SIGTERM
# the worker's parent, as it started (an orphan's parent is another process)
_parent_pid = 0


def _orphaned() -> bool:
    return bool(_parent_pid) and os.getppid() != _parent_pid


def _stop_once(signum: int, frame: object) -> None:
    """A worker's SIGINT and SIGTERM: the first stops the job under way; later ones, and
    any while it waits for a job, are only noted (the job's undoing runs to its end, and
    a waiting worker leaves when the pool shuts down); an orphan waiting leaves."""
    global _interrupted
    stopping, _interrupted = _interrupted, True
    if not _in_job:
        if _orphaned():
            os._exit(ORPHANED_WORKER_EXIT)
        return
    if not stopping:
        raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


def _worker_started(parent_pid: int) -> None:
    """Each worker's start: SIGTERM when its parent dies, one stop per signal (a signal
    the command was started ignoring, as ``cmd &`` in a script ignores Ctrl-C, stays
    ignored)."""
    global _parent_pid
    _parent_pid = parent_pid
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    for handled in (signal.SIGINT, signal.SIGTERM):
        if handled == signal.SIGTERM or signal.getsignal(handled) is not signal.SIG_IGN:
            signal.signal(handled, _stop_once)
    if os.getppid() != parent_pid:  # it died before the signal was asked for
        os._exit(ORPHANED_WORKER_EXIT)


def _pool_job(function: Callable[..., Any], job: tuple) -> Any:
    global _in_job, _interrupted
    if _interrupted:
        raise KeyboardInterrupt
    _in_job = True
    try:
        return function(*job)
    except KeyboardInterrupt:
        _interrupted = True
        if _orphaned():
            os._exit(ORPHANED_WORKER_EXIT)  # the job is undone; no one waits for it
        raise
    finally:
        _in_job = False


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
    from concurrent.futures.process import BrokenProcessPool

    # fork where there is one: the parent holds no open engine or connection by now
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    # no more workers than jobs: an idle one only waits
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=context,
                             initializer=_worker_started, initargs=(os.getpid(),)) as pool:
        futures = [pool.submit(_pool_job, function, job) for job in jobs]
        try:
            for future in as_completed(futures):
                results.append(future.result())
                if progress:
                    progress(len(results), len(jobs))
        except BaseException as stopped:
            if isinstance(stopped, KeyboardInterrupt):  # stop the jobs under way too
                _signal_workers(pool, signal.SIGTERM if isinstance(stopped, Terminated)
                                else signal.SIGINT)
            # the pool forgets its processes as it shuts down: their exits are read after
            processes = list((getattr(pool, "_processes", None) or {}).values())
            # the jobs not yet started are dropped, else leaving the pool would wait for
            # every one of them to run
            pool.shutdown(wait=True, cancel_futures=True)
            if isinstance(stopped, BrokenProcessPool):
                raise WorkerDied(
                    f"a worker process ended abruptly ({_how_ended(processes)}) "
                    f"when {len(results)} of {len(jobs)} jobs had finished: the jobs under "
                    "way were stopped, the rest not run") from stopped
            raise
    return results


def _how_ended(processes: list) -> str:
    """How a broken pool's worker ended, from its exit code: the pool ends the others
    with SIGTERM (ours exit 0 on it), so the first other end is the one that broke it."""
    for process in processes:
        code = process.exitcode
        if code is None or code in (0, -signal.SIGTERM):
            continue
        if code == -signal.SIGKILL:
            return f"pid {process.pid}, killed by SIGKILL: by someone, or the kernel's OOM killer"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"pid {process.pid}, killed by {name}"
        return f"pid {process.pid}, exited with status {code}"
    return "no worker's exit tells how"


class WorkerDied(RuntimeError):
    """A worker process of ``run_each`` ended without a word (killed outright): the
    pool can run nothing more."""


def _signal_workers(pool: Any, signum: int) -> None:
    """Send each of the pool's worker processes ``signum`` (a signal sent to the parent
    alone reaches no worker otherwise; one the terminal sent them all is taken once)."""
    # ProcessPoolExecutor names its processes only in ``_processes`` (pid -> process);
    # one not yet reaped (no exit code) holds its pid, which no other process can take
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        if process.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signum)
