"""Alembic environment for the ctxdb store.

ctxdb's own upgrade path (``ctxdb.migrate.upgrade``) hands us an open connection
inside its transaction, after dropping the views that read the tables (SQLite
batch mode cannot rebuild a table a view reads: alembic issue #1207), and
recreates them after.
"""

from alembic import context

from ctxdb.models import metadata

config = context.config


def run_with_connection(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # SQLite cannot ALTER most things in place; batch mode copies and swaps.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is None:
    raise SystemExit(
        "run migrations with `ctxdb db upgrade [--db URL]`: it opens the store's"
        " connection and drops/recreates the views around the upgrade"
    )
run_with_connection(connection)
