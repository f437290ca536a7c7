"""The recon index schema, written once for SQLite and PostgreSQL.

Every table lives in schema ``recon``. On SQLite the recon file is ATTACHed to a
connection as ``recon`` (the indexer and the CLI open it that way too), on PostgreSQL it
is the schema ``recon`` of the database. So the same SQL text — ``SELECT … FROM
recon.symbol`` — runs on both, in the main store and here.

Tables (see `recon_tables`):

- ``recon_meta``   key/value: schema version, parser name, tree-sitter versions, the
                   snapshot ``generation`` and the indexed ``root``.
- ``file``         one row per indexed Python file.
- ``file_source``  the file's full text (later stages read spans from here, not disk).
- ``symbol``       module / class / function / method definitions.
- ``edge``         calls / imports / inherits / tests, symbol → symbol.
- ``binding``      names a module binds by import, resolved to absolute dotted names
                   (kept so edges can be re-resolved without re-parsing unchanged files).
- ``file_stat``    each file's stat key (size, mtime, ctime, inode) when its content was
                   last hashed, so a later run hashes only the files whose stat moved;
                   bookkeeping of the machine that indexed, not part of the index's
                   content (no row: hash the file to be sure).
- ``skipped_path`` what the walk passed over and why (FIFOs, sockets, devices, symlink
                   loops, links leaving the root, ...), replaced by each run; files too
                   large or too deep to parse are ``file`` rows with ``skipped`` set.
- ``symbol_fts``   SQLite: FTS5 external-content index over symbol name, qualname,
                   signature, doc. PostgreSQL: instead a generated ``tsvector`` column
                   ``symbol.fts`` with a GIN index.
- ``symbol_body_fts`` / ``symbol_body``  the body index: per symbol, the code-aware
                   terms of its qualified name and its own source text
                   (`ctxdb.recon.extract.body_terms`). SQLite: a contentless FTS5 table
                   (rowid = symbol id; only the index is stored, the indexer deletes a
                   row by computing its terms again from ``file_source``). PostgreSQL: a
                   table of ``tsvector`` rows with a GIN index, deleted with its symbol.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import version
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import (
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
)
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.pool import NullPool, QueuePool
from sqlalchemy.schema import CreateIndex, CreateTable

from ctxdb.config import DEFAULT_RECON, RECON_ENV  # noqa: F401  (named here for importers)
from ctxdb.db import require_pg_driver, sqlite_engine
from ctxdb.recon.extract import PARSER_NAME

# Bump when the tables, the extraction rules or the resolution rules change: an index
# written under another version is refused until rebuilt.
# 2: the body index (symbol_body_fts / symbol_body); 3: file.skipped and skipped_path
# (files not parsed, paths the walk passed over)
RECON_SCHEMA_VERSION = 3
# recon_meta key of the snapshot identity (a new one per index run that changes anything);
# not a version: readers never check it against current_meta().
GENERATION_KEY = "generation"
# recon_meta key of the indexed directory's real path: absolute paths in a request are
# made relative to it. Not a version either (an index without it is still readable).
ROOT_KEY = "root"
RECON_SCHEMA = "recon"

SYMBOL_KINDS = ("module", "class", "function", "method")
EDGE_KINDS = ("calls", "imports", "inherits", "tests")

recon_tables = MetaData(schema=RECON_SCHEMA)

recon_meta = Table(
    "recon_meta",
    recon_tables,
    Column("key", Text, primary_key=True),
    Column("value", Text, nullable=False),
    comment="Versions the index was written with; checked on open.",
)

file = Table(
    "file",
    recon_tables,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("path", Text, nullable=False, comment="relative to the root, posix"),
    Column("module", Text, nullable=False, comment="dotted module name, e.g. requests.sessions"),
    Column("sha256", Text, nullable=False),
    Column("size_bytes", Integer, nullable=False),
    Column("line_count", Integer, nullable=False),
    Column("is_test", Boolean, nullable=False),
    Column("syntax_error", Boolean, nullable=False, comment="indexed from an error-tolerant tree"),
    Column(
        "not_utf8",
        Boolean,
        nullable=False,
        comment="decoded with replacement characters (invalid UTF-8 or NUL bytes)",
    ),
    Column(
        "skipped",
        Text,
        comment="NULL, or why the file was not parsed: too_large | too_deep (then it has "
        "no symbols and no file_source row)",
    ),
    Index("file_path", "path", unique=True),
)

file_source = Table(
    "file_source",
    recon_tables,
    Column(
        "file_id", Integer, ForeignKey("recon.file.id", ondelete="CASCADE"), primary_key=True
    ),
    Column("text", Text, nullable=False, comment="symbol byte spans index its UTF-8 encoding"),
)

symbol = Table(
    "symbol",
    recon_tables,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column(
        "file_id", Integer, ForeignKey("recon.file.id", ondelete="CASCADE"), nullable=False
    ),
    Column("parent_id", Integer, ForeignKey("recon.symbol.id", ondelete="CASCADE")),
    Column("key", Text, nullable=False, comment="entity key: path::Qual.name (unique)"),
    Column("kind", Text, nullable=False, comment="module | class | function | method"),
    Column("name", Text, nullable=False),
    Column("qualname", Text, nullable=False, comment="Class.method; a module's dotted name"),
    Column("start_line", Integer, nullable=False, comment="1-based, inclusive, from decorators"),
    Column("end_line", Integer, nullable=False, comment="1-based, inclusive"),
    Column("start_byte", Integer, nullable=False),
    Column("end_byte", Integer, nullable=False, comment="exclusive"),
    Column("signature", Text, comment="decorators + def/class line(s) through the colon"),
    Column("doc", Text, comment="first docstring line"),
    Index("symbol_key", "key", unique=True),
    Index("symbol_file_id", "file_id"),
    Index("symbol_parent_id", "parent_id"),
    Index("symbol_name", "name"),
)

edge = Table(
    "edge",
    recon_tables,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("kind", Text, nullable=False, comment="calls | imports | inherits | tests"),
    Column(
        "src_symbol_id",
        Integer,
        ForeignKey("recon.symbol.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column(
        "dst_symbol_id",
        Integer,
        ForeignKey("recon.symbol.id", ondelete="SET NULL"),
        comment="NULL when the name did not resolve to a symbol of this repository",
    ),
    Column("dst_name", Text, nullable=False, comment="callee/base as written; imports: absolute"),
    Column(
        "typed_name",
        Text,
        comment="dst_name with a variable of known class replaced by the class "
        "(calc.total -> PriceCalculator.total); resolved first",
    ),
    Column("line", Integer, nullable=False, comment="first call/base/import site in the source"),
    Index("edge_src_symbol_id", "src_symbol_id"),
    Index("edge_dst_symbol_id", "dst_symbol_id"),
)

binding = Table(
    "binding",
    recon_tables,
    Column(
        "file_id", Integer, ForeignKey("recon.file.id", ondelete="CASCADE"), nullable=False
    ),
    Column("name", Text, nullable=False, comment="local name (one row each), or * per star import"),
    Column("target", Text, nullable=False, comment="absolute dotted name imported"),
    Column("line", Integer, nullable=False),
    Index("binding_file_id", "file_id"),
)

skipped_path = Table(
    "skipped_path",
    recon_tables,
    Column("path", Text, primary_key=True, comment="relative to the root, posix"),
    Column(
        "reason",
        Text,
        nullable=False,
        comment="symlink_loop | symlink_outside_root | symlink_broken | symlink_dir | fifo | "
        "socket | device | not_regular | unreadable",
    ),
    comment="What the last walk passed over: .py names that are no regular file inside "
    "the root, directory links not followed, directories it could not read.",
)

file_stat = Table(
    "file_stat",
    recon_tables,
    Column(
        "file_id", Integer, ForeignKey("recon.file.id", ondelete="CASCADE"), primary_key=True
    ),
    Column(
        "stat_key",
        Text,
        nullable=False,
        comment="size:mtime_ns:ctime_ns:inode as read before the content was hashed",
    ),
    comment="Change detection's bookkeeping: a file whose stat key is unchanged is not "
    "read again. No row for a file changed too shortly before it was read.",
)

TABLES = (recon_meta, file, file_source, symbol, edge, binding, skipped_path, file_stat)
# Tables added since RECON_SCHEMA_VERSION 3 without changing what the index holds: an
# index without them gets them on its next incremental run.
ADDED_TABLES = (file_stat,)

# Full-text index DDL: a virtual table (SQLite) or a generated column (PostgreSQL).
# The FTS5 table is external-content over recon.symbol: it stores only the index.
_SQLITE_FTS = (
    "CREATE VIRTUAL TABLE recon.symbol_fts USING fts5("
    "name, qualname, signature, doc, content='symbol', content_rowid='id')"
)
_PG_FTS = (
    "ALTER TABLE recon.symbol ADD COLUMN fts tsvector GENERATED ALWAYS AS (to_tsvector("
    "'simple'::regconfig, regexp_replace(coalesce(name, '') || ' ' || coalesce(qualname, '')"
    " || ' ' || coalesce(signature, '') || ' ' || coalesce(doc, ''),"
    " '[^[:alnum:]]+', ' ', 'g'))) STORED",
    "CREATE INDEX symbol_fts ON recon.symbol USING gin (fts)",
)
# The body index. The terms are written already split and lower-cased, so the tokenizer
# must only cut at spaces and keep underscores (snake_case identifiers stay whole).
_SQLITE_BODY_FTS = (
    "CREATE VIRTUAL TABLE recon.symbol_body_fts USING fts5("
    "terms, content='', tokenize=\"unicode61 tokenchars '_'\")"
)
# PostgreSQL's text-search parser splits at underscores, so the indexer writes the
# tsvector's literal form (term:positions) itself and queries use tsquery literals.
_PG_BODY = (
    "CREATE TABLE recon.symbol_body ("
    "symbol_id integer PRIMARY KEY REFERENCES recon.symbol (id) ON DELETE CASCADE, "
    "terms tsvector NOT NULL)"
)
_PG_BODY_INDEX = "CREATE INDEX symbol_body_terms ON recon.symbol_body USING gin (terms)"


class ReconVersionError(RuntimeError):
    """The recon index was written by another schema/parser version (or is missing)."""


def current_meta() -> dict[str, str]:
    """What `recon_meta` must hold for this code to read the index."""
    tree_sitter, tree_sitter_python = _parser_versions()
    return {
        "schema_version": str(RECON_SCHEMA_VERSION),
        "parser": PARSER_NAME,
        "tree_sitter": tree_sitter,
        "tree_sitter_python": tree_sitter_python,
    }


@functools.cache
def _parser_versions() -> tuple[str, str]:
    """The installed parser packages' versions (read once: a package's metadata costs
    milliseconds to find, and an incremental run has few to spare)."""
    return version("tree-sitter"), version("tree-sitter-python")


def default_target() -> str:
    return os.environ.get(RECON_ENV) or DEFAULT_RECON


# --- opening a target ---------------------------------------------------------------------

_URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def sqlite_path(target: str | os.PathLike) -> str | None:
    """The file path if `target` names a SQLite recon file, else None (a server URL)."""
    if isinstance(target, os.PathLike) or not _URL_RE.match(str(target)):
        return os.fspath(target)
    url = make_url(str(target))
    if url.get_backend_name() == "sqlite":
        if not url.database or url.database == ":memory:":
            raise ValueError("a recon index needs a file, not an in-memory SQLite database")
        return url.database
    return None


def describe_target(target: str | os.PathLike) -> str:
    """A target for messages, with any password hidden."""
    path = sqlite_path(target)
    if path is not None:
        return path
    from ..db import shown_url  # (recon is read without the store's modules otherwise)

    return shown_url(str(target))


def create_recon_engine(target: str | os.PathLike, *, read_only: bool = False,
                        pooled: bool = False) -> Engine:
    """An engine whose connections see the recon tables as schema ``recon``.

    SQLite: an in-memory main database with the recon file ATTACHed as ``recon``,
    read-only if `read_only` (a server URL is opened as given: what it may write is
    up to the database role); `pooled`: a connection closed goes back to a pool, open
    (the indexer keeps the engine between runs: `recon/kept.py`), else it is closed.
    PostgreSQL (or any server URL): the database itself; the tables are in ``recon``.
    """
    path = sqlite_path(target)
    if path is None:
        if make_url(str(target)).get_backend_name() == "postgresql":
            require_pg_driver(describe_target(target))
        return sa.create_engine(str(target), poolclass=NullPool)
    # the sqlite3 driver's own settings; cross_thread: the indexer hands bulk work to a
    # helper thread (serially)
    return sqlite_engine("sqlite://", recon_path=path, recon_read_only=read_only,
                         store_settings=False, poolclass=QueuePool if pooled else NullPool,
                         cross_thread=True)


def is_sqlite(bind: Engine | Connection) -> bool:
    return bind.dialect.name == "sqlite"


# --- DDL ----------------------------------------------------------------------------------


def table_ddl(dialect: sa.engine.Dialect) -> list[str]:
    """CREATE TABLE statements, and SQLite's full-text table. Indexes (the unique ones
    too) are separate: a bulk load builds them after the rows are in, several times
    faster than maintaining them row by row."""
    out = [str(CreateTable(table).compile(dialect=dialect)).strip() for table in TABLES]
    if dialect.name == "sqlite":
        out += [_SQLITE_FTS, _SQLITE_BODY_FTS]
    else:
        out.append(_PG_BODY)
    return out


def added_table_ddl(dialect: sa.engine.Dialect) -> list[str]:
    """CREATE TABLE IF NOT EXISTS for ADDED_TABLES, for an index written before them."""
    return [str(CreateTable(table, if_not_exists=True).compile(dialect=dialect)).strip()
            for table in ADDED_TABLES]


def index_ddl(dialect: sa.engine.Dialect, *, edges: bool) -> list[str]:
    """CREATE INDEX statements, and PostgreSQL's full-text column and index.

    `edges`: True for the edge table's indexes only, False for all the others (and
    the full-text index). A bulk load builds the two groups at different moments.
    """
    out = [
        str(CreateIndex(index).compile(dialect=dialect)).strip()
        for table in TABLES
        if (table is edge) == edges
        for index in sorted(table.indexes, key=_index_name)
    ]
    if not edges and dialect.name == "postgresql":
        out.extend(_PG_FTS)
        out.append(_PG_BODY_INDEX)
    return out


def _index_name(index: sa.Index) -> str:
    """What index_ddl orders a table's indexes by: every recon index is named."""
    if index.name is None:
        raise ValueError(f"an index of recon table {index.table} has no name")
    return index.name


