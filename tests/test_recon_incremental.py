"""Incremental re-indexing (issue 25): after every edit of a series, the index an
incremental run leaves equals, table by table, a cold build of the same tree.

Each step's run re-resolves only the edges the change may have moved, through the
resolver kept in process (or one loaded from the index, when none is kept); the cold build
beside it resolves everything. Rows are compared by what they mean (paths, entity keys),
not by ids, which differ by design. `recon.file_stat` is left out: it is the indexing
machine's bookkeeping (stat keys), not the index's content.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from conftest import fresh_pg_database
from recon_walks import have_watches, walk_afresh

from ctxdb.recon import IndexLimits, index_repository, indexer, open_recon
from ctxdb.recon import kept as kept_module
from ctxdb.recon import watch as watch_module
from ctxdb.recon.kept import forget_indexer_state
from ctxdb.recon.schema import GENERATION_KEY

TEST_RACY_WINDOW_NS = 100_000_000
PAST_THE_WINDOW_S = 0.15
SHOPCART = Path(__file__).resolve().parent.parent / "fixtures" / "repos" / "shopcart"
# The edit series parses files up to this size: REPO's are far smaller, one step writes a
# larger one (indexed as a file row alone, and listed as skipped).
TEST_LIMITS = IndexLimits(max_file_bytes=4096)
GENERATED_LINES = 1000  # "X = 1\n" each: over TEST_LIMITS

# A small package with the resolution rules' moving parts: imports and re-exports, a star
# import, bases across files, self calls through bases, a typed variable, a repo-wide
# unique name, test functions (tests edges).
REPO = {
    "app/__init__.py": "from .core import Engine\nfrom .util import *\n",
    "app/util.py": (
        "class Base:\n"
        "    def prepare(self):\n        return 1\n\n"
        "    def stop(self):\n        return 0\n\n\n"
        "def helper(x):\n    return x\n\n\n"
        "def unique_tool():\n    return 2\n"
    ),
    "app/core.py": (
        "from .util import Base, helper\n\n\n"
        "class Engine(Base):\n"
        "    def start(self):\n        self.prepare()\n        return helper(1)\n\n"
        "    def run(self):\n        return self.start()\n\n\n"
        "def make():\n    engine = Engine()\n    engine.run()\n    return engine\n"
    ),
    "app/extra.py": (
        "import app.util as u\n"
        "from app import Engine\n"
        "from app.core import make as build\n\n\n"
        "class Turbo(Engine):\n"
        "    def boost(self):\n        self.stop()\n        self.reset()\n"
        "        return build()\n\n\n"
        "def go():\n    u.helper(2)\n    return unique_tool()\n"
    ),
    "tests/test_core.py": (
        "from app import helper\n"
        "from app.core import Engine, make\n\n\n"
        "def test_start():\n    make()\n    helper(3)\n    assert Engine().start() == 1\n\n\n"
        "def test_tool():\n    assert unique_tool() == 2\n"
    ),
}


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _edit(root: Path, rel: str, old: str, new: str) -> None:
    path = root / rel
    text = path.read_text()
    assert old in text, (rel, old)
    path.write_text(text.replace(old, new, 1))


# Each step: (what it is, a function of the root making the edit, the paths it changed).
def _steps():
    def body(root):
        _edit(root, "app/util.py", "    return x\n", "    return x * 2  # doubled\n")

    def rename_called(root):  # callers in other files now name nothing
        _edit(root, "app/util.py", "def helper(x):", "def assist(x):")

    def follow_rename(root):
        _edit(root, "app/core.py", "from .util import Base, helper",
              "from .util import Base, assist")
        _edit(root, "app/core.py", "return helper(1)", "return assist(1)")

    def add_file(root):  # a second unique_tool: the repo-wide fallback no longer applies
        _write(root, {"app/more.py": "def unique_tool():\n    return 3\n\n\n"
                                     "class Extra:\n    def reset(self):\n        return 5\n"})

    def delete_file(root):
        (root / "app/more.py").unlink()

    def move_class(root):  # Base moves to its own module; its users follow
        _edit(root, "app/util.py", "class Base:\n    def prepare(self):\n        return 1\n\n"
                                   "    def stop(self):\n        return 0\n\n\n", "")
        _write(root, {"app/base.py": "class Base:\n    def prepare(self):\n        return 1\n\n"
                                     "    def stop(self):\n        return 0\n"})
        _edit(root, "app/core.py", "from .util import Base, assist",
              "from .base import Base\nfrom .util import assist")

    def member_added_to_a_base(root):  # Turbo's self.reset() now finds Base.reset
        _edit(root, "app/base.py", "    def stop(self):",
              "    def reset(self):\n        return 4\n\n    def stop(self):")

    def bases_change(root):  # Engine no longer derives from Base: self.prepare moves
        _edit(root, "app/core.py", "class Engine(Base):", "class Engine:")

    def bases_back(root):
        _edit(root, "app/core.py", "class Engine:", "class Engine(Base):")

    def package_loses_init(root):  # every module of app gets another name
        (root / "app/__init__.py").unlink()

    def package_gets_init(root):
        _write(root, {"app/__init__.py": "from .core import Engine\nfrom .util import *\n"
                                         "from .base import Base as Root\n"})

    def star_import_changes(root):
        _edit(root, "app/__init__.py", "from .util import *\n", "from .base import *\n")

    def test_file_edit(root):  # tests edges follow the test's calls
        _edit(root, "tests/test_core.py", "    helper(3)\n", "    build = make\n    build()\n")

    def syntax_error(root):  # a flagged file
        _write(root, {"app/broken.py": "from .util import helper\n\n\ndef broken(:\n"
                                       "    return helper(\n"})

    def syntax_fixed(root):
        _write(root, {"app/broken.py": "from .util import helper\n\n\ndef broken():\n"
                                       "    return helper(4)\n"})

    def too_large(root):  # a file row alone, listed as skipped
        _write(root, {"app/generated.py": "X = 1\n" * GENERATED_LINES})

    def large_file_shrinks(root):
        _write(root, {"app/generated.py": "X = 1\n"})

    return [
        ("change a body", body, ["app/util.py"]),
        ("rename a function others call", rename_called, ["app/util.py"]),
        ("callers follow the rename", follow_rename, None),
        ("add a file", add_file, ["app/more.py"]),
        ("delete a file", delete_file, ["app/more.py"]),
        ("move a class", move_class, None),
        ("a base gains a member", member_added_to_a_base, ["app/base.py"]),
        ("a class loses its base", bases_change, None),
        ("a class gets its base back", bases_back, ["app/core.py"]),
        ("a package loses __init__.py", package_loses_init, None),
        ("a package gets __init__.py", package_gets_init, ["app"]),
        ("a star import changes", star_import_changes, None),
        ("a test changes", test_file_edit, ["tests/test_core.py"]),
        ("a syntax error", syntax_error, ["app/broken.py"]),
        ("a file too large to parse", too_large, None),
        ("the syntax error is fixed", syntax_fixed, None),
        ("the large file shrinks", large_file_shrinks, ["app/generated.py"]),
    ]


# --- the whole index, by meaning -------------------------------------------------------------


def _rows(connection, sql: str) -> list[tuple]:
    return sorted((tuple(row) for row in connection.execute(sa.text(sql))), key=repr)


def index_content(target) -> dict[str, list[tuple]]:
    """Every recon table (and both full-text indexes), keyed by paths and entity keys."""
    with open_recon(target) as conn:
        content = {
            "recon_meta": _rows(conn, "SELECT key, value FROM recon.recon_meta"
                                      f" WHERE key <> '{GENERATION_KEY}'"),
            "file": _rows(conn, "SELECT path, module, sha256, size_bytes, line_count, is_test,"
                                " syntax_error, not_utf8, skipped FROM recon.file"),
            "file_source": _rows(conn, "SELECT f.path, t.text FROM recon.file_source t"
                                       " JOIN recon.file f ON f.id = t.file_id"),
            "symbol": _rows(conn, "SELECT s.key, f.path, p.key, s.kind, s.name, s.qualname,"
                                  " s.start_line, s.end_line, s.start_byte, s.end_byte,"
                                  " s.signature, s.doc FROM recon.symbol s"
                                  " JOIN recon.file f ON f.id = s.file_id"
                                  " LEFT JOIN recon.symbol p ON p.id = s.parent_id"),
            "edge": _rows(conn, "SELECT e.kind, s.key, d.key, e.dst_name, e.typed_name, e.line"
                                " FROM recon.edge e JOIN recon.symbol s ON s.id = e.src_symbol_id"
                                " LEFT JOIN recon.symbol d ON d.id = e.dst_symbol_id"),
            "binding": _rows(conn, "SELECT f.path, b.name, b.target, b.line FROM recon.binding b"
                                   " JOIN recon.file f ON f.id = b.file_id"),
            "skipped_path": _rows(conn, "SELECT path, reason FROM recon.skipped_path"),
            # no row of any table may point at a row that is gone
            "orphans": _rows(conn, "SELECT 'edge', e.id FROM recon.edge e WHERE NOT EXISTS"
                                   " (SELECT 1 FROM recon.symbol s WHERE s.id = e.src_symbol_id)"
                                   " OR (e.dst_symbol_id IS NOT NULL AND NOT EXISTS"
                                   " (SELECT 1 FROM recon.symbol d WHERE d.id = e.dst_symbol_id))"
                                   " UNION ALL SELECT 'symbol', s.id FROM recon.symbol s"
                                   " WHERE NOT EXISTS (SELECT 1 FROM recon.file f"
                                   " WHERE f.id = s.file_id)"
                                   " UNION ALL SELECT 'file_stat', t.file_id FROM recon.file_stat t"
                                   " WHERE NOT EXISTS (SELECT 1 FROM recon.file f"
                                   " WHERE f.id = t.file_id)"),
        }
        if conn.dialect.name == "sqlite":
            # the FTS5 indexes' entries by symbol key: the external-content index over
            # symbol names, and the contentless body index (what a query finds)
            for table in ("symbol_fts", "symbol_body_fts"):
                conn.execute(sa.text(f"CREATE VIRTUAL TABLE temp.{table}_terms USING"
                                     f" fts5vocab(recon, {table}, instance)"))
                content[table] = _rows(
                    conn, f"SELECT s.key, v.term, v.col, v.offset FROM temp.{table}_terms v"
                          " JOIN recon.symbol s ON s.id = v.doc")
                conn.execute(sa.text(f"DROP TABLE temp.{table}_terms"))
            conn.execute(sa.text("INSERT INTO recon.symbol_fts(symbol_fts, rank)"
                                 " VALUES ('integrity-check', 1)"))
        else:
            content["symbol_fts"] = _rows(conn, "SELECT key, fts::text FROM recon.symbol")
            content["symbol_body"] = _rows(conn, "SELECT s.key, b.terms::text"
                                                 " FROM recon.symbol_body b"
                                                 " JOIN recon.symbol s ON s.id = b.symbol_id")
    return content


def _cold(root: Path, target, limits: IndexLimits | None = None) -> dict:
    """What a cold build of the tree holds (`target` rebuilt from nothing)."""
    return _cold_build(root, target, limits)[0]


def _cold_build(root: Path, target, limits: IndexLimits | None = None) -> tuple[dict, tuple]:
    """`_cold`, and the totals the build reported (`_reported`)."""
    stats = index_repository(root, target, rebuild=True,
                             **({"limits": limits} if limits is not None else {}))
    return index_content(target), _reported(stats)


def _reported(stats) -> tuple:
    """What an IndexStats says of the whole index (an incremental run works these out
    from the last run's figures and its change, not by counting)."""
    return stats.files_seen, stats.symbols, stats.edges, stats.files_flagged, stats.skipped


@pytest.fixture
def cold_target(backend, request, tmp_path):
    """A second index on the same backend, for the cold builds compared with."""
    if backend == "sqlite":
        yield str(tmp_path / "cold.db")
        return
    with fresh_pg_database(request.getfixturevalue("pg_cluster")) as url:
        yield url


def _assert_same(incremental: dict, cold: dict, step: str) -> None:
    assert incremental.keys() == cold.keys()
    for table in cold:
        assert incremental[table] == cold[table], f"after '{step}': recon.{table} differs"
    assert not cold["orphans"]


@pytest.mark.parametrize("kept", [True, False], ids=["resolver-kept", "resolver-loaded"])
def test_every_edit_leaves_what_a_cold_build_makes(recon_target, cold_target, tmp_path,
                                                   kept):
    root = tmp_path / "repo"
    _write(root, REPO)
    first = index_repository(root, recon_target, limits=TEST_LIMITS)
    assert first.edges_resolved == first.edges - _tests_edges(recon_target)
    _assert_same(index_content(recon_target), _cold(root, cold_target, TEST_LIMITS),
                 "the first run")
    flagged_or_skipped = set()
    for step, edit, changed in _steps():
        edit(root)
        if not kept:
            forget_indexer_state()  # as a new process would: the resolver is loaded from the index
        stats = index_repository(root, recon_target, changed=changed, limits=TEST_LIMITS)
        assert stats.files_parsed + stats.files_removed > 0, step
        cold, reported = _cold_build(root, cold_target, TEST_LIMITS)
        _assert_same(index_content(recon_target), cold, step)
        assert _reported(stats) == reported, f"after '{step}': the totals differ"
        flagged_or_skipped |= {(bool(stats.files_flagged), bool(stats.skipped))}
    assert flagged_or_skipped >= {(True, False), (True, True), (False, True)}


def _tests_edges(target) -> int:
    with open_recon(target) as conn:
        return conn.execute(sa.text("SELECT count(*) FROM recon.edge WHERE kind = 'tests'")
                            ).scalar()


def test_the_work_follows_the_change(tmp_path):
    """A body edit in one file resolves that file's own edges, not all: those into it
    point at symbols that kept their ids, through names that did not move."""
    root = tmp_path / "shopcart"
    shutil.copytree(SHOPCART, root)
    target = tmp_path / "recon.db"
    cold = index_repository(root, target)
    _edit(root, "shopcart/money.py", '"""', '"""A comment line. ', )
    changed = index_repository(root, target)
    assert changed.files_parsed == 1
    with open_recon(str(target)) as conn:
        own = conn.execute(sa.text(
            "SELECT count(*) FROM recon.edge e JOIN recon.symbol s ON s.id = e.src_symbol_id"
            " JOIN recon.file f ON f.id = s.file_id"
            " WHERE f.path = 'shopcart/money.py' AND e.kind <> 'tests'")).scalar()
        into = conn.execute(sa.text(
            "SELECT count(*) FROM recon.edge e JOIN recon.symbol d ON d.id = e.dst_symbol_id"
            " JOIN recon.file f ON f.id = d.file_id JOIN recon.symbol s"
            " ON s.id = e.src_symbol_id JOIN recon.file g ON g.id = s.file_id"
            " WHERE f.path = 'shopcart/money.py' AND g.path <> f.path"
            " AND e.kind <> 'tests'")).scalar()
    assert into > 0
    assert changed.edges_resolved == own < cold.edges_resolved
    assert index_content(str(target)) == _cold(root, str(tmp_path / "cold.db"))


def _rows_of(target, sql: str) -> dict:
    with open_recon(str(target)) as conn:
        return {row[0]: tuple(row[1:]) for row in conn.execute(sa.text(sql))}


def test_a_reparsed_file_keeps_the_ids_of_what_stays(tmp_path):
    """A re-parsed file keeps its id, and so does each symbol whose key stays (its row
    rewritten with its new lines), so the edges into it need no new destination; a new
    definition gets an id of its own, a removed one's row goes."""
    root = tmp_path / "shopcart"
    shutil.copytree(SHOPCART, root)
    target = tmp_path / "recon.db"
    index_repository(root, target)
    symbols_sql = ("SELECT s.key, s.id, s.file_id, s.start_line FROM recon.symbol s"
                   " JOIN recon.file f ON f.id = s.file_id WHERE f.path = 'shopcart/money.py'")
    # the edges from other files into the symbols that stay
    into_sql = ("SELECT e.id, e.dst_symbol_id FROM recon.edge e JOIN recon.symbol d"
                " ON d.id = e.dst_symbol_id JOIN recon.symbol s ON s.id = e.src_symbol_id"
                " WHERE d.key IN ('shopcart/money.py::to_money',"
                " 'shopcart/money.py::round_money')"
                " AND s.key NOT LIKE 'shopcart/money.py::%' AND e.kind <> 'tests'")
    before, into_before = _rows_of(target, symbols_sql), _rows_of(target, into_sql)
    _edit(root, "shopcart/money.py", "def to_money(value)",
          "def added_first():\n    return 0\n\n\ndef to_money(value)")
    _edit(root, "shopcart/money.py", "def percent_of(", "def percent_of_renamed(")
    assert index_repository(root, target).files_parsed == 1
    after, into_after = _rows_of(target, symbols_sql), _rows_of(target, into_sql)

    kept = "shopcart/money.py::round_money"
    assert after[kept][:2] == before[kept][:2]  # same id, same file id
    assert after[kept][2] == before[kept][2] + 4  # its row moved with its lines
    new_ids = {after[key][0] for key in after.keys() - before.keys()}
    assert after.keys() - before.keys() == {"shopcart/money.py::added_first",
                                            "shopcart/money.py::percent_of_renamed"}
    assert before.keys() - after.keys() == {"shopcart/money.py::percent_of"}
    assert not new_ids & {row[0] for row in before.values()}
    assert into_before and into_after == into_before  # e.g. cart.py's round_money calls
    assert index_content(str(target)) == _cold(root, str(tmp_path / "cold.db"))


# --- change detection -------------------------------------------------------------------------


def test_stat_keys_decide_what_is_read(tmp_path, monkeypatch):
    from ctxdb.recon import indexer, walk

    # a shorter racy window than the real one, so the test need not wait 2 s
    monkeypatch.setattr(walk, "RACY_WINDOW_NS", TEST_RACY_WINDOW_NS)
    root = tmp_path / "repo"
    _write(root, REPO)
    target = tmp_path / "recon.db"
    time.sleep(PAST_THE_WINDOW_S)
    index_repository(root, target)
    with sqlite3.connect(target) as con:
        assert con.execute("SELECT count(*) FROM file_stat").fetchone() == (len(REPO),)

    hashed = []
    real_hash = indexer._sha256_file
    monkeypatch.setattr(indexer, "_sha256_file", lambda p: hashed.append(p) or real_hash(p))
    assert index_repository(root, target).files_parsed == 0
    assert hashed == []  # every stat key as kept: nothing read

    # same size, same mtime (as a tool that keeps times would leave it): the inode and
    # change time still move, so the file is hashed, found changed and parsed
    util = root / "app/util.py"
    kept_times = util.stat()
    replacement = root / "app/util.py.new"
    replacement.write_text(util.read_text().replace("return 1", "return 7"))
    os.utime(replacement, ns=(kept_times.st_atime_ns, kept_times.st_mtime_ns))
    os.replace(replacement, util)
    assert index_repository(root, target).files_parsed == 1
    assert [Path(p).name for p in hashed] == ["util.py"]

    # it was parsed within the racy window of its change: its key was not kept
    time.sleep(PAST_THE_WINDOW_S)
    assert index_repository(root, target).files_parsed == 0
    assert [Path(p).name for p in hashed] == ["util.py", "util.py"]

    # touched, content the same: hashed, not parsed; its new key is not kept while the
    # change is within the racy window (hashed again next time), then kept
    hashed.clear()
    os.utime(root / "app/core.py")
    assert index_repository(root, target).files_parsed == 0
    assert index_repository(root, target).files_parsed == 0
    time.sleep(PAST_THE_WINDOW_S)
    assert index_repository(root, target).files_parsed == 0  # key kept now
    assert index_repository(root, target).files_parsed == 0
    assert [Path(p).name for p in hashed] == ["core.py"] * 3


def test_an_index_without_stat_keys_gets_them(tmp_path, monkeypatch):
    """An index written before file_stat (recon schema 3 as it was) is read, every file
    hashed, and the table added with the keys that can vouch for what was read."""
    from ctxdb.recon import walk

    monkeypatch.setattr(walk, "RACY_WINDOW_NS", TEST_RACY_WINDOW_NS)
    root = tmp_path / "repo"
    _write(root, REPO)
    target = tmp_path / "recon.db"
    index_repository(root, target)
    with sqlite3.connect(target) as con:
        con.execute("DROP TABLE file_stat")
    forget_indexer_state()  # as by another process, which an older ctxdb would be
    time.sleep(PAST_THE_WINDOW_S)
    assert index_repository(root, target).files_parsed == 0
    with sqlite3.connect(target) as con:
        assert con.execute("SELECT count(*) FROM file_stat").fetchone() == (len(REPO),)


def test_changed_paths_are_all_that_is_looked_at(tmp_path):
    root = tmp_path / "repo"
    _write(root, REPO)
    target = tmp_path / "recon.db"
    index_repository(root, target)
    _edit(root, "app/util.py", "return 0", "return -1")
    _edit(root, "app/core.py", "return helper(1)", "return helper(-1)")
    # only util.py is named: core.py's change waits for a run that looks at it
    assert index_repository(root, target, changed=["app/util.py"]).files_parsed == 1
    assert index_repository(root, target, changed=[]).files_parsed == 0
    assert index_repository(root, target, changed=[str(root / "app")]).files_parsed == 1
    # a directory that is gone stands for every file that was under it
    shutil.rmtree(root / "tests")
    assert index_repository(root, target, changed=["tests"]).files_removed == 1
    _assert_same(index_content(str(target)), _cold(root, str(tmp_path / "cold.db")), "changed=")


@pytest.mark.parametrize("bad, message", [
    ("app/util.py", "a list of paths"),
    ([""], "is not a path"),
    ([3], "is not a path"),
    (["../elsewhere.py"], "is not under the indexed root"),
])
def test_changed_paths_must_be_paths_under_the_root(tmp_path, bad, message):
    root = tmp_path / "repo"
    _write(root, REPO)
    with pytest.raises((TypeError, ValueError), match=message):
        index_repository(root, tmp_path / "recon.db", changed=bad)


def test_a_walk_from_kept_listings_finds_what_a_fresh_walk_finds(tmp_path, monkeypatch):
    """Directories whose stat key has not moved are not listed again; each change to the
    tree moves its directory's key, so the walk sees it."""
    from ctxdb.recon import walk

    monkeypatch.setattr(walk, "RACY_WINDOW_NS", TEST_RACY_WINDOW_NS)
    root = tmp_path / "repo"
    _write(root, REPO)
    (root / "docs/locale/de").mkdir(parents=True)
    (root / "docs/locale/de/notes.txt").write_text("no Python here\n")

    def fresh():
        forget_indexer_state()
        return walk.walk_repository(root)

    def changes():
        yield lambda: _write(root, {"docs/locale/de/conf.py": "X = 1\n"})
        yield lambda: _edit(root, "app/core.py", "def make", "def make_one")
        yield lambda: (root / "app/extra.py").unlink()
        yield lambda: _write(root, {"app/sub/deep.py": "def deep():\n    return 1\n"})
        yield lambda: (root / "app/sub/pyvenv.cfg").write_text("home = /usr\n")
        yield lambda: os.symlink(root / "app/util.py", root / "app/alias.py")
        yield lambda: os.replace(root / "app/alias.py", root / "app/renamed.py")
        yield lambda: os.mkfifo(root / "tests/pipe.py")
        yield lambda: shutil.rmtree(root / "docs")

    time.sleep(PAST_THE_WINDOW_S)
    assert walk.walk_repository(root) == fresh()
    listed = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path: listed.append(path) or real_scandir(path))
    walk.walk_repository(root)
    assert listed == []  # every directory's listing kept
    _edit(root, "app/core.py", "return engine", "return engine  # same directory")
    assert walk.walk_repository(root) == fresh()  # a file edited: its new stat key seen
    for change in changes():
        walk.walk_repository(root)  # listings kept (settled by now)
        change()
        time.sleep(PAST_THE_WINDOW_S)
        kept_walk = walk.walk_repository(root)
        assert kept_walk == fresh()
    assert ("app/renamed.py", str(root / "app/renamed.py")) in kept_walk.files
    assert not any(rel.startswith("app/sub/") for rel, _ in kept_walk.files)


