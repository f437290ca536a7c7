"""The recon indexer's database access: a write transaction on the driver's own
connection, statements from ``sql/recon/`` in the driver's parameter style, the tables'
DDL, the index's generation and root in recon_meta, and a helper thread for bulk work."""

from __future__ import annotations

import os
import queue
import threading
import uuid
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql.compiler import BIND_PARAMS, BIND_PARAMS_ESC

from ctxdb.db import insert_statement, sqlite_driver
from ctxdb.recon import schema
from ctxdb.sqlfiles import load_sql, sql_statement
from ctxdb.workers import usable_cpu_count

# SQLite's page cache for a write transaction (a cold build's load), and for a connection
# kept open between runs (SQLite's default size).
LOAD_CACHE_KIB = 65536
KEPT_CACHE_KIB = 2000


class Writer:
    """Raw DB-API access for bulk writes: statements of ``sql/recon/`` (`compiled_sql`),
    bulk INSERTs built from the schema, the schema's DDL, and the transaction itself."""

    def __init__(self, engine: sa.Engine) -> None:
        self.dialect = engine.dialect
        self.sqlite = self.dialect.name == "sqlite"
        # used through the driver alone: SQLAlchemy never begins a transaction on it
        self.connection = engine.connect()
        self.raw = self.connection.connection
        if self.sqlite:
            sqlite_driver(self.connection).isolation_level = None  # explicit BEGIN/COMMIT below
        self.cur = self.raw.cursor()

    def ddl(self, statement: str) -> None:
        """A DDL statement the schema module built (it takes no parameters)."""
        self.cur.execute(statement)

    def run(self, name: str, /, **params: Any) -> Any:
        """The statement of ``sql/<name>.sql`` with these parameters; the cursor."""
        sql, order = compiled_sql(name, self.dialect)
        self.cur.execute(sql, params if order is None else tuple(params[k] for k in order))
        return self.cur

    def run_many(self, name: str, rows: list[dict[str, Any]]) -> None:
        if rows:
            sql, order = compiled_sql(name, self.dialect)
            self.cur.executemany(
                sql, rows if order is None else [tuple(r[k] for k in order) for r in rows])

    def run_rows(self, name: str, names: tuple[str, ...], rows: list[tuple]) -> None:
        """`run_many` with each row a tuple of the parameters `names` (no dict per row:
        passed as they are when the statement takes them in that order)."""
        if not rows:
            return
        sql, order = compiled_sql(name, self.dialect)
        if order is None:
            params: list = [dict(zip(names, row, strict=True)) for row in rows]
        elif order == names:
            params = rows
        else:
            at = [names.index(name) for name in order]
            params = [tuple(row[i] for i in at) for row in rows]
        self.cur.executemany(sql, params)

    def insert(self, table: sa.Table, rows: list[tuple], columns: tuple[str, ...] = ()) -> None:
        """Rows in `columns` order (default: all of the table's). On SQLite, as many rows
        a statement as SQLITE_PARAMS_PER_INSERT parameters hold while that many are left
        (the driver's per-row cost is most of an executemany's: Django's 158k edges took
        0.68 s one a row, 0.50 s 142 a statement, 0.10 s the insert itself), then one a row."""
        if not rows:
            return
        columns = columns or tuple(table.columns.keys())
        per_statement = SQLITE_PARAMS_PER_INSERT // len(columns) if self.sqlite else 1
        whole = len(rows) - len(rows) % per_statement if per_statement > 1 else 0
        if whole:
            self.cur.executemany(self._insert_sql(table, columns, per_statement), [
                tuple(chain.from_iterable(rows[start:start + per_statement]))
                for start in range(0, whole, per_statement)])
        if whole < len(rows):
            self.cur.executemany(self._insert_sql(table, columns, 1), rows[whole:])

    def _insert_sql(self, table: sa.Table, columns: tuple[str, ...], rows: int) -> str:
        dialect = self.dialect
        key = (table.fullname, columns, rows, dialect.name, dialect.driver, dialect.paramstyle)
        sql = _INSERTS.get(key)
        if sql is None:
            sql = _INSERTS[key] = insert_statement(dialect, table, columns, rows=rows)
        return sql

    def begin(self) -> None:
        if self.sqlite:
            self.cur.execute("PRAGMA recon.synchronous=NORMAL")
            self.cur.execute(f"PRAGMA recon.cache_size=-{LOAD_CACHE_KIB}")
            self.cur.execute("PRAGMA temp_store=MEMORY")  # index builds sort in memory
            self.cur.execute(f"PRAGMA threads={usable_cpu_count()}")  # ... with helper threads
            self.cur.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        if self.sqlite:
            self.cur.execute("COMMIT")
        else:
            self.raw.commit()

    def rollback(self) -> None:
        try:
            if self.sqlite:
                if sqlite_driver(self.connection).in_transaction:
                    self.cur.execute("ROLLBACK")
            else:
                self.raw.rollback()
        except Exception:  # noqa: BLE001 - keep the original error
            pass

    def close(self) -> None:
        if self.sqlite:
            # the connection may be kept open between runs: not with the load's cache
            try:
                self.cur.execute(f"PRAGMA recon.cache_size=-{KEPT_CACHE_KIB}")
            except Exception:  # noqa: BLE001 - keep the original error; drop the connection
                self.connection.invalidate()
        self.connection.close()


