"""Schema upgrades: alembic migrations plus the views kept outside them."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

from .db import SQLITE_BEGIN_OPTION, make_engine
from .paths import MIGRATIONS_DIR, require_dir
from .views import create_views, drop_views

# Any fixed 64-bit key: serializes concurrent upgrades by many workers on PostgreSQL.
PG_UPGRADE_LOCK_KEY = 0x63747864_62_0001


class StoreVersionError(RuntimeError):
    """The database was made by a newer ctxdb, or its schema cannot be upgraded."""


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(require_dir(MIGRATIONS_DIR)))
    return config


def script_directory() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    return script_directory().get_current_head()


def current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def _check_known(revision: str | None) -> None:
    if revision is None:
        return
    known = {s.revision for s in script_directory().walk_revisions()}
    if revision not in known:
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


def _upgrade(engine: Engine, target: str) -> tuple[str | None, str]:
    config = alembic_config()
    with engine.connect() as connection:
        connection = connection.execution_options(**{SQLITE_BEGIN_OPTION: "IMMEDIATE"})
        with connection.begin():
            if connection.dialect.name == "postgresql":
                connection.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": PG_UPGRADE_LOCK_KEY}
                )
            before = current_revision(connection)
            _check_known(before)
            drop_views(connection)
            config.attributes["connection"] = connection
            command.upgrade(config, target)
            after = current_revision(connection)
            if after == head_revision():
                create_views(connection)
            if connection.dialect.name == "sqlite":
                broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
                if broken:
                    raise StoreVersionError(f"upgrade broke foreign keys: {broken[:5]}")
    return before, after