HAVE_WATCHES = have_watches()
WATCH_EDIT_SEED = 25
WATCH_EDIT_STEPS = 60
# every this many changes, the walk after one waits until the listings are kept (settled)
SETTLE_EVERY = 2


@pytest.mark.skipif(not HAVE_WATCHES, reason="no inotify here")
def test_a_watched_walk_of_an_unmoved_tree_stats_no_directory(tmp_path, monkeypatch):
    """With the directories watched (recon/watch.py), a walk stats the root (whether it
    is the directory it was) and the files alone; a directory an event came for is
    stat'ed (and listed) again."""
    from ctxdb.recon import walk

    monkeypatch.setattr(walk, "RACY_WINDOW_NS", TEST_RACY_WINDOW_NS)
    root = tmp_path / "repo"
    _write(root, REPO)
    app = str((root / "app").resolve())
    root_real = str(root.resolve())
    forget_indexer_state()
    time.sleep(PAST_THE_WINDOW_S)
    walk.walk_repository(root)  # lists and watches every directory
    stat_calls = []
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: stat_calls.append(os.fsdecode(
        path)) or real_stat(path, *a, **k))
    _edit(root, "app/core.py", "return engine", "return engine  # content alone")
    found = walk.walk_repository(root)
    assert stat_calls == [root_real]
    assert found == walk_afresh(root)
    (root / "app/added.py").write_text("X = 1\n")
    stat_calls.clear()
    found = walk.walk_repository(root)
    assert stat_calls == [root_real, app]  # and the directory the event came for
    assert ("app/added.py", f"{app}/added.py") in found.files
    assert found == walk_afresh(root)


