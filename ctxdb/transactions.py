"""How the store's transactions meet contention (issue 14): the write lock taken up front,
a busy lock waited out and retried with a jittered pause, PostgreSQL's serialization
failures and deadlocks run again, then `StoreBusy`; and what a store measures of it (how
long each write held the lock, how many attempts were retried), with SQLite's WAL
checkpointed after the commits.
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from .db import SQLITE_BEGIN_OPTION, SQLITE_BUSY_TIMEOUT_MS, sqlite_driver, sqlite_file_of

# A write transaction is tried WRITE_ATTEMPTS times: on SQLite each BEGIN IMMEDIATE waits
# up to WRITE_LOCK_WAIT_MS for the write lock (SQLite's own busy handler); on PostgreSQL a
# transaction ended by a serialization failure or a deadlock is run again. Before attempt
# n a random pause of up to RETRY_JITTER_MS * 2**(n - 2), so writers that failed together
# do not come back together. Then StoreBusy.
WRITE_ATTEMPTS = 4
WRITE_LOCK_WAIT_MS = 5_000
RETRY_JITTER_MS = 50
# SQLSTATEs of a PostgreSQL transaction that may succeed when run again.
PG_SERIALIZATION_FAILURE = "40001"
PG_DEADLOCK_DETECTED = "40P01"
PG_RETRYABLE = frozenset({PG_SERIALIZATION_FAILURE, PG_DEADLOCK_DETECTED})
# The store checkpoints its WAL after a commit that leaves it this many pages long or
# longer: SQLite's own wal_autocheckpoint default, which the store's connections turn off
# (db.py) because it would run inside that COMMIT, under the write lock. A decision writes
# ~30 pages at 16 items, ~90 at 256 (bench/construct.py's pools).
WAL_CHECKPOINT_PAGES = 1_000
# The WAL's length is read from its file's size, by stat: the store's connections
# truncate the file when SQLite resets the WAL after a checkpoint (db.py's
# journal_size_limit), so the size counts the frames written since. Never by opening one
# of SQLite's files: closing any descriptor of a file drops every POSIX lock the process
# holds on it, SQLite's included. The file's layout (https://www.sqlite.org/fileformat.html,
# "WAL File Format"): a header, then frames of a header and one page each.
WAL_SUFFIX = "-wal"
WAL_HEADER_BYTES = 32
WAL_FRAME_HEADER_BYTES = 24
# Write transactions whose lock hold times a store keeps (ContextStore.lock_holds).
LOCK_HOLDS_KEPT = 100_000
# the low byte of an extended SQLite result code is its primary code (SQLITE_BUSY)
SQLITE_PRIMARY_CODE_MASK = 0xFF

Result = TypeVar("Result")


class StoreBusy(TimeoutError):
    """A write transaction could not go through in its retry budget: SQLite's write lock
    stayed held by another writer, or PostgreSQL kept ending the transaction on a
    serialization failure or deadlock. Nothing of the transaction was written; the
    caller may try again later. ``waited_s`` and ``attempts`` say how long it tried."""

    def __init__(self, message: str, waited_s: float, attempts: int):
        super().__init__(message)
        self.waited_s, self.attempts = waited_s, attempts


@dataclass(frozen=True)
class WriteRetry:
    """How a store's write transactions meet contention (the constants above)."""

    attempts: int = WRITE_ATTEMPTS
    lock_wait_ms: int = WRITE_LOCK_WAIT_MS
    jitter_ms: int = RETRY_JITTER_MS

    def pause(self, attempt: int) -> None:
        """The jittered pause before ``attempt`` (2, 3, …)."""
        time.sleep(random.uniform(0, self.jitter_ms * 2 ** (attempt - 2)) / 1000)


