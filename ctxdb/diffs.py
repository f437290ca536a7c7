"""Unified diffs as the lines they change: the gold patch of an A/B instance, the
working-tree patch a harness hands a decision (ctxdb.builder)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HUNK = re.compile(r"^@@ -(?P<old>\d+)(?:,(?P<old_len>\d+))? "
                   r"\+(?P<new>\d+)(?:,(?P<new_len>\d+))? @@")


# a hunk's line numbers: 2**31 - 1, the stores' integer, has 10 digits (and int() of
# thousands of digits is what Python refuses, with no line named)
HUNK_NUMBER_MAX_DIGITS = 10


class PatchError(ValueError):
    """A patch that is not a unified diff; the message names the line."""


@dataclass
class FileChange:
    old_path: str | None  # None for a new file
    new_path: str | None  # None for a deleted file
    changed_old_lines: list[int] = field(default_factory=list)  # modified or deleted
    # where each deleted line was, as a line of the new side (the line now in its place)
    deleted_at_new_lines: list[int] = field(default_factory=list)
    insertions: list[tuple[int, int]] = field(default_factory=list)  # (old line before, after)
    added_new_lines: list[int] = field(default_factory=list)
    hunk_old_ranges: list[tuple[int, int]] = field(default_factory=list)  # (first, last)

    def hunk_of(self, line: int) -> int:
        """The number of the hunk whose old-side lines hold ``line``."""
        for number, (first, last) in enumerate(self.hunk_old_ranges):
            if first <= line <= last:
                return number
        return len(self.hunk_old_ranges) - 1


def _strip_prefix(path: str) -> str | None:
    path = path.split("\t", 1)[0].strip()
    if path == "/dev/null":
        return None
    return path[2:] if path[:2] in ("a/", "b/") else path


def parse_unified_diff(patch: str) -> list[FileChange]:
    changes: list[FileChange] = []
    current: FileChange | None = None
    old = new = 0
    pending_insert = False
    # A diff is \n-separated; a form feed inside a source line is not a line break.
    lines = [line.rstrip("\r") for line in patch.split("\n")]
    for number, line in enumerate(lines, start=1):
        if line.startswith("--- ") and number < len(lines) and lines[number].startswith("+++ "):
            current = FileChange(_strip_prefix(line[4:]), _strip_prefix(lines[number][4:]))
            changes.append(current)
            continue
        if line.startswith("+++ ") or line.startswith("diff ") or line.startswith("index "):
            continue
        hunk = _HUNK.match(line)
        if hunk:
            if current is None:
                raise PatchError(f"patch line {number}: hunk before any file header")
            if any(len(digits) > HUNK_NUMBER_MAX_DIGITS for digits in hunk.groups() if digits):
                raise PatchError(f"patch line {number}: a hunk line number of more than "
                                 f"{HUNK_NUMBER_MAX_DIGITS} digits")
            old, new = int(hunk["old"]), int(hunk["new"])
            old_len = int(hunk["old_len"]) if hunk["old_len"] is not None else 1
            # an empty old side ("-N,0") is an insertion after line N
            current.hunk_old_ranges.append((old, old + old_len - 1) if old_len else (old, old + 1))
            pending_insert = False
            continue
        if current is None or not line or line.startswith("\\"):
            continue
        tag = line[0]
        if tag == " ":
            old += 1
            new += 1
            pending_insert = False
        elif tag == "-":
            current.changed_old_lines.append(old)
            current.deleted_at_new_lines.append(max(new, 1))
            old += 1
            pending_insert = False
        elif tag == "+":
            current.added_new_lines.append(new)
            new += 1
            previous = lines[number - 2][:1] if number >= 2 else ""
            if previous != "-" and not pending_insert:
                # a run of '+' lines not replacing anything: an insertion between
                # old lines old-1 and old
                current.insertions.append((old - 1, old))
                pending_insert = True
            elif previous == "-":
                pending_insert = True  # part of a replacement, already counted
    return changes
