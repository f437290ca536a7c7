"""``ctxdb tokens count``: token counts offline, per tokenizer."""

from __future__ import annotations

import argparse
import sys

from ..config import TOKENIZER_NAMES
from .shared import EXIT_OK, read_text_argument


def register(commands: argparse._SubParsersAction) -> None:
    tokens = commands.add_parser("tokens", help="count tokens offline",
                                 description="Token counting.")
    token_commands = tokens.add_subparsers(dest="tokens_command", metavar="SUBCOMMAND",
                                           required=True)
    count = token_commands.add_parser(
        "count", help="count the tokens of a file with each tokenizer",
        description="Print the exact token count of FILE (or - for stdin) per tokenizer.",
    )
    count.add_argument("file", metavar="FILE", help="a text file, or - for standard input")
    count.add_argument(
        "--tokenizer", action="append", choices=TOKENIZER_NAMES,
        help="tokenizer to use (repeatable; default: every one installed — deepseek-v4 needs "
        "the deepseek extra — noting on standard error any that is not)",
    )
    count.set_defaults(func=_cmd_tokens_count)


def _cmd_tokens_count(args) -> int:
    """Counts with the tokenizers asked for, every one loaded before anything is printed:
    one named with --tokenizer that cannot load is an error (exit 2, no count); without
    --tokenizer, those installed count and a missing optional one is noted on stderr."""
    from ..tokens import TokenizerUnavailable, get_counter

    text = read_text_argument("FILE", args.file)
    counters, missing = [], []
    for name in dict.fromkeys(args.tokenizer or TOKENIZER_NAMES):
        try:
            counters.append(get_counter(name))
        except TokenizerUnavailable as unavailable:
            if args.tokenizer:
                raise
            missing.append((name, unavailable))
    if not counters:
        raise missing[0][1]
    for counter in counters:
        print(f"{counter.name}\t{counter.count(text)}")
    for name, problem in missing:
        print(f"ctxdb: note: {name} not counted: {problem}", file=sys.stderr)
    return EXIT_OK
