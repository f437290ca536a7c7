"""Schema upgrades: alembic migrations plus the views kept outside them.

Opening a store that is already at head needs no alembic (importing it costs about a
third of a second): the revisions are read from the migration files' own
``revision = "…"`` / ``down_revision = …`` lines and the stamp from ``alembic_version``
(tests/test_migrations.py holds both to alembic's answers). Alembic is imported only
to upgrade.
"""

from __future__ import annotations

import ast
import functools
import re
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, inspect, text

if TYPE_CHECKING:  # alembic loads only when a store is migrated
    from alembic.config import Config
    from alembic.script import ScriptDirectory

from .db import (
    SQLITE_BEGIN_OPTION,
    VERSION_TABLE,
    NotAStoreError,
    make_engine,
    shown_url,
    sqlite_driver,
    store_problem,
)
from .paths import MIGRATIONS_DIR, require_dir
from .views import create_views, drop_views, view_drift

# Any fixed 64-bit key: serializes concurrent upgrades by many workers on PostgreSQL.
PG_UPGRADE_LOCK_KEY = 0x63747864_62_0001


class StoreVersionError(RuntimeError):
    """The database was made by a newer ctxdb, or its schema cannot be upgraded."""


# The two assignments every migration file makes at its top (alembic's own format).
_REVISION_LINE = re.compile(r'^revision\s*=\s*["\']([^"\']+)["\']', re.MULTILINE)
_DOWN_REVISION_LINE = re.compile(r'^down_revision\s*=\s*(?:None|["\']([^"\']+)["\'])',
                                 re.MULTILINE)


def alembic_config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(require_dir(MIGRATIONS_DIR)))
    return config


def script_directory() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


@functools.cache
def _revisions() -> dict[str, str | None]:
    """revision -> down revision, from the migration files."""
    chain = {}
    for path in sorted((require_dir(MIGRATIONS_DIR) / "versions").glob("*.py")):
        source = path.read_text(encoding="utf-8")
        revision, down = _REVISION_LINE.search(source), _DOWN_REVISION_LINE.search(source)
        if revision is None or down is None:
            raise StoreVersionError(f"{path}: no revision / down_revision line")
        chain[revision[1]] = down[1]
    return chain


def revision_summaries() -> dict[str, str]:
    """revision -> the first paragraph of its migration file's docstring (what it does)."""
    summaries = {}
    for path in sorted((require_dir(MIGRATIONS_DIR) / "versions").glob("*.py")):
        source = path.read_text(encoding="utf-8")
        revision = _REVISION_LINE.search(source)
        docstring = ast.get_docstring(ast.parse(source, filename=str(path))) or ""
        if revision is not None:
            summaries[revision[1]] = " ".join(docstring.split("\n\n")[0].split())
    return summaries


def known_revisions() -> set[str]:
    return set(_revisions())


def revision_order() -> list[str]:
    """The revisions from the first to head (the chain is linear, tested)."""
    following = {down: revision for revision, down in _revisions().items()}
    order, revision = [], following.get(None)
    while revision is not None:
        order.append(revision)
        revision = following.get(revision)
    return order


def head_revision() -> str:
    """The revision no other revision builds on (the chain is linear, tested)."""
    chain = _revisions()
    heads = set(chain) - set(chain.values())
    if len(heads) != 1:
        raise StoreVersionError(f"the migrations have {len(heads)} heads: {sorted(heads)}")
    return heads.pop()


def current_revision(connection: Connection) -> str | None:
    """The database's stamp (None for an empty database, a new store); a database that
    holds tables of its own but no stamp is not a ctxdb store (NotAStoreError)."""
    inspector = inspect(connection)
    if not inspector.has_table(VERSION_TABLE):
        problem = store_problem(inspector.get_table_names())
        if problem is not None:
            url = shown_url(connection.engine.url.render_as_string(hide_password=False))
            raise NotAStoreError(f"store database {url} {problem}; it was left untouched")
        return None
    return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()


def check_known(revision: str | None) -> None:
    if revision is None:
        return
    if revision not in known_revisions():
        raise StoreVersionError(
            f"the database is at schema revision {revision!r}, which this ctxdb does not know "
            f"(its newest is {head_revision()!r}): it was made by a newer ctxdb; "
            "upgrade ctxdb rather than the database"
        )


def upgrade_engine(url: str, target: str = "head") -> tuple[str | None, str]:
    """Upgrade the database at ``url`` to ``target`` in one transaction.

    Returns (revision before, revision after). Views are dropped first and, when
    the target is head, recreated from ``sql/views/`` after.
    """
    # Foreign keys off on SQLite while batch mode copies tables; checked after.
    engine = make_engine(url, foreign_keys=False)
    try:
        return _upgrade(engine, target)
    finally:
        engine.dispose()


