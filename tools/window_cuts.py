"""What a cheaper loop window would keep: the replay's windows, cut offline.

``python tools/window_cuts.py --db sqlite:///replay.db [--arm ctx08]`` reads the loop
windows a replay recorded (``ctxdb replay``) and, for every decision, which of its
window's parts hold each anchor the next action used (an anchor the real history held;
one the harness's own prompt holds needs no part). Then it prints:

- the bound: the tokens an oracle that knew the next action would send — the prompt,
  the newest output, and the cheapest parts that hold every anchor (greedy cover);
- for each cut (a family of parts dropped from every window), the tokens saved and the
  recall left, by anchor class;
- with ``--early``, for each early fold (a family of outputs shown whole folded as soon as
  they are no longer among the ``FRESH_OUTPUTS`` newest, to the form the next stride gave
  them, not at that stride), the tokens saved, the cost under a prompt cache before and
  after (a window's cached prefix counted by whole parts) and the recall left;
- for each line cut (a family of parts shown by fewer of their lines, ``…`` where lines
  were left out), the same: views and long commands of old steps keeping only the lines
  with a name the rest of the window does not show, or a command's first lines, or views
  without their docstrings' bodies (and comments), or views keeping only the symbols
  (functions, methods, classes) the run named after printing them (``symbol_play``: a
  past-only rule, its variants by age, signatures, recency and who named them), alone or
  combined with the other cuts; views past their first lines showing only definitions
  and the lines with a name the window before them lacks (``long_views``, the rule since
  built), or nothing; commands that wrote a file from a here-document, once the agent
  stopped naming the file, shown by the lines with a name the window before lacks
  (``here_documents``); and one that adds instead: pointers listing the names their
  output held that the window lacks;
- with ``--breaks``, where the folds after a run's first break the prompt cache: the
  tokens each re-sends from the first output it folds, and those it re-sends because an
  earlier part changed (a view read afresh, or gone out of play), by cause.

A cut is read as "these parts were never shown"; a real rule would leave a pointer in
their place, so the figures are an upper bound on what the cut keeps. LINE anchors are
checked here without the tree's lines (a listing's number and file only), so the line
figures run slightly above the replay report's.
"""

from __future__ import annotations

import argparse
import bisect
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from sqlalchemy import create_engine, make_url, text
from sqlalchemy.exc import OperationalError

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ctxdb.ab.reports import CACHED_PRICE_RATIO  # noqa: E402
from ctxdb.agent.adapter import waited_horizon  # noqa: E402
from ctxdb.agent.anchors import (  # noqa: E402
    Anchor,
    AnchorClass,
    WindowIndex,
    names_in,
    shell_commands,
)
from ctxdb.agent.arms import ARM_CTX08, ARM_CURRENT  # noqa: E402
from ctxdb.agent.loop import (  # noqa: E402
    COMMAND_PART,
    DEFAULT_RULES,
    EARLY_LISTING_SHARE_MAX,
    FILE_IN_PLAY_STEPS,
    FRESH_OUTPUTS,
    OUTPUT_PART,
    POINTER,
    SHOWN_CUT,
    SHOWN_WHOLE,
    fold_horizon,
    listing_entries,
    loop_step,
    names_first_shown,
    step_of_item,
)
from ctxdb.agent.trajectory import ObservationKind, read_trajectory  # noqa: E402
from ctxdb.cli.shared import existing_store  # noqa: E402
from ctxdb.db import NotAStoreError, check_store_file  # noqa: E402
from ctxdb.migrate import (  # noqa: E402
    StoreVersionError,
    check_known,
    current_revision,
    head_revision,
)
from ctxdb.tokens import get_counter  # noqa: E402

ANCHOR_CLASSES = (AnchorClass.EDIT, AnchorClass.LINE, AnchorClass.IDENTIFIER,
                  AnchorClass.PATH)
LONG_VIEW_LINES = (100, 200)  # views longer than these many lines, cut as one family
AGES = (10, 20, 30)  # parts older than these many steps, cut as one family
LINE_CUT_AGES = (10, 20)  # views and commands older than these, shown by fewer lines
COMMAND_HEAD_LINES = 3  # a long old command cut to its first lines keeps this many
POINTER_NAMES = 20  # names a pointer lists at most, when it lists its output's
VIEW_TAIL_LINES = (30, 50, 100)  # views shown whole this far, then only what is new
ELIDED = "…"  # a line cut's mark where lines were left out
FRESH_RENDERINGS = (SHOWN_WHOLE, SHOWN_CUT)
EARLY_FOLD_TOKENS = (500, 2000, 3000)  # early folds of outputs at least this long
# a here-document judged at the first fold at least this many steps after it
HERE_DOCUMENT_LOOK_STEPS = (3, 5, 10)
SCRIPT_RUNNERS = ("pytest", "test", "python", "python3")  # a test's or a script's output
# an output the run ended before any stride folded: its fold taken for a bare pointer
UNFOLDED_POINTER_TOKENS = 30
# a view's line "N\ttext": its number is not part of its names
_VIEW_LINE_NUMBER = re.compile(r"^\s*\d+\t")
_DEFINITION = re.compile(r"^\s*(?:async\s+def|def|class)\s")
_TRIPLE_QUOTE = re.compile(r'"""|\'\'\'')
_COMMENT_OR_BLANK = re.compile(r"^\s*(?:#.*)?$")
# The symbol-level "in play" rule (``symbol_play``): an old view keeps in full only the
# definitions the run named after printing it (by name, or by a line inside them).
SYMBOL_PLAY_AGES = (3, 5, 10)  # views older than these many steps are cut to their symbols
# a variant: a symbol stays in play only while the run named it within this many steps
# (as a file stays in play for FILE_IN_PLAY_STEPS), not from its view on
SYMBOL_PLAY_RECENT_STEPS = 10
PYTHON_SUFFIXES = (".py", ".pyi", ".pyx")  # files whose views are cut by symbol
# a view found by its text (a cat, a grep without -n) lacks the blank lines: a gap up to
# this many lines is read as if the lines were adjacent
SYMBOL_GAP_LINES = 3
_VIEW_HEADER = re.compile(r"^\[E\d+ (?P<path>.+) lines? (?P<label>[\d, -]+), as the tree holds them"
                          r" now\]$")
