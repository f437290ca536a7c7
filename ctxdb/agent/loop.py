"""Agent-loop windows (issue 22): one window per step of a bash agent's loop, built from
its history by rules measured on recorded runs (``ctxdb replay``; docs/agent-loop.md).

A step is the agent's command and what came back (``LoopStep``). The window for the next
decision holds every earlier step, oldest first, each in the cheapest form that keeps
what a next action takes from it:

- **Commands, always.** Each step shows the agent's command as it wrote it (a command
  over ``COMMAND_SHOWN_MAX_CHARS`` is cut for the window, whole in the store).
- **The newest reasoning, last.** The agent's free-text reasoning is carried for its
  newest turn only, after the newest output (the next window drops it without touching
  a byte before it). Older reasoning was 44% of what a harness sends on the development
  runs; the newest held the exact text the next edit replaced where nothing else did
  (``LoopRules.thoughts`` shows every fresh turn's). A turn the harness ran nothing of
  is its reasoning whole, blocks too (``trajectory.Step.reasoning``).
- **Fresh outputs whole.** The newest outputs are shown as the harness sent them, but for
  runs of lines an earlier fresh output shows (``REPEAT_RUN_MIN_LINES``). They
  fold in strides (``FOLD_STRIDE``): the fold horizon moves every few steps, not at every
  step, so consecutive windows share a long byte-identical prefix a prompt cache serves.
  A stride's fold waits while re-sending uncached the parts from the first one it changes
  would cost more, beyond their cached price, than its shrink saves at the cached price
  over as many steps as the run has made (``fold_pays``): the window goes on as the one
  before it, and the decision says so.
- **A folded file view stays a view.** A folded output of a command that only printed
  files (``cat``, ``nl``, ``sed -n``, ``head``, ``tail``, ``grep -n`` …) becomes the lines
  it showed, line-numbered and read from the tree as it is now — only the lines no earlier
  kept view of that file shows; past its first ``VIEW_LINES_WHOLE``, only its definitions
  and the lines with a name the window before it does not show — unless the command chose
  the lines by number (``sed -n 'A,Bp'``, ``head -n N``, ``tail -n N``): the agent asked
  for each of them, and edits what it asked for. It stays while its file
  is in play: a command, or the agent's reasoning by the file's path, named the file
  within ``FILE_IN_PLAY_STEPS`` steps of the fold horizon, and of every fold since the
  view's step (a view out of play stays out).
- **A folded listing keeps its entries.** A folded output of ``ls``, ``find`` or ``tree``
  becomes the names it listed, a line per directory, the shallowest first
  (``LISTING_ENTRIES_MAX``): the layout the agent's later commands name. A long one
  folds so as soon as it is no longer among the fresh outputs, not at the next stride
  (``EARLY_LISTING_SHARE_MAX``).
- **Everything else folded is a pointer** naming the item, with the repository files the
  output named (a search's result is its paths) and the names it was the first step of
  the run to show (``POINTER_NAMES_MAX``: a script's printout, a test's name — what the
  agent types next); ``ctxdb show`` prints it whole.
- **Folded parts settle until the horizon moves.** Between folds a folded part keeps the
  text the previous window showed it with (``SettledParts``), so an edit does not change
  the window's middle (a prompt cache would lose everything after it). When a command
  changed lines a view shows, a note right after that command's output shows them as
  they read now (``tree_change_item``); at the next fold the views are read afresh.

Decision type, from the history alone (``decision_type_of``): ``localize`` before the
first edit, ``repair`` when the newest output is a failure after an edit, else ``edit``.
The harness's own system and instruction messages (with the task) are the window's
prefix, sent verbatim and counted against the ceiling; the task is not sent again.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import itertools
import posixpath
import re
import shlex
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Generic, TypeVar, cast

from ..tokens import CACHED_PRICE_RATIO, HASHED_TEXT_KEPT_MAX_CHARS
from .anchors import (
    ShellCommand,
    is_edit_command,
    names_in,
    sed_file_operands,
    shell_commands,
)
from .trajectory import DEFAULT_WORKDIR as DEFAULT_WORKDIR  # callers read it here too
from .trajectory import ObservationKind, Step, text_lines

# Rules measured on the 97 development runs (docs/agent-loop-history.md has the sweeps).
FRESH_OUTPUTS = 2  # the newest outputs shown whole, at least
FOLD_STRIDE = 10  # the fold horizon moves in steps of this many decisions (5: tried, not kept)
# a fold re-sends a part at the full price where a cache served it at CACHED_PRICE_RATIO:
# its extra cost is this many of what one cached character saves a step (9 at 0.1)
RESENT_PER_CACHED_SHRINK = 1 / CACHED_PRICE_RATIO - 1
# a folded file's views stay while a command (or the reasoning, by its path) named the
# file this recently, at every fold since the view's step
FILE_IN_PLAY_STEPS = 10
COMMAND_SHOWN_MAX_CHARS = 6_000  # a longer command (a here-document script) is cut
# files whose text may hold a traceback that is no failure (doctests, docs)
SOURCE_SUFFIXES = frozenset({".py", ".pyi", ".pyx", ".rst", ".md"})
VIEW_LINES_MAX = 400  # of each file, lines one folded view shows at most (a whole cat is a reading)
# a view's first lines shown whole; past them only its definitions and the lines holding a
# name the window has not shown before them (a whole-file cat's tail the agent skims; not
# a range it chose by number, which it reads to the end)
VIEW_LINES_WHOLE = 100
ELIDED_LINES = "…"  # where a view left lines out
_DEFINITION = re.compile(r"^\s*(?:async\s+def|def|class)\s")
# A fresh output's run of at least REPEAT_RUN_MIN_LINES lines that an earlier fresh output
# shows in the same order (a re-run test's header, the same warnings, a file printed
# again) is a note naming it, where that is much shorter; lines shorter than
# REPEAT_LINE_MIN_CHARS (blank, a brace) are never a repeat.
REPEAT_RUN_MIN_LINES = 3
REPEAT_LINE_MIN_CHARS = 8
# where a line stands in that many earlier places at most, a run is looked for from each
# (a line every output repeats, a prompt's markup, would make it quadratic)
REPEAT_SOURCES_TRIED = 16
# a note replaces a run only where it is at most this share of the run's length: for
# less the reader would look back to save a token or two
REPEAT_NOTE_MAX_SHARE = 0.5
# a note of changed lines names a run of lines that only moved by where the window showed
# it from this many lines on; a shorter run is shown as it reads now (its numbers are what
# a line-addressed edit uses)
MOVED_RUN_SUMMARIZED_MIN = 10
# a masked output keeps the repository files it named (a find, ls or grep -l is read for
# them): at most this many, in the order named
POINTER_PATHS_MAX = 30
RAISED_SHOWN_MAX_CHARS = 160  # a folded traceback's exception line, cut past this
COMMAND_NAMED_MAX_CHARS = 80  # a command the window names beside its output (its first line)
COMMANDS_READ_CACHED = 4096  # commands read for their exit status, test runner or edit, remembered
# names a pointer lists at most: those its output was the first of the run to show (not
# the harness's prompt, nor a command up to it, nor an earlier output), in their order.
# The history alone decides them, so a pointer's text never changes once printed
# (docs/agent-loop-history.md: 46 of the 51 identifiers lost sat in outputs masked to a pointer;
# the sweep: 5 / 10 / 20 names keep 0.990 / 0.992 / 0.993 of them for 0.27 / 0.42 / 0.66 M
# tokens)
POINTER_NAMES_MAX = 10
# an output is read as a binary file's (no names listed) by its first characters: a NUL
# (git's test: a NUL in the first 8,000 bytes), or more than this share of bytes that did
# not decode (one stray byte in a long log is no binary file)
BINARY_SAMPLE_CHARS = 8000
BINARY_UNDECODED_SHARE = 0.01
PATH_CHARS_MAX = 300  # longer runs of path characters are not paths
# a masked listing (``ls``, ``find``, ``tree``) keeps the entries it listed, at most this
# many, the shallowest first: the names a repository's layout gives its next commands
# (``tests``, ``tox.ini``). Listings held 12 of the 34 identifiers and paths the window
# lost on the development runs and 30 of 74 on held-out runs of other repositories;
# 50 / 100 / 200 entries keep 7 / 7 / 10 and 23 / 26 / 30 of them, for 0.42 / 0.67 /
# 1.09 M more tokens on the development runs (docs/agent-loop-history.md)
LISTING_ENTRIES_MAX = 50
# a listing folds to its entries as soon as FRESH_OUTPUTS newer outputs came, not at the
# next stride, when its entries are at most this share of the text the harness showed: a
# run's opening ``ls -R`` (a harness-cut 3,400 tokens) no longer rides along whole for up
# to a stride, and the cache break lands two steps from the window's end. On the
# development runs: 0.96 M fewer tokens, 1.6% less cost, 3 identifiers lost (words among
# an ``ls -R``'s entries past the kept ones, which the stride fold drops a few steps
# later); a listing that would fold to most of its text only breaks the cache
# (docs/agent-loop-history.md)
EARLY_LISTING_SHARE_MAX = 0.5

# a run of printed lines that reads otherwise now, between two lines found, stands for the
# file's lines between those two (an edit rewrote them) when that stretch is at most
# this many times the run's length; longer, a neighbour is more likely found elsewhere
CHANGED_RUN_GROWTH_MAX = 2

# the window's item kinds (spec EVIDENCE_KINDS): what each part of a step is
AGENT_TURN, FILE_VIEW, HARNESS_NOTE = "agent_turn", "file_view", "harness_note"
TOOL_OUTPUT, TEST_OUTPUT, TRACEBACK, ERROR = "tool_output", "test_output", "traceback", "error"
# renderings a loop part takes (window_item.rendering)
SHOWN_WHOLE, SHOWN_CUT, SHOWN_LINES, POINTER = "verbatim", "truncated", "view", "pointer"

_VIEW_COMMANDS = frozenset({"cat", "nl", "sed", "head", "tail", "grep", "egrep", "cd", "ls",
                            "wc", "echo"})
_FILE_PRINTERS = frozenset({"cat", "nl", "sed", "head", "tail"})
_LISTERS = frozenset({"ls", "find", "tree"})
# what may run beside a lister with its output still a listing: filters of its output
# (with no file of their own to read), and cd or echo
_LISTING_FILTERS = frozenset({"cd", "grep", "egrep", "head", "tail", "sort", "echo"})
_FIND_ACTIONS = frozenset({"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint",
                           "-fprint0", "-fprintf", "-fls", "-printf", "-ls"})
_WRITING_OPTIONS = re.compile(r"^(-o|--output)(=|$)")  # sort -o, tree -o write a file
# ``ls -l``'s columns before the name: (-s, -i: blocks, inode), mode, links, owner, group
# (none with -g/-o: the dates below tell), size (a device's "major, minor"), the date
# (``Nov 18 10:00``, or --time-style's ISO forms)
_LONG_LISTING = re.compile(
    r"^(?:\d+\s+){0,2}(?P<mode>[-bcdlpsD][-rwxsStTl]{9})[.+@]?\s+\d+\s+(?:\S+\s+){1,2}"
    r"(?:\d+,\s*)?\S+\s+(?:\d{4}-\d\d-\d\d\s+\d\d:\d\d(?::\d\d(?:\.\d+)?\s+[+-]\d{4})?"
    r"|\d\d-\d\d\s+\d\d:\d\d|\S+\s+\S+\s+\S+)\s(?P<name>.+)$")
_LISTING_HEADER = re.compile(r"^(?P<dir>\S[^:]*):$")  # ``ls -R``'s (or several dirs') header
_TREE_BRANCH = re.compile(r"^(?:[│|]\s+|\s{4})*(?:[├└`|](?:──|--)\s)?")
_TREE_SUMMARY = re.compile(r"^\d+ director(?:y|ies)(?:, \d+ files?)?$")
_GREP_COMMANDS = frozenset({"grep", "egrep"})
# a runner by its name, not a module of that name inside a package (``sympy.testing.pytest``)
_TEST_RUNNERS = re.compile(r"(?<![.\w])(pytest|py\.test|bin/test|runtests\.py|unittest|tox)\b")
# programs that read, list, search, edit, write, compare or install files: naming a test
# runner (``cat tox.ini``, ``ls bin/test``, ``pip install pytest``) is not running one
_NOT_RUNNERS = frozenset({"cat", "nl", "sed", "head", "tail", "grep", "egrep", "fgrep", "rg",
                          "ls", "find", "tree", "echo", "printf", "git", "pip", "pip3",
                          "conda", "which", "type", "wc", "cp", "mv", "rm", "touch", "mkdir",
                          "chmod", "diff", "less", "more", "file", "stat", "tee", "awk",
                          "sort", "vi", "vim", "nano"})
# the shell's own conditions (``test -f tox.ini``), told by the word as written: a
# repository's ``bin/test`` runs tests
_SHELL_CONDITIONS = frozenset({"test", "[", "[["})
# ``python -m MODULE`` running one of these installs or inspects, not tests
_NOT_RUNNER_MODULES = frozenset({"pip", "py_compile", "compileall"})
_TRACEBACK = "Traceback (most recent call last)"
# a traceback's own words (its header, how chained ones are joined, a frame's "File …,
# line N, in <module>"): no name of the code, so no pointer lists them; a frame keeps its
# file and function, but not Python's own stand-ins for them (<string>, <frozen …>,
# <listcomp>, <lambda>)
_TRACEBACK_FRAMING = re.compile(
    r"^[ \t]*(?:Traceback \(most recent call last\):|During handling of the above exception,"
    r" another exception occurred:|The above exception was the direct cause of the following"
    r" exception:)[ \t\r]*$|\bFile (\"[^\"\n]*\"), line \d+(?:, in (?:<\w+>)?)?", re.MULTILINE)
# pytest's header, from its ``== test session starts ==`` rule to its ``collected N items``
# line within ``PYTEST_HEADER_LINES_MAX`` (else the rule alone): the runner's and the
# machine's words (platform, versions, plugins, a project's banner such as astropy's
# package versions), no name of the code, so no pointer lists them; they crowded out the
# test names that follow (astropy's banner took all ten of a pointer's names)
PYTEST_HEADER_LINES_MAX = 60  # astropy's, the longest seen, is about 30
_PYTEST_HEADER = re.compile(
    r"^=+ test session starts =+[ \t\r]*$"
    rf"(?:(?:\n[^\n]*){{0,{PYTEST_HEADER_LINES_MAX}}}?\ncollect(?:ed|ing)\b[^\n]*)?",
    re.MULTILINE)
# an absolute path's directories (``/opt/miniconda3/envs/testbed/lib/python3.9/``): where
# a file sits on the harness's machine, so no pointer lists them (the file's own name
# stays; a relative path, a URL's, stays whole). The working tree's own directories under
# an absolute path (``/testbed/sympy/polys/``) go too: measured on the development and
# held-out runs, no anchor was lost, and the paths a pointer names keep them
_ABSOLUTE_DIRS = re.compile(r"(?<![\w.~/-])/(?:[\w.+-]+/)+")
# a traceback's exception line: ``ValueError: …``, ``sympy.core.SympifyError: …``
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b(?::.*)?$",
                             re.MULTILINE)
# commands whose exit status 1 means "no" (no match, a difference), not a failure
_ANSWERS_NO_WITH_ONE = frozenset({"grep", "egrep", "fgrep", "rg", "diff", "cmp"})
_NUMBERED = re.compile(r"^\s*(\d+)\t")
# ``nl -ba f | grep -n x -A 3``: grep's own line numbers (``12:``, ``13-``) before nl's
_GREP_STREAM_NUMBER = re.compile(r"^\d+[:-](?=\s*\d+\t)")
_GREP_NUMBERED = re.compile(r"^(?:(?P<path>[^\s:]+):)?(?P<line>\d+)[:-]")
_GREP_LINE_NUMBERED = re.compile(r"^(?P<line>\d+)[:-]")  # a grep -n of one file
# the two lines a harness's cut (mini-swe-agent's, by characters) went through: the head's
# last, before its closing tag, and the tail's first, after its opening tag
_CUT_THROUGH = re.compile(r"[^\n]*\n(?=</output_head>)|(?<=<output_tail>\n)[^\n]*\n")
# ``sed -n 'A,Bp' f | grep -n x -A 3``: a grep over a stream numbers the stream's lines
# (``3:`` a hit, ``4-`` its context), not the file's, and with context puts ``--`` (or its
# ``--group-separator``) between its groups
_STREAM_LINE_NUMBER = re.compile(r"^\d+[:-]")
_GREP_GROUP_SEPARATOR = "--"
# grep options after which what it prints are not the stream's lines as they read: parts
# of lines, counts, names, byte offsets, a name or a tab before each line, nothing
_GREP_NOT_LINES = frozenset("oclLbHTqZ")
_GREP_NOT_LINES_LONG = frozenset({
    "only-matching", "count", "files-with-matches", "files-without-match", "byte-offset",
    "with-filename", "initial-tab", "quiet", "silent", "null"})
# ...of which a grep of files reads its file's name first (``path:N:text``): its lines are
# read after it, as a grep of several files prints them
_GREP_NAMES_FILE, _GREP_NAMES_FILE_LONG = "H", "with-filename"
_GREP_CONTEXT = frozenset("ABC")
_GREP_CONTEXT_LONG = frozenset({"context", "after-context", "before-context"})
NO_COMMAND = "(no command)"  # a turn with no command, or several
# a turn the ceiling's ladder folded: a shell command keeps its ``$``, a tool call has none
FOLDED_COMMAND, FOLDED_CALL = "$ …", "…"
# why a view's output is a pointer (item_event.driver): no step named its files lately
OUT_OF_PLAY_RULE = "folded: its files out of play"
MASK_HINT = "ctxdb show {ref} E<n> prints a masked output whole."
# a shown bare output's outcome (``with_outcome``)
FRESH_NO_OUTPUT = "(no output)\n"
FRESH_EXIT = "(exit {code})\n"
FRESH_TIMED_OUT = "(timed out)\n"


def mask_hint(ref: str) -> str:
    """The window's first line: ``MASK_HINT`` with the run's reference quoted as a shell
    needs it (an instance id may hold spaces or parentheses), so the agent can run it."""
    return MASK_HINT.format(ref=shlex.quote(ref))


@dataclass(frozen=True)
class LoopStep:
    """One step of the loop: the agent's command (None when its turn had none) and the
    observation that came back (``output``: the command's output, or the harness's own
    feedback; empty is allowed). ``observation``: the observation as the harness showed
    it (its markup), when it differs from ``output``. ``actions``: a turn that ran several
    commands (tool calls), each as a step of its own (command, output, kind, return code,
    observation), in the order they ran — each in a shell of its own, so a ``cd`` in one
    does not carry to the next; ``command`` and ``output`` are then them joined.
    ``call``: the agent's call of a tool that is no shell, as the window shows it
    (``str_replace_editor view src/a.py``); ``command`` is then a shell command with the
    same effect (``cat -n src/a.py``), which every rule reads and the model never sees."""

    command: str | None
    output: str = ""
    kind: str = ObservationKind.OUTPUT
    returncode: int | None = None
    thought: str = ""
    observation: str | None = None
    actions: tuple[LoopStep, ...] = ()
    call: str | None = None

    @property
    def has_call(self) -> bool:
        """Whether the turn, or one of its actions, is a tool call that is no shell."""
        if self.call is not None:
            return True
        # (asked of every step of every window: no generator for a turn of one command)
        return bool(self.actions) and any(action.call is not None for action in self.actions)

    @property
    def said(self) -> str:
        """The agent's turn as the window shows it: ``$ command``, or its tool call; of a
        turn of several actions with a call among them, each action's on a line."""
        if self.call is not None:
            return self.call
        if self.has_call:
            return "\n".join(action.said for action in self.actions)
        return f"$ {self.command if self.command is not None else NO_COMMAND}"

    @property
    def shown(self) -> str:
        return self.observation if self.observation is not None else self.output

    @property
    def kept(self) -> str:
        """The text the store keeps (``ctxdb show`` prints it): what the harness showed,
        or, of an output it cut, the whole output when the harness gave it too
        (mini-swe-agent 2.x's ``raw_output``)."""
        shown = self.shown
        if self.kind == ObservationKind.OUTPUT_CUT and len(self.output) > len(shown):
            return self.output
        return shown


