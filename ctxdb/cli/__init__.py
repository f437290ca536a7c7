"""The ``ctxdb`` command line.

Exit status: 0 on success, 1 when a check finds violations, 2 on bad input
(the message names the field or file and what was expected), 130 when stopped by
Ctrl-C and 143 by SIGTERM (one line says so, from the first step on, however often).

One module per command (or group of subcommands), each with one ``register(commands)``
that adds its parsers, every option beside the handler it sets as ``func``;
`build_parser` calls them in the order ``ctxdb --help`` lists the commands.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from ..config import DB_URL_ENV, ConfigError
from . import (
    ab,
    construct,
    datasette,
    db,
    decisions,
    recon,
    replay,
    report,
    retrieve,
    tokens,
    verify,
)
from .shared import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_VIOLATIONS,
)

__all__ = ["EXIT_BAD_INPUT", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_TERMINATED", "EXIT_VIOLATIONS",
           "build_parser", "main"]

# the command modules, in the order `ctxdb --help` lists their commands
COMMAND_MODULES = (db, construct, decisions, verify, ab, replay, report, retrieve, datasette,
                   tokens, recon)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctxdb",
        description="Context construction for an LLM coding harness, as a SQL evidence store.",
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"ctxdb {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    for module in COMMAND_MODULES:
        module.register(commands)
    _name_own_parser(parser)
    return parser


def _name_own_parser(parser: argparse.ArgumentParser) -> None:
    """Each command's parser as the default of its ``command_parser``: an option it does
    not know is refused with its usage (``ctxdb show --bogus``), not the top level's."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command_parser in action.choices.values():
                command_parser.set_defaults(command_parser=command_parser)
                _name_own_parser(command_parser)


def main(argv: list[str] | None = None) -> int:
    from ..workers import stops_taken_once

    # a stop is taken from the first step, so one while the command's modules still load
    # is one line too, and once: a second cannot cut the first one's undoing short; the
    # handlers the caller had are back when main returns (tests and harnesses call it)
    with stops_taken_once():
        try:
            return _command(argv)
        except KeyboardInterrupt as stopped:  # before the command began, or after it
            return _stopped(stopped)          # ended: nothing of it is left to undo


