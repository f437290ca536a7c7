"""ContextStore: the one entry point to the evidence store."""

from __future__ import annotations

import functools
import os
import re
import sqlite3
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, Engine, event, inspect, select, text
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.exc import DatabaseError, OperationalError
from sqlalchemy.schema import CreateIndex, CreateTable

from . import models
from .config import Settings, load_settings
from .db import (
    StoreUnreachable,
    connect_failure,
    is_sqlite,
    is_sqlite_in_memory,
    make_engine,
    remember_store_made_here,
    resolve_url,
    shown_url,
    sqlite_file_of,
)
from .migrate import (
    StoreVersionError,
    check_known,
    create_new_sqlite_store,
    current_revision,
    head_revision,
    upgrade_engine,
    upgrade_in_memory,
)
from .outcomes import record_outcome
from .pipeline.vocabulary import HARNESS_SENT_OVER_CEILING_FLAG
from .request_limits import STORE_INTEGER_MAX
from .sqlfiles import check_files, view_files
from .tokens import count_cached
from .transactions import RETRY_JITTER_MS as RETRY_JITTER_MS  # docs/library.md: ctxdb.store's
from .transactions import WRITE_ATTEMPTS as WRITE_ATTEMPTS
from .transactions import WRITE_LOCK_WAIT_MS as WRITE_LOCK_WAIT_MS
from .transactions import WriteRetry, WriteTransactions, immediate_transaction
from .views import create_views, drop_views, foreign_views, view_drift

# the values sql/checks/ take as parameters (a check uses those it names), and `now`
# (models.utc_timestamp) when the checks run
CHECK_PARAMETERS = {"replay_run_note": models.REPLAY_RUN_NOTE,
                    "replay_held_prefix": models.REPLAY_HELD_INSTANCE_PREFIX,
                    "harness_sent_flag": HARNESS_SENT_OVER_CEILING_FLAG}

if TYPE_CHECKING:
    from .context import DecisionContext
    from .forensics import WindowDiff
    from .request import DecisionRequest
    from .retrieval import Retrieval


# Text digests a store remembers as committed (64 hex chars each: a few MB at most).
TEXTS_REMEMBERED_MAX = 1 << 16
# The preview pool's connections past its size: any number (SQLAlchemy's -1). A decision
# holds its own from its preview through the ranker call to its write, so a bounded pool
# (5 + 10) made the sixteenth concurrent decision wait for a connection, and fail with
# the pool's timeout behind a slow ranker.
PREVIEW_POOL_UNBOUNDED = -1

_CREATE_VIEW = re.compile(r"\bCREATE\s+VIEW\s+\w+", re.IGNORECASE)
# a table the gate view reads, by name after FROM or JOIN: the preview's copy takes the
# place of each store table that has one (models.PREVIEW_TABLES)
_READ_TABLE = re.compile(r"\b(FROM|JOIN)\s+(\w+)\b", re.IGNORECASE)

Result = TypeVar("Result")


class ReconNotFound(FileNotFoundError):
    """The recon index named for the store does not exist."""