@dataclass(frozen=True)
class LoopRules:
    """The window's rules, each one switchable for an ablation."""

    fresh_outputs: int = FRESH_OUTPUTS
    fold_stride: int = FOLD_STRIDE
    file_in_play_steps: int = FILE_IN_PLAY_STEPS
    views: bool = True  # folded file views stay as lines; off: a pointer like any output
    thoughts: bool = False  # the agent's reasoning shown beside its commands
    strided: bool = True  # off: the horizon moves at every step
    view_lines_max: int = VIEW_LINES_MAX
    view_lines_whole: int = VIEW_LINES_WHOLE
    chosen_ranges: bool = True  # a view of lines chosen by number is no long view
    last_thought: bool = True  # the newest turn's reasoning, after the newest output
    pointer_paths: bool = True  # a masked output keeps the files it named
    pointer_names: bool = True  # a masked output keeps the names it first showed
    listings: bool = True  # a masked listing (ls, find, tree) keeps its entries
    early_listings: bool = True  # a long listing folds once it is no longer fresh
    repeats: bool = True  # a fresh output's lines an earlier fresh output shows are elided
    settled: bool = True  # folded parts keep the previous window's text between folds
    reasoning_in_play: bool = True  # a file whose path the agent's reasoning names is in play
    out_of_play_sticks: bool = True  # a view whose file went out of play stays a pointer
    paying_folds: bool = True  # a fold waits while its shrink does not pay its re-send
    sticky_ladder: bool = True  # what the ladder folded stays folded while over the ceiling
    largest_first: bool = True  # over the ceiling the largest outputs fold first, not the oldest
    moved_run_summarized_min: int = MOVED_RUN_SUMMARIZED_MIN

    def without(self, rule: str) -> LoopRules:
        """These rules with ``rule`` (a name of ``ABLATIONS``) off."""
        return replace(self, **ABLATIONS[rule])


NAME_PATTERNS_CACHED = 1024  # file names and paths looked for in steps, compiled once each
# every window of a run asks again whether each step up to its horizon named each file it
# viewed: a long run's answers, remembered (steps x files viewed at mini-swe-agent's 250)
NAMINGS_CACHED = 65536
# files whose line positions are remembered across windows while their text stays the
# same: more than a long run's windows view at once, each up to FILE_READ_MAX_BYTES
FILE_POSITIONS_CACHED = 64
DIGESTS_CACHED = 4096  # a run's steps come back at every decision: each digested once
EVERY_STEP = 10**9  # a file-in-play window no run reaches: every file stays in play
# what turning each rule off means (the replay's ablation arms)
ABLATIONS: dict[str, dict[str, Any]] = {
    "views": {"views": False},
    "strides": {"strided": False},
    "in_play": {"file_in_play_steps": EVERY_STEP},
    "named_files": {"pointer_paths": False},
    "pointer_names": {"pointer_names": False},
    "listings": {"listings": False},
    "early_listings": {"early_listings": False},
    "repeats": {"repeats": False},
    "reasoning": {"last_thought": False},
    "settled": {"settled": False},
    "reasoning_in_play": {"reasoning_in_play": False},
    "out_of_play_sticks": {"out_of_play_sticks": False},
    "long_views": {"view_lines_whole": VIEW_LINES_MAX},
    "chosen_ranges": {"chosen_ranges": False},
    "paying_folds": {"paying_folds": False},
    "sticky_ladder": {"sticky_ladder": False},
    "largest_first": {"largest_first": False},
}


def ablation_arm(rule: str) -> str:
    """The replay arm of the loop window with ``rule`` off."""
    return f"ctx08-without-{rule}"


def loop_step(step: Step) -> LoopStep:
    """A recorded step (``trajectory.Step``) as the loop reads it."""
    observation = step.observation
    actions = tuple(LoopStep(command=command, output=each.output, kind=each.kind,
                             returncode=each.returncode, observation=each.text)
                    for command, each in zip(step.commands, step.each_observation, strict=True)
                    ) if (len(step.each_observation) > 1 and step.action is not None
                          and len(step.each_observation) == len(step.commands)) else ()
    return LoopStep(
        command=step.action, thought=step.reasoning,
        output=observation.output if observation else "",
        kind=observation.kind if observation else ObservationKind.NOTE,
        returncode=observation.returncode if observation else None,
        observation=observation.text if observation else None, actions=actions)


# build_window's default rules (frozen, so one instance serves every call)
DEFAULT_RULES = LoopRules()


@dataclass
class LoopPart:
    """One item of a loop window: a step's command or its observation."""

    item_no: int
    step: int
    kind: str
    content: str  # the raw text, kept whole in the store
    text: str  # what the window shows
    rendering: str
    rule: str  # why it has this form (item_event.driver)
    command: str | None = None
    path: str | None = None
    lines: tuple[int, int] | None = None
    tokens: int = 0
    # an output's pointer as the fold words it (from the output itself, not the harness's
    # markup around it), for the ceiling's ladder to fold it the same way; a turn's, what
    # the ladder's fold of it shows after ``[step N] `` (``FOLDED_COMMAND``, ``FOLDED_CALL``)
    label: str = ""
    # a current-arm part recorded as the harness sent it: its messages' contents, each
    # counted as a chat message (a turn's several tool outputs are several messages)
    messages: tuple[str, ...] = ()
    # what `ctxdb why` says beside the rule (item_event.detail), e.g. when the files of a
    # view out of play were named last
    why: str = ""
    # of a view, the lines it read that it leaves out as an earlier view shows them, by
    # file: what it leans on (``leaning_on``)
    omitted: tuple[tuple[str, frozenset[int]], ...] = ()


@dataclass
class LoopWindow:
    parts: list[LoopPart] = field(default_factory=list)
    decision_type: str = "localize"
    horizon: int = 0  # outputs of steps up to here are folded
    fold_waited: bool = False  # the stride's fold would not pay: the horizon stayed
    # the outputs the ceiling's ladder folded in the run's previous window, when this one
    # continues its history (``sticky_ladder``): folded first while this one is over the
    # ceiling too, so that near the ceiling a part is not shown again at one step and
    # folded at the next (each change re-sends the window after it uncached)
    ladder_folded_before: frozenset[int] = frozenset()
    # the outputs the ladder folded here (its budget_log's folds: what the store reads
    # back for the next window, so a replay's windows in memory keep the same)
    ladder_folded: set[int] = field(default_factory=set)
    # the ladder folds the largest outputs (then views) first, the oldest first among
    # parts of one size (``largest_first``); else the oldest first
    ladder_largest_first: bool = True

    def text(self, header: str = "") -> str:
        return header + "".join(part.text for part in self.parts)


FileReader = Callable[[str], "list[str] | None"]
# each file's distinct non-blank lines -> their line numbers (``_line_positions``), memoized
LocatedLines = dict[str, dict[str, list[int]]]


LAST_THOUGHT_RULE = "the newest reasoning"
SETTLED_RULE = "settled: as the window showed it since the fold"
TREE_CHANGE_RULE = "lines a folded view shows, changed by this step's command"
# a step's command, its observation, its reasoning, and the note of what its command
# changed in the files the window's views show
PARTS_PER_STEP = 4
COMMAND_PART, OUTPUT_PART, THOUGHT_PART, TREE_PART = range(PARTS_PER_STEP)


def item_numbers(step: int) -> tuple[int, int, int]:
    """The item numbers of step ``step``'s command, observation and reasoning: stable
    across the run's decisions, so a pointer printed once stays true."""
    first = PARTS_PER_STEP * (step - 1) + 1
    return first, first + 1, first + 2


def tree_change_item(step: int) -> int:
    """The item number of the note of lines step ``step``'s command changed in views."""
    return PARTS_PER_STEP * (step - 1) + 1 + TREE_PART


def step_of_item(item_no: int) -> tuple[int, int]:
    """(step, part) of an item number: part 0 the command, 1 the observation, 2 the
    reasoning, 3 the note of the lines its command changed."""
    return (item_no - 1) // PARTS_PER_STEP + 1, (item_no - 1) % PARTS_PER_STEP


def newest_output(parts: Sequence[LoopPart]) -> LoopPart | None:
    """The newest step's observation among a window's parts (a note of the lines its
    command changed, or the newest reasoning, may follow it)."""
    return next((p for p in reversed(parts) if step_of_item(p.item_no)[1] == OUTPUT_PART),
                None)


@dataclass(frozen=True)
class SettledPart:
    """A part as a window showed it: the digest of its content, its form and text, and
    for a note of changed lines its content (the ladder may have shown it as a pointer)."""

    content_sha256: str
    rendering: str
    text: str
    content: str | None = None


@dataclass(frozen=True)
class SettledParts:
    """What the previous decision's window of the same run showed for its folded parts
    and its notes of changed lines (item number -> part), after ``done`` steps, with the
    outputs up to ``horizon`` folded; and the digest of every command and output of those
    steps (``history_digests``), so a window settles only on the history it continues."""

    done: int
    parts: dict[int, SettledPart]
    history: dict[int, str]
    horizon: int = 0
    ladder_folded: frozenset[int] = frozenset()  # the outputs its ceiling's ladder folded

    @classmethod
    def of(cls, window: LoopWindow, steps: Sequence[LoopStep],
           rules: LoopRules) -> SettledParts:
        """A window built after ``steps``, as the next window of its run settles on it."""
        return cls.settling(len(steps), {
            p.item_no: SettledPart(part_digest(p.content), p.rendering, p.text, p.content)
            for p in window.parts}, history_digests(steps), rules, window.horizon,
            frozenset(window.ladder_folded))

    @classmethod
    def settling(cls, done: int, parts: dict[int, SettledPart], history: dict[int, str],
                 rules: LoopRules, horizon: int | None = None,
                 ladder_folded: frozenset[int] = frozenset()) -> SettledParts:
        """Of a window's ``parts`` (item number -> as shown), those that settle: its
        folded outputs and its notes of changed lines. ``horizon``: the window's, when
        its fold waited (else the stride's, ``fold_horizon``). ``ladder_folded``: the
        outputs the ceiling's ladder folded in it."""
        horizon = fold_horizon(done, rules) if horizon is None else horizon
        return cls(done, {item_no: part for item_no, part in parts.items()
                          if part.rendering in (SHOWN_LINES, POINTER)
                          and _settles(item_no, horizon)}, history, horizon, ladder_folded)


def part_digest(content: str) -> str:
    """A part's content as the store names it (``tokens.content_sha256``); a text the
    store would not hold as given (a lone surrogate) is still named, not refused. Short
    texts are remembered (a run's steps come back at every decision); a long one is not
    kept alive for it."""
    if len(content) > HASHED_TEXT_KEPT_MAX_CHARS:
        return _digest(content)
    return _digest_kept(content)


