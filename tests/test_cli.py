"""The command line: every command documents itself; operators' db commands work."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from ctxdb.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_VIOLATIONS, build_parser, main
from ctxdb.migrate import head_revision


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                assert helps.get(name), f"`ctxdb {' '.join(path + (name,))}` has no help line"
                yield from _walk(sub, path + (name,))


def test_every_command_has_help_text():
    commands = list(_walk(build_parser()))
    assert len(commands) > 5
    for path, parser in commands:
        assert parser.description or parser.prog, path
        for action in parser._actions:
            if action.dest not in ("help",) and not isinstance(action, argparse._SubParsersAction):
                assert action.help, f"option {action.dest} of `ctxdb {' '.join(path)}` has no help"


def test_db_upgrade_and_current(tmp_path, capsys):
    db = str(tmp_path / "ops.db")
    Path(db).touch()  # an empty SQLite database: no schema yet
    assert main(["db", "current", "--db", db]) == EXIT_OK
    assert "(empty)" in capsys.readouterr().out
    assert main(["db", "upgrade", "--db", db]) == EXIT_OK
    assert f"-> {head_revision()}" in capsys.readouterr().out
    assert main(["db", "current", "--db", db]) == EXIT_OK
    assert f"{head_revision()} (head)" in capsys.readouterr().out


def test_verify_exit_status(tmp_path, capsys):
    db = tmp_path / "v.db"
    assert main(["db", "upgrade", "--db", str(db)]) == EXIT_OK
    assert main(["verify", "--db", str(db)]) == EXIT_OK
    import sqlite3

    with sqlite3.connect(db) as connection:
        connection.execute("DROP VIEW v_decision_overview")
        connection.execute("CREATE VIEW v_decision_overview AS SELECT 1 AS x")
    # verify reads the views as they are and lists the one that differs; a rebuild by
    # db upgrade leaves none
    capsys.readouterr()
    assert main(["verify", "--db", str(db)]) == EXIT_VIOLATIONS
    assert "view v_decision_overview was replaced" in capsys.readouterr().out
    assert main(["db", "upgrade", "--db", str(db)]) == EXIT_OK
    assert main(["verify", "--db", str(db)]) == EXIT_OK
    with sqlite3.connect(db) as connection:
        connection.execute(
            "INSERT INTO run (run_id, arm, created_at) VALUES ('r', 'ctx08', 'now')"
        )
        connection.execute(
            "INSERT INTO decision (run_id, instance_id, seq, decision_type, task_text,"
            " request_json, request_sha256, tokenizer, token_ceiling, token_count, created_at)"
            " VALUES ('r', 'i', 1, 'edit', 't', '{}', 'x', 'cl100k_base', 10, 11, 'now')"
        )
    capsys.readouterr()
    assert main(["verify", "--db", str(db)]) == EXIT_VIOLATIONS
    assert "window_over_ceiling: 1 violating row" in capsys.readouterr().out


def test_bad_database_url_exits_2(capsys):
    assert main(["db", "current", "--db", "mysql://nowhere/x"]) == EXIT_BAD_INPUT
    assert "expected a sqlite:// or postgresql+psycopg:// URL" in capsys.readouterr().err


def test_a_directory_for_a_store_exits_2_and_makes_nothing(tmp_path, capsys):
    for given in (f"{tmp_path / 'no-such-dir'}/", f"{tmp_path / 'no-such-dir'}/."):
        assert main(["db", "upgrade", "--db", given]) == EXIT_BAD_INPUT
        assert "names a directory, and there is none; expected a database file's path" in \
            capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # (an existing directory: test_hostile_input)
    (tmp_path / "a.db").write_bytes(b"")
    assert main(["db", "upgrade", "--db", f"{tmp_path / 'a.db'}/"]) == EXIT_BAD_INPUT
    assert "written as a directory's, but it is a file" in capsys.readouterr().err


def test_tokens_count(tmp_path, capsys):
    source = tmp_path / "a.py"
    source.write_text("hello world")
    assert main(["tokens", "count", str(source), "--tokenizer", "cl100k_base"]) == EXIT_OK
    assert capsys.readouterr().out.strip() == "cl100k_base\t2"
    # a file's CRLF counts as the store counts it, as given on stdin: not as an LF
    from ctxdb.tokens import get_counter

    crlf = "a.\r\n\r\n\r\nb\r\n"
    source.write_bytes(crlf.encode())
    assert main(["tokens", "count", str(source), "--tokenizer", "cl100k_base"]) == EXIT_OK
    assert capsys.readouterr().out.strip() == \
        f"cl100k_base\t{get_counter('cl100k_base').count(crlf)}"
    assert get_counter("cl100k_base").count(crlf) != \
        get_counter("cl100k_base").count(crlf.replace("\r\n", "\n"))


def test_unknown_command_exits_2():
    with pytest.raises(SystemExit) as exit_info:
        main(["no-such-command"])
    assert exit_info.value.code == 2


@pytest.mark.parametrize("argv", [["show", "1", "--bogus"], ["tokens", "count", "x", "--bogus"],
                                  ["report", "replay", "--nope", "1"], ["--bogus", "show", "1"]])
def test_an_option_a_command_lacks_is_refused_with_that_command_s_usage(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    command = ("ctxdb" if argv[0] == "--bogus" else  # before the command: the top level's
               "ctxdb " + " ".join(argv[:2] if argv[0] == "tokens" else argv[:1]))
    assert err.startswith(f"usage: {command} ") and f"{command}: error: unrecognized " in err


def _write_request(tmp_path, **changes):
    import json

    from requests_data import edit_request

    path = tmp_path / "request.json"
    path.write_text(json.dumps(edit_request(**changes)))
    return str(path)


def test_construct_why_show_diff(tmp_path, capsys):
    db = str(tmp_path / "c.db")
    request = _write_request(tmp_path)
    assert main(["construct", request, "--db", db]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith("TASK\nFix the discount")
    assert "items by verdict: deduped 1, in_window 8, rejected 2" in out
    assert "eviction steps: none" in out

    assert main(["why", "1", "E5", "--db", db]) == EXIT_OK
    out = capsys.readouterr().out
    assert "gate      admitted             obligation:target_entity" in out
    assert "■ dedup     deduped              same fact as E4" in out

    assert main(["show", "1", "E7", "--db", db]) == EXIT_OK
    assert "def slugify(s):" in capsys.readouterr().out  # rejected items stay readable
    assert main(["show", "1", "--db", db]) == EXIT_OK
    assert "[E4] change target · fault_entity" in capsys.readouterr().out

    baseline = _write_request(tmp_path, run_id="baseline", arm="current")
    assert main(["construct", baseline, "--db", db, "--json"]) == EXIT_OK
    capsys.readouterr()
    assert main(["diff", "1", "2", "--db", db]) == EXIT_OK
    out = capsys.readouterr().out
    assert "+ shop/util.py::slugify" in out  # the baseline sends what the gate rejected
    assert "(decision 1 is of run run-edit on shop-1, decision 2 of run baseline on " in out
    assert main(["diff", "1", "1", "--db", db]) == EXIT_OK
    assert "is of run" not in capsys.readouterr().out  # one run: nothing to say
    assert "~ shop/report.py::render_report  signature -> verbatim" in out


def test_construct_bad_request_exits_2_and_writes_nothing(tmp_path, capsys):
    db = tmp_path / "c.db"
    request = _write_request(tmp_path, seq=0)
    assert main(["construct", request, "--db", str(db)]) == EXIT_BAD_INPUT
    assert "request.seq: 0 is less than the minimum of 1" in capsys.readouterr().err
    assert not db.exists()  # validated before the store is even opened
    assert main(["construct", str(tmp_path / "missing.json"), "--db", str(db)]) == EXIT_BAD_INPUT
    assert "missing.json" in capsys.readouterr().err


def test_show_resolves_masking_pointer_names(tmp_path, capsys):
    db = str(tmp_path / "c.db")
    request = _write_request(tmp_path)
    assert main(["construct", request, "--db", db, "--json"]) == EXIT_OK
    import sqlite3

    with sqlite3.connect(db) as connection:
        sha = connection.execute("SELECT request_sha256 FROM decision").fetchone()[0]
    capsys.readouterr()
    assert main(["show", f"req-{sha[:12]}", "E9", "--db", db]) == EXIT_OK
    assert "$ ls shop" in capsys.readouterr().out
    assert main(["show", f"req-{sha[:12]}", "e9", "--db", db]) == EXIT_OK  # however typed
    assert "$ ls shop" in capsys.readouterr().out
    assert main(["why", f"req-{sha[:12]}", "e9", "--db", db]) == EXIT_OK
    capsys.readouterr()
    assert main(["show", f"req-{sha[:12]}", "E999", "--db", db]) == EXIT_BAD_INPUT
    assert "has no item 'E999' (an agent-loop decision records" in capsys.readouterr().err
    assert main(["show", "req-00000000dead", "--db", db]) == EXIT_BAD_INPUT


def test_ab_run_outcome_and_reports(tmp_path, capsys):
    import json

    instances = tmp_path / "instances.jsonl"
    fixture = Path(__file__).resolve().parent.parent / "fixtures" / "swebench" / "instances.jsonl"
    lines = []
    for line in fixture.read_text().splitlines():
        data = json.loads(line)
        data["repo_path"] = str(fixture.parent / data["repo_path"])
        lines.append(json.dumps(data))
    instances.write_text("\n".join(lines) + "\n")
    db = str(tmp_path / "ab.db")
    assert main(["ab", "run", str(instances), "--db", db, "--workers", "1",
                 "--cache", str(tmp_path / "cache"),
                 "--variants", "default,litm_buried"]) == EXIT_OK
    assert "ab run: 2 instance(s) done, 12 decisions; 0 failed" in capsys.readouterr().out
    outcomes = tmp_path / "outcomes.jsonl"
    outcomes.write_text("\n".join(json.dumps(o) for o in [
        {"run_id": "ab/ctx08/default", "instance_id": "shopcart__shopcart-1", "solved": True,
         "cost_usd": 0.02},
        {"run_id": "ab/current/default", "instance_id": "shopcart__shopcart-1", "solved": True,
         "cost_usd": 0.03},
    ]) + "\n")
    assert main(["ab", "outcome", str(outcomes), "--db", db]) == EXIT_OK
    assert "recorded 2 outcome(s)" in capsys.readouterr().out
    assert main(["report", "ab", "--db", db]) == EXIT_OK
    screen = capsys.readouterr().out
    assert "§7.4 decision rule" in screen and "ctx08    default" in screen
    assert "tokens-per-solved strictly beats the baseline (KEY)" in screen
    html_file = tmp_path / "ab.html"
    assert main(["report", "ab", "--db", db, "--format", "html", "--output", str(html_file)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {html_file}"
    page = html_file.read_text()
    # two plots, and one placement panel per arm and variant (3 here)
    assert page.count("<svg") == 2 + 3 and "<script" not in page and "http" not in page
    assert main(["report", "tokens", "--db", db, "--format", "csv"]) == EXIT_OK
    assert capsys.readouterr().out.splitlines()[0].startswith("arm,variant,decision_type")
    assert main(["report", "nope", "--db", db]) == EXIT_BAD_INPUT


def test_a_reader_that_stops_early_is_no_error(tmp_path, monkeypatch, capsys):
    """`ctxdb show 3 | head`: the closed pipe ends the command quietly, exit 0."""
    import io

    from requests_data import edit_request

    from ctxdb import ContextStore

    db = tmp_path / "s.db"
    with ContextStore.open(db) as store:
        decision_id = store.construct(edit_request()).decision_id

    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("sys.stdout", ClosedPipe())
    assert main(["show", str(decision_id), "--db", str(db)]) == 0
    assert capsys.readouterr().err == ""


def test_db_upgrade_refuses_an_unknown_or_earlier_revision(tmp_path, capsys):
    db = str(tmp_path / "store.db")
    assert main(["db", "upgrade", "--db", db, "--revision", "0003"]) == EXIT_OK
    assert main(["db", "upgrade", "--db", db, "--revision", "9999"]) == EXIT_BAD_INPUT
    assert "--revision '9999': expected head or one of 0001" in capsys.readouterr().err
    assert main(["db", "upgrade", "--db", db, "--revision", "0001"]) == EXIT_BAD_INPUT
    assert "the store is at 0003, past it" in capsys.readouterr().err
    assert main(["db", "upgrade", "--db", db]) == EXIT_OK
    assert main(["db", "upgrade", "--db", db]) == EXIT_OK
    assert capsys.readouterr().out.splitlines()[-1] == f"already at {head_revision()}"


def test_an_output_file_that_cannot_be_written_is_named_and_none_is_left(tmp_path, capsys):
    db = str(tmp_path / "c.db")
    assert main(["construct", _write_request(tmp_path), "--db", db]) == EXIT_OK
    capsys.readouterr()
    missing = tmp_path / "no_such_dir" / "report.html"
    assert main(["report", "tokens", "--db", db, "--format", "html",
                 "--output", str(missing)]) == 2
    assert f"--output {missing}: No such file or directory" in capsys.readouterr().err
    assert not missing.parent.exists()
    written = tmp_path / "report.csv"
    assert main(["report", "tokens", "--db", db, "--format", "csv", "--output", str(written)]) == 0
    assert written.stat().st_size > 0
    assert oct(written.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".ctxdb-")] == []
    # a directory where the file should be: named, nothing left beside it
    assert main(["report", "tokens", "--db", db, "--output", str(tmp_path)]) == 2
    assert f"--output {tmp_path}:" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".ctxdb-")] == []
    # a file's own mode is kept; a link is written through to its target
    written.chmod(0o600)
    assert main(["report", "tokens", "--db", db, "--format", "csv", "--output", str(written)]) == 0
    assert written.stat().st_mode & 0o777 == 0o600
    link = tmp_path / "link.csv"
    link.symlink_to(written)
    written.write_text("old", encoding="utf-8")
    assert main(["report", "tokens", "--db", db, "--format", "csv", "--output", str(link)]) == 0
    assert link.is_symlink() and written.read_text(encoding="utf-8") != "old"
    hard = tmp_path / "hard.csv"
    hard.hardlink_to(written)
    written.write_text("old", encoding="utf-8")
    assert main(["report", "tokens", "--db", db, "--format", "csv", "--output", str(hard)]) == 0
    assert written.read_text(encoding="utf-8") == hard.read_text(encoding="utf-8") != "old"
    # text that is no UTF-8 (a lone surrogate): named, nothing left beside the file
    from ctxdb.cli.shared import write_output
    with pytest.raises(ValueError, match=r"--output .*: the text cannot be written as UTF-8"):
        write_output("bad \udc80", str(tmp_path / "bad.txt"))
    assert not (tmp_path / "bad.txt").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".ctxdb-")] == []


def _umask() -> int:
    import os
    current = os.umask(0)
    os.umask(current)
    return current


REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("recon, expected", [
    ("empty.db", "empty.db holds no recon index"),
    ("random.db", "random.db is not a SQLite database; expected a recon index"),
    ("store.db", "store.db holds no recon index"),
    ("directory", "directory is a directory; expected a recon index file"),
])
def test_a_bad_recon_index_is_named_and_no_store_is_left(tmp_path, capsys, recon, expected):
    (tmp_path / "empty.db").touch()
    (tmp_path / "random.db").write_bytes(bytes(range(256)) * 20)
    (tmp_path / "directory").mkdir()
    request = _write_request(tmp_path)
    assert main(["construct", request, "--db", str(tmp_path / "store.db")]) == EXIT_OK
    capsys.readouterr()
    db = tmp_path / "new.db"
    status = main(["construct", request, "--db", str(db), "--recon", str(tmp_path / recon)])
    err = capsys.readouterr().err
    assert status == EXIT_BAD_INPUT and expected in err and len(err.splitlines()) == 1, err
    assert not list(tmp_path.glob("new.db*"))  # the store it would have used is not made


def test_a_refused_strict_construct_leaves_no_new_store(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no ./recon.db here
    monkeypatch.delenv("CTXDB_RECON", raising=False)
    monkeypatch.delenv("CTXDB_URL", raising=False)
    request = str(REPO_ROOT / "fixtures" / "decisions" / "edit.json")
    assert main(["construct", request, "--strict"]) == EXIT_BAD_INPUT
    assert "no recon index was given" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # ./ctx08.db is not left behind
    # a store that was there is kept, as it was
    assert main(["construct", _write_request(tmp_path), "--db", "kept.db"]) == EXIT_OK
    assert main(["construct", request, "--strict", "--db", "kept.db"]) == EXIT_BAD_INPUT
    assert (tmp_path / "kept.db").exists()
    # as is an empty file the user made, and a new store another process made
    (tmp_path / "empty.db").touch()
    assert main(["construct", request, "--strict", "--db", "empty.db"]) == EXIT_BAD_INPUT
    assert (tmp_path / "empty.db").exists()
    subprocess.run([sys.executable, "-c", "from ctxdb import ContextStore; "
                    "ContextStore.open('other.db').close()"], check=True, cwd=tmp_path)
    assert main(["construct", request, "--strict", "--db", "other.db"]) == EXIT_BAD_INPUT
    assert (tmp_path / "other.db").exists()


def test_a_store_is_taken_back_only_when_made_here_empty_and_unlocked(tmp_path):
    import sqlite3

    from ctxdb import ContextStore
    from ctxdb.db import discard_store_made_here, stores_made_here

    path = tmp_path / "made.db"
    ContextStore.open(str(path)).close()
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another connection mid-write: the file stays
    assert not discard_store_made_here(path) and path.exists()
    writer.execute("ROLLBACK")
    writer.close()
    # a command takes back only a store it made itself, not one made before it began
    assert not discard_store_made_here(path, stores_made_here()) and path.exists()
    assert discard_store_made_here(path) and not list(tmp_path.iterdir())


def test_a_missing_input_file_or_recon_is_named_by_its_argument(tmp_path, capsys):
    missing = str(tmp_path / "nope.jsonl")
    assert main(["ab", "run", missing, "--db", str(tmp_path / "s.db")]) == EXIT_BAD_INPUT
    assert f"INSTANCES.jsonl {missing}: no such file" in capsys.readouterr().err
    assert main(["ab", "outcome", missing, "--db", str(tmp_path / "s.db")]) == EXIT_BAD_INPUT
    assert f"FILE.jsonl {missing}: no such file" in capsys.readouterr().err
    assert main(["recon", "stats", "--recon", str(tmp_path)]) == EXIT_BAD_INPUT
    assert "--recon: cannot open the recon index" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_locked_recon_index_is_named_as_unreadable_not_as_no_index(tmp_path, capsys):
    import sqlite3

    from ctxdb.recon import index_repository

    recon = tmp_path / "recon.db"
    index_repository(str(REPO_ROOT / "fixtures" / "repos" / "shopcart"), str(recon),
                     progress=False)
    holder = sqlite3.connect(recon, isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")  # an index run mid-write, in rollback-journal mode
    try:
        status = main(["construct", _write_request(tmp_path), "--db", str(tmp_path / "s.db"),
                       "--recon", str(recon)])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    err = capsys.readouterr().err
    assert status == EXIT_BAD_INPUT and "cannot be read: database is locked" in err, err
    assert "not a SQLite database" not in err and not (tmp_path / "s.db").exists()


# A command stopped in its own process: `ctxdb verify`, with a signal sent to itself at
# a chosen moment. In a child process, since a SIGTERM unhandled would end pytest.
_STOPPED_VERIFY = """
import os, signal, sys, time
import ctxdb.cli as cli
from ctxdb.cli import verify