def _command(argv: list[str] | None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        given = list(sys.argv[1:] if argv is None else argv)
        # an option before the command's name is the top level's, not the command's
        before_command = args.command in given and any(
            given.index(option) < given.index(args.command) for option in unknown
            if option in given)
        (parser if before_command else getattr(args, "command_parser", parser)).error(
            f"unrecognized arguments: {' '.join(unknown)}")
    from ..db import StoreUnreachable, stores_made_here
    from ..forensics import NotFound
    from ..migrate import StoreVersionError
    from ..recon import ReconVersionError
    from ..store import ReconNotFound
    from ..tokens import TokenizerUnavailable
    from ..workers import WorkerDied

    made_before = stores_made_here()
    try:
        if hasattr(args, "db"):
            _refuse_a_store_in_memory(args.db)
        status: int = args.func(args)
        if status == EXIT_BAD_INPUT:
            _discard_a_store_made_for_nothing(args, made_before)
        return status
    except KeyboardInterrupt as stopped:
        # Ctrl-C or SIGTERM: the work under way has undone itself on the way out (a
        # replay's run, its scratch tree and sandbox; a transaction); a store made for it
        # and left empty goes
        return _stopped(stopped, lambda: _discard_a_store_made_for_nothing(
            args, made_before))
    except BrokenPipeError:
        # The reader stopped (`ctxdb show 3 | head`): what it read was right; say nothing
        # more, and keep Python from complaining again when it flushes stdout at exit.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (AttributeError, OSError, ValueError):  # not a real file: nothing to flush
            pass
        return EXIT_OK
    except StoreUnreachable as exc:
        from ..db import connect_hint

        print(f"ctxdb: error: {_store_named_by(args)}: cannot connect to the store's "
              f"database: {exc.reason}{connect_hint(exc.reason)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except WorkerDied as exc:
        # what finished is in the store; a replay's run the worker had under way may be
        # left partial, and `verify` lists it
        left = ("; `ctxdb verify` lists the run the dead worker left half done (replaying "
                "it replaces it)" if args.command == "replay" else "")
        _discard_a_store_made_for_nothing(args, made_before)
        print(f"ctxdb: error: {exc}; what finished is recorded{left}", file=sys.stderr)
        return EXIT_VIOLATIONS
    except (
        ConfigError,
        StoreVersionError,
        ReconNotFound,
        ReconVersionError,
        TokenizerUnavailable,
        OSError,  # a file named on the command line (FileNotFoundError, IsADirectoryError…)
        NotFound,
        ValueError,  # RequestError, NotAStoreError, a bad URL…
    ) as exc:
        _discard_a_store_made_for_nothing(args, made_before)
        print(f"ctxdb: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:
        refused = _refused_by_database(exc)
        if refused is not None:
            what = "--recon" if args.command == "recon" else _store_named_by(args)
            from ..db import refusal_wanted

            wanted = refusal_wanted(refused)
            print(f"ctxdb: error: {what}: the database refused this command: {refused}; "
                  f"expected {wanted}", file=sys.stderr)
            return EXIT_BAD_INPUT
        reason = _unreachable_database(exc)
        if reason is None:
            raise
        # the recon commands' database is the recon index they name
        what = "--recon: cannot open the recon index" if args.command == "recon" \
            else f"{_store_named_by(args)}: cannot connect to the store's database"
        from ..db import connect_hint

        print(f"ctxdb: error: {what}: {reason}{connect_hint(reason)}", file=sys.stderr)
        return EXIT_BAD_INPUT




def _store_named_by(args: argparse.Namespace) -> str:
    """Where the command's store came from, as an error names it: ``--db``, else the
    environment variable, else the default file; with the URL, its password hidden."""
    from ..config import DB_URL_ENV, DEFAULT_DB_PATH
    from ..db import resolve_url, shown_url

    if getattr(args, "db", None):
        given = "--db"
    elif os.environ.get(DB_URL_ENV):
        given = f"${DB_URL_ENV}"
    else:
        return f"the default store ./{DEFAULT_DB_PATH}"
    try:
        return f"{given} {shown_url(resolve_url(args.db))}"
    except ValueError:  # (no URL: named by where it came from alone)
        return given


def _stopped(stopped: KeyboardInterrupt,
             discard_made: Callable[[], Path | None] = lambda: None) -> int:
    """The one line and the exit status of a stop (Ctrl-C or SIGTERM; a later one is only
    noted, ``workers.stops_taken_once``); ``discard_made`` removes a store made for
    nothing and says which."""
    from ..workers import Terminated

    terminated = isinstance(stopped, Terminated)
    if sys.stderr.isatty() and not terminated:
        sys.stderr.write("\n")  # off the line the terminal echoed ^C on (a progress bar)
    dropped = discard_made()
    kept = f": nothing was recorded, {dropped} was not kept" if dropped else ""
    print(f"ctxdb: {'terminated' if terminated else 'interrupted'}{kept}", file=sys.stderr)
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED


def _discard_a_store_made_for_nothing(args: argparse.Namespace,
                                      made_before: frozenset[tuple[int, int]]) -> Path | None:
    """Bad input (or an interrupted command) writes nothing: the SQLite store file ``--db``
    names goes when this command made it and it holds nothing a user gave
    (``db.discard_store_made_here``). Returns the file when it went."""
    if not hasattr(args, "db"):
        return None
    from ..db import discard_store_made_here, resolve_url, sqlite_file_of

    try:
        store_file = sqlite_file_of(resolve_url(args.db))
    except ValueError:  # a --db that is no URL: nothing was made
        return None
    return store_file if discard_store_made_here(store_file, made_before) else None


def _refuse_a_store_in_memory(db: str | None) -> None:
    """A command's store must outlive the command: ``sqlite://`` is for the library."""
    from ..db import is_sqlite_in_memory, resolve_url

    where = "--db" if db is not None else f"${DB_URL_ENV}"
    if is_sqlite_in_memory(resolve_url(db)):
        given = db if db is not None else os.environ.get(DB_URL_ENV, "")
        raise ValueError(f"{where} {given[:URL_SHOWN_CHARS]!r}: a store in memory is gone "
                         "when the command ends; expected a store file or a PostgreSQL URL")


URL_SHOWN_CHARS = 80  # of a store URL as given, repeated in its error


def _refused_by_database(exc: BaseException) -> str | None:
    """The database's first line when it refused a statement for want of rights (a
    PostgreSQL role without the privilege, a SQLite file opened read-only); else None."""
    if "sqlalchemy" not in sys.modules:
        return None
    from sqlalchemy.exc import DBAPIError

    from ..db import CONNECT_REASON_MAX_CHARS, INSUFFICIENT_PRIVILEGE_SQLSTATE, READ_ONLY_SQLITE

    # (the gate's queries run on the driver's connection: its own error, not SQLAlchemy's)
    orig = (exc.orig or exc) if isinstance(exc, DBAPIError) else exc
    if not isinstance(exc, DBAPIError) and getattr(orig, "sqlstate", None) is None:
        return None
    reason = (str(orig).strip().splitlines() or [""])[0][:CONNECT_REASON_MAX_CHARS]
    if getattr(orig, "sqlstate", None) == INSUFFICIENT_PRIVILEGE_SQLSTATE \
            or READ_ONLY_SQLITE in reason:
        return reason
    return None


def _unreachable_database(exc: BaseException) -> str | None:
    """Why a recon index's database could not be reached, when ``exc`` is a failure to
    connect (the store's own is ``StoreUnreachable``); else None."""
    if "sqlalchemy" not in sys.modules:
        return None
    from ..db import connect_failure

    return connect_failure(exc)