def _digest(content: str) -> str:
    return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()


_digest_kept = functools.lru_cache(maxsize=DIGESTS_CACHED)(_digest)


def history_digests(steps: Sequence[LoopStep]) -> dict[int, str]:
    """Item number -> content digest of each step's command and output."""
    digests = {}
    for number, step in enumerate(steps, start=1):
        command_no, output_no, _ = item_numbers(number)
        digests[command_no] = part_digest(turn_content(step))
        digests[output_no] = part_digest(step.kept)
    return digests


def is_history_item(item_no: int) -> bool:
    return step_of_item(item_no)[1] in (COMMAND_PART, OUTPUT_PART)


def _settles(item_no: int, horizon: int) -> bool:
    step, part = step_of_item(item_no)
    return part == TREE_PART or (part == OUTPUT_PART and step <= horizon)


def fold_horizon(done: int, rules: LoopRules) -> int:
    """The newest step whose output is folded, when ``done`` steps came before."""
    unfolded = done - rules.fresh_outputs
    if unfolded <= 0:
        return 0
    stride = rules.fold_stride if rules.strided else 1
    return unfolded // stride * stride


def _is_harness_note(step: LoopStep) -> bool:
    """The harness's own feedback: a turn with no command (a tool call with no shell
    equivalent is a command of its tool's)."""
    return step.kind in (ObservationKind.FORMAT_ERROR, ObservationKind.NOTE) \
        or (step.command is None and not step.has_call)


def observation_kind(step: LoopStep) -> str:
    if _is_harness_note(step):
        return HARNESS_NOTE
    if _TRACEBACK in step.output and not _prints_sources_only(step):
        return TRACEBACK
    if step.command is not None and _runs_tests(step.command):
        return TEST_OUTPUT
    if _failed(step) or step.kind == ObservationKind.TIMEOUT:
        return ERROR
    return TOOL_OUTPUT


def _prints_sources_only(step: LoopStep) -> bool:
    """Whether the step only printed the repository's source or documentation files, so
    a traceback in its output is their text (a doctest under ``nl -ba``), not a failure;
    a log the agent printed (``cat /tmp/out``, ``tail test.log``) holds a real one."""
    commands = _viewing_commands(step)
    files = [word for command in commands or () for word in _file_operands(command)]
    return bool(files) and all(
        posixpath.splitext(path)[1] in SOURCE_SUFFIXES
        and (not path.startswith("/") or path.startswith(DEFAULT_WORKDIR + "/"))
        for path in files)


def _failed(step: LoopStep) -> bool:
    """A non-zero exit that is no answer (``_found_nothing``); of a turn's several actions,
    any one's."""
    if step.actions:
        return any(_failed(action) for action in step.actions)
    return step.returncode not in (None, 0) and not _found_nothing(step)


def _test_exit(step: LoopStep) -> int | None:
    """A test run's exit status: of a turn's several actions, the test runs' (the first
    non-zero), not another action's."""
    if step.actions:
        codes = [action.returncode for action in step.actions
                 if action.command and _runs_tests(action.command)]
        return next((code for code in codes if code not in (None, 0)), 0 if codes else None)
    return step.returncode


def _found_nothing(step: LoopStep) -> bool:
    """A search or comparison that answered no (``grep`` found no match, ``diff`` found a
    difference): exit status 1 from the command whose status the shell returns."""
    return step.returncode == 1 and bool(step.command) and _answers_no(step.command or "")


@lru_cache(maxsize=COMMANDS_READ_CACHED)
def _runs_tests(command: str) -> bool:
    """Whether one of the command's simple commands runs a test runner (``pytest``,
    ``python -m unittest``, ``bin/test``, ``tox``; a script an interpreter reads from its
    words or a here-document), not where the program only reads, lists, edits or
    installs files (``_NOT_RUNNERS``: ``cat <<EOF > test_x.py`` writes a test file)."""
    return any(_runs_a_runner(c.words, c.heredocs) for c in shell_commands(command))


def _runs_a_runner(words: Sequence[str], heredocs: Sequence[str]) -> bool:
    if not words or words[0] in _SHELL_CONDITIONS \
            or posixpath.basename(words[0]) in _NOT_RUNNERS:
        return False
    module = words[words.index("-m") + 1] if "-m" in words[:-1] else None
    if module in _NOT_RUNNER_MODULES:
        return False
    return _TEST_RUNNERS.search(" ".join([*words, *heredocs])) is not None


@lru_cache(maxsize=COMMANDS_READ_CACHED)
def _answers_no(command: str) -> bool:
    """Whether the command whose status the shell returns is one whose 1 means "no" (read
    once per command: every window of a run asks again)."""
    commands = shell_commands(command)
    return bool(commands) and commands[-1].name in _ANSWERS_NO_WITH_ONE