@pytest.mark.skipif(not HAVE_WATCHES, reason="no inotify here")
def test_a_walk_past_its_share_of_the_watch_limit_stats_the_other_directories(
        tmp_path, monkeypatch):
    """The user's inotify watches are shared with their other programs: past this
    process's share, directories are not watched, and a change in one is found by its stat."""
    from ctxdb.recon import walk

    monkeypatch.setattr(walk, "RACY_WINDOW_NS", TEST_RACY_WINDOW_NS)
    root = tmp_path / "repo"
    _write(root, REPO)
    (root / "docs/locale/de").mkdir(parents=True)
    forget_indexer_state()
    monkeypatch.setattr(watch_module._BUDGET, "limit", watch_module._BUDGET.in_use + 2)
    time.sleep(PAST_THE_WINDOW_S)
    walk.walk_repository(root)
    walk.walk_repository(root)
    kept_watch = kept_module.kept_walk(str(root.resolve())).watch
    assert len(kept_watch.trusted) == 2  # of six directories
    for directory in ("app", "docs/locale/de", "tests"):
        (root / directory / "new_module.py").write_text("X = 1\n")
    assert walk.walk_repository(root) == walk_afresh(root)
    assert ("docs/locale/de/new_module.py", str((root / "docs/locale/de/new_module.py")
                                                 .resolve())) in walk.walk_repository(root).files
    forget_indexer_state()
    assert watch_module._BUDGET.in_use == 0  # every watch given back


