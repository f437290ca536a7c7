"""``ctxdb ab``: the A/B protocol (run instances through both arms, record outcomes)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..workers import DEFAULT_WORKERS
from .shared import (
    DEFAULT_AB_CACHE,
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_VIOLATIONS,
    add_db_option,
    context_store,
    existing_store,
    progress_callback,
)


def register(commands: argparse._SubParsersAction) -> None:
    ab = commands.add_parser(
        "ab", help="the A/B protocol: run instances through both arms, record outcomes",
        description="Spec §7: the constructor against the stuff-everything baseline.",
    )
    ab_commands = ab.add_subparsers(dest="ab_command", metavar="SUBCOMMAND", required=True)
    _add_run(ab_commands)
    _add_outcome(ab_commands)


def _add_run(ab_commands: argparse._SubParsersAction) -> None:
    ab_run = ab_commands.add_parser(
        "run", help="construct every arm's and variant's decisions for SWE-bench-format instances",
        description="Materialize each instance at its base commit with its test patch, index it, "
        "store its gold facts, and construct localize and edit decisions per arm and variant. "
        "A progress bar on stderr when it is a terminal. Bad lines are named after the good "
        "ones have run (exit 2); an instance that fails exits 1.",
    )
    ab_run.add_argument("instances", metavar="INSTANCES.jsonl",
                        help="SWE-bench-format lines with repo_path or repo_git")
    add_db_option(ab_run)
    ab_run.add_argument("--arms", default="ctx08,current",
                        help="comma-separated arms (default: ctx08,current)")
    ab_run.add_argument("--variants", default="default",
                        help="comma-separated ctx08 variants (default: default); see docs/ab.md")
    ab_run.add_argument("--localization", choices=("oracle", "retrieval"), default="oracle",
                        help="edit target: the first gold entity (oracle) or the top hit")
    ab_run.add_argument("--workers", type=int, default=DEFAULT_WORKERS,
                        help="worker processes (default: the CPUs this process may use)")
    ab_run.add_argument("--cache", default=str(DEFAULT_AB_CACHE),
                        help="where materialized trees and their recon indexes are kept")
    ab_run.add_argument("--run-prefix", default="ab", help="run ids are PREFIX/ARM/VARIANT")
    ab_run.add_argument("--ranker", default="none", metavar="none|oracle|URL",
                        help="the ranking step's endpoint: none (default; no endpoint, whatever "
                        "the settings say), oracle (a server on 127.0.0.1 scoring the "
                        "instance's gold facts 1.0, the others 0.0: an upper bound, labelled "
                        "in the run ids and reports) or an OpenAI-compatible URL")
    ab_run.set_defaults(func=_cmd_ab_run)


def _cmd_ab_run(args) -> int:
    """Exit 2 when a line is bad (the good ones are run first; each bad one is named on
    stderr with its line, field and what was expected), else 1 when an instance failed,
    else 0."""
    from pathlib import Path

    from ..ab.materialize import describe_skipped
    from ..ab.runner import AbOptions, run_ab
    from ..db import resolve_url

    if not Path(args.instances).is_file():
        raise FileNotFoundError(f"INSTANCES.jsonl {args.instances}: no such file (expected "
                                "SWE-bench instances, one JSON object per line)")
    options = AbOptions(
        arms=tuple(args.arms.split(",")),
        variants=tuple(args.variants.split(",")),
        localization=args.localization,
        workers=args.workers,
        cache_dir=Path(args.cache),
        run_prefix=args.run_prefix,
        ranker=args.ranker,
    )
    summary = run_ab(resolve_url(args.db), args.instances, options,
                     progress=progress_callback("ab run", "instances"))
    for result in summary.results:
        if result.skipped:
            print(f"materialized {result.instance_id} without "
                  f"{describe_skipped(result.skipped)}")
    for result in summary.failed:
        print(f"failed: {result.error}", file=sys.stderr)
    done = [r for r in summary.results if not r.error]
    print(f"ab run: {len(done)} instance(s) done, {sum(r.decisions for r in done)} decisions; "
          f"{len(summary.failed)} failed, {len(summary.input_errors)} bad line(s); "
          f"ranker {options.ranker}")
    # last, where the reader looks: what was not run, and why
    for error in summary.input_errors:
        print(f"ctxdb: error: not run: {error}", file=sys.stderr)
    if summary.input_errors:
        return EXIT_BAD_INPUT
    return EXIT_VIOLATIONS if summary.failed else EXIT_OK


def _add_outcome(ab_commands: argparse._SubParsersAction) -> None:
    ab_outcome = ab_commands.add_parser(
        "outcome", help="record harness outcomes from a JSONL file",
        description="Each line: {run_id, instance_id, solved, cost_usd?, model_tokens_in?, "
        "model_tokens_out?}. All or nothing: any bad line is named (line, field, what was "
        "expected) and nothing is recorded (exit 2).",
    )
    ab_outcome.add_argument("file", metavar="FILE.jsonl", help="outcomes, one JSON object per line")
    add_db_option(ab_outcome)
    ab_outcome.set_defaults(func=_cmd_ab_outcome)


# of an outcome file's bad lines, those named one by one (the rest are counted): a file
# of another kind is bad on every line
BAD_LINES_NAMED = 10


def _one_document_hint(path: Path) -> str:
    """What a file that is one JSON document, not one outcome per line, is taken for."""
    import json

    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return ""
    if not isinstance(document, dict):
        return ""
    trajectory = isinstance(document.get("messages"), list)
    return ("; the file is one JSON document" + (
        ", a trajectory: its line is {\"run_id\": info.ctxdb.run_id, \"instance_id\": "
        "info.ctxdb.instance_id, \"solved\": the evaluation's verdict}" if trajectory else "")
        + ", where an outcome file holds one JSON object per line")


def _cmd_ab_outcome(args) -> int:
    """All or nothing: any bad line (each named on stderr) means nothing is recorded, exit 2."""
    from ..outcomes import import_outcomes

    if not Path(args.file).is_file():
        raise FileNotFoundError(f"FILE.jsonl {args.file}: no such file (expected outcomes, "
                                "one JSON object per line)")
    with context_store().open(existing_store(args.db)) as store:
        recorded, errors = import_outcomes(store, args.file)
    for error in errors[:BAD_LINES_NAMED]:
        print(f"ctxdb: error: {error}", file=sys.stderr)
    if len(errors) > BAD_LINES_NAMED:
        print(f"ctxdb: error: and {len(errors) - BAD_LINES_NAMED} more bad lines",
              file=sys.stderr)
    if errors:
        print(f"ctxdb: error: {len(errors)} bad line(s) in {args.file}: nothing recorded"
              f"{_one_document_hint(Path(args.file))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"recorded {recorded} outcome(s)")
    return EXIT_OK
