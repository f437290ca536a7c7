"""Contention and bounded work (issue 14): the write transaction only writes, a busy lock
is waited out or refused as StoreBusy with nothing written, PostgreSQL's deadlock victim
is run again, and token counting stays bounded on a long unbroken run."""

from __future__ import annotations

import os
import random
import re
import sqlite3
import string
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from requests_data import TOTAL_BODY, edit_request
from sqlalchemy import create_engine, text

import ctxdb.pipeline.construct as construct_module
import ctxdb.pipeline.persist as persist_module
import ctxdb.tokens as tokens_module
from ctxdb import ContextStore, RequestError, StoreBusy, models
from ctxdb.pipeline.vocabulary import TOKENS_BOUNDED_FLAG
from ctxdb.request import TASK_MAX_CHARS
from ctxdb.tokens import (
    COUNT_EXACT_MAX_CHARS,
    LONG_RUN_CHARS,
    bounded_count,
    content_sha256,
    get_counter,
    has_long_run,
)
from ctxdb.transactions import WriteRetry

# What a test's polling loop waits for another session at most (a bound that fails the
# test if the awaited state never comes, not a timing assertion).
POLL_LIMIT_S = 60
# Small retry budgets, so a refusal comes at once.
QUICK_LOCK_WAIT_MS = 20
QUICK_JITTER_MS = 5
# the WAL file's layout (https://www.sqlite.org/fileformat.html, "WAL File Format"): a
# header, then frames of a header and one page each
WAL_HEADER_BYTES = 32
WAL_FRAME_HEADER_BYTES = 24


@dataclass(frozen=True)
class ReleasingRetry(WriteRetry):
    """A retry budget whose first pause ends another session's transaction: the lock is
    held exactly through the first attempt."""

    holder: sqlite3.Connection | None = None

    def pause(self, attempt: int) -> None:
        if self.holder is not None and self.holder.in_transaction:
            self.holder.rollback()
        super().pause(attempt)