_VIEW_LINE = re.compile(r"^(\d+)\t(.*)$")
_DEFINITION_NAME = re.compile(r"^(\s*)(async\s+def|def|class)\s+(\w+)")
_ALL_WORDS = re.compile(r"[A-Za-z_]\w*")  # a symbol's name may be short: not names_in
# where the run pointed at a file's lines: a traceback's frame, a "path:N" (grep, pytest,
# a linter), and in a command naming the file, sed's and slices' numbers and head's count
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
_PATH_AT_LINE = re.compile(r"([\w./-]+\.[A-Za-z]\w*):(\d+)")
_SOURCE_FILE = re.compile(r"[\w./-]*\w\.(?:py|pyx|pyi|pxd|rst|txt|cfg|toml|ini|c|h)\b")
_LINE_RANGE = re.compile(r"(?<![\w.])(\d+)\s*[,:]\s*(\d+|\$)(?![\d.])")
FILE_END = 10**6  # sed's "$" address: the file's last line
_LINE_ADDRESS = re.compile(r"(?<![\w.,:])(\d+)[pdaic](?!\w)")
_HEAD_COUNT = re.compile(r"\bhead\s+-n?\s*(\d+)")
_LISTED_LINE = re.compile(r"^\s*(\d+)(?:\t|[:-])", re.MULTILINE)


# the rules the replay's windows were built with (``--fold-stride`` for a replay made
# with another stride)
WINDOW_RULES = DEFAULT_RULES


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
class RunHistory:
    """What a run produced and wrote, step by step, for rules that read the past: every
    word of each step's reasoning, command and output (word -> its steps, ascending), the
    same of its reasoning and command alone (what the agent wrote), and the lines each step
    pointed at (step, path as written, first, last)."""

    word_steps: dict[str, tuple[int, ...]]
    written_word_steps: dict[str, tuple[int, ...]]
    line_refs: tuple[tuple[int, str, int, int], ...]

    def names_any(self, words: set[str] | frozenset[str], first: int, last: int,
                  written_only: bool = False) -> bool:
        """Some step from ``first`` to ``last`` holds one of ``words`` (``written_only``:
        in the agent's reasoning or command)."""
        index = self.written_word_steps if written_only else self.word_steps
        for word in words:
            steps = index.get(word)
            if steps:
                at = bisect.bisect_left(steps, first)
                if at < len(steps) and steps[at] <= last:
                    return True
        return False

    def points_at(self, path: str, lines: tuple[int, int], first: int, last: int) -> bool:
        """Some step from ``first`` to ``last`` pointed at a line of ``path`` in ``lines``."""
        return any(first <= step <= last and a <= lines[1] and b >= lines[0]
                   and _same_path(written, path)
                   for step, written, a, b in self.line_refs)


def _same_path(written: str, path: str) -> bool:
    for prefix in ("/testbed/", "./"):
        written = written.removeprefix(prefix)
    return written == path or path.endswith("/" + written) or written.endswith("/" + path)


def line_refs(command: str, output: str) -> list[tuple[str, int, int]]:
    """The file lines a step pointed at: frames and ``path:N`` of its output and command;
    with its command naming files, the line numbers and ranges the command spells (sed
    addresses, list slices, head's count) and the numbered lines its output listed."""
    refs = [(path, int(n), int(n)) for text in (command, output)
            for path, n in (*_FRAME.findall(text), *_PATH_AT_LINE.findall(text))]
    files = set(_SOURCE_FILE.findall(command))
    if files:
        spans = [(int(a), FILE_END if b == "$" else int(b))
                 for a, b in _LINE_RANGE.findall(command)]
        spans += [(int(n), int(n)) for n in _LINE_ADDRESS.findall(command)]
        spans += [(1, int(n)) for n in _HEAD_COUNT.findall(command)]
        if len(files) == 1:
            spans += [(int(n), int(n)) for n in _LISTED_LINE.findall(output)]
        refs += [(path, min(a, b), max(a, b)) for path in files for a, b in spans]
    return refs