def drop_statements(dialect: sa.engine.Dialect) -> list[str]:
    out = []
    if dialect.name == "sqlite":
        out.append("DROP TABLE IF EXISTS recon.symbol_fts")
        out.append("DROP TABLE IF EXISTS recon.symbol_body_fts")
    else:
        out.append("DROP TABLE IF EXISTS recon.symbol_body")
    cascade = " CASCADE" if dialect.name == "postgresql" else ""
    for table in reversed(TABLES):
        out.append(f"DROP TABLE IF EXISTS recon.{table.name}{cascade}")
    return out


# --- version check ------------------------------------------------------------------------


def read_meta(conn: Connection) -> dict[str, str] | None:
    """`recon_meta` as a dict, or None if the recon tables do not exist."""
    if not sa.inspect(conn).has_table("recon_meta", schema=RECON_SCHEMA):
        return None
    rows = conn.execute(sa.text("SELECT key, value FROM recon.recon_meta ORDER BY key"))
    return {k: v for k, v in rows}


def rebuild_hint(target: str | os.PathLike | None = None, *, rebuild: bool = True) -> str:
    where = describe_target(target) if target is not None else "FILE"
    return f"ctxdb recon index PATH --recon {where}" + (" --rebuild" if rebuild else "")


def check_meta(meta: dict[str, str] | None, target: Any = None) -> dict[str, str]:
    """`meta` if it matches this code's versions; else ReconVersionError (None: no index)."""
    want = current_meta()
    where = describe_target(target) if isinstance(target, str | os.PathLike) else "the recon index"
    if meta is None:
        raise ReconVersionError(
            f"{where} holds no recon index; build it with: "
            f"{rebuild_hint(target, rebuild=False)}"
        )
    diffs = [
        f"{k} {meta.get(k, 'missing')} (this code: {v})"
        for k, v in want.items()
        if meta.get(k) != v
    ]
    if diffs:
        raise ReconVersionError(
            f"{where} was written with {'; '.join(diffs)}. "
            f"Rebuild it: {rebuild_hint(target)}"
        )
    return meta


