"""``ctxdb retrieve``: the recon symbols and files a task is about, or --eval's measure."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from .shared import (
    DEFAULT_AB_CACHE,
    EXIT_BAD_INPUT,
    EXIT_OK,
    EXIT_VIOLATIONS,
    RECON_BY_DEFAULT_HELP,
    add_db_option,
    add_recon_option,
    progress_callback,
    read_text_argument,
    recon_by_default,
)


def register(commands: argparse._SubParsersAction) -> None:
    retrieve = commands.add_parser(
        "retrieve", help="rank the recon symbols and files a task is about (component 04)",
        description="Rank candidate symbols (entity key, fused score, the signals that found "
        "it) and files for a task text, from the recon index: body BM25, names the task "
        "mentions, traceback frames, the failing tests' callees and the modules their files "
        "import; then structure, classes by their members, the strongest classes' methods "
        "and what the strongest hits call. With --eval, "
        "measure the retriever on SWE-bench-format instances instead (materialised and "
        "indexed as `ab run` does, in the same cache).",
    )
    retrieve.add_argument("task", metavar="TASK", nargs="?",
                          help="a file holding the task text, or - for standard input")
    add_db_option(retrieve)
    add_recon_option(retrieve, help_text=RECON_BY_DEFAULT_HELP)
    retrieve.add_argument("--test", action="append", metavar="TEST_ID",
                          help="a failing test: pytest id, Django id or bare name (repeatable)")
    retrieve.add_argument("--traceback", metavar="FILE",
                          help="a file of live output holding traceback frames")
    retrieve.add_argument("--limit", type=int, default=None,
                          help="how many symbols and files (default 30)")
    retrieve.add_argument("--json", action="store_true",
                          help="print JSON (with --eval: one object per instance per line)")
    retrieve.add_argument("--eval", metavar="INSTANCES.jsonl",
                          help="measure the retriever on these instances (recall, MRR, latency)")
    retrieve.add_argument("--cache", default=str(DEFAULT_AB_CACHE),
                          help="with --eval: where trees and recon indexes are cached "
                          "(shared with `ab run`)")
    retrieve.set_defaults(func=_cmd_retrieve)


def _cmd_retrieve(args) -> int:
    from ..db import is_sqlite, resolve_url
    from ..recon.schema import DEFAULT_RECON, RECON_ENV

    if args.eval:
        return _retrieve_eval(args)
    if args.task is None:
        raise ValueError("TASK: expected a file holding the task text (or - for standard "
                         "input), or --eval INSTANCES.jsonl")
    task = read_text_argument("TASK", args.task)
    traceback = read_text_argument("--traceback", args.traceback) if args.traceback else None
    recon = recon_by_default(args)
    if recon is None and is_sqlite(resolve_url(args.db)):
        raise ValueError(f"--recon: no recon index given and no ./{DEFAULT_RECON} here; "
                         f"expected --recon FILE or ${RECON_ENV} (build one with "
                         f"`ctxdb recon index PATH`)")
    # the store is not read at all, nor made (a recon index is all retrieve reads): a
    # SQLite store's recon file, or the schema recon of a PostgreSQL store's database
    found = _retrieve_over(recon or resolve_url(args.db), task, args.test or (), traceback,
                           args.limit)
    if args.json:
        print(json.dumps(found.to_json_dict(), sort_keys=True))
        return EXIT_OK
    for rank, candidate in enumerate(found.symbols, start=1):
        signals = ", ".join(f"{name} #{r}" for name, r in candidate.signals.items())
        print(f"{rank:>3}  {candidate.score:.6f}  {candidate.entity_key}  ({signals})")
    print("files:")
    for rank, file in enumerate(found.files, start=1):
        print(f"{rank:>3}  {file.score:.6f}  {file.path}")
    return EXIT_OK


def _retrieve_over(recon: str, task: str, failing_tests: Sequence[str], traceback: str | None,
                   limit: int | None):
    """``ContextStore.retrieve`` over a recon index alone (a file, or a server URL)."""
    from ..recon.schema import check_meta, create_recon_engine, read_meta
    from ..retrieval import DEFAULT_LIMIT, retrieve
    from ..store import checked_recon_file

    target = recon if "://" in recon else checked_recon_file(recon)
    engine = create_recon_engine(target, read_only=True)
    try:
        with engine.connect() as connection:
            if "://" in recon:  # a file's version was read by checked_recon_file
                check_meta(read_meta(connection), recon)  # (naming the database)
            return retrieve(connection, task, failing_tests=tuple(failing_tests),
                            traceback=traceback, limit=limit or DEFAULT_LIMIT)
    finally:
        engine.dispose()


def _retrieve_eval(args) -> int:
    from ..retrieval import evaluate

    scores, errors = evaluate.evaluate(args.eval, Path(args.cache),
                                       progress=progress_callback("retrieve --eval",
                                                                   "instances"))
    if args.json:
        for line in evaluate.json_lines(scores):
            print(line)
    else:
        print(evaluate.report(scores))
    failed = [s for s in scores if s.error is not None]
    for score in failed:
        print(f"failed: {score.instance_id}: {score.error}", file=sys.stderr)
    # last, where the reader looks, as `ab run` does: the lines not measured, and why
    for error in errors:
        print(f"ctxdb: error: not measured: {error}", file=sys.stderr)
    if errors:
        return EXIT_BAD_INPUT
    return EXIT_OK if len(failed) < len(scores) or not scores else EXIT_VIOLATIONS