def _clipped(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def pointer_label(step: LoopStep, kind: str) -> str:
    """A folded output's pointer: ``masked_label``, and what a pointer must not hide —
    the exception a traceback ended with, that the command timed out, or that a test run
    failed (its exit status)."""
    label = masked_label(kind, step.output)
    raised = _EXCEPTION_LINE.findall(step.output) if kind == TRACEBACK else []
    if raised:  # what a traceback ends with is what it says
        label += f"; raised: {_clipped(raised[-1].strip(), RAISED_SHOWN_MAX_CHARS)}"
    if step.kind == ObservationKind.TIMEOUT:
        return f"{label}; timed out"
    code = _test_exit(step) if kind == TEST_OUTPUT else None
    if code not in (None, 0):
        return f"{label}; exit {code}"
    return label


@lru_cache(maxsize=COMMANDS_READ_CACHED)
def _edits(command: str, workdir: str) -> bool:
    """``is_edit_command`` read once per command: every decision of a run asks of every
    step before it."""
    return is_edit_command(command, workdir=workdir)


def decision_type_of(steps: Sequence[LoopStep], workdir: str = DEFAULT_WORKDIR) -> str:
    """localize before the first edit; repair when the newest output is a failure after
    an edit; edit otherwise. ``workdir``: where the agent's commands run."""
    edited = any(action.command and _edits(action.command, workdir)
                 for s in steps for action in (s.actions or (s,)))
    if not edited:
        return "localize"
    newest = steps[-1] if steps else None
    if newest is not None and (
            observation_kind(newest) in (TRACEBACK, ERROR)
            or observation_kind(newest) == TEST_OUTPUT and (
                _test_exit(newest) not in (None, 0)
                or any(_failed(a) for a in newest.actions))):  # another action failed
        return "repair"
    return "edit"


# ------------------------------------------------------------------------ file views

def _commands_with_output(step: LoopStep) -> list[ShellCommand] | None:
    """The simple commands of a step whose output came back (whole or cut by the
    harness), or None: no command, or harness feedback.
    A step of several actions: each action's commands, read from the working directory."""
    if step.actions:
        each = [_commands_with_output(action) for action in step.actions]
        return None if any(c is None for c in each) else [c for cs in each if cs for c in cs]
    if not step.command or step.kind not in (ObservationKind.OUTPUT, ObservationKind.OUTPUT_CUT):
        return None
    return list(_commands_read(step.command))


@lru_cache(maxsize=COMMANDS_READ_CACHED)
def _commands_read(command: str) -> tuple[ShellCommand, ...]:
    """A command's simple commands, read once: every window of a run reads every step's
    command again (the reader takes any text; a test fuzzes it). Shared: read, not changed."""
    return tuple(shell_commands(command))


def _viewing_commands(step: LoopStep) -> list[ShellCommand] | None:
    """The simple commands of a step that only printed files (and filtered what they
    printed), or None."""
    commands = _commands_with_output(step)
    if not commands or any(c.name not in _VIEW_COMMANDS or c.output_files()
                           or (c.name == "sed" and any(w.startswith("-i") for w in c.words))
                           for c in commands):
        return None
    return commands


def _deleted(path: str, read_file: FileReader) -> bool:
    """Whether the tree holds nothing at ``path``, as far as the reader can tell
    (``read_file.exists``, as ``TreeFiles`` has; without it, nothing is said gone)."""
    exists: Callable[[str], bool] | None = getattr(read_file, "exists", None)
    return exists is not None and not exists(path)


def deleted_since(step: LoopStep, read_file: FileReader,
                  workdir: str = DEFAULT_WORKDIR) -> list[str]:
    """The files a step that only printed files printed, and that the tree no longer holds
    (the reader says so: ``read_file.exists``, as ``TreeFiles`` has). Only a step that
    succeeded: a failed one may have named a file that never was."""
    if step.actions:
        return list(dict.fromkeys(path for action in step.actions
                                  for path in deleted_since(action, read_file, workdir)))
    commands = _viewing_commands(step) if step.returncode == 0 else None
    if commands is None:
        return []
    paths = (_repository_path(w, c.cwd, workdir) for c in commands
             for w in _file_operands(c))
    return list(dict.fromkeys(p for p in paths if p is not None and _deleted(p, read_file)))


# a reading command's options that take a value, in the next word when not attached
_VALUE_FLAGS = {"cat": "", "head": "nc", "tail": "ncs", "nl": "bdfhilnsvw",
                "grep": "efmABCdD", "egrep": "efmABCdD"}
# long options that take a value (the next word, when not given with "="): grep's, head's
# and tail's; every one of nl's but --no-renumber
_VALUE_LONG_OPTIONS = frozenset({
    "regexp", "file", "max-count", "after-context", "before-context", "context", "include",
    "exclude", "exclude-dir", "exclude-from", "label", "binary-files", "devices",
    "directories", "group-separator", "lines", "bytes", "sleep-interval", "pid",
    "max-unchanged-stats", "body-numbering", "section-delimiter", "footer-numbering",
    "header-numbering", "line-increment", "join-blank-lines", "number-format",
    "number-separator", "starting-line-number", "number-width"})


@dataclass(frozen=True)
class ParsedOptions:
    """A reading command's words read as it reads them (``_parsed_options``)."""

    operands: tuple[str, ...]  # its files: not an option's value, a grep's pattern, "-"
    short: frozenset[str]  # its one-letter options (``-5``, grep's context, as ``C``)
    long: dict[str, str]  # its long options, each with its value ("" if none)


def _parsed_options(command: ShellCommand) -> ParsedOptions:
    """A reading command's options and files: short options clustered (``-inA3``) up to
    the first that takes a value, which is the rest of the word or the next one (``-e
    -n``: ``-n`` is a pattern), long ones with ``=`` or the next word; after ``--`` every
    word is a file (GNU tools read options after their operands too)."""
    value_flags = _VALUE_FLAGS.get(command.name, "")
    operands: list[str] = []
    short: set[str] = set()
    long: dict[str, str] = {}
    words = iter(command.words[1:])
    for word in words:
        if word == "--":
            operands.extend(words)
        elif word.startswith("--"):
            name, attached, value = word[2:].partition("=")
            if name in _VALUE_LONG_OPTIONS and not attached:
                value = next(words, "")
            long[name] = value
        elif word.startswith("-") and len(word) > 1:
            for at, flag in enumerate(word[1:], start=1):
                short.add("C" if flag.isdigit() else flag)  # grep ``-5``: five lines of context
                if flag in value_flags:
                    if at == len(word) - 1:
                        next(words, None)  # its value, not attached
                    break
        else:
            operands.append(word)
    # grep -e PATTERN / -f FILE: every operand is a file; else the first is the pattern
    if command.name in _GREP_COMMANDS and not (short & {"e", "f"}
                                               or long.keys() & {"regexp", "file"}):
        operands = operands[1:]
    return ParsedOptions(tuple(o for o in operands if o != "-"),  # "-": standard input
                         frozenset(short), long)


def _file_operands(command: ShellCommand) -> list[str]:
    """The files a reading command names: its operands, not an option's value, a grep's
    pattern or a sed script."""
    if command.name == "sed":
        return list(sed_file_operands(command.words))
    if command.name not in _VALUE_FLAGS:
        return []
    return list(_parsed_options(command).operands)


def viewed_lines(step: LoopStep, read_file: FileReader, workdir: str = DEFAULT_WORKDIR,
                 located: LocatedLines | None = None) -> dict[str, list[int]] | None:
    """The lines of each file a reading command printed, or None when the command did
    anything but print files (wrote, ran code, edited). ``workdir``: where the agent's
    commands run (the repository's root). Numbered output (``nl``, ``cat -n``, ``grep -n``)
    names its lines; otherwise each printed line is found in the file as it is now, in
    order (``sed -n '/def f/,/return/p'``, ``grep`` without ``-n``, a whole ``cat``).
    ``located``: a cache of the files' line positions, shared by one window's views."""
    if step.actions:  # each action's output is its own: its lines are not another's
        merged: dict[str, list[int]] = {}
        # an action that did more than print files (a cd alone prints none) is left to
        # the pointer beside the view (``_beside_the_view``)
        for action in _viewing_actions(step):
            views = viewed_lines(action, read_file, workdir, located)
            for path, lines in (views or {}).items():
                merged.setdefault(path, []).extend(lines)
        return {path: sorted(set(lines)) for path, lines in merged.items()} or None
    commands = _viewing_commands(step)
    if commands is None:
        return None
    located = located if located is not None else {}
    # what the agent saw: a cut output's raw text (2.x keeps it) holds lines it never read,
    # and the lines the harness cut through are not whole
    printed = (_cut_ends_dropped(step.shown) if step.kind == ObservationKind.OUTPUT_CUT
               else step.output)
    printing = [(command, [path for path in (_repository_path(w, command.cwd, workdir)
                                             for w in _file_operands(command))
                           if path is not None and read_file(path) is not None])
                for command in commands if command.name in _FILE_PRINTERS | _GREP_COMMANDS]
    # one output of several files' lines (``cat a.py b.py``, ``head a.py; head b.py``):
    # only a grep's own file names tell whose line is whose; the others' lines go to the
    # files in the order printed (``_segments``), each found by its text
    printed_files = list(dict.fromkeys(path for _, files in printing for path in files))
    shared = len(printed_files) > 1
    # numbers printed by the one command that names a file are its file's; with several,
    # each file's lines are found by their text
    sole = sum(1 for _, files in printing if files) == 1
    numbering = [(command, files) for command, files in printing
                 if command.name == "nl" or _numbers_every_line(command)]
    # numbers an ``nl -ba`` of the file printed are its lines'; an nl of a stream (``sed -n
    # 'A,Bp' f | nl``), or one that skips blank lines, does not: the lines are then found
    # by their text
    by_number = sole and any(files and _numbers_every_line(command)
                             for command, files in numbering)
    numbered = _numbered_lines(printed) if sole and numbering else []
    viewed: dict[str, list[int]] = {}
    segments: dict[str, list[str]] | None = None  # of a shared output, read once
    for command, files in printing:
        if command.name in _GREP_COMMANDS:
            for path, lines in _grep_lines(printed, files, command, workdir, read_file,
                                           located, shared).items():
                viewed.setdefault(path, []).extend(lines)
            continue
        if shared:
            if segments is None:
                segments = _segments(text_lines(printed), [
                    path for other, its in printing if other.name not in _GREP_COMMANDS
                    for path in its], read_file, located)
            for path in files:
                viewed.setdefault(path, []).extend(
                    _locate(segments[path], path, read_file, located, bridge=False))
            continue
        if not files:
            continue
        path = files[0]
        whole = sole and step.kind != ObservationKind.OUTPUT_CUT
        if numbered:
            texts = [text for _, text in numbered]
        elif stream_greps := [g for g in map(_grep_options, commands)
                              if g is not None and g.streamed]:
            texts = _stream_grep_texts(printed, stream_greps)
        else:
            texts = text_lines(printed)
        chosen = (_renumbered(numbered, path, read_file, located) if numbered and by_number
                  else _locate(texts, path, read_file, located, bridge=whole))
        if whole and _prints_a_stretch(commands):
            chosen = _stretch_now(chosen, read_file(path) or [],
                                  by_number=bool(numbered) and by_number)
        viewed.setdefault(path, []).extend(chosen)
    return {path: sorted(set(lines)) for path, lines in viewed.items() if lines} or None


class _ReadsNoted:
    """A file reader that notes what was read through it — each file's digest, and
    whether a path exists — so a reading can be trusted again while those are the same.
    (``viewed_lines`` asks no path whether it exists today; one that did would be noted
    rather than told "no reader to ask", which would change what it reads.)"""

    def __init__(self, read_file: FileReader) -> None:
        self._read_file = read_file
        self.digests: dict[str, str | None] = {}
        self.existing: dict[str, bool] = {}

    def __call__(self, path: str) -> list[str] | None:
        lines = self._read_file(path)
        self.digest(path)
        return lines

    def digest(self, path: str) -> str | None:
        if path not in self.digests:
            self.digests[path] = self._read_file.digest(path)  # type: ignore[attr-defined]
        return self.digests[path]

    def exists(self, path: str) -> bool:
        if path not in self.existing:
            self.existing[path] = _exists(self._read_file, path)
        return self.existing[path]


def _exists(read_file: FileReader, path: str) -> bool:
    exists: Callable[[str], bool] | None = getattr(read_file, "exists", None)
    return True if exists is None else exists(path)


@dataclass(frozen=True)
class _ViewsRead:
    """A step's ``viewed_lines`` and what they were read from (``_ReadsNoted``)."""

    views: dict[str, list[int]] | None
    digests: tuple[tuple[str, str | None], ...]
    existing: tuple[tuple[str, bool], ...]


def _viewed_lines_once(step: LoopStep, read_file: FileReader, workdir: str,
                       located: LocatedLines) -> dict[str, list[int]] | None:
    """``viewed_lines``, read again only when a file it read changed: every window of a
    run reads each folded step's views afresh (a reader without file digests: always)."""
    if getattr(read_file, "digest", None) is None:
        return viewed_lines(step, read_file, workdir, located)
    if not _viewing_actions(step) if step.actions else _viewing_commands(step) is None:
        return None  # viewed_lines's own first answer, before a long output is hashed
    key = _step_digest(step, workdir)
    known = _VIEWS_READ.peek(key)
    if known is None or any(read_file.digest(path) != digest  # type: ignore[attr-defined]
                            for path, digest in known.digests) \
            or any(_exists(read_file, path) != there for path, there in known.existing):
        noted = _ReadsNoted(read_file)
        known = _ViewsRead(viewed_lines(step, noted, workdir, located),
                           tuple(noted.digests.items()), tuple(noted.existing.items()))
        _VIEWS_READ.keep(key, known)
    # a copy: the window's views change their own lists
    return None if known.views is None else {path: list(lines)
                                             for path, lines in known.views.items()}


def _viewing_actions(step: LoopStep) -> list[LoopStep]:
    """The actions of a turn of several that only printed files."""
    return [action for action in step.actions if _viewing_commands(action) is not None]


def _step_digest(step: LoopStep, workdir: str) -> str:
    """A step (with its actions) and where it ran, as one digest: what its reading of the
    files depends on besides the files. Its texts by ``part_digest`` (a short one is
    remembered: a run's steps come back at every decision)."""
    return _digest("\0".join((part_digest(workdir), *_step_fields(step))))


def _step_fields(step: LoopStep) -> list[str]:
    """A step's fields as words, each text by its digest; its actions' after their count."""
    def text(value: str | None) -> str:
        return "-" if value is None else part_digest(value)  # no digest is "-"

    return [text(step.command), str(step.kind), repr(step.returncode), text(step.output),
            text(step.observation), str(len(step.actions)),
            *(field for action in step.actions for field in _step_fields(action)),
            # (a step without a call reads as it did before calls were)
            *(() if step.call is None else ("call", text(step.call)))]


_SED_LINE_RANGE = re.compile(r"^\d+(,\d+)?p$")  # sed -n '40,80p'


def _numbers_every_line(command: ShellCommand) -> bool:
    """``nl -ba`` or ``cat -n``: every line numbered (nl's default numbers only non-blank
    lines)."""
    words = command.words[1:]
    if command.name == "cat":
        return "-n" in words or "--number" in words
    if command.name != "nl":
        return False
    return any(w in ("-ba", "--body-numbering=a") for w in words) or any(
        a == "-b" and b == "a" for a, b in zip(words, words[1:], strict=False))


@dataclass(frozen=True)
class GrepOptions:
    """What a grep's options say of what it prints (``_grep_options``)."""

    streamed: bool  # it reads standard input: no file named, not recursive
    numbered: bool  # ``-n``: each line printed starts with its line number
    lines: bool  # it prints whole lines (no ``-o``, ``-c``, ``-l``, ``-b``, ``-H`` …)
    separator: str | None  # the line printed between groups of context lines, if any


def _grep_options(command: ShellCommand) -> GrepOptions | None:
    """What a grep's options (``_parsed_options``) say of what it prints; None for any
    other command."""
    if command.name not in _GREP_COMMANDS:
        return None
    parsed = _parsed_options(command)
    short, long = parsed.short, parsed.long
    recursive = bool(short & {"r", "R"}) or bool(
        long.keys() & {"recursive", "dereference-recursive"})
    context = bool(short & _GREP_CONTEXT) or bool(long.keys() & _GREP_CONTEXT_LONG)
    separator = (None if not context or "no-group-separator" in long
                 else long.get("group-separator", _GREP_GROUP_SEPARATOR))
    streamed = not recursive and not parsed.operands
    not_lines = (_GREP_NOT_LINES if streamed else _GREP_NOT_LINES - {_GREP_NAMES_FILE},
                 _GREP_NOT_LINES_LONG if streamed
                 else _GREP_NOT_LINES_LONG - {_GREP_NAMES_FILE_LONG})
    return GrepOptions(
        streamed=streamed,
        numbered="n" in short or "line-number" in long,
        lines=not (short & not_lines[0] or long.keys() & not_lines[1]),
        separator=separator)


def _stream_grep_texts(printed: str, greps: Sequence[GrepOptions]) -> list[str]:
    """The printed lines of a file's text that greps over its stream printed: each
    numbering grep's number taken off (``3:``, ``4-``), the lines between groups left
    out; none when a grep printed something else than whole lines."""
    if not all(grep.lines for grep in greps):
        return []
    numbers = sum(grep.numbered for grep in greps)
    separators = {grep.separator for grep in greps if grep.separator is not None}
    texts = []
    for line in text_lines(printed):
        if line in separators:
            continue
        for _ in range(numbers):
            line = _STREAM_LINE_NUMBER.sub("", line, count=1)
        texts.append(line)
    return texts


def _prints_a_stretch(commands: Sequence[ShellCommand]) -> bool:
    """Whether the commands print one stretch of a file's lines, not lines picked by a
    pattern: ``cat``, ``nl``, ``head``, ``tail``, ``sed -n 'A,Bp'``."""
    for command in commands:
        if command.name in ("cat", "nl", "head", "tail", "cd"):
            continue
        scripts = [w for w in command.words[1:] if not w.startswith("-")]
        if command.name != "sed" or not scripts or not _SED_LINE_RANGE.match(scripts[0]):
            return False
    return True


def _chosen_range_files(step: LoopStep, workdir: str) -> frozenset[str]:
    """The files the step printed lines of that it chose by number: each reading (each
    action of a turn of several) that printed one file, as a stretch
    (``_prints_a_stretch``) through a range — ``sed -n 'A,Bp'``, ``head``/``tail`` with a
    line count (not ``tail -n +N``, to the file's end, nor bytes). Not a whole file, nor
    lines a pattern picked, nor a file printed beside another."""
    chosen = set()
    for reader in (_viewing_actions(step) if step.actions else [step]):
        commands = _viewing_commands(reader)
        if not commands or not _prints_a_stretch(commands) \
                or not any(map(_chooses_lines_by_number, commands)):
            continue
        files = [path for command in commands for path in (
            _repository_path(word, command.cwd, workdir) for word in _file_operands(command))
                 if path is not None]
        if len(files) == 1:
            chosen.update(files)
    return frozenset(chosen)


def _chooses_lines_by_number(command: ShellCommand) -> bool:
    """``sed -n 'A,Bp'``, or ``head``/``tail`` given a line count (``-n N``, ``-N``,
    ``--lines=N``; not ``tail -n +N``, nor ``-c``): lines picked by their numbers."""
    if command.name == "sed":  # a stretch's sed prints a line range (_prints_a_stretch)
        return "-n" in command.words[1:] or "--quiet" in command.words[1:] \
            or "--silent" in command.words[1:]
    if command.name not in ("head", "tail"):
        return False
    parsed = _parsed_options(command)
    if parsed.short & {"c"} or "bytes" in parsed.long:
        return False
    words = command.words[1:]
    counts = [value for flag, value in zip(words, words[1:], strict=False) if flag == "-n"]
    counts += [w[2:] for w in words if w.startswith("-n") and len(w) > 2]
    counts += [parsed.long["lines"]] if "lines" in parsed.long else []
    counts += [w[1:] for w in words if w[1:].isdigit() and w.startswith("-")]
    return bool(counts) and all(count.isdigit() for count in counts)


def _stretch_now(chosen: Sequence[int], file_lines: Sequence[str],
                 by_number: bool = False) -> list[int]:
    """A printed stretch's lines as the file holds the stretch now: lines an edit put
    between two of them are the stretch's too (a reader of the view takes it for
    contiguous), while it grew to at most ``CHANGED_RUN_GROWTH_MAX`` times its lines and
    its lines were found in the order printed (``chosen``, in that order). Else nothing is
    filled, and of lines found by their text (not ``by_number``) only those in that order
    are kept: one found back before a line printed ahead of it is another line with its
    text (lines followed by their numbers may have moved apart, each confirmed)."""
    if any(a >= b for a, b in zip(chosen, chosen[1:], strict=False)):
        if by_number:
            return sorted(set(chosen))
        # a line found back before the one printed ahead of it is another line with its
        # text (the printed one changed since): not the stretch's, and nothing filled
        in_order: list[int] = []
        for number in chosen:
            if not in_order or number > in_order[-1]:
                in_order.append(number)
        return in_order
    kept = set(chosen)
    lines = sorted(kept)
    if len(lines) < 2:
        return lines
    between = [n for n in range(lines[0], lines[-1] + 1)
               if n in kept or file_lines[n - 1].strip()]
    if len(between) > CHANGED_RUN_GROWTH_MAX * len(lines):
        return lines
    return between


def _line_positions(path: str, read_file: FileReader,
                    located: LocatedLines) -> dict[str, list[int]]:
    """Each distinct non-blank line of the file -> its line numbers, ascending."""
    positions = located.get(path)
    if positions is None:
        # every window reads the files afresh, and most did not change: a reader that
        # names a file's text by digest (``TreeFiles.digest``) has it found once
        digest: Callable[[str], str | None] | None = getattr(read_file, "digest", None)
        named = digest(path) if digest is not None else None
        positions = located[path] = (
            _positions_of(read_file(path) or ()) if named is None else
            _FILE_POSITIONS.get(named, lambda: _positions_of(read_file(path) or ())))
    return positions


def _positions_of(file_lines: Sequence[str]) -> dict[str, list[int]]:
    """``_line_positions`` of a file's lines. Shared once remembered: read, not changed."""
    positions: dict[str, list[int]] = {}
    for number, line in enumerate(file_lines, start=1):
        if line.strip():
            positions.setdefault(line.rstrip(), []).append(number)
    return positions


def _locate(printed: Sequence[str], path: str, read_file: FileReader,
            located: LocatedLines, bridge: bool = True) -> list[int]:
    """The file lines ``printed`` shows, found in order (a line found nowhere after the
    one before it is looked for from the top: a grep's hits are in order anyway). Printed
    lines found nowhere between two found ones were changed since: the file's lines
    between those two stand for them (``CHANGED_RUN_GROWTH_MAX``) when ``bridge``: not
    for an output the harness cut (its markup is no printed line) or several files'."""
    positions = _line_positions(path, read_file, located)
    file_lines = read_file(path) or []
    found: list[int] = []
    cursor = 0
    last_found: tuple[int, int] | None = None  # (index printed, line number) of the last found
    missed = False  # a printed line since it was found nowhere
    for index, line in enumerate(printed):
        line = _unnumbered(line)  # an nl listing's line: its text after the number
        if not line.strip():
            continue
        candidates = positions.get(line.rstrip())
        if not candidates:
            missed = True
            continue
        at = bisect.bisect_right(candidates, cursor)
        number = candidates[at] if at < len(candidates) else candidates[0]
        if bridge and missed and last_found is not None and 0 < number - last_found[1] <= (
                CHANGED_RUN_GROWTH_MAX * (index - last_found[0])):
            found.extend(n for n in range(last_found[1] + 1, number)
                         if file_lines[n - 1].strip())
        found.append(number)
        cursor, last_found, missed = number, (index, number), False
    return found


def _renumbered(printed: Sequence[tuple[int, str]], path: str, read_file: FileReader,
                located: LocatedLines) -> list[int]:
    """The file lines a numbered printout (``nl``, ``cat -n``, ``grep -n``) shows, where
    they are now: a line whose text moved (an edit above it inserted or removed lines) is
    found at its nearest place (``_confirmed_move``), and the lines after it move with it;
    a line that reads otherwise now keeps its number, moved as its neighbours were."""
    file_lines = read_file(path) or []

    def reads(number: int, text: str) -> bool:
        return 1 <= number <= len(file_lines) and file_lines[number - 1].rstrip() == text

    texts = [(number, text.rstrip()) for number, text in printed]
    # no move farther than the printout's own span (a twin of an edited block elsewhere in
    # the file is no move); a line alone moves to the one line that reads as it did
    reach = texts[-1][0] - texts[0][0] + 1 if len(texts) > 1 else None
    numbers = []
    shift = 0
    for index, (number, text) in enumerate(texts):
        expected = number + shift
        if text.strip() and not reads(expected, text):
            neighbours = _neighbours(texts, index)
            if shift and reads(number, text) and (
                    neighbours[1] is None or reads(*neighbours[1])):
                expected, shift = number, 0  # back in place with the line after it
            else:
                candidates = _line_positions(path, read_file, located).get(text)
                moved = (_confirmed_move(candidates, expected, number, neighbours, reads,
                                         reach) if candidates else None)
                if moved is not None:
                    expected, shift = moved, moved - number
        numbers.append(expected)
    return numbers


def _neighbours(lines: Sequence[tuple[int, str]],
                index: int) -> tuple[tuple[int, str] | None, tuple[int, str] | None]:
    """The non-blank lines before and after ``lines[index]`` (number, text), or None."""
    before = next((line for line in reversed(lines[:index]) if line[1].strip()), None)
    after = next((line for line in lines[index + 1:] if line[1].strip()), None)
    return before, after


def _confirmed_move(candidates: Sequence[int], expected: int, number: int,
                    neighbours: tuple[tuple[int, str] | None, tuple[int, str] | None],
                    reads: Callable[[int, str], bool], reach: int | None = None) -> int | None:
    """Where a line that was at ``number`` (looked for at ``expected``) went, or None.
    None when the line after it (else the one before: ``neighbours``, old number and
    text) still reads the same where it was looked for: the line was changed in place.
    Else the nearest of ``candidates`` (the file's lines reading its text, at most
    ``reach`` away) when a neighbour reads the same at that shift, or, with none, when it
    is the file's only such line. A repeated line (``pass``, ``# TODO``), or a line an
    edit removed whose text stands elsewhere too, proves no move on its own."""
    before, after = neighbours
    beside = after or before
    if beside is not None and reads(beside[0] + expected - number, beside[1]):
        return None
    near = [n for n in candidates if reach is None or abs(n - expected) <= reach]
    if not near:
        return None
    now = min(near, key=lambda n: (abs(n - expected), n))
    if any(line is not None and reads(line[0] + now - number, line[1])
           for line in (before, after)):
        return now
    return now if beside is None and len(candidates) == 1 else None


def _repository_path(word: str, cwd: str, workdir: str) -> str | None:
    """A command's word as a path relative to the repository root, or None. ``cwd`` is
    as the anchors read it: relative to ``/testbed``, or absolute outside it."""
    if any(ch in word for ch in "*?[]{}$`"):
        return None
    root = workdir.rstrip("/") or "/"
    if cwd.startswith("/"):
        base = cwd
    else:
        base = posixpath.join(root, cwd)
    absolute = posixpath.normpath(posixpath.join(base, word))
    if not absolute.startswith(root + "/"):
        return None
    return absolute[len(root) + 1:]


def _numbered_lines(output: str) -> list[tuple[int, str]]:
    """(number, text) of each numbered line an ``nl`` or ``cat -n`` printed (after the
    stream's own number a ``grep -n`` over it put first)."""
    numbered = []
    for line in text_lines(output):
        line = _GREP_STREAM_NUMBER.sub("", line, count=1)
        match = _NUMBERED.match(line)
        if match:
            numbered.append((int(match.group(1)), line[match.end():]))
    return numbered


def _grep_lines(output: str, files: list[str], command: ShellCommand, workdir: str,
                read_file: FileReader, located: LocatedLines,
                shared: bool = False) -> dict[str, list[int]]:
    """The file lines a grep printed: ``path:N:text``, ``N:text`` (one file; where they are
    now, ``_renumbered``), ``path:text`` (found in that file), or bare text (one file;
    found in it, in order, a group of context lines as a run). Numbers only with ``-n``
    (a line of a log that starts ``2024:`` is text); nothing of a grep that prints other
    than whole lines (``-c``, ``-l``, ``-o``). ``shared``: other commands printed into the
    same output, so a line without its file's name is taken only where its number reads
    as printed, and a bare one not at all."""
    options = _grep_options(command)
    if options is None or not options.lines:
        return {}
    cwd = command.cwd
    found: dict[str, list[int]] = {}
    numbered: dict[str, list[tuple[int, str]]] = {}
    unnumbered: dict[str, list[str]] = {}
    single = files[0] if len(files) == 1 else None
    for line in text_lines(output):
        if options.separator is not None and line == options.separator:
            continue
        match = _GREP_NUMBERED.match(line) if options.numbered else None
        if match and match["path"] and single is not None \
                and _repository_path(match["path"], cwd, workdir) != single:
            # one file's grep names it only with -H: ``2:2024-02-01 …`` is its line 2,
            # not a file ``2``'s line 2024
            match = _GREP_LINE_NUMBERED.match(line)
        if match:
            named = match.groupdict().get("path")  # (none in a one-file grep's match)
            path = (_repository_path(named, cwd, workdir) if named else single)
            text = line[match.end():]
            if path is not None and (file_lines := read_file(path)) is not None and (
                    named or not shared or _reads_at(file_lines, int(match["line"]), text)):
                numbered.setdefault(path, []).append((int(match["line"]), text))
            continue
        path, text = (None if shared else single), line
        head, colon, rest = line.partition(":")
        if colon and ("/" in head or head.endswith(".py")):
            named = _repository_path(head, cwd, workdir)
            if named is not None and read_file(named) is not None:
                path, text = named, rest
        if path is not None:
            unnumbered.setdefault(path, []).append(text)
    for path, texts in unnumbered.items():  # in order: a repeated line is the next one
        found.setdefault(path, []).extend(_locate(texts, path, read_file, located,
                                                  bridge=False))
    for path, printed in numbered.items():
        found.setdefault(path, []).extend(_renumbered(printed, path, read_file, located))
    return found


def _segments(printed: Sequence[str], order: Sequence[str], read_file: FileReader,
              located: LocatedLines) -> dict[str, list[str]]:
    """One output of several files' lines (``head a.py; head b.py``, ``cat a.py b.py``),
    the files in the order their commands printed them: each file's printed lines. A line
    is the current file's while that file holds its text; one it does not hold but a later
    file does starts that file's; one no file holds (changed since) is no one's."""
    positions = [_line_positions(path, read_file, located) for path in order]
    segments: dict[str, list[str]] = {path: [] for path in order}
    at = 0
    for line in printed:
        text = _unnumbered(line).rstrip()
        if not text.strip():
            continue
        if text not in positions[at]:
            later = next((k for k in range(at + 1, len(order)) if text in positions[k]), None)
            if later is None:
                continue
            at = later
        segments[order[at]].append(line)
    return segments


def _unnumbered(line: str) -> str:
    """A printed line's text, an ``nl`` listing's number taken off."""
    numbered = _NUMBERED.match(line)
    return line[numbered.end():] if numbered else line


def _reads_at(file_lines: Sequence[str], number: int, text: str) -> bool:
    return 1 <= number <= len(file_lines) and file_lines[number - 1].rstrip() == text.rstrip()


def _cut_ends_dropped(shown: str) -> str:
    """A cut output as the harness showed it, without the two lines its cut went through:
    the head's last and the tail's first (mini-swe-agent cuts by characters, so the tail
    can begin inside a line's number: ``247\t`` of ``  1247\t``)."""
    return _CUT_THROUGH.sub("", shown)


def _mentions(command: str | None, path: str) -> bool:
    """The command names the file: its path (``/testbed/pkg/mod.py`` names ``pkg/mod.py``),
    or its name as a whole word (``cd pkg && cat mod.py``; ``test_mod.py`` does not name
    ``mod.py``, nor a file at the root's)."""
    if not command:
        return False
    return ("/" in path and path in command) \
        or _whole_word(posixpath.basename(path)).search(command) is not None


@functools.lru_cache(maxsize=NAME_PATTERNS_CACHED)
def _whole_word(name: str) -> re.Pattern[str]:
    """``name`` as a whole word: no word character, dot or dash before it, no word
    character or dash after it (a sentence's full stop may follow)."""
    return re.compile(r"(?<![\w.-])" + re.escape(name) + r"(?![\w-])")


# --------------------------------------------------------------------------- window

def build_window(steps: Sequence[LoopStep], read_file: FileReader,
                 rules: LoopRules = DEFAULT_RULES, workdir: str = DEFAULT_WORKDIR,
                 settled: SettledParts | None = None,
                 prompt_names: frozenset[str] = frozenset(),
                 fits: Callable[[LoopWindow], bool] | None = None) -> LoopWindow:
    """The window after ``steps`` (oldest first), reading files through ``read_file``
    (repository-relative path -> its lines now, or None); the agent's commands run in
    ``workdir``, the repository's root. ``settled``: what the previous decision's window
    of this run showed (kept while the fold horizon stays where it was; a fold that would
    not pay waits, ``paying_folds``, which needs it; what its ceiling's ladder folded is
    folded first here when over the ceiling, ``sticky_ladder``). ``prompt_names``: the names the
    harness's prompt shows (``prompt_names``), which no pointer lists. ``fits``: whether
    a window fits the token ceiling as built; a fold waits only for a window that does
    (else the ceiling's ladder would fold it anyway, and cruder)."""
    done = len(steps)
    previous = settled if (rules.settled and settled is not None and settled.done == done - 1
                           and settled.history == history_digests(steps[:settled.done])
                           ) else None
    window = _window_after(steps, read_file, rules, workdir, previous, prompt_names, fits)
    if previous is not None and rules.sticky_ladder:
        window.ladder_folded_before = previous.ladder_folded
    window.ladder_largest_first = rules.largest_first
    return window


def _window_after(steps: Sequence[LoopStep], read_file: FileReader, rules: LoopRules,
                  workdir: str, previous: SettledParts | None, prompt_names: frozenset[str],
                  fits: Callable[[LoopWindow], bool] | None) -> LoopWindow:
    """``build_window``'s window, ``previous`` the previous window of the run when this
    one continues its history."""
    done = len(steps)
    horizon = fold_horizon(done, rules)
    if previous is not None and previous.horizon == horizon:
        return _assemble(steps, read_file, rules, workdir, horizon, previous.parts,
                         prompt_names)
    folded = _assemble(steps, read_file, rules, workdir, horizon, {}, prompt_names)
    # (a horizon behind the previous one: that window was built by other rules)
    if previous is None or not rules.paying_folds or previous.horizon > horizon:
        return folded
    waiting = _assemble(steps, read_file, rules, workdir, previous.horizon, previous.parts,
                        prompt_names)
    if fold_pays(waiting, folded, done) or (fits is not None and not fits(waiting)):
        return folded
    waiting.fold_waited = True
    return waiting


def fold_pays(waiting: LoopWindow, folded: LoopWindow, done: int) -> bool:
    """Whether folding at this stride pays, judged when the window is built: a fold
    re-sends every part of the window from the first one it changes at the full price
    where a prompt cache served it at ``CACHED_PRICE_RATIO`` of it, and saves what it
    shrinks the window by at that cached price at every later step. How many steps a run
    has left is not known; one that has made ``done`` steps is taken, as a guess, to go on
    as long again, so a fold waits while its re-send's extra cost is more than ``done``
    steps of its shrink at the cached price (the newest step's parts are new in both
    windows, so not counted; in characters). A fold that waits is judged again at the
    next step, its re-send then no smaller. One that changes nothing before the newest
    step does not wait."""
    shrunk = len(waiting.text()) - len(folded.text())
    pairs = zip(waiting.parts, folded.parts, strict=False)
    first = next((at for at, (kept, changed) in enumerate(pairs)
                  if (kept.item_no, kept.text) != (changed.item_no, changed.text)),
                 min(len(waiting.parts), len(folded.parts)))
    resent = sum(len(part.text) for part in folded.parts[first:] if part.step < done)
    # shrunk x ratio x done >= resent x (1 - ratio), in a form exact at the edge
    return shrunk * done >= resent * RESENT_PER_CACHED_SHRINK  # (a window that grows waits)


def _assemble(steps: Sequence[LoopStep], read_file: FileReader, rules: LoopRules,
              workdir: str, horizon: int, kept: dict[int, SettledPart],
              prompt_names: frozenset[str]) -> LoopWindow:
    """The window after ``steps`` with the outputs up to ``horizon`` folded, ``kept``:
    the folded parts and notes the previous window showed, when its horizon was this."""
    done = len(steps)
    window = LoopWindow(decision_type=decision_type_of(steps, workdir), horizon=horizon)
    # the notes of changed lines the window shows, oldest first: what a reader holds
    notes = [kept[n].text for n in sorted(kept)
             if step_of_item(n)[1] == TREE_PART and kept[n].rendering == SHOWN_LINES]
    changed: list[str] = []  # lines views show that the newest step's command changed
    shown: dict[str, set[int]] = {}  # lines of each file an earlier kept view shows
    fresh_lines = _FreshLines()  # what the earlier fresh outputs show
    located: LocatedLines = {}  # each file's line positions, for the views that find lines in it
    naming: dict[str, list[int]] = {}  # the steps up to the horizon that named each file
    names_shown = _NamesShown(prompt_names, window.parts)  # what a long view's tail needs
    names_by_action = (names_first_shown_by_action(steps, prompt_names) if rules.pointer_names
                       else None)
    first_names = [_flattened(by_action) for by_action in names_by_action] \
        if names_by_action else None
    for number, step in enumerate(steps, start=1):
        turn_no, output_no, _thought_no = item_numbers(number)
        window.parts.append(_turn_part(turn_no, number, step, rules, horizon))
        kind = observation_kind(step)
        if number > horizon:
            early = (_early_listing(output_no, number, kind, step)
                     if rules.listings and rules.early_listings
                     and number <= done - rules.fresh_outputs else None)
            if early is not None:
                window.parts.append(early)
            else:
                window.parts.append(_fresh_part(output_no, number, kind, step, rules,
                                                fresh_lines))
            note = (kept.get(tree_change_item(number)) if number < done
                    else _tree_change_note(number, changed) if changed else None)
            if note is not None:
                window.parts.append(LoopPart(
                    tree_change_item(number), number, FILE_VIEW, note.content or note.text,
                    note.text, note.rendering, TREE_CHANGE_RULE
                    if note.rendering == SHOWN_LINES else SETTLED_RULE, command=step.command,
                    path=first_file_named(note.text)))
            continue
        part = None
        views = _viewed_lines_once(step, read_file, workdir, located) if rules.views else None
        if views:
            in_play = {path: lines for path, lines in views.items()
                       if _in_play(_steps_naming(steps, path, horizon, rules, naming),
                                   number, horizon, rules)}
            if in_play:
                part = _view_part(output_no, number, step, in_play, read_file, shown,
                                  rules.view_lines_max, rules.view_lines_whole, names_shown,
                                  workdir if rules.chosen_ranges else None)
                resting = [path for path in views if path not in in_play]
                if resting and rules.pointer_paths:  # their lines go; their names stay
                    part.text = (part.text[:-1] + f"[E{output_no} also printed: "
                                 f"{' '.join(resting[:POINTER_PATHS_MAX])}]\n\n")
                others = _beside_the_view(output_no, number, step, read_file, workdir,
                                          rules, names_by_action[number - 1]
                                          if names_by_action else ())
                if others:  # after the view's lines, before the part's closing blank line
                    part.text = part.text[:-1] + "".join(text for text, _ in others)
                    part.label = masked_label(FILE_VIEW, "".join(
                        action.output for action in _viewing_actions(step))) + "".join(
                        f"; {label}" for _, label in others)
        if part is None and rules.listings:
            part = _listing_part(output_no, number, kind, step)
        if part is None:
            part = _pointer_part(output_no, number, kind, step,
                                 read_file if rules.pointer_paths else None, workdir,
                                 first_names[number - 1] if first_names else (),
                                 deleted_since(step, read_file, workdir) if rules.views else ())
            if views:  # a view of files no step named lately: `ctxdb why` says so
                part.rule = OUT_OF_PLAY_RULE
                part.why = ", ".join(_out_of_play_why(
                    path, _steps_naming(steps, path, horizon, rules, naming), number, horizon,
                    rules) for path in views)
        window.parts.append(_settle(part, kept, notes, changed, read_file,
                                    rules.moved_run_summarized_min))
    if rules.last_thought and steps and steps[-1].thought.strip():
        # the newest reasoning goes last: the next window drops it without changing a
        # byte before it (a prompt cache keeps serving everything up to the output)
        _, _, thought_no = item_numbers(done)
        thought = steps[-1].thought.strip()
        window.parts.append(LoopPart(thought_no, done, AGENT_TURN, thought,
                                     f"[step {done}, your reasoning]\n{thought}\n\n",
                                     SHOWN_WHOLE, LAST_THOUGHT_RULE))
    return window


def _fresh_part(item_no: int, step_no: int, kind: str, step: LoopStep, rules: LoopRules,
                fresh_lines: _FreshLines) -> LoopPart:
    """A fresh output, as the harness sent it (``output_as_shown``; its lines an earlier
    fresh output shows elided: ``repeats``)."""
    shown = output_as_shown(item_no, step)
    text, rendering, rule = shown, SHOWN_WHOLE, "fresh"
    if step.kept != step.shown:
        rendering, rule = SHOWN_CUT, "fresh, as the harness cut it"
    if rules.repeats:
        text = _without_repeats(shown, step_no, fresh_lines)
        if text != shown:
            rendering, rule = SHOWN_CUT, "fresh, lines an earlier output shows elided"
    return LoopPart(item_no, step_no, kind, step.kept, _block(with_outcome(text, step)),
                    rendering, rule, command=step.command, label=pointer_label(step, kind))


def output_as_shown(item_no: int, step: LoopStep) -> str:
    """A step's output as the window shows it fresh: as the harness sent it; of a turn of
    several actions, each action's under a line naming it (``[E10 from `pytest -q`]``),
    with what a bare one leaves unsaid (``with_outcome``), so each is read beside its
    command."""
    if not step.actions:
        return step.shown
    return "\n".join(f"[E{item_no} from {_quoted_command(action)}]\n"
                     + with_outcome(action.shown, action).rstrip("\n")
                     for action in step.actions) + "\n"


def with_outcome(text: str, step: LoopStep) -> str:
    """A step's output as shown (``text``), then what a bare output leaves unsaid: that
    it was empty, that it timed out, a non-zero exit code (``grep`` finding nothing, a
    failed assertion that printed nothing). Only where the harness gave no observation of
    its own (its markup says them: mini-swe-agent's ``<returncode>``), for one command's
    output."""
    if step.observation is not None or (step.command is None and not step.has_call) \
            or step.actions:
        return text
    body = text.rstrip()
    if step.kind == ObservationKind.TIMEOUT:
        said = FRESH_TIMED_OUT
    else:
        said = ("" if body else FRESH_NO_OUTPUT) + (
            FRESH_EXIT.format(code=step.returncode) if step.returncode else "")
    return (f"{body}\n" if body else "") + said if said else text


def _early_listing(item_no: int, step_no: int, kind: str, step: LoopStep) -> LoopPart | None:
    """A listing no longer among the fresh outputs, folded to its entries before the next
    stride — when those are at most ``EARLY_LISTING_SHARE_MAX`` of what the harness showed
    (else None: it waits for the stride). Its text depends on the step alone, so it stays
    the same until the stride folds it the same way."""
    part = _listing_part(item_no, step_no, kind, step)
    if part is None or len(part.text) > EARLY_LISTING_SHARE_MAX * len(step.shown):
        return None
    part.rule = "folded listing, early: its entries"
    return part


def _settle(part: LoopPart, kept: dict[int, SettledPart], notes: Sequence[str],
            changed: list[str], read_file: FileReader, summarized_min: int) -> LoopPart:
    """``part`` as the previous window showed it, when it did (its content the same) and
    the fold horizon stayed. Between folds, what the window says of the lines its view
    shows — the view, then the notes naming it — is held against the tree: the lines that
    read otherwise now go to ``changed``."""
    settled = kept.get(part.item_no)
    if settled is not None and settled.content_sha256 == part_digest(part.content) \
            and settled.text != part.text:
        part.text, part.rendering, part.rule = settled.text, settled.rendering, SETTLED_RULE
        part.why = ""
        # the store names the part as the window shows it, not as it reads afresh: a view
        # kept while its step would fold otherwise now (its file out of play since) is
        # still a view, of the lines it shows; a pointer shows none
        part.lines = view_span(part.text) if part.rendering == SHOWN_LINES else None
        if part.rendering == SHOWN_LINES and part.kind != FILE_VIEW:
            # (the file whose lines it shows, as view_span reads them, else the first named)
            part.kind = FILE_VIEW
            part.path = next(iter(_view_lines(part.text)), None) or first_file_named(part.text)
    mark = f"[E{part.item_no} "
    mine = [note for note in notes if mark in note]
    if settled is not None or mine:
        view = part.text if part.rendering == SHOWN_LINES else ""
        changed.extend(_changed_lines(part.item_no, _believed(part.item_no, view, mine),
                                      read_file, summarized_min))
    return part


_VIEW_HEADER = re.compile(r"^\[E\d+ (?P<path>.+) lines? [\d, -]+, as the tree holds them now\]$")
_VIEW_LINE = re.compile(r"^(\d+)\t(.*)$")
# a view's file none of whose lines it shows (``_view_part``)
SHOWN_ABOVE, PAST_THE_END = "shown above", "past the file's end now"
_VIEW_SHOWN_ELSEWHERE = re.compile(r"^\[E\d+ (?P<path>.+): the lines it showed are "
                                   rf"(?:{re.escape(SHOWN_ABOVE)}|{re.escape(PAST_THE_END)})\]$")
# a note's lines (``_tree_change_note``): a file's changed lines follow its header
NOW_READS, GONE = "as it reads now", "no longer as shown above: read it again"
DELETED = "deleted since"  # GONE, where the tree holds nothing at the path any more
_NOTE_FILE = re.compile(r"^\[E(?P<item>\d+) (?P<path>.+), "
                        rf"(?P<what>{re.escape(NOW_READS)}|{re.escape(GONE)}"
                        rf"|{re.escape(DELETED)})\]$")
# an output's note of the lines an earlier output shows (``_repeat_note``)
_REPEAT_NOTE = re.compile(r"\[… \d+ lines as in the output of step (\d+) …\]")
_NOTE_MOVED = re.compile(r"^\[lines? (?P<first>\d+)(?:-(?P<last>\d+))? now reads? what "
                         r"lines? (?P<origin>\d+)(?:-\d+)? read\]$")
_NOTE_PAST_END = re.compile(r"^\[lines? (?P<first>\d+)(?:-(?P<last>\d+))?: past the file's "
                            r"end now\]$")


def leaning_on(part: LoopPart, parts: Sequence[LoopPart]) -> list[LoopPart]:
    """The shown parts whose text is true only beside ``part`` as shown, so that folding
    it folds them too: of a view, the later views that leave out lines it shows
    (``LoopPart.omitted``: a view of other lines of the file does not); of a note of
    changed lines, the views it corrects (shown without it, they would show stale lines
    as the tree's); and theirs in turn."""
    shown = [p for p in parts if p.rendering == SHOWN_LINES]
    order = {id(p): index for index, p in enumerate(parts)}
    leaning: list[LoopPart] = []
    pending = [part]
    while pending:
        folded = pending.pop()
        corrected = {int(m["item"]) for m in map(_NOTE_FILE.match, folded.text.split("\n"))
                     if m}
        lines = _view_lines(folded.text)
        for other in shown:
            if other is part or other in leaning:
                continue
            if other.item_no in corrected or (
                    order[id(other)] > order[id(folded)]
                    and any(left & lines.get(path, {}).keys() for path, left in other.omitted)):
                leaning.append(other)
                pending.append(other)
    return leaning


def repeated_steps(parts: Sequence[LoopPart]) -> set[int]:
    """The steps whose output a shown part's text stands on: it left out the lines that
    output shows (``[… N lines as in the output of step S …]``)."""
    return {int(m.group(1)) for p in parts if p.rendering != POINTER
            for m in _REPEAT_NOTE.finditer(p.text)}


def first_file_named(text: str) -> str | None:
    """The first file a view or a note of changed lines names in its headers (the store
    files the part under it, ``evidence_item.path``), even where it shows no line of it."""
    for line in text.split("\n"):
        header = (_VIEW_HEADER.match(line) or _VIEW_SHOWN_ELSEWHERE.match(line)
                  or _NOTE_FILE.match(line))
        if header:
            return header["path"]
    return None


def _view_lines(text: str) -> dict[str, dict[int, str]]:
    """A view part's lines: path -> {line number: text}. Split at newlines alone, as the
    view was joined: a line may hold a form feed or U+2028 (``text_lines``)."""
    views: dict[str, dict[int, str]] = {}
    lines: dict[int, str] | None = None
    for line in text.split("\n"):
        header = _VIEW_HEADER.match(line)
        if header:
            lines = views.setdefault(header["path"], {})
            continue
        numbered = _VIEW_LINE.match(line)
        if numbered and lines is not None:
            lines[int(numbered.group(1))] = numbered.group(2)
    return views


def view_span(text: str) -> tuple[int, int] | None:
    """The first and last line a view's text shows of its first file (window_item's
    shown lines), or None. Read from the text itself: a settled view shows the lines as
    its window first showed them, a long view only some of those it read. Every window
    asks again of each view it holds: read once."""
    return _read_once(_VIEW_SPANS, _view_span_read, _view_span_kept, text)


def _view_span_read(text: str) -> tuple[int, int] | None:
    for lines in _view_lines(text).values():
        if lines:
            return min(lines), max(lines)
    return None


def _believed(item_no: int, view: str, notes: Sequence[str]) -> dict[str, dict[int, str]]:
    """The lines of view ``item_no`` as a reader of the window holds them: the view's,
    as the notes of changed lines that name it corrected them, in order."""
    believed = _view_lines(view)
    for note in notes:
        path: str | None = None
        said: list[str] = []
        for line in [*note.split("\n"), ""]:
            header = _NOTE_FILE.match(line)
            if header or not line:
                if path is not None:
                    believed[path] = _read_note(believed.get(path, {}), said)
                path, said = None, []
            if header:
                mine = int(header["item"]) == item_no
                if mine and header["what"] in (GONE, DELETED):
                    believed.pop(header["path"], None)
                if mine and header["what"] == NOW_READS:
                    path = header["path"]
            elif path is not None:
                said.append(line)
    return {path: lines for path, lines in believed.items() if lines}


def _read_note(before: dict[int, str], said: Sequence[str]) -> dict[int, str]:
    """A file's lines as a reader who held ``before`` holds them after a note's lines of
    it (``said``): ``N<tab>text`` as given; a run that now reads what other lines did (as
    ``before`` held them), which left those lines unknown unless the note says them; a
    run past the end, by its span."""
    lines = dict(before)
    said_now: set[int] = set()  # numbers the note gave a text
    left: set[int] = set()  # numbers a run moved away from
    for line in said:
        moved = _NOTE_MOVED.match(line)
        past_end = _NOTE_PAST_END.match(line)
        span = moved or past_end
        if span is not None:
            first = int(span["first"])
            for number in range(first, int(span["last"] or first) + 1):
                origin = number - first + int(moved["origin"]) if moved else None
                if origin is not None:
                    left.add(origin)
                if origin in before:
                    lines[number] = before[origin]
                    said_now.add(number)
                else:
                    lines.pop(number, None)
            continue
        numbered = _VIEW_LINE.match(line)
        if numbered:
            lines[int(numbered.group(1))] = numbered.group(2)
            said_now.add(int(numbered.group(1)))
    for number in left - said_now:
        lines.pop(number, None)
    return lines


def _changed_lines(item_no: int, believed: dict[str, dict[int, str]], read_file: FileReader,
                   summarized_min: int) -> list[str]:
    """What a reader who holds ``believed`` of view ``item_no``'s files needs to know them
    as the tree holds them now. Each line believed is looked for where it is now (where
    the lines before it went, else at its nearest place): a run of at least
    ``summarized_min`` that moved alike is named by the lines it came from, a shorter one
    is shown at its new numbers, and what now stands between lines found (an edit's new or
    changed lines) is shown as it reads; then every line the reader would still hold
    wrong is shown as it reads now, or said to be past the end; a file gone, named."""
    notes: list[str] = []
    for path, was in believed.items():
        file_lines = read_file(path)
        if file_lines is None:
            notes.append(f"[E{item_no} {path}, {DELETED if _deleted(path, read_file) else GONE}]")
            continue
        shown = _file_changes(was, file_lines, summarized_min)
        if shown:
            notes.append(f"[E{item_no} {path}, {NOW_READS}]")
            notes.extend(shown)
    return notes


def _file_changes(was: dict[int, str], file_lines: Sequence[str],
                  summarized_min: int) -> list[str]:
    """``_changed_lines`` for one file: the note's lines."""
    if all(n <= len(file_lines) and file_lines[n - 1] == text for n, text in was.items()):
        return []  # held at every step for every view: the common case, cheaply
    positions: dict[str, list[int]] = {}
    for number, text in enumerate(file_lines, start=1):
        if text.strip():
            positions.setdefault(text, []).append(number)

    def reads(number: int, text: str) -> bool:
        return 1 <= number <= len(file_lines) and file_lines[number - 1] == text

    believed = sorted(was)
    lines = [(number, was[number]) for number in believed]
    # no move farther than the view's own span: a removed line's twin far away (a
    # repeated banner comment) is no move, and the note stays about the view's size
    reach = believed[-1] - believed[0] + 1
    found: list[tuple[int, int]] = []  # (believed number, number now), in order
    lost: list[int] = []  # believed numbers found nowhere: changed or gone
    offset = 0
    for index, number in enumerate(believed):
        expected = number + offset
        now: int | None = expected if reads(expected, was[number]) else None
        if now is None:
            neighbours = _neighbours(lines, index)
            if offset and reads(number, was[number]) and (
                    neighbours[1] is None or reads(*neighbours[1])):
                now = number  # back in place with the line after it: a wrong shift undone
            elif was[number].strip() and positions.get(was[number]):
                for looked_at in dict.fromkeys((expected, number)):  # (a wrong shift undone)
                    now = _confirmed_move(positions[was[number]], looked_at, number,
                                          neighbours, reads, reach)
                    if now is not None:
                        offset = now - number
                        break
        if now is None:
            lost.append(number)
        else:
            found.append((number, now))
    entries: list[tuple[int, int, str]] = []  # (number now, 0 a run / 1 a line, text)

    def as_now(first: int, last: int) -> None:
        entries.extend((n, 1, f"{n}\t{file_lines[n - 1]}")
                       for n in range(max(first, 1), min(last, len(file_lines)) + 1))

    # runs of lines found that moved alike (consecutive among those found)
    index = 0
    while index < len(found):
        end = index + 1
        shift = found[index][1] - found[index][0]
        while (end < len(found) and found[end][1] - found[end][0] == shift
               and bisect.bisect_left(lost, found[end][0])  # a lost line parts a run
               == bisect.bisect_left(lost, found[end - 1][0])):
            end += 1
        if shift:
            (old_first, new_first), (old_last, new_last) = found[index], found[end - 1]
            if end - index >= summarized_min:
                verb = "reads" if new_first == new_last else "read"
                entries.append((new_first, 0, f"[{_span(new_first, new_last)} now {verb} "
                                              f"what {_span(old_first, old_last)} read]"))
            else:
                for _, new in found[index:end]:
                    as_now(new, new)
        index = end
    # what now stands where lines believed were lost, or where a stretch between two lines
    # found grew (an edit's own lines): the whole stretch where the reader had seen most
    # of it, else each lost line where it would be now (a sparse view's stretch between
    # two of its lines is no line the reader saw)
    for (old_before, new_before), (old_after, new_after) in itertools.pairwise(found):
        lost_here = lost[bisect.bisect_right(lost, old_before):bisect.bisect_left(lost, old_after)]
        seen = bisect.bisect_left(believed, old_after) - bisect.bisect_right(believed, old_before)
        unseen = old_after - old_before - 1 - seen
        grew = new_after - new_before > old_after - old_before
        if (lost_here or grew) and unseen <= max(seen, 1):
            as_now(new_before + 1, new_after - 1)
        else:
            shift = new_before - old_before
            for number in lost_here:
                if new_before < number + shift < new_after:
                    as_now(number + shift, number + shift)
    # what the reader would still hold wrong after the note: as it reads now
    held = _read_note(was, [text for _, _, text in sorted(set(entries))])
    for number, text in held.items():
        if number <= len(file_lines) and file_lines[number - 1] != text:
            as_now(number, number)
    shown = [text for _, _, text in sorted(set(entries))]
    past_end = sorted(n for n in held if n > len(file_lines))  # (the patches are within it)
    if past_end:
        shown.append(f"[{_span(past_end[0], past_end[-1])}: past the file's end now]")
    return shown


def _span(first: int, last: int) -> str:
    return f"lines {first}-{last}" if first != last else f"line {first}"


def _tree_change_note(step_no: int, changed: list[str]) -> SettledPart:
    text = (f"[E{tree_change_item(step_no)} step {step_no}'s command changed lines the views "
            f"above show]\n" + "\n".join(changed) + "\n\n")
    return SettledPart(part_digest(text), SHOWN_LINES, text, text)


class _FreshLines:
    """The lines the window's earlier fresh outputs show, in order, and where each line
    stands in them: what a later fresh output's repeats are found in."""

    def __init__(self) -> None:
        self.outputs: dict[int, list[str]] = {}  # step -> the lines its output shows
        self.at: dict[str, list[tuple[int, int]]] = {}  # line -> (step, index), first first

    def add(self, step_no: int, lines: list[str]) -> None:
        self.outputs[step_no] = lines
        for index, line in enumerate(lines):
            if _repeatable(line):
                self.at.setdefault(line, []).append((step_no, index))

    def longest_run(self, lines: list[str], start: int, most: int) -> tuple[int, int]:
        """The longest run of ``lines`` from ``start``, at most ``most`` long, that one
        earlier output shows line for line, as (its length, that output's step).
        Every line of ``lines[start:start + most]`` is in an earlier output."""
        best = (0, 0)
        for step_no, index in self.at[lines[start]][:REPEAT_SOURCES_TRIED]:
            source = self.outputs[step_no]
            if len(source) - index <= best[0]:
                continue  # what is left of that output is no longer than the best
            length = 0
            while (length < most and index + length < len(source)
                   and lines[start + length] == source[index + length]):
                length += 1
            if length > best[0]:
                best = (length, step_no)
                if length == most:  # every line on that an earlier output shows
                    break
        return best


def _repeat_note(lines: int, step_no: int) -> str:
    return f"[… {lines} lines as in the output of step {step_no} …]"  # (never one line)


# a run whose text is shorter than this is never elided (its note would be too long)
_REPEAT_RUN_MIN_CHARS = len(_repeat_note(REPEAT_RUN_MIN_LINES, 1)) / REPEAT_NOTE_MAX_SHARE


def _without_repeats(text: str, step_no: int, fresh: _FreshLines) -> str:
    """``text`` with each run of ``REPEAT_RUN_MIN_LINES`` or more lines after its first
    that an earlier fresh output of the window shows, in the same order, replaced by a note
    naming that output where the note is at most ``REPEAT_NOTE_MAX_SHARE`` of the run;
    records the lines it shows for the outputs after it."""
    lines = text.splitlines()
    # from each line on, how many lines in a row some earlier output shows, and the
    # characters of the lines before each: a run is looked for only where it could pay
    shown_from = [0] * (len(lines) + 1)
    for index in range(len(lines) - 1, -1, -1):
        line = lines[index]
        if _repeatable(line) and line in fresh.at:
            shown_from[index] = shown_from[index + 1] + 1
    chars_before = [0]
    for line in lines:
        chars_before.append(chars_before[-1] + len(line) + 1)
    # the first line stays: a harness puts its status there (mini-swe-agent's return code)
    kept: list[str] = lines[:1]
    index = len(kept)
    while index < len(lines):
        most = shown_from[index]
        if most >= REPEAT_RUN_MIN_LINES and \
                chars_before[index + most] - chars_before[index] >= _REPEAT_RUN_MIN_CHARS:
            length, source = fresh.longest_run(lines, index, most)
            note = _repeat_note(length, source)
            if length >= REPEAT_RUN_MIN_LINES and len(note) <= REPEAT_NOTE_MAX_SHARE * (
                    chars_before[index + length] - chars_before[index]):
                kept.append(note)
                index += length
                continue
        kept.append(lines[index])
        index += 1
    fresh.add(step_no, kept)
    return "\n".join(kept) if len(kept) != len(lines) else text


def _repeatable(line: str) -> bool:
    return len(line.strip()) >= REPEAT_LINE_MIN_CHARS


def _block(body: str) -> str:
    return f"{body.rstrip()}\n\n"


def turn_content(step: LoopStep) -> str:
    """A step's command part as the store keeps it: the reasoning, then the command (the
    tool call, for a tool that is no shell)."""
    command = turn_said(step)
    return step.thought + "\n" + command if step.thought else command


def turn_said(step: LoopStep) -> str:
    """What the window shows of a turn after its ``$``: the command, or the tool call
    (which has no ``$``: ``LoopStep.has_call``)."""
    if step.has_call:
        return step.said
    return step.command if step.command is not None else NO_COMMAND


def _turn_part(item_no: int, step_no: int, step: LoopStep, rules: LoopRules,
               horizon: int) -> LoopPart:
    command = turn_said(step)
    text, rendering, rule = command, SHOWN_WHOLE, "command"
    if len(command) > COMMAND_SHOWN_MAX_CHARS:
        text = (command[:COMMAND_SHOWN_MAX_CHARS]
                + f"\n[E{item_no} cut at {COMMAND_SHOWN_MAX_CHARS} characters of {len(command)}]")
        rendering, rule = SHOWN_CUT, "command over COMMAND_SHOWN_MAX_CHARS"
    called = step.has_call
    said = text if called else f"$ {text}"
    shown = f"[step {step_no}] {said}\n"
    if rules.thoughts and step_no > horizon and step.thought.strip():
        shown = f"[step {step_no}] {step.thought.strip()}\n{said}\n"
    return LoopPart(item_no, step_no, AGENT_TURN, turn_content(step), shown, rendering, rule,
                    command=step.command, label=FOLDED_CALL if called else FOLDED_COMMAND)


def _out_of_play_why(path: str, named: Sequence[int], since: int, horizon: int,
                     rules: LoopRules) -> str:
    """What ``ctxdb why`` says of a view out of play: which file, since when."""
    out = _out_of_play(named, since, horizon, rules)
    if out is None:  # in play, but the view showed none of its lines (a pointer all the same)
        return f"{path} in play"
    fold, last = out
    return f"{path} not named from step {last} to the fold at step {fold}"


def _in_play(named: Sequence[int], since: int, horizon: int, rules: LoopRules) -> bool:
    """Whether the views of a file that step ``since`` printed stay views at
    ``horizon``: a step named the file within ``file_in_play_steps`` steps of it — and
    (``out_of_play_sticks``) of every stride's horizon since step ``since`` (its fold
    made or waited: the rule reads the history alone), so a view that
    went out of play stays out when a later step names its file (the agent reads it
    again, and the window's middle does not change back). ``named``: the steps up to the
    horizon that named the file, in order; ``since`` is a folded step (at most
    ``horizon``)."""
    return _out_of_play(named, since, horizon, rules) is None


def _out_of_play(named: Sequence[int], since: int, horizon: int,
                 rules: LoopRules) -> tuple[int, int] | None:
    """(the fold horizon at which the views went out of play, the last step before it
    that named the file; 0 for none), or None while they are in play (``_in_play``)."""
    if not rules.out_of_play_sticks:
        last = max(named, default=0)
        return (horizon, last) if horizon - last > rules.file_in_play_steps else None
    stride = rules.fold_stride if rules.strided else 1
    first = -(-since // stride) * stride  # the first fold horizon that folded the view
    at = 0
    last = 0
    for fold in range(first, horizon + 1, stride):
        while at < len(named) and named[at] <= fold:
            last = named[at]
            at += 1
        if fold - last > rules.file_in_play_steps:
            return fold, last
    return None


def _steps_naming(steps: Sequence[LoopStep], path: str, horizon: int, rules: LoopRules,
                  known: dict[str, list[int]]) -> list[int]:
    """The steps up to ``horizon`` that named ``path`` (``_names_file``), each file's
    found once a window (``known``)."""
    named = known.get(path)
    if named is None:
        named = known[path] = [number for number, step in enumerate(steps[:horizon], start=1)
                               if _names_file(step, path, rules)]
    return named


def _names_file(step: LoopStep, path: str, rules: LoopRules) -> bool:
    """The step's command names the file (``_mentions``), or (``reasoning_in_play``) its
    reasoning names the file's path: an agent that says why it goes back to a file it
    read edits from what it read there. A bare file name in prose (``__init__.py``)
    does not count for a file in a directory; a longer path that ends in the file's
    (``/testbed/pkg/mod.py``, also ``tests/pkg/mod.py``) does, as in a command."""
    return _names_path(step.command, step.thought if rules.reasoning_in_play else "", path)


@lru_cache(maxsize=NAMINGS_CACHED)
def _names_path(command: str | None, thought: str, path: str) -> bool:
    """``_names_file`` of a step's command and reasoning, answered once: every window of
    a run asks again of every step up to its horizon."""
    if _mentions(command, path):
        return True
    return bool(thought) and _whole_word(path).search(thought) is not None


class _NamesShown:
    """The names the harness's prompt and a window's parts so far show, read from the parts
    only when a long view asks (``_view_part``), each part once."""

    def __init__(self, prompt_names: frozenset[str], parts: list[LoopPart]) -> None:
        self.names = set(prompt_names)
        self.parts = parts
        self.read = 0

    def now(self) -> set[str]:
        for part in self.parts[self.read:]:
            self.names.update(_names(part.text))
        self.read = len(self.parts)
        return self.names


def _view_part(item_no: int, step_no: int, step: LoopStep, views: dict[str, list[int]],
               read_file: FileReader, shown: dict[str, set[int]], lines_max: int,
               lines_whole: int, names_shown: _NamesShown,
               chosen_in: str | None = None) -> LoopPart:
    """A step's folded view: per file, the lines no earlier kept view shows, a long one's
    tail cut (``_with_something_new``) unless the agent chose its lines by number
    (*chosen ranges*, read from the step run in ``chosen_in``, the workdir; None: the
    rule off) — asked only of a long view, since every window builds every view."""
    blocks = []
    chosen: frozenset[str] | None = None  # read once, at the step's first long view
    first_path, span = None, None
    shown_before: list[str] = []  # this view's earlier files' lines, for a later long tail
    omitted: list[tuple[str, frozenset[int]]] = []
    for path, numbers in views.items():
        lines = read_file(path) or []
        seen = shown.setdefault(path, set())
        if seen.intersection(numbers):
            omitted.append((path, frozenset(seen.intersection(numbers))))
        unseen = [n for n in numbers if 1 <= n <= len(lines) and n not in seen][:lines_max]
        if not any(lines[n - 1].strip() for n in unseen) and any(n in seen for n in numbers):
            unseen = []  # blank lines alone, the rest shown above: bare numbers say nothing
        if len(unseen) > lines_whole and chosen is None:
            chosen = (frozenset() if chosen_in is None
                      else _chosen_range_files(step, chosen_in))
        if len(unseen) > lines_whole and path not in (chosen or ()):
            names = names_shown.now()
            for line in shown_before:
                names.update(_names(line))
            new = _with_something_new(unseen, lines, lines_whole, names)
        else:
            new = list[int | None](unseen)
        numbered = [n for n in new if n is not None]
        seen.update(numbered)  # a line left out here is shown by a later view of it
        shown_before.extend(lines[n - 1] for n in numbered)
        if not new:
            gone = all(n > len(lines) for n in numbers)
            blocks.append(f"[E{item_no} {path}: the lines it showed are "
                          f"{PAST_THE_END if gone else SHOWN_ABOVE}]")
            continue
        # the span, not each run: every line is numbered below, and a view located by its
        # text breaks at each blank line (run lists were 1.1 M of the development windows);
        # the view's, so a tail left out is seen to be (its first lines are always shown)
        first, last = unseen[0], unseen[-1]
        body = "\n".join(f"{n}\t{lines[n - 1]}" if n is not None else ELIDED_LINES
                         for n in new)
        blocks.append(f"[E{item_no} {path} {_span(first, last)}, as the tree holds them now]\n"
                      + body)
        if first_path is None:
            first_path, span = path, (first, last)
    # (a view all of whose lines are shown above is still of its files: the store names it)
    return LoopPart(item_no, step_no, FILE_VIEW, step.kept, "\n".join(blocks) + "\n\n",
                    SHOWN_LINES, "folded file view", command=step.command,
                    path=first_path if first_path is not None else next(iter(views), None),
                    lines=span, label=masked_label(FILE_VIEW, step.output),
                    omitted=tuple(omitted))


def _with_something_new(numbers: Sequence[int], lines: Sequence[str], lines_whole: int,
                        names: set[str]) -> list[int | None]:
    """A long view's line numbers: the first ``lines_whole``, then only the definitions and
    the lines holding a name ``names`` (what the window showed before the view) and the
    lines kept so far lack; None for each run of lines left out."""
    kept: list[int | None] = list(numbers[:lines_whole])
    for number in numbers[:lines_whole]:
        names.update(_names(lines[number - 1]))  # a file's lines come back every decision
    for number in numbers[lines_whole:]:
        line_names = set(_names(lines[number - 1]))
        if _DEFINITION.match(lines[number - 1]) or not line_names <= names:
            kept.append(number)
            names.update(line_names)
        elif kept[-1] is not None:
            kept.append(None)
    return kept


# a path-like run of an output: a bounded run of path characters, split at anything else
# (a regular expression that backtracked over a 10 MB run of letters took hours)
_PATH_RUN = re.compile(rf"[\w./-]{{1,{PATH_CHARS_MAX}}}")
_HAS_EXTENSION = re.compile(r"[^/]\.\w+$")


def named_paths(output: str, read_file: FileReader, workdir: str = DEFAULT_WORKDIR) -> list[str]:
    """The repository files an output names (``path``, ``./path``, ``WORKDIR/path``,
    ``path:12:``), each once, at most ``POINTER_PATHS_MAX``."""
    found: list[str] = []
    for path in _path_like(output, workdir):
        if read_file(path) is not None:
            found.append(path)
            if len(found) == POINTER_PATHS_MAX:
                break
    return found


def _path_like(output: str, workdir: str) -> tuple[str, ...]:
    """The runs of an output that read as a file in a directory, each once, in order:
    found once per output (every window's pointers ask again; a long output remembered by
    its digest, as ``_names``)."""
    return _read_once(_LONG_OUTPUT_PATHS, _path_like_read, _path_like_kept, output, workdir)


def _path_like_read(output: str, workdir: str) -> tuple[str, ...]:
    root = workdir.rstrip("/") + "/"
    runs = (match.group(0) for match in _PATH_RUN.finditer(output.replace(root, "")))
    stripped = (re.sub(r"^(?:\./)+", "", run) for run in runs)
    return tuple(dict.fromkeys(path for path in stripped
                               if "/" in path and _HAS_EXTENSION.search(path)))


_path_like_kept = functools.lru_cache(maxsize=DIGESTS_CACHED)(_path_like_read)


def listing_entries(step: LoopStep) -> list[tuple[str, list[str]]] | None:
    """What a listing command (``ls``, ``find``, ``tree``, filtered by ``grep``/``head``…)
    listed, by directory as its output heads them (``""``: the listing's own), each entry
    as printed (``ls -l``'s name alone, a directory's ``/`` kept); None for any other
    command (one that wrote, ran code, or printed files)."""
    commands = _commands_with_output(step)
    if commands is None:
        return None
    if not any(c.name in _LISTERS for c in commands) or not all(map(_only_lists, commands)):
        return None
    groups: list[tuple[str, list[str]]] = [("", [])]
    after_blank = True  # ``ls -R`` heads a directory first or after a blank line
    for line in step.output.splitlines():
        line = line.rstrip()
        if not line:
            after_blank = True
            continue
        if line.startswith(("total ", "ls: ", "find: ", "tree: ")) or _TREE_SUMMARY.match(line):
            continue  # (an error before a header leaves the header first in its group)
        starts_group, after_blank = after_blank, False
        header = _LISTING_HEADER.match(line)
        # a name ending in ":" inside a group is an entry; a directory's name may hold
        # spaces, so a header is told by where it stands
        if header and (starts_group or " " not in header.group("dir")):
            groups.append((header.group("dir"), []))
            continue
        long = _LONG_LISTING.match(line)
        if long:
            name = long.group("name").split(" -> ", 1)[0]
            if long.group("mode").startswith("d") and not name.endswith("/"):
                name += "/"
        else:
            name = _TREE_BRANCH.sub("", line, count=1).split(" -> ", 1)[0]
        if name and name not in (".", "..", "./", "../"):
            groups[-1][1].append(name)
    return [(directory, names) for directory, names in groups if directory or names]


def _only_lists(command: ShellCommand) -> bool:
    """The command lists or filters a listing: writes nothing, runs nothing else (no
    command substitution), reads no file of its own."""
    words = command.words[1:]
    if (command.name not in _LISTERS | _LISTING_FILTERS
            or any(target != "/dev/null" for target in command.output_files())
            or any("$(" in word or "`" in word for word in command.words)
            or any(_WRITING_OPTIONS.match(word) for word in words)):
        return False
    if command.name == "find":
        return not _FIND_ACTIONS.intersection(words)
    operands = [word for word in words if not word.startswith("-") and not word.isdigit()]
    if command.name in _GREP_COMMANDS:  # the pattern alone: no file, no recursion
        recursive = any(w.startswith("--recursive") or w.startswith("--dereference-recursive")
                        or (w.startswith("-") and not w.startswith("--")
                            and ("r" in w or "R" in w)) for w in words)
        return len(operands) <= 1 and not recursive
    if command.name in ("head", "tail", "sort"):
        return not operands
    return True


def _depth(path: str) -> int:
    """How deep a listed path or a listing's header is (``.`` and ``./x`` alike)."""
    path = path.removeprefix("./").rstrip("/")
    return 0 if path in ("", ".") else path.count("/") + 1


def _listing_text(groups: list[tuple[str, list[str]]]) -> tuple[str, int]:
    """The entries, a line per directory, the shallowest directories first, at most
    ``LISTING_ENTRIES_MAX`` of them; and how many were left out."""
    # a find's paths come depth first in one group: the shallowest first (a tree's
    # names carry no path, so they keep their order)
    groups = [(directory, names if directory else sorted(names, key=_depth))
              for directory, names in groups]
    order = sorted(range(len(groups)), key=lambda i: _depth(groups[i][0]))
    room = LISTING_ENTRIES_MAX
    chosen: dict[int, list[str]] = {}
    for i in order:
        directory, names = groups[i]
        if room <= 0 and directory:
            break
        chosen[i] = names[:max(room, 0)]
        room -= len(chosen[i])
    left = sum(len(names) for _, names in groups) - sum(len(n) for n in chosen.values())
    lines = [(f"{groups[i][0]}: " if groups[i][0] else "") + "  ".join(chosen[i])
             for i in sorted(chosen)]
    return "\n".join(line.rstrip() for line in lines), left


def _lines(count: int) -> str:
    return f"{count} line{'' if count == 1 else 's'}"


def masked_label(kind: str, output: str) -> str:
    """What a pointer says it stands for: an output's kind and lines, or that it printed
    nothing (``0 lines masked`` read as if something were hidden)."""
    if not output.strip():
        return f"{kind.replace('_', ' ')}: no output"
    return f"{kind.replace('_', ' ')} masked: {_lines(len(output.splitlines()))}"


def prompt_names(messages: Sequence[dict[str, str]], task: str = "") -> frozenset[str]:
    """The names a window's prompt shows: the harness's messages and the task."""
    return frozenset(name for text in (*(m.get("content", "") for m in messages), task)
                     for name in _names(text))


T = TypeVar("T")


class _DigestMemo(Generic[T]):
    """What was read of a text, remembered by the text's digest — the text itself is not
    kept alive for it — the oldest forgotten past ``kept`` (``DIGESTS_CACHED``). A harness
    may build windows in several threads."""

    def __init__(self, kept: int = DIGESTS_CACHED) -> None:
        self._read: dict[str, T] = {}  # digest -> what was read, oldest first
        self._kept = kept
        self._lock = threading.Lock()

    def get(self, digest: str, read: Callable[[], T]) -> T:
        # (not ``in`` then ``[]``: another thread may forget it between; a None read is
        # remembered too — a text that is no listing stays none)
        value = self._read.get(digest, _NOT_READ)
        if value is _NOT_READ:
            value = read()
            self.keep(digest, value)
        return cast(T, value)

    def peek(self, digest: str) -> T | None:
        """What was read under ``digest``, or None."""
        return self._read.get(digest)

    def keep(self, digest: str, value: T) -> None:
        with self._lock:
            if digest not in self._read and len(self._read) >= self._kept:
                self._read.pop(next(iter(self._read)), None)  # the oldest
            self._read[digest] = value


_NOT_READ = object()  # a memo's "nothing remembered" (None may be what was read)


def _read_once(memo: _DigestMemo[T], read: Callable[..., T], kept: Callable[..., T],
               text: str, *args: str) -> T:
    """``read(text, *args)``, once per text: a short text remembered by value (``kept``,
    ``read`` memoized), a long one by its digest in ``memo`` (as ``part_digest``: the text
    is not kept alive for it)."""
    if len(text) <= HASHED_TEXT_KEPT_MAX_CHARS:
        return kept(text, *args)
    return memo.get(" ".join((part_digest(text), *args)), lambda: read(text, *args))


def _names(text: str) -> tuple[str, ...]:
    """``text``'s names (``anchors.names_in``), each once, in order. A run's outputs come
    back at every decision: each is read once, a long one remembered by its digest (as
    ``part_digest``)."""
    return _read_once(_LONG_TEXT_NAMES, _names_read, _names_kept, text)


def _names_read(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names_in(text)))


_names_kept = functools.lru_cache(maxsize=DIGESTS_CACHED)(_names_read)
_view_span_kept = functools.lru_cache(maxsize=DIGESTS_CACHED)(_view_span_read)
_LONG_TEXT_NAMES: _DigestMemo[tuple[str, ...]] = _DigestMemo()
_LONG_OUTPUT_NAMES: _DigestMemo[tuple[str, ...]] = _DigestMemo()
_LONG_OUTPUT_PATHS: _DigestMemo[tuple[str, ...]] = _DigestMemo()
_FILE_POSITIONS: _DigestMemo[dict[str, list[int]]] = _DigestMemo(FILE_POSITIONS_CACHED)
_VIEWS_READ: _DigestMemo[_ViewsRead] = _DigestMemo()  # by step (``_step_digest``)
_VIEW_SPANS: _DigestMemo[tuple[int, int] | None] = _DigestMemo()


def names_first_shown(steps: Sequence[LoopStep],
                      known: frozenset[str] = frozenset()) -> list[tuple[str, ...]]:
    """Per step, the names its output was the first of the run to show
    (``names_first_shown_by_action``, a turn's actions' one after the other)."""
    return [_flattened(by_action) for by_action in names_first_shown_by_action(steps, known)]


def _flattened(by_action: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    """A step's names, its actions' one after the other (a step of one output: its own)."""
    if len(by_action) == 1:
        return by_action[0]
    return tuple(name for names in by_action for name in names)


def names_first_shown_by_action(steps: Sequence[LoopStep], known: frozenset[str] = frozenset()
                                ) -> list[tuple[tuple[str, ...], ...]]:
    """Per step, per output (a turn of several actions has one for each, any other step
    one), the names it was the first of the run to show: not in ``known``, a turn up to
    it as the window shows it, or an earlier output — at most ``POINTER_NAMES_MAX`` of
    each; none of a
    binary file's output or of the harness's own notes (a format error's boilerplate),
    nor a run of one character (a ``____`` rule, pytest's ``FFFF`` progress)."""
    seen = set(known)
    first: list[tuple[tuple[str, ...], ...]] = []
    for step in steps:
        # the turn as the window shows it (a call's shell equivalent is never seen)
        seen.update(_names(step.said if step.has_call else step.command or ""))
        outputs = [action.output for action in step.actions] or [step.output]
        if _looks_binary(step.output):
            first.append(((),) * len(outputs))  # its "names" are noise
            continue
        if _is_harness_note(step):  # shown, but the harness's boilerplate
            seen.update(_names(step.output))
            first.append(((),) * len(outputs))
            continue
        names: list[tuple[str, ...]] = []
        for output in outputs:
            new = [name for name in _output_names(output) if name not in seen
                   and len(set(name)) > 1 and any(ch.isalpha() for ch in name)]
            seen.update(new)
            names.append(tuple(new[:POINTER_NAMES_MAX]))
        first.append(tuple(names))
    return first


def _output_names(output: str) -> tuple[str, ...]:
    """An output's names (``_names``), a traceback's own words, pytest's header and an
    absolute path's directories left out: each output read once (every window asks
    again), a long one remembered by its digest."""
    return _read_once(_LONG_OUTPUT_NAMES, _framing_free_names, _framing_free_names_kept,
                      output)


def _framing_free_names(output: str) -> tuple[str, ...]:
    return _names_read(_ABSOLUTE_DIRS.sub("", _PYTEST_HEADER.sub(
        "", _without_traceback_framing(output))))


_framing_free_names_kept = functools.lru_cache(maxsize=DIGESTS_CACHED)(_framing_free_names)


def _without_traceback_framing(output: str) -> str:
    """``output`` without a traceback's own words (``_TRACEBACK_FRAMING``)."""
    if _TRACEBACK not in output:
        return output
    return _TRACEBACK_FRAMING.sub(lambda match: f"{match.group(1)} " if match.group(1)
                                  and not match.group(1).startswith('"<') else "", output)


def _looks_binary(output: str) -> bool:
    """An output of a binary file: a NUL in its first ``BINARY_SAMPLE_CHARS``, or more than
    ``BINARY_UNDECODED_SHARE`` of them bytes that did not decode (U+FFFD)."""
    sample = output[:BINARY_SAMPLE_CHARS]
    return "\x00" in sample or sample.count("\ufffd") > BINARY_UNDECODED_SHARE * len(sample)


def _listed(step: LoopStep) -> tuple[str, int] | None:
    """A listing's entries as its folded form shows them, and how many it leaves out;
    None for a step that is no listing. Every window past the step asks again: read once,
    remembered by the digest of what ``listing_entries`` reads (the commands, the kinds,
    the output)."""
    read = "\0".join([step.command or "", step.kind, step.output,
                      *(f"{action.command}\0{action.kind}" for action in step.actions)])

    def listed() -> tuple[str, int] | None:
        groups = listing_entries(step)
        return _listing_text(groups) if groups else None
    return _LISTINGS.get(_digest(read), listed)


_LISTINGS: _DigestMemo[tuple[str, int] | None] = _DigestMemo()


def _listing_part(item_no: int, step_no: int, kind: str, step: LoopStep) -> LoopPart | None:
    """A listing folded to its entries (None for a step that is no listing)."""
    listed = _listed(step)
    if listed is None:
        return None
    text, left = listed
    more = f" (and {left} more)" if left else ""
    return LoopPart(item_no, step_no, kind, step.kept,
                    f"[E{item_no} {pointer_label(step, kind)}; it listed{more}:\n{text}]\n\n",
                    POINTER, "folded listing: its entries", command=step.command)


def _beside_the_view(item_no: int, step_no: int, step: LoopStep, read_file: FileReader,
                     workdir: str, rules: LoopRules, names: Sequence[tuple[str, ...]]
                     ) -> list[tuple[str, str]]:
    """Of a turn of several actions folded to a view: the pointer of each action that did
    more than print files (a test run beside a ``grep -n``), failed to print them (a
    ``cat`` of no such file: the view holds nothing of it) or printed them as no view
    shows (several whole files at once), and what the ceiling's ladder
    keeps of it when it folds the view (its label: a failure's exit status stays).
    ``names``: the names each action's output was the first to show."""
    pointers: list[tuple[str, str]] = []
    if not step.actions:
        return pointers
    for action, first in zip(step.actions, names or [()] * len(step.actions), strict=True):
        if _viewing_commands(action) is not None and not _failed(action) \
                and _viewed_lines_once(action, read_file, workdir, {}) is not None:
            continue  # (a ``cat a.py b.py`` beside the view is no view: its pointer stays)
        kind = observation_kind(action)
        pointer = _pointer_part(item_no, step_no, kind, action,
                                read_file if rules.pointer_paths else None, workdir, first)
        ran = f"also ran {_quoted_command(action)}: "
        # ``[E7 test output masked: …]`` -> ``[E7 also ran `pytest -q`: test output masked: …]``
        pointers.append((pointer.text.replace(f"[E{item_no} ", f"[E{item_no} {ran}", 1),
                         ran + pointer_label(action, kind)))
    return pointers


def _quoted_command(step: LoopStep) -> str:
    """A command (or call) named in the window beside its output: its first line, its
    middle left out when long, so its end (a call's path) still tells two apart."""
    lines = turn_said(step).strip().splitlines() or [""]
    first = lines[0]
    if len(first) > COMMAND_NAMED_MAX_CHARS:
        half = (COMMAND_NAMED_MAX_CHARS - 1) // 2
        first = f"{first[:half]}…{first[-half:]}"
    more = " …" if len(lines) > 1 else ""
    return f"`{first}{more}`"


def _pointer_part(item_no: int, step_no: int, kind: str, step: LoopStep,
                  read_file: FileReader | None, workdir: str,
                  names: Sequence[str] = (), deleted: Sequence[str] = ()) -> LoopPart:
    """``deleted``: files the output printed that the tree no longer holds (a view of
    them can no longer be read back from it)."""
    paths = named_paths(step.output, read_file, workdir) if read_file is not None else []
    named = f"; files named: {' '.join(paths)}" if paths else ""
    if deleted:
        named += f"; deleted since: {' '.join(deleted[:POINTER_PATHS_MAX])}"
    in_paths = set(_names(named))
    names = [name for name in names if name not in in_paths]
    if names:
        named += f"; names: {', '.join(names)}"
    return LoopPart(item_no, step_no, kind, step.kept,
                    f"[E{item_no} {pointer_label(step, kind)}{named}]\n\n",
                    POINTER, "folded", command=step.command)