def _holding_the_write_lock(path) -> sqlite3.Connection:
    holder = sqlite3.connect(path, timeout=0, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def _rows(store, table: str) -> int:
    with store.engine.connect() as connection:
        return connection.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one()


def test_a_decision_waits_out_a_write_lock_held_through_its_first_attempt(tmp_path):
    path = tmp_path / "ctx08.db"
    with ContextStore.open(path) as store:
        holder = _holding_the_write_lock(path)
        try:
            store.write_retry = ReleasingRetry(attempts=3, lock_wait_ms=QUICK_LOCK_WAIT_MS,
                                               jitter_ms=QUICK_JITTER_MS, holder=holder)
            context = store.construct(edit_request())
        finally:
            holder.close()
        assert store.write_retries == 1  # the first BEGIN IMMEDIATE was refused
        assert context.window and _rows(store, "decision") == 1


def test_a_write_lock_held_past_the_retry_budget_is_store_busy_and_nothing_is_written(tmp_path):
    path = tmp_path / "ctx08.db"
    with ContextStore.open(path) as store:
        store.write_retry = WriteRetry(attempts=3, lock_wait_ms=QUICK_LOCK_WAIT_MS,
                                       jitter_ms=QUICK_JITTER_MS)
        holder = _holding_the_write_lock(path)
        try:
            with pytest.raises(StoreBusy) as caught:
                store.construct(edit_request())
        finally:
            holder.close()
        message = str(caught.value)
        assert "3 attempts" in message and f"{QUICK_LOCK_WAIT_MS} ms" in message
        assert "nothing was written" in message
        assert caught.value.attempts == 3 and caught.value.waited_s > 0
        assert isinstance(caught.value, TimeoutError)
        for table in ("run", "decision", "evidence_item", "evidence_text", "item_event",
                      "window_item", "token_count_cache"):
            assert _rows(store, table) == 0, table
        # once the lock is free the same request goes through
        assert store.construct(edit_request()).window


def test_no_write_lock_is_held_while_the_decision_renders_and_counts(tmp_path, monkeypatch):
    """While the stages run (rendering, budgeting and its token counting), another
    connection that will not wait at all takes the write lock and commits."""
    path = tmp_path / "ctx08.db"
    writes_during = []

    def write_from_another_connection(stage: str) -> None:
        other = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # raises 'database is locked' if held
            other.execute("INSERT INTO token_count_cache (tokenizer, content_sha256, token_count)"
                          " VALUES ('cl100k_base', ?, 1)", (f"{len(writes_during):064d}",))
            other.execute("COMMIT")
            writes_during.append(stage)
        finally:
            other.close()

    def during(stage, function):
        def wrapped(*args, **kwargs):
            write_from_another_connection(stage)
            return function(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(construct_module, "render", during("render", construct_module.render))
    monkeypatch.setattr(construct_module, "fit_budget",
                        during("budget", construct_module.fit_budget))
    monkeypatch.setattr(construct_module, "count_cached",
                        during("count", construct_module.count_cached))
    with ContextStore.open(path) as store:
        context = store.construct(edit_request())
        assert context.window and _rows(store, "decision") == 1
    assert {"render", "budget", "count"} <= set(writes_during)


def test_the_gate_preview_takes_no_write_lock(tmp_path, monkeypatch):
    """Another session holds the write lock while the decision's gate runs on its
    preview rows: the gate's verdicts come all the same, and the write waits for the
    lock only afterwards."""
    path = tmp_path / "ctx08.db"
    with ContextStore.open(path) as store:
        holder = _holding_the_write_lock(path)
        previewed = []

        def preview_gate(*args, **kwargs):
            assert holder.in_transaction  # the lock is still the other session's
            attempt = original(*args, **kwargs)
            previewed.append({e.item_id for e in attempt.audit.events if e.stage == "gate"})
            return attempt

        original = construct_module.preview_gate
        monkeypatch.setattr(construct_module, "preview_gate", preview_gate)
        store.write_retry = ReleasingRetry(attempts=3, lock_wait_ms=QUICK_LOCK_WAIT_MS,
                                           jitter_ms=QUICK_JITTER_MS, holder=holder)
        try:
            context = store.construct(edit_request())
        finally:
            holder.close()
        assert len(previewed) == 1 and len(previewed[0]) == _rows(store, "evidence_item")
        assert context.window and _rows(store, "decision") == 1


def test_the_previews_tables_hold_what_the_gate_reads_and_the_write_copies(tmp_path):
    """The preview's TEMP copies: every column of evidence_item that v_gate_rule reads (as
    ``e.<column>``) and every one the write copies; every table the preview's view reads
    is a preview copy or one the preview does not write."""
    view = (Path(__file__).resolve().parents[1] / "sql" / "views" / "20_v_gate_rule.sql")
    read_by_gate = set(re.findall(r"\be\.(\w+)", view.read_text()))
    stored = {c.name for c in models.evidence_item.columns}
    assert read_by_gate and read_by_gate <= stored
    with ContextStore.open(tmp_path / "ctx08.db") as store:
        copied, view_sql = store.preview(lambda connection: (
            [row[1] for row in connection.exec_driver_sql(
                "PRAGMA temp.table_info(preview_evidence_item)")],
            connection.exec_driver_sql(
                "SELECT sql FROM sqlite_temp_master WHERE name = ?",
                (models.PREVIEW_GATE_VIEW,)).scalar_one()))
    assert set(copied) == stored
    statement = re.sub(r"--[^\n]*", "", view_sql)  # its comments' words are no tables
    read = set(re.findall(r"\b(?:FROM|JOIN)\s+(\w+)", statement, re.IGNORECASE))
    copies = {copy.name for copy in models.PREVIEW_TABLES.values()}
    assert read - copies == {"source_priority", "gate_link_policy"}
    assert read & copies == copies


def _window(context) -> list[tuple[str, str]]:
    return [(entry.item_id, entry.text) for entry in context.window]


def test_a_policy_changed_during_the_decision_is_the_one_it_is_decided_by(tmp_path,
                                                                          monkeypatch):
    """Another session changes the policy after the preview — the tests the decision
    reasons over shown as signatures, not bodies: the write sees the changed policy rows
    and decides again under the lock, so the window is the one the new policy gives.
    (Dropping a gate link kind would not show here: the fixture's items it admitted are
    near enough to the obligation to be folded in from the residue.)"""
    tests_as_signatures = text(
        "UPDATE representation_policy SET rendering = 'signature'"
        " WHERE policy_set = 'spec' AND role = 'test_reasoned_over'")
    with ContextStore.open(tmp_path / "before.db") as store:
        unchanged = _window(store.construct(edit_request()))
    with ContextStore.open(tmp_path / "changed.db") as store:
        with store.write_transaction() as connection:
            connection.execute(tests_as_signatures)
        expected = _window(store.construct(edit_request()))
    assert expected != unchanged  # the policy change shows in the window

    with ContextStore.open(tmp_path / "during.db") as store:
        original = construct_module.prepare

        def prepare_then_change_policy(store_, inputs, ranking_on, connection=None):
            preview = original(store_, inputs, ranking_on, connection)
            with store_.write_transaction() as connection:
                connection.execute(tests_as_signatures)
            return preview

        monkeypatch.setattr(construct_module, "prepare", prepare_then_change_policy)
        context = store.construct(edit_request())
        assert _window(context) == expected
        # the window decided again is the one stored: its texts, not the preview's
        assert store.context(context.decision_id).window == context.window
        assert store.verify() == {}



@pytest.mark.parametrize("stage", ["write_preview_inputs", "run_gate"])
def test_a_policy_changed_during_the_preview_is_the_one_the_decision_is_decided_by(
        tmp_path, monkeypatch, stage):
    """Another session changes the policy inside the preview — after the preview read it,
    before (or after) its gate: the write still finds it changed (the preview took the
    store's data_version before reading the policy) and decides by the new rows."""
    tests_as_signatures = text(
        "UPDATE representation_policy SET rendering = 'signature'"
        " WHERE policy_set = 'spec' AND role = 'test_reasoned_over'")
    with ContextStore.open(tmp_path / "changed.db") as store:
        with store.write_transaction() as connection:
            connection.execute(tests_as_signatures)
        expected = _window(store.construct(edit_request()))
    with ContextStore.open(tmp_path / "during.db") as store:
        module = persist_module if stage == "write_preview_inputs" else construct_module
        original = getattr(module, stage)
        changed = []

        def then_change_policy(*args, **kwargs):
            result = original(*args, **kwargs)
            if not changed:
                changed.append(True)
                with store.write_transaction() as connection:
                    connection.execute(tests_as_signatures)
            return result

        monkeypatch.setattr(module, stage, then_change_policy)
        assert _window(store.construct(edit_request())) == expected
        assert changed and store.verify() == {}

def test_the_write_reads_the_policy_again_only_when_another_connection_committed(
        tmp_path, monkeypatch):
    """On a SQLite file store the preview and the write share the decision's connection:
    the same data_version under the write lock means no one committed since the preview
    read the policy rows, so they are not read again; any commit in between (here an
    unrelated one) and they are."""
    reads = []
    original = construct_module.read_policy

    def counted(connection, request):
        reads.append(request.seq)
        return original(connection, request)

    monkeypatch.setattr(construct_module, "read_policy", counted)
    with ContextStore.open(tmp_path / "store.db") as store:
        store.construct(edit_request())
        assert len(reads) == 1
        prepare = construct_module.prepare

        def prepare_then_commit(store_, inputs, ranking_on, connection=None):
            preview = prepare(store_, inputs, ranking_on, connection)
            with store_.write_transaction() as other:
                other.execute(text("INSERT INTO token_count_cache VALUES ('t', 'd', 1)"))
            return preview

        monkeypatch.setattr(construct_module, "prepare", prepare_then_commit)
        store.construct(edit_request(seq=2))
        assert len(reads) == 3
        assert store.verify() == {}

# -- bounded token counting ----------------------------------------------------------------

def _run(rng: random.Random, alphabet: str, length: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(length))


def test_a_200k_character_word_is_counted_bounded_and_flagged_as_such():
    counter = get_counter()
    word = _run(random.Random(14), string.ascii_letters, 200_000)
    counted = counter.count(word)
    assert has_long_run(word)
    slices = [word[i:i + LONG_RUN_CHARS] for i in range(0, len(word), LONG_RUN_CHARS)]
    assert counted == sum(map(counter.count_exact, slices)) + len(slices) - 1
    # cl100k_base: random letters are 1.5-4 characters a token
    assert len(word) / 4 < counted < len(word) / 1.5


@pytest.mark.parametrize("alphabet", [string.ascii_letters, string.digits, "=-+*/#",
                                      string.ascii_lowercase + "_", " ", "a"])
def test_a_long_run_counted_in_slices_is_an_upper_bound_close_to_the_exact_count(alphabet):
    counter = get_counter()
    rng = random.Random(alphabet)
    for length in (LONG_RUN_CHARS, 3 * LONG_RUN_CHARS + 17, 9 * LONG_RUN_CHARS):
        text_ = "def f():\n    return " + _run(rng, alphabet, length) + "\n# end\n"
        cuts = -(-length // LONG_RUN_CHARS) + 1  # the run's slices, the code on each side
        exact, bounded = counter.count_exact(text_), counter.count(text_)
        assert exact <= bounded <= exact + 3 * cuts, (length, exact, bounded)


def test_ordinary_text_is_counted_exactly_as_before():
    counter = get_counter()
    ordinary = (TOTAL_BODY * 400) + " ".join(["word"] * 5000) + " " + "x" * (LONG_RUN_CHARS - 1)
    assert not has_long_run(ordinary)
    assert counter.count(ordinary) == counter.count_exact(ordinary)
    assert bounded_count(len, ordinary) == len(ordinary)


# the whitespace str.isspace and the regex's \s agree on, beyond ASCII's
UNICODE_SPACES = " \n\t\x1c\u00a0\u2028\u3000"


def test_the_long_run_probe_finds_what_the_regex_finds_at_every_offset_and_length():
    rng = random.Random(24)
    for offset in range(0, 2 * LONG_RUN_CHARS, 37):
        for length in (LONG_RUN_CHARS - 1, LONG_RUN_CHARS, LONG_RUN_CHARS + 1):
            for alphabet in ("ab\u00e9\u4e2d_(", UNICODE_SPACES):
                other = UNICODE_SPACES if alphabet != UNICODE_SPACES else "xy"
                # short runs of the other kind around it, so no longer run forms there
                head = "".join(rng.choice(other) if n % 3 == 0 else rng.choice(alphabet)
                               for n in range(offset))
                text_ = head + rng.choice(other) + _run(rng, alphabet, length) + \
                    rng.choice(other) + "tail end"
                expected = tokens_module._LONG_RUN.search(text_) is not None
                assert has_long_run(text_) is expected, (offset, length, repr(alphabet))
                assert expected is (length >= LONG_RUN_CHARS)


def test_text_with_no_long_run_is_never_searched_by_the_regex(monkeypatch):
    searched = []

    class Spy:
        def search(self, text_):
            searched.append(len(text_))
            return None

    monkeypatch.setattr(tokens_module, "_LONG_RUN", Spy())
    assert not has_long_run(TOTAL_BODY * 400)  # code: the probe alone says no
    assert searched == []
    has_long_run("w" * LONG_RUN_CHARS)  # a chunk with no space: the regex decides
    assert searched == [LONG_RUN_CHARS]


def test_a_text_past_the_exact_counting_limit_counts_as_its_bytes():
    counter = get_counter()
    text_ = "naïve café " * (COUNT_EXACT_MAX_CHARS // 10)
    assert len(text_) > COUNT_EXACT_MAX_CHARS
    assert counter.count(text_) == len(text_.encode("utf-8")) > counter.count_exact(text_)


def test_the_longest_task_is_cut_to_fit_and_a_longer_one_refused(tmp_path):
    """The request limit keeps a task under the exact-counting limit (a 10 MB task is
    refused by name before anything is counted); the longest allowed is cut to fit."""
    assert TASK_MAX_CHARS < COUNT_EXACT_MAX_CHARS
    longest = ("Fix the discount. " * (TASK_MAX_CHARS // 18 + 1))[:TASK_MAX_CHARS]
    with ContextStore.open(tmp_path / "ctx08.db") as store:
        context = store.construct(edit_request(task=longest, token_ceiling=2_000))
        assert "task_truncated" in context.flags
        assert context.token_count <= context.ceiling
        assert get_counter().count_exact(context.render()) <= context.ceiling
        with pytest.raises(RequestError, match="request.task: expected at most"):
            store.construct(edit_request(task="x" * (10 * 1024 * 1024)))


def test_a_task_that_is_one_long_word_gives_a_bounded_flagged_decision(store_url):
    task = _run(random.Random(2), string.ascii_letters, 30_000)
    with ContextStore.open(store_url) as store:
        context = store.construct(edit_request(task=task))
    assert TOKENS_BOUNDED_FLAG in context.flags
    assert context.token_count <= context.ceiling


def test_an_ordinary_decision_is_not_flagged(store_url):
    with ContextStore.open(store_url) as store:
        assert TOKENS_BOUNDED_FLAG not in store.construct(edit_request()).flags


# -- PostgreSQL: a deadlock's victim is run again -----------------------------------------

def test_postgresql_runs_a_deadlocked_decision_again(pg_url):
    """Another session inserts one of the decision's texts and, once the decision waits
    on it, the decision's new run: a real deadlock, detected by the decision's backend
    (the other session's detector waits far longer). The store rolls back, pauses and
    runs the transaction again; the decision is written once."""
    request = edit_request(run_id="run-deadlock")
    with ContextStore.open(pg_url) as store:
        other_engine = create_engine(pg_url)
        outcome = {}
        try:
            with other_engine.connect() as other:
                other.execute(text("SET deadlock_timeout = '60s'"))
                other.execute(text(
                    "INSERT INTO evidence_text (content_sha256, content) VALUES (:d, :c)"),
                    {"d": content_sha256(TOTAL_BODY), "c": TOTAL_BODY})
                other_pid = other.execute(text("SELECT pg_backend_pid()")).scalar_one()

                def decide():
                    try:
                        outcome["context"] = store.construct(request)
                    except BaseException as exc:  # reported to the test thread
                        outcome["error"] = exc

                worker = threading.Thread(target=decide)
                worker.start()
                _wait_for_a_lock_wait(other_engine, other_pid)
                other.execute(text(  # waits on the decision's uncommitted run: a cycle
                    "INSERT INTO run (run_id, arm, variant, created_at)"
                    " VALUES ('run-deadlock', 'ctx08', 'spec', 'test')"))
                other.rollback()
                worker.join(POLL_LIMIT_S)
        finally:
            other_engine.dispose()
        assert "error" not in outcome, outcome.get("error")
        assert outcome["context"].window
        assert store.write_retries >= 1
        assert _rows(store, "decision") == 1 and _rows(store, "run") == 1


def _wait_for_a_lock_wait(engine, other_pid: int) -> None:
    """Until a backend other than ``other_pid`` waits on a lock."""
    deadline = time.monotonic() + POLL_LIMIT_S
    with engine.connect() as watcher:
        watcher.execution_options(isolation_level="AUTOCOMMIT")
        while time.monotonic() < deadline:
            waiting = watcher.execute(text(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND pid <> :other AND datname = current_database()"),
                {"other": other_pid}).scalar_one()
            if waiting:
                return
            time.sleep(0.01)
    raise AssertionError("the decision never waited on the other session's text")


def test_the_store_checkpoints_its_wal_outside_the_lock(tmp_path):
    """SQLite's automatic checkpoint is off on a store's connections (it would run inside
    a decision's COMMIT); the store checkpoints after a commit that leaves the WAL
    WAL_CHECKPOINT_PAGES long instead, so the WAL stays that long plus a decision, not the
    length of every decision."""
    from ctxdb.transactions import WAL_CHECKPOINT_PAGES

    db = tmp_path / "ctx08.db"
    wal = tmp_path / "ctx08.db-wal"
    with ContextStore.open(db) as store:
        with store.engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar() == 0
            page_size = connection.exec_driver_sql("PRAGMA page_size").scalar()
        store.construct(edit_request(run_id="w0"))
        first = wal.stat().st_size
        store.construct(edit_request(run_id="w1"))
        per_decision = wal.stat().st_size - first
        assert per_decision > 0
        # enough decisions to fill the WAL three times over without the checkpoints
        decisions = 3 * WAL_CHECKPOINT_PAGES * page_size // per_decision
        for number in range(2, decisions):
            store.construct(edit_request(run_id=f"w{number}"))
        frame_size = page_size + WAL_FRAME_HEADER_BYTES
        assert wal.stat().st_size <= WAL_HEADER_BYTES + frame_size * WAL_CHECKPOINT_PAGES \
            + 2 * per_decision


def test_the_wal_length_the_store_reads_is_sqlites_own(tmp_path):
    """transactions.wal_frames reads the WAL's length from its file's size: the number of
    frames SQLite's own checkpoint reports as the log's length, and again after a
    checkpoint and the reset that follows it (journal_size_limit truncates the file)."""
    from ctxdb.db import sqlite_driver
    from ctxdb.transactions import WAL_CHECKPOINT_PAGES, wal_frames

    db = tmp_path / "ctx08.db"
    wal = f"{db}-wal"
    with ContextStore.open(db) as store, store.engine.connect() as connection:
        driver = sqlite_driver(connection)
        page_size = driver.execute("PRAGMA page_size").fetchone()[0]
        for round_no in range(2):  # the second round after a checkpoint reset the WAL
            for number in range(3):
                store.construct(edit_request(run_id=f"f{round_no}-{number}"))
            frames = wal_frames(wal, page_size)
            assert 0 < frames < WAL_CHECKPOINT_PAGES
            busy, log_frames, checkpointed = driver.execute(
                "PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            assert (busy, frames) == (0, log_frames) and checkpointed == log_frames
    # no WAL file: nothing to checkpoint
    assert wal_frames(str(tmp_path / "missing.db-wal"), page_size) == 0


def test_the_store_never_opens_sqlites_own_files(tmp_path, monkeypatch):
    """Closing any descriptor of a file drops every POSIX lock the process holds on it,
    SQLite's included (its -shm's dead-man lock: another process would then rebuild the
    wal-index under this one's feet). The store reads the WAL's length by stat alone."""
    import builtins

    opened = []
    real_open, real_os_open = builtins.open, os.open

    def recording_open(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    def recording_os_open(path, *args, **kwargs):
        opened.append(str(path))
        return real_os_open(path, *args, **kwargs)

    db = tmp_path / "ctx08.db"
    with ContextStore.open(db) as store:
        store.construct(edit_request(run_id="warm"))
        monkeypatch.setattr(builtins, "open", recording_open)
        monkeypatch.setattr(os, "open", recording_os_open)
        for number in range(3):
            store.construct(edit_request(run_id=f"o{number}"))
    assert not [path for path in opened if path.startswith(str(db))]


def test_opening_a_store_again_keeps_the_locks_of_the_open_one(tmp_path):
    """POSIX locks belong to the process, and closing any descriptor of a file drops all
    of them. Opening a store must not open and close the file itself while this process
    has connections on it: another process's last close would then get the lock that
    says no one else is connected, checkpoint and delete the WAL under the open store's
    feet (seen as 'database disk image is malformed' with several ab run workers)."""
    db = tmp_path / "ctx08.db"
    wal = tmp_path / "ctx08.db-wal"
    with ContextStore.open(db) as first:
        first.construct(edit_request(run_id="first"))
        with ContextStore.open(db) as second:
            second.construct(edit_request(run_id="second"))
        # another process connects and goes: it must see that this one still is connected
        subprocess.run([sys.executable, "-c", _CONNECT_AND_CLOSE, str(db)], check=True)
        assert wal.exists(), "another process's close took the store from under its connections"
        first.construct(edit_request(run_id="third"))
    with ContextStore.open(db) as store:
        assert _rows(store, "decision") == 3


# what a process that only looks at a store does: connect, read, close
_CONNECT_AND_CLOSE = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1])
connection.execute("SELECT COUNT(*) FROM sqlite_master").fetchall()
connection.close()
"""


CHECK_WIDENED_S = 0.3  # how long each writer dwells after its step-is-new check
BARRIER_WAIT_S = 30  # a writer that never comes to the start fails the test, not hangs it


def test_two_loops_writing_one_step_of_one_run_at_once_take_turns(store_url, monkeypatch):
    """Two writers of step 2 of one run and instance, with other histories, at once: the
    check that the step is new runs under the run's lock (SQLite's write lock; a
    PostgreSQL advisory lock), so the second sees the first's step and is refused —
    widened here by a pause after each check, which would let both through without it."""
    import ctxdb.agent.adapter as adapter_module
    from ctxdb.agent.loop import LoopStep

    checked = adapter_module._check_step_is_new

    def slow_check(*args, **kwargs):
        checked(*args, **kwargs)
        time.sleep(CHECK_WIDENED_S)

    monkeypatch.setattr(adapter_module, "_check_step_is_new", slow_check)
    prefix = [{"role": "system", "content": "You are a bash agent."},
              {"role": "user", "content": "Fix it."}]
    start = threading.Barrier(2)
    outcomes: dict[str, object] = {}

    def writer(name: str) -> None:
        try:
            with ContextStore.open(store_url) as store:
                start.wait(BARRIER_WAIT_S)
                outcomes[name] = adapter_module.construct_step(
                    store, run_id="shared", instance_id="i", task="t", prefix=prefix,
                    steps=[LoopStep(f"echo {name}", f"{name}\n")]).decision_id
        except RequestError as exc:
            outcomes[name] = exc
        except BaseException as exc:  # said below, not left to hang the other at the barrier
            outcomes[name] = f"failed: {exc!r}"
            start.abort()

    threads = [threading.Thread(target=writer, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not [o for o in outcomes.values() if isinstance(o, str)], outcomes
    refused = [o for o in outcomes.values() if isinstance(o, RequestError)]
    assert len(refused) == 1, outcomes
    assert str(refused[0]).startswith("seq: the store already holds step 2 of run 'shared'")
    with ContextStore.open(store_url) as store, store.engine.connect() as connection:
        assert connection.exec_driver_sql(
            "SELECT COUNT(*) FROM decision WHERE run_id = 'shared'").scalar() == 1


# Rounds of two threads opening one new store at once: the old code lost about one
# round in a hundred to "database is locked".
NEW_STORE_ROUNDS = 300


def test_two_connections_opening_one_new_store_at_once_both_open(tmp_path):
    """Two workers opening a new store at once both switch it to WAL; SQLite refuses the
    second switch at once ("database is locked", without its busy handler): it is tried
    again until the busy timeout."""
    failures: list[str] = []

    def opener(path: str, start: threading.Barrier) -> None:
        start.wait()
        try:
            ContextStore.open(path).close()
        except Exception as exc:  # any failure is the finding
            failures.append(f"{path}: {exc!r}")

    for round_no in range(NEW_STORE_ROUNDS):
        both = (str(tmp_path / f"new-{round_no}.db"), threading.Barrier(2))
        threads = [threading.Thread(target=opener, args=both) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []
