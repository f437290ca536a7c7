"""Engines for the store: SQLite (the embedded default) or PostgreSQL.

`sqlite_engine` makes every SQLite engine, the store's and the recon index's;
`insert_statement` builds every bulk INSERT, the store's and the recon indexer's. The
store's connections get WAL (readers never block the writer) with synchronous=NORMAL,
foreign keys on, and a busy timeout; transactions are begun explicitly so that one
decision is one transaction, DDL included, and a writer can ask for ``BEGIN IMMEDIATE``
to take the write lock up front instead of failing on a lock upgrade.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import re
import sqlite3
import time
from collections.abc import Collection
from pathlib import Path
from typing import cast

from sqlalchemy import Connection, Engine, Table, create_engine, event
from sqlalchemy.engine import Dialect, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError
from sqlalchemy.pool import Pool, StaticPool

from .config import DB_URL_ENV, DEFAULT_DB_PATH  # noqa: F401  (named here for importers)
from .paths import extra_install_hint

# How long a SQLite writer waits for another writer before giving up.
SQLITE_BUSY_TIMEOUT_MS = 10_000
# Between tries to switch a new store to WAL while another connection does (_use_wal).
WAL_SWITCH_RETRY_S = 0.01
# what a reset WAL file keeps of its length (journal_size_limit): nothing
WAL_KEPT_BYTES = 0
# Execution option naming the SQLite BEGIN mode for a connection's transactions.
SQLITE_BEGIN_OPTION = "ctxdb_sqlite_begin"
SQLITE_BEGIN_MODES = ("DEFERRED", "IMMEDIATE")
PG_DRIVER = "psycopg"  # the PostgreSQL driver: ctxdb's extra `postgresql` installs it
# alembic's default table, where a store's schema stamp is kept; a ctxdb store has it
# beside its own tables (from the first migration on, e.g. `decision`).
VERSION_TABLE = "alembic_version"
STORE_MARK_TABLE = "decision"
# the store's tables of what a user gave it: a store holding none of them holds only its
# schema and what a command made of its own arguments (a run row a replay opens with)
STORE_TABLES_OF_WHAT_IS_GIVEN = ("decision", "outcome")
RECON_MARK_TABLE = "recon_meta"  # what a recon index has (recon/schema.py)
TABLES_NAMED_MAX = 5  # how many of a foreign database's tables a refusal names
CONNECT_REASON_MAX_CHARS = 200  # of a driver's message quoted in a one-line error


class NotAStoreError(ValueError):
    """The database given as the store is not a ctxdb store: a directory, a file that is
    not SQLite, another application's database, a recon index. Nothing is written to it."""


# a URL's query keys that hold a secret (libpq's password, sslpassword): hidden when shown
_SECRET_QUERY_KEY = re.compile(r"pass|secret|token", re.IGNORECASE)
_HIDDEN = "hidden-by-ctxdb"  # a secret's stand-in while the URL is rendered


def shown_url(url: str) -> str:
    """``url`` as a message shows it: its password hidden, in the user part and in any
    query key that holds one (``?password=…``, which libpq reads too)."""
    parsed = make_url(url)
    hidden = {key: _HIDDEN for key in parsed.query if _SECRET_QUERY_KEY.search(key)}
    # (the URL quotes the stand-in: shown as the user part's is)
    return parsed.update_query_dict(hidden).render_as_string(hide_password=True) \
        .replace(f"={_HIDDEN}", "=***")


class StoreUnreachable(ConnectionError):
    """The store's database server could not be reached when the store opened (refused,
    unknown host, bad password…): ``reason`` is the driver's first line. The URL in the
    message hides its password."""

    def __init__(self, url: str, reason: str):
        self.reason = reason
        super().__init__(f"database {shown_url(url)}: cannot connect: {reason}; expected a "
                         "reachable server that takes these credentials")


def connect_failure(exc: BaseException) -> str | None:
    """Why a database could not be reached, when ``exc`` is a failure to connect (an
    OperationalError raised before any statement: refused, unknown host, bad password),
    as the driver's first line; else None."""
    if not isinstance(exc, OperationalError) or exc.statement is not None:
        return None
    return str(exc.orig or exc).strip().splitlines()[0][:CONNECT_REASON_MAX_CHARS]


# what to do about a connection the server refused, by the driver's words (PostgreSQL's)
_CONNECT_HINTS = (
    ("password authentication failed", "check the URL's user and password (or the "
     "password file ~/.pgpass, $PGPASSWORD)"),
    ("does not exist", "make it first (CREATE DATABASE / CREATE ROLE, or createdb "
     "--owner ROLE NAME), or name one the server holds"),
    ("connection refused", "is the server running, and listening on that host and port?"),
    ("no such file or directory", "is the server running, with its socket in the "
     "directory the URL names (host=…)?"),
    ("name or service not known", "check the URL's host name"),
    ("could not translate host name", "check the URL's host name"),
    ("timeout expired", "is the host reachable from here (a firewall, the port)?"),
)


def connect_hint(reason: str) -> str:
    """What to do about a failure to connect whose driver's first line is ``reason``
    (``; `` and the hint), or nothing when the words are not known."""
    lowered = reason.lower()
    return next((f"; {hint}" for words, hint in _CONNECT_HINTS if words in lowered), "")


# PostgreSQL's SQLSTATE for a statement the role has no privilege for
INSUFFICIENT_PRIVILEGE_SQLSTATE = "42501"
READ_ONLY_SQLITE = "readonly database"  # SQLite's words for a file it may not write


def refusal_wanted(refused: str) -> str:
    """What a command the database refused for want of rights needed, by its words."""
    if READ_ONLY_SQLITE in refused:
        return ("a database file this user may write (a command that writes; check its and "
                "its directory's permissions)")
    if "must be owner of" in refused:
        return ("the role that owns the store's tables and views (an upgrade rebuilds "
                "them; docs/commands.md, PostgreSQL)")
    if "for sequence" in refused:
        return ("a role that may use the store's sequences too, to write (GRANT USAGE ON "
                "ALL SEQUENCES IN SCHEMA public TO <role>; docs/commands.md, PostgreSQL)")
    if "for schema recon" in refused or "recon." in refused:
        return ("a role that may read the recon index's schema too (GRANT USAGE ON SCHEMA "
                "recon, SELECT ON ALL TABLES IN SCHEMA recon; docs/commands.md, PostgreSQL)")
    return "a role that may read its tables (and write them, for a command that writes)"


def store_problem(tables: Collection[str]) -> str | None:
    """Why a database holding ``tables`` (its default schema's) is not a ctxdb store, or
    None: an empty database (a new store) or one with ctxdb's stamp and tables."""
    tables = set(tables)
    if not tables or {VERSION_TABLE, STORE_MARK_TABLE} <= tables:
        return None
    if RECON_MARK_TABLE in tables:
        return "is a recon index (give it as --recon), not a ctxdb store"
    named = ", ".join(sorted(tables)[:TABLES_NAMED_MAX])
    more = f" and {len(tables) - TABLES_NAMED_MAX} more" if len(tables) > TABLES_NAMED_MAX else ""
    if VERSION_TABLE in tables:
        return f"has an alembic stamp but none of ctxdb's tables ({named}{more}): not a ctxdb store"
    return f"holds tables of its own ({named}{more}) and no ctxdb schema stamp: not a ctxdb store"


SQLITE_FILE_SUFFIXES = ("", "-wal", "-shm", "-journal")  # a database and its side files
# The store files this process made (device, inode): the only ones it may take back
_STORE_FILES_MADE_HERE: set[tuple[int, int]] = set()


def remember_store_made_here(path: Path | None) -> None:
    """Note that this process made the SQLite store file at ``path``."""
    if path is not None:
        made = path.stat()
        _STORE_FILES_MADE_HERE.add((made.st_dev, made.st_ino))


def stores_made_here() -> frozenset[tuple[int, int]]:
    """The store files this process has made so far (device, inode)."""
    return frozenset(_STORE_FILES_MADE_HERE)


