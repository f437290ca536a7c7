"""``ctxdb datasette-metadata``: a Datasette metadata file for a SQLite store."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .shared import EXIT_OK, add_db_option, existing_store, store_revision, write_output


def register(commands: argparse._SubParsersAction) -> None:
    datasette = commands.add_parser(
        "datasette-metadata", help="write a Datasette metadata file for a SQLite store",
        description="A metadata JSON file for `datasette STORE.db --metadata FILE` "
        "(Datasette 0.65): every table and view described, the tables' columns too, and "
        "sql/reports/*.sql and the forensic queries of sql/analyst/ as canned queries.",
    )
    add_db_option(datasette)
    datasette.add_argument("-o", "--output", metavar="FILE",
                           help="write to FILE instead of standard output")
    datasette.set_defaults(func=_cmd_datasette_metadata)


def _cmd_datasette_metadata(args) -> int:
    from sqlalchemy.engine import make_url

    from ..analyst import datasette_metadata
    from ..db import is_sqlite
    from ..migrate import head_revision

    url = existing_store(args.db)
    if not is_sqlite(url):
        raise ValueError("--db: Datasette serves SQLite files; expected a store's .db file, "
                         "not a PostgreSQL URL")
    revision = store_revision(url)
    if revision != head_revision():
        raise ValueError(f"--db: the store is at schema revision {revision or '(empty)'}; the "
                         f"metadata describes {head_revision()}: run `ctxdb db upgrade` first")
    database = make_url(url).database
    if not database:
        raise ValueError("--db: expected a store's .db file, not an in-memory database")
    # Datasette names a database after its file's stem
    name = Path(database.split("?", 1)[0].removeprefix("file:")).stem
    write_output(json.dumps(datasette_metadata(name), indent=2, ensure_ascii=False) + "\n",
                  args.output)
    if args.output:
        print(f"serve it: datasette {database} --metadata {args.output}")
    return EXIT_OK
