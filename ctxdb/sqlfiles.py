"""SQL lives in files under ``sql/``, loaded by name; Python never splices values into it."""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from .paths import CHECKS_DIR, SQL_DIR, VIEWS_DIR, require_dir

_VIEW_NAME = re.compile(r"^\s*CREATE\s+VIEW\s+([a-z_][a-z0-9_]*)\s+AS\b",
                        re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class SqlFile:
    name: str  # the view's name, or the check's file stem
    path: Path
    sql: str  # the statement without its trailing semicolon
    header: str  # the leading comment: what the statement computes
    sha256: str


def _strip(text: str) -> str:
    return text.strip().rstrip(";").strip()


def _header(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line[2:].strip())
    return " ".join(lines).strip()


def _read(path: Path, name: str) -> SqlFile:
    text = path.read_text(encoding="utf-8")
    return SqlFile(
        name=name,
        path=path,
        sql=_strip(text),
        header=_header(text),
        sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
    )


@functools.cache
def load_sql(relative_name: str) -> str:
    """The statement in ``sql/<relative_name>.sql``."""
    path = require_dir(SQL_DIR) / f"{relative_name}.sql"
    if not path.is_file():
        raise FileNotFoundError(f"no SQL file {path}")
    return _read(path, relative_name).sql


@functools.cache
def sql_statement(relative_name: str):
    """``sql/<relative_name>.sql`` as a SQLAlchemy text statement, built once per process."""
    from sqlalchemy import text

    return text(load_sql(relative_name))


def view_files() -> list[SqlFile]:
    """``sql/views/*.sql`` in file-name order (a view may read one named before it)."""
    files = []
    for path in sorted(require_dir(VIEWS_DIR).glob("*.sql")):
        text = path.read_text(encoding="utf-8")
        match = _VIEW_NAME.search(text)
        if match is None:
            raise ValueError(f"{path}: expected one 'CREATE VIEW name AS …' statement")
        files.append(_read(path, match.group(1).lower()))
    return files


def sql_files(relative_dir: str) -> list[SqlFile]:
    """``sql/<relative_dir>/*.sql`` in file-name order, each named by its stem."""
    return [_read(p, p.stem) for p in sorted(require_dir(SQL_DIR / relative_dir).glob("*.sql"))]


def check_files() -> list[SqlFile]:
    """``sql/checks/*.sql``: each returns the rows that break one rule."""
    return [_read(p, p.stem) for p in sorted(require_dir(CHECKS_DIR).glob("*.sql"))]


@functools.cache
def sql_script_statements(relative_name: str) -> list[str]:
    """The statements of the script ``sql/<relative_name>.sql``, split where SQLite's
    own parser says one is complete (a ``;`` inside a string does not end one)."""
    import sqlite3

    path = require_dir(SQL_DIR) / f"{relative_name}.sql"
    if not path.is_file():
        raise FileNotFoundError(f"no SQL file {path}")
    statements, pending = [], ""
    for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
        if not pending and line.startswith("--"):
            continue
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    if pending.strip():
        raise ValueError(f"{path}: ends inside a statement")
    return statements
