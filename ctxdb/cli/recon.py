"""``ctxdb recon``: build the recon index (index) and read it without SQL (show, stats).

Each handler runs its command in `ctxdb.recon.handlers`, imported when the command runs:
registering `ctxdb recon` imports no SQLAlchemy or tree-sitter. It returns the exit code
(0 ok, 2 bad input or unknown entity).
"""

from __future__ import annotations

import argparse

from ..config import DEFAULT_RECON, RECON_ENV


def register(commands: argparse._SubParsersAction) -> None:
    recon = commands.add_parser(
        "recon",
        help="build and read the recon index (files, symbols, edges)",
        description=(
            "The recon index: every Python file, symbol (module, class, function, method) "
            "and edge (calls, imports, inherits, tests) of a repository, parsed with "
            "tree-sitter. Later stages read spans, signatures and source text from it."
        ),
    )
    recon_commands = recon.add_subparsers(dest="recon_command", metavar="COMMAND",
                                          required=True)
    _add_index(recon_commands)
    _add_show(recon_commands)
    _add_stats(recon_commands)


def _add_index(recon_commands: argparse._SubParsersAction) -> None:
    index = recon_commands.add_parser(
        "index",
        help="index a repository (only changed files on a second run)",
        description=(
            "Walk the Python files under PATH and write the recon index. A second run "
            "re-parses only files whose content changed and drops files that are gone."
        ),
    )
    index.add_argument("path", metavar="PATH", help="root of the repository to index")
    _recon_option(index)
    index.add_argument(
        "--rebuild",
        action="store_true",
        help="drop the index and build it from scratch (needed after a version change)",
    )
    index.add_argument(
        "--changed",
        action="append",
        metavar="PATH",
        help="a path (file or directory, relative to PATH or absolute under it) that may "
        "have changed since the last run; repeat for more. Only these are looked at "
        "(default: walk the whole tree)",
    )
    index.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar on stderr (default: only when stderr is a terminal)",
    )
    index.set_defaults(func=_cmd_index)


def _cmd_index(args: argparse.Namespace) -> int:
    from ..recon import handlers

    return handlers.cmd_index(args)


def _add_show(recon_commands: argparse._SubParsersAction) -> None:
    show = recon_commands.add_parser(
        "show",
        help="one symbol: kind, span, signature, docstring line, edges in and out",
        description=(
            "Print what the index knows about one entity: its kind, file span, signature, "
            "first docstring line, and its edges in and out."
        ),
    )
    show.add_argument(
        "entity",
        metavar="ENTITY",
        help="entity key: path::Qual.name for a symbol (src/pkg/mod.py::Class.method), "
        "or the file path for a module",
    )
    _recon_option(show)
    show.set_defaults(func=_cmd_show)


def _cmd_show(args: argparse.Namespace) -> int:
    from ..recon import handlers

    return handlers.cmd_show(args)


def _add_stats(recon_commands: argparse._SubParsersAction) -> None:
    stats = recon_commands.add_parser(
        "stats",
        help="counts of files, symbols by kind, edges by kind, and what was skipped",
        description=(
            "Counts of files, symbols by kind, edges by kind (resolved or not), and the "
            "paths skipped, each with its reason: files too large or too deep to parse "
            "(file rows without symbols), FIFOs, sockets, devices, symlink loops, links "
            "leaving the root."
        ),
    )
    _recon_option(stats)
    stats.set_defaults(func=_cmd_stats)


def _cmd_stats(args: argparse.Namespace) -> int:
    from ..recon import handlers

    return handlers.cmd_stats(args)


def _recon_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--recon",
        metavar="FILE_OR_URL",
        default=None,
        help=f"recon index: a SQLite file or a SQLAlchemy URL "
        f"(default: ${RECON_ENV} or {DEFAULT_RECON})",
    )

