"""Probe the command line with a corpus of bad input (issue 14's 238-case probe).

    python bench/bad_input.py [--postgresql] [--verbose]

Builds ~240 bad CLI invocations — malformed JSON, wrong types, out-of-range integers
and scores, over-long texts and lists, broken encodings, bad paths, and `--db` files
that are not ctxdb stores — and runs each through `ctxdb.cli.main` in this process
(an exception escaping main is what a user sees as a traceback). Construct cases go
against a store already holding one decision (SQLite, or with --postgresql a
throwaway PostgreSQL cluster's database), whose rows are counted before and after;
every `--db` file given is hashed before and after.

Each case names what its refusal must name: the field (``request.seq``) where one is
at fault, else the file. A refusal is exit 2 with one line ``ctxdb: error: …`` on
stderr. The LAST line is the figures as key=value pairs.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import io
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from requests_data import edit_request  # noqa: E402
from sqlalchemy import create_engine, text  # noqa: E402

from ctxdb import ContextStore  # noqa: E402
from ctxdb.cli import EXIT_BAD_INPUT, main  # noqa: E402
from ctxdb.models import metadata  # noqa: E402
from ctxdb.request import (  # noqa: E402
    ENTITY_KEY_MAX_CHARS,
    ID_MAX_CHARS,
    LIST_MAX_ITEMS,
    LONG_TEXT_MAX_CHARS,
    SHORT_TEXT_MAX_CHARS,
    STORE_INTEGER_MAX,
    TASK_MAX_CHARS,
    VARIANT_MAX_CHARS,
)

SHOPCART = ROOT / "fixtures" / "repos" / "shopcart"


def base_request() -> dict:
    data = edit_request(run_id="probe", seq=3, token_ceiling=4000, derive_impact=False)
    data["plan_node"]["insertion_point"] = {"path": "shop/cart.py", "line": 2, "end_line": 3}
    data["plan_node"]["dependencies"] = ["shop/report.py::render_report"]
    data["plan_node"]["preconditions"] = ["the cart has items"]
    data["live"]["events"] = [{"kind": "error", "text": "ValueError: x", "decision_seq": 1}]
    return data


BASE = base_request()

# field -> (kind, limit): what the probe varies for each place in the request
INTEGERS = {
    ("seq",): 1, ("token_ceiling",): 256, ("plan_node", "insertion_point", "line"): 1,
    ("plan_node", "insertion_point", "end_line"): 2, ("impact_edges", 0, "depth"): 1,
    ("live", "events", 0, "decision_seq"): 1,
}
TEXTS = {
    ("run_id",): ID_MAX_CHARS, ("instance_id",): ID_MAX_CHARS, ("task",): TASK_MAX_CHARS,
    ("variant",): VARIANT_MAX_CHARS, ("plan_node", "node_id"): ID_MAX_CHARS,
    ("plan_node", "obligation"): SHORT_TEXT_MAX_CHARS,
    ("plan_node", "target_entity"): ENTITY_KEY_MAX_CHARS,
    ("plan_node", "decision_question"): SHORT_TEXT_MAX_CHARS,
    ("plan_node", "insertion_point", "path"): ENTITY_KEY_MAX_CHARS,
    ("evidence", 0, "entity"): ENTITY_KEY_MAX_CHARS,
    ("evidence", 0, "content"): LONG_TEXT_MAX_CHARS,
    ("evidence", 0, "provenance"): SHORT_TEXT_MAX_CHARS,
    ("impact_edges", 0, "head"): ENTITY_KEY_MAX_CHARS,
    ("impact_edges", 0, "tail"): ENTITY_KEY_MAX_CHARS,
    ("live", "test_outputs", 0): LONG_TEXT_MAX_CHARS,
    ("live", "events", 0, "text"): LONG_TEXT_MAX_CHARS,
}
LISTS = [("evidence",), ("impact_edges",), ("plan_node", "acceptance_criteria"),
         ("plan_node", "required_validation"), ("live", "tool_outputs")]
ENUMS = [("decision_type",), ("arm",), ("evidence", 0, "source"), ("evidence", 0, "kind"),
         ("impact_edges", 0, "kind"), ("live", "events", 0, "kind")]
OBJECTS = [("plan_node",), ("live",), ("evidence", 0), ("impact_edges", 0),
           ("plan_node", "insertion_point"), ("live", "events", 0)]
SCORE = ("evidence", 1, "score")
BAD_INTEGERS = {"zero": 0, "negative": -1, "2^31": STORE_INTEGER_MAX + 1, "2^63": 2**63,
                "2^64+1": 2**64 + 1, "float": 2.0, "string": "3", "bool": True}


def json_path(path) -> str:
    return "request" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def changed(path, value) -> dict:
    data = copy.deepcopy(BASE)
    parent = data
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = value
    return data


def deleted(path) -> dict:
    data = copy.deepcopy(BASE)
    parent = data
    for part in path[:-1]:
        parent = parent[part]
    del parent[path[-1]]
    return data


@dataclass
class Case:
    name: str
    argv: list[str]
    names: str  # what the refusal must name (a field's JSON path, or a file)


class Corpus:
    def __init__(self, work: Path, store: str):
        self.work, self.store, self.cases = work, store, []
        self.files_given: list[Path] = []

    def request(self, name: str, content: bytes | str | dict, names: str) -> None:
        path = self.work / "requests" / f"{len(self.cases):03d}_{name.replace('/', '_')}.json"
        if isinstance(content, dict):
            content = json.dumps(content)
        path.write_bytes(content.encode("utf-8", "surrogatepass")
                         if isinstance(content, str) else content)
        self.cases.append(Case(f"request {name}", ["construct", str(path), "--db", self.store,
                                                   "--summary"],
                               names if names.startswith("request") else str(path)))

    def command(self, name: str, argv: list[str], names: str) -> None:
        self.cases.append(Case(name, argv, names))


def build_corpus(corpus: Corpus, not_stores: dict[str, Path], newer: Path) -> None:
    # malformed JSON
    good = json.dumps(BASE)
    for cut in (0, 1, 10, len(good) // 2, len(good) - 1):
        corpus.request(f"truncated at {cut}", good[:cut], "file")
    for name, raw in {
        "trailing comma": good[:-1] + ",}", "single quotes": good.replace('"', "'"),
        "comment": "// request\n" + good, "BOM": "\ufeff" + good, "two objects": good + good,
        "bare word": "request", "null": "null", "list": "[]", "number": "42",
        "string": '"request"', "control character": good.replace("Fix the", "Fix\x01the"),
        "unclosed string": '{"run_id": "r', "deep list 1000": "[" * 1000 + "]" * 1000,
        "deep list 100000": "[" * 100_000 + "]" * 100_000,
        "deep object 1000": '{"a":' * 1000 + "1" + "}" * 1000,
        "deep in live": good[:-1] + ', "live": ' + "[" * 5000 + "]" * 5000 + "}",
        "deep in a field": json.dumps(changed(("plan_node", "preconditions"), [])).replace(
            '"preconditions": []', '"preconditions": ' + "[" * 900 + "]" * 900),
        "NaN literal at the top": "NaN", "empty": "", "whitespace": "  \n ",
    }.items():
        field = "request.plan_node.preconditions" if name == "deep in a field" else "file"
        corpus.request(name, raw, field)
    # missing fields, unknown fields
    for field in ("run_id", "instance_id", "seq", "decision_type", "task", "plan_node"):
        corpus.request(f"missing {field}", deleted((field,)), json_path((field,)))
    for path in (("plan_node", "node_id"), ("plan_node", "obligation"),
                 ("evidence", 0, "source"), ("evidence", 0, "provenance"),
                 ("impact_edges", 0, "depth"), ("live", "events", 0, "text")):
        corpus.request(f"missing {json_path(path)}", deleted(path), json_path(path))
    unknown = copy.deepcopy(BASE)
    unknown["k" * 10_000_000] = 1
    corpus.request("unknown 10 MB field name", unknown, "request")
    for path in OBJECTS:
        data = changed(path + ("surprise",), 1)
        corpus.request(f"unknown field in {json_path(path)}", data, json_path(path))
    # types
    for path in INTEGERS:
        for label, value in (("string", "1"), ("list", [1]), ("object", {}), ("null", None)):
            if label == "null" and path[-1] in ("token_ceiling", "end_line", "decision_seq"):
                continue  # null is allowed there
            corpus.request(f"{json_path(path)} {label}", changed(path, value), json_path(path))
    for path in TEXTS:
        for label, value in (("number", 5), ("list", ["x"]), ("bool", False)):
            corpus.request(f"{json_path(path)} {label}", changed(path, value), json_path(path))
    for path in LISTS:
        for label, value in (("string", "x"), ("object", {}), ("number", 1)):
            corpus.request(f"{json_path(path)} {label}", changed(path, value), json_path(path))
    for path in ENUMS:
        for label, value in (("unknown", "nope"), ("number", 1), ("10 MB", "e" * 10_000_000)):
            corpus.request(f"{json_path(path)} {label}", changed(path, value), json_path(path))
    for path in OBJECTS:
        for label, value in (("string", "x"), ("list", [])):
            corpus.request(f"{json_path(path)} {label}", changed(path, value), json_path(path))
    corpus.request("derive_impact string", changed(("derive_impact",), "yes"),
                   "request.derive_impact")
    # integer ranges
    for path in INTEGERS:
        for label, value in BAD_INTEGERS.items():
            if label in ("string",):
                continue  # among the types above
            corpus.request(f"{json_path(path)} {label}", changed(path, value), json_path(path))
        corpus.request(f"{json_path(path)} 5000 digits",
                       json.dumps(changed(path, 12345)).replace("12345", "9" * 5000),
                       json_path(path))
    # scores
    for label, raw in (("NaN", "NaN"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity"),
                       ("1e400", "1e400"), ("-1e400", "-1e400"), ("5000 digits", "9" * 5000),
                       ("string", '"9.1"'), ("bool", "true")):
        corpus.request(f"score {label}", json.dumps(changed(SCORE, 12345)).replace(
            "12345", raw), json_path(SCORE))
    # lengths
    for path, most in TEXTS.items():
        corpus.request(f"{json_path(path)} over {most} characters",
                       changed(path, "x" * (most + 1)), json_path(path))
    corpus.request("10 MB entity key", changed(("evidence", 0, "entity"), "k" * 10_000_000),
                   "request.evidence[0].entity")
    corpus.request("10 MB task", changed(("task",), "t" * 10_000_000), "request.task")
    for path in LISTS:
        corpus.request(f"{json_path(path)} over {LIST_MAX_ITEMS} items",
                       changed(path, ["x"] * (LIST_MAX_ITEMS + 1)), json_path(path))
    # entity keys and relations
    for label, key in (("span past 2^31", "shop/cart.py:1-99999999999"),
                       ("span backwards", "shop/cart.py:9-2"), ("two colons", "a:b:c"),
                       ("empty name", "shop/cart.py::")):
        corpus.request(f"target_entity {label}", changed(("plan_node", "target_entity"), key),
                       "request.plan_node.target_entity")
    corpus.request("event after its decision", changed(("live", "events", 0, "decision_seq"), 4),
                   "request.live.events[0].decision_seq")
    corpus.request("end_line before line", changed(("plan_node", "insertion_point", "end_line"),
                                                   1), "request.plan_node.insertion_point.end_line")
    corpus.request("evidence with neither entity nor content",
                   changed(("evidence", 3), {"source": "04", "kind": "symbol", "provenance": "p"}),
                   "request.evidence[3]")
    corpus.request("token_ceiling above the store's", changed(("token_ceiling",), 10**6),
                   "request.token_ceiling")
    # encodings
    for label, raw in (("0xff in a string", good.encode().replace(b"Fix", b"F\xffx")),
                       ("latin-1 file", good.replace("Fix", "Fïx").encode("latin-1")),
                       ("UTF-16 file", good.encode("utf-16")),
                       ("overlong NUL", good.encode().replace(b"Fix", b"F\xc0\x80x")),
                       ("encoded surrogate", good.encode().replace(b"Fix", b"F\xed\xa0\x80x")),
                       ("truncated sequence", good.encode()[:-2] + b"\xe2\x82"),
                       ("random bytes", hashlib.sha512(b"probe").digest() * 8)):
        corpus.request(label, raw, "file")
    for path in list(TEXTS)[:10]:
        corpus.request(f"{json_path(path)} lone surrogate",
                       json.dumps(changed(path, "XSURROGATEX")).replace("XSURROGATEX",
                                                                        "a\\ud800b"),
                       json_path(path))
    corpus.request("raw NUL byte", good.encode().replace(b"Fix", b"F\x00x"), "file")
    # request paths
    missing = corpus.work / "no_such_request.json"
    corpus.command("request file missing", ["construct", str(missing), "--db", corpus.store],
                   str(missing))
    corpus.command("request file is a directory", ["construct", str(corpus.work), "--db",
                                                   corpus.store], str(corpus.work))
    corpus.command("request file /dev/null", ["construct", "/dev/null", "--db", corpus.store],
                   "/dev/null")
    odd = os.fsdecode(os.fsencode(str(corpus.work)) + b"/\xff\xfe.json")
    corpus.command("request file name not UTF-8 (missing)", ["construct", odd, "--db",
                                                             corpus.store], "request file")
    # --db that is not a ctxdb store
    request_file = corpus.work / "good_request.json"
    request_file.write_text(good, encoding="utf-8")
    commands = {"construct": ["construct", str(request_file)], "db current": ["db", "current"],
                "db upgrade": ["db", "upgrade"], "verify": ["verify"], "show": ["show", "1"],
                "why": ["why", "1", "E1"], "diff": ["diff", "1", "2"],
                "report": ["report", "runs"]}
    for kind, path in not_stores.items():
        corpus.files_given.append(path)
        for command, argv in commands.items():
            corpus.command(f"--db {kind}: {command}", [*argv, "--db", str(path)], str(path))
    corpus.files_given.append(newer)
    for command in ("db current", "db upgrade", "construct", "verify"):
        corpus.command(f"--db newer stamp: {command}", [*commands[command], "--db", str(newer)],
                       "0099_newer")
    nowhere = corpus.work / "no_such_dir" / "ctx08.db"
    for command in ("construct", "db upgrade", "show"):
        corpus.command(f"--db in a missing directory: {command}",
                       [*commands[command], "--db", str(nowhere)], str(nowhere))
    for label, url in (("postgresql without driver", "postgresql://u@127.0.0.1:1/x"),
                       ("bad port", "postgresql+psycopg://u:pw@host:notaport/x"),
                       ("unknown scheme", "mysql://u@host/x")):
        corpus.command(f"--db URL {label}", ["db", "current", "--db", url], "database URL")
    # decision arguments
    for label, ref in (("past 2^63", "99999999999999999999999"), ("past 2^31", "2147483648"),
                       ("superscript digit", "²"), ("negative", "-1"), ("zero", "0"),
                       ("10 kB", "9" * 10_000), ("bad ref", "req-zz")):
        corpus.command(f"show decision {label}", ["show", ref, "--db", corpus.store], "decision")
    corpus.command("why item unknown", ["why", "1", "E999", "--db", corpus.store], "E999")
    corpus.command("tokens count latin-1 file", ["tokens", "count",
                                                 str(_latin1_file(corpus.work))], "FILE")


def _latin1_file(work: Path) -> Path:
    path = work / "latin1.txt"
    path.write_bytes("Fïx".encode("latin-1"))
    return path


def make_not_stores(work: Path) -> tuple[dict[str, Path], Path]:
    random_bytes = work / "random.db"
    random_bytes.write_bytes(hashlib.sha512(b"not a database").digest() * 64)
    foreign = work / "foreign.db"
    with contextlib.closing(sqlite3.connect(foreign)) as connection:
        connection.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        connection.execute("INSERT INTO invoices VALUES (1, 9.5)")
        connection.commit()
    directory = work / "a_directory.db"
    directory.mkdir()
    from ctxdb.recon import index_repository

    recon = work / "recon.db"
    index_repository(SHOPCART, recon)
    real = work / "real.db"
    with ContextStore.open(real) as store:
        store.construct(BASE)
    truncated = work / "truncated.db"
    truncated.write_bytes(real.read_bytes()[:100])  # SQLite's header, nothing after
    newer = work / "newer.db"
    shutil.copy(real, newer)
    with contextlib.closing(sqlite3.connect(newer)) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '0099_newer'")
        connection.commit()
    return ({"random bytes": random_bytes, "foreign SQLite": foreign, "directory": directory,
             "recon index": recon, "truncated store": truncated}, newer)


def row_count(url: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return sum(connection.execute(text(f"SELECT COUNT(*) FROM {t.name}")).scalar_one()
                       for t in metadata.sorted_tables)
    finally:
        engine.dispose()


def digest(path: Path) -> str:
    if path.is_dir():
        return "dir:" + ",".join(sorted(p.name for p in path.iterdir()))
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else "absent"


def run(case: Case) -> tuple[int | None, str, bool]:
    """(exit status, stderr, whether an exception escaped main)."""
    out, err = io.StringIO(), io.StringIO()
    escaped = False
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(case.argv)
        except SystemExit as exc:  # argparse
            status = exc.code
        except BaseException:
            escaped, status = True, None
            traceback.print_exc(file=err)
    return status, err.getvalue(), escaped


def main_probe() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgresql", action="store_true",
                        help="construct cases against a throwaway PostgreSQL store")
    parser.add_argument("--verbose", action="store_true", help="print every case's outcome")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ctxdb-bad-input-"))
    cluster = None
    home = os.getcwd()
    os.chdir(work)  # no ./recon.db or $CTXDB_RECON of the caller's changes an outcome
    os.environ.pop("CTXDB_RECON", None)
    try:
        (work / "requests").mkdir()
        if args.postgresql:
            from pgcluster import PostgresCluster

            cluster = PostgresCluster()
            cluster.start()
            admin = create_engine(cluster.url("postgres"), isolation_level="AUTOCOMMIT")
            with admin.connect() as connection:
                connection.execute(text('CREATE DATABASE "probe"'))
            admin.dispose()
            store = cluster.url("probe")
        else:
            store = f"sqlite:///{work / 'store.db'}"
        with contextlib.redirect_stderr(io.StringIO()):  # "no ranking endpoint": expected
            with ContextStore.open(store) as opened:
                opened.construct(BASE)
            not_stores, newer = make_not_stores(work)
        corpus = Corpus(work, store)
        build_corpus(corpus, not_stores, newer)
        rows_before = row_count(store)
        files_before = {path: digest(path) for path in corpus.files_given}
        tracebacks = refusals = naming = not_exit_2 = 0
        for case in corpus.cases:
            status, err, escaped = run(case)
            lines = [line for line in err.splitlines() if line]
            refused = (status == EXIT_BAD_INPUT and len(lines) == 1
                       and lines[0].startswith("ctxdb: error: "))
            named = refused and case.names in lines[0]
            tracebacks += escaped or "Traceback (most recent call last)" in err
            refusals += refused
            naming += named
            not_exit_2 += status != EXIT_BAD_INPUT
            if args.verbose or not named:
                print(f"{'ok ' if named else 'BAD'} [{status}] {case.name}: "
                      f"{(lines[0] if lines else '(nothing on stderr)')[:160]}")
        rows_written = row_count(store) - rows_before
        files_changed = sum(digest(path) != before for path, before in files_before.items())
        print(f"cases={len(corpus.cases)} tracebacks={tracebacks} refusals={refusals} "
              f"refusals_naming_field={naming} not_exit_2={not_exit_2} "
              f"rows_written={rows_written} db_files_changed={files_changed} "
              f"backend={'postgresql' if args.postgresql else 'sqlite'}")
    finally:
        os.chdir(home)
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main_probe()