# compiled statements by (name, database, driver, parameter style): every run has an
# engine, and so a dialect instance, of its own, and compiling costs ~0.4 ms a statement
_COMPILED: dict[tuple[str, str, str, str], tuple[str, tuple[str, ...] | None]] = {}
# the bulk INSERTs likewise, by (table, columns, rows, database, driver, parameter style)
_INSERTS: dict[tuple[str, tuple[str, ...], int, str, str, str], str] = {}
QMARK = "qmark"
# Parameters one bulk INSERT on SQLite binds at most: SQLite's bound before 3.32 (999),
# so any version takes the statement.
SQLITE_PARAMS_PER_INSERT = 999


def compiled_sql(name: str, dialect: sa.engine.Dialect) -> tuple[str, tuple[str, ...] | None]:
    """``sql/<name>.<database>.sql`` or ``sql/<name>.sql`` in the driver's parameter
    style, and the parameters' order for a positional style (None: by name)."""
    key = (name, dialect.name, dialect.driver, dialect.paramstyle)
    found = _COMPILED.get(key)
    if found is None:
        found = _COMPILED[key] = _compile_sql(name, dialect)
    return found


def _compile_sql(name: str, dialect: sa.engine.Dialect) -> tuple[str, tuple[str, ...] | None]:
    try:  # a statement written for this database, else the common one
        text = load_sql(f"{name}.{dialect.name}")
    except FileNotFoundError:
        text = load_sql(name)
    if dialect.paramstyle == QMARK:
        return qmark_sql(text)
    compiled = sa.text(text).compile(dialect=dialect)
    order = compiled.positiontup
    return str(compiled), (tuple(order) if order is not None else None)


def create_tables(w: Writer, drop: bool) -> None:
    if not w.sqlite:
        w.run("recon/index_create_schema")
    if drop:
        for stmt in schema.drop_statements(w.dialect):
            w.ddl(stmt)
    for stmt in schema.table_ddl(w.dialect):
        w.ddl(stmt)


def create_indexes(w: Writer, *, edges: bool) -> None:
    for stmt in schema.index_ddl(w.dialect, edges=edges):
        w.ddl(stmt)


def write_meta(w: Writer) -> None:
    w.run("recon/index_clear_meta")
    w.insert(schema.recon_meta, sorted(schema.current_meta().items()))


