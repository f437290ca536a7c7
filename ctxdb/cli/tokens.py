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
        description="Print the token count of FILE (or - for stdin) per tokenizer: exact, "
        "or an upper bound, noted on standard error, for a text it counts in slices (one "
        "over ctxdb.tokens.COUNT_EXACT_MAX_CHARS characters, or holding an unbroken run of "
        "ctxdb.tokens.LONG_RUN_CHARS or more: docs/tokens.md).",
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
    from ..tokens import TokenizerUnavailable, count_in_slices, count_is_bounded, get_counter

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
        print(f"{counter.name}\t{count_in_slices(counter.count, text)}")
    if count_is_bounded(text):
        print(f"ctxdb: note: {'each count is' if len(counters) > 1 else 'the count is'} an "
              f"upper bound: the text is counted in slices ({_why_sliced(text)}; "
              "docs/tokens.md)", file=sys.stderr)
    for name, problem in missing:
        print(f"ctxdb: note: {name} not counted: {problem}", file=sys.stderr)
    return EXIT_OK


def _why_sliced(text: str) -> str:
    from ..tokens import COUNT_EXACT_MAX_CHARS, LONG_RUN_CHARS

    if len(text) > COUNT_EXACT_MAX_CHARS:
        return f"{len(text):,} characters, over {COUNT_EXACT_MAX_CHARS:,}"
    return f"it holds an unbroken run of {LONG_RUN_CHARS} or more characters"
