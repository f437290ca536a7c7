"""The indexer on hostile trees (issue 14): files too large or too deep to parse become
file rows without symbols, and what the walk passes over (FIFOs, sockets, symlink
loops, links leaving the root, ...) is counted and listed — in `IndexStats.skipped`,
the CLI summary and `ctxdb recon stats`. Also: the body index's one-statement bulk
insert holds what row-by-row inserts hold (issue 11), and a stale index is rebuilt."""

from __future__ import annotations

import argparse
import hashlib
import os
import socket
import sqlite3
from pathlib import Path

import pytest

from ctxdb.cli.recon import register
from ctxdb.recon import IndexLimits, SkippedPath, check_recon_version, index_repository
from ctxdb.recon import fulltext as recon_fulltext
from ctxdb.recon import indexer as recon_indexer
from ctxdb.recon import walk as recon_walk
from ctxdb.recon.extract import (
    SKIP_TOO_DEEP,
    SKIP_TOO_LARGE,
    _parser,
    body_terms,
    extract_file,
    tree_deeper_than,
)

# Small limits so the generated files stay small; bench/hostile_tree.py shows the real
# 50 MB and 100k-deep cases against the default limits.
TEST_LIMITS = IndexLimits(max_file_bytes=4096, max_parse_depth=200)
NESTED_CALLS = 500  # "f(" this deep is far past TEST_LIMITS.max_parse_depth


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="ctxdb")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.fixture
def hostile(tmp_path) -> Path:
    """A tree holding one of each hostile thing, and one ordinary module."""
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "ok.py").write_text("def ordinary():\n    return 1\n")
    os.mkfifo(root / "pkg" / "pipe.py")  # reading it would block the indexer
    (root / "loop_a.py").symlink_to("loop_b.py")
    (root / "loop_b.py").symlink_to("loop_a.py")
    (root / "pkg" / "again").symlink_to("..")  # a directory link back up: a loop
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.py").write_text("def secret():\n    pass\n")
    (root / "leaves.py").symlink_to(outside / "secret.py")
    (root / "outdir").symlink_to(outside)
    (root / "dangling.py").symlink_to("nothing_here.py")
    # a unix socket path is limited to ~108 bytes: bind from inside the directory
    here = os.getcwd()
    os.chdir(root)
    try:
        listener = socket.socket(socket.AF_UNIX)
        listener.bind("sock.py")
        listener.close()
    finally:
        os.chdir(here)
    (root / "big.py").write_text("def g():\n    pass\n" * 400)  # 7,200 bytes > 4,096
    (root / "deep.py").write_text("x = " + "f(" * NESTED_CALLS + ")" * NESTED_CALLS + "\n")
    return root


EXPECTED_SKIPPED = (
    SkippedPath("big.py", SKIP_TOO_LARGE),
    SkippedPath("dangling.py", recon_walk.SKIP_SYMLINK_BROKEN),
    SkippedPath("deep.py", SKIP_TOO_DEEP),
    SkippedPath("leaves.py", recon_walk.SKIP_SYMLINK_OUTSIDE),
    SkippedPath("loop_a.py", recon_walk.SKIP_SYMLINK_LOOP),
    SkippedPath("loop_b.py", recon_walk.SKIP_SYMLINK_LOOP),
    SkippedPath("outdir", recon_walk.SKIP_SYMLINK_OUTSIDE),
    SkippedPath("pkg/again", recon_walk.SKIP_SYMLINK_LOOP),
    SkippedPath("pkg/pipe.py", recon_walk.SKIP_FIFO),
    SkippedPath("sock.py", recon_walk.SKIP_SOCKET),
)


def _rows(db: Path, sql: str, params: tuple = ()) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def test_hostile_tree_is_indexed_with_every_skip_listed(hostile, tmp_path):
    db = tmp_path / "recon.db"
    stats = index_repository(hostile, db, limits=TEST_LIMITS)
    assert stats.skipped == EXPECTED_SKIPPED
    assert stats.files_skipped == len(EXPECTED_SKIPPED)
    # the ordinary files are indexed as ever; the too large / too deep ones are file rows
    files = dict(_rows(db, "SELECT path, skipped FROM file"))
    assert files == {"pkg/__init__.py": None, "pkg/ok.py": None, "big.py": SKIP_TOO_LARGE,
                     "deep.py": SKIP_TOO_DEEP}
    assert _rows(db, "SELECT key FROM symbol WHERE kind != 'module'") == [("pkg/ok.py::ordinary",)]
    for path in ("big.py", "deep.py"):
        assert _rows(db, "SELECT count(*) FROM symbol s JOIN file f ON f.id = s.file_id"
                         " WHERE f.path = ?", (path,)) == [(0,)]
        assert _rows(db, "SELECT count(*) FROM file_source s JOIN file f ON f.id = s.file_id"
                         " WHERE f.path = ?", (path,)) == [(0,)]
    # the big file's hash and line count were read in pieces, and are the file's own
    data = (hostile / "big.py").read_bytes()
    assert _rows(db, "SELECT sha256, size_bytes, line_count FROM file WHERE path = 'big.py'") \
        == [(hashlib.sha256(data).hexdigest(), len(data), 800)]
    assert _rows(db, "SELECT path, reason FROM skipped_path ORDER BY path") == [
        tuple(s) for s in EXPECTED_SKIPPED if s.reason not in (SKIP_TOO_LARGE, SKIP_TOO_DEEP)
    ]


