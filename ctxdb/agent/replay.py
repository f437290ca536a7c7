"""Replaying recorded agent runs: every decision of a run, in three arms, into the store.

For each run: its working tree is rebuilt in an isolated scratch copy of the base commit
(``worktree.ScratchTree``: the run's commands re-run in order, only to move the files —
the recorded outputs stay the observations), and for every decision k (the model call
that made turn k):

- ``ctx08``: the agent-loop window of the steps before k over the tree as it then was
  (``adapter.construct_step``), recorded by the store — a decision row like any other
  (``instance_id`` = the run's instance, ``seq`` = k), sent after the harness's own
  system and instruction messages; and ``ctx08-without-<rule>``: the same window with
  one rule of ``loop.ABLATIONS`` off, counted and measured but not recorded;
- ``current``: exactly what the harness sent; ``mask10``: that with the observations
  older than the 10 newest masked (``arms``);
- the anchors of action k (``anchors``), and for each arm whether its prompt kept them,
  and where a lost one went.

Everything but the ctx08 decision rows is written in one transaction when the run is
done; a run that fails has its decision rows removed again and is named, never left
half-written. Replaying a run again under the same store run replaces it. While it runs,
its row in ``replay_in_progress`` (a lease renewed as its steps go) tells ``ctxdb verify``
it is under way, not stopped outright.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import socket
import subprocess
import time
import traceback
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Table, delete, func, select, update
from sqlalchemy.exc import DBAPIError, IntegrityError

from .. import models
from ..config import Settings, load_settings
from ..db import INSUFFICIENT_PRIVILEGE_SQLSTATE, refusal_wanted
from ..gitenv import HARDENED_GIT, git_env
from ..pipeline.persist import settings_json
from ..request import RequestError
from ..request_limits import json_lines, loop_id_problem
from ..store import ContextStore
from ..tokens import get_counter
from ..transactions import StoreBusy
from ..workers import DEFAULT_WORKERS, run_each
from . import anchors as anchor_rules
from .adapter import (
    OverCeilingError,
    StepTakenError,
    TreeFiles,
    construct_step,
    plan_window,
    run_ref,
    window_fits,
)
from .arms import (
    ARM_CTX08,
    ARM_CURRENT,
    ARM_MASK10,
    PromptCounter,
    current_prompt,
    mask10_prompt,
    masked_observation_indexes,
    prompt_text,
)
from .loop import (
    ABLATIONS,
    OUTPUT_PART,
    POINTER,
    LoopRules,
    LoopWindow,
    SettledParts,
    ablation_arm,
    build_window,
    loop_step,
    prompt_names,
    step_of_item,
)
from .sandbox import PROGRAM_NAME, remove_stale_sandbox_roots
from .trajectory import (
    MAX_COMMAND_TIMEOUT_S,
    AgentRun,
    ObservationKind,
    TrajectoryError,
    read_trajectory,
)
from .worktree import (
    SWEBENCH_TESTBED_SETUP,
    ScratchTree,
    ScratchTreeError,
    has_commit,
    is_git_dir,
)

DEFAULT_RUN_ID = "replay"
# while a replay again runs, the run's earlier ctx08 decisions are held aside under this
# instance id and the replay's lease id: put back if it fails, removed when it is written
HELD_INSTANCE_PREFIX = models.REPLAY_HELD_INSTANCE_PREFIX
# a run's replay rows, parents first (each child's key names its parent's)
HELD_REPLAY_TABLES = (models.replay_run, models.replay_decision, models.replay_anchor,
                      models.replay_anchor_outcome)
REPLAY_RUN_NOTE = models.REPLAY_RUN_NOTE  # run.note: what the run id is for
# tree_note causes (the text before the first ':')
NOTE_DIFFERS = "submission differs"
NOTE_COMMAND_DIVERGED = "command diverged"
DIVERGED_LINE_SHOWN_MAX_CHARS = 200  # of the re-run's last line, in that note
DIFFERING_FILES_NAMED = 3  # of each side's files, in a differing submission's note
GIVEN_VALUE_SHOWN_CHARS = 64  # of a bad value a runs file gave, in its error
# a base commit as a runs line names it: a commit's id, whole (40 hex digits, 64 in a
# SHA-256 repository) or abbreviated as git abbreviates it (at least 7), never a branch, a
# tag or HEAD, which can move
COMMIT_ID_MIN_HEX, COMMIT_ID_MAX_HEX = 7, 64
BASE_COMMIT_ID = re.compile(rf"[0-9a-fA-F]{{{COMMIT_ID_MIN_HEX},{COMMIT_ID_MAX_HEX}}}")
NOTE_NO_SUBMISSION = "no submission recorded"
# mini-swe-agent 2.x's default configuration submits the text after its marker, often
# nothing: no patch to compare the tree with
NOTE_EMPTY_SUBMISSION = "the run submitted no patch"
# git could not diff the rebuilt tree (a command put a FIFO or socket where a file was:
# the recorded harness's own `git add -A` fails there too); git's first line follows
NOTE_TREE_UNREADABLE = "tree not diffable"
# git's shortest default abbreviation: a shorter name (core.abbrev set lower) is only the
# same blob when it is the same name
GIT_ABBREV_MIN_DIGITS = 7
# bash's (or dash's) own word that a command names no program it can find, as a recorded
# output holds it: `bash: ed: command not found`, `bash: line 3: ed: command not found`,
# `/bin/sh: 1: ed: not found`; or a script's, run by bash (`./fix.sh: line 3: ed: command
# not found`). A name is a file name (sandbox.PROGRAM_NAME).
_NOT_FOUND = re.compile(r"^(?:(?:/(?:usr/)?bin/)?(?:ba|da)?sh: (?:line )?(?:\d+: )?"
                        r"|(?P<script>\S+: line \d+: ))"
                        rf"(?P<program>{PROGRAM_NAME.pattern}): (?:command )?not found$",
                        re.MULTILINE)
_INDEX_LINE = re.compile(rf"^index (?P<old>[0-9a-f]{{{GIT_ABBREV_MIN_DIGITS},}})\.\."
                         rf"(?P<new>[0-9a-f]{{{GIT_ABBREV_MIN_DIGITS},}})(?P<mode> \d+)?$")


class Fate(StrEnum):
    """Where a lost anchor went: what became of the newest observation that held it."""

    MASKED = "masked"  # aged to its pointer or placeholder
    STALE = "stale"  # superseded by a newer output (P6)
    CAPPED = "capped"  # left out by an item cap or the token budget
    CUT = "cut"  # in the window, but not the part that held the anchor
    NEVER_GIVEN = "never_given"  # not in the request, or the request was refused


@dataclass(frozen=True)
class RunSpec:
    """One line of RUNS.jsonl (or one trajectory with a tree already at hand)."""

    trajectory: Path
    instance_id: str
    git_dir: Path  # a git directory holding the base commit (bare or not)
    base_commit: str
    resolved: bool | None = None
    repo: str | None = None
    # what the harness's environment did to the tree before the run began (SWE-bench's
    # image setup): the line's testbed_setup, else worktree.SWEBENCH_TESTBED_SETUP[repo]
    testbed_setup: str | None = None


@dataclass
class RunResult:
    instance_id: str
    decisions: int = 0
    refused_decisions: int = 0
    tree_matches_submission: bool | None = None
    tree_note: str | None = None
    replaced: bool = False  # it replaced an earlier replay of the run in the store
    # the first decision whose tree is unknown (a command ended otherwise than recorded and
    # the tree does not end as the run's did); None: the tree held to the end
    tree_lost_at: int | None = None
    rerun_seconds: float = 0.0
    replay_seconds: float = 0.0
    error: str | None = None
    # decisions a failed replay made and could not remove (its database went away)
    decisions_left: int = 0


@dataclass
class ReplaySummary:
    results: list[RunResult] = field(default_factory=list)
    input_errors: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[RunResult]:
        return [r for r in self.results if r.error]


class RunsFileError(ValueError):
    pass


def load_run_specs(path: str | Path, repo_git: Mapping[str, str | Path] | None = None,
                   limit: int | None = None) -> tuple[list[RunSpec], list[str]]:
    """RUNS.jsonl: ``instance_id``, ``trajectory`` (relative to the file), ``base_commit``,
    ``repo_git``, and optionally ``repo``, ``resolved`` and ``testbed_setup`` (a shell
    command run in the fresh tree before the run's own commands). ``repo_git``: the git
    directory of each ``repo`` (``owner/name``), for lines that do not name one (as
    SWE-bench's instance lists). Returns the good lines and one error per bad line, naming
    the line and field (a base commit the git directory lacks too). ``limit``: the first
    that many lines only (a blank line is none), the rest neither checked nor replayed."""
    path = Path(path)
    given_git = dict(repo_git or {})
    try:
        lines = list(json_lines(path))
    except OSError as exc:
        raise RunsFileError(f"{path}: cannot read: {exc}") from exc
    if not lines:
        raise RunsFileError(f"{path}: no runs in it (expected a JSON object a line: "
                            "instance_id, trajectory, base_commit, ...)")
    lines = lines[:limit]
    specs: list[RunSpec] = []
    errors: list[str] = []
    first_line_of: dict[str, int] = {}
    for number, row, unread in lines:
        where = f"{path}:{number}"
        if unread is not None:
            errors.append(f"{where}: {unread}")
            continue
        if not isinstance(row, dict):
            errors.append(f"{where}: expected a JSON object")
            continue
        given_by_option = not row.get("repo_git") and isinstance(row.get("repo"), str) \
            and row["repo"] in given_git
        if given_by_option:
            row["repo_git"] = str(given_git[row["repo"]])
        problems = [f"{where}: {name}: expected a non-empty string"
                    for name in ("instance_id", "trajectory", "base_commit")
                    if not isinstance(row.get(name), str) or not row.get(name)]
        git_problem = _git_dir_problem(row, bool(given_git))
        if git_problem:
            problems.append(f"{where}: {git_problem}")
        if "resolved" in row and not isinstance(row["resolved"], (bool, type(None))):
            problems.append(f"{where}: resolved: expected true, false or null")
        for name in ("repo", "testbed_setup"):
            if name in row and not isinstance(row[name], (str, type(None))):
                problems.append(f"{where}: {name}: expected a string or null")
        if not problems:
            problems += [f"{where}: {problem}" for problem in _line_value_problems(row)]
        if problems:
            errors.extend(problems)
            continue
        if row["instance_id"] in first_line_of:
            errors.append(f"{where}: instance_id {row['instance_id']!r}: already on line "
                          f"{first_line_of[row['instance_id']]} (a run is replayed once)")
            continue
        first_line_of[row["instance_id"]] = number
        trajectory = (path.parent / row["trajectory"]).resolve()
        git_dir = Path(row["repo_git"]).expanduser()
        if not trajectory.is_file():
            what = "not a file:" if trajectory.exists() else "no such file"
            errors.append(f"{where}: trajectory: {what} {trajectory}")
            continue
        problem = trajectory_path_problem(trajectory)
        if problem:
            errors.append(f"{where}: trajectory: {problem}")
            continue
        given_as = f" (given by --repo-git {row['repo']}=…)" if given_by_option else ""
        if not git_dir.is_dir():
            what = "not a directory:" if git_dir.exists() else "no such directory"
            errors.append(f"{where}: repo_git: {what} {git_dir}{given_as}")
            continue
        if not is_git_dir(git_dir):
            errors.append(f"{where}: repo_git: {git_dir} is not a git directory (expected "
                          f"a bare repository or a checkout's top){given_as}")
            continue
        if not has_commit(git_dir, row["base_commit"]):
            shown = row["base_commit"][:GIVEN_VALUE_SHOWN_CHARS]
            errors.append(f"{where}: base_commit: {shown!r} is not a commit of {git_dir}")
            continue
        setup = row.get("testbed_setup", SWEBENCH_TESTBED_SETUP.get(row.get("repo") or ""))
        specs.append(RunSpec(trajectory, row["instance_id"], git_dir, row["base_commit"],
                             row.get("resolved"), row.get("repo"), setup))
    return specs, errors


def _line_value_problems(row: dict[str, Any]) -> list[str]:
    """A runs line's values that are text of the right type but cannot be used: an
    instance id no window can name, a base commit that is no commit id, a setup command
    no shell runs."""
    problems = []
    if "\0" in row["trajectory"]:  # (no file has one in its name)
        problems.append("trajectory: expected a file's path, got text with a NUL byte")
    problem = loop_id_problem(row["instance_id"])
    if problem:
        problems.append(f"instance_id: {problem}")
    problem = base_commit_problem(row["base_commit"])
    if problem:
        problems.append(f"base_commit: {problem}")
    if "\0" in (row.get("testbed_setup") or ""):
        problems.append("testbed_setup: expected a shell command, got text with a NUL byte "
                        "(no shell runs one)")
    return problems


def trajectory_path_problem(path: Path) -> str | None:
    """Why the store cannot keep ``path`` as the run's trajectory (None: it can): a path
    that is not UTF-8 text (a directory named in Latin-1), checked before anything runs."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return f"{str(path)!r}: expected a path UTF-8 can hold (the store keeps it as text)"
    return None


def base_commit_problem(base_commit: str) -> str | None:
    """Why ``base_commit`` is no commit id (None: it is one)."""
    if BASE_COMMIT_ID.fullmatch(base_commit):
        return None
    shown = base_commit[:GIVEN_VALUE_SHOWN_CHARS]
    return (f"expected a commit id ({COMMIT_ID_MIN_HEX} to {COMMIT_ID_MAX_HEX} hex digits), "
            f"got {shown!r}: a branch, a tag or HEAD can move, so the tree would not be the "
            "run's")


def check_replay_run_id_text(run_id: object) -> None:
    """A replay's run id as given, checked before anything is written or undone: every
    ctx08 window names it to the model (``ctxdb show run:RUN:INSTANCE``)."""
    problem = loop_id_problem(run_id, run=True)
    if problem:
        raise ValueError(f"--run-id: {problem}")


def _commands_a_shell_cannot_run(run: AgentRun) -> None:
    """Refuse a recorded run that holds a command with a NUL byte (before its earlier
    replay is removed): no shell runs one, so its tree could not be rebuilt."""
    for step in run.steps:
        if "\0" in (step.action or ""):  # (a format error's blocks never ran)
            raise TrajectoryError(f"{run.path}: step {step.number} (messages"
                                  f"[{step.message_index}]): its command holds a NUL byte, "
                                  "which no shell runs: the run cannot be re-run")


def _git_dir_problem(row: dict[str, Any], some_given: bool) -> str | None:
    """Why a runs line has no git directory: none on it, none given for its repo (or no
    repo to look one up by, when some were given); None when it has one."""
    git_dir, repo = row.get("repo_git"), row.get("repo")
    if isinstance(git_dir, str) and git_dir:
        return None
    if git_dir not in (None, ""):
        return "repo_git: expected a non-empty string (a git directory)"
    if repo not in (None, "") and not isinstance(repo, str):
        return None  # the repo is named as the wrong type; repo_git may be given for it then
    if repo:
        shown = repo[:GIVEN_VALUE_SHOWN_CHARS]
        return (f"repo_git: expected the git directory holding base_commit, on the line or "
                f"given for its repo {shown!r} (--repo-git {shown}=GIT_DIR)")
    if some_given:
        return ("repo: expected OWNER/NAME, which --repo-git needs to match the line (or "
                "repo_git on the line)")
    return ("repo_git: expected the git directory holding base_commit (or repo on the line, "
            "and --repo-git OWNER/NAME=GIT_DIR for it)")


def replay_spec_for_tree(trajectory: str | Path, tree: str | Path,
                         base_commit: str | None = None,
                         instance_id: str | None = None) -> RunSpec:
    """One run of a tree already at hand: ``tree`` is a git checkout of its repository,
    at the run's base commit unless ``base_commit`` says which."""
    trajectory, tree = Path(trajectory), Path(tree)
    problem = trajectory_path_problem(trajectory)
    if problem:
        raise RunsFileError(f"trajectory: {problem}")
    run = read_trajectory(trajectory)  # refused here, by name, before anything runs
    _commands_a_shell_cannot_run(run)
    name = trajectory.name.removesuffix(".json").removesuffix(".traj")
    given_as = ("--instance-id" if instance_id else "the trajectory's instance_id"
                if run.instance_id else "the trajectory file's name")
    instance_id = instance_id or run.instance_id or name
    problem = loop_id_problem(instance_id)
    if problem:
        raise RunsFileError(f"{given_as} (the run's instance id): {problem}")
    if not (tree / ".git").exists():
        raise RunsFileError(f"--tree {tree}: expected a git checkout (no .git in it)")
    # the commit the tree's HEAD, or --base-commit (any name of a commit: a tag, HEAD~2),
    # names now, by its id: the tree at hand may move on while the run replays
    # (a GIT_DIR around us must not name another repository's HEAD)
    named = base_commit if base_commit is not None else "HEAD"
    done = subprocess.run([*HARDENED_GIT, "-C", str(tree), "rev-parse", "--verify", "--quiet",
                           "--end-of-options", f"{named}^{{commit}}"],
                          capture_output=True, text=True, env=git_env(), check=False)
    if done.returncode != 0:
        raise RunsFileError(f"--base-commit {base_commit}: not a commit of {tree}"
                            if base_commit is not None else
                            f"--tree {tree}: git cannot read its HEAD: {done.stderr.strip()}")
    base_commit = done.stdout.strip()
    return RunSpec(trajectory, instance_id, tree, base_commit)


def check_command_timeout(command_timeout_s: float | None) -> None:
    """A re-run command's time limit as given (None: each run's own): above 0, at most
    ``MAX_COMMAND_TIMEOUT_S``, checked before anything of a replay is written or undone."""
    if command_timeout_s is None:
        return
    if isinstance(command_timeout_s, bool) or not isinstance(command_timeout_s, (int, float)) \
            or not 0 < command_timeout_s <= MAX_COMMAND_TIMEOUT_S:
        raise ValueError(f"command_timeout_s {command_timeout_s!r}: expected seconds above "
                         f"0, at most {MAX_COMMAND_TIMEOUT_S}")


def replay_run(db_url: str, spec: RunSpec, *, run_id: str = DEFAULT_RUN_ID,
               settings: Settings | None = None, work_dir: str | None = None,
               command_timeout_s: float | None = None) -> RunResult:
    """Replay one run into the store; errors are caught and reported, never raised."""
    result = RunResult(spec.instance_id)
    settings = dataclasses.replace(settings or load_settings(), rank_base_url="")
    started = time.perf_counter()
    try:
        check_command_timeout(command_timeout_s)  # before the run's earlier replay goes
        check_replay_run_id_text(run_id)
        # a RunSpec a library caller made is held to a runs line's rules
        for field_name, problem in (("instance_id", loop_id_problem(spec.instance_id)),
                                    ("trajectory", trajectory_path_problem(spec.trajectory))):
            if problem:
                raise ValueError(f"{field_name}: {problem}")
        run = read_trajectory(spec.trajectory)
        _commands_a_shell_cannot_run(run)
        timeout_s = command_timeout_s if command_timeout_s is not None \
            else run.command_timeout_s
        lease = ReplayLease.new(run_id, spec.instance_id, timeout_s)
        with ScratchTree.create(spec.git_dir, spec.base_commit, parent=work_dir,
                                workdir=run.workdir, setup_command=spec.testbed_setup) as tree:
            with ContextStore.open(db_url, settings=settings) as store:
                check_replay_run_id(store, run_id)
                with store.write_transaction() as connection:  # before any window makes it
                    _ensure_replay_run(connection, store, run_id)
                _hold_aside_run(store, run_id, spec.instance_id, lease)
                made: list[int] = []  # this replay's decisions, the only ones it may undo
                try:
                    _replay(store, run, spec, tree, result, run_id, settings, timeout_s,
                            started, made, lease)
                    result.replaced = lease.holds_earlier
                except BaseException:
                    # its replay rows are written last, in one transaction: only its
                    # decisions are left to undo (another replay's of the run are not ours),
                    # and the earlier replay it held aside to put back
                    try:
                        with store.write_transaction() as connection:
                            _delete_decisions(connection, made)
                            _put_back_held(connection, lease)
                            lease.release(connection)
                    # the database went away, or another writer held it: say what stays
                    except (DBAPIError, StoreBusy):
                        result.decisions_left = len(made)
                    raise
    except Exception as exc:  # one run's failure must not stop the others
        result.error = f"{spec.instance_id}: {_failure(exc)}"
        if result.decisions_left:
            result.error += (f" ({result.decisions_left} decisions it made could not be "
                             "removed; replaying the run again replaces them)")
    return result


def _failure(exc: Exception) -> str:
    """A run's failure in one line: a database's error as the driver's first line, not
    SQLAlchemy's statement, parameters and link."""
    if isinstance(exc, DBAPIError) and exc.orig is not None:
        said = (str(exc.orig).strip().splitlines() or [""])[0]
        wanted = (f"; expected {refusal_wanted(said)}"
                  if getattr(exc.orig, "sqlstate", None) == INSUFFICIENT_PRIVILEGE_SQLSTATE
                  else "")
        return f"the store's database failed: {type(exc.orig).__name__}: {said}{wanted}"
    if type(exc).__module__.startswith("ctxdb."):  # its class by name, not its module's path
        return f"{type(exc).__name__}: {exc}"
    return traceback.format_exception_only(type(exc), exc)[-1].strip()


def _replay(store: ContextStore, run: AgentRun, spec: RunSpec, tree: ScratchTree,
            result: RunResult, run_id: str, settings: Settings, timeout_s: float,
            started: float, made: list[int], lease: ReplayLease) -> None:
    """Replay ``run``'s decisions into the store; each decision it constructs is added to
    ``made`` as it commits."""
    counter = PromptCounter(get_counter(settings.tokenizer).count)
    observations: list[str] = []  # outputs of steps before k, as the harness showed them
    previous: dict[str, list[dict[str, str]]] = {}  # each arm's prompt at decision k - 1
    settled: dict[str, SettledParts] = {}  # each ablation's window at k - 1, as it settles
    decision_rows: list[dict[str, Any]] = []
    anchor_rows: list[dict] = []
    outcome_rows: list[dict] = []
    divergence: tuple[int, str] | None = None  # the first edit the re-run did otherwise
    prefix = [dict(run.messages[0]), dict(run.messages[1])]
    lacked = programs_lacked(run)
    for step in run.steps:
        lease.renew(store)  # this step and its command's time limit: under the lease
        k = step.number
        earlier = run.steps[: k - 1]
        loop_steps = [loop_step(s) for s in earlier]
        try:
            context = construct_step(store, run_id=run_id, instance_id=spec.instance_id,
                                     task=run.task, steps=loop_steps, tree=tree.path,
                                     prefix=prefix, seq=k, workdir=run.workdir)
            decision_id = context.decision_id
            made.append(decision_id)
            prompts = {ARM_CTX08: context.messages(prefix=prefix)}
            # a recorded window (step -> rendering) or an ablation's LoopWindow
            windows: dict[str, dict[int, str] | LoopWindow] = {
                ARM_CTX08: _built_window(store, decision_id)}
        except StepTakenError:  # another replay under this run id: not a refused step
            raise
        except RequestError as refused:
            result.refused_decisions += 1
            decision_id = None
            # a window that cannot fit: the harness sends its own history, as the
            # mini-swe-agent wrapper does live; any other refusal, its prompt alone
            prompts = {ARM_CTX08: current_prompt(run, k) if isinstance(refused, OverCeilingError)
                       else [dict(m) for m in prefix]}
            windows = {}
        for rule in ABLATIONS:
            files = TreeFiles(tree.path)
            rules = LoopRules().without(rule)
            window = build_window(loop_steps, files, rules, run.workdir,
                                  settled.pop(rule, None), prompt_names(prefix, run.task),
                                  window_fits(settings.tokenizer, settings.token_ceiling,
                                              run.task, prefix,
                                              run_ref(run_id, spec.instance_id)))
            try:
                plan = plan_window(window, settings.tokenizer, settings.token_ceiling,
                                   run.task, prefix, run_ref=run_ref(run_id, spec.instance_id))
            except RequestError as refused:  # counted as the ctx08 arm's refusal is
                prompts[ablation_arm(rule)] = current_prompt(run, k) \
                    if isinstance(refused, OverCeilingError) else [dict(m) for m in prefix]
                continue
            settled[rule] = SettledParts.of(window, loop_steps, rules)
            text = plan.text(run.task)
            prompts[ablation_arm(rule)] = [dict(m) for m in prefix] + (
                [{"role": "user", "content": text}] if text else [])
            windows[ablation_arm(rule)] = window
        prompts[ARM_CURRENT] = current_prompt(run, k)
        prompts[ARM_MASK10] = mask10_prompt(run, k)
        action_kind = _action_kind(step, run.workdir)
        for arm, messages in prompts.items():
            tokens = counter.prompt_tokens(messages)
            cached = counter.cached_tokens(previous.get(arm), messages)
            previous[arm] = messages
            decision_rows.append({
                "run_id": run_id, "instance_id": spec.instance_id, "seq": k, "arm": arm,
                "decision_id": decision_id if arm == ARM_CTX08 else None,
                "prompt_tokens": tokens, "cached_tokens": cached, "action_kind": action_kind,
                "refused": arm.startswith(ARM_CTX08) and arm not in windows,
                "tree_known": True})  # settled when the run is done
        if step.action and not step.is_submit:
            _measure_anchors(run, step, earlier, observations, prompts, windows, tree, run_id,
                             spec.instance_id, anchor_rows, outcome_rows)
        if step.observation is not None:
            observations.append(step.observation.text)
        if step.action:  # the submit command too: cleanup is often chained to it
            outcome = tree.run(step.action, timeout_s,
                               missing_programs=missing_at(lacked, k))
            result.rerun_seconds += outcome.duration_s
            if divergence is None and _diverged(step, outcome, run.workdir):
                divergence = (k, f"{NOTE_COMMAND_DIVERGED}: step {k} "
                                 f"({_divergence(step, outcome)})")
    note: str | None
    unreadable = ""  # git's first line, when it could not diff the tree
    try:
        submitted = tree.submission()
    except ScratchTreeError as exc:  # the windows stand: a note, not a failed run
        submitted, unreadable = None, (str(exc).splitlines() or [""])[0]
    if submitted is None:
        matches, note = None, f"{NOTE_TREE_UNREADABLE}: {unreadable}"
    elif run.submission is None:
        matches, note = None, NOTE_NO_SUBMISSION
    elif not run.submission.strip():
        matches, note = None, NOTE_EMPTY_SUBMISSION
    else:
        matches = _same_patch(submitted, run.submission)
        note = (None if matches
                else f"{NOTE_DIFFERS}: {_first_difference(submitted, run.submission)}")
    # An edit that ended otherwise than recorded (often only its output differs: the
    # recorded environment had packages this one lacks) lost the tree only when the
    # rebuilt tree does not end as the run's did: then every decision after it is flagged.
    tree_lost_at = divergence[0] + 1 if divergence and not matches else None
    for row in decision_rows:
        row["tree_known"] = tree_lost_at is None or row["seq"] < tree_lost_at
    result.tree_matches_submission, result.tree_lost_at = matches, tree_lost_at
    result.tree_note = divergence[1] + "; " + note if divergence and note else note
    result.decisions = len(run.steps)
    result.replay_seconds = time.perf_counter() - started - result.rerun_seconds
    lease.renew(store)  # the tree's diff took its time: covers the write
    _write_replay(store, run_id, spec, run, result, tree_lost_at, decision_rows, anchor_rows,
                  outcome_rows, made, lease)


def programs_lacked(run: AgentRun) -> dict[str, int]:
    """The programs the recorded environment lacked, each with the last step whose
    output says so (bash's `command not found`). The re-run lacks them up to that step
    too, so a command the recording could not run (an `ed` script) does not edit the
    tree here; after it the agent may have installed the program. Only a program run by
    name goes missing (sandbox ``missing_programs``): a command naming its path still
    finds it."""
    lacked: dict[str, int] = {}
    for step in run.steps:
        if step.action and step.observation is not None:
            for found in _NOT_FOUND.finditer(step.observation.output):
                program = found.group("program")
                # the shell's own word is about the command it ran: one that names the
                # program (not a line an output quotes, a log printed by `cat`)
                if found.group("script") or re.search(
                        rf"(?<![\w.+/-]){re.escape(program)}(?![\w.+-])", step.action):
                    lacked[program] = step.number
    return lacked


def missing_at(lacked: Mapping[str, int], step_number: int) -> list[str]:
    """The programs of ``programs_lacked`` still missing when step ``step_number`` runs."""
    return [program for program, last in lacked.items() if step_number <= last]


def _action_kind(step, workdir: str) -> str:
    if step.is_submit:
        return "submit"
    if step.action is None:
        return "none"
    return "edit" if anchor_rules.is_edit_command(step.action, workdir=workdir) else "other"


def _diverged(step, outcome, workdir: str) -> bool:
    """The re-run may not have done what the recorded command did to the files: it ended
    otherwise than the recording says, for a command that edits."""
    recorded = step.observation
    if recorded is None or not anchor_rules.is_edit_command(step.action or "", workdir=workdir):
        return False
    if outcome.timed_out != (recorded.kind == ObservationKind.TIMEOUT):
        return True
    return recorded.returncode is not None and outcome.returncode != recorded.returncode


def _divergence(step, outcome) -> str:
    """How the re-run ended, beside the recording, with the re-run's last line (what
    went otherwise: ``fatal: …``, ``sed: can't read …``)."""
    recorded = step.observation
    if outcome.timed_out:
        return "timed out in the sandbox"
    said = next((line.strip() for line in reversed(outcome.output.splitlines())
                 if line.strip()), "")
    if len(said) > DIVERGED_LINE_SHOWN_MAX_CHARS:
        said = said[:DIVERGED_LINE_SHOWN_MAX_CHARS - 1] + "…"
    return f"exit {outcome.returncode}, recorded {recorded.returncode}" + (
        f": {said}" if said else "")


def _same_patch(first: str, second: str) -> bool:
    # the harness stored the submit command's output with its leading whitespace (and
    # marker line) removed: the patches are compared up to surrounding whitespace
    lines, other_lines = first.strip().splitlines(), second.strip().splitlines()
    return len(lines) == len(other_lines) and all(
        line == other or _same_blob_line(line, other)
        for line, other in zip(lines, other_lines, strict=True))


def _same_blob_line(line: str, other: str) -> bool:
    """Two ``index OLD..NEW [mode]`` lines naming the same blobs. git abbreviates blob
    names to a length it sizes by the objects its store holds, so a copy of the
    repository other than the harness's prints them longer or shorter (the recorded
    xarray runs 8 digits, the search tool's snapshot 9): one is the other's start."""
    ours, theirs = _INDEX_LINE.match(line), _INDEX_LINE.match(other)
    if ours is None or theirs is None or ours["mode"] != theirs["mode"]:
        return False
    return all(a.startswith(b) or b.startswith(a)
               for a, b in ((ours["old"], theirs["old"]), (ours["new"], theirs["new"])))


def _first_difference(ours: str, theirs: str) -> str:
    files_ours = set(re.findall(r"^diff --git a/(\S+)", ours, re.MULTILINE))
    files_theirs = set(re.findall(r"^diff --git a/(\S+)", theirs, re.MULTILINE))
    if files_ours != files_theirs:
        extra = sorted(files_ours - files_theirs)[:DIFFERING_FILES_NAMED]
        missing = sorted(files_theirs - files_ours)[:DIFFERING_FILES_NAMED]
        return f"files differ (extra {extra}, missing {missing})"
    return "same files, other lines"


def _measure_anchors(run, step, earlier, observations, prompts, windows, tree, run_id,
                     instance_id, anchor_rows, outcome_rows) -> None:
    # the task as the harness sent it: its whole first message (every arm sends it)
    found = anchor_rules.anchors_of_action(step.action, earlier_observations=observations,
                                           system_prompt=run.system_prompt,
                                           task=run.instruction)
    if not found:
        return
    indexes = {arm: anchor_rules.WindowIndex(prompt_text(messages))
               for arm, messages in prompts.items()}
    masked = masked_observation_indexes(run, step.number)
    observed_steps = [s for s in earlier if s.observation is not None]
    for number, anchor in enumerate(found, start=1):
        holding = anchor_rules.observations_holding(anchor, observations,
                                                    file_lines=tree.file_lines)
        held_by = observed_steps[holding[-1]] if holding else None
        anchor_rows.append({
            "run_id": run_id, "instance_id": instance_id, "seq": step.number,
            "anchor_no": number, "anchor_class": str(anchor.anchor_class),
            "anchor_text": anchor.text, "anchor_spelled": anchor.spelled,
            "path": anchor.path, "line": anchor.line,
            "held_by_seq": held_by.number if held_by else None})
        for arm, index in indexes.items():
            kept = index.keeps(anchor, file_lines=tree.file_lines)
            fate = None
            if not kept:
                if arm == ARM_MASK10:
                    fate = Fate.MASKED if held_by and held_by.observation.message_index in masked \
                        else Fate.CUT
                elif arm in windows:
                    fate = _loop_fate(windows[arm], held_by.number) if held_by \
                        else Fate.NEVER_GIVEN
                else:
                    fate = Fate.CUT
            outcome_rows.append({
                "run_id": run_id, "instance_id": instance_id, "seq": step.number,
                "anchor_no": number, "arm": arm, "kept": kept,
                "fate": str(fate) if fate else None})


def _built_window(store: ContextStore, decision_id: int) -> dict[int, str]:
    """step -> the rendering its output part had in the recorded window."""
    item = models.window_item
    with store.engine.connect() as connection:
        rows = connection.execute(select(item.c.item_id, item.c.rendering).where(
            item.c.decision_id == decision_id)).all()
    parts = {step_of_item(int(row.item_id[1:])): row.rendering for row in rows}
    return {step: rendering for (step, part), rendering in parts.items() if part == OUTPUT_PART}


def _loop_fate(window: dict[int, str] | LoopWindow, step_number: int) -> Fate:
    """What became of the output of ``step_number`` in a loop window (a recorded one:
    step -> rendering; an ablation's: its LoopWindow)."""
    if isinstance(window, dict):
        rendering = window.get(step_number)
    else:
        rendering = next((p.rendering for p in window.parts
                          if step_of_item(p.item_no) == (step_number, OUTPUT_PART)), None)
    if rendering is None:
        return Fate.NEVER_GIVEN
    if rendering == POINTER:
        return Fate.MASKED
    return Fate.CUT  # shown (whole, cut, or as the lines it printed): the anchor's part is not


def _hold_aside_run(store: ContextStore, run_id: str, instance_id: str,
                    lease: ReplayLease) -> None:
    """Hold a run's earlier replay aside and say this replay is under way (``lease``), in
    one transaction: its ctx08 decisions move to the instance id ``held_instance_id``
    names (no window of this replay reads them), its replay rows are kept in ``lease`` and
    removed. They are removed for good with this replay's rows, or put back if it fails or
    is stopped (``_put_back_held``), so a replay again that does not finish leaves the run
    as it was. What a replay stopped outright (SIGKILL) held aside is removed here."""
    try:
        _hold_aside(store, run_id, instance_id, lease)
    except IntegrityError:
        # two started at once on PostgreSQL, neither seeing the other's row yet: the
        # second's row clashes with the first's (nothing of this one was written)
        raise ReplayClashError(f"another replay of run {run_id!r} on instance "
                               f"{instance_id!r} started at the same moment: replay an "
                               "instance once at a time") from None


def _hold_aside(store: ContextStore, run_id: str, instance_id: str,
                lease: ReplayLease) -> None:
    with store.write_transaction() as connection:
        decisions = models.decision.c
        leases = [dict(row) for row in connection.execute(select(models.replay_in_progress).where(
            models.replay_in_progress.c.run_id == run_id,
            models.replay_in_progress.c.instance_id == instance_id)).mappings()]
        live = next((lease for lease in leases if _under_way(lease)), None)
        if live is not None:  # (what it holds aside is the run's only earlier replay)
            raise ReplayClashError(
                f"another replay of run {run_id!r} on instance {instance_id!r} is under way "
                f"(host {live['host']}, pid {live['pid']}, started {live['started_at']}; "
                f"if it was stopped, its lease runs out at {live['expires_at']}): replay an "
                "instance once at a time")
        stale = [held_instance_id(lease["lease_id"]) for lease in leases]
        if stale:
            _delete_decisions(connection, [row[0] for row in connection.execute(
                select(decisions.decision_id).where(decisions.run_id == run_id,
                                                    decisions.instance_id.in_(stale)))])
        for table in HELD_REPLAY_TABLES:
            lease.held_rows.append((table, [dict(row._mapping) for row in connection.execute(
                select(table).where(table.c.run_id == run_id,
                                    table.c.instance_id == instance_id))]))
        for table in (*reversed(HELD_REPLAY_TABLES), models.replay_in_progress):
            connection.execute(delete(table).where(table.c.run_id == run_id,
                                                   table.c.instance_id == instance_id))
        connection.execute(update(models.decision).where(
            decisions.run_id == run_id, decisions.instance_id == instance_id).values(
            instance_id=held_instance_id(lease.lease_id)))
        # a whole earlier replay has its replay_run row (one stopped outright, decisions
        # alone: no replay to speak of)
        lease.holds_earlier = bool(dict(lease.held_rows)[models.replay_run])
        lease.claim(connection)


def _under_way(lease: Mapping[str, Any]) -> bool:
    """Whether the replay holding this ``replay_in_progress`` row may still be running:
    its lease has not run out, and it is no process of this host that has ended."""
    if lease["expires_at"] <= models.utc_timestamp():
        return False
    if lease["host"] != socket.gethostname():
        return True
    try:
        os.kill(lease["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def held_instance_id(lease_id: str) -> str:
    """The instance id a replay's earlier decisions are held aside under while the replay
    of lease ``lease_id`` runs (``replay_in_progress.lease_id``)."""
    return f"{HELD_INSTANCE_PREFIX}{lease_id}"


def _held_decisions(connection: Connection, lease: ReplayLease) -> list[int]:
    decisions = models.decision.c
    return [row[0] for row in connection.execute(select(decisions.decision_id).where(
        decisions.run_id == lease.run_id,
        decisions.instance_id == held_instance_id(lease.lease_id)))]


def _put_back_held(connection: Connection, lease: ReplayLease) -> None:
    """The earlier replay ``lease``'s replay held aside, back as it was; unless another
    replay of the run took the instance meanwhile (its lease is no longer this one's):
    that one replaces it, so what was held goes."""
    if not lease.holds(connection):
        _delete_decisions(connection, _held_decisions(connection, lease))
        return
    decisions = models.decision.c
    connection.execute(update(models.decision).where(
        decisions.run_id == lease.run_id,
        decisions.instance_id == held_instance_id(lease.lease_id)).values(
        instance_id=lease.instance_id))
    for table, rows in lease.held_rows:  # parents first
        if rows:
            connection.execute(table.insert(), rows)


def _delete_decisions(connection: Connection, decision_ids: list[int]) -> None:
    """Remove these decisions and every row of theirs."""
    if not decision_ids:
        return
    for table in reversed(models.metadata.sorted_tables):
        if table.name != "decision" and "decision_id" in table.c:
            connection.execute(delete(table).where(table.c.decision_id.in_(decision_ids)))
    connection.execute(delete(models.decision).where(
        models.decision.c.decision_id.in_(decision_ids)))


class ReplayClashError(RuntimeError):
    """Another replay of the same run and instance wrote into the store meanwhile."""


def _write_replay(store, run_id, spec, run, result, tree_lost_at, decision_rows, anchor_rows,
                  outcome_rows, made, lease) -> None:
    clash = ReplayClashError(
        f"another replay of run {run_id!r} on instance {spec.instance_id!r} wrote into this "
        "store while this one ran (its replay rows, or the decisions this one made, were "
        "taken); replay an instance once at a time — a replay again replaces it")
    try:
        _write_replay_rows(store, run_id, spec, run, result, tree_lost_at, decision_rows,
                           anchor_rows, outcome_rows, made, clash, lease)
    except IntegrityError:
        # its rows were taken, or its decisions removed, by a replay of the same run and
        # instance that started meanwhile (nothing of this one is written); any other
        # broken constraint is said as the database says it
        with store.engine.connect() as connection:
            taken = connection.execute(select(func.count()).select_from(
                models.replay_run).where(models.replay_run.c.run_id == run_id,
                                         models.replay_run.c.instance_id == spec.instance_id)
            ).scalar_one() or _decisions_kept(connection, made) != len(made)
        if taken:
            raise clash from None
        raise


def _write_replay_rows(store, run_id, spec, run, result, tree_lost_at, decision_rows,
                       anchor_rows, outcome_rows, made, clash, lease) -> None:
    with store.write_transaction() as connection:
        # a replay of the run that started meanwhile took this one's lease and held its
        # decisions aside, or removed some (SQLite does not hold the rows below to them)
        if not lease.holds(connection) or _decisions_kept(connection, made) != len(made):
            raise clash
        _delete_decisions(connection, _held_decisions(connection, lease))  # replaced now
        _ensure_replay_run(connection, store, run_id)
        connection.execute(models.replay_run.insert().values(
            run_id=run_id, instance_id=spec.instance_id, trajectory=str(spec.trajectory),
            trajectory_format=run.trajectory_format, resolved=spec.resolved,
            decisions=result.decisions, tree_matches_submission=result.tree_matches_submission,
            tree_lost_at_seq=tree_lost_at, tree_note=result.tree_note,
            rerun_seconds=round(result.rerun_seconds, 3),
            replay_seconds=round(result.replay_seconds, 3),
            created_at=_now()))
        lease.release(connection)
        for table, rows in ((models.replay_decision, decision_rows),
                            (models.replay_anchor, anchor_rows),
                            (models.replay_anchor_outcome, outcome_rows)):
            if rows:
                connection.execute(table.insert(), rows)


def _decisions_kept(connection: Connection, decision_ids: list[int]) -> int:
    """How many of these decisions the store still holds."""
    if not decision_ids:
        return 0
    return connection.execute(select(func.count()).select_from(models.decision).where(
        models.decision.c.decision_id.in_(decision_ids))).scalar_one()


def _ensure_replay_run(connection, store: ContextStore, run_id: str) -> None:
    """The store run the windows go under, made if absent (many workers may race to)."""
    connection.execute(models.insert_ignoring_duplicates(connection, models.run).values(
        run_id=run_id, arm=ARM_CTX08, created_at=_now(),
        settings_json=settings_json(store.settings), note=REPLAY_RUN_NOTE))


def check_replay_run_id(store: ContextStore, run_id: str) -> None:
    """Refuse a run id the store holds for something else: replaying a run deletes the
    run's earlier windows under that id, which must never be another run's decisions."""
    with store.engine.connect() as connection:
        row = connection.execute(select(models.run.c.note).where(
            models.run.c.run_id == run_id)).first()
    if row is not None and row.note != REPLAY_RUN_NOTE:
        raise ValueError(f"--run-id {run_id}: this store's run {run_id} is not a replay "
                         f"({row.note or 'no note'}); choose another run id")


def _now() -> str:
    return models.utc_timestamp()


# How long a replay's lease outlasts the step it covers beyond the step's command time
# limit: the step's windows, ablations and measures and a slow database's waits (under a
# second a step on the development runs). A replay stopped outright counts in `ctxdb
# verify` that long after its last step at the latest.
LEASE_SLACK_S = 300
# A step renews the lease only once this much of the slack is gone, so most steps write
# nothing more (every step then still starts with a command's time limit and half the
# slack ahead of it).
LEASE_RENEWED_AFTER_S = LEASE_SLACK_S / 2


@dataclass
class ReplayLease:
    """A replay's row in ``replay_in_progress``: written with the forgetting of the run's
    earlier replay, renewed as its steps go, removed with its rows or its undoing."""

    run_id: str
    instance_id: str
    lease_id: str
    timeout_s: float  # a step's command time limit, which each renewal covers
    renewed: float = 0.0  # time.monotonic() of the last write
    # the run's earlier replay rows, held aside (``_hold_aside_run``), parents first
    held_rows: list[tuple[Table, list[dict[str, Any]]]] = field(default_factory=list)
    holds_earlier: bool = False  # whether the run had an earlier replay to hold aside

    @classmethod
    def new(cls, run_id: str, instance_id: str, timeout_s: float) -> ReplayLease:
        return cls(run_id, instance_id, uuid.uuid4().hex, timeout_s)

    def _times(self) -> dict[str, str]:
        now = datetime.now(UTC)  # one moment for both
        self.renewed = time.monotonic()
        return {"renewed_at": models.utc_timestamp(now=now),
                "expires_at": models.utc_timestamp(self.timeout_s + LEASE_SLACK_S, now=now)}

    def claim(self, connection: Connection) -> None:
        times = self._times()
        connection.execute(models.replay_in_progress.insert().values(
            run_id=self.run_id, instance_id=self.instance_id, lease_id=self.lease_id,
            host=socket.gethostname(), pid=os.getpid(), started_at=times["renewed_at"],
            **times))

    def renew(self, store: ContextStore) -> None:
        """Renew the lease when half its slack is gone. A store too busy to take the write
        is no reason to fail the replay: the next step tries again, the lease still
        holding for a command's time limit."""
        if time.monotonic() - self.renewed < LEASE_RENEWED_AFTER_S:
            return
        # a replay of the run that started since took the row: the clash shows at the end
        with contextlib.suppress(StoreBusy), store.write_transaction() as connection:
            connection.execute(update(models.replay_in_progress).where(
                *self._row()).values(**self._times()))

    def holds(self, connection: Connection) -> bool:
        """Whether the run's row in ``replay_in_progress`` is still this lease's."""
        return connection.execute(select(func.count()).select_from(
            models.replay_in_progress).where(*self._row())).scalar_one() > 0

    def release(self, connection: Connection) -> None:
        connection.execute(delete(models.replay_in_progress).where(*self._row()))

    def _row(self) -> tuple:
        table = models.replay_in_progress
        return (table.c.run_id == self.run_id, table.c.instance_id == self.instance_id,
                table.c.lease_id == self.lease_id)


def _replay_job(db_url: str, spec: RunSpec, run_id: str, settings: Settings,
                work_dir: str | None, command_timeout_s: float | None) -> RunResult:
    """One worker's job: ``replay_run`` with its options by position."""
    return replay_run(db_url, spec, run_id=run_id, settings=settings, work_dir=work_dir,
                      command_timeout_s=command_timeout_s)


def run_replay(db_url: str, specs: list[RunSpec], *, run_id: str = DEFAULT_RUN_ID,
               workers: int = DEFAULT_WORKERS, settings: Settings | None = None,
               work_dir: str | None = None, command_timeout_s: float | None = None,
               progress: Callable[[int, int], None] | None = None) -> ReplaySummary:
    check_command_timeout(command_timeout_s)
    check_replay_run_id_text(run_id)
    settings = settings or load_settings()
    summary = ReplaySummary()
    if not specs:
        return summary
    remove_stale_sandbox_roots()  # what replays stopped outright left
    with ContextStore.open(db_url, settings=settings) as store:  # create or upgrade once
        check_replay_run_id(store, run_id)
        with store.write_transaction() as connection:
            _ensure_replay_run(connection, store, run_id)
    summary.results = run_each(
        _replay_job, [(db_url, spec, run_id, settings, work_dir, command_timeout_s)
                      for spec in specs], workers, progress)
    summary.results.sort(key=lambda r: r.instance_id)
    return summary
