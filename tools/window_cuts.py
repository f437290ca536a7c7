"""What a cheaper loop window would keep: the replay's windows, cut offline.

``python tools/window_cuts.py --db sqlite:///replay.db [--arm ctx08]`` reads the loop
windows a replay recorded (``ctxdb replay``) and, for every decision, which of its
window's parts hold each anchor the next action used (an anchor the real history held;
one the harness's own prompt holds needs no part). Then it prints:

- the bound: the tokens an oracle that knew the next action would send — the prompt,
  the newest output, and the cheapest parts that hold every anchor (greedy cover);
- for each cut (a family of parts dropped from every window), the tokens saved and the
  recall left, by anchor class;
- for each line cut (a family of parts shown by fewer of their lines, ``…`` where lines
  were left out), the same: views and long commands of old steps keeping only the lines
  with a name the rest of the window does not show, or a command's first lines, or views
  without their docstrings' bodies (and comments); and one
  that adds instead: pointers listing the names their output held that the window lacks.

A cut is read as "these parts were never shown"; a real rule would leave a pointer in
their place, so the figures are an upper bound on what the cut keeps. LINE anchors are
checked here without the tree's lines (a listing's number and file only), so the line
figures run slightly above the replay report's.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ctxdb.agent.anchors import (  # noqa: E402
    Anchor,
    AnchorClass,
    WindowIndex,
    names_in,
    shell_commands,
)
from ctxdb.agent.arms import ARM_CURRENT  # noqa: E402
from ctxdb.agent.loop import COMMAND_PART, OUTPUT_PART, step_of_item  # noqa: E402
from ctxdb.agent.trajectory import read_trajectory  # noqa: E402
from ctxdb.tokens import get_counter  # noqa: E402

ANCHOR_CLASSES = (AnchorClass.EDIT, AnchorClass.LINE, AnchorClass.IDENTIFIER,
                  AnchorClass.PATH)
LONG_VIEW_LINES = (100, 200)  # views longer than these many lines, cut as one family
AGES = (10, 20, 30)  # parts older than these many steps, cut as one family
LINE_CUT_AGES = (10, 20)  # views and commands older than these, shown by fewer lines
COMMAND_HEAD_LINES = 3  # a long old command cut to its first lines keeps this many
POINTER_NAMES = 20  # names a pointer lists at most, when it lists its output's
ELIDED = "…"  # a line cut's mark where lines were left out
# a view's line "N\ttext": its number is not part of its names
_VIEW_LINE_NUMBER = re.compile(r"^\s*\d+\t")
_DEFINITION = re.compile(r"^\s*(?:async\s+def|def|class)\s")
_TRIPLE_QUOTE = re.compile(r'"""|\'\'\'')
_COMMENT_OR_BLANK = re.compile(r"^\s*(?:#.*)?$")


@dataclass(frozen=True)
class Part:
    step: int
    part: int  # step_of_item's part: command, output, reasoning, note
    rendering: str
    tokens: int
    lines: int
    command_name: str  # the first program the step's command ran
    text: str  # as the window showed it


@dataclass(frozen=True)
class Decision:
    seq: int
    prompt_tokens: int
    parts: tuple[Part, ...]
    # per anchor: its class and the parts holding it (None: the harness prompt holds it)
    anchors: tuple[tuple[str, tuple[int, ...] | None], ...]
    anchor_values: tuple[Anchor, ...]  # the same anchors, in the same order
    prompt_names: frozenset[str]  # the names the harness's prompt shows
    # per step of the run, the names its output held, first-seen order (shared by the
    # run's decisions)
    output_names: tuple[tuple[str, ...], ...] = ()


def first_program(command: str | None) -> str:
    if not command:
        return ""
    names = [c.name for c in shell_commands(command) if c.name and c.name != "cd"]
    return names[0] if names else ""


