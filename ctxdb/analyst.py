"""Documents for analysts, generated from the code: ``docs/schema.md`` and a Datasette
metadata file.

Both read the same sources — the tables of ``ctxdb/models.py`` with the words of
``ctxdb/descriptions.py``, the views' leading comments in ``sql/views/`` — so the
schema page and what Datasette shows cannot drift apart. The canned queries are every
``sql/reports/*.sql`` and the forensic queries of ``sql/analyst/*.sql`` (docs/audit.md's).
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

from sqlalchemy import (
    CheckConstraint,
    Column,
    DefaultClause,
    Table,
    UniqueConstraint,
    create_engine,
    inspect,
)
from sqlalchemy.pool import StaticPool

from .ab.reports import REPORT_PARAMETER_DEFAULTS
from .descriptions import TABLES, UNMODELLED_TABLES, VIEW_COLUMNS
from .models import metadata
from .paths import VIEWS_DIR, write_whole
from .sqlfiles import SqlFile, sql_files, view_files

SCHEMA_DOCS_PATH = "docs/schema.md"
SCHEMA_DOCS_COMMAND = f"ctxdb db schema-docs -o {SCHEMA_DOCS_PATH}"
# The directories whose statements Datasette offers as canned queries, with a title prefix.
CANNED_QUERY_DIRS = (("reports", "Report"), ("analyst", "Forensics"))

# What Datasette's own parameter finder strips before it looks for :name (comments and
# quoted strings), so the params listed here are the ones Datasette would find.
_LINE_COMMENT = re.compile(r"--.*?$", re.MULTILINE)
_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
_QUOTED = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"")
_NAMED_PARAMETER = re.compile(r"(?<![:\w]):([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class CannedQuery:
    name: str
    title: str
    description: str
    sql: str
    params: tuple[str, ...]


def named_parameters(sql: str) -> tuple[str, ...]:
    """The ``:name`` parameters of a statement, in first-use order (``::`` casts and
    text inside comments or quotes are not parameters)."""
    bare = _QUOTED.sub("", _BLOCK_COMMENT.sub("", _LINE_COMMENT.sub("", sql)))
    return tuple(dict.fromkeys(_NAMED_PARAMETER.findall(bare)))


def _description_of(file: SqlFile) -> str:
    """A file's leading comment without its ``name:`` opening, as one sentence-cased line."""
    prefix = f"{file.name}:"
    header = file.header
    text = " ".join((header[len(prefix):] if header.startswith(prefix) else header).split())
    return text[:1].upper() + text[1:]


def _with_report_defaults(file: SqlFile) -> tuple[str, str]:
    """A report's SQL and description with each parameter that has a documented default
    (``REPORT_PARAMETER_DEFAULTS``, e.g. the replay cost's cached_price_ratio) written in
    as that value: a canned query is run as it stands (a Datasette form sends an empty
    string for a blank field, and a bare run binds nothing), and the value is a constant
    of the code, never input. The description says which value, and where to vary it."""
    sql, description = file.sql, _description_of(file)
    for name in named_parameters(file.sql):
        if name not in REPORT_PARAMETER_DEFAULTS:
            continue
        value = REPORT_PARAMETER_DEFAULTS[name]
        sql = re.sub(rf"(?<![:\w]):{name}(?!\w)", repr(value), sql)
        description += (f" Here {name} = {value!r} (the default of "
                        f"`ctxdb report --{name.replace('_', '-')}`).")
    return sql, description


def canned_queries() -> list[CannedQuery]:
    """Every report and forensic query, named by its file's stem."""
    queries = []
    for directory, title in CANNED_QUERY_DIRS:
        for file in sql_files(directory):
            sql, description = (_with_report_defaults(file) if directory == "reports"
                                else (file.sql, _description_of(file)))
            queries.append(CannedQuery(
                name=file.name, title=f"{title}: {file.name.replace('_', ' ')}",
                description=description, sql=sql, params=named_parameters(sql),
            ))
    return queries


def view_descriptions() -> dict[str, str]:
    return {view.name: _description_of(view) for view in view_files()}