def run_history(steps: tuple[tuple[str, str, str], ...]) -> RunHistory:
    """``steps``: each step's reasoning, command and output, oldest first."""
    word_steps: dict[str, list[int]] = {}
    written_word_steps: dict[str, list[int]] = {}
    refs = []
    for number, (thought, command, output) in enumerate(steps, start=1):
        written = set(_ALL_WORDS.findall(thought + "\n" + command))
        for word in written | set(_ALL_WORDS.findall(output)):
            word_steps.setdefault(word, []).append(number)
        for word in written:
            written_word_steps.setdefault(word, []).append(number)
        refs += [(number, *ref) for ref in line_refs(command, output)]
    return RunHistory({word: tuple(s) for word, s in word_steps.items()},
                      {word: tuple(s) for word, s in written_word_steps.items()}, tuple(refs))


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
    history: RunHistory | None = None  # the run's, shared by its decisions
    # per step, the names its output was the first of the run to hold (not in the
    # prompt, a command up to it, or an earlier output): fixed once the step is taken
    first_output_names: tuple[tuple[str, ...], ...] = ()
    run: str = ""  # the run's instance id: a run's decisions follow each other
    # per step, whether the harness cut its output (showed its head and tail), and
    # whether it is a listing the window folds to its entries (``listing_entries``)
    harness_cut: tuple[bool, ...] = ()
    listing: tuple[bool, ...] = ()
    waited_horizon: int | None = None  # the horizon a window whose fold waited kept

    @property
    def horizon(self) -> int:
        """The window's fold horizon: the stride's, unless its fold waited."""
        if self.waited_horizon is not None:
            return self.waited_horizon
        return fold_horizon(self.seq - 1, WINDOW_RULES)


def first_program(command: str | None) -> str:
    if not command:
        return ""
    names = [c.name for c in shell_commands(command) if c.name and c.name != "cd"]
    return names[0] if names else ""


def replay_store(db: str) -> str:
    """The URL of the replay store ``db`` names (a URL or a path, as ctxdb takes it) once
    it is known to be a ctxdb store at this ctxdb's schema: a missing file is not made, a
    file that is no store, an unreachable server or another revision is refused."""
    url = existing_store(db)
    check_store_file(url)
    shown = make_url(url).render_as_string(hide_password=True)
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            revision = current_revision(connection)
    except OperationalError as error:
        reason = str(error.orig or error).strip().splitlines()[0]
        raise ValueError(f"{shown}: cannot read it ({reason})") from error
    finally:
        engine.dispose()
    if revision is None:
        raise NotAStoreError(f"{shown} is empty: expected a store a replay wrote")
    check_known(revision)  # a newer ctxdb's store: says so
    if revision != head_revision():  # its anchors lack columns the measure reads
        raise StoreVersionError(f"{shown} is at schema revision {revision!r}, this ctxdb's "
                                f"is {head_revision()!r}: run ctxdb db upgrade --db {shown}")
    return url


def read_decisions(url: str, arm: str) -> list[Decision]:
    """The decisions of ``arm`` in the replay store at ``url`` (``replay_store`` checks
    it), with their windows' parts and their anchors."""
    engine = create_engine(url)
    decisions = []
    texts: dict[str, str] = {}  # a settled part repeats in many windows: held once
    with engine.connect() as connection:
        runs = connection.execute(text(
            "SELECT run_id, instance_id, trajectory FROM replay_run")).all()
        for run_id, instance_id, trajectory in runs:
            run = read_trajectory(trajectory)
            programs = [first_program(step.action) for step in run.steps]
            harness_cut = tuple(step.observation is not None
                                and step.observation.kind == ObservationKind.OUTPUT_CUT
                                for step in run.steps)
            listing = tuple(bool(listing_entries(loop_step(step))) for step in run.steps)
            prompt_text = run.system_prompt + "\n" + run.instruction
            prompt = WindowIndex(prompt_text)
            prompt_names = frozenset(names_in(prompt_text))
            output_names = tuple(
                tuple(dict.fromkeys(names_in(step.observation.output))) if step.observation
                else () for step in run.steps)
            first_output_names = tuple(names_first_shown(
                [loop_step(step) for step in run.steps], prompt_names))
            history = run_history(tuple(
                (step.thought, step.action or "",
                 step.observation.output if step.observation else "") for step in run.steps))
            anchors: dict[int, list[Anchor]] = {}
            for row in connection.execute(text(
                    "SELECT a.seq, a.anchor_class, a.anchor_text, a.anchor_spelled, a.path,"
                    " a.line"
                    " FROM replay_anchor a JOIN replay_anchor_outcome o"
                    " USING (run_id, instance_id, seq, anchor_no)"
                    " WHERE a.run_id = :run AND a.instance_id = :instance"
                    " AND o.arm = :reference AND o.kept"),
                    {"run": run_id, "instance": instance_id, "reference": ARM_CURRENT}):
                anchors.setdefault(row.seq, []).append(Anchor(
                    AnchorClass(row.anchor_class), row.anchor_text, path=row.path,
                    line=row.line, spelled=row.anchor_spelled))
            for seq, decision_id, prompt_tokens, flags in connection.execute(text(
                    "SELECT r.seq, r.decision_id, r.prompt_tokens, d.flags"
                    " FROM replay_decision r JOIN decision d USING (decision_id)"
                    " WHERE r.run_id = :run AND r.instance_id = :instance AND r.arm = :arm"),
                    {"run": run_id, "instance": instance_id, "arm": arm}):
                rows = connection.execute(text(
                    "SELECT item_id, rendering, token_count, rendered_text FROM v_window_item"
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
                                          output_names, history, first_output_names,
                                          instance_id, harness_cut, listing,
                                          waited_horizon(flags)))
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


# An early fold: (decision, a fresh output no longer among the newest, the form the next
# stride gave it or None) -> whether it folds now.
EarlyFold = Callable[[Decision, Part, Part | None], bool]


def _runs(decisions: list[Decision]) -> list[list[Decision]]:
    runs: list[list[Decision]] = []
    for decision in decisions:
        if not runs or runs[-1][-1].run != decision.run or runs[-1][-1].seq >= decision.seq:
            runs.append([])
        runs[-1].append(decision)
    return runs