def read_decisions(url: str, arm: str) -> list[Decision]:
    engine = create_engine(url)
    decisions = []
    texts: dict[str, str] = {}  # a settled part repeats in many windows: held once
    with engine.connect() as connection:
        runs = connection.execute(text(
            "SELECT run_id, instance_id, trajectory FROM replay_run")).all()
        for run_id, instance_id, trajectory in runs:
            run = read_trajectory(trajectory)
            programs = [first_program(step.action) for step in run.steps]
            prompt_text = run.system_prompt + "\n" + run.instruction
            prompt = WindowIndex(prompt_text)
            prompt_names = frozenset(names_in(prompt_text))
            output_names = tuple(
                tuple(dict.fromkeys(names_in(step.observation.output))) if step.observation
                else () for step in run.steps)
            anchors: dict[int, list[Anchor]] = {}
            for row in connection.execute(text(
                    "SELECT a.seq, a.anchor_class, a.anchor_text, a.path, a.line"
                    " FROM replay_anchor a JOIN replay_anchor_outcome o"
                    " USING (run_id, instance_id, seq, anchor_no)"
                    " WHERE a.run_id = :run AND a.instance_id = :instance"
                    " AND o.arm = :reference AND o.kept"),
                    {"run": run_id, "instance": instance_id, "reference": ARM_CURRENT}):
                anchors.setdefault(row.seq, []).append(Anchor(
                    AnchorClass(row.anchor_class), row.anchor_text, path=row.path,
                    line=row.line))
            for seq, decision_id, prompt_tokens in connection.execute(text(
                    "SELECT seq, decision_id, prompt_tokens FROM replay_decision"
                    " WHERE run_id = :run AND instance_id = :instance AND arm = :arm"
                    " AND decision_id IS NOT NULL"),
                    {"run": run_id, "instance": instance_id, "arm": arm}):
                rows = connection.execute(text(
                    "SELECT item_id, rendering, token_count, rendered_text FROM window_item"
                    " WHERE decision_id = :decision ORDER BY position"),
                    {"decision": decision_id}).all()
                parts, indexes = [], []
                for item_id, rendering, tokens, rendered in rows:
                    step, part = step_of_item(int(item_id[1:]))
                    parts.append(Part(step, part, rendering, tokens,
                                      len(rendered.splitlines()), programs[step - 1],
                                      texts.setdefault(rendered, rendered)))
                    indexes.append(WindowIndex(rendered))
                held = []
                for anchor in anchors.get(seq, ()):
                    if prompt.keeps(anchor, unnamed_listing_counts=True):
                        held.append((str(anchor.anchor_class), None))
                        continue
                    held.append((str(anchor.anchor_class), tuple(
                        number for number, index in enumerate(indexes)
                        if index.keeps(anchor, unnamed_listing_counts=True))))
                decisions.append(Decision(seq, prompt_tokens, tuple(parts), tuple(held),
                                          tuple(anchors.get(seq, ())), prompt_names,
                                          output_names))
    return decisions


def oracle_tokens(decisions: list[Decision]) -> int:
    """The prompt, the newest output and a greedy cheapest cover of the anchors."""
    total = 0
    for decision in decisions:
        parts = decision.parts
        chosen = {n for n, p in enumerate(parts)
                  if p.part == OUTPUT_PART and p.step == decision.seq - 1}
        open_sets = [set(h) for _, h in decision.anchors if h and not set(h) & chosen]
        while open_sets:
            covers = Counter(n for holders in open_sets for n in holders)
            best = min(covers, key=lambda n: parts[n].tokens / covers[n])
            chosen.add(best)
            open_sets = [holders for holders in open_sets if best not in holders]
        shown = sum(p.tokens for p in parts)
        total += decision.prompt_tokens - shown + sum(parts[n].tokens for n in chosen)
    return total


def cut(decisions: list[Decision], drops: Callable[[int, Part], bool]) -> tuple[int, dict]:
    saved, kept, total = 0, Counter(), Counter()
    for decision in decisions:
        gone = [drops(decision.seq, part) for part in decision.parts]
        saved += sum(p.tokens for p, dropped in zip(decision.parts, gone, strict=True)
                     if dropped)
        for anchor_class, holders in decision.anchors:
            total[anchor_class] += 1
            if holders is None or any(not gone[n] for n in holders):
                kept[anchor_class] += 1
    return saved, {c: kept[c] / total[c] if total[c] else 1.0 for c in total}