def ensure_generation(engine: sa.Engine, root: str) -> None:
    """Give an index written before generations existed its first one, and record the
    indexed root where it is missing or another (a read, and a write only then: a
    no-change run of a current index takes no write lock)."""
    with engine.connect() as connection:
        if read_generation(connection) is not None and read_root(connection) == root:
            return
    with write_transaction(engine) as w:
        row = w.run("recon/index_meta_value", key=schema.ROOT_KEY).fetchone()
        if row is None or row[0] != root:
            write_root(w, root)
            # what an absolute path resolves to changed: readers must read afresh
            write_generation(w)
            return
        row = w.run("recon/index_meta_value", key=schema.GENERATION_KEY).fetchone()
        if row is None:  # another indexer may have written one meanwhile
            write_generation(w)


@contextmanager
def write_transaction(engine: sa.Engine):
    """A Writer in one transaction: committed on success, rolled back on any error."""
    w = Writer(engine)
    try:
        w.begin()
        yield w
        w.commit()
    except BaseException:
        w.rollback()
        raise
    finally:
        w.close()


def read_generation(connection: sa.Connection) -> str | None:
    return connection.execute(sql_statement("recon/snapshot_identity"),
                              {"generation_key": schema.GENERATION_KEY}).one().generation


def read_root(connection: sa.Connection) -> str | None:
    """The indexed directory's real path, or None for an index that predates it."""
    return connection.execute(sql_statement("recon/indexed_root"),
                              {"root_key": schema.ROOT_KEY}).scalar()


def indexed_root(root: str | os.PathLike) -> str:
    """What recon_meta records as the root: the real path the walk resolves paths
    under (symlinks followed, as walk_python_files does), in posix form."""
    return Path(os.path.realpath(root)).as_posix()


def write_root(w: Writer, root: str) -> None:
    w.run("recon/index_delete_meta", key=schema.ROOT_KEY)
    w.insert(schema.recon_meta, [(schema.ROOT_KEY, root)])


def write_generation(w: Writer) -> str:
    """A new snapshot identity, in the transaction that changes the index: readers may
    keep what they read of one generation for as long as it is current."""
    generation = uuid.uuid4().hex
    w.run("recon/index_delete_meta", key=schema.GENERATION_KEY)
    w.insert(schema.recon_meta, [(schema.GENERATION_KEY, generation)])
    return generation


def create_added_tables(w: Writer) -> None:
    for stmt in schema.added_table_ddl(w.dialect):
        w.ddl(stmt)


def stored_generation(w: Writer) -> str | None:
    row = w.run("recon/index_generation", generation_key=schema.GENERATION_KEY).fetchone()
    return row[0] if row is not None else None


class DatabaseThread:
    """Runs submitted database calls in order on one helper thread.

    The first error stops the remaining calls and is raised on exit.
    """

    def __init__(self) -> None:
        self._jobs: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="recon-db", daemon=True)

    def __enter__(self) -> DatabaseThread:
        self._thread.start()
        return self

    def submit(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        if self._error is not None:
            raise self._error
        self._jobs.put((fn, args, kwargs))

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            if self._error is None:
                fn, args, kwargs = job
                try:
                    fn(*args, **kwargs)
                except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
                    self._error = exc

    def __exit__(self, *exc_info: Any) -> None:
        self._jobs.put(None)
        self._thread.join()
        if self._error is not None and exc_info[0] is None:
            raise self._error


def qmark_sql(text: str) -> tuple[str, tuple[str, ...]]:
    """A ``sql/`` statement in the qmark parameter style (SQLite's driver), and its
    parameters in order: what SQLAlchemy's compile gives (a test compares them for every
    statement), without its ~0.4 ms a statement — a process's first incremental run
    uses ~16 statements a cold build does not. SQLAlchemy's own patterns for a bind
    parameter and an escaped colon, so the statement reads as its compile reads it."""
    return (BIND_PARAMS_ESC.sub(r"\1", BIND_PARAMS.sub("?", text)),
            tuple(BIND_PARAMS.findall(text)))