class WriteTransactions:
    """One store's write transactions: each takes the write lock up front and is retried
    within ``retry``; ``lock_holds`` and ``retries`` say what that cost."""

    def __init__(self, engine: Engine, url: str):
        self.engine = engine
        self.url = url
        self.retry = WriteRetry()
        # seconds each write transaction held the write lock (SQLite) or was open
        # (PostgreSQL), from its BEGIN to its COMMIT; and how many attempts were retried
        self.lock_holds: deque[float] = deque(maxlen=LOCK_HOLDS_KEPT)
        self.retries = 0
        self._sqlite = engine.dialect.name == "sqlite"
        database = sqlite_file_of(url) if self._sqlite else None
        # beside the file SQLite opens: a symlink's target
        self._wal_file = os.path.realpath(database) + WAL_SUFFIX if database else None
        self._page_size: int | None = None  # read at the first write

    def run(self, transaction: Callable[[], AbstractContextManager[Connection]],
            work: Callable[[Connection], Result]) -> Result:
        """``work(connection)`` in ``transaction()``, and its result; run again when
        PostgreSQL ended the transaction on a serialization failure or deadlock."""
        retry, started = self.retry, time.perf_counter()
        for attempt in range(1, retry.attempts + 1):
            if attempt > 1:
                self.retries += 1
                retry.pause(attempt)
            try:
                with transaction() as connection:
                    return work(connection)
            except DBAPIError as exc:
                if _sqlstate(exc) not in PG_RETRYABLE:
                    raise
                if attempt == retry.attempts:
                    waited = time.perf_counter() - started
                    raise StoreBusy(
                        f"store {self.url}: PostgreSQL ended the transaction "
                        f"{retry.attempts} times in {waited:.1f} s on a serialization failure"
                        f" or deadlock (SQLSTATE {_sqlstate(exc)}); nothing was written, try"
                        f" again later", waited, retry.attempts) from exc
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _wal_pages(self, connection: Connection, wal_file: str) -> int:
        if self._page_size is None:
            self._page_size = int(sqlite_driver(connection).execute(
                "PRAGMA page_size").fetchone()[0])
        return wal_frames(wal_file, self._page_size)

    @contextmanager
    def write(self, connection: Connection | None = None) -> Iterator[Connection]:
        """One write transaction, its BEGIN retried while SQLite's write lock is busy;
        records how long it held the lock. On ``connection`` when given (left open
        after), else on one of the engine's."""
        retry = self.retry
        started = time.perf_counter()
        for attempt in range(1, retry.attempts + 1):
            writing = connection if connection is not None else self.engine.connect()
            try:
                if self._sqlite:
                    _set_busy_timeout(writing, retry.lock_wait_ms)
                writing.execution_options(**{SQLITE_BEGIN_OPTION: "IMMEDIATE"})
                transaction = writing.begin()
                break
            except BaseException as exc:
                if connection is None:
                    writing.close()
                if not (self._sqlite and isinstance(exc, DBAPIError) and _is_sqlite_busy(exc)):
                    raise
                if attempt == retry.attempts:
                    waited = time.perf_counter() - started
                    raise StoreBusy(
                        f"store {self.url}: another writer held the write lock through "
                        f"{retry.attempts} attempts over {waited:.1f} s (each waiting up to "
                        f"{retry.lock_wait_ms} ms); nothing was written, try again later",
                        waited, retry.attempts) from exc
                self.retries += 1
                retry.pause(attempt + 1)
        with nullcontext() if connection is not None else writing:
            if self._sqlite:
                _set_busy_timeout(writing, SQLITE_BUSY_TIMEOUT_MS)
            held_from = time.perf_counter()
            with transaction:
                yield writing
            self.lock_holds.append(time.perf_counter() - held_from)
            if self._wal_file is not None and \
                    self._wal_pages(writing, self._wal_file) >= WAL_CHECKPOINT_PAGES:
                # PASSIVE: copies what no reader still needs, waits for nobody and holds
                # no write lock — other writers go on meanwhile. The next commit restarts
                # the WAL from its start; one a reader kept from that checkpoints again.
                _checkpoint(writing)


@contextmanager
def immediate_transaction(engine: Engine) -> Iterator[Connection]:
    """One transaction that takes the write lock first (``BEGIN IMMEDIATE`` on SQLite),
    without retries: for opening a store (its views brought in line with sql/views/)."""
    with engine.connect() as connection:
        connection = connection.execution_options(**{SQLITE_BEGIN_OPTION: "IMMEDIATE"})
        with connection.begin():
            yield connection


def _sqlstate(exc: DBAPIError) -> str | None:
    """The SQLSTATE of a PostgreSQL driver's error (None from SQLite)."""
    return getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)


def wal_frames(wal_file: str, page_size: int) -> int:
    """How many frames (pages) the WAL file holds, by its size; none when there is no
    file, and as if it were full when it cannot be stat'ed (a checkpoint is never skipped
    for want of a count)."""
    try:
        size = os.stat(wal_file).st_size
    except FileNotFoundError:
        return 0
    except OSError:
        return WAL_CHECKPOINT_PAGES
    return max(0, size - WAL_HEADER_BYTES) // (page_size + WAL_FRAME_HEADER_BYTES)


def _checkpoint(connection: Connection) -> None:
    """A PASSIVE WAL checkpoint on the driver's connection, outside any transaction (one
    SQLAlchemy would begin for the statement makes SQLite refuse it). The decision is
    committed already: a checkpoint that cannot run now is left to the next one."""
    try:
        sqlite_driver(connection).execute("PRAGMA wal_checkpoint(PASSIVE)")
    except sqlite3.OperationalError:
        pass  # e.g. another connection checkpointing at this moment: the next one will


def _set_busy_timeout(connection: Connection, milliseconds: int) -> None:
    # On the driver's connection: through SQLAlchemy it would begin a transaction.
    sqlite_driver(connection).execute(f"PRAGMA busy_timeout={int(milliseconds)}")


def _is_sqlite_busy(exc: DBAPIError) -> bool:
    code = getattr(exc.orig, "sqlite_errorcode", None)
    # extended codes too (SQLITE_BUSY_SNAPSHOT…)
    return code is not None and code & SQLITE_PRIMARY_CODE_MASK == sqlite3.SQLITE_BUSY