def test_default_limits_parse_the_same_files(hostile, tmp_path):
    """Not a test that cannot fail the other way: with the default limits the 7 KB file and
    the 500-deep one are ordinary files, parsed into symbols."""
    db = tmp_path / "recon.db"
    stats = index_repository(hostile, db)
    assert {s.path for s in stats.skipped} == {s.path for s in EXPECTED_SKIPPED} - {
        "big.py", "deep.py"}
    assert _rows(db, "SELECT count(*) FROM symbol s JOIN file f ON f.id = s.file_id"
                     " WHERE f.path = 'big.py' AND s.kind = 'function'") == [(400,)]


def test_skips_stay_listed_and_follow_the_tree(hostile, tmp_path):
    db = tmp_path / "recon.db"
    index_repository(hostile, db, limits=TEST_LIMITS)
    again = index_repository(hostile, db, limits=TEST_LIMITS)
    assert (again.files_parsed, again.skipped) == (0, EXPECTED_SKIPPED)
    # no Python file changed, but a new FIFO appeared and a link went away
    os.mkfifo(hostile / "pkg" / "second_pipe.py")
    (hostile / "dangling.py").unlink()
    third = index_repository(hostile, db, limits=TEST_LIMITS)
    assert third.files_parsed == 0
    want = tuple(sorted(
        [s for s in EXPECTED_SKIPPED if s.path != "dangling.py"]
        + [SkippedPath("pkg/second_pipe.py", recon_walk.SKIP_FIFO)]))
    assert third.skipped == want
    # the big file shrinks under the limit: parsed on the next run, no longer skipped
    (hostile / "big.py").write_text("def g():\n    pass\n")
    fourth = index_repository(hostile, db, limits=TEST_LIMITS)
    assert fourth.files_parsed == 1
    assert SkippedPath("big.py", SKIP_TOO_LARGE) not in fourth.skipped
    assert _rows(db, "SELECT skipped FROM file WHERE path = 'big.py'") == [(None,)]
    assert _rows(db, "SELECT count(*) FROM symbol WHERE key = 'big.py::g'") == [(1,)]


def test_cli_summary_and_stats_list_the_skipped(hostile, tmp_path, capsys):
    db = str(tmp_path / "recon.db")
    assert _cli("recon", "index", str(hostile), "--recon", db) == 0
    out = capsys.readouterr().out
    assert "8 skipped)" in out  # the default limits parse big.py and deep.py
    assert "  fifo                 pkg/pipe.py" in out
    assert _cli("recon", "stats", "--recon", db) == 0
    out = capsys.readouterr().out
    assert ("skipped         8  (1 fifo, 1 socket, 1 symlink_broken, 3 symlink_loop, "
            "2 symlink_outside_root)") in out
    for entry in EXPECTED_SKIPPED:
        if entry.reason not in (SKIP_TOO_LARGE, SKIP_TOO_DEEP):
            assert f"  {entry.reason:<20} {entry.path}" in out


def test_stats_of_a_tree_with_nothing_skipped(tmp_path, capsys):
    root = tmp_path / "plain"
    root.mkdir()
    (root / "m.py").write_text("def f():\n    pass\n")
    db = str(tmp_path / "recon.db")
    assert _cli("recon", "index", str(root), "--recon", db) == 0
    assert "0 skipped)" in capsys.readouterr().out
    assert _cli("recon", "stats", "--recon", db) == 0
    assert "skipped         0" in capsys.readouterr().out


def _depth(node) -> int:
    return 1 + max((_depth(child) for child in node.children), default=0)


@pytest.mark.parametrize("source", [
    b"x = f(g(1))\n",
    b"class A:\n    def m(self):\n        return [1, (2, {3: 4})]\n",
    b"",
    b"x = " + b"(" * 60 + b"1" + b")" * 60 + b"\n",
])
def test_tree_deeper_than_agrees_with_the_depth(source):
    root = _parser().parse(source).root_node
    depth = _depth(root)
    for limit in range(1, depth + 3):
        assert tree_deeper_than(root, limit) == (depth > limit), limit


def test_a_deep_file_extracts_to_no_symbols_only_past_the_limit():
    data = ("def f():\n    return " + "g(" * 300 + ")" * 300 + "\n").encode()
    deep = extract_file("d.py", data, "d", False, max_depth=100)
    assert (deep.skipped, deep.symbols, deep.source, deep.body_terms) == (
        SKIP_TOO_DEEP, [], b"", "")
    assert deep.sha256 == hashlib.sha256(data).hexdigest()
    parsed = extract_file("d.py", data, "d", False, max_depth=10_000)
    assert parsed.skipped is None
    assert [s.key for s in parsed.symbols] == ["d.py", "d.py::f"]