class ContextStore:
    """An open evidence store: the main database, with the recon index beside it.

    ``ContextStore.open()`` creates a new database at the newest schema, upgrades
    an older one, and refuses one made by a newer ctxdb.
    """

    def __init__(self, engine: Engine, url: str, recon: str | None, settings: Settings,
                 strict: bool = False):
        self.engine = engine
        self.url = url
        self.recon = recon
        self.settings = settings
        # construct's default: refuse a request naming entities recon cannot resolve
        self.strict = strict
        self._recon_available: bool | None = None if recon is not None else False
        # A PostgreSQL store may read a separate recon.db file (many repositories, one
        # shared store: the A/B runner); assembly copies what it needs into the
        # decision's own rows, so the two need not live in one database.
        self._recon_engine: Engine | None = None
        # SQLite file stores: the decisions' own connections (preview, then write), each
        # holding the preview's TEMP tables from its start (made once: DDL per decision
        # would re-prepare every statement)
        self._preview_engine: Engine | None = None
        self._preview_engine_lock = threading.Lock()
        # run id -> (arm, variant) of runs this store has committed decisions to
        self.runs_seen: dict[str, tuple[str, str]] = {}
        # evidence_text digests this store has committed (texts are never deleted: a
        # decision refers to them), so a repeated text is not even offered again
        self.texts_stored: set[str] = set()
        self.writes = WriteTransactions(engine, url)

    @classmethod
    def open(
        cls,
        url_or_path: str | os.PathLike[str] | None = None,
        recon: str | os.PathLike[str] | None = None,
        *,
        settings: Settings | None = None,
        strict: bool = False,
        upgrade: bool = True,
    ) -> ContextStore:
        """``strict``: the default of ``construct(request, strict=...)``. ``upgrade``: an
        empty database is made a store and an older store migrated to this ctxdb's schema
        and views that differ from ``sql/views/`` rebuilt (False: the first two refused,
        ``StoreVersionError``, and the views left as they are, ``view_drift()`` lists
        them — a reader never changes a schema other processes may be writing under; the
        CLI's reading commands open so)."""
        url = resolve_url(url_or_path)
        settings = settings or load_settings()
        recon_path = separate_recon = checked_file = None
        if recon is not None and is_sqlite(url):
            recon_path = checked_file = checked_recon_file(recon)
        elif recon is not None and "://" not in os.fspath(recon):
            separate_recon = checked_file = checked_recon_file(recon)
        elif recon is not None and os.fspath(recon) != url:
            separate_recon = os.fspath(recon)
        store_file = sqlite_file_of(url)
        file_was_there = store_file is not None and store_file.exists()
        engine = make_engine(url, recon_path=recon_path, reading=not upgrade)
        try:
            try:
                connection = engine.connect()
            except OperationalError as exc:
                reason = connect_failure(exc)
                if reason is None or is_sqlite(url):  # a server's: SQLite's file is checked
                    raise
                raise StoreUnreachable(url, reason) from exc
            with connection:
                revision = current_revision(connection)
                check_known(revision)
            if not upgrade and revision != head_revision() and not is_sqlite_in_memory(url):
                shown = shown_url(url)
                if revision is None:
                    raise StoreVersionError(
                        f"{shown}: holds no ctxdb store (an empty database): a command that "
                        "reads never makes one; expected a store (`ctxdb db upgrade` makes "
                        "one, as does a command that writes)")
                raise StoreVersionError(
                    f"{shown}: the store is at schema revision {revision!r}, this ctxdb reads "
                    f"{head_revision()!r}: run `ctxdb db upgrade` first (a command that reads "
                    "never migrates a store other processes may be writing)")
            if revision != head_revision() and is_sqlite_in_memory(url):
                upgrade_in_memory(engine)
            elif revision is None and is_sqlite(url) and create_new_sqlite_store(engine):
                # a new store: the head schema made directly (migrate.py says why)
                if not file_was_there:
                    remember_store_made_here(store_file)
            elif revision != head_revision() and _revision_now(engine) != head_revision():
                # (another process may have just made this new store: then it is used)
                engine.dispose()  # nobody else holds the file while we upgrade
                upgrade_engine(url)
            elif upgrade:  # (a reader leaves the views as they are: view_drift says)
                with engine.connect() as connection:
                    # ctxdb's own: a view someone else added is no reason to rebuild them
                    drift = view_drift(connection, own_only=True)
                if drift:
                    # Views are derived from sql/views/: bring them in line with the files.
                    with immediate_transaction(engine) as connection:
                        drop_views(connection)
                        create_views(connection)
            recon_name = recon_path or (os.fspath(recon) if recon is not None else None)
            if recon is None and not is_sqlite(url):
                recon_name = url  # PostgreSQL: the recon schema of the same database, if built
            store = cls(engine, url, recon_name, settings, strict=strict)
            if separate_recon is not None:
                from .recon.schema import create_recon_engine

                # read-only, as the SQLite store's ATTACH is: a store never writes recon
                store._recon_engine = create_recon_engine(separate_recon, read_only=True)
            if recon is not None:
                if checked_file is None:  # a file's version was read before the store opened
                    store.check_recon()
                store._recon_available = True
            return store
        except BaseException:
            engine.dispose()
            raise

    def close(self) -> None:
        if self._recon_engine is not None:
            self._recon_engine.dispose()
        if self._preview_engine is not None:
            self._preview_engine.dispose()
        self.engine.dispose()

    @contextmanager
    def recon_connection(self, store_connection: Connection) -> Iterator[Connection]:
        """Where ``recon.*`` is readable: the store's own connection (ATTACHed file, or
        the schema recon of the same PostgreSQL database) or a separate recon file's."""
        if self._recon_engine is None:
            yield store_connection
        else:
            with self._recon_engine.connect() as connection:
                yield connection

    def remember_texts(self, digests: set[str]) -> None:
        if len(self.texts_stored) + len(digests) > TEXTS_REMEMBERED_MAX:
            self.texts_stored.clear()
        self.texts_stored |= digests

    def __enter__(self) -> ContextStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def write_retry(self) -> WriteRetry:
        """How this store's write transactions meet contention (settable)."""
        return self.writes.retry

    @write_retry.setter
    def write_retry(self, retry: WriteRetry) -> None:
        self.writes.retry = retry

    @property
    def lock_holds(self) -> deque[float]:
        """Seconds each write transaction held the write lock (SQLite) or was open
        (PostgreSQL), from its BEGIN to its COMMIT, the newest last."""
        return self.writes.lock_holds

    @property
    def write_retries(self) -> int:
        """How many write attempts were retried."""
        return self.writes.retries

    def write_transaction(self) -> AbstractContextManager[Connection]:
        """A connection in one write transaction (``BEGIN IMMEDIATE`` on SQLite, retried
        while another writer holds the lock, then ``StoreBusy``)."""
        return self.writes.write()

    def write(self, work: Callable[[Connection], Result],
              connection: Connection | None = None) -> Result:
        """``work(connection)`` in one write transaction, and its result. On PostgreSQL
        a transaction ended by a serialization failure or deadlock is rolled back and
        ``work`` run again (so it must only write through the connection), within the
        store's ``write_retry``; then ``StoreBusy``. ``connection``: a decision's own
        (``decision_connection``), where its preview's rows are; else one of the
        store's."""
        return self.writes.run(lambda: self.writes.write(connection), work)

    def preview(self, work: Callable[[Connection], Result],
                connection: Connection | None = None) -> Result:
        """``work(connection)`` in a transaction that writes nothing of the store, and its
        result: a decision's rows written and its gate run before it takes the write
        lock, or the ranking call. On SQLite the rows go to the preview's TEMP tables
        (``models.PREVIEW_TABLES``, with ``v_gate_rule`` over them as
        ``models.PREVIEW_GATE_VIEW``), on connections kept for previews: no write lock
        is taken. On ``connection`` (a decision's own, ``decision_connection``) they are
        committed there, for the decision's write to copy; otherwise rolled back.
        On PostgreSQL they go to the store's tables (row locks only) and are rolled back;
        a deadlock is retried as in ``write``."""
        if connection is not None:
            return self.writes.run(lambda: _committed(connection), work)
        return self.writes.run(self._preview, work)

    @contextmanager
    def decision_connection(self) -> Iterator[Connection | None]:
        """One connection for a whole decision on a SQLite file store — its preview, then
        its write — so the write copies the rows the preview wrote (TEMP tables: no write
        lock) instead of binding each again; None elsewhere. The write empties the
        preview's tables as it commits; a decision that fails before then leaves them
        to be dropped with the connection."""
        if self.dialect != "sqlite" or self._in_memory:
            yield None
            return
        with self._previews().connect() as connection:
            try:
                yield connection
            except BaseException:
                connection.invalidate()  # its TEMP tables may hold the failed decision's rows
                raise

    @property
    def _in_memory(self) -> bool:
        return self.dialect == "sqlite" and self.engine.url.database in (None, "", ":memory:")

    @contextmanager
    def _preview(self) -> Iterator[Connection]:
        in_memory = self._in_memory
        engine = self.engine
        if self.dialect == "sqlite" and not in_memory:
            engine = self._previews()
        with engine.connect() as connection:
            transaction = connection.begin()
            try:
                if in_memory:  # one shared connection: TEMP tables for this preview only
                    for statement in _preview_statements():
                        connection.exec_driver_sql(statement)
                yield connection
            finally:
                transaction.rollback()  # the preview's rows (in memory: and TEMP tables)

    def _previews(self) -> Engine:
        with self._preview_engine_lock:  # threads sharing the store make one engine
            if self._preview_engine is None:
                engine = make_engine(self.url, max_overflow=PREVIEW_POOL_UNBOUNDED)

                @event.listens_for(engine, "connect")
                def _preview_tables(dbapi_connection: sqlite3.Connection,
                                    _record: object) -> None:
                    # the TEMP tables in memory, not SQLite's temp file: rows committed
                    # and emptied each decision cost less there (emptying a 256-item
                    # pool's: 150 → 60 µs)
                    dbapi_connection.execute("PRAGMA temp_store=MEMORY")
                    for statement in _preview_statements():
                        dbapi_connection.execute(statement)

                self._preview_engine = engine
            return self._preview_engine

    def revision(self) -> str | None:
        with self.engine.connect() as connection:
            return current_revision(connection)

    def view_drift(self, *, own_only: bool = False) -> list[str]:
        """How the store's views differ from ``sql/views/`` (``own_only``: ctxdb's own)."""
        with self.engine.connect() as connection:
            return view_drift(connection, own_only=own_only)

    @property
    def recon_available(self) -> bool:
        """Whether SQL on this store's connections can read ``recon.*``."""
        if self._recon_available is None:
            try:
                self.check_recon()
                self._recon_available = True
            except (ReconNotFound, RuntimeError):
                self._recon_available = False
        return self._recon_available

    def construct(self, request: DecisionRequest | dict[str, Any] | str, *,
                  strict: bool | None = None) -> DecisionContext:
        """Build, record and return the window for one decision (one transaction).

        An item naming an entity recon cannot give the text of (no recon, an unknown
        key, an absolute path outside the indexed root, an empty index) is shown as a
        placeholder, flagged ``unresolved_entity:<item id>`` and warned about
        (``UnresolvedEntityWarning``); with ``strict`` (default: the store's) it raises
        ``UnresolvedEntityError`` naming each item and key, and writes nothing."""
        from .pipeline.construct import construct

        return construct(self, request, strict=self.strict if strict is None else strict)

    def entity_at(self, path: str, line: int, end_line: int | None = None) -> str | None:
        """The entity key of the innermost symbol whose span holds
        line ``line`` (to ``end_line``) of ``path`` in the recon index: where a
        traceback's ``path:line`` or an edit points. None without recon or a symbol there."""
        if not self.recon_available or not 1 <= line <= (end_line or line) <= STORE_INTEGER_MAX:
            return None
        from .recon.reader import ReconReader

        with self.engine.connect() as connection, self.recon_connection(connection) as rc:
            rows = ReconReader(rc).rows("recon/enclosing_symbol_of_span", {
                "path": path, "first_line": line, "last_line": end_line or line})
        return rows[0].key if rows else None

    def retrieve(self, task: str, *, failing_tests: Sequence[str] = (),
                 traceback: str | None = None, limit: int | None = None) -> Retrieval:
        """Candidate symbols and files for a task over this store's recon index
        (`ctxdb.retrieval.retrieve`): ranked, each symbol with the signals that found it."""
        from .retrieval import DEFAULT_LIMIT, retrieve

        if not self.recon_available:
            self.check_recon()  # raises with the reason
        with self.engine.connect() as connection, self.recon_connection(connection) as recon:
            return retrieve(recon, task, failing_tests=tuple(failing_tests), traceback=traceback,
                            limit=limit or DEFAULT_LIMIT)

    def record_outcome(self, run_id: str, instance_id: str, solved: bool,
                       cost_usd: float | None = None, model_tokens_in: float | None = None,
                       model_tokens_out: float | None = None) -> None:
        """Record what the harness achieved on an instance in a run (the A/B's outcomes)."""
        record_outcome(self, run_id, instance_id, solved, cost_usd, model_tokens_in,
                       model_tokens_out)

    def check_recon(self) -> None:
        """Raise unless the recon index is present and of this ctxdb's version."""
        from .recon.schema import check_recon_version

        if self._recon_engine is not None:
            with self._recon_engine.connect() as connection:
                check_recon_version(connection)
            return
        with self.engine.connect() as connection:
            if self.dialect == "sqlite":
                check_recon_version(connection)
            else:
                if not inspect(connection).has_schema("recon"):
                    raise ReconNotFound(
                        "schema 'recon' does not exist in this database; "
                        "build it with `ctxdb recon index PATH --recon <the same URL>`"
                    )
                check_recon_version(connection)

    def count_tokens(self, texts: Iterable[str], tokenizer: str | None = None) -> list[int]:
        """Token counts (bounded: ``ctxdb.tokens.bounded_count``), through the store's cache."""
        with self.write_transaction() as connection:
            return count_cached(connection, tokenizer or self.settings.tokenizer, texts)

    def verify(self, now: str | None = None) -> dict[str, list[dict[str, Any]]]:
        """Run every ``sql/checks/*.sql``; returns {check name: violating rows}, empty if
        clean. The decisions of a replay under way (``replays_under_way`` at ``now``,
        ``models.utc_timestamp``, by default the time of the call) are not counted."""
        violations: dict[str, list[dict[str, Any]]] = {}
        parameters = {**CHECK_PARAMETERS, "now": now or models.utc_timestamp()}
        with self.engine.connect() as connection:
            for check in check_files():
                rows = [dict(r._mapping) for r in connection.execute(
                    text(check.sql), parameters)]
                if rows:
                    violations[check.name] = rows
            # (ctxdb's own views: one someone else added breaks no rule of the store)
            drift = view_drift(connection, own_only=True)
        if drift:
            violations["view_drift"] = [{"problem": p} for p in drift]
        return violations

    def replays_under_way(self, now: str | None = None) -> list[dict[str, Any]]:
        """The replays whose lease holds at ``now`` (as ``verify``'s; ``replay_in_progress``,
        each host's clock setting its replays' leases): ``verify`` does not count their
        decisions yet. Oldest first."""
        table = models.replay_in_progress
        with self.engine.connect() as connection:
            return [dict(row._mapping) for row in connection.execute(
                select(table).where(table.c.expires_at > (now or models.utc_timestamp()))
                .order_by(table.c.started_at, table.c.run_id, table.c.instance_id))]

    def foreign_views(self) -> list[str]:
        """The views someone else added to the store's database (``verify`` names them;
        no upgrade touches them)."""
        with self.engine.connect() as connection:
            return foreign_views(connection)

    # --- forensics as library calls (the CLI's show / why / diff) ---------------------------
    # A decision is its id or its request hash (`req-…`, as masking pointers name it).

    def show(self, decision: int | str, item_id: str | None = None) -> str:
        """The window exactly as it was sent; with ``item_id``, that item's full text (the
        uncut original when the pool cut it)."""
        from . import forensics

        with self.engine.connect() as connection:
            decision_id = forensics.resolve_decision(connection, decision)
            if item_id is None:
                return forensics.rendered_window(connection, decision_id)
            row = forensics.item(connection, decision_id, item_id)
        text: str = row["original_content"] if row["original_content"] is not None \
            else row["content"]
        return text

    def request_as_given(self, decision: int | str) -> Any:
        """The request a decision was built from, exactly as the caller gave it (decoded
        from JSON): nothing the harness sent is lost (an agent loop's steps are stored
        once per run and put back here)."""
        from . import forensics

        with self.engine.connect() as connection:
            return forensics.request_as_given(
                connection, forensics.resolve_decision(connection, decision))

    def messages_sent(self, decision: int | str) -> list[dict[str, Any]]:
        """The chat messages a decision sent (``ctxdb show --format messages``): an
        agent-loop window after its harness prompt, as cache-marked blocks when it went so
        (flag ``cache_marked``); a ``current`` loop decision's messages as the harness
        sent them when given (``sent=``); else ``context(decision).messages()``."""
        from . import forensics

        with self.engine.connect() as connection:
            return forensics.messages_sent(
                connection, forensics.resolve_decision(connection, decision))

    def context(self, decision: int | str) -> DecisionContext:
        """The DecisionContext ``construct`` returned for a decision, read back from the
        store (``render()``, ``messages()`` and ``to_json()`` as they were)."""
        from . import forensics

        with self.engine.connect() as connection:
            return forensics.context(connection, forensics.resolve_decision(connection, decision))

    def why(self, decision: int | str, item: str) -> list[dict[str, Any]]:
        """Every stage's action on one item, in order (``v_why``); ``item`` is its id
        (``E7``) or its entity key (the first evidence item of that entity in the pool)."""
        from . import forensics

        with self.engine.connect() as connection:
            decision_id = forensics.resolve_decision(connection, decision)
            item_id = forensics.item_id_of(connection, decision_id, item)
            return [dict(row) for row in forensics.why(connection, decision_id, item_id)]

    def diff(self, decision_a: int | str, decision_b: int | str) -> WindowDiff:
        """What entered, left or changed rendering between two windows, by fact identity
        (``forensics.WindowDiff``)."""
        from . import forensics

        with self.engine.connect() as connection:
            return forensics.diff(connection, forensics.resolve_decision(connection, decision_a),
                                  forensics.resolve_decision(connection, decision_b))