# the view that carries these descriptions into the store, for the sqlite3 shell and psql
SCHEMA_DOC_VIEW = "v_schema_doc"
SCHEMA_DOC_VIEW_FILE = f"95_{SCHEMA_DOC_VIEW}.sql"  # in sql/views/, after every other view
SCHEMA_DOC_VIEW_COMMAND = "make docs"
SQL_COMMENT_WIDTH = 86  # a generated file's comment lines, with their "-- ", fit 89 columns
_SCHEMA_DOC_HEADER = (
    f"{SCHEMA_DOC_VIEW}: what each table, column and view of the store means, in words (the "
    "descriptions docs/schema.md and Datasette show), for the sqlite3 shell and psql: "
    f"SELECT * FROM {SCHEMA_DOC_VIEW} WHERE object_name = 'window_item' ORDER BY doc_no. "
    "A row whose column_name is NULL describes the table or view itself. Generated from "
    f"ctxdb/descriptions.py and sql/views/ by `{SCHEMA_DOC_VIEW_COMMAND}` (a test holds it "
    "to them): not to be edited by hand.")


def schema_doc_view_sql() -> str:
    """sql/views/95_v_schema_doc.sql: a view of every description, as literal rows."""
    rows: list[tuple[str, str, str | None, str]] = []
    for table in sorted(metadata.tables.values(), key=_table_order):
        description, columns = TABLES[table.name]
        rows.append((table.name, "table", None, description))
        rows += [(table.name, "table", column.name, columns[column.name])
                 for column in table.columns]
    for name, (description, columns) in UNMODELLED_TABLES.items():
        rows.append((name, "table", None, description))
        rows += [(name, "table", column, words) for column, words in columns.items()]
    views = {name: description for name, description in view_descriptions().items()
             if name != SCHEMA_DOC_VIEW}
    own = _SCHEMA_DOC_HEADER.split(": ", 1)[1]
    views[SCHEMA_DOC_VIEW] = own[:1].upper() + own[1:]  # as _description_of says a view
    for name, description in views.items():
        rows.append((name, "view", None, description))
        rows += [(name, "view", column, words)
                 for column, words in VIEW_COLUMNS.get(name, {}).items()]

    # the one SQL built from values: the package's own words, quoted as SQL literals into
    # a view's text, which can take no parameters
    def literal(value: str | None) -> str:
        return "NULL" if value is None else "'" + value.replace("'", "''") + "'"

    header = textwrap.wrap(_SCHEMA_DOC_HEADER, width=SQL_COMMENT_WIDTH)
    values = ",\n".join(f"    ({number}, {', '.join(literal(v) for v in row)})"
                        for number, row in enumerate(rows, start=1))
    names = "doc_no, object_name, object_type, column_name, description"
    return ("".join(f"-- {line}\n" for line in header)
            + f"CREATE VIEW {SCHEMA_DOC_VIEW} AS\n"
            + f"WITH described({names}) AS (\n"
            + f"  VALUES\n{values}\n)\n"
            + f"SELECT {names} FROM described\nORDER BY doc_no;\n")


def write_schema_doc_view() -> None:
    """Write sql/views/95_v_schema_doc.sql (``make docs``): made whole before the file is
    opened, since making it reads the views' files, this one among them."""
    sql = schema_doc_view_sql()
    # whole or not at all: a store opened later installs every view file it finds
    write_whole(VIEWS_DIR / SCHEMA_DOC_VIEW_FILE, sql)


def view_columns() -> dict[str, list[str]]:
    """Each view's column names, read from the views made over empty head tables in an
    in-memory SQLite database (the views are SQL text: their columns are known only to
    a database)."""
    from .views import create_views

    engine = create_engine("sqlite://", poolclass=StaticPool)
    try:
        with engine.begin() as connection:
            metadata.create_all(connection)
            create_views(connection)
            inspector = inspect(connection)
            return {view.name: [c["name"] for c in inspector.get_columns(view.name)]
                    for view in view_files()}
    finally:
        engine.dispose()


def _default(column: Column) -> str:
    default = column.server_default
    if not isinstance(default, DefaultClause):  # none, or computed by the server
        return ""
    value = default.arg
    return f"'{value}'" if isinstance(value, str) else str(value)


def _keys(column: Column) -> str:
    marks = ["PK"] if column.primary_key else []
    marks += [f"→ {fk.target_fullname}" for fk in sorted(column.foreign_keys,
                                                         key=lambda fk: fk.target_fullname)]
    return ", ".join(marks)