def _cost(windows: list[tuple[int, list[tuple[object, int]]]]) -> float:
    """A run's cost under a prompt cache: each window (its tokens, its parts as keys and
    tokens) pays a cached price for the prompt and the whole parts it shares, from the
    start, with the previous window, and the full price for the rest."""
    cost, previous = 0.0, None
    for tokens, parts in windows:
        cached = 0
        if previous is not None:
            cached = tokens - sum(t for _, t in parts)  # the harness's prompt
            for before, now in zip(previous, parts, strict=False):
                if before != now:
                    break
                cached += now[1]
        cost += tokens - cached + CACHED_PRICE_RATIO * cached
        previous = parts
    return cost


def early_fold(decisions: list[Decision], folds: EarlyFold) -> tuple[int, float, float, dict]:
    """Tokens saved, the cost before and after, and the recall left."""
    saved, cost_before, cost_after = 0, 0.0, 0.0
    changed: dict[int, dict[int, str]] = {}  # id(decision) -> part number -> its new text
    for run in _runs(decisions):
        folded: dict[int, Part] = {}  # step -> its output as the first stride folded it
        for decision in run:
            for part in decision.parts:
                if part.part == OUTPUT_PART and part.rendering not in FRESH_RENDERINGS:
                    folded.setdefault(part.step, part)
        early: dict[int, int] = {}  # step -> the first decision showing it folded early
        before, after = [], []
        for decision in run:
            keys, new_keys, texts = [], [], {}
            for number, part in enumerate(decision.parts):
                # a part is cached by its text: the early fold's is the stride's
                key = ((part.step, part.part, part.text), part.tokens)
                keys.append(key)
                fresh = part.part == OUTPUT_PART and part.rendering in FRESH_RENDERINGS
                if fresh and part.step not in early \
                        and part.step <= decision.seq - 1 - FRESH_OUTPUTS \
                        and folds(decision, part, folded.get(part.step)):
                    early[part.step] = decision.seq
                if fresh and part.step in early:
                    fold = folded.get(part.step)
                    text = fold.text if fold else ""
                    tokens = fold.tokens if fold else UNFOLDED_POINTER_TOKENS
                    key = ((part.step, part.part, text), tokens)
                    texts[number] = text
                    saved += part.tokens - tokens
                new_keys.append(key)
            shown = sum(t for _, t in keys)
            before.append((decision.prompt_tokens, keys))
            after.append((decision.prompt_tokens - shown + sum(t for _, t in new_keys),
                          new_keys))
            if texts:
                changed[id(decision)] = texts
        cost_before += _cost(before)
        cost_after += _cost(after)
    return saved, cost_before, cost_after, _recall(
        (decision, changed.get(id(decision), {})) for decision in decisions)


def early_folds() -> dict[str, EarlyFold]:
    def listing(decision: Decision, part: Part) -> bool:
        return decision.listing[part.step - 1]

    def to_pointer(decision: Decision, part: Part, fold: Part | None) -> bool:
        return fold is not None and fold.rendering == POINTER and not listing(decision, part)

    def shrinks(part: Part, fold: Part | None) -> bool:
        return fold is not None and fold.tokens <= EARLY_LISTING_SHARE_MAX * part.tokens

    folds: dict[str, EarlyFold] = {
        "outputs the harness cut": lambda d, p, f: d.harness_cut[p.step - 1]}
    for tokens in EARLY_FOLD_TOKENS:
        folds[f"outputs over {tokens} tokens"] = lambda d, p, f, n=tokens: p.tokens >= n
        folds[f"test and script outputs over {tokens} tokens, to a pointer"] = (
            lambda d, p, f, n=tokens: p.command_name in SCRIPT_RUNNERS
            and to_pointer(d, p, f) and p.tokens >= n)
        folds[f"outputs over {tokens} tokens to a pointer, and listings, that halve"] = (
            lambda d, p, f, n=tokens: (listing(d, p) or (to_pointer(d, p, f) and p.tokens >= n))
            and shrinks(p, f))
    folds["listings that halve"] = lambda d, p, f: listing(d, p) and shrinks(p, f)
    folds["listings"] = lambda d, p, f: listing(d, p)
    return folds


def fold_breaks(decisions: list[Decision]) -> tuple[int, int, int, Counter, Counter]:
    """Where the strides after a run's first fold break the prompt cache: the folds, the
    tokens each re-sends from its first changed part, before the first output it folds
    (what a fold that changed nothing earlier would not re-send: the avoidable), the
    tokens from that output on, and per cause of an early change (the part's form before
    and after) the folds and the avoidable tokens."""
    folds = avoidable = necessary = 0
    causes: Counter = Counter()
    cause_tokens: Counter = Counter()
    for run in _runs(decisions):
        for before, now in zip(run, run[1:], strict=False):
            previous = before.horizon
            if not 0 < previous < now.horizon:
                continue
            folds += 1
            changed = next((n for n, (a, b) in enumerate(zip(before.parts, now.parts, strict=False))
                            if (a.step, a.part, a.text) != (b.step, b.part, b.text)),
                           min(len(before.parts), len(now.parts)))
            folded = next((n for n, part in enumerate(now.parts)
                           if part.step > previous and part.part == OUTPUT_PART),
                          len(now.parts))
            necessary += sum(part.tokens for part in now.parts[folded:])
            if changed < folded:
                early = sum(part.tokens for part in now.parts[changed:folded])
                a, b = before.parts[changed], now.parts[changed]
                cause = (f"{a.rendering} -> {b.rendering}" if (a.step, a.part) == (b.step, b.part)
                         else "a part came or went")
                avoidable += early
                causes[cause] += 1
                cause_tokens[cause] += early
    return folds, avoidable, necessary, causes, cause_tokens


