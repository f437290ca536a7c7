"""``ctxdb report``: a report of sql/reports/, or the A/B or replay screen."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from .shared import EXIT_OK, add_db_option, open_existing_store, write_output

# the replay screen, its sections the replay_* reports: a store without a replay run is
# said once, not left to every section's "(no rows)"
REPLAY_REPORT = "replay"


def register(commands: argparse._SubParsersAction) -> None:
    report = commands.add_parser(
        "report", help="a report from sql/reports/ (or `ab`, `replay` for a whole screen)",
        description="Run sql/reports/NAME.sql and print it; `ab` is the whole A/B on one screen, "
        "`replay` the replayed agent runs (tokens and cost by arm, anchor recall, where lost "
        "anchors went, where the window's tokens went, working-tree fidelity, cost by run "
        "length, tokens per step) on one; either is one self-contained HTML page with "
        "--format html.",
    )
    report.add_argument("name", metavar="NAME",
                        help="ab, replay, or a report: runs, arms, precision, gold_recall, "
                        "window_recall, tokens, edge_placement, outcomes, decision_rule, "
                        "ablation, loop_cost, replay_arms, replay_recall, replay_fates, "
                        "replay_parts, replay_fidelity, replay_lengths, replay_steps")
    add_db_option(report)
    report.add_argument("--format", choices=("table", "csv", "json", "html"), default="table",
                        help="output format (default: table)")
    report.add_argument("--output", help="write to this file instead of standard output")
    report.add_argument("--cached-price-ratio", metavar="R",
                        help="replay reports and loop_cost: a cached prompt token's price as "
                        "a share of an input token's, 0 to 1 (default 0.1: cache reads cost "
                        "about a tenth of input at DeepSeek, Anthropic and OpenAI)")
    report.add_argument("--length-groups", metavar="N",
                        help="replay reports: how many groups the replayed runs are cut into "
                        "by their length (default 4: quarters)")
    report.add_argument("--arms", metavar="A,B",
                        help="replay reports: only these arms' rows, e.g. ctx08,current,mask10 "
                        "(default: every arm, one ctx08-without-RULE per rule among them)")
    report.set_defaults(func=_cmd_report)


def _cmd_report(args) -> int:
    from ..ab import reports
    from ..agent.report import SECTIONS as REPLAY_SECTIONS

    ratio = _cached_price_ratio(args.cached_price_ratio)
    groups = _length_groups(args.length_groups)
    replay_report = args.name == REPLAY_REPORT or args.name in REPLAY_SECTIONS.values()
    if args.arms is not None and not replay_report:
        raise ValueError(f"--arms: picks the arms of a replay report (replay, "
                         f"{', '.join(REPLAY_SECTIONS.values())}); {args.name} has none")
    with open_existing_store(args) as store, \
            store.engine.connect() as connection:
        if replay_report and not _holds_a_replay_run(connection):
            # empty sections would not say why: the runs they read come from ctxdb replay
            print(f"{args.name}: no replay runs in {_store_shown(store)} (ctxdb replay "
                  "RUNS.jsonl --db STORE makes them; docs/replay.md)", file=sys.stderr)
        arms = _arms(args.arms, connection) if args.arms is not None else None
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
        elif args.name == REPLAY_REPORT:
            from ..agent import report as replay

            output = {"table": replay.replay_screen, "csv": replay.replay_csv,
                      "json": replay.replay_json, "html": replay.replay_html}[args.format](
                connection, ratio, groups, arms)
        else:
            from ..agent.report import only_arms

            report = only_arms(reports.run_report(
                connection, args.name, {"cached_price_ratio": ratio, "length_groups": groups}),
                arms)
            if args.name == reports.LOOP_COST_REPORT and not report.rows:
                # an empty table would not say why: the runs it reads are live ones
                print(f"{args.name}: no live agent-loop runs in {_store_shown(store)}"
                      " (a replay's runs are left out: ctxdb report replay)", file=sys.stderr)
            if args.format == "html":
                output = reports.single_html(report)
            else:
                output = {"table": reports.as_table, "csv": reports.as_csv,
                          "json": reports.as_json}[args.format](report)
    if args.output:
        _refuse_output_over_store(args.output, args.db)
        write_output(output, args.output)
    else:
        print(output)
    return EXIT_OK


def _arms(given: str, connection) -> frozenset[str]:
    """--arms: a comma-separated list of the arms the store's replays were measured in."""
    from ..agent.report import replay_arm_names

    arms = [arm.strip() for arm in given.split(",") if arm.strip()]
    measured = replay_arm_names(connection)
    unknown = [arm for arm in arms if arm not in measured]
    if not arms or unknown:
        said = f"no arm {', '.join(map(repr, unknown))} in" if unknown else "no arm named for"
        raise ValueError(f"--arms: {said} this store's replays (its arms: "
                         f"{', '.join(measured) or 'none'})")
    return frozenset(arms)


def _holds_a_replay_run(connection) -> bool:
    from sqlalchemy import exists, select

    from .. import models

    return bool(connection.execute(select(exists().select_from(models.replay_run))).scalar())


def _store_shown(store) -> str:
    """The store as a message names it: its file, else its URL with the password hidden."""
    from ..db import shown_url, sqlite_file_of

    url = store.engine.url.render_as_string(hide_password=False)
    return str(sqlite_file_of(url) or shown_url(url))


def _cached_price_ratio(value: str | None) -> float:
    """--cached-price-ratio: a cache read's price as a share of an input token's, 0 to 1."""
    from ..ab.reports import CACHED_PRICE_RATIO

    return _number_option("--cached-price-ratio", value, CACHED_PRICE_RATIO, float, 0, 1,
                          "a number from 0 to 1 (a cache read's price as a share of an "
                          "input token's)")


def _length_groups(value: str | None) -> int:
    """--length-groups: a whole number of groups, from 1 to REPLAY_LENGTH_GROUPS_MAX."""
    from ..ab.reports import REPLAY_LENGTH_GROUPS, REPLAY_LENGTH_GROUPS_MAX

    return _number_option("--length-groups", value, REPLAY_LENGTH_GROUPS, int, 1,
                          REPLAY_LENGTH_GROUPS_MAX, "a whole number of groups from 1 to "
                          f"{REPLAY_LENGTH_GROUPS_MAX} (the replayed runs cut by their length)")


Number = TypeVar("Number", int, float)


def _number_option(option: str, value: str | None, default: Number,
                   convert: Callable[[str], Number], low: Number, high: Number,
                   expected: str) -> Number:
    """An option's number: ``default`` when not given, else ``value`` converted and from
    ``low`` to ``high``, or a ValueError naming the option and what was expected."""
    if value is None:
        return default
    try:
        number = convert(value)
    except ValueError:
        number = None
    if number is None or not low <= number <= high:  # NaN fails the comparison
        raise ValueError(f"{option} {value!r}: expected {expected}")
    return number


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