def _revision_now(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return current_revision(connection)


def checked_recon_file(recon: str | os.PathLike[str]) -> str:
    """The recon index file ``recon`` names, checked before a store is opened with it: it
    exists, is a file and holds a recon index of this code's versions."""
    from .recon.schema import ReconVersionError, check_meta, create_recon_engine, read_meta

    path = Path(recon).expanduser().resolve()
    if path.is_dir():
        raise ReconNotFound(f"recon index {path} is a directory; expected a recon index file "
                            f"(build one with `ctxdb recon index PATH --recon FILE`)")
    if not path.is_file():
        raise ReconNotFound(
            f"recon index {path} does not exist; "
            f"build it with `ctxdb recon index PATH --recon {recon}`"
        )
    engine = create_recon_engine(path, read_only=True)
    try:
        with engine.connect() as connection:
            check_meta(read_meta(connection), path)
    except DatabaseError as exc:
        reason = exc.orig if exc.orig is not None else exc
        if getattr(reason, "sqlite_errorcode", None) != sqlite3.SQLITE_NOTADB:
            raise ReconVersionError(  # a locked or unreadable index: the driver's reason
                f"recon index {path} cannot be read: {str(reason).splitlines()[0]}") from exc
        raise ReconVersionError(
            f"recon index {path} is not a SQLite database; expected a recon index "
            f"(build one with `ctxdb recon index PATH --recon {recon}`)") from exc
    finally:
        engine.dispose()
    return str(path)


@contextmanager
def _committed(connection: Connection) -> Iterator[Connection]:
    """A transaction on ``connection`` that commits when its work returns."""
    with connection.begin():
        yield connection


@functools.cache
def _preview_statements() -> tuple[str, ...]:
    """The preview's TEMP tables (``models.PREVIEW_TABLES``) with their indexes, and the
    gate's view over them (``models.PREVIEW_GATE_VIEW``): ``v_gate_rule`` reading each
    preview copy where it reads the store's table."""
    dialect = sqlite_dialect.dialect()
    statements = []
    for table in models.PREVIEW_TABLES.values():
        statements.append(str(CreateTable(table).compile(dialect=dialect)))
        for index in sorted(table.indexes, key=lambda i: str(i.name)):  # the gate's lookups
            statements.append(str(CreateIndex(index).compile(dialect=dialect)))
    copies = {table.name: copy.name for table, copy in models.PREVIEW_TABLES.items()}
    gate = next(f for f in view_files() if f.name == models.GATE_VIEW)
    view = _READ_TABLE.sub(lambda m: f"{m[1]} {copies.get(m[2], m[2])}", gate.sql)
    statements.append(_CREATE_VIEW.sub(f"CREATE TEMP VIEW {models.PREVIEW_GATE_VIEW}", view,
                                       count=1))
    return tuple(statements)
