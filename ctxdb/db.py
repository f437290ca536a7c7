"""Engines for the store: SQLite (the embedded default) or PostgreSQL.

SQLite connections get WAL (readers never block the writer) with
synchronous=NORMAL, foreign keys on, and a busy timeout; transactions are begun explicitly so that one decision is
one transaction, DDL included, and a writer can ask for ``BEGIN IMMEDIATE``
to take the write lock up front instead of failing on a lock upgrade.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

DEFAULT_DB_PATH = "ctx08.db"
DB_URL_ENV = "CTXDB_URL"
# How long a SQLite writer waits for another writer before giving up.
SQLITE_BUSY_TIMEOUT_MS = 10_000
# Execution option naming the SQLite BEGIN mode for a connection's transactions.
SQLITE_BEGIN_OPTION = "ctxdb_sqlite_begin"
SQLITE_BEGIN_MODES = ("DEFERRED", "IMMEDIATE")


def resolve_url(url_or_path: str | os.PathLike | None = None) -> str:
    """A SQLAlchemy URL from a URL, a file path, ``$CTXDB_URL``, or ``./ctx08.db``."""
    value = url_or_path if url_or_path is not None else os.environ.get(DB_URL_ENV, DEFAULT_DB_PATH)
    value = os.fspath(value)
    if "://" in value:
        url = make_url(value)  # raises ArgumentError naming the bad URL
        if url.get_backend_name() not in ("sqlite", "postgresql"):
            raise ValueError(
                f"database URL {value!r}: expected a sqlite:// or postgresql:// URL"
            )
        return value
    if value == ":memory:":
        return "sqlite://"
    return f"sqlite:///{Path(value).expanduser().resolve()}"


def read_only_uri(path: str) -> str:
    """A SQLite URI filename that opens ``path`` read-only."""
    return Path(path).absolute().as_uri() + "?mode=ro"


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def make_engine(url: str, *, recon_path: str | None = None, foreign_keys: bool = True) -> Engine:
    """An engine on ``url``; on SQLite, ``recon_path`` is ATTACHed as schema ``recon``."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "postgresql":
        return create_engine(url, pool_pre_ping=True)

    in_memory = parsed.database in (None, "", ":memory:")
    engine = create_engine(
        url,
        # One shared connection for an in-memory database, or each would be empty.
        poolclass=StaticPool if in_memory else None,
        # uri: the recon file is attached by a read-only URI filename
        connect_args={"check_same_thread": False, "uri": True} if in_memory else {"uri": True},
    )

    @event.listens_for(engine, "connect")
    def _configure_sqlite(dbapi_connection, _record):
        # Let SQLAlchemy's "begin" event below issue BEGIN itself (pysqlite's own
        # implicit transactions do not cover DDL or SELECT).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if not in_memory:
            cursor.execute("PRAGMA journal_mode=WAL")
            # WAL's recommended setting: a crash of the process never loses or corrupts
            # a committed decision; a power cut may roll back the last few commits.
            cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_MS)}")
        cursor.execute(f"PRAGMA foreign_keys={'ON' if foreign_keys else 'OFF'}")
        if recon_path is not None:
            # Read-only: a decision's BEGIN IMMEDIATE would otherwise write-lock the recon
            # file too, and its commit would wait on anyone reading recon (a rollback-
            # journal file), or stall an index run for as long as a decision lasts.
            cursor.execute("ATTACH DATABASE ? AS recon", (read_only_uri(recon_path),))
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection):
        mode = connection.get_execution_options().get(SQLITE_BEGIN_OPTION, "DEFERRED")
        if mode not in SQLITE_BEGIN_MODES:
            raise ValueError(f"{SQLITE_BEGIN_OPTION} must be one of {SQLITE_BEGIN_MODES}")
        connection.exec_driver_sql(f"BEGIN {mode}")

    return engine
