"""The ``ctxdb`` command line.

Exit status: 0 on success, 1 when a check finds violations, 2 on bad input
(the message names the field or file and what was expected).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import DB_URL_ENV, DEFAULT_DB_PATH, TOKENIZER_NAMES, ConfigError
from ..workers import DEFAULT_WORKERS

# What the handlers need is imported in them: `ctxdb --help` and a mistyped command
# load no SQLAlchemy, alembic, tree-sitter or tokenizer.
if TYPE_CHECKING:
    from ..store import ContextStore

def _context_store():
    from ..store import ContextStore

    return ContextStore


EXIT_OK = 0
EXIT_VIOLATIONS = 1
EXIT_BAD_INPUT = 2


def _add_db_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        default=None,
        help=(f"store database: a file path or SQLAlchemy URL (default ${DB_URL_ENV} or "
              f"./{DEFAULT_DB_PATH})"),
    )


def _add_recon_option(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    parser.add_argument(
        "--recon", default=None,
        help=help or "recon index to ATTACH (a recon.db path; on PostgreSQL the schema recon "
        "is used)",
    )


def _existing_store(db: str | None) -> str:
    """The store URL for a command that only reads. Opening a SQLite file creates it, so
    a file that is not there is an error naming it; a PostgreSQL URL is left to the
    server (connecting never creates a database). A path that is there but is no ctxdb
    store is refused when the store is opened (db.check_store_file)."""
    from ..db import resolve_url, sqlite_file_of

    url = resolve_url(db)
    path = sqlite_file_of(url)
    if path is not None and not path.exists():
        raise FileNotFoundError(
            f"store database {path} does not exist: a command that reads never creates one "
            f"(expected an existing ctxdb store; check --db or ${DB_URL_ENV})"
        )
    return url


def _construct_recon(args) -> str | None:
    """Where `ctxdb construct` finds recon: --recon, then $CTXDB_RECON, then ./recon.db —
    where `ctxdb recon index` writes it — when that file exists and the store is SQLite
    (a PostgreSQL store reads the schema recon of its own database unless told)."""
    from ..db import is_sqlite, resolve_url
    from ..recon.schema import DEFAULT_RECON, RECON_ENV

    if args.recon:
        return args.recon
    if os.environ.get(RECON_ENV):
        return os.environ[RECON_ENV]
    if is_sqlite(resolve_url(args.db)) and Path(DEFAULT_RECON).is_file():
        return DEFAULT_RECON
    return None


def _cmd_db_upgrade(args) -> int:
    from ..db import resolve_url
    from ..migrate import upgrade_engine

    before, after = upgrade_engine(resolve_url(args.db), args.revision)
    print(f"already at {after}" if before == after
          else f"upgraded {before or '(empty)'} -> {after}")
    return EXIT_OK


def _store_revision(url: str) -> str | None:
    """The schema revision a store is stamped with (None: an empty database)."""
    from ..db import make_engine
    from ..migrate import current_revision

    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return current_revision(connection)
    finally:
        engine.dispose()


def _cmd_db_current(args) -> int:
    from ..migrate import _check_known, head_revision

    revision = _store_revision(_existing_store(args.db))
    _check_known(revision)  # a stamp this ctxdb does not know: made by a newer one (exit 2)
    head = head_revision()
    state = "head" if revision == head else f"behind head {head}; run `ctxdb db upgrade`"
    print(f"{revision or '(empty)'} ({state})")
    return EXIT_OK


def _cmd_db_history(args) -> int:
    """The migrations from the first to head, each marked applied or pending in the store
    (read from the files and the stamp, as opening a store does: no alembic)."""
    from ..migrate import head_revision, revision_order, revision_summaries

    named = args.db is not None or DB_URL_ENV in os.environ
    try:
        url = _existing_store(args.db)
    except FileNotFoundError:
        if named:
            raise
        url = None  # no store here: the history alone, as alembic prints it
    revision = None
    if url is not None:
        revision = _store_revision(url)
    order, summaries, head = revision_order(), revision_summaries(), head_revision()
    applied = set(order[: order.index(revision) + 1]) if revision in order else set()
    for number in order:
        state = "-" if url is None else ("applied" if number in applied else "pending")
        print(f"{number}  {state:<7}  {summaries.get(number, '')}"
              + ("  (head)" if number == head else ""))
    if url is None:
        print(f"(no store at ./{DEFAULT_DB_PATH}: pass --db to see which are applied)")
    elif revision is not None and revision not in order:
        print(f"the store is at {revision}, which this ctxdb does not know: a newer ctxdb made it")
    else:
        where = "head" if revision == head else "behind head; run `ctxdb db upgrade`"
        print(f"store at {revision or '(empty)'} ({where})")
    return EXIT_OK


def _write_output(text: str, output: str | None) -> None:
    """``text`` to the file named by -o (then a line saying so), else to standard output."""
    if output is None:
        sys.stdout.write(text)
        return
    with open(output, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(f"wrote {output}")


def _cmd_db_schema_docs(args) -> int:
    from ..analyst import schema_markdown

    _write_output(schema_markdown(), args.output)
    return EXIT_OK


def _cmd_datasette_metadata(args) -> int:
    from sqlalchemy.engine import make_url

    from ..analyst import datasette_metadata
    from ..db import is_sqlite
    from ..migrate import head_revision

    url = _existing_store(args.db)
    if not is_sqlite(url):
        raise ValueError("--db: Datasette serves SQLite files; expected a store's .db file, "
                         "not a PostgreSQL URL")
    revision = _store_revision(url)
    if revision != head_revision():
        raise ValueError(f"--db: the store is at schema revision {revision or '(empty)'}; the "
                         f"metadata describes {head_revision()}: run `ctxdb db upgrade` first")
    database = make_url(url).database
    # Datasette names a database after its file's stem
    name = Path(database.split("?", 1)[0].removeprefix("file:")).stem
    _write_output(json.dumps(datasette_metadata(name), indent=2, ensure_ascii=False) + "\n",
                  args.output)
    if args.output:
        print(f"serve it: datasette {database} --metadata {args.output}")
    return EXIT_OK


def _cmd_verify(args) -> int:
    with _context_store().open(_existing_store(args.db)) as store:
        violations = store.verify()
    if not violations:
        print("ok: every check in sql/checks/ returned no rows; views match sql/views/")
        return EXIT_OK
    for check, rows in violations.items():
        print(f"{check}: {len(rows)} violating row(s)")
        for row in rows[:20]:
            print("  " + json.dumps(row, default=str, sort_keys=True))
    return EXIT_VIOLATIONS


def _refuse_a_store_in_memory(db: str | None) -> None:
    """A command's store must outlive the command: ``sqlite://`` is for the library."""
    from ..db import is_sqlite_in_memory, resolve_url

    where = "--db" if db is not None else f"${DB_URL_ENV}"
    if is_sqlite_in_memory(resolve_url(db)):
        given = db if db is not None else os.environ.get(DB_URL_ENV, "")
        raise ValueError(f"{where} {given[:80]!r}: a store in memory is gone when the command "
                         "ends; expected a store file or a PostgreSQL URL")


