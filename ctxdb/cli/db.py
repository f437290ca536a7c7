"""``ctxdb db``: the store's schema (upgrade, current, history, schema-docs)."""

from __future__ import annotations

import argparse
import os

from ..config import DB_URL_ENV, DEFAULT_DB_PATH
from .shared import EXIT_OK, add_db_option, existing_store, store_revision, write_output


def register(commands: argparse._SubParsersAction) -> None:
    db = commands.add_parser("db", help="operate on the store's schema",
                             description="Schema operations.")
    db_commands = db.add_subparsers(dest="db_command", metavar="SUBCOMMAND", required=True)
    _add_upgrade(db_commands)
    _add_current(db_commands)
    _add_history(db_commands)
    _add_schema_docs(db_commands)


def _add_upgrade(db_commands: argparse._SubParsersAction) -> None:
    upgrade = db_commands.add_parser(
        "upgrade", help="upgrade the store to the newest schema (views are recreated)",
        description="Apply alembic migrations in one transaction; views are dropped and recreated.",
    )
    add_db_option(upgrade)
    upgrade.add_argument("--revision", default="head", help="target revision (default: head)")
    upgrade.set_defaults(func=_cmd_db_upgrade)


def _cmd_db_upgrade(args) -> int:
    from ..db import resolve_url
    from ..migrate import upgrade_engine

    url = resolve_url(args.db)
    before, after = upgrade_engine(url, args.revision)
    print(f"already at {after}" if before == after
          else f"upgraded {before or '(empty)'} -> {after}")
    free = _free_bytes(url) if before not in (None, after) else 0
    if free >= FREE_NAMED_MIN_BYTES:
        # a migration that rebuilds a table (0011) leaves its old pages free in the file
        print(f"{free / BYTES_PER_MB:.1f} MB of the file is free after the upgrade: "
              f"`VACUUM` in the sqlite3 shell returns it to the disk")
    return EXIT_OK


BYTES_PER_MB = 1_000_000
FREE_NAMED_MIN_BYTES = BYTES_PER_MB  # less is not worth a VACUUM


def _free_bytes(url: str) -> int:
    """The bytes a SQLite store's file holds free (0 for any other store)."""
    from sqlalchemy import text

    from ..db import is_sqlite, is_sqlite_in_memory, make_engine

    if not is_sqlite(url) or is_sqlite_in_memory(url):
        return 0
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            pages = connection.execute(text("PRAGMA freelist_count")).scalar_one()
            size = connection.execute(text("PRAGMA page_size")).scalar_one()
    finally:
        engine.dispose()
    return int(pages) * int(size)


def _add_current(db_commands: argparse._SubParsersAction) -> None:
    current = db_commands.add_parser(
        "current", help="print the store's schema revision",
        description="Print the schema revision and whether it is the newest.",
    )
    add_db_option(current)
    current.set_defaults(func=_cmd_db_current)


def _cmd_db_current(args) -> int:
    from ..migrate import check_known, head_revision

    revision = store_revision(existing_store(args.db))
    check_known(revision)  # a stamp this ctxdb does not know: made by a newer one (exit 2)
    head = head_revision()
    state = "head" if revision == head else f"behind head {head}; run `ctxdb db upgrade`"
    print(f"{revision or '(empty)'} ({state})")
    return EXIT_OK


def _add_history(db_commands: argparse._SubParsersAction) -> None:
    history = db_commands.add_parser(
        "history", help="list the migrations, marking those the store has applied",
        description="Every schema revision from the first to head with what it does, each "
        "marked applied or pending in the store (without a store: the list alone).",
    )
    add_db_option(history)
    history.set_defaults(func=_cmd_db_history)


def _cmd_db_history(args) -> int:
    """The migrations from the first to head, each marked applied or pending in the store
    (read from the files and the stamp, as opening a store does: no alembic)."""
    from ..migrate import head_revision, revision_order, revision_summaries

    named = args.db is not None or DB_URL_ENV in os.environ
    try:
        url = existing_store(args.db)
    except FileNotFoundError:
        if named:
            raise
        url = None  # no store here: the history alone, as alembic prints it
    revision = None
    if url is not None:
        revision = store_revision(url)
    order, summaries, head = revision_order(), revision_summaries(), head_revision()
    applied = set(order[: order.index(revision) + 1]) if revision in order else set()
    for number in order:
        state = "-" if url is None else ("applied" if number in applied else "pending")
        print(f"{number}  {state:<7}  {summaries.get(number, '')}"
              + ("  (head)" if number == head else ""))
    if url is None:
        print(f"(no store at ./{DEFAULT_DB_PATH}: pass --db to see which are applied)")
    elif revision is not None and revision not in order:
        print(f"the store is at {revision}, which this ctxdb does not know: a newer ctxdb made it")
    else:
        where = "head" if revision == head else "behind head; run `ctxdb db upgrade`"
        print(f"store at {revision or '(empty)'} ({where})")
    return EXIT_OK


def _add_schema_docs(db_commands: argparse._SubParsersAction) -> None:
    schema_docs = db_commands.add_parser(
        "schema-docs", help="write the schema's documentation (docs/schema.md) from the code",
        description="Tables, columns with types and descriptions, CHECK constraints and "
        "views, generated from ctxdb/models.py, ctxdb/descriptions.py and sql/views/.",
    )
    schema_docs.add_argument("-o", "--output", metavar="FILE",
                             help="write to FILE (docs/schema.md in a checkout) instead of "
                             "standard output")
    schema_docs.set_defaults(func=_cmd_db_schema_docs)


def _cmd_db_schema_docs(args) -> int:
    from ..analyst import schema_markdown

    write_output(schema_markdown(), args.output)
    return EXIT_OK
