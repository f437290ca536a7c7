"""The request a plan-free agent loop hands ctxdb at decision k, built from the run's
state with today's ``RequestBuilder`` (issue 20: the instrument; the next issue changes
what the window does with it).

The rules, each what a harness developer would write with today's API:

- decision type: ``localize`` until the agent's first edit, ``edit`` after it;
- the task is the run's task; with no plan, the obligation is the task too (cut to the
  obligation's limit);
- every earlier observation is a live event, in the run's order, with the step it
  arrived in and the command that produced it (a newer output of the same command
  supersedes it). Its kind: ``traceback`` when it holds a Python traceback,
  ``test_output`` when the command ran tests, ``error`` when the command failed,
  ``tool_output`` otherwise (the harness's own notes too: they have no kind of their own);
- a source file the agent printed (``cat``, ``nl``, ``sed -n``, ``head``, ``tail``)
  is added as that file, and each ``grep -n`` line as a hit — only files of the tree;
- the working tree's ``git diff`` is the live patch;
- a traceback's frames under the agent's working directory (``/testbed``) are frames of
  the indexed tree, as they are for a harness that indexes the tree where it runs.

A text over the request's limits is cut to fit (a command to the event's command
limit), and a lone surrogate (a trajectory may escape undecodable output that way) becomes
U+FFFD: the replay never loses a decision to the request's rules.
"""

from __future__ import annotations

import re
import shlex
from pathlib import PurePosixPath
from typing import Callable, Sequence

from ..builder import RequestBuilder
from ..request import LONG_TEXT_MAX_CHARS, SHORT_TEXT_MAX_CHARS, TASK_MAX_CHARS, DecisionRequest
from .trajectory import ObservationKind, Step

LOCALIZE, EDIT = "localize", "edit"
# commands that print a file the agent then reads
_FILE_PRINTERS = frozenset({"cat", "nl", "head", "tail", "sed", "less", "more"})
_SOURCE_SUFFIXES = (".py",)  # today's API gives only modules recon indexes
# `path:LINE:text` as grep -n prints it (path relative to the command's directory)
_GREP_LINE = re.compile(r"^(?P<path>[\w./-]+\.py):(?P<line>[1-9]\d{0,8}):", re.MULTILINE)
_TRACEBACK = "Traceback (most recent call last)"
_TEST_RUNNERS = re.compile(r"\b(pytest|py\.test|bin/test|runtests\.py|unittest|tox)\b")
GREP_HITS_PER_OBSERVATION_MAX = 64  # a huge grep is a search result, not a reading


def storable(text: str) -> str:
    """``text`` with what UTF-8 cannot hold (lone surrogates) replaced by U+FFFD."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def event_kind(step: Step) -> str:
    observation = step.observation
    assert observation is not None
    if _TRACEBACK in observation.output:
        return "traceback"
    if step.action and _TEST_RUNNERS.search(step.action):
        return "test_output"
    if observation.returncode not in (None, 0) or observation.kind == ObservationKind.TIMEOUT:
        return "error"
    return "tool_output"


def repository_path(token: str, workdir: str) -> str | None:
    """A path as the agent wrote it, relative to the working directory, or None."""
    if token.startswith(workdir.rstrip("/") + "/"):
        token = token[len(workdir.rstrip("/")) + 1:]
    elif token.startswith("/"):
        return None
    path = PurePosixPath(token)
    if ".." in path.parts:
        return None
    return str(path)


def printed_files(command: str, workdir: str) -> list[str]:
    """Source files a reading command prints (the arguments of cat, nl, sed -n, head,
    tail in each part of a pipeline or list)."""
    files: list[str] = []
    for part in re.split(r"\|\||&&|[|;\n]", command):
        try:
            words = shlex.split(part)
        except ValueError:
            continue
        if not words or PurePosixPath(words[0]).name not in _FILE_PRINTERS:
            continue
        for word in words[1:]:
            if word.endswith(_SOURCE_SUFFIXES) and not word.startswith("-"):
                path = repository_path(word, workdir)
                if path is not None and path not in files:
                    files.append(path)
    return files


def grep_hits(output: str, workdir: str) -> list[str]:
    hits: list[str] = []
    for match in _GREP_LINE.finditer(output):
        path = repository_path(match["path"], workdir)
        if path is not None:
            line_end = output.find("\n", match.start())
            text = output[match.start(): line_end if line_end >= 0 else len(output)]
            hits.append(f"{path}:{match['line']}:{text[match.end():]}")
        if len(hits) >= GREP_HITS_PER_OBSERVATION_MAX:
            break
    return hits


def first_edit_step(steps: Sequence[Step], is_edit: Callable[[str], bool]) -> int | None:
    for step in steps:
        if step.action and is_edit(step.action):
            return step.number
    return None


def build_request(*, run_id: str, instance_id: str, k: int, task: str, steps: Sequence[Step],
                  workdir: str, patch: str, edited_before: bool, store,
                  tree_has: Callable[[str], bool]) -> DecisionRequest:
    """Decision k's request: ``steps`` are the steps before turn k (with observations)."""
    task = storable(task[:TASK_MAX_CHARS])
    builder = RequestBuilder(run_id, instance_id, k, EDIT if edited_before else LOCALIZE,
                             task, task[:SHORT_TEXT_MAX_CHARS], store=store, workdir=workdir)
    for step in steps:
        observation = step.observation
        if observation is None:
            continue
        command = storable(step.action[:SHORT_TEXT_MAX_CHARS]) if step.action else None
        text = storable(observation.output[:LONG_TEXT_MAX_CHARS])
        if not text.strip():
            continue  # an empty output says nothing a window could keep
        builder.event(event_kind(step), text, step.number, command)
        if step.action:
            for path in printed_files(step.action, workdir):
                if tree_has(path):
                    builder.file(path)
            for hit in grep_hits(text, workdir):
                if tree_has(hit.split(":", 1)[0]):
                    builder.grep_hit(hit)
    if patch.strip():
        builder.diff(patch)
    return builder.build()