def _open_store(args) -> ContextStore:
    return _context_store().open(args.db, recon=getattr(args, "recon", None))


def _open_existing_store(args) -> ContextStore:
    """The store of a command that only reads (why, show, diff): never created."""
    return _context_store().open(_existing_store(args.db))


ERROR_REASON_MAX_CHARS = 200  # of a driver's message quoted in a one-line error


def _unreachable_database(exc: BaseException) -> str | None:
    """Why the database could not be reached, when ``exc`` is a failure to connect (an
    OperationalError raised before any statement: refused, unknown host, bad password);
    else None."""
    if "sqlalchemy" not in sys.modules:
        return None
    from sqlalchemy.exc import OperationalError

    if not isinstance(exc, OperationalError) or exc.statement is not None:
        return None
    return str(exc.orig or exc).strip().splitlines()[0][:ERROR_REASON_MAX_CHARS]


def _cmd_construct(args) -> int:
    from dataclasses import replace

    from .. import forensics
    from ..request import (
        REQUEST_JSON_MAX_BYTES,
        DecisionRequest,
        RequestError,
        UnresolvedEntityWarning,
    )

    try:
        with open(args.request, "rb") as fh:
            raw = fh.read(REQUEST_JSON_MAX_BYTES + 1)  # past the limit: refused unread
    except OSError as exc:
        raise FileNotFoundError(f"request file {args.request}: {exc.strerror}") from exc
    try:
        request = DecisionRequest.from_json(raw)
    except RequestError as exc:
        raise RequestError(f"request file {args.request}: {exc}") from exc
    if args.arm:
        request = replace(request, arm=args.arm)
    from ..config import load_settings
    from ..pipeline.state import check_request_ceiling

    try:  # before the store is opened: a refused request creates no store file
        check_request_ceiling(request, load_settings())
    except RequestError as exc:
        raise RequestError(f"request file {args.request}: {exc}") from exc
    with _context_store().open(args.db, recon=_construct_recon(args)) as store:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UnresolvedEntityWarning)
            context = store.construct(request, strict=args.strict)
        for warning in caught:
            if issubclass(warning.category, UnresolvedEntityWarning):
                print(f"ctxdb: warning: {warning.message}", file=sys.stderr)
            else:  # not ours to word: shown as Python would have
                warnings.warn_explicit(warning.message, warning.category, warning.filename,
                                       warning.lineno)
        if args.json:
            print(context.to_json())
            return EXIT_OK
        with store.engine.connect() as connection:
            summary = forensics.summary(connection, context.decision_id)
    if not args.summary:
        print(context.render(), end="")
        print("─" * 72)
    print(summary)
    return EXIT_OK