def cuts() -> dict[str, Callable[[int, Part], bool]]:
    def view(part: Part) -> bool:
        return part.part == OUTPUT_PART and part.rendering == "view"

    def fresh(part: Part) -> bool:
        return part.part == OUTPUT_PART and part.rendering in ("verbatim", "truncated")

    families: dict[str, Callable[[int, Part], bool]] = {"nothing": lambda seq, p: False}
    for age in AGES:
        families[f"views older than {age} steps"] = (
            lambda seq, p, age=age: view(p) and seq - p.step > age)
        families[f"commands older than {age} steps"] = (
            lambda seq, p, age=age: p.part == COMMAND_PART and seq - p.step > age)
    for lines in LONG_VIEW_LINES:
        families[f"views of more than {lines} lines"] = (
            lambda seq, p, lines=lines: view(p) and p.lines > lines)
    families["views of a whole-file cat"] = lambda seq, p: view(p) and p.command_name == "cat"
    families["views of a grep"] = lambda seq, p: view(p) and p.command_name in ("grep", "egrep")
    families["outputs shown whole, older than 3 steps"] = (
        lambda seq, p: fresh(p) and seq - p.step > 3)
    families["pointers"] = lambda seq, p: p.part == OUTPUT_PART and p.rendering == "pointer"
    return families


# A line cut: a decision -> the parts it shows by fewer lines (part number -> new text).
LineCut = Callable[[Decision], dict[int, str]]


def line_cut(decisions: list[Decision], shortens: LineCut) -> tuple[int, dict]:
    count = get_counter().count
    saved, kept, total = 0, Counter(), Counter()
    for decision in decisions:
        shortened = shortens(decision)
        saved += sum(decision.parts[n].tokens - count(text) for n, text in shortened.items())
        indexes = {n: WindowIndex(text) for n, text in shortened.items()}
        for (anchor_class, holders), anchor in zip(decision.anchors, decision.anchor_values,
                                                   strict=True):
            total[anchor_class] += 1
            # a part left as it was keeps what it held; a changed one is read again
            if holders is None or any(n not in indexes for n in holders) or any(
                    index.keeps(anchor, unnamed_listing_counts=True)
                    for index in indexes.values()):
                kept[anchor_class] += 1
    return saved, {c: kept[c] / total[c] if total[c] else 1.0 for c in total}


def lines_with_new_names(text: str, shown: set[str], numbered: bool) -> str:
    """``text``'s header line, its definitions and the lines holding a name ``shown`` lacks
    (each added to it as it is kept); ``ELIDED`` for each run of lines left out."""
    header, *lines = text.split("\n")
    kept, elided = [header], False
    for line in lines:
        code = _VIEW_LINE_NUMBER.sub("", line, count=1) if numbered else line
        names = set(names_in(code))
        if _DEFINITION.match(code) or names - shown:
            kept.append(line)
            shown |= names
            elided = False
        elif not elided:
            kept.append(ELIDED)
            elided = True
    return "\n".join(kept)


def without_docstrings(text: str, comments_too: bool) -> str:
    """A view's lines without its docstrings' bodies (a docstring's first line kept) and,
    with ``comments_too``, without blank and comment-only lines. A docstring is told by
    its triple quotes, counted from the view's first line (a view that starts inside one
    is read as if outside: an estimate)."""
    header, *lines = text.split("\n")
    kept, elided, inside = [header], False, False
    for line in lines:
        code = _VIEW_LINE_NUMBER.sub("", line, count=1)
        quotes = len(_TRIPLE_QUOTE.findall(code))
        opens = not inside and quotes % 2 == 1
        drop = (inside and not quotes % 2 == 1) or (
            comments_too and not inside and _COMMENT_OR_BLANK.match(code) is not None)
        if quotes % 2 == 1:
            inside = not inside
        if drop and not opens:
            if not elided:
                kept.append(ELIDED)
                elided = True
            continue
        kept.append(line)
        elided = False
    return "\n".join(kept)