# A line cut: a decision -> the parts it shows by fewer lines (part number -> new text).
LineCut = Callable[[Decision], dict[int, str]]

_STEP_PROMPT = re.compile(r"^\[step \d+\] \$ ")  # a command part's first line: "[step N] $ "


def here_document_files(command_part: str) -> list[str]:
    """The files a command part writes from a here-document (``cat <<'EOF' > f.py``,
    ``tee f.py <<EOF``): a script the agent wrote into the tree (not ``python - <<EOF >
    out.txt``, where the here-document is a script run and the file its output)."""
    files = []
    for command in shell_commands(_STEP_PROMPT.sub("", command_part, count=1)):
        if command.heredocs and command.name in ("cat", "tee"):
            files += command.output_files()
            if command.name == "tee":
                files += [word for word in command.words[1:] if not word.startswith("-")]
    return files


def here_documents(first_fold_only: bool, play_steps: int = FILE_IN_PLAY_STEPS,
                   look_steps: int = 0) -> LineCut:
    """Commands that wrote a file from a here-document, folded with their step's output,
    shown by the lines with a name the window before them lacks when the agent's
    reasoning and commands did not name the file (its stem as a word, ``repro`` of
    ``repro.py``: looser than the loop's *in play*, which matches a path or a whole file
    name). ``first_fold_only``: judged once, at the stride that folded the step, by every
    step since the command (the text changes where the window already changes, and never
    again); else at every fold, by the last ``play_steps`` steps up to it (a file may go
    out of play later: the text changes there, before the outputs that fold, so the fold
    re-sends more). ``look_steps``: the first fold judged is the first at least that many
    steps after the command's (a script written just before a fold has had no later step
    to be named in)."""
    stride = WINDOW_RULES.fold_stride

    def shortens(decision: Decision) -> dict[int, str]:
        history = decision.history
        if history is None:
            return {}
        horizon = decision.horizon
        shown = set(decision.prompt_names)
        short = {}
        for n, part in enumerate(decision.parts):
            files = (here_document_files(part.text)
                     if part.part == COMMAND_PART and part.step <= horizon else [])
            fold = (-(-(part.step + look_steps) // stride) * stride if first_fold_only
                    else horizon)
            if files and fold <= horizon:
                stems = {path.rsplit("/", 1)[-1].rsplit(".", 1)[0] for path in files}
                since = part.step + 1 if first_fold_only else max(part.step + 1,
                                                                  fold - play_steps + 1)
                if not history.names_any(stems, since, fold, written_only=True):
                    short[n] = lines_with_new_names(part.text, set(shown), numbered=False)
            shown.update(names_in(part.text))
        return short
    return shortens


def _recall(changed: Iterable[tuple[Decision, dict[int, str]]]) -> dict[str, float]:
    """Each anchor class's share kept, each decision showing the parts its dict names
    (part number -> new text) by that text and the rest as the replay showed them."""
    kept, total = Counter(), Counter()
    for decision, texts in changed:
        indexes = {n: WindowIndex(text) for n, text in texts.items()}
        for (anchor_class, holders), anchor in zip(decision.anchors, decision.anchor_values,
                                                   strict=True):
            total[anchor_class] += 1
            # a part left as it was keeps what it held; a changed one is read again
            if holders is None or any(n not in indexes for n in holders) or any(
                    index.keeps(anchor, unnamed_listing_counts=True)
                    for index in indexes.values()):
                kept[anchor_class] += 1
    return {c: kept[c] / total[c] if total[c] else 1.0 for c in total}


def line_cut(decisions: list[Decision], shortens: LineCut) -> tuple[int, dict]:
    count = get_counter().count
    shortened = [(decision, shortens(decision)) for decision in decisions]
    saved = sum(decision.parts[n].tokens - count(text)
                for decision, texts in shortened for n, text in texts.items())
    return saved, _recall(shortened)


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


@dataclass(frozen=True)
class Symbol:
    """The definition a view's line sits in: the outermost function around it (a method
    with its nested functions), else the innermost class (its body outside methods).
    ``name`` None: a line outside any definition the window shows (module level, or in one
    whose first line no view shows) — it stands alone (``start`` = ``end`` = the line)."""

    name: str | None
    start: int  # the definition's first line
    end: int  # the last of its lines the window shows


def symbols_of(lines: dict[int, str]) -> dict[int, Symbol]:
    """Each shown line of a Python file (number -> text: every view of one window, read
    from one tree) -> the symbol it sits in, read from indentation over the lines shown (a
    gap between them is read as if they were adjacent). A decorator goes with its
    definition."""
    stack: list[tuple[int, str, bool, int]] = []  # (indent, name, a class?, its line)
    owner: dict[int, tuple[str, int] | None] = {}
    decorators: list[int] = []
    previous = None
    for number in sorted(lines):
        code = lines[number]
        if previous is not None and number - previous > SYMBOL_GAP_LINES:
            stack = []
        previous = number
        definition = None
        if code.strip():
            indent = len(code) - len(code.lstrip())
            while stack and stack[-1][0] >= indent:
                stack.pop()
            definition = _DEFINITION_NAME.match(code)
            if definition:
                stack.append((indent, definition[3], definition[2] == "class", number))
        functions = [(name, line) for _, name, is_class, line in stack if not is_class]
        owner[number] = functions[0] if functions else (
            (stack[-1][1], stack[-1][3]) if stack else None)
        if code.lstrip().startswith("@"):
            decorators.append(number)
        elif code.strip():
            for line in decorators if definition else ():
                owner[line] = owner[number]
            decorators = []
    ends: dict[tuple[str, int], int] = {}
    for number, key in owner.items():
        if key is not None:
            ends[key] = max(ends.get(key, number), number)
    return {number: Symbol(key[0], key[1], ends[key]) if key else Symbol(None, number, number)
            for number, key in owner.items()}


# whether an old view's line stays: (its file, its symbol, its text) -> kept in full
InPlay = Callable[[str, Symbol, str], bool]


def symbol_lines(text: str, symbols: dict[str, dict[int, Symbol]], in_play: InPlay,
                 signatures: bool) -> list[tuple[str, bool]]:
    """A view part's lines, each with whether the symbol cut keeps it: the lines of the
    symbols in play, and with ``signatures`` every other definition's first line. Headers,
    notes and the lines of files ``symbols`` lacks (not Python) are kept."""
    marked: list[tuple[str, bool]] = []
    path = None
    for line in text.split("\n"):
        header = _VIEW_HEADER.match(line)
        if header:
            path = header["path"]
        numbered = _VIEW_LINE.match(line)
        symbol = (symbols.get(path, {}).get(int(numbered[1]))
                  if numbered and path is not None and not header else None)
        if symbol is None or path is None:
            marked.append((line, True))
            continue
        assert numbered is not None
        signature = signatures and symbol.name is not None and symbol.start == int(numbered[1])
        marked.append((line, signature or in_play(path, symbol, numbered[2])))
    return marked


def elided(marked: list[tuple[str, bool]]) -> str:
    """The kept lines, ``ELIDED`` for each run of lines left out."""
    kept, gap = [], False
    for line, keep in marked:
        if keep:
            kept.append(line)
            gap = False
        elif not gap:
            kept.append(ELIDED)
            gap = True
    return "\n".join(kept)


def symbol_play(age: int, signatures: bool = True, recent: int | None = None,
                written_only: bool = False,
                lone_by_number: bool = False) -> LineCut:
    """Views older than ``age`` steps keep in full only the symbols the run named after
    printing them — in any step's reasoning, command or output up to the decision (never
    the next action) — by name or by pointing at a line inside (a frame, ``path:N``, a
    command's line numbers); a line outside any symbol, by a name it holds or its number.
    ``recent``: named within that many steps instead. ``written_only``: named by the agent
    (its reasoning or command; a line pointed at still counts). ``lone_by_number``: a
    line outside any symbol stays only when pointed at."""
    def shortens(decision: Decision) -> dict[int, str]:
        history = decision.history
        cut = [p.rendering == "view" and decision.seq - p.step > age for p in decision.parts]
        if history is None or not any(cut):
            return {}
        shown_lines: dict[str, dict[int, str]] = {}
        for part in decision.parts:
            if part.rendering == "view":
                path = None
                for line in part.text.split("\n"):
                    header = _VIEW_HEADER.match(line)
                    numbered = None if header else _VIEW_LINE.match(line)
                    if header:
                        path = header["path"]
                    elif numbered and path is not None:
                        shown_lines.setdefault(path, {})[int(numbered[1])] = numbered[2]
        symbols = {path: symbols_of(lines) for path, lines in shown_lines.items()
                   if path.endswith(PYTHON_SUFFIXES)}
        marked: dict[int, list[tuple[str, bool]]] = {}
        for n, part in enumerate(decision.parts):
            if not cut[n]:
                continue
            first = part.step + 1 if recent is None else max(part.step + 1, decision.seq - recent)
            last = decision.seq - 1
            seen: dict[tuple[str, Symbol], bool] = {}

            def in_play(path: str, symbol: Symbol, code: str, first: int = first,
                        last: int = last,
                        seen: dict[tuple[str, Symbol], bool] = seen) -> bool:
                if symbol.name is None:
                    words = set() if lone_by_number else set(names_in(code))
                elif (path, symbol) in seen:
                    return seen[path, symbol]
                else:
                    words = {symbol.name}
                playing = history.names_any(words, first, last, written_only) or history.points_at(
                    path, (symbol.start, symbol.end), first, last)
                if symbol.name is not None:
                    seen[path, symbol] = playing
                return playing
            marked[n] = symbol_lines(part.text, symbols, in_play, signatures)
        return {n: elided(lines) for n, lines in marked.items()}
    return shortens


def _marked(original: str, shortened: str) -> list[tuple[str, bool]]:
    """``original``'s lines, each with whether ``shortened`` (its lines in order, with
    ``ELIDED`` marks) still shows it."""
    left = [line for line in shortened.split("\n") if line != ELIDED] if shortened else []
    marked, at = [], 0
    for line in original.split("\n"):
        keep = at < len(left) and left[at] == line
        at += keep
        marked.append((line, keep))
    return marked


def with_new_names(shortens: LineCut) -> LineCut:
    """``shortens``, then each line it left out that holds a name the rest of the window
    lacks shown again, newest part first (as ``lines_with_new_names``): what holds every
    identifier, at a price."""
    def rescued(decision: Decision) -> dict[int, str]:
        changed = shortens(decision)
        shown = set(decision.prompt_names)
        marked = {}
        for n, part in enumerate(decision.parts):
            if n not in changed:
                shown.update(names_in(part.text))
                continue
            marked[n] = _marked(part.text, changed[n])
            shown.update(name for line, keep in marked[n] if keep for name in names_in(line))
        for n in sorted(marked, reverse=True):
            lines = marked[n]
            for i, (line, keep) in enumerate(lines):
                names = set(names_in(_VIEW_LINE_NUMBER.sub("", line, count=1)))
                if not keep and names - shown:
                    lines[i] = (line, True)
                    shown |= names
        return {n: elided(lines) for n, lines in marked.items()}
    return rescued


def dropping(drops: Callable[[int, Part], bool]) -> LineCut:
    """A cut (``cuts``) as a line cut, to combine: the parts it drops show nothing."""
    return lambda decision: {n: "" for n, part in enumerate(decision.parts)
                             if drops(decision.seq, part)}


def spanning_headers(decision: Decision) -> dict[int, str]:
    """Every view's header names the span of its lines (``lines 1-320``), not each run of
    them: its lines are numbered one by one anyway, and a view found by its text (a
    ``cat``) has a run between every two blank lines."""
    spanned = {}
    for n, part in enumerate(decision.parts):
        if part.rendering != "view":
            continue
        lines = part.text.split("\n")
        for i, line in enumerate(lines):
            header = _VIEW_HEADER.match(line)
            if header and ("," in header["label"]):
                numbers = re.findall(r"\d+", header["label"])
                lines[i] = line.replace(header["label"], f"{numbers[0]}-{numbers[-1]}", 1)
        if lines != part.text.split("\n"):
            spanned[n] = "\n".join(lines)
    return spanned


def combined(*line_cuts: LineCut) -> LineCut:
    """The line cuts one after the other, each on the parts as the ones before left them."""
    def shortens(decision: Decision) -> dict[int, str]:
        changed: dict[int, str] = {}
        for shorten in line_cuts:
            parts = tuple(replace(part, text=changed[n]) if n in changed else part
                          for n, part in enumerate(decision.parts))
            changed.update(shorten(replace(decision, parts=parts)))
        return changed
    return shortens


def line_cuts() -> dict[str, LineCut]:
    def new_names(age: int, views: bool, commands: bool) -> LineCut:
        def shortens(decision: Decision) -> dict[int, str]:
            def cut(part: Part) -> bool:
                old = decision.seq - part.step > age
                return old and (views and part.rendering == "view" or (
                    commands and part.part == COMMAND_PART and "\n" in part.text))

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

    def pointer_first_names(decision: Decision) -> dict[int, str]:
        """Not a cut: each pointer also lists the names its output was the first of the
        run to hold (``loop.names_first_shown``, the rule since built: run it on windows
        from before it)."""
        listed = {}
        for n, part in enumerate(decision.parts):
            new = decision.first_output_names[part.step - 1]
            if part.rendering == "pointer" and new:
                listed[n] = f"{part.text.rstrip()}\nnames: {', '.join(new)}\n"
        return listed

    def docstrings(age: int, comments_too: bool) -> LineCut:
        def shortens(decision: Decision) -> dict[int, str]:
            return {n: without_docstrings(part.text, comments_too)
                    for n, part in enumerate(decision.parts)
                    if part.rendering == "view" and decision.seq - part.step > age}
        return shortens

    def long_views(lines_whole: int, names_too: bool) -> LineCut:
        """Views past their first ``lines_whole`` lines: nothing more (a cap), or
        (``names_too``) only their definitions and the lines holding a name the window
        before them lacks (the rule since built: run it on windows from before it)."""
        def shortens(decision: Decision) -> dict[int, str]:
            shown = set(decision.prompt_names)
            long = {}
            for n, part in enumerate(decision.parts):
                header, *lines = part.text.rstrip("\n").split("\n")
                if part.rendering == "view" and len(lines) > lines_whole:
                    for line in lines[:lines_whole]:
                        shown.update(names_in(_VIEW_LINE_NUMBER.sub("", line, count=1)))
                    tail = (lines_with_new_names("\n".join(["", *lines[lines_whole:]]), shown,
                                                 numbered=True).split("\n")[1:]
                            if names_too else [ELIDED])
                    long[n] = "\n".join([header, *lines[:lines_whole], *tail]) + "\n\n"
                else:
                    shown.update(names_in(part.text))
            return long
        return shortens

    families: dict[str, LineCut] = {
        f"pointers listing {POINTER_NAMES} names (adds)": pointer_names,
        "pointers listing the names their output first held (adds)": pointer_first_names}
    for age in (0, *LINE_CUT_AGES):
        families[f"views older than {age}: no docstring bodies"] = docstrings(age, False)
        families[f"views older than {age}: no docstrings, comments"] = docstrings(age, True)
    for age in LINE_CUT_AGES:
        families[f"views older than {age}: lines with a new name"] = new_names(age, True, False)
        families[f"views, commands older than {age}: new names"] = new_names(age, True, True)
        families[f"commands older than {age}: new names"] = new_names(age, False, True)
        families[f"commands older than {age}: first {COMMAND_HEAD_LINES} lines"] = (
            command_heads(age))
    families["here-documents of files out of play at their fold: new names"] = (
        here_documents(first_fold_only=True))
    families["here-documents of files out of play at any fold: new names"] = (
        here_documents(first_fold_only=False))
    for look in HERE_DOCUMENT_LOOK_STEPS:
        families[f"here-documents of files out of play {look} steps on: new names"] = (
            here_documents(first_fold_only=True, look_steps=look))
    for age in SYMBOL_PLAY_AGES:
        families[f"views older than {age}: symbols in play"] = symbol_play(age)
    age, recent = SYMBOL_PLAY_AGES[0], SYMBOL_PLAY_RECENT_STEPS
    families[f"views older than {age}: symbols, no signatures"] = symbol_play(
        age, signatures=False)
    families[f"views older than {age}: symbols named in {recent} steps"] = symbol_play(
        age, recent=recent)
    families[f"views older than {age}: symbols the agent named"] = symbol_play(
        age, written_only=True)
    families[f"views older than {age}: symbols, lone lines by number"] = symbol_play(
        age, lone_by_number=True)
    families[f"views older than {age}: symbols + new names"] = with_new_names(symbol_play(age))
    families[f"views older than {age}: agent, {recent} steps + new names"] = with_new_names(
        symbol_play(age, recent=recent, written_only=True))
    # the cheapest symbol rule: named by the agent within ``recent`` steps, no signatures,
    # lone lines by number; the names it drops are put back (identifiers bind)
    strictest = symbol_play(age, signatures=False, recent=recent, written_only=True,
                            lone_by_number=True)
    families[f"views older than {age}: strictest + new names"] = with_new_names(strictest)
    docstrings_0 = docstrings(0, True)
    heads_10 = command_heads(LINE_CUT_AGES[0])
    for lines_whole in VIEW_TAIL_LINES:
        families[f"views past {lines_whole} lines: definitions, names the window before "
                 "lacks"] = long_views(lines_whole, True)
    families[f"views past {VIEW_TAIL_LINES[-1]} lines: nothing"] = long_views(
        VIEW_TAIL_LINES[-1], False)
    families["view headers naming their span"] = spanning_headers
    families["strictest + new names, headers naming a span"] = combined(
        with_new_names(strictest), spanning_headers)
    families["strictest, docstrings, heads + new names"] = with_new_names(
        combined(strictest, docstrings_0, heads_10))
    drops = cuts()
    families["strictest, every family + new names"] = with_new_names(combined(
        strictest, docstrings_0, heads_10,
        dropping(drops["outputs shown whole, older than 3 steps"]), dropping(drops["pointers"])))
    return families


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="the replay store (a URL or a path)")
    parser.add_argument("--arm", default="ctx08", help="the loop arm whose windows to cut")
    parser.add_argument("--early", action="store_true",
                        help="print the early folds (and their cost) instead of the cuts")
    parser.add_argument("--breaks", action="store_true",
                        help="print where the folds after the first break the prompt cache")
    parser.add_argument("--rows", default="", metavar="TEXT",
                        help="only the cuts whose name holds TEXT (the first row always)")
    parser.add_argument("--fold-stride", type=int, default=DEFAULT_RULES.fold_stride,
                        metavar="N", help="the fold stride the replay's windows were built "
                        f"with (default {DEFAULT_RULES.fold_stride}, the rules')")
    args = parser.parse_args(argv)
    if args.fold_stride < 1:
        parser.error(f"--fold-stride: a number of steps of at least 1, not {args.fold_stride}")
    global WINDOW_RULES
    WINDOW_RULES = replace(DEFAULT_RULES, fold_stride=args.fold_stride)
    try:
        url = replay_store(args.db)
    except (StoreVersionError, FileNotFoundError, ValueError) as error:
        parser.error(f"--db: {error}")
    decisions = read_decisions(url, args.arm)
    if not decisions:
        shown = make_url(url).render_as_string(hide_password=True)
        if args.arm == ARM_CTX08:
            parser.error(f"--db: {shown} holds no decision of the loop arm {ARM_CTX08!r}")
        parser.error(f"--arm: no decision of arm {args.arm!r} in {shown} (windows are "
                     f"stored for the loop arm {ARM_CTX08!r} only)")
    sent = sum(d.prompt_tokens for d in decisions)
    print(f"{len(decisions)} decisions, {sent / 1e6:.2f} M tokens sent;"
          f" an oracle that knew each next action: {oracle_tokens(decisions) / 1e6:.2f} M")
    if args.breaks:
        folds, avoidable, necessary, causes, cause_tokens = fold_breaks(decisions)
        print(f"{folds} folds after a run's first: {necessary / 1e6:.2f} M tokens re-sent from"
              f" the first output each folds, {avoidable / 1e6:.2f} M more from an earlier"
              " change")
        for cause, count in causes.most_common():
            print(f"  {cause:30} {count:5} folds {cause_tokens[cause] / 1e6:7.2f} M")
        return 0
    if args.early:
        print(f"{'fold early':65} {'saved':>8} {'cost':>8}  "
              + "  ".join(f"{c.value:>10}" for c in ANCHOR_CLASSES))
        for name, folds in early_folds().items():
            if args.rows not in name:
                continue
            saved, before, after, recall = early_fold(decisions, folds)
            print(f"{name:65} {saved / 1e6:7.2f}M {(after / before - 1) * 100:+7.1f}%  "
                  + "  ".join(f"{recall.get(c.value, 1.0):10.3f}" for c in ANCHOR_CLASSES))
        return 0
    print(f"{'cut':45} {'saved':>8} {'left':>8}  "
          + "  ".join(f"{c.value:>10}" for c in ANCHOR_CLASSES))
    for name, drops in cuts().items():
        if args.rows not in name and name != "nothing":
            continue
        saved, recall = cut(decisions, drops)
        print(f"{name:45} {saved / 1e6:7.2f}M {(sent - saved) / 1e6:7.2f}M  "
              + "  ".join(f"{recall.get(c.value, 1.0):10.3f}" for c in ANCHOR_CLASSES))
    for name, shortens in line_cuts().items():
        if args.rows not in name:
            continue
        saved, recall = line_cut(decisions, shortens)
        print(f"{name:45} {saved / 1e6:7.2f}M {(sent - saved) / 1e6:7.2f}M  "
              + "  ".join(f"{recall.get(c.value, 1.0):10.3f}" for c in ANCHOR_CLASSES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