def _cmd_why(args) -> int:
    from .. import forensics

    if (args.item is None) == (args.entity is None):
        raise ValueError("ctxdb why: expected ITEM (an item id such as E12) or --entity KEY, "
                         "one of the two")
    with _open_existing_store(args) as store, store.engine.connect() as connection:
        decision_id = forensics.resolve_decision(connection, args.decision)
        if args.entity is not None:  # every pool item of the entity, its evidence first
            item_ids = forensics.items_of_entity(connection, decision_id, args.entity)
        else:
            item_ids = [forensics.item_id_of(connection, decision_id, args.item)]
        paths = [(item_id, forensics.why(connection, decision_id, item_id))
                 for item_id in item_ids]
    for number, (item_id, rows) in enumerate(paths):
        if number:
            print()
        _print_why(decision_id, item_id, rows)
    return EXIT_OK


def _print_why(decision_id: int, item_id: str, rows) -> None:
    first = rows[0]
    print(f"decision {decision_id} · {item_id} · {first['source']} {first['kind']}"
          f" {first['entity_key'] or ''}".rstrip())
    print(f"provenance: {first['provenance']}")
    for row in rows:
        mark = "■" if row["is_final"] else "·"
        tokens = ""
        if row["tokens_before"] is not None or row["tokens_after"] is not None:
            tokens = f"  [{row['tokens_before']} -> {row['tokens_after']} tokens]"
        detail = f"  ({row['detail']})" if row["detail"] else ""
        print(f"  {mark} {row['stage']:<9} {row['action']:<20} "
              f"{row['driver'] or ''}{tokens}{detail}")
    if first["window_position"] is not None:
        print(f"in the window at position {first['window_position']} ({first['window_block']},"
              f" {first['window_rendering']})")


def _cmd_show(args) -> int:
    from .. import forensics

    if args.window_only and (args.item is not None or args.format != "text"):
        raise ValueError("--window-only: prints a decision's window as text, exactly as sent; "
                         "expected no ITEM and no --format other than text")
    if args.item is not None and args.format == "messages":
        raise ValueError("--format messages: a decision's chat messages; expected no ITEM")
    with _open_existing_store(args) as store, store.engine.connect() as connection:
        decision_id = forensics.resolve_decision(connection, args.decision)
        if args.item is None:
            if args.window_only:
                sys.stdout.write(forensics.rendered_window(connection, decision_id))
            elif args.format == "json":
                print(forensics.context(connection, decision_id).to_json())
            elif args.format == "messages":
                messages = forensics.context(connection, decision_id).messages()
                print(json.dumps(messages, indent=2, ensure_ascii=False))
            else:
                print(forensics.summary(connection, decision_id))
                print("─" * 72)
                print(forensics.rendered_window(connection, decision_id), end="")
            return EXIT_OK
        row = forensics.item(connection, decision_id, args.item)
    if args.format == "json":
        print(json.dumps({"decision_id": decision_id, **dict(row)}, indent=2, sort_keys=True,
                         ensure_ascii=False, default=str))
        return EXIT_OK
    where = f" {row['path']}:{row['start_line']}-{row['end_line']}" if row["start_line"] else ""
    print(f"# decision {decision_id} · {row['item_id']} · {row['source']} {row['kind']}"
          f" {row['entity_key'] or ''}{where}".rstrip())
    print(f"# provenance: {row['provenance']}")
    if row["original_content"] is not None:
        print("# content was cut to 8 KB in the pool; the full text follows")
    print(row["original_content"] if row["original_content"] is not None else row["content"])
    return EXIT_OK


def _cmd_diff(args) -> int:
    from .. import forensics

    with _open_existing_store(args) as store, store.engine.connect() as connection:
        a = forensics.resolve_decision(connection, args.decision_a)
        b = forensics.resolve_decision(connection, args.decision_b)
        result = forensics.diff(connection, a, b)
    print(f"window diff: decision {a} -> decision {b}")
    for fact, item_id in result.entered:
        print(f"  + {fact}  ({item_id})")
    for fact, item_id in result.left:
        print(f"  - {fact}  ({item_id})")
    for fact, before, after in result.changed:
        print(f"  ~ {fact}  {before} -> {after}")
    for fact, item_a, item_b in result.rewritten:
        print(f"  * {fact}  text changed ({item_a} -> {item_b})")
    if not (result.entered or result.left or result.changed or result.rewritten):
        print("  (same facts, same renderings, same texts)")
    return EXIT_OK


