"""``ctxdb replay``: recorded agent runs replayed, every decision beside what was sent."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ..workers import DEFAULT_WORKERS
from .shared import EXIT_BAD_INPUT, EXIT_OK, EXIT_VIOLATIONS, add_db_option, progress_callback

# a problem on more lines than this is named on the first ones, the rest counted (a list
# of SWE-bench's without repo_git has the same problem on every line)
SAME_PROBLEM_LINES_NAMED = 3


def register(commands: argparse._SubParsersAction) -> None:
    replay = commands.add_parser(
        "replay", help="replay recorded agent runs: every decision beside what the harness sent",
        description="For every decision of every recorded run (mini-swe-agent .traj.json, 1.x "
        "or 2.x), rebuild the working tree by re-running the run's commands in an isolated "
        "scratch copy of the base commit (no network, read-only outside the copy, a time "
        "limit), construct ctxdb's window, and write it beside the two reference arms "
        "(current: the harness's whole history; mask10: observations older than the 10 newest "
        "masked) and the window with each of its rules off (ctx08-without-RULE: what each rule "
        "buys), with what the agent's next action used. A progress bar on stderr when it is a "
        "terminal. Bad lines are named after the good ones have run (exit 2); a run that "
        "fails is named and left out of the store (exit 1).",
    )
    replay.add_argument("runs", metavar="RUNS.jsonl|RUN.traj.json",
                        help="one JSON object a line, with keys instance_id, trajectory "
                        "(relative to the file), base_commit, repo (OWNER/NAME), repo_git (its "
                        "git directory, or --repo-git for the repo) and optionally resolved "
                        "and testbed_setup (a shell command run in the fresh tree first); or "
                        "one trajectory with --tree")
    add_db_option(replay)
    replay.add_argument("--tree", metavar="DIR",
                        help="one run: a git checkout of its repository (its HEAD is the base "
                        "commit unless --base-commit says otherwise)")
    replay.add_argument("--base-commit", help="with --tree: the commit the run started from")
    replay.add_argument("--instance-id", help="with --tree: the run's instance (default: the "
                        "trajectory's instance_id, else its file name); with RUNS.jsonl: "
                        "replay that instance's line alone (a run a killed replay left "
                        "half done is replaced)")
    replay.add_argument("--run-id", default="replay",
                        help="the store run the windows are written under (default: replay)")
    replay.add_argument("--workers", type=int, default=None,
                        help="worker processes, for RUNS.jsonl (default: the CPUs this "
                        "process may use)")
    replay.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="each re-run command's time limit (default: the run's own, 60 s "
                        "in mini-swe-agent's SWE-bench config)")
    replay.add_argument("--limit", type=int, default=None, metavar="N",
                        help="replay only the runs of the first N lines of RUNS.jsonl (the "
                        "lines after them are neither checked nor replayed)")
    replay.add_argument("--repo-git", action="append", default=[], metavar="OWNER/NAME=DIR",
                        help="the git directory of a repository, for lines that name their "
                        "repo but no repo_git (SWE-bench's instance lists); repeatable")
    replay.set_defaults(func=_cmd_replay)


def _cmd_replay(args) -> int:
    """Exit 2 when the input is bad (each bad line named; the good ones run first), else
    1 when a run failed, else 0."""
    from ..agent.replay import (
        RunsFileError,
        check_replay_run_id_text,
        load_run_specs,
        replay_spec_for_tree,
        run_replay,
    )
    from ..agent.trajectory import MAX_COMMAND_TIMEOUT_S
    from ..db import discard_store_made_here, resolve_url, sqlite_file_of, stores_made_here

    source = Path(args.runs)
    repo_git: dict[str, str] = {}
    for given in args.repo_git:
        repo, _, directory = given.partition("=")
        if "/" not in repo or not directory:
            raise ValueError(f"--repo-git {given!r}: expected OWNER/NAME=DIR")
        repo_git[repo] = directory
    errors: list[str] = []
    if args.timeout is not None and not 0 < args.timeout <= MAX_COMMAND_TIMEOUT_S:
        raise ValueError(f"--timeout {args.timeout:g}: expected seconds above 0, at most "
                         f"{MAX_COMMAND_TIMEOUT_S}")
    check_replay_run_id_text(args.run_id)
    if args.workers is not None and args.workers < 1:
        raise ValueError("--workers: expected at least 1")
    if args.limit is not None and args.limit < 1:
        raise ValueError("--limit: expected at least 1")
    _check_options_apply(args)
    if args.tree is not None:
        if not source.name.endswith(".json"):
            raise ValueError(f"{source}: with --tree, expected one trajectory (.traj.json)")
        specs = [replay_spec_for_tree(source, Path(args.tree), args.base_commit,
                                      args.instance_id)]
    elif source.name.endswith(".jsonl"):
        try:
            specs, errors = load_run_specs(source, repo_git, limit=args.limit)
        except RunsFileError as exc:
            raise ValueError(str(exc)) from exc
    else:
        raise ValueError(f"{source}: expected RUNS.jsonl, or a .traj.json with --tree DIR")
    if args.tree is None and args.instance_id is not None:
        specs, errors = _of_instance(specs, errors, args.instance_id, source)
    url = resolve_url(args.db)
    store_file = sqlite_file_of(url)
    made_before = stores_made_here()
    workers = args.workers if args.workers is not None else DEFAULT_WORKERS
    summary = run_replay(url, specs, run_id=args.run_id, workers=workers,
                         command_timeout_s=args.timeout,
                         progress=progress_callback("replay", "runs"))
    for result in summary.failed:
        print(f"failed: {result.error}", file=sys.stderr)
    for error in _same_problems_counted(source, errors):
        print(f"ctxdb: error: {error}", file=sys.stderr)
    done = [r for r in summary.results if not r.error]
    matched = sum(1 for r in done if r.tree_matches_submission)
    unsubmitted = sum(1 for r in done if r.tree_matches_submission is None)
    without = f" ({unsubmitted} without a submission)" if unsubmitted else ""
    replaced = sum(1 for r in done if r.replaced)
    again = f", {replaced} replacing an earlier replay of the run" if replaced else ""
    if done:
        db = f" --db {shlex.quote(args.db)}" if args.db else ""
        after = f"`ctxdb report replay{db}` shows the arms."
        lost = sum(1 for r in done if r.tree_lost_at is not None)
        if lost:
            after += (f" {lost} run(s) lost their tree (a command ended otherwise than "
                      f"recorded): `ctxdb report replay_fidelity{db}` says from which "
                      "decision and why.")
    elif discard_store_made_here(store_file, made_before):  # a store this call made and left empty
        after = f"nothing was replayed: {store_file} was not kept."
    else:
        after = "nothing was replayed."
    print(f"replay (run id {args.run_id}): {len(done)} run(s) done{again}, "
          f"{sum(r.decisions for r in done)} decisions "
          f"({sum(r.refused_decisions for r in done)} refused); tree gives the "
          f"submitted patch in {matched} of {len(done)}{without}; {len(summary.failed)} failed, "
          f"{len(_bad_lines(source, errors))} bad line(s). {after}")
    if errors:
        return EXIT_BAD_INPUT
    return EXIT_VIOLATIONS if summary.failed else EXIT_OK


def _check_options_apply(args) -> None:
    """Refuse an option the mode given does not use: ignored, it would leave the user
    believing it held (a --base-commit without --tree, a --limit with one run)."""
    if args.tree is None:
        if args.base_commit is not None:
            raise ValueError("--base-commit: only with --tree (a runs line gives its own "
                             "base_commit)")
        if args.instance_id is not None and args.limit is not None:
            raise ValueError("--limit: not with --instance-id (that instance's line alone "
                             "is replayed)")
        return
    given = [name for name, value in (("--repo-git", args.repo_git),
                                      ("--limit", args.limit), ("--workers", args.workers))
             if value]
    if given:
        raise ValueError(f"{', '.join(given)}: only with RUNS.jsonl (--tree replays one "
                         "run, in this process, on the checkout given)")


def _of_instance(specs: list, errors: list[str], instance_id: str,
                 source: Path) -> tuple[list, list[str]]:
    """The runs file's lines of ``instance_id``, and the errors of its lines that name
    it (the other lines are not replayed, so their problems do not count); no line naming
    it is an error naming the nearest."""
    import difflib
    import json

    from ..request_limits import json_lines

    read = list(json_lines(source))
    named = {number for number, row, _ in read
             if isinstance(row, dict) and row.get("instance_id") == instance_id}
    # a line that is no JSON names it when its bytes hold it as a JSON string would
    unread = {number for number, _, why in read if why is not None}
    spelled = {json.dumps(instance_id).encode(),
               json.dumps(instance_id, ensure_ascii=False).encode()}
    named |= {number for number, raw in enumerate(source.read_bytes().split(b"\n"), start=1)
              if number in unread and any(spelling in raw for spelling in spelled)}
    chosen = [spec for spec in specs if spec.instance_id == instance_id]
    theirs = [error for error in errors if _line_and_problem(source, error)[0] in named]
    if not chosen and not theirs:
        near = difflib.get_close_matches(instance_id, [spec.instance_id for spec in specs],
                                         n=SAME_PROBLEM_LINES_NAMED)
        nearest = f" (the nearest: {', '.join(near)})" if near else ""
        raise ValueError(f"--instance-id {instance_id!r}: no line of {source} names "
                         f"it{nearest}")
    return chosen, theirs


def _line_and_problem(source: Path, error: str) -> tuple[int | None, str]:
    """``load_run_specs``' error ``SOURCE:LINE: PROBLEM`` apart (None: not of a line)."""
    prefix = f"{source}:"
    number, _, problem = error.removeprefix(prefix).partition(": ")
    if not error.startswith(prefix) or not number.isdigit():
        return None, error
    return int(number), problem


def _bad_lines(source: Path, errors: list[str]) -> set[int]:
    return {line for line, _ in (_line_and_problem(source, e) for e in errors)
            if line is not None}


def _same_problems_counted(source: Path, errors: list[str]) -> list[str]:
    """The errors in file order, each problem named on its first SAME_PROBLEM_LINES_NAMED
    lines and the lines after counted: 97 lines of one problem are read as one."""
    lines_of: dict[str, list[int]] = {}
    for error in errors:
        line, problem = _line_and_problem(source, error)
        if line is not None:
            lines_of.setdefault(problem, []).append(line)
    shown: list[str] = []
    for error in errors:
        line, problem = _line_and_problem(source, error)
        lines = lines_of.get(problem, [])
        if line is None or line in lines[:SAME_PROBLEM_LINES_NAMED]:
            shown.append(error)
        if len(lines) > SAME_PROBLEM_LINES_NAMED and line == lines[SAME_PROBLEM_LINES_NAMED - 1]:
            shown.append(f"{source}: and {len(lines) - SAME_PROBLEM_LINES_NAMED} more lines "
                         f"with the same problem as line {line} (the last: line {lines[-1]})")
    return shown