@pytest.mark.skipif(not HAVE_WATCHES or not hasattr(os, "fork"),
                    reason="no inotify or fork here")
def test_a_forked_process_leaves_the_watches_events_to_the_process_that_set_them(
        tmp_path, monkeypatch):
    """A forked process shares its parent's inotify queue: it walks with watches of its
    own, and the events stay for the parent."""
    from ctxdb.recon import walk

    monkeypatch.setattr(walk, "RACY_WINDOW_NS", TEST_RACY_WINDOW_NS)
    root = tmp_path / "repo"
    _write(root, REPO)
    forget_indexer_state()
    time.sleep(PAST_THE_WINDOW_S)
    walk.walk_repository(root)  # lists and watches every directory
    (root / "app/added.py").write_text("X = 1\n")  # its event waits in the queue
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through its exit status
        found = walk.walk_repository(root)
        os._exit(0 if any(rel == "app/added.py" for rel, _ in found.files) else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    found = walk.walk_repository(root)
    assert any(rel == "app/added.py" for rel, _ in found.files)
    assert found == walk_afresh(root)


def _random_directory_change(root: Path, rng: random.Random, number: int) -> str:
    """One change to the tree's directories: files and directories added, removed,
    renamed, moved in and out of the tree, a directory replaced at its old path. Returns
    what it did."""
    directories = sorted(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink())
    outside = root.parent / "outside"
    place = rng.choice([root] + directories)
    kind = rng.choice(["file", "dir", "dir", "remove", "rename", "replace", "replace", "out",
                       "in", "venv", "content"])
    leaf = not any(p.is_dir() for p in place.iterdir())  # removed or moved out: the tree
    # keeps growing
    if kind == "file":
        (place / f"f{number}.py").write_text(f"X = {number}\n")
    elif kind == "dir":
        (place / f"d{number}/sub").mkdir(parents=True)
        (place / f"d{number}/sub/m{number}.py").write_text("Y = 1\n")
    elif kind == "remove" and place != root and leaf:
        shutil.rmtree(place)
    elif kind == "rename" and place != root:
        place.rename(place.parent / f"r{number}")
    elif kind == "replace" and place != root:  # moved away, and a copy at its path with
        moved = place.parent / f"moved{number}"  # a file more in each directory
        place.rename(moved)
        shutil.copytree(moved, place, symlinks=True)
        for directory in [place, *(p for p in place.rglob("*") if p.is_dir())]:
            (directory / f"c{number}.py").write_text("Z = 1\n")
    elif kind == "out" and place != root and leaf:
        outside.mkdir(exist_ok=True)
        place.rename(outside / f"o{number}")
    elif kind == "in" and outside.exists() and any(outside.iterdir()):
        rng.choice(sorted(outside.iterdir())).rename(place / f"back{number}")
    elif kind == "venv" and place != root:  # a virtualenv's marker, or its removal
        marker = place / "pyvenv.cfg"
        if marker.exists():
            marker.unlink()
        else:
            marker.write_text("home = /usr\n")
    else:
        files = sorted(root.rglob("*.py"))
        if files:
            with rng.choice(files).open("a") as fh:
                fh.write("# more\n")
        return "content"
    return f"{kind} {place.relative_to(root)}"


@pytest.mark.skipif(not HAVE_WATCHES, reason="no inotify here")
def test_a_watched_walk_after_directory_changes_finds_what_a_fresh_walk_finds(
        tmp_path, monkeypatch):
    """Random changes to the directories, each followed at once (no settling time) by a
    walk with the watches kept, which must equal a walk with nothing kept."""
    from ctxdb.recon import walk

    monkeypatch.setattr(walk, "RACY_WINDOW_NS", TEST_RACY_WINDOW_NS)
    rng = random.Random(WATCH_EDIT_SEED)
    root = tmp_path / "repo"
    _write(root, REPO)
    (root / "docs/locale/de/LC_MESSAGES").mkdir(parents=True)
    (root / "app/sub/deep").mkdir(parents=True)
    forget_indexer_state()
    time.sleep(PAST_THE_WINDOW_S)
    walk.walk_repository(root)
    for number in range(WATCH_EDIT_STEPS):
        change = f"change {number}: {_random_directory_change(root, rng, number)}"
        assert walk.walk_repository(root) == walk_afresh(root), change
        if number % SETTLE_EVERY == 0:
            time.sleep(PAST_THE_WINDOW_S)  # the listings settle: kept, and trusted
            assert walk.walk_repository(root) == walk_afresh(root), change


# --- random edits ----------------------------------------------------------------------------

RANDOM_EDIT_SEED = 25
RANDOM_EDIT_STEPS = 24
_DEFINITION = re.compile(r"^\s*(?:def|class) ([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)
_CLASS_BASES = re.compile(r"^class ([A-Za-z_][A-Za-z0-9_]*)(\([^)]*\))?:", re.MULTILINE)


def _random_edit(root: Path, rng: random.Random, number: int) -> list[str]:
    """One random edit of the kinds that move names; returns the paths it touched."""
    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py"))
    rel = rng.choice(files)
    text = (root / rel).read_text()
    names = _DEFINITION.findall(text)
    kind = rng.choice(["rename_definition", "rename_everywhere", "copy_definition",
                       "rebase", "import", "body", "delete_file", "add_file", "init"])
    if kind == "rename_definition" and names:
        name = rng.choice(names)
        (root / rel).write_text(re.sub(rf"\b(def|class) {name}\b", rf"\1 {name}_r{number}",
                                       text, count=1))
        return [rel]
    if kind == "rename_everywhere" and names:
        name = rng.choice(names)
        for other in files:
            path = root / other
            path.write_text(re.sub(rf"\b{name}\b", f"{name}_e{number}", path.read_text()))
        return files
    if kind == "copy_definition" and names:  # a second definition elsewhere: ambiguity
        target = rng.choice(files)
        name = rng.choice(names)
        with (root / target).open("a") as fh:
            fh.write(f"\n\ndef {name}():\n    return {number}\n")
        return [target]
    if kind == "rebase":
        classes = _CLASS_BASES.findall(text)
        every_class = [c for f in files for c, _ in _CLASS_BASES.findall((root / f).read_text())]
        if classes and every_class:
            name, _ = rng.choice(classes)
            base = rng.choice(every_class + [""])
            (root / rel).write_text(re.sub(rf"^class {name}(\([^)]*\))?:",
                                           f"class {name}({base}):" if base else f"class {name}:",
                                           text, count=1, flags=re.MULTILINE))
            return [rel]
    if kind == "import":
        module = rng.choice(files)[:-3].replace("/", ".").removesuffix(".__init__")
        line = rng.choice([f"from {module} import *\n", f"import {module} as m{number}\n",
                           f"from {module} import {rng.choice(names or ['x'])}\n"])
        (root / rel).write_text(line + text)
        return [rel]
    if kind == "delete_file" and len(files) > 3:
        (root / rel).unlink()
        return [rel]
    if kind == "add_file":
        new = f"shopcart/added_{number}.py"
        (root / new).write_text(f"from .money import ZERO\n\n\nclass Added{number}:\n"
                                f"    def total(self):\n        return ZERO\n")
        return [new]
    if kind == "init":
        init = rng.choice(["tests/__init__.py", "shopcart/__init__.py"])
        if (root / init).exists():
            (root / init).unlink()
        else:
            (root / init).write_text("from .money import *\n" if "shopcart" in init else "")
        return [init]
    (root / rel).write_text(text + f"\n# edit {number}\n")
    return [rel]


def test_random_edits_leave_what_a_cold_build_makes(tmp_path):
    rng = random.Random(RANDOM_EDIT_SEED)
    root = tmp_path / "shopcart"
    shutil.copytree(SHOPCART, root)
    target, cold = str(tmp_path / "recon.db"), str(tmp_path / "cold.db")
    index_repository(root, target)
    for number in range(RANDOM_EDIT_STEPS):
        touched = _random_edit(root, rng, number)
        if rng.random() < 0.25:
            forget_indexer_state()
        told = touched if rng.random() < 0.5 else None
        stats = index_repository(root, target, changed=told)
        content, reported = _cold_build(root, cold)
        _assert_same(index_content(target), content, f"random edit {number}")
        assert _reported(stats) == reported, f"random edit {number}: the totals differ"


def test_cli_index_told_what_changed(tmp_path, capsys):
    from test_recon import _cli

    root = tmp_path / "shopcart"
    shutil.copytree(SHOPCART, root)
    db = str(tmp_path / "recon.db")
    assert _cli("recon", "index", str(root), "--recon", db) == 0
    _edit(root, "shopcart/tax.py", '"""Sales tax by region."""', '"""Sales tax, by region."""')
    _edit(root, "shopcart/money.py", '"""', '"""Money. ')
    capsys.readouterr()
    assert _cli("recon", "index", str(root), "--recon", db, "--changed", "shopcart/tax.py") == 0
    assert "18 files (1 parsed, 0 removed" in capsys.readouterr().out
    assert _cli("recon", "index", str(root), "--recon", db, "--changed", "../elsewhere.py") == 2
    assert "changed: '../elsewhere.py' is not under the indexed root" in capsys.readouterr().err
    assert _cli("recon", "index", str(root), "--recon", db) == 0  # a walk finds the other
    assert "18 files (1 parsed, 0 removed" in capsys.readouterr().out


def test_a_run_starts_over_when_another_indexer_commits_first(tmp_path, monkeypatch):
    """Between a run's reading the index and its write lock another indexer may commit:
    the run reads again (its file states and kept resolver would be of the old index)."""
    from ctxdb.recon import indexer

    root = tmp_path / "repo"
    _write(root, REPO)
    target = str(tmp_path / "recon.db")
    index_repository(root, target)
    cold = str(tmp_path / "cold.db")
    real_read_state = indexer._read_state
    commits = []

    def read_then_another_commits(*args):
        state = real_read_state(*args)
        if len(commits) < commits_wanted:  # another indexer's commit: a new generation
            with sqlite3.connect(target) as con:
                con.execute("UPDATE recon_meta SET value = ? WHERE key = ?",
                            (f"another-{len(commits)}", GENERATION_KEY))
            commits.append(True)
        return state

    monkeypatch.setattr(indexer, "_read_state", read_then_another_commits)
    commits_wanted = 1
    _edit(root, "app/core.py", "return engine", "return engine  # changed")
    assert index_repository(root, target).files_parsed == 1
    assert commits == [True]
    _assert_same(index_content(target), _cold(root, cold), "a run that started over")

    commits.clear()
    commits_wanted = indexer.MAX_INDEX_ATTEMPTS
    _edit(root, "app/core.py", "# changed", "# changed again")
    with pytest.raises(RuntimeError, match="another indexer kept changing the index"):
        index_repository(root, target)


def test_an_index_file_written_anew_at_its_path_is_not_read_through_a_kept_connection(
        tmp_path):
    """A run keeps its engine, connection open, for the next run over the same index file:
    another file put at that path (removed and rebuilt, or copied over) is another index,
    read and written through a connection of its own."""
    root, other_root = tmp_path / "repo", tmp_path / "other"
    _write(root, REPO)
    _write(other_root, {"lone.py": "def lone():\n    return 1\n"})
    target, other = str(tmp_path / "recon.db"), str(tmp_path / "other.db")
    index_repository(root, target)
    assert kept_module._ENGINES  # kept: the case this test is about
    index_repository(other_root, other)
    os.replace(other, target)  # the other tree's index, at the kept engine's path
    index_repository(root, target)
    _assert_same(index_content(target), _cold(root, str(tmp_path / "cold.db")),
                 "an index file replaced at its path")
    os.unlink(target)
    assert index_repository(root, target).files_parsed == len(REPO)  # built anew


def _engines_opened(monkeypatch) -> list[object]:
    """The recon engines runs open from now on (a kept one reused is not opened)."""
    opened: list[object] = []
    create = indexer.schema.create_recon_engine

    def counted(*args, **kwargs):
        opened.append(args[0])
        return create(*args, **kwargs)

    monkeypatch.setattr(indexer.schema, "create_recon_engine", counted)
    return opened


def test_an_index_file_copied_over_in_place_is_read_through_a_new_connection(
        tmp_path, monkeypatch):
    """Copied over (the same inode): SQLite's page cache would trust a header the copy may
    share, so the kept engine goes with the file's size and times."""
    root, other_root = tmp_path / "repo", tmp_path / "other"
    _write(root, REPO)
    _write(other_root, {"lone.py": "def lone():\n    return 1\n"})
    target, other = str(tmp_path / "recon.db"), str(tmp_path / "other.db")
    index_repository(root, target)
    index_repository(other_root, other)
    opened = _engines_opened(monkeypatch)
    index_repository(root, target)
    assert opened == []  # nothing changed: the kept engine serves
    inode = os.stat(target).st_ino
    shutil.copyfile(other, target)
    assert os.stat(target).st_ino == inode
    index_repository(root, target)
    assert opened == [target]
    _assert_same(index_content(target), _cold(root, str(tmp_path / "cold.db")),
                 "an index file copied over in place")


def test_an_index_file_replaced_during_the_run_that_created_it_is_not_kept(
        tmp_path, monkeypatch):
    root, other_root = tmp_path / "repo", tmp_path / "other"
    _write(root, REPO)
    _write(other_root, {"lone.py": "def lone():\n    return 1\n"})
    target, other = str(tmp_path / "recon.db"), str(tmp_path / "other.db")
    index_repository(other_root, other)
    real_find_changes = indexer._find_changes
    replaced = []

    def another_file_meanwhile(*args):
        if not replaced:  # another file at the path while this run writes the first
            replaced.append(True)
            os.replace(other, target)
        return real_find_changes(*args)

    monkeypatch.setattr(indexer, "_find_changes", another_file_meanwhile)
    index_repository(root, target)  # wrote the file it created, now unlinked
    opened = _engines_opened(monkeypatch)
    index_repository(root, target)
    assert opened == [target]
    _assert_same(index_content(target), _cold(root, str(tmp_path / "cold.db")),
                 "an index file replaced during the run that created it")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_process_does_not_use_its_parents_kept_connection(tmp_path):
    root = tmp_path / "repo"
    _write(root, REPO)
    target = str(tmp_path / "recon.db")
    index_repository(root, target)
    assert kept_module._ENGINES
    _edit(root, "app/core.py", "return engine", "return engine  # in the child")
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through its exit status
        engines_kept = bool(kept_module._ENGINES)
        parsed = index_repository(root, target).files_parsed
        os._exit(0 if not engines_kept and parsed == 1 else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert index_repository(root, target).files_parsed == 0  # the child's commit, seen
    _assert_same(index_content(target), _cold(root, str(tmp_path / "cold.db")),
                 "a run in a forked child")
