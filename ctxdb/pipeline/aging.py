"""P6: which live observations are stale — one rule, read by the gate (a stale failure's
frames link nothing) and by rendering (a stale observation is omitted).

An observation is superseded by a *newer* one: it arrived later, and — when both say the
decision they arrived in and their kinds differ (one run reported as a test output and a
traceback) — in a later decision. Superseded are:

- a test output, by a newer test output of the same command (an output that names no
  command is of every command: the per-kind lists);
- an event, by a newer event of the same command, whatever the kinds (a reproducer's
  traceback by its passing re-run);
- a failure event (error, traceback, test output), by a newer failure event of the same
  test or at the same site (``failure_marks``, ``marks_meet``). Which failure is newer
  across kinds is known only among ``live.events``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .vocabulary import FAILURE_KINDS

if TYPE_CHECKING:  # state imports nothing of this module, but keep aging a leaf
    from .state import PoolItem

# what names a failure: a pytest node id, or the innermost frame's file and line
_TEST_ID = re.compile(r"[\w./-]+\.py::[\w\[\]./:-]+")
_FRAME_SITE = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+)'
                         r"|^(?P<short>[\w./-]+\.py:\d+):",
                         re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Observation:
    arrival_no: int
    kind: str
    text: str
    in_harness_order: bool  # from live.events: its order across kinds is known
    decision_seq: int | None = None
    command: str | None = None


def failure_marks(text: str) -> frozenset[str]:
    """What a failure is of: the tests it names and the site it was raised at."""
    marks = {m.rstrip(":") for m in _TEST_ID.findall(text)}
    sites = list(_FRAME_SITE.finditer(text))
    if sites:
        last = sites[-1]
        marks.add(last["short"] or f"{last['path']}:{last['line']}")
    return frozenset(marks)


def marks_meet(first: frozenset[str], second: frozenset[str]) -> bool:
    """Two failures are of the same test or site: a mark in common, where a site named by
    an absolute path (a script's traceback) meets the same file and line as pytest prints
    it, relative to where it ran (``./`` prefixes aside)."""
    if first & second:
        return True
    sites = [_site(mark) for mark in second if "::" not in mark]
    for path, line in (_site(mark) for mark in first if "::" not in mark):
        for other_path, other_line in sites:
            if line == other_line and (path == other_path or path.endswith("/" + other_path)
                                       or other_path.endswith("/" + path)):
                return True
    return False


def _site(mark: str) -> tuple[str, str]:
    path, _, line = mark.rpartition(":")
    while path.startswith("./"):
        path = path[2:]
    return path, line


def same_command(first: str | None, second: str | None) -> bool:
    """Both name a command, the same one up to whitespace."""
    return first is not None and second is not None and first.split() == second.split()


def _newer(later: Observation, earlier: Observation) -> bool:
    if later.arrival_no <= earlier.arrival_no:
        return False
    if (later.kind != earlier.kind and later.decision_seq is not None
            and earlier.decision_seq is not None):
        return later.decision_seq > earlier.decision_seq  # one run's outputs stand together
    return True


def stale_arrivals(observations: Iterable[Observation]) -> frozenset[int]:
    """The arrival numbers of the observations a newer one supersedes."""
    seen = sorted(observations, key=lambda o: o.arrival_no)
    marks = {o.arrival_no: failure_marks(o.text) for o in seen
             if o.kind in FAILURE_KINDS and o.in_harness_order}
    stale = set()
    for index, old in enumerate(seen):
        for new in seen[index + 1:]:
            if not _newer(new, old):
                continue
            if (old.kind == new.kind == "test_output"
                    and (old.command is None or new.command is None
                         or same_command(old.command, new.command))):
                break
            if old.in_harness_order and new.in_harness_order and same_command(old.command,
                                                                              new.command):
                break
            if (old.arrival_no in marks and new.arrival_no in marks and marks[old.arrival_no]
                    and marks_meet(marks[old.arrival_no], marks[new.arrival_no])):
                break
        else:
            continue
        stale.add(old.arrival_no)
    return frozenset(stale)


def observation_of(item: PoolItem) -> Observation:
    """A pool item's live observation (the full text when the pool cut it)."""
    if item.arrival_no is None:
        raise ValueError(f"{item.item_id} is no live observation: it has no arrival number")
    return Observation(item.arrival_no, item.kind, item.original_content or item.content,
                       item.in_harness_order, item.arrived_in_seq, item.command)
