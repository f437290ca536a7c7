"""``ctxdb why``, ``show`` and ``diff``: read a recorded decision (never create a store)."""

from __future__ import annotations

import argparse
import json
import sys

from ..spec import CONTENT_MAX_BYTES
from .shared import EXIT_OK, add_db_option, open_existing_store


def register(commands: argparse._SubParsersAction) -> None:
    _add_why(commands)
    _add_show(commands)
    _add_diff(commands)


def _add_why(commands: argparse._SubParsersAction) -> None:
    why = commands.add_parser(
        "why", help="an item's whole path through the stages of a decision",
        description="Every stage action on ITEM in DECISION, from v_why, final verdict marked ■.",
    )
    why.add_argument("decision", metavar="DECISION",
                     help="decision id, req-<hash> from a pointer, or run:RUN:INSTANCE "
                     "(that agent loop's newest decision)")
    why.add_argument("item", metavar="ITEM", nargs="?",
                     help="pool item id (E12), or an entity key for its first pool item")
    why.add_argument("--entity", metavar="KEY",
                     help="instead of ITEM: every pool item of this entity "
                     "(pkg/mod.py::Class.method); item ids differ between decisions, keys do not")
    add_db_option(why)
    why.set_defaults(func=_cmd_why)


def _cmd_why(args) -> int:
    from .. import forensics

    if (args.item is None) == (args.entity is None):
        raise ValueError("ctxdb why: expected ITEM (an item id such as E12) or --entity KEY, "
                         "one of the two")
    with open_existing_store(args) as store, store.engine.connect() as connection:
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
        if row["tokens_before"] is not None and row["tokens_after"] is not None:
            tokens = f"  [{row['tokens_before']} -> {row['tokens_after']} tokens]"
        elif row["tokens_before"] is not None or row["tokens_after"] is not None:
            # an agent loop's part is rendered once: its size, not a change of it
            size = row["tokens_after"] if row["tokens_after"] is not None else row["tokens_before"]
            tokens = f"  [{size} tokens]"
        detail = f"  ({row['detail']})" if row["detail"] else ""
        print(f"  {mark} {row['stage']:<9} {row['action']:<20} "
              f"{row['driver'] or ''}{tokens}{detail}")
    if first["window_position"] is not None:
        print(f"in the window at position {first['window_position']} ({first['window_block']},"
              f" {first['window_rendering']})")


def _add_show(commands: argparse._SubParsersAction) -> None:
    show = commands.add_parser(
        "show", help="a decision's window, or one item's raw content (masked items too)",
        description="Without ITEM: the decision's summary and the window exactly as sent. "
        "With ITEM: the item's raw content, the full text if it was cut.",
    )
    show.add_argument("decision", metavar="DECISION",
                      help="decision id, req-<hash> from a pointer, or run:RUN:INSTANCE "
                      "(that agent loop's newest decision)")
    show.add_argument("item", metavar="ITEM", nargs="?", help="pool item id, e.g. E12")
    show.add_argument("--window-only", action="store_true",
                      help="print only the window, exactly the text sent (no summary)")
    show.add_argument("--format", choices=("text", "json", "messages"), default="text",
                      help="text (default: summary, then the window), json (the "
                      "DecisionContext, as `construct --json` prints it; with ITEM, the item) "
                      "or messages (the chat messages list sent to the model; of a current "
                      "loop decision given the harness's messages, those as sent; of a loop "
                      "window sent with cache marks, its marked blocks)")
    add_db_option(show)
    show.set_defaults(func=_cmd_show)


def _cmd_show(args) -> int:
    from .. import forensics

    if args.window_only and (args.item is not None or args.format != "text"):
        raise ValueError("--window-only: prints a decision's window as text, exactly as sent; "
                         "expected no ITEM and no --format other than text")
    if args.item is not None and args.format == "messages":
        raise ValueError("--format messages: a decision's chat messages; expected no ITEM")
    with open_existing_store(args) as store, store.engine.connect() as connection:
        decision_id = forensics.resolve_decision(connection, args.decision)
        if args.item is None:
            if args.window_only:
                sys.stdout.write(forensics.rendered_window(connection, decision_id))
            elif args.format == "json":
                print(forensics.context(connection, decision_id).to_json())
            elif args.format == "messages":
                messages = forensics.messages_sent(connection, decision_id)
                print(json.dumps(messages, indent=2, ensure_ascii=False))
            else:
                print(forensics.summary(connection, decision_id))
                print("─" * 72)
                print(forensics.rendered_window(connection, decision_id), end="")
            return EXIT_OK
        row = forensics.item(connection, decision_id, args.item)
        loop_part = forensics.loop_part_of(row["provenance"])
        output_of_step = int(loop_part[1]) if loop_part and loop_part[2] == "output" else None
        kept_whole = output_of_step is not None and forensics.output_kept_whole(
            connection, decision_id, output_of_step)
    if args.format == "json":
        print(json.dumps({"decision_id": decision_id, **dict(row)}, indent=2, sort_keys=True,
                         ensure_ascii=False, default=str))
        return EXIT_OK
    where = f" {row['path']}:{row['start_line']}-{row['end_line']}" if row["start_line"] else ""
    if loop_part and where:  # a view: its lines were read from the tree, the text is the step's
        where = f" (the window showed{where} as the tree held them)"
    print(f"# decision {decision_id} · {row['item_id']} · {row['source']} {row['kind']}"
          f" {row['entity_key'] or ''}{where}".rstrip())
    print(f"# provenance: {row['provenance']}")
    if kept_whole:
        print(f"# step {output_of_step}'s output whole follows (the harness showed the model "
              "only its head and tail)")
    elif output_of_step is not None:
        print(f"# step {output_of_step}'s output as the harness gave it follows")
    elif loop_part and loop_part[2] == "command":
        # the turn is kept whole; the window shows its command, its reasoning apart (E4k-1)
        print(f"# step {loop_part[1]}'s turn as the agent gave it follows, its reasoning "
              "included (the window shows its command; its reasoning only where a rule "
              "keeps it)")
    if row["original_content"] is not None:
        print(f"# content was cut to {CONTENT_MAX_BYTES // 1024} KB in the pool; the full "
              "text follows")
    print(row["original_content"] if row["original_content"] is not None else row["content"])
    return EXIT_OK


def _add_diff(commands: argparse._SubParsersAction) -> None:
    diff = commands.add_parser(
        "diff", help="what entered, left, or changed rendering between two windows",
        description="Compare two decisions' windows by fact identity (the window is diffable).",
    )
    diff.add_argument("decision_a", metavar="DECISION_A", help="the earlier decision")
    diff.add_argument("decision_b", metavar="DECISION_B", help="the later decision")
    add_db_option(diff)
    diff.set_defaults(func=_cmd_diff)


def _cmd_diff(args) -> int:
    from .. import forensics

    with open_existing_store(args) as store, store.engine.connect() as connection:
        a = forensics.resolve_decision(connection, args.decision_a)
        b = forensics.resolve_decision(connection, args.decision_b)
        result = forensics.diff(connection, a, b)
        heads = [forensics.header(connection, d) for d in (a, b)]
    print(f"window diff: decision {a} -> decision {b}")
    runs = [(h["run_id"], h["instance_id"]) for h in heads]
    if runs[0] != runs[1]:  # a loop's steps are named alike in every run: say these differ
        print(f"  (decision {a} is of run {runs[0][0]} on {runs[0][1]}, decision {b} of run "
              f"{runs[1][0]} on {runs[1][1]})")
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