def line_cuts() -> dict[str, LineCut]:
    def new_names(age: int, commands_too: bool) -> LineCut:
        def shortens(decision: Decision) -> dict[int, str]:
            def cut(part: Part) -> bool:
                old = decision.seq - part.step > age
                return old and (part.rendering == "view" or (
                    commands_too and part.part == COMMAND_PART and "\n" in part.text))

            shown = set(decision.prompt_names)
            for part in decision.parts:
                if not cut(part):
                    shown.update(names_in(part.text))
            # newest first: an older part keeps only the names no newer one shows
            return {n: lines_with_new_names(part.text, shown, part.rendering == "view")
                    for n, part in reversed(list(enumerate(decision.parts))) if cut(part)}
        return shortens

    def command_heads(age: int) -> LineCut:
        def shortens(decision: Decision) -> dict[int, str]:
            heads = {}
            for n, part in enumerate(decision.parts):
                lines = part.text.split("\n")
                if (part.part == COMMAND_PART and decision.seq - part.step > age
                        and len(lines) > COMMAND_HEAD_LINES + 1):
                    heads[n] = "\n".join([*lines[:COMMAND_HEAD_LINES], ELIDED])
            return heads
        return shortens

    def pointer_names(decision: Decision) -> dict[int, str]:
        """Not a cut: each pointer also lists the names its output held that the rest of
        the window lacks, newest first (an older pointer lists only names no newer one
        does)."""
        shown = set(decision.prompt_names)
        for part in decision.parts:
            if part.rendering != "pointer":
                shown.update(names_in(part.text))
        listed = {}
        for n, part in reversed(list(enumerate(decision.parts))):
            if part.rendering != "pointer":
                continue
            new = [name for name in decision.output_names[part.step - 1]
                   if name not in shown][:POINTER_NAMES]
            shown.update(new)
            if new:
                listed[n] = f"{part.text.rstrip()}\nnames: {', '.join(new)}\n"
        return listed

    def docstrings(age: int, comments_too: bool) -> LineCut:
        def shortens(decision: Decision) -> dict[int, str]:
            return {n: without_docstrings(part.text, comments_too)
                    for n, part in enumerate(decision.parts)
                    if part.rendering == "view" and decision.seq - part.step > age}
        return shortens

    families: dict[str, LineCut] = {
        f"pointers listing {POINTER_NAMES} names (adds)": pointer_names}
    for age in (0, *LINE_CUT_AGES):
        families[f"views older than {age}: no docstring bodies"] = docstrings(age, False)
        families[f"views older than {age}: no docstrings, comments"] = docstrings(age, True)
    for age in LINE_CUT_AGES:
        families[f"views older than {age}: lines with a new name"] = new_names(age, False)
        families[f"views, commands older than {age}: new names"] = new_names(age, True)
        families[f"commands older than {age}: first {COMMAND_HEAD_LINES} lines"] = (
            command_heads(age))
    return families


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="the replay store's URL")
    parser.add_argument("--arm", default="ctx08", help="the loop arm whose windows to cut")
    args = parser.parse_args(argv)
    decisions = read_decisions(args.db, args.arm)
    if not decisions:
        parser.error(f"--db: no decision of arm {args.arm!r} in {args.db}")
    sent = sum(d.prompt_tokens for d in decisions)
    print(f"{len(decisions)} decisions, {sent / 1e6:.2f} M tokens sent;"
          f" an oracle that knew each next action: {oracle_tokens(decisions) / 1e6:.2f} M")
    print(f"{'cut':45} {'saved':>8} {'left':>8}  "
          + "  ".join(f"{c.value:>10}" for c in ANCHOR_CLASSES))
    for name, drops in cuts().items():
        saved, recall = cut(decisions, drops)
        print(f"{name:45} {saved / 1e6:7.2f}M {(sent - saved) / 1e6:7.2f}M  "
              + "  ".join(f"{recall.get(c.value, 1.0):10.3f}" for c in ANCHOR_CLASSES))
    for name, shortens in line_cuts().items():
        saved, recall = line_cut(decisions, shortens)
        print(f"{name:45} {saved / 1e6:7.2f}M {(sent - saved) / 1e6:7.2f}M  "
              + "  ".join(f"{recall.get(c.value, 1.0):10.3f}" for c in ANCHOR_CLASSES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