def check_recon_version(target_or_connection: Any) -> dict[str, str]:
    """Raise ReconVersionError unless the recon index matches this code's versions.

    Accepts a recon path / SQLAlchemy URL, an Engine, or a Connection on which the
    recon tables are visible as schema ``recon`` (ATTACHed on SQLite). Returns the meta.
    """
    obj = target_or_connection
    if isinstance(obj, Connection):
        return check_meta(read_meta(obj), None)
    if isinstance(obj, Engine):
        with obj.connect() as conn:
            meta = read_meta(conn)
        return check_meta(meta, None)
    if isinstance(obj, str | os.PathLike):
        path = sqlite_path(obj)
        if path is not None and not Path(path).exists():
            check_meta(None, obj)
        engine = create_recon_engine(obj)
        try:
            with engine.connect() as conn:
                meta = read_meta(conn)
        finally:
            engine.dispose()
        return check_meta(meta, obj)
    raise TypeError(f"expected a path, URL, Engine or Connection, not {type(obj).__name__}")


@contextmanager
def open_recon(target: str | os.PathLike | None = None) -> Iterator[Connection]:
    """A read connection to a checked recon index (tables visible as ``recon.*``)."""
    target = target if target is not None else default_target()
    path = sqlite_path(target)
    if path is not None and not Path(path).exists():
        check_meta(None, target)
    engine = create_recon_engine(target)
    try:
        with engine.connect() as conn:
            check_meta(read_meta(conn), target)
            yield conn
    finally:
        engine.dispose()