stop, moment = signal.{signal_name}, "{moment}"
made_parser, discard = cli.build_parser, cli._discard_a_store_made_for_nothing

def stop_now():
    os.kill(os.getpid(), stop)
    time.sleep(5)  # the handler raises before this ends
    sys.exit("the signal was not acted on")

def stopped_while_modules_load():
    if moment == "while the modules load":  # build_parser is the command's first step
        stop_now()
    return made_parser()

def stopped_while_running(args):
    stop_now()

def stopped_again_while_saying_so(args, made_before):
    os.kill(os.getpid(), stop)
    time.sleep(0.5)  # a handler that acted would have raised by now
    return discard(args, made_before)

def stopped_again_while_undoing(args):
    try:
        stop_now()
    except KeyboardInterrupt:  # the work under way undoes itself (a replay's run)...
        os.kill(os.getpid(), stop)  # ...and a second stop must not cut that short
        time.sleep(0.5)
        open(sys.argv[2], "w").write("undone")
        raise

cli.build_parser = stopped_while_modules_load
if moment == "twice":
    verify._cmd_verify = stopped_while_running
    cli._discard_a_store_made_for_nothing = stopped_again_while_saying_so
if moment == "twice, while undoing":
    verify._cmd_verify = stopped_again_while_undoing
sys.exit(cli.main(["verify", "--db", sys.argv[1]]))
"""


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("moment", ["while the modules load", "twice",
                                    "twice, while undoing"])
def test_a_stop_is_one_line_however_early_and_however_often(tmp_path, signal_name, moment):
    """A stop before the command's modules have loaded, or a second stop while the first
    is being undone or said, still gives one line and the stop's own status — not a
    traceback, a silent death by the signal, or a second line — and the undoing ends."""
    from ctxdb.cli import EXIT_INTERRUPTED, EXIT_TERMINATED

    db = tmp_path / "v.db"
    assert main(["db", "upgrade", "--db", str(db)]) == EXIT_OK
    undone = tmp_path / "undone"
    done = subprocess.run(
        [sys.executable, "-c", _STOPPED_VERIFY.format(signal_name=signal_name, moment=moment),
         str(db), str(undone)], capture_output=True, text=True, timeout=60)
    said = "interrupted" if signal_name == "SIGINT" else "terminated"
    assert (done.returncode, done.stderr) == (
        EXIT_INTERRUPTED if signal_name == "SIGINT" else EXIT_TERMINATED,
        f"ctxdb: {said}\n")
    assert db.is_file()  # the store it was given stays
    assert undone.exists() == (moment == "twice, while undoing")


def test_a_mistyped_report_name_is_met_with_the_nearest(tmp_path, capsys):
    db = tmp_path / "r.db"
    assert main(["db", "upgrade", "--db", str(db)]) == EXIT_OK
    assert main(["report", "replya", "--db", str(db)]) == EXIT_BAD_INPUT
    assert "report 'replya' (did you mean replay?): expected one of ablation," in \
        capsys.readouterr().err
    assert main(["report", "zzzz", "--db", str(db)]) == EXIT_BAD_INPUT
    assert "report 'zzzz': expected one of" in capsys.readouterr().err


def test_a_decision_that_does_not_exist_is_met_with_what_does(tmp_path, capsys):
    db = tmp_path / "d.db"
    assert main(["db", "upgrade", "--db", str(db)]) == EXIT_OK
    assert main(["show", "1", "--db", str(db)]) == EXIT_BAD_INPUT
    assert "decision 1 does not exist (this store holds no decision)" in \
        capsys.readouterr().err
    import sqlite3

    with sqlite3.connect(db) as connection:
        connection.execute("INSERT INTO run (run_id, arm, created_at) VALUES ('r', 'ctx08', 'now')")
        for decision_id in (1, 3):  # 2 was removed (a replay replaces its decisions)
            connection.execute(
                "INSERT INTO decision (decision_id, run_id, instance_id, seq, decision_type,"
                " task_text, request_json, request_sha256, tokenizer, token_ceiling,"
                " token_count, created_at) VALUES (?, 'r', 'i', ?, 'edit', 't', '{}', 'x',"
                " 'cl100k_base', 10, 5, 'now')", (decision_id, decision_id))
    for asked, said in (("2", "holds decisions 1 to 3, not every id between"),
                        ("7", "holds decisions 1 to 3)")):
        assert main(["show", asked, "--db", str(db)]) == EXIT_BAD_INPUT
        assert f"decision {asked} does not exist (this store {said}" in capsys.readouterr().err
