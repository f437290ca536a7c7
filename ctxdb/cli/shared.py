"""What more than one command uses: the exit codes, the --db and --recon options, the
store a command opens, and its output (a file or standard output, a progress bar).

What the handlers need is imported in them: `ctxdb --help` and a mistyped command load
no SQLAlchemy, alembic, tree-sitter or tokenizer.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import DB_URL_ENV, DEFAULT_DB_PATH
from ..paths import write_whole

if TYPE_CHECKING:
    from ..store import ContextStore

EXIT_OK = 0
EXIT_VIOLATIONS = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 128 + signal.SIGINT  # as a shell reports a command Ctrl-C stopped
EXIT_TERMINATED = 128 + signal.SIGTERM  # and one SIGTERM stopped

# where `ab run` and `retrieve --eval` keep materialized trees and their recon indexes
DEFAULT_AB_CACHE = Path.home() / ".cache" / "ctxdb" / "ab"


def context_store():
    from ..store import ContextStore

    return ContextStore


def add_db_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        default=None,
        help=(f"store database: a file path or SQLAlchemy URL (default ${DB_URL_ENV} or "
              f"./{DEFAULT_DB_PATH})"),
    )


def add_recon_option(parser: argparse.ArgumentParser, help_text: str | None = None) -> None:
    parser.add_argument(
        "--recon", default=None,
        help=help_text or "recon index to ATTACH (a recon.db path; on PostgreSQL the schema recon "
        "is used)",
    )


def existing_store(db: str | None) -> str:
    """The store URL for a command that only reads. Opening a SQLite file creates it, so
    a file that is not there is an error naming it; a PostgreSQL URL is left to the
    server (connecting never creates a database). A path that is there but is no ctxdb
    store is refused when the store is opened (db.check_store_file)."""
    from ..db import resolve_url, sqlite_file_of

    url = resolve_url(db)
    path = sqlite_file_of(url)
    if path is not None and not path.exists():
        # (absolute: a relative URL is read from the working directory, which an agent's
        # shell, say, has elsewhere than the harness that made the store)
        raise FileNotFoundError(
            f"store database {path.absolute()} does not exist: a command that reads never "
            f"creates one "
            f"(expected an existing ctxdb store; check --db or ${DB_URL_ENV})"
        )
    return url


RECON_BY_DEFAULT_HELP = ("recon index (default: $CTXDB_RECON, then ./recon.db where `ctxdb "
                         "recon index` writes it, if there; a PostgreSQL store reads the "
                         "schema recon of its own database)")


def recon_by_default(args) -> str | None:
    """Where `construct` and `retrieve` find recon: --recon, then $CTXDB_RECON, then
    ./recon.db — where `ctxdb recon index` writes it — when that file exists and the store
    is SQLite (a PostgreSQL store reads the schema recon of its own database unless told)."""
    from ..db import is_sqlite, resolve_url
    from ..recon.schema import DEFAULT_RECON, RECON_ENV

    if args.recon:
        return str(args.recon)
    if os.environ.get(RECON_ENV):
        return os.environ[RECON_ENV]
    if is_sqlite(resolve_url(args.db)) and Path(DEFAULT_RECON).is_file():
        return DEFAULT_RECON
    return None


VIEWS_NAMED = 3  # of the views that differ, named in a reader's refusal


def open_existing_store(args, *, views_as_they_are: bool = False) -> ContextStore:
    """The store of a command that only reads (show, why, diff, verify, report): never
    created, nor migrated (``ContextStore.open(upgrade=False)``); one whose own views
    another ctxdb installed is refused, naming what rebuilds them — but for
    ``views_as_they_are`` (verify: it lists them)."""
    from ..db import shown_url
    from ..migrate import StoreVersionError

    url = existing_store(args.db)
    store = context_store().open(url, upgrade=False)
    try:
        drift = [] if views_as_they_are else store.view_drift(own_only=True)
    except BaseException:
        store.close()
        raise
    if drift:
        store.close()
        raise StoreVersionError(
            f"{shown_url(url)}: the store's views are not this ctxdb's "
            f"({'; '.join(drift[:VIEWS_NAMED])}{'; …' if len(drift) > VIEWS_NAMED else ''}): "
            "run `ctxdb db upgrade` (a command that reads never rewrites them)")
    return store


def store_revision(url: str) -> str | None:
    """The schema revision a store is stamped with (None: an empty database)."""
    from ..db import make_engine
    from ..migrate import current_revision

    engine = make_engine(url, reading=True)
    try:
        with engine.connect() as connection:
            return current_revision(connection)
    finally:
        engine.dispose()


def write_output(text: str, output: str | None, option: str = "--output") -> None:
    """``text`` to the file named by ``option`` (then a line saying so), else to standard
    output. A regular file is written whole or not at all (a temporary file beside it,
    renamed over it, with the mode it had); anything else there (a symbolic or hard link,
    a device, a pipe) is written through as it is. A path that cannot be written is named
    with the option."""
    if output is None:
        sys.stdout.write(text)
        return
    try:
        if os.path.lexists(output) and not (os.path.isfile(output)
                                            and not os.path.islink(output)
                                            and os.stat(output).st_nlink == 1):
            with open(output, "w", encoding="utf-8") as fh:
                fh.write(text)
        else:
            write_whole(output, text)
    except OSError as exc:
        raise ValueError(f"{option} {output}: {exc.strerror or exc}") from exc
    except UnicodeEncodeError as exc:
        raise ValueError(f"{option} {output}: the text cannot be written as UTF-8 "
                         f"({exc.reason})") from exc
    print(f"wrote {output}")


def read_text_argument(name: str, value: str) -> str:
    if value == "-":
        return sys.stdin.read()
    try:
        # as given: a CRLF stays two characters (text mode would count it as one LF)
        with open(value, encoding="utf-8", newline="") as fh:
            return fh.read()
    except OSError as exc:
        raise FileNotFoundError(f"{name} {value}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name} {value}: expected UTF-8 text, got byte "
                         f"0x{exc.object[exc.start]:02x} at offset {exc.start}") from exc


def progress_callback(label: str, unit: str):
    """A ``progress(done, total)`` for a runner: a bar on stderr if it is a terminal,
    drawn empty at ``done == 0``; nothing in a pipe."""
    from ..progress import ProgressBar

    bars: list[ProgressBar] = []

    def progress(done: int, total: int) -> None:
        if not bars:
            bars.append(ProgressBar(label, total, unit))
        if done == 0:
            bars[0].start()
        else:
            bars[0].step(done)

    return progress