def _checks(table: Table) -> list[CheckConstraint]:
    return sorted((c for c in table.constraints if isinstance(c, CheckConstraint)),
                  key=lambda c: str(c.name))


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def schema_markdown() -> str:
    """docs/schema.md: every table with its columns (type, null, keys, default, meaning)
    and CHECK constraints, then every view with its meaning and columns."""
    from .migrate import head_revision

    lines = [
        "# The store's schema",
        "",
        f"Generated from `ctxdb/models.py`, `ctxdb/descriptions.py` and `sql/views/` by "
        f"`{SCHEMA_DOCS_COMMAND}`; do not edit by hand (a test compares this file with "
        f"what the code generates). Schema revision {head_revision()}.",
        "",
        "## Tables",
        "",
    ]
    for table in sorted(metadata.tables.values(), key=_table_order):
        description, columns = TABLES[table.name]
        lines += [f"### `{table.name}`", "", description, "",
                  "| column | type | null | key | default | description |",
                  "|---|---|---|---|---|---|"]
        for column in table.columns:
            lines.append(
                f"| `{column.name}` | {column.type} | {'yes' if column.nullable else 'no'} "
                f"| {_cell(_keys(column))} | {_cell(_default(column))} "
                f"| {_cell(columns[column.name])} |"
            )
        checks = _checks(table)
        if checks:
            lines += ["", "Checks:", ""]
            lines += [f"- `{check.name}`: `{check.sqltext}`" for check in checks]
        uniques = sorted((c for c in table.constraints if isinstance(c, UniqueConstraint)),
                         key=lambda c: str(c.name))
        indexes = sorted(table.indexes, key=lambda i: str(i.name))
        if uniques or indexes:
            lines += ["", "Unique constraints and indexes:", ""]
            lines += [f"- `{c.name}`: unique ({', '.join(col.name for col in c.columns)})"
                      for c in uniques]
            lines += [f"- `{i.name}`: {'unique ' if i.unique else ''}index "
                      f"({', '.join(col.name for col in i.columns)})" for i in indexes]
        lines.append("")
    for name, (description, columns) in UNMODELLED_TABLES.items():  # a tool's, not ctxdb's
        lines += [f"### `{name}`", "", description, "", "| column | description |",
                  "|---|---|"]
        lines += [f"| `{column}` | {_cell(words)} |" for column, words in columns.items()]
        lines.append("")
    lines += ["## Views", "",
              "Made from `sql/views/` (kept out of migration history: an upgrade recreates "
              "them from the files).", ""]
    for name, description in view_descriptions().items():
        lines += [f"### `{name}`", "", description, "",
                  "| column | description |", "|---|---|"]
        lines += [f"| `{column}` | {_cell(words)} |"
                  for column, words in VIEW_COLUMNS[name].items()]
        lines.append("")
    return "\n".join(lines)


def _table_order(table: Table) -> int:
    """Tables in the order descriptions.py tells them (a reader's order, not the
    alphabet's): a decision before its pool, the pool before its audit."""
    return list(TABLES).index(table.name)


def datasette_metadata(database_name: str) -> dict:
    """A Datasette metadata document (``datasette STORE.db --metadata FILE``) for a
    store whose file stem is ``database_name``: a description per table and view,
    per-column descriptions of the tables, and the canned queries."""
    from .migrate import head_revision

    tables: dict[str, dict] = {}
    for table in sorted(metadata.tables.values(), key=_table_order):
        description, columns = TABLES[table.name]
        tables[table.name] = {
            "description": description,
            "columns": {column.name: columns[column.name] for column in table.columns},
        }
    for name, (description, columns) in UNMODELLED_TABLES.items():
        tables[name] = {"description": description, "columns": dict(columns)}
    for name, description in view_descriptions().items():
        tables[name] = {"description": description, "columns": dict(VIEW_COLUMNS[name])}
    queries = {}
    for query in canned_queries():
        entry: dict[str, object] = {"sql": query.sql, "title": query.title,
                                    "description": query.description}
        if query.params:
            entry["params"] = list(query.params)
        queries[query.name] = entry
    return {
        "title": "ctxdb evidence store",
        "description": "Every decision's pool, the stages' actions on each item, the windows "
                       "as sent, and the A/B reports. Schema: docs/schema.md; "
                       "forensic queries take ?decision_id= (empty: the newest decision).",
        "databases": {
            database_name: {
                "description": f"A ctxdb store at schema revision {head_revision()}.",
                "tables": tables,
                "queries": queries,
            }
        },
    }
