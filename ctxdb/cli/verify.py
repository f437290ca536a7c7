"""``ctxdb verify``: the invariant checks of sql/checks/ and the view check."""

from __future__ import annotations

import argparse
import json

from .shared import EXIT_OK, EXIT_VIOLATIONS, add_db_option, open_existing_store


def register(commands: argparse._SubParsersAction) -> None:
    verify = commands.add_parser(
        "verify", help="run the invariant checks in sql/checks/ and the view check",
        description="Each file in sql/checks/ returns the rows that break one rule; "
        "exit 1 if any returns a row or one of ctxdb's views differs from sql/views/ "
        "(views someone else added are named, not counted, as are the decisions of a "
        "replay under way until its lease runs out).",
    )
    add_db_option(verify)
    verify.set_defaults(func=_cmd_verify)


VIOLATING_ROWS_SHOWN = 20  # of each check; the count says how many there are


def _cmd_verify(args) -> int:
    from .. import models  # (the CLI's help loads no database library)

    with open_existing_store(args, views_as_they_are=True) as store:
        now = models.utc_timestamp()  # one moment for both: a lease is counted or named
        violations = store.verify(now)
        foreign = store.foreign_views()
        under_way = store.replays_under_way(now)
    if foreign:  # no rule broken: said, so nobody takes them for ctxdb's
        print(f"note: views that are not ctxdb's, left as they are: {', '.join(foreign)}")
    for replay in under_way:  # its decisions lack their replay_run row until it ends
        print(f"note: a replay under way, its decisions not counted: run {replay['run_id']}, "
              f"instance {replay['instance_id']} (host {replay['host']}, pid {replay['pid']}, "
              f"started {replay['started_at']}, last step {replay['renewed_at']}); if it was "
              f"stopped, they count from {replay['expires_at']}")
    if not violations:
        print("ok: every check in sql/checks/ returned no rows; views match sql/views/")
        return EXIT_OK
    for check, rows in violations.items():
        print(f"{check}: {len(rows)} violating row(s)")
        for row in rows[:VIOLATING_ROWS_SHOWN]:
            print("  " + json.dumps(row, default=str, sort_keys=True))
        if len(rows) > VIOLATING_ROWS_SHOWN:
            print(f"  … and {len(rows) - VIOLATING_ROWS_SHOWN} more")
    return EXIT_VIOLATIONS