def discard_store_made_here(path: Path | None,
                            made_before: frozenset[tuple[int, int]] = frozenset()) -> bool:
    """Remove the SQLite store file at ``path`` (and SQLite's side files) when this
    process made it, after ``made_before`` was taken (a command takes back only a store
    it made itself), and it holds no decision or outcome: nothing a user gave (its
    seeded policy rows, token cache and a run row alone are made again at will). Judged
    under an exclusive lock, which a connection writing it refuses; a file another
    process made, or one that cannot be read or locked at once, is left alone. Returns
    whether it went."""
    if path is None:
        return False
    try:
        found = path.stat()
    except OSError:
        return False
    made = (found.st_dev, found.st_ino)
    if made not in _STORE_FILES_MADE_HERE or made in made_before:
        return False
    try:
        connection = sqlite3.connect(os.fspath(path), timeout=0, isolation_level=None)
    except sqlite3.Error:
        return False
    try:
        connection.execute("BEGIN EXCLUSIVE")
        if any(connection.execute(f"SELECT EXISTS (SELECT 1 FROM {table})").fetchone()[0]
               for table in STORE_TABLES_OF_WHAT_IS_GIVEN):
            return False
        for suffix in SQLITE_FILE_SUFFIXES:  # while the lock keeps writers out
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        _STORE_FILES_MADE_HERE.discard(made)
        return True
    except sqlite3.Error:
        return False
    finally:
        connection.close()


