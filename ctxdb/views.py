"""The persistent views: created from ``sql/views/``, kept out of migration history.

Alembic's SQLite batch mode rebuilds a table by copy-and-swap, which fails while
a view reads the table (alembic issue #1207), so an upgrade drops every view
first and recreates them from the files after. ``installed_view`` records, per
view, the sha256 of the file it was made from and of the definition the
database's catalog reported right after: :func:`view_drift` compares both, so it
catches an edited file and a view replaced by hand in the shell.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from sqlalchemy import Connection, inspect, select, text
from sqlalchemy.exc import DBAPIError

from .models import installed_view
from .sqlfiles import view_files


def _quote(connection: Connection, name: str) -> str:
    return connection.dialect.identifier_preparer.quote(name)


def _catalog_sha256(connection: Connection, name: str) -> str | None:
    if connection.dialect.name == "sqlite":
        query = text("SELECT sql FROM sqlite_master WHERE type = 'view' AND name = :name")
    else:
        query = text(
            "SELECT pg_get_viewdef(c.oid, true) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE c.relkind = 'v' AND c.relname = :name AND n.nspname = current_schema()"
        )
    definition = connection.execute(query, {"name": name}).scalar()
    if definition is None:
        return None
    return hashlib.sha256(definition.encode("utf-8")).hexdigest()


def _installed(connection: Connection) -> dict[str, tuple[str, str]]:
    if not inspect(connection).has_table("installed_view"):
        return {}
    rows = connection.execute(
        select(
            installed_view.c.view_name, installed_view.c.sql_sha256, installed_view.c.catalog_sha256
        )
    )
    return {name: (file_sha, catalog_sha) for name, file_sha, catalog_sha in rows}


# PostgreSQL's SQLSTATE for a drop that other objects depend on
DEPENDENT_OBJECTS_SQLSTATE = "2BP01"


class ViewsInUseError(ValueError):
    """A view of someone else's depends on one of ctxdb's, which must be rebuilt."""


def drop_views(connection: Connection) -> None:
    """Drop the views the files define and any the database recorded earlier. On
    PostgreSQL a view someone else made on one of them stops the drop: ``ViewsInUseError``
    names it (SQLite keeps such a view, which then reads the rebuilt one)."""
    names = [f.name for f in view_files()]
    names += sorted(set(_installed(connection)) - set(names))
    for name in reversed(names):
        try:
            connection.exec_driver_sql(f"DROP VIEW IF EXISTS {_quote(connection, name)}")
        except DBAPIError as exc:
            if getattr(exc.orig, "sqlstate", None) != DEPENDENT_OBJECTS_SQLSTATE:
                raise
            detail = getattr(getattr(exc.orig, "diag", None), "message_detail", None)
            raise ViewsInUseError(
                f"view {name} is to be rebuilt, but {detail or 'another view depends on it'}"
                ": drop that view, run the command again, then make it anew") from None
    if inspect(connection).has_table("installed_view"):
        connection.execute(installed_view.delete())


def create_views(connection: Connection) -> None:
    now = datetime.now(UTC).isoformat(timespec="seconds")
    rows = []
    for view in view_files():
        # text() escapes the % of LIKE patterns for percent-style drivers (psycopg).
        connection.execute(text(view.sql))
        rows.append(
            {
                "view_name": view.name,
                "sql_sha256": view.sha256,
                "catalog_sha256": _catalog_sha256(connection, view.name),
                "installed_at": now,
            }
        )
    connection.execute(installed_view.insert(), rows)


def view_drift(connection: Connection, *, own_only: bool = False) -> list[str]:
    """Human-readable differences between the database's views and ``sql/views/``;
    ``own_only``: of ctxdb's views alone (not a view someone else added, which no
    upgrade removes)."""
    problems = []
    files = {f.name: f for f in view_files()}
    installed = _installed(connection)
    present = set(inspect(connection).get_view_names())
    for name, view in files.items():
        if name not in present:
            problems.append(f"view {name} ({view.path.name}) is missing from the database")
        elif name not in installed or installed[name][0] != view.sha256:
            problems.append(f"view {name} in the database is older than {view.path.name}")
        elif installed[name][1] != _catalog_sha256(connection, name):
            problems.append(f"view {name} was replaced in the database; {view.path.name} differs")
    for name in foreign_views(connection) if not own_only else ():
        problems.append(f"view {name} is in the database but has no file in sql/views/")
    return problems


def foreign_views(connection: Connection) -> list[str]:
    """The views in the database that no file of ``sql/views/`` defines (someone else's:
    an analyst's, an extension's on PostgreSQL's search path)."""
    own = {f.name for f in view_files()}
    return sorted(set(inspect(connection).get_view_names()) - own)