def _progress_callback(label: str, unit: str):
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


def _cmd_ab_run(args) -> int:
    """Exit 2 when a line is bad (the good ones are run first; each bad one is named on
    stderr with its line, field and what was expected), else 1 when an instance failed,
    else 0."""
    from pathlib import Path

    from ..ab.materialize import describe_skipped
    from ..ab.runner import AbOptions, run_ab
    from ..db import resolve_url

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
                     progress=_progress_callback("ab run", "instances"))
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


def _cmd_ab_outcome(args) -> int:
    """All or nothing: any bad line (each named on stderr) means nothing is recorded, exit 2."""
    from ..ab.outcomes import import_outcomes

    with _context_store().open(_existing_store(args.db)) as store:
        recorded, errors = import_outcomes(store, args.file)
    for error in errors:
        print(f"ctxdb: error: {error}", file=sys.stderr)
    if errors:
        print(f"ctxdb: error: {len(errors)} bad line(s) in {args.file}: nothing recorded",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"recorded {recorded} outcome(s)")
    return EXIT_OK


def _cached_price_ratio(value: str | None) -> float:
    """--cached-price-ratio: a cache read's price as a share of an input token's, 0 to 1."""
    from ..ab.reports import CACHED_PRICE_RATIO

    if value is None:
        return CACHED_PRICE_RATIO
    try:
        ratio = float(value)
    except ValueError:
        ratio = float("nan")  # refused below with the out-of-range ones
    if not 0 <= ratio <= 1:  # NaN fails the comparison
        raise ValueError(f"--cached-price-ratio {value!r}: expected a number from 0 to 1 "
                         "(a cache read's price as a share of an input token's)")
    return ratio


def _cmd_replay(args) -> int:
    """Exit 2 when the input is bad (each bad line named; the good ones run first), else
    1 when a run failed, else 0."""
    from pathlib import Path

    from ..agent.replay import RunsFileError, load_run_specs, replay_spec_for_tree, run_replay
    from ..agent.trajectory import MAX_COMMAND_TIMEOUT_S
    from ..db import resolve_url

    source = Path(args.runs)
    errors: list[str] = []
    if args.timeout is not None and not 0 < args.timeout <= MAX_COMMAND_TIMEOUT_S:
        raise ValueError(f"--timeout {args.timeout:g}: expected seconds above 0, at most "
                         f"{MAX_COMMAND_TIMEOUT_S}")
    if args.workers < 1:
        raise ValueError("--workers: expected at least 1")
    if args.limit is not None and args.limit < 1:
        raise ValueError("--limit: expected at least 1")
    if args.tree is not None:
        if not source.name.endswith(".json"):
            raise ValueError(f"{source}: with --tree, expected one trajectory (.traj.json)")
        specs = [replay_spec_for_tree(source, Path(args.tree), args.base_commit,
                                      args.instance_id)]
    elif source.name.endswith(".jsonl"):
        try:
            specs, errors = load_run_specs(source)
        except RunsFileError as exc:
            raise ValueError(str(exc)) from exc
    else:
        raise ValueError(f"{source}: expected RUNS.jsonl, or a .traj.json with --tree DIR")
    if args.limit is not None:
        specs = specs[: args.limit]
    summary = run_replay(resolve_url(args.db), specs, run_id=args.run_id, workers=args.workers,
                         command_timeout_s=args.timeout,
                         progress=_progress_callback("replay", "runs"))
    for result in summary.failed:
        print(f"failed: {result.error}", file=sys.stderr)
    for error in errors:
        print(f"ctxdb: error: {error}", file=sys.stderr)
    done = [r for r in summary.results if not r.error]
    matched = sum(1 for r in done if r.tree_matches_submission)
    print(f"replay {args.run_id}: {len(done)} run(s) done, {sum(r.decisions for r in done)} "
          f"decisions ({sum(r.refused_decisions for r in done)} refused); tree gives the "
          f"submitted patch in {matched} of {len(done)}; {len(summary.failed)} failed, "
          f"{len(errors)} bad line(s). `ctxdb report replay` shows the arms.")
    if errors:
        return EXIT_BAD_INPUT
    return EXIT_VIOLATIONS if summary.failed else EXIT_OK