# --- the body index's bulk insert ---------------------------------------------------------


def _body_index(db: Path) -> dict[int, list[tuple]]:
    """Per symbol id, the (term, count) pairs the contentless FTS5 table holds."""
    con = sqlite3.connect(db)
    try:
        con.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, symbol_body_fts, instance)")
        rows = con.execute("SELECT doc, term, count(*) FROM temp.v GROUP BY doc, term"
                           " ORDER BY doc, term").fetchall()
    finally:
        con.close()
    out: dict[int, list[tuple]] = {}
    for doc, term, n in rows:
        out.setdefault(doc, []).append((term, n))
    return out


@pytest.mark.parametrize("chunk_chars", [recon_fulltext.BODY_INSERT_CHUNK_CHARS, 1])
def test_cold_bulk_insert_holds_each_symbols_terms(tmp_path, monkeypatch, chunk_chars):
    """The JSON-array inserts of a cold build (one statement for all, or one per file)
    put every symbol's terms under its own id: the same index entries as the terms
    computed symbol by symbol."""
    monkeypatch.setattr(recon_fulltext, "BODY_INSERT_CHUNK_CHARS", chunk_chars)
    root = tmp_path / "repo"
    root.mkdir()
    (root / "a.py").write_text("class PriceCalc:\n    def total_price(self, items):\n"
                               "        return sum(item.price for item in items)\n")
    (root / "b.py").write_text("def shipping_cost(weight):\n    return weight * RATE\n")
    (root / "c.py").write_text("")
    db = tmp_path / "recon.db"
    index_repository(root, db)
    con = sqlite3.connect(db)
    try:
        symbols = con.execute("SELECT s.id, f.path FROM symbol s JOIN file f ON f.id = s.file_id"
                              " ORDER BY s.id").fetchall()
    finally:
        con.close()
    want: dict[int, list[tuple]] = {}
    ids = iter(symbols)
    for path in ("a.py", "b.py", "c.py"):
        parsed = extract_file(path, (root / path).read_bytes(), path[:-3], False)
        for terms in body_terms(parsed.source, parsed.symbols):
            sid, where = next(ids)
            assert where == path
            counts: dict[str, int] = {}
            for term in terms.split():
                counts[term] = counts.get(term, 0) + 1
            if counts:
                want[sid] = sorted(counts.items())
    assert next(ids, None) is None
    assert _body_index(db) == want
    # the class: its qualified name and its own text (the def line is the method's)
    assert want[symbols[1][0]] == [("calc", 2), ("class", 1), ("price", 2), ("pricecalc", 2)]


# --- a stale index is rebuilt on first use -------------------------------------------------


def test_an_index_of_an_older_schema_is_rebuilt_by_the_ab_cache(tmp_path, monkeypatch):
    from ctxdb.ab import materialize

    home = tmp_path / "instance"
    tree = home / materialize.TREE_DIR
    tree.mkdir(parents=True)
    os.mkfifo(tree / "pipe.py")
    (tree / "m.py").write_text("def f():\n    pass\n")
    recon = home / materialize.RECON_FILE
    index_repository(tree, recon)
    con = sqlite3.connect(recon)
    with con:
        con.execute("UPDATE recon_meta SET value = '2' WHERE key = 'schema_version'")
        con.execute("DROP TABLE skipped_path")
    con.close()
    with pytest.raises(Exception, match="schema_version 2"):
        check_recon_version(recon)
    # a build that fails (or is stopped) leaves the stale index as it was, and nothing
    # half-made beside it
    def fails(*args, **kwargs):
        Path(args[1]).write_bytes(b"half")
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(materialize, "index_repository", fails)
        with pytest.raises(KeyboardInterrupt):
            materialize._reindex_if_stale(home)
    assert sorted(p.name for p in home.iterdir()) == sorted(
        [materialize.TREE_DIR, materialize.RECON_FILE])
    materialize._reindex_if_stale(home)
    check_recon_version(recon)
    assert _rows(recon, "SELECT path, reason FROM skipped_path") == [("pipe.py", "fifo")]


def test_postgresql_holds_the_same_skips(hostile, pg_url):
    from ctxdb.recon import open_recon

    stats = index_repository(hostile, pg_url, limits=TEST_LIMITS, progress=False)
    assert stats.skipped == EXPECTED_SKIPPED
    os.mkfifo(hostile / "pkg" / "second_pipe.py")
    again = index_repository(hostile, pg_url, limits=TEST_LIMITS, progress=False)
    want = tuple(sorted(EXPECTED_SKIPPED
                        + (SkippedPath("pkg/second_pipe.py", recon_walk.SKIP_FIFO),)))
    assert (again.files_parsed, again.skipped) == (0, want)
    with open_recon(pg_url) as conn:
        assert recon_indexer.read_skipped(conn) == want