# --- small read helpers -------------------------------------------------------------------

_WORD = re.compile(r"\w+")


def lookup_symbol(conn: Connection, entity_key: str) -> dict[str, Any] | None:
    """The symbol row with this entity key (``path::Qual.name`` or ``path``), or None."""
    row = conn.execute(
        sa.text(
            "SELECT s.id, s.key, s.kind, s.name, s.qualname, f.path, s.start_line, s.end_line,"
            " s.start_byte, s.end_byte, s.signature, s.doc, s.parent_id"
            " FROM recon.symbol s JOIN recon.file f ON f.id = s.file_id WHERE s.key = :key"
        ),
        {"key": entity_key},
    ).mappings().first()
    return dict(row) if row is not None else None


def search_symbols(conn: Connection, query: str, limit: int = 20) -> list[dict[str, Any]]:
    """Full-text search over symbol names, qualnames, signatures and doc lines.

    Words of `query` are ANDed. Best match first (bm25 on SQLite, ts_rank on
    PostgreSQL), ties by entity key. Punctuation in `query` is ignored.
    """
    words = _WORD.findall(query)
    if not words:
        return []
    if is_sqlite(conn):
        match = " ".join('"' + w.replace('"', "") + '"' for w in words)
        sql = (
            "SELECT s.key, s.kind, s.signature, s.doc, bm25(symbol_fts) AS score"
            " FROM recon.symbol_fts JOIN recon.symbol s ON s.id = symbol_fts.rowid"
            " WHERE symbol_fts MATCH :q ORDER BY score, s.key LIMIT :limit"
        )
    else:
        match = " ".join(words)
        sql = (
            "SELECT s.key, s.kind, s.signature, s.doc,"
            " -ts_rank(s.fts, plainto_tsquery('simple', :q)) AS score"
            " FROM recon.symbol s WHERE s.fts @@ plainto_tsquery('simple', :q)"
            " ORDER BY score, s.key LIMIT :limit"
        )
    rows = conn.execute(sa.text(sql), {"q": match, "limit": limit}).mappings()
    return [dict(r) for r in rows]


__all__ = [
    "DEFAULT_RECON",
    "EDGE_KINDS",
    "RECON_ENV",
    "RECON_SCHEMA",
    "RECON_SCHEMA_VERSION",
    "SYMBOL_KINDS",
    "ReconVersionError",
    "binding",
    "check_recon_version",
    "create_recon_engine",
    "edge",
    "file",
    "file_source",
    "lookup_symbol",
    "open_recon",
    "recon_meta",
    "recon_tables",
    "search_symbols",
    "symbol",
]