def _cmd_report(args) -> int:
    from ..ab import reports

    ratio = _cached_price_ratio(args.cached_price_ratio)
    with _context_store().open(_existing_store(args.db)) as store, \
            store.engine.connect() as connection:
        if args.name == "ab":
            if args.format == "html":
                output = reports.ab_html(connection)
            elif args.format == "table":
                output = reports.ab_screen(connection)
            else:
                sections = {n: reports.run_report(connection, n) for n in reports.AB_SECTIONS}
                if args.format == "json":
                    output = "[" + ",\n".join(reports.as_json(r) for r in sections.values()) + "]"
                else:
                    output = "\n".join(f"# {n}\n{reports.as_csv(r)}" for n, r in sections.items())
        elif args.name == "replay":
            from ..agent import report as replay

            output = {"table": replay.replay_screen, "csv": replay.replay_csv,
                      "json": replay.replay_json, "html": replay.replay_html}[args.format](
                connection, ratio)
        else:
            report = reports.run_report(connection, args.name, {"cached_price_ratio": ratio})
            if args.format == "html":
                output = reports.single_html(report)
            else:
                output = {"table": reports.as_table, "csv": reports.as_csv,
                          "json": reports.as_json}[args.format](report)
    if args.output:
        _refuse_output_over_store(args.output, args.db)
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(output)
        print(f"wrote {args.output}")
    else:
        print(output)
    return EXIT_OK


def _refuse_output_over_store(output: str, db: str | None) -> None:
    """-o must not name the store's own file (or its WAL files): writing the report
    there would destroy the store. Compared by stat, never by opening the file."""
    from ..db import resolve_url, sqlite_file_of

    store_file = sqlite_file_of(resolve_url(db))
    if store_file is None or not os.path.exists(output):
        return
    for name in (store_file, Path(f"{store_file}-wal"), Path(f"{store_file}-shm")):
        if name.exists() and os.path.samefile(output, name):
            raise ValueError(f"--output {output!r}: that is the store's own file {str(name)!r}, "
                             "which the report would overwrite; expected a file of its own")


