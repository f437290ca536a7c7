"""Hostile recorded runs: each gives a clear error or a flagged step, nothing outside the
scratch copy changes, and nothing half-written is left in the store."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import threading
import time

import pytest
import sqlalchemy as sa

from ctxdb.agent.loop import ABLATIONS
from ctxdb.agent.replay import RunSpec, _same_patch, replay_run
from ctxdb.cli import main
from ctxdb.db import resolve_url

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"
COMMAND_TIMEOUT_S = 3


@pytest.fixture
def repository(tmp_path):
    """A tiny repository: (its git directory, the commit)."""
    work = tmp_path / "repo"
    (work / "pkg").mkdir(parents=True)
    (work / "pkg" / "mod.py").write_text("def total(items):\n    return sum(items)\n")
    env = {**os.environ, **GIT_ENV}
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        subprocess.run(["git", *args], cwd=work, check=True, env=env, capture_output=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, check=True,
                            capture_output=True, text=True).stdout.strip()
    return work, commit


def _trajectory(commands_and_outputs, submission: str = "") -> dict:
    messages = [{"role": "system", "content": "One bash block."},
                {"role": "user", "content": "<pr_description>\nFix total.\n</pr_description>"}]
    for command, output in commands_and_outputs:
        messages += [{"role": "assistant", "content": f"THOUGHT: go\n\n```bash\n{command}\n```"},
                     {"role": "user", "content": f"<returncode>0</returncode>\n<output>\n"
                                                 f"{output}</output>"}]
    messages += [{"role": "assistant", "content": f"THOUGHT: done\n\n```bash\n{SUBMIT}\n```"},
                 {"role": "user", "content": submission}]
    return {"trajectory_format": "mini-swe-agent-1", "messages": messages,
            "info": {"submission": submission, "config": {"environment": {"cwd": "/testbed"}}}}


def _replay(tmp_path, repository, trajectory: dict):
    path = tmp_path / "run.traj.json"
    path.write_text(json.dumps(trajectory), encoding="utf-8")
    work, commit = repository
    db = str(tmp_path / "store.db")
    result = replay_run(db, RunSpec(path, "hostile-1", work, commit),
                        command_timeout_s=COMMAND_TIMEOUT_S)
    return result, db


def _count(db: str, sql: str) -> int:
    engine = sa.create_engine(resolve_url(db))
    try:
        with engine.connect() as connection:
            return connection.execute(sa.text(sql)).scalar_one()
    finally:
        engine.dispose()


def test_commands_cannot_write_outside_the_copy_reach_the_network_or_outlive_their_limit(
        tmp_path, repository):
    outside = tmp_path / "outside.txt"
    outside.write_text("untouched\n")
    os.chmod(tmp_path, 0o777)  # the sandbox's user could write here, were it visible writable
    os.chmod(outside, 0o666)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    connections: list = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connections.append(listener.accept())
            except OSError:
                continue

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    marker = f"ctxdb-hostile-{os.getpid()}"
    started = time.monotonic()
    try:
        result, db = _replay(tmp_path, repository, _trajectory([
            (f"echo changed > {outside}; echo x > /etc/ctxdb-hostile; echo ok", "ok\n"),
            (f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}))\"",
             ""),
            (f"sleep 1000 # {marker}", ""),
            (f"(sleep 1000 # {marker}\n) & wait", ""),
            ("f(){ f | f & }; f", ""),
            ("sed -i 's/sum(items)/sum(items, 0)/' pkg/mod.py", ""),
        ], submission="(not the patch)\n"))
    finally:
        stop.set()
        acceptor.join()
        listener.close()
    assert result.error is None, result.error
    assert outside.read_text() == "untouched\n"
    assert not os.path.exists("/etc/ctxdb-hostile")
    assert connections == []
    # four commands at the limit, each ended with everything it started
    assert time.monotonic() - started < 4 * COMMAND_TIMEOUT_S + 60
    leftover = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert leftover.stdout.strip() == ""
    # the edit inside the copy did happen: the rebuilt tree differs from the submission
    # (it names no file), and the replay says so rather than failing
    assert result.tree_matches_submission is False
    assert result.tree_note.startswith("submission differs: files differ (extra "
                                       "['pkg/mod.py']"), result.tree_note
    assert _count(db, "SELECT COUNT(*) FROM replay_decision WHERE arm = 'ctx08'") == 7


def test_a_huge_observation_and_odd_text_are_decisions_not_failures(tmp_path, repository):
    huge = "x" * (10 * 1024 * 1024)
    result, db = _replay(tmp_path, repository, _trajectory([
        ("yes x | head -c 10485760", huge),
        ("printf 'caf\\xe9'", "caf\udce9 and a lone \ud800 surrogate"),
        ("cat pkg/mod.py", "def total(items):\n    return sum(items)\n"),
    ]))
    assert result.error is None, result.error
    assert result.decisions == 4 and result.refused_decisions == 0
    assert _count(db, "SELECT COUNT(*) FROM decision") == 4
    assert _count(db, "SELECT COUNT(*) FROM replay_decision") == 4 * (3 + len(ABLATIONS))


def test_a_bad_trajectory_is_refused_by_name_and_writes_nothing(tmp_path, repository, capsys):
    work, _commit = repository
    db = tmp_path / "store.db"
    for name, content in (("truncated.traj.json", b'{"messages": [{"role": "sys'),
                          ("binary.traj.json", b"\x00\xff\xfe garbage"),
                          ("empty.traj.json", b"")):
        path = tmp_path / name
        path.write_bytes(content)
        assert main(["replay", str(path), "--tree", str(work), "--db", str(db)]) == 2
        error = capsys.readouterr().err
        assert error.startswith("ctxdb: error: ") and str(path) in error
    assert not db.exists()
    assert main(["replay", str(tmp_path / "missing.traj.json"), "--tree", str(work),
                 "--db", str(db)]) == 2
    assert "missing.traj.json" in capsys.readouterr().err


def test_a_run_whose_edit_does_not_replay_is_flagged_from_that_step_on(tmp_path, repository):
    # recorded as succeeding, the edit of a file this tree lacks fails when re-run and
    # the tree ends otherwise than the run's: the trees after that edit are not known to
    # be the run's, and the replay goes on, flagged
    submitted = ("diff --git a/pkg/other.py b/pkg/other.py\n--- a/pkg/other.py\n"
                 "+++ b/pkg/other.py\n@@ -1 +1 @@\n-x\n+y\n")
    result, db = _replay(tmp_path, repository, _trajectory([
        ("cat pkg/mod.py", "def total(items):\n    return sum(items)\n"),
        ("sed -i 's/return sum(items)/return sum(items, 0)/' pkg/other.py", ""),
        ("cat pkg/mod.py", "def total(items):\n    return sum(items)\n"),
    ], submission=submitted))
    assert result.error is None and result.decisions == 4
    # the note says what the re-run said (its last line)
    assert result.tree_note.startswith(
        "command diverged: step 2 (exit 2, recorded 0: sed: can't read pkg/other.py: No such "
        "file or directory); submission differs"), result.tree_note
    assert _count(db, "SELECT tree_lost_at_seq FROM replay_run") == 3
    assert _count(db, "SELECT COUNT(*) FROM replay_decision WHERE arm = 'ctx08' "
                      "AND tree_known") == 2


def test_a_diverged_edit_whose_tree_still_ends_as_the_run_s_is_not_flagged(tmp_path,
                                                                          repository):
    # the edit happened, but the command's exit differs from the recording (here: a
    # check after it fails; in the development runs, a script needing a package this
    # machine lacks): the tree ends as the run's did, so no decision is flagged
    result, db = _replay(tmp_path, repository, _trajectory([
        ("sed -i 's/sum(items)/sum(items, 0)/' pkg/mod.py && false", ""),
    ], submission=_submission_after_edit(repository, tmp_path)))
    assert result.tree_matches_submission is True
    assert result.tree_note is None
    assert _count(db, "SELECT COUNT(*) FROM replay_run WHERE tree_lost_at_seq IS NULL") == 1
    assert _count(db, "SELECT COUNT(*) FROM replay_decision WHERE NOT tree_known") == 0


def test_blob_names_abbreviated_to_another_length_are_the_same_submission(tmp_path,
                                                                          repository):
    # the harness's clone held another count of objects than ours, so git printed the
    # `index OLD..NEW` names at another length (the recorded xarray runs: 8 digits, the
    # search tool's snapshot: 9): the same blobs, the same tree
    edit = [("sed -i 's/sum(items)/sum(items, 0)/' pkg/mod.py", "")]
    longer = _submission_after_edit(repository, tmp_path, abbrev=12)
    assert re.search(r"^index [0-9a-f]{12}\.\.[0-9a-f]{12} ", longer, re.MULTILINE)
    for name in ("longer", "other"):
        (tmp_path / name).mkdir()
    result, _db = _replay(tmp_path / "longer", repository, _trajectory(edit,
                                                                       submission=longer))
    assert result.tree_matches_submission is True, result.tree_note
    # a blob name that is not the other's start is another blob: another tree
    other_blob = re.sub(r"^(index [0-9a-f]{12}\.\.)([0-9a-f])",
                        lambda found: found[1] + ("0" if found[2] != "0" else "1"), longer,
                        flags=re.MULTILINE)
    assert other_blob != longer
    result, _db = _replay(tmp_path / "other", repository, _trajectory(
        edit, submission=other_blob))
    assert result.tree_matches_submission is False
    assert result.tree_note == "submission differs: same files, other lines"


PATCH = ("diff --git a/m.py b/m.py\nindex {old}..{new} {mode}\n--- a/m.py\n+++ b/m.py\n"
         "@@ -1 +1 @@\n-x\n+y\n")
SHORT = {"old": "45553eb9", "new": "b31fec62", "mode": "100644"}  # the harness's 8 digits
LONG = {"old": "45553eb9a1", "new": "b31fec62c0", "mode": "100644"}


@pytest.mark.parametrize(("recorded", "ours", "same"), [
    (SHORT, LONG, True), (LONG, SHORT, True),  # either side may be the longer
    (SHORT, {**LONG, "old": "55553eb9a1"}, False),  # another blob before
    (SHORT, {**LONG, "new": "c31fec62c0"}, False),  # another blob after
    (SHORT, {**LONG, "mode": "100755"}, False),  # another mode
])
def test_patches_compare_blob_names_up_to_the_shorter(recorded, ours, same):
    assert _same_patch(PATCH.format(**ours), PATCH.format(**recorded)) is same


def _submission_after_edit(repository, tmp_path, abbrev: int | None = None) -> str:
    work, commit = repository
    clone = tmp_path / "edited"
    subprocess.run(["git", "clone", "-q", str(work), str(clone)], check=True)
    subprocess.run(["sed", "-i", "s/sum(items)/sum(items, 0)/", "pkg/mod.py"], cwd=clone,
                   check=True)
    length = [f"--abbrev={abbrev}"] if abbrev else []
    return subprocess.run(["git", "diff", *length], cwd=clone, check=True,
                          capture_output=True, text=True).stdout


def test_git_config_a_command_writes_is_never_run_by_the_host(tmp_path, repository):
    # root on the host reads the tree with git after every command: a recorded command
    # that plants a command in the tree's git config (or points git elsewhere for it)
    # must not get it run there
    marker = tmp_path / "ran-on-the-host"
    evil = f"touch {marker}; echo"
    result, db = _replay(tmp_path, repository, _trajectory([
        (f"git config core.fsmonitor '{evil}' && git config diff.external '{evil}' && "
         f"git config filter.x.clean '{evil}' && echo '* filter=x diff=x' > .gitattributes "
         f"&& git config diff.x.textconv '{evil}' && echo change >> pkg/mod.py", ""),
        (f"mkdir -p /tmp/c && cp -r .git/. /tmp/c && echo /tmp/c > .git/commondir && "
         f"git config core.pager '{evil}'", ""),
        ("echo more >> pkg/mod.py", ""),
    ]))
    assert result.error is None, result.error
    assert not marker.exists()
    # the host still saw the edits the commands made
    assert _count(db, "SELECT COUNT(*) FROM replay_run WHERE tree_matches_submission") == 0


def test_a_long_run_masks_in_mask10_and_replays_beside_another_in_two_workers(
        tmp_path, repository, store_url):
    from ctxdb.agent.replay import run_replay

    work, commit = repository
    steps = [(f"cat pkg/mod.py # read {i}", f"def total(items):\n    return sum(items)  # {i}\n")
             for i in range(1, 13)]
    specs = []
    for name in ("long-1", "long-2"):
        path = tmp_path / f"{name}.traj.json"
        path.write_text(json.dumps(_trajectory(steps)), encoding="utf-8")
        specs.append(RunSpec(path, name, work, commit))
    db = store_url  # SQLite and PostgreSQL
    summary = run_replay(db, specs, workers=2, command_timeout_s=COMMAND_TIMEOUT_S)
    assert [r.error for r in summary.results] == [None, None]
    assert _count(db, "SELECT COUNT(*) FROM replay_run") == 2
    assert _count(db, "SELECT COUNT(*) FROM decision") == 2 * 13
    engine = sa.create_engine(resolve_url(db))
    with engine.connect() as connection:
        rows = {(r.seq, r.arm): r for r in connection.execute(sa.text(
            "SELECT seq, arm, prompt_tokens, cached_tokens FROM replay_decision "
            "WHERE instance_id = 'long-1'"))}
    engine.dispose()
    # up to 10 observations nothing is masked; at 11 the oldest is, and the cache breaks
    # at it: only the system prompt, the task and the first turn are still a prefix
    assert rows[(11, "mask10")].prompt_tokens == rows[(11, "current")].prompt_tokens
    assert rows[(12, "mask10")].prompt_tokens < rows[(12, "current")].prompt_tokens
    assert rows[(12, "current")].cached_tokens == rows[(11, "current")].prompt_tokens - 3
    assert rows[(12, "mask10")].cached_tokens < rows[(11, "mask10")].prompt_tokens / 2


def test_a_run_id_the_store_holds_for_something_else_is_refused(tmp_path, repository):
    from ctxdb.store import ContextStore

    db = str(tmp_path / "store.db")
    with ContextStore.open(db) as store, store.write_transaction() as connection:
        connection.execute(sa.text("INSERT INTO run (run_id, arm, created_at) "
                                   "VALUES ('ab/ctx08/default', 'ctx08', 'now')"))
    path = tmp_path / "run.traj.json"
    path.write_text(json.dumps(_trajectory([("ls", "pkg\n")])), encoding="utf-8")
    work, commit = repository
    result = replay_run(db, RunSpec(path, "hostile-1", work, commit), run_id="ab/ctx08/default")
    assert "--run-id ab/ctx08/default: this store's run ab/ctx08/default is not a replay" \
        in result.error
    assert _count(db, "SELECT COUNT(*) FROM replay_run") == 0


def test_an_anchor_only_an_earlier_run_of_the_same_command_held_is_kept(tmp_path, repository):
    # the same command twice: the older output held the word the next command uses. The
    # loop window does not drop an output because a re-run followed it (it was the
    # pipeline's P6 rule, which lost such words as stale): every arm keeps it
    result, db = _replay(tmp_path, repository, _trajectory([
        ("python3 check.py", "Traceback (most recent call last):\nValueError: quux_total\n"),
        ("python3 check.py", "all fine\n"),
        ("grep -rn quux_total pkg", ""),
    ]))
    assert result.error is None, result.error
    engine = sa.create_engine(resolve_url(db))
    with engine.connect() as connection:
        outcomes = {(r.arm, bool(r.kept), r.fate) for r in connection.execute(sa.text(
            "SELECT o.arm, o.kept, o.fate FROM replay_anchor_outcome o JOIN replay_anchor a "
            "USING (run_id, instance_id, seq, anchor_no) WHERE a.anchor_text = 'quux_total'"))}
    engine.dispose()
    assert {("current", True, None), ("mask10", True, None), ("ctx08", True, None)} <= outcomes
    assert all(kept for _arm, kept, _fate in outcomes)