def upgrade_in_memory(engine: Engine) -> tuple[str | None, str]:
    """Upgrade an in-memory SQLite store to head on its own engine: its one shared
    connection is the whole database (an engine of its own would be another, empty one).
    Foreign keys off meanwhile, as in ``upgrade_engine``."""
    _set_foreign_keys(engine, on=False)
    try:
        return _upgrade(engine, "head")
    finally:
        _set_foreign_keys(engine, on=True)


def _set_foreign_keys(engine: Engine, *, on: bool) -> None:
    # on the driver's connection: SQLAlchemy's would BEGIN first, and SQLite ignores
    # this PRAGMA inside a transaction
    with engine.connect() as connection:
        sqlite_driver(connection).execute(f"PRAGMA foreign_keys={'ON' if on else 'OFF'}")


def _check_target(before: str | None, target: str) -> None:
    """An upgrade goes to a revision this ctxdb knows, never back from the store's."""
    if target == "head":
        return
    order = revision_order()
    if target not in order:
        raise StoreVersionError(f"--revision {target[:40]!r}: expected head or one of "
                                f"{', '.join(order)}")
    if before is not None and before in order and order.index(target) < order.index(before):
        raise StoreVersionError(f"--revision {target}: the store is at {before}, past it; "
                                "ctxdb upgrades a store, it does not downgrade one")


def _upgrade(engine: Engine, target: str) -> tuple[str | None, str]:
    from alembic import command

    config = alembic_config()
    with engine.connect() as connection:
        connection = connection.execution_options(**{SQLITE_BEGIN_OPTION: "IMMEDIATE"})
        with connection.begin():
            if connection.dialect.name == "postgresql":
                connection.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_UPGRADE_LOCK_KEY}
                )
            before = current_revision(connection)
            check_known(before)
            _check_target(before, target)
            if before == head_revision() and target in ("head", before) \
                    and not view_drift(connection, own_only=True):
                # nothing to do: no DDL, so a role that reads and writes the store but
                # owns none of it runs this too
                return before, before
            drop_views(connection)
            config.attributes["connection"] = connection
            command.upgrade(config, target)
            after = current_revision(connection)
            if after is None:
                raise StoreVersionError(f"upgrade to {target} left the store without a "
                                        f"{VERSION_TABLE} stamp")
            if after == head_revision():
                create_views(connection)
            if connection.dialect.name == "sqlite":
                broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise StoreVersionError(f"upgrade broke foreign keys: {broken[:5]}")
    return before, after


# ----------------------------------------------------------- a new SQLite store, fast
# Running the migrations on an empty SQLite file takes 0.3-1.5 s (alembic's import and
# eight revisions of batch table copies); an agent loop opens stores often. A new store
# instead runs the script the migrations amount to (sql/schema/head.sqlite.sql: tables,
# indexes, seed rows and the stamp), generated from them by ``head_schema_script``;
# tests/test_migrations.py holds the file equal to a fresh migration's.
HEAD_SCHEMA_SQL = "schema/head.sqlite"
HEAD_SCHEMA_HEADER = ("-- The schema a new SQLite store gets: what the migrations in migrations/ "
                      "amount to at head,\n-- views aside (sql/views/ is installed after). "
                      "Generated: make head-schema.\n")


def head_schema_script() -> str:
    """The migrations' result on an empty in-memory SQLite store as one script: each
    table, index and seed row, and the stamp; the views and their install rows left out."""
    engine = make_engine("sqlite://")
    try:
        upgrade_in_memory(engine)
        with engine.connect() as connection:
            statements = list(sqlite_driver(connection).iterdump())
    finally:
        engine.dispose()
    kept = [s for s in statements
            if s not in ("BEGIN TRANSACTION;", "COMMIT;")
            and not s.startswith("CREATE VIEW")
            and not s.startswith('INSERT INTO "installed_view"')]
    return HEAD_SCHEMA_HEADER + "\n".join(kept) + "\n"


def _head_statements() -> list[str]:
    from .sqlfiles import sql_script_statements

    return sql_script_statements(HEAD_SCHEMA_SQL)


def create_new_sqlite_store(engine: Engine) -> bool:
    """Make an empty SQLite store the head schema in one IMMEDIATE transaction; False
    when another process made it first (the caller reads its revision again)."""
    with engine.connect() as connection:
        connection = connection.execution_options(**{SQLITE_BEGIN_OPTION: "IMMEDIATE"})
        with connection.begin():
            if current_revision(connection) is not None:
                return False
            for statement in _head_statements():
                connection.exec_driver_sql(statement)
            create_views(connection)
    return True