def _read_text_argument(name: str, value: str) -> str:
    if value == "-":
        return sys.stdin.read()
    try:
        with open(value, encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise FileNotFoundError(f"{name} {value}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name} {value}: expected UTF-8 text, got byte "
                         f"0x{exc.object[exc.start]:02x} at offset {exc.start}") from exc


def _cmd_retrieve(args) -> int:
    if args.eval:
        return _retrieve_eval(args)
    if args.task is None:
        raise ValueError("TASK: expected a file holding the task text (or - for standard "
                         "input), or --eval INSTANCES.jsonl")
    task = _read_text_argument("TASK", args.task)
    traceback = _read_text_argument("--traceback", args.traceback) if args.traceback else None
    with _open_store(args) as store:
        found = store.retrieve(task, failing_tests=args.test or (), traceback=traceback,
                               limit=args.limit)
    if args.json:
        print(json.dumps(found.to_json_dict(), sort_keys=True))
        return EXIT_OK
    for rank, candidate in enumerate(found.symbols, start=1):
        signals = ", ".join(f"{name} #{r}" for name, r in candidate.signals.items())
        print(f"{rank:>3}  {candidate.score:.6f}  {candidate.entity_key}  ({signals})")
    print("files:")
    for rank, candidate in enumerate(found.files, start=1):
        print(f"{rank:>3}  {candidate.score:.6f}  {candidate.path}")
    return EXIT_OK


def _retrieve_eval(args) -> int:
    from ..retrieval import evaluate

    scores, errors = evaluate.evaluate(args.eval, Path(args.cache),
                                       progress=_progress_callback("retrieve --eval",
                                                                   "instances"))
    for error in errors:
        print(f"skipped: {error}", file=sys.stderr)
    if args.json:
        for line in evaluate.json_lines(scores):
            print(line)
    else:
        print(evaluate.report(scores))
    failed = [s for s in scores if s.error is not None]
    for score in failed:
        print(f"failed: {score.instance_id}: {score.error}", file=sys.stderr)
    return EXIT_OK if len(failed) < len(scores) or not scores else EXIT_VIOLATIONS


def _cmd_tokens_count(args) -> int:
    """Counts with the tokenizers asked for, every one loaded before anything is printed:
    one named with --tokenizer that cannot load is an error (exit 2, no count); without
    --tokenizer, those installed count and a missing optional one is noted on stderr."""
    from ..tokens import TokenizerUnavailable, get_counter

    text = _read_text_argument("FILE", args.file)
    counters, missing = [], []
    for name in dict.fromkeys(args.tokenizer or TOKENIZER_NAMES):
        try:
            counters.append(get_counter(name))
        except TokenizerUnavailable as exc:
            if args.tokenizer:
                raise
            missing.append((name, exc))
    if not counters:
        raise missing[0][1]
    for counter in counters:
        print(f"{counter.name}\t{counter.count(text)}")
    for name, exc in missing:
        print(f"ctxdb: note: {name} not counted: {exc}", file=sys.stderr)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctxdb",
        description="Context construction for an LLM coding harness, as a SQL evidence store.",
    )
    from .. import __version__

    parser.add_argument("--version", action="version", version=f"ctxdb {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    db = commands.add_parser("db", help="operate on the store's schema",
                             description="Schema operations.")
    db_commands = db.add_subparsers(dest="db_command", metavar="SUBCOMMAND", required=True)
    upgrade = db_commands.add_parser(
        "upgrade", help="upgrade the store to the newest schema (views are recreated)",
        description="Apply alembic migrations in one transaction; views are dropped and recreated.",
    )
    _add_db_option(upgrade)
    upgrade.add_argument("--revision", default="head", help="target revision (default: head)")
    upgrade.set_defaults(func=_cmd_db_upgrade)
    current = db_commands.add_parser(
        "current", help="print the store's schema revision",
        description="Print the schema revision and whether it is the newest.",
    )
    _add_db_option(current)
    current.set_defaults(func=_cmd_db_current)
    history = db_commands.add_parser(
        "history", help="list the migrations, marking those the store has applied",
        description="Every schema revision from the first to head with what it does, each "
        "marked applied or pending in the store (without a store: the list alone).",
    )
    _add_db_option(history)
    history.set_defaults(func=_cmd_db_history)
    schema_docs = db_commands.add_parser(
        "schema-docs", help="write the schema's documentation (docs/schema.md) from the code",
        description="Tables, columns with types and descriptions, CHECK constraints and "
        "views, generated from ctxdb/models.py, ctxdb/descriptions.py and sql/views/.",
    )
    schema_docs.add_argument("-o", "--output", metavar="FILE",
                             help="write to FILE (docs/schema.md in a checkout) instead of "
                             "standard output")
    schema_docs.set_defaults(func=_cmd_db_schema_docs)

    construct = commands.add_parser(
        "construct", help="build the window for one decision request (JSON)",
        description="Construct, record and print the window for REQUEST.json, then a summary: "
        "items by verdict, tokens by tier, eviction steps. A bad request exits 2, writing nothing.",
    )
    construct.add_argument("request", metavar="REQUEST.json", help="a DecisionRequest as JSON")
    _add_db_option(construct)
    _add_recon_option(construct, help="recon index (default: $CTXDB_RECON, then ./recon.db "
                      "where `ctxdb recon index` writes it, if there; a PostgreSQL store "
                      "reads the schema recon of its own database)")
    construct.add_argument("--strict", action="store_true",
                           help="an item naming an entity recon cannot resolve is an error "
                           "(exit 2, nothing written) instead of a flagged placeholder")
    construct.add_argument("--arm", choices=("ctx08", "current"),
                           help="override the request's A/B arm")
    construct.add_argument("--json", action="store_true",
                           help="print the DecisionContext as JSON instead")
    construct.add_argument("--summary", action="store_true",
                           help="print only the summary, not the rendered window")
    construct.set_defaults(func=_cmd_construct)

    why = commands.add_parser(
        "why", help="an item's whole path through the stages of a decision",
        description="Every stage action on ITEM in DECISION, from v_why, final verdict marked ■.",
    )
    why.add_argument("decision", metavar="DECISION",
                     help="decision id, or req-<hash> from a pointer")
    why.add_argument("item", metavar="ITEM", nargs="?",
                     help="pool item id (E12), or an entity key for its first pool item")
    why.add_argument("--entity", metavar="KEY",
                     help="instead of ITEM: every pool item of this entity "
                     "(pkg/mod.py::Class.method); item ids differ between decisions, keys do not")
    _add_db_option(why)
    why.set_defaults(func=_cmd_why)

    show = commands.add_parser(
        "show", help="a decision's window, or one item's raw content (masked items too)",
        description="Without ITEM: the decision's summary and the window exactly as sent. "
        "With ITEM: the item's raw content, the full text if it was cut.",
    )
    show.add_argument("decision", metavar="DECISION",
                      help="decision id, or req-<hash> from a pointer")
    show.add_argument("item", metavar="ITEM", nargs="?", help="pool item id, e.g. E12")
    show.add_argument("--window-only", action="store_true",
                      help="print only the window, exactly the text sent (no summary)")
    show.add_argument("--format", choices=("text", "json", "messages"), default="text",
                      help="text (default: summary, then the window), json (the "
                      "DecisionContext, as `construct --json` prints it; with ITEM, the item) "
                      "or messages (the chat messages list sent to the model)")
    _add_db_option(show)
    show.set_defaults(func=_cmd_show)

    diff = commands.add_parser(
        "diff", help="what entered, left, or changed rendering between two windows",
        description="Compare two decisions' windows by fact identity (the window is diffable).",
    )
    diff.add_argument("decision_a", metavar="DECISION_A", help="the earlier decision")
    diff.add_argument("decision_b", metavar="DECISION_B", help="the later decision")
    _add_db_option(diff)
    diff.set_defaults(func=_cmd_diff)

    verify = commands.add_parser(
        "verify", help="run the invariant checks in sql/checks/ and the view check",
        description="Each file in sql/checks/ returns the rows that break one rule; "
        "exit 1 if any returns a row or a view differs from sql/views/.",
    )
    _add_db_option(verify)
    verify.set_defaults(func=_cmd_verify)

    ab = commands.add_parser(
        "ab", help="the A/B protocol: run instances through both arms, record outcomes",
        description="Spec §7: the constructor against the stuff-everything baseline.",
    )
    ab_commands = ab.add_subparsers(dest="ab_command", metavar="SUBCOMMAND", required=True)
    ab_run = ab_commands.add_parser(
        "run", help="construct every arm's and variant's decisions for SWE-bench-format instances",
        description="Materialize each instance at its base commit with its test patch, index it, "
        "store its gold facts, and construct localize and edit decisions per arm and variant. "
        "A progress bar on stderr when it is a terminal. Bad lines are named after the good "
        "ones have run (exit 2); an instance that fails exits 1.",
    )
    ab_run.add_argument("instances", metavar="INSTANCES.jsonl",
                        help="SWE-bench-format lines with repo_path or repo_git")
    _add_db_option(ab_run)
    ab_run.add_argument("--arms", default="ctx08,current",
                        help="comma-separated arms (default: ctx08,current)")
    ab_run.add_argument("--variants", default="default",
                        help="comma-separated ctx08 variants (default: default); see docs/ab.md")
    ab_run.add_argument("--localization", choices=("oracle", "retrieval"), default="oracle",
                        help="edit target: the first gold entity (oracle) or the top hit")
    ab_run.add_argument("--workers", type=int, default=DEFAULT_WORKERS,
                        help="worker processes (default: the CPUs this process may use)")
    ab_run.add_argument("--cache", default=str(Path.home() / ".cache" / "ctxdb" / "ab"),
                        help="where materialized trees and their recon indexes are kept")
    ab_run.add_argument("--run-prefix", default="ab", help="run ids are PREFIX/ARM/VARIANT")
    ab_run.add_argument("--ranker", default="none", metavar="none|oracle|URL",
                        help="the ranking step's endpoint: none (default; no endpoint, whatever "
                        "the settings say), oracle (a server on 127.0.0.1 scoring the "
                        "instance's gold facts 1.0, the others 0.0: an upper bound, labelled "
                        "in the run ids and reports) or an OpenAI-compatible URL")
    ab_run.set_defaults(func=_cmd_ab_run)
    ab_outcome = ab_commands.add_parser(
        "outcome", help="record harness outcomes from a JSONL file",
        description="Each line: {run_id, instance_id, solved, cost_usd?, model_tokens_in?, "
        "model_tokens_out?}. All or nothing: any bad line is named (line, field, what was "
        "expected) and nothing is recorded (exit 2).",
    )
    ab_outcome.add_argument("file", metavar="FILE.jsonl", help="outcomes, one JSON object per line")
    _add_db_option(ab_outcome)
    ab_outcome.set_defaults(func=_cmd_ab_outcome)

    replay = commands.add_parser(
        "replay", help="replay recorded agent runs: every decision beside what the harness sent",
        description="For every decision of every recorded run (mini-swe-agent .traj.json, 1.x "
        "or 2.x), rebuild the working tree by re-running the run's commands in an isolated "
        "scratch copy of the base commit (no network, read-only outside the copy, a time "
        "limit), construct ctxdb's window, and write it beside the two reference arms "
        "(current: the harness's whole history; mask10: observations older than the 10 newest "
        "masked) with what the agent's next action used. A progress bar on stderr when it is a "
        "terminal. Bad lines are named after the good ones have run (exit 2); a run that "
        "fails is named and left out of the store (exit 1).",
    )
    replay.add_argument("runs", metavar="RUNS.jsonl|RUN.traj.json",
                        help="lines of instance_id, trajectory (relative to the file), "
                        "base_commit, repo_git, resolved; or one trajectory with --tree")
    _add_db_option(replay)
    replay.add_argument("--tree", metavar="DIR",
                        help="one run: a git checkout of its repository (its HEAD is the base "
                        "commit unless --base-commit says otherwise)")
    replay.add_argument("--base-commit", help="with --tree: the commit the run started from")
    replay.add_argument("--instance-id", help="with --tree: the run's instance (default: the "
                        "trajectory's instance_id, else its file name)")
    replay.add_argument("--run-id", default="replay",
                        help="the store run the windows are written under (default: replay)")
    replay.add_argument("--workers", type=int, default=DEFAULT_WORKERS,
                        help="worker processes (default: the CPUs this process may use)")
    replay.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="each re-run command's time limit (default: the run's own, 60 s "
                        "in mini-swe-agent's SWE-bench config)")
    replay.add_argument("--limit", type=int, default=None, metavar="N",
                        help="replay only the first N runs")
    replay.set_defaults(func=_cmd_replay)

    report = commands.add_parser(
        "report", help="a report from sql/reports/ (or `ab`, `replay` for a whole screen)",
        description="Run sql/reports/NAME.sql and print it; `ab` is the whole A/B on one screen, "
        "`replay` the replayed agent runs (tokens and cost by arm, anchor recall, where lost "
        "anchors went, working-tree fidelity, tokens per step) on one; either is one "
        "self-contained HTML page with --format html.",
    )
    report.add_argument("name", metavar="NAME",
                        help="ab, replay, or a report: runs, arms, precision, gold_recall, "
                        "window_recall, tokens, edge_placement, outcomes, decision_rule, "
                        "ablation, replay_arms, replay_recall, replay_fates, replay_fidelity, "
                        "replay_steps")
    _add_db_option(report)
    report.add_argument("--format", choices=("table", "csv", "json", "html"), default="table",
                        help="output format (default: table)")
    report.add_argument("--output", help="write to this file instead of standard output")
    report.add_argument("--cached-price-ratio", metavar="R",
                        help="replay reports: a cached prompt token's price as a share of an "
                        "input token's, 0 to 1 (default 0.1: cache reads cost about a tenth "
                        "of input at DeepSeek, Anthropic and OpenAI)")
    report.set_defaults(func=_cmd_report)

    retrieve = commands.add_parser(
        "retrieve", help="rank the recon symbols and files a task is about (component 04)",
        description="Rank candidate symbols (entity key, fused score, the signals that found "
        "it) and files for a task text, from the recon index: body BM25, names the task "
        "mentions, traceback frames, the failing tests' callees, structure. With --eval, "
        "measure the retriever on SWE-bench-format instances instead (materialised and "
        "indexed as `ab run` does, in the same cache).",
    )
    retrieve.add_argument("task", metavar="TASK", nargs="?",
                          help="a file holding the task text, or - for standard input")
    _add_db_option(retrieve)
    _add_recon_option(retrieve)
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
    retrieve.add_argument("--cache", default=str(Path.home() / ".cache" / "ctxdb" / "ab"),
                          help="with --eval: where trees and recon indexes are cached "
                          "(shared with `ab run`)")
    retrieve.set_defaults(func=_cmd_retrieve)

    datasette = commands.add_parser(
        "datasette-metadata", help="write a Datasette metadata file for a SQLite store",
        description="A metadata JSON file for `datasette STORE.db --metadata FILE` "
        "(Datasette 0.65): every table and view described, the tables' columns too, and "
        "sql/reports/*.sql and the forensic queries of sql/analyst/ as canned queries.",
    )
    _add_db_option(datasette)
    datasette.add_argument("-o", "--output", metavar="FILE",
                           help="write to FILE instead of standard output")
    datasette.set_defaults(func=_cmd_datasette_metadata)

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

    from . import recon as recon_commands

    recon_commands.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from ..forensics import NotFound
    from ..migrate import StoreVersionError
    from ..recon import ReconVersionError
    from ..store import ReconNotFound
    from ..tokens import TokenizerUnavailable

    try:
        if hasattr(args, "db"):
            _refuse_a_store_in_memory(args.db)
        return args.func(args)
    except BrokenPipeError:
        # The reader stopped (`ctxdb show 3 | head`): what it read was right; say nothing
        # more, and keep Python from complaining again when it flushes stdout at exit.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (AttributeError, OSError, ValueError):  # not a real file: nothing to flush
            pass
        return EXIT_OK
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
        print(f"ctxdb: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:
        reason = _unreachable_database(exc)
        if reason is None:
            raise
        print(f"ctxdb: error: --db: cannot connect to the store's database: {reason}",
              file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