def sqlite_file_of(url: str) -> Path | None:
    """The file a SQLite URL names (None: in memory, or not SQLite)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    path = parsed.database
    if not path or path == ":memory:":
        return None
    uri_value = parsed.query.get("uri", "")
    is_uri = (uri_value if isinstance(uri_value, str) else uri_value[-1]).lower() in ("true", "1")
    # without uri=true SQLAlchemy opens "file:…" as a file of that very name
    if is_uri and path.startswith("file:"):
        from urllib.parse import parse_qs, unquote, urlparse

        parts = urlparse(path)
        # file:PATH?mode=ro: the file is PATH, percent-decoded as SQLite decodes it
        path = unquote(parts.path)
        # the mode may sit in the file: URI or, as SQLAlchemy parses it, in the URL's query
        url_mode = parsed.query.get("mode", ())
        modes = [*parse_qs(parts.query).get("mode", []),
                 *([url_mode] if isinstance(url_mode, str) else url_mode)]
        if path == ":memory:" or "memory" in modes:
            raise NotAStoreError(
                f"store database URL {url[:80]!r}: a shared in-memory database is not a "
                "store ctxdb can open (its upgrade and previews need connections of their "
                "own); expected sqlite:// for a store in memory, or a file")
    return Path(path)


def is_sqlite_in_memory(url: str) -> bool:
    """Whether ``url`` is a SQLite database in memory: ``sqlite://``, ``:memory:``, or a
    shared in-memory URI (which ``sqlite_file_of`` refuses)."""
    if not is_sqlite(url):
        return False
    try:
        return sqlite_file_of(url) is None
    except NotAStoreError:
        return True


# sqlite3 reports extended result codes: the primary code is the low byte
# (sqlite.org/rescode.html).
_PRIMARY_CODE_MASK = 0xFF
# Why SQLite could not look into a file that is no fault of the file: where it is, or
# who may read it (a read-only directory without the WAL's index, say).
_CANNOT_LOOK = (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM, sqlite3.SQLITE_AUTH,
                sqlite3.SQLITE_READONLY)


def check_store_file(url: str) -> None:
    """Refuse a SQLite store that cannot be a ctxdb store before anything opens it (the
    store's connections switch a file to WAL, and an upgrade would add ctxdb's tables
    to someone else's database). A file not there yet, or empty, is a new store."""
    path = sqlite_file_of(url)
    if path is None:
        return
    where = f"store database {os.fsdecode(path)!r}"
    try:
        os.fspath(path).encode("utf-8")
    except UnicodeEncodeError:
        raise NotAStoreError(f"{where}: expected a file name that is UTF-8 (SQLite's "
                             "file names are)") from None
    if path.is_dir():
        raise NotAStoreError(f"{where} is a directory: expected a ctxdb store file")
    if not path.exists():
        if not path.parent.is_dir():
            raise NotAStoreError(f"{where}: directory {str(path.parent)!r} does not exist")
        return
    if not path.is_file():
        raise NotAStoreError(f"{where} is not a regular file: expected a ctxdb store file")
    if path.stat().st_size == 0:
        return  # a new store (looking through SQLite would discard a stale WAL beside it)
    if not os.access(path, os.R_OK):
        raise NotAStoreError(f"{where} is not readable (permission denied): expected a "
                             "ctxdb store this user can read and write")
    # Looked at through SQLite only, never by opening the file ourselves: POSIX locks
    # belong to the process, and closing any descriptor of the file would drop the locks
    # of this process's open connections on it (SQLite's own descriptors are closed
    # only once no connection of the process holds a lock). Another process's last close
    # would then checkpoint and delete the WAL under those connections.
    try:
        # read-only: looking must not change the file (not even its journal mode)
        with contextlib.closing(sqlite3.connect(read_only_uri(os.fspath(path)), uri=True,
                                                timeout=SQLITE_BUSY_TIMEOUT_MS / 1000)
                                ) as connection:
            tables = [row[0] for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'")]
    except sqlite3.DatabaseError as exc:
        primary_code = (getattr(exc, "sqlite_errorcode", None) or 0) & _PRIMARY_CODE_MASK
        if primary_code == sqlite3.SQLITE_NOTADB:
            raise NotAStoreError(f"{where} is not a SQLite database (SQLite finds no "
                                 "database in it), so not a ctxdb store; its data was "
                                 "left untouched") from exc
        if primary_code in _CANNOT_LOOK:
            raise NotAStoreError(f"{where} cannot be opened here ({exc}): expected a ctxdb "
                                 "store in a place this user can read and write") from exc
        raise NotAStoreError(f"{where} is a damaged SQLite file or not one ({exc}): expected "
                             "a ctxdb store; its data was left untouched") from exc
    problem = store_problem(tables)
    if problem is not None:
        raise NotAStoreError(f"{where} {problem}; its data was left untouched")


def resolve_url(url_or_path: str | os.PathLike[str] | None = None) -> str:
    """A SQLAlchemy URL from a URL, a file path, ``$CTXDB_URL``, or ``./ctx08.db``."""
    value = url_or_path if url_or_path is not None else os.environ.get(DB_URL_ENV, DEFAULT_DB_PATH)
    value = os.fspath(value)
    if "://" in value:
        # the scheme only: the rest may hold a password
        shown = f"{value.split('://', 1)[0][:40]}://…"
        try:
            url = make_url(value)
        except (ArgumentError, ValueError) as exc:
            raise ValueError(f"database URL {shown}: not a URL SQLAlchemy can read ({exc}); "
                             "expected a sqlite:// or postgresql+psycopg:// URL") from exc
        if url.get_backend_name() not in ("sqlite", "postgresql"):
            raise ValueError(
                f"database URL {shown}: expected a sqlite:// or postgresql+psycopg:// URL"
            )
        if url.get_backend_name() == "postgresql" and url.get_driver_name() != PG_DRIVER:
            raise ValueError(f"database URL {shown}: expected postgresql+{PG_DRIVER}:// "
                             f"(ctxdb reaches PostgreSQL through {PG_DRIVER}, psycopg 3)")
        if url.get_backend_name() == "postgresql":
            require_pg_driver(shown)
        return value
    if value == ":memory:":
        return "sqlite://"
    path = Path(value).expanduser()
    _refuse_a_directory_path(value, path)
    if "?" in str(path.resolve()):
        # a URL's query starts there: SQLAlchemy's URL would name the file before it
        raise ValueError(f"store path {str(path.resolve())!r}: a '?' in the path cannot be "
                         "given as a sqlite:/// URL (its query starts there); expected a "
                         "path without one")
    return f"sqlite:///{path.resolve()}"


def _refuse_a_directory_path(given: str, path: Path) -> None:
    """A path written as a directory's (``dir/``, ``dir/.``) that is none: SQLite would
    make a file of that name. (An existing directory is refused where the store opens.)"""
    written_as_directory = given.endswith(("/", os.sep)) or \
        Path(given).name in ("", ".", "..") or given.endswith(("/.", "/.."))
    if not written_as_directory or path.is_dir():
        return
    if path.is_file():
        raise ValueError(f"store path {given!r}: written as a directory's, but it is a "
                         f"file; expected {str(path)!r}")
    raise ValueError(f"store path {given!r}: names a directory, and there is none; "
                     f"expected a database file's path (e.g. {str(path / DEFAULT_DB_PATH)!r})")


def require_pg_driver(shown: str) -> None:
    """Refuse a PostgreSQL URL, naming the extra to install, where psycopg is missing
    (SQLite users install ctxdb without it)."""
    if importlib.util.find_spec(PG_DRIVER) is None:
        raise ValueError(f"database URL {shown}: PostgreSQL needs the {PG_DRIVER} driver, "
                         f"which is not installed: {extra_install_hint('postgresql')}")


def read_only_uri(path: str) -> str:
    """A SQLite URI filename that opens ``path`` read-only."""
    return Path(path).absolute().as_uri() + "?mode=ro"


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def make_engine(url: str, *, recon_path: str | None = None, foreign_keys: bool = True,
                max_overflow: int | None = None, reading: bool = False) -> Engine:
    """An engine on the store at ``url``; on SQLite, ``recon_path`` is ATTACHed as schema
    ``recon``. A SQLite file that is not a ctxdb store raises NotAStoreError.
    ``max_overflow``: connections past the pool's size (SQLAlchemy's; -1: no limit).
    ``reading``: for a reader, which leaves the file's journal mode as it is (a writer
    puts the store in WAL mode, a change to the file)."""
    if make_url(url).get_backend_name() == "postgresql":
        return create_engine(url, pool_pre_ping=True)
    check_store_file(url)
    return sqlite_engine(url, recon_path=recon_path, foreign_keys=foreign_keys,
                         max_overflow=max_overflow, switch_to_wal=not reading)


def sqlite_engine(
    url: str,
    *,
    recon_path: str | os.PathLike[str] | None = None,
    recon_read_only: bool = True,
    store_settings: bool = True,
    foreign_keys: bool = True,
    poolclass: type[Pool] | None = None,
    cross_thread: bool = False,
    max_overflow: int | None = None,
    switch_to_wal: bool = True,
) -> Engine:
    """A SQLite engine on ``url`` (``sqlite://`` is an in-memory database).

    - `recon_path`: a recon index file ATTACHed to every connection as schema
      ``recon``, read-only unless `recon_read_only` is false (the indexer's engine).
    - `store_settings`: the store's connection settings (module docstring), foreign
      keys per `foreign_keys`; without them, the sqlite3 driver's defaults.
    - `poolclass`: by default an in-memory database is one connection the pool shares
      (each new connection would be another, empty database).
    - `cross_thread`: connections may be used by a thread other than their creator's.
    - `max_overflow`: a file database's pool may open this many connections past its
      size (-1: any number); SQLAlchemy's default otherwise.
    - `switch_to_wal`: put a file database in WAL mode (with the store's settings); a
      reader's engine leaves the file as it is.
    """
    in_memory = make_url(url).database in (None, "", ":memory:")
    if poolclass is None and in_memory:
        poolclass = StaticPool
    # uri: a read-only recon file is attached by a URI filename
    connect_args: dict[str, object] = {"uri": True}
    if cross_thread or poolclass is StaticPool:
        connect_args["check_same_thread"] = False
    pool_args: dict[str, object] = {}
    if max_overflow is not None and not in_memory:
        pool_args["max_overflow"] = max_overflow
    engine = create_engine(url, poolclass=poolclass, connect_args=connect_args, **pool_args)
    if recon_path is None:
        attach = None
    elif recon_read_only:
        # Read-only: a decision's BEGIN IMMEDIATE would otherwise write-lock the recon
        # file too, and its commit would wait on anyone reading recon (a rollback-
        # journal file), or stall an index run for as long as a decision lasts.
        attach = read_only_uri(os.fspath(recon_path))
    else:
        attach = str(Path(recon_path).absolute())

    @event.listens_for(engine, "connect")
    def _configure_sqlite(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        cursor = dbapi_connection.cursor()
        if store_settings:
            # Let SQLAlchemy's "begin" event below issue BEGIN itself (pysqlite's own
            # implicit transactions do not cover DDL or SELECT).
            dbapi_connection.isolation_level = None
            cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_MS)}")
            if not in_memory:
                if switch_to_wal:
                    _use_wal(cursor)
                # WAL's recommended setting: a crash of the process never loses or
                # corrupts a committed decision; a power cut may roll back the last few
                # commits.
                cursor.execute("PRAGMA synchronous=NORMAL")
                # the store checkpoints itself, after its commits (transactions.py):
                # SQLite's automatic checkpoint runs inside the COMMIT call that crosses
                # its threshold, so a decision's commit would also pay for it
                cursor.execute("PRAGMA wal_autocheckpoint=0")
                # and a reset of the WAL after a checkpoint truncates its file, so its
                # size is what was written since (the store reads it by stat)
                cursor.execute(f"PRAGMA journal_size_limit={WAL_KEPT_BYTES}")
            cursor.execute(f"PRAGMA foreign_keys={'ON' if foreign_keys else 'OFF'}")
        if attach is not None:
            cursor.execute("ATTACH DATABASE ? AS recon", (attach,))
        cursor.close()

    if store_settings:
        @event.listens_for(engine, "begin")
        def _begin(connection: Connection) -> None:
            mode = connection.get_execution_options().get(SQLITE_BEGIN_OPTION, "DEFERRED")
            if mode not in SQLITE_BEGIN_MODES:
                raise ValueError(f"{SQLITE_BEGIN_OPTION} must be one of {SQLITE_BEGIN_MODES}")
            # On the driver: through SQLAlchemy's execution a BEGIN costs ~3× the
            # statement (~30 µs more; a decision begins three transactions). Its error
            # comes out as SQLAlchemy's would (a busy lock: OperationalError).
            statement = f"BEGIN {mode}"
            try:
                sqlite_driver(connection).execute(statement)
            except sqlite3.Error as exc:
                raise DBAPIError.instance(statement, (), exc, sqlite3.Error,
                                          dialect=connection.dialect) from exc

    return engine


@functools.lru_cache(maxsize=256)
def _use_wal(cursor: sqlite3.Cursor) -> None:
    """Put the store in WAL mode (it stays so, kept in the file). Two connections opening
    a new store at once (a replay's workers) may both switch it: SQLite refuses the
    second "database is locked" at once, without its busy handler, so it is tried again
    until the busy timeout."""
    if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() == "wal":
        return
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(WAL_SWITCH_RETRY_S)


def insert_statement(dialect: Dialect, table: Table, columns: tuple[str, ...],
                     keep_existing: bool = False, rows: int = 1) -> str:
    """``INSERT INTO [schema.]table (c1, …) VALUES (?, …)`` in the driver's positional
    style, for executemany with rows in `columns` order; with ``rows``, that many
    ``(?, …)`` rows, their values one after the other.

    Values always travel as parameters; only names from the table definition are in the
    text. `keep_existing`: a row whose primary key is already there is skipped.
    """
    preparer = dialect.identifier_preparer
    style = dialect.paramstyle
    if style == "qmark":
        mark = "?"
    elif style in ("format", "pyformat"):
        mark = "%s"
    else:
        raise NotImplementedError(f"unsupported DB-API paramstyle {style!r}")
    unknown = [c for c in columns if c not in table.columns]
    if unknown:
        raise ValueError(f"table {table.name} has no column(s) {unknown}")
    name = preparer.quote(table.name)
    if table.schema is not None:
        name = f"{preparer.quote_schema(table.schema)}.{name}"
    row = f"({', '.join([mark] * len(columns))})"
    statement = (
        f"INSERT INTO {name} ({', '.join(preparer.quote(c) for c in columns)})"
        f" VALUES {', '.join([row] * rows)}"
    )
    if keep_existing:
        key = ", ".join(preparer.quote(c.name) for c in table.primary_key.columns)
        statement += f" ON CONFLICT ({key}) DO NOTHING"
    return statement


def sqlite_driver(connection: Connection) -> sqlite3.Connection:
    """The sqlite3 connection under SQLAlchemy's, for what only it does: a PRAGMA outside
    a transaction (through SQLAlchemy one would begin first), a dump."""
    return cast(sqlite3.Connection, connection.connection.driver_connection)
