"""The A/B protocol: instances, gold facts, the runner, and reports checked against
hand-computed values — on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import text

from ctxdb import ContextStore
from ctxdb.ab.gold import changed_tests, edited_entities
from ctxdb.ab.instances import load_instances
from ctxdb.ab.materialize import SkippedBlob, materialize
from ctxdb.ab.oracle_ranker import OracleRanker, Place
from ctxdb.ab.reports import ORACLE_LEGEND, ab_html, ab_screen, run_report
from ctxdb.ab.runner import AbOptions, run_ab
from ctxdb.cli import main
from ctxdb.config import load_settings
from ctxdb.db import resolve_url
from ctxdb.diffs import parse_unified_diff
from ctxdb.outcomes import import_outcomes, parse_outcomes
from ctxdb.pipeline.rank_client import ResidueCandidate, rank_residue
from ctxdb.recon import index_repository
from ctxdb.recon import kept as kept_module
from ctxdb.recon.schema import create_recon_engine

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
INSTANCES = FIXTURES / "swebench" / "instances.jsonl"
SHOPCART = FIXTURES / "repos" / "shopcart"
TARGET = "shopcart/pricing.py::PriceCalculator.total"


# -- gold facts ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def shopcart_recon(tmp_path_factory):
    path = tmp_path_factory.mktemp("recon") / "recon.db"
    index_repository(SHOPCART, str(path))
    engine = create_recon_engine(str(path))
    with engine.connect() as connection:
        yield connection
    engine.dispose()


def test_gold_facts_for_modify_delete_and_insert(shopcart_recon):
    # line 64 of pricing.py is in PriceCalculator.total (47-68); line 74 in taxable_amount
    patch = """--- a/shopcart/pricing.py
+++ b/shopcart/pricing.py
@@ -63,3 +63,3 @@
         discount = self.discount_total(subtotal, items, discounts)
-        taxable = self.taxable_amount(items, exempt_categories)
+        taxable = self.taxable_amount(items, exempt_categories) - discount
         tax = self.tax_policy.tax_for(taxable, region)
@@ -72,4 +72,3 @@
         amount = ZERO
         for item in items:
-            if item.product.taxable and item.product.category not in exempt_categories:
                 amount += item.subtotal()
@@ -1,2 +1,3 @@
 \"\"\"Turning a cart into a priced quote: subtotal, discounts, tax, total.\"\"\"
+import logging
 
--- /dev/null
+++ b/shopcart/audit.py
@@ -0,0 +1 @@
+LOG = []
"""
    facts = {f.entity_key: f for f in edited_entities(shopcart_recon, patch)}
    assert set(facts) == {
        TARGET,  # modified line
        "shopcart/pricing.py::PriceCalculator.taxable_amount",  # deleted line
        # a pure insertion at module level is a fact about the lines around it, not the
        # module whose span holds every line
        "shopcart/pricing.py:1-2",
        "shopcart/audit.py",  # a new file is its module
    }
    assert facts[TARGET].detail == "shopcart/pricing.py:64 changed"
    assert facts[TARGET].changed_lines == (64, 64)
    assert facts["shopcart/pricing.py::PriceCalculator.taxable_amount"].changed_lines == (74, 74)
    assert facts["shopcart/pricing.py:1-2"].changed_lines == (1, 2)
    assert facts["shopcart/audit.py"].changed_lines is None


def test_module_level_changes_are_one_fact_per_hunk(shopcart_recon):
    head = SHOPCART.joinpath("shopcart/pricing.py").read_text().splitlines()
    patch = f"""--- a/shopcart/pricing.py
+++ b/shopcart/pricing.py
@@ -1,4 +1,4 @@
-{head[0]}
+\"\"\"Pricing.\"\"\"
 {head[1]}
-{head[2]}
+{head[2]}  # changed
 {head[3]}
"""
    facts = edited_entities(shopcart_recon, patch)
    # two changed lines in one hunk, with an unchanged line between: one span
    assert [(f.entity_key, f.changed_lines) for f in facts] == [("shopcart/pricing.py:1-3", (1, 3))]


def test_insertion_inside_a_function_goes_to_it(shopcart_recon):
    patch = """--- a/shopcart/pricing.py
+++ b/shopcart/pricing.py
@@ -64,2 +64,3 @@
         taxable = self.taxable_amount(items, exempt_categories)
+        taxable = max(taxable - discount, ZERO)
         tax = self.tax_policy.tax_for(taxable, region)
"""
    assert [f.entity_key for f in edited_entities(shopcart_recon, patch)] == [TARGET]
    change = parse_unified_diff(patch)[0]
    assert change.insertions == [(64, 65)] and change.changed_old_lines == []


def test_changed_tests_are_test_functions(shopcart_recon):
    patch = """--- a/tests/test_pricing.py
+++ b/tests/test_pricing.py
@@ -26,3 +26,3 @@
     assert quote.discount == Decimal("5.00")
-    assert quote.tax == Decimal("3.80")
+    assert quote.tax == Decimal("3.81")
     assert quote.total == Decimal("23.80")
"""
    assert [f.entity_key for f in changed_tests(shopcart_recon, patch)] == [
        "tests/test_pricing.py::test_fixed_coupon_is_taken_before_tax"]


# -- instances ------------------------------------------------------------------------------------

def test_bad_lines_name_line_and_field(tmp_path):
    good = json.loads(INSTANCES.read_text().splitlines()[0])
    good["repo_path"] = str(SHOPCART)
    lines = [
        json.dumps(good),
        "{not json",
        json.dumps({**good, "instance_id": "x-2", "patch": None}),
        json.dumps({k: v for k, v in good.items() if k != "FAIL_TO_PASS"} | {"instance_id": "x-3"}),
        json.dumps({**good, "instance_id": "x-4", "repo_path": str(tmp_path / "missing")}),
        json.dumps(good),
    ]
    path = tmp_path / "instances.jsonl"
    path.write_text("\n".join(lines) + "\n")
    instances, errors = load_instances(path)
    assert [i.instance_id for i in instances] == ["shopcart__shopcart-1"]
    assert errors[0] == (f"{path} line 2: not valid JSON (Expecting property name enclosed in "
                         "double quotes at column 2): expected one JSON object per line")
    assert errors[1] == f"{path} line 3: field 'patch': expected a unified diff as a string"
    assert errors[2] == (f"{path} line 4: field 'FAIL_TO_PASS': "
                         "expected a value (the field is missing)")
    assert errors[3].startswith(f"{path} line 5: field 'repo_path': expected a directory")
    assert errors[4] == (f"{path} line 6: field 'instance_id': 'shopcart__shopcart-1' appears "
                         "twice (expected one line per instance)")


def _git_repo(tmp_path) -> tuple[Path, str]:
    repo = tmp_path / "shopcart-git"
    shutil.copytree(SHOPCART, repo)
    env = GIT_ENV
    for command in (["git", "init", "-q"], ["git", "add", "-A"],
                    ["git", "commit", "-qm", "base"]):
        subprocess.run(command, cwd=repo, check=True, env=env)
    # a later commit the base must not see
    (repo / "shopcart" / "later.py").write_text("def later():\n    return 1\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "later"], cwd=repo, check=True, env=env)
    base = subprocess.run(["git", "rev-parse", "HEAD~1"], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()
    return repo, base


# -- materialisation -------------------------------------------------------------------------------

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}
TINY_TEST_PATCH = """--- a/tests/test_scale.py
+++ b/tests/test_scale.py
@@ -1,4 +1,8 @@
 from tiny.scale import double
 
 def test_double():
     assert double(2) == 4
+
+
+def test_double_negative():
+    assert double(-2) == -4
"""


def _git_repo_without_a_blob(tmp_path) -> tuple[Path, str, str]:
    """A real repository whose one data file's blob is deleted from .git/objects, as in a
    snapshot that left out its largest blobs: (repository, commit, the absent blob)."""
    repo = tmp_path / "tiny"
    (repo / "tiny" / "data").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "tiny" / "__init__.py").write_text("")
    (repo / "tiny" / "scale.py").write_text("def double(x):\n    return 2 * x\n")
    (repo / "tiny" / "data" / "table.dat").write_bytes(b"\x00\x01" * 4096)
    (repo / "tests" / "test_scale.py").write_text(
        "from tiny.scale import double\n\ndef test_double():\n    assert double(2) == 4\n")
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    for command in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "base"]):
        subprocess.run(command, cwd=repo, check=True, env=GIT_ENV)

    def git(*args):
        return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                              text=True).stdout.strip()

    commit, blob = git("rev-parse", "HEAD"), git("rev-parse", "HEAD:tiny/data/table.dat")
    (repo / ".git" / "objects" / blob[:2] / blob[2:]).unlink()  # commits leave loose objects
    return repo, commit, blob


def _tiny_instance_line(repo: Path, commit: str) -> dict:
    return {"instance_id": "tiny__tiny-1", "repo": "tiny/tiny", "base_commit": commit,
            "problem_statement": "double(-2) should be -4", "patch": "",
            "test_patch": TINY_TEST_PATCH,
            "FAIL_TO_PASS": ["tests/test_scale.py::test_double_negative"], "repo_git": str(repo)}


def test_materialize_leaves_out_an_absent_blob_and_says_so(tmp_path, capsys):
    repo, commit, blob = _git_repo_without_a_blob(tmp_path)
    archive = subprocess.run(["git", "archive", commit], cwd=repo, capture_output=True)
    assert archive.returncode != 0  # what the runner used to do fails here
    path = tmp_path / "instances.jsonl"
    path.write_text(json.dumps(_tiny_instance_line(repo, commit)) + "\n")
    [instance], errors = load_instances(path)
    assert errors == []

    made = materialize(instance, tmp_path / "cache")
    assert made.skipped == (SkippedBlob("tiny/data/table.dat", blob),)
    assert (made.tree / "tiny" / "scale.py").read_text() == "def double(x):\n    return 2 * x\n"
    assert not (made.tree / "tiny" / "data" / "table.dat").exists()
    assert "test_double_negative" in (made.tree / "tests" / "test_scale.py").read_text()
    assert (made.tree / "run.sh").stat().st_mode & 0o111
    assert made.recon.exists()
    # the staging index's engine is not kept open on a path renamed away
    assert not [identity for identity in kept_module._ENGINES if "staging-" in identity]
    assert materialize(instance, tmp_path / "cache") == made  # the cached tree says it too

    db = str(tmp_path / "ab.db")
    assert main(["ab", "run", str(path), "--db", db, "--workers", "1",
                 "--cache", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    assert ("materialized tiny__tiny-1 without 1 file(s) whose blob is absent from the git "
            "directory (size unknown): tiny/data/table.dat") in out
    assert "ab run: 1 instance(s) done, 4 decisions; 0 failed" in out


def test_materialize_is_not_steered_by_git_variables_around_it(tmp_path, monkeypatch):
    """A GIT_DIR set around the A/B runner (a hook, a harness) named another repository
    to its ls-tree and cat-file: the mirror given is read all the same."""
    repo, commit, _blob = _git_repo_without_a_blob(tmp_path)
    path = tmp_path / "instances.jsonl"
    path.write_text(json.dumps(_tiny_instance_line(repo, commit)) + "\n")
    [instance], _errors = load_instances(path)
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere.git"))
    made = materialize(instance, tmp_path / "cache")
    assert (made.tree / "tiny" / "scale.py").read_text() == "def double(x):\n    return 2 * x\n"


# -- the runner ------------------------------------------------------------------------------------

def test_ab_run_both_arms_and_a_broken_line(store_url, tmp_path):
    repo, base = _git_repo(tmp_path)
    lines = INSTANCES.read_text().splitlines()
    first = json.loads(lines[0])
    first["repo_path"] = str(SHOPCART)
    second = json.loads(lines[1]) | {"repo_git": str(repo), "base_commit": base}
    del second["repo_path"]
    path = tmp_path / "instances.jsonl"
    path.write_text("\n".join([json.dumps(first), '{"instance_id": "broken"}',
                               json.dumps(second)]) + "\n")
    # an endpoint in the settings must not be called with --ranker none
    settings = dataclasses.replace(load_settings(), rank_base_url="http://127.0.0.1:9/v1")
    summary = run_ab(resolve_url(store_url), path,
                     AbOptions(workers=2, cache_dir=tmp_path / "cache", settings=settings))
    assert [r.error for r in summary.results] == [None, None]
    assert summary.input_errors == [
        f"{path} line 2: field 'repo': expected a value (the field is missing)"]
    with ContextStore.open(store_url) as store:
        assert store.verify() == {}
        with store.engine.connect() as connection:
            runs = connection.execute(text(
                "SELECT run_id, COUNT(*) FROM decision GROUP BY run_id ORDER BY run_id")).all()
            gold = connection.execute(text(
                "SELECT fact_kind, entity_key FROM gold_fact WHERE instance_id = :i"
                " ORDER BY fact_no"), {"i": "shopcart__shopcart-1"}).all()
            arms = run_report(connection, "arms")
            rank_calls = connection.execute(text("SELECT COUNT(*) FROM rank_call")).scalar_one()
            notes = connection.execute(text("SELECT run_id, note FROM run ORDER BY run_id")).all()
    assert [tuple(r) for r in runs] == [("ab/ctx08/default", 4), ("ab/current/default", 4)]
    assert rank_calls == 0  # --ranker none: no endpoint, whatever the settings say
    assert [tuple(n) for n in notes] == [("ab/ctx08/default", "ranker: none"),
                                         ("ab/current/default", None)]
    assert [tuple(g) for g in gold] == [
        ("edited_entity", TARGET),
        ("test_function", "tests/test_pricing.py::test_percentage_coupon_reduces_the_tax"),
        ("fail_to_pass", "tests/test_pricing.py::test_percentage_coupon_reduces_the_tax"),
        ("fail_to_pass", "tests/test_pricing.py::test_fixed_coupon_is_taken_before_tax"),
    ]
    by_arm = {row[0]: dict(zip(arms.columns, row, strict=True)) for row in arms.rows}
    # the constructor beats stuffing on precision and on tokens, within its budget
    assert by_arm["ctx08"]["precision_items"] > by_arm["current"]["precision_items"]
    assert by_arm["ctx08"]["mean_tokens"] < by_arm["current"]["mean_tokens"]
    assert by_arm["ctx08"]["budget_adherence"] == 1.0
    # the base commit of the git instance does not hold the later file
    homes = list((tmp_path / "cache").glob("ctxdb-fixtures_shopcart-*"))
    assert homes and not any((h / "tree" / "shopcart" / "later.py").exists() for h in homes)


def test_oracle_ranker_through_the_openai_client():
    residue = [ResidueCandidate("E3", "retrieved_hit", "def f():"),
               ResidueCandidate("E4", "retrieved_hit", "def g():"),
               ResidueCandidate("E5", "source_code", "def test_f():"),
               ResidueCandidate("E6", "retrieved_hit", "class C:"),
               ResidueCandidate("E7", "retrieved_hit", "class D:")]
    pool = {"E1": ("plan_node", "a.py::f"), "E3": ("retrieved_hit", "a.py::f"),
            "E4": ("retrieved_hit", "a.py::g"), "E5": ("source_code", "t.py::test_f"),
            # a class holding a gold method holds the fact; one beside it does not
            "E6": ("retrieved_hit", Place("a.py::C", "a.py", 10, 40)),
            "E7": ("retrieved_hit", Place("a.py::D", "a.py", 41, 60))}
    gold = ["a.py::f", "t.py::test_f", Place("a.py::C.m", "a.py", 20, 25)]
    with OracleRanker() as oracle:
        settings = dataclasses.replace(load_settings(), rank_base_url=oracle.base_url)

        def rank(candidates):
            return rank_residue(settings, "Change a.py::f", ("t.py::test_f passes",), None,
                                candidates)

        assert oracle.base_url.startswith("http://127.0.0.1:")
        unregistered = rank(residue)
        oracle.expect(pool, gold)
        answered = rank(residue)
        unknown = rank(residue + [ResidueCandidate("E9", "retrieved_hit", "def h():")])
        other_kind = rank([ResidueCandidate("E4", "symbol", "def g():")])
    assert answered.status == "ok", answered.error
    assert answered.scores == {"E3": 1.0, "E4": 0.0, "E5": 1.0, "E6": 1.0, "E7": 0.0}
    assert oracle.calls_answered == 1
    for outcome, says in ((unregistered, "no decision registered"),
                          (unknown, "'E9' is not in the registered pool"),
                          (other_kind, "E4 is 'symbol' in the request but 'retrieved_hit'")):
        assert outcome.status == "http_error" and says in outcome.error


@pytest.mark.parametrize("ranker", ["", "orcale", "ftp://127.0.0.1/v1", "http://"])
def test_a_ranker_is_none_oracle_or_an_http_url(ranker):
    with pytest.raises(ValueError, match="--ranker: expected none, oracle or the http"):
        AbOptions(ranker=ranker).validate()
    AbOptions(ranker="http://127.0.0.1:8000/v1").validate()


def _fixture_instances(tmp_path) -> Path:
    path = tmp_path / "instances.jsonl"
    lines = []
    for line in INSTANCES.read_text().splitlines():
        data = json.loads(line)
        data["repo_path"] = str((INSTANCES.parent / data["repo_path"]).resolve())
        lines.append(json.dumps(data))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_ab_run_with_the_oracle_ranker(store_url, tmp_path):
    path = _fixture_instances(tmp_path)
    url = resolve_url(store_url)
    summary = run_ab(url, path, AbOptions(workers=2, cache_dir=tmp_path / "cache",
                                          ranker="oracle"))
    assert [r.error for r in summary.results] == [None, None]
    with ContextStore.open(store_url) as store:
        assert store.verify() == {}
        with store.engine.connect() as connection:
            runs = connection.execute(text("SELECT run_id, note FROM run ORDER BY run_id")).all()
            calls = connection.execute(text(
                "SELECT c.parse_status, d.run_id FROM rank_call c"
                " JOIN decision d ON d.decision_id = c.decision_id")).all()
            scores = connection.execute(text(
                "SELECT s.relevance_score, s.verdict, e.entity_key,"
                " CASE WHEN EXISTS (SELECT 1 FROM gold_fact g WHERE g.instance_id = d.instance_id"
                "                   AND g.entity_key = e.entity_key) THEN 1 ELSE 0 END AS is_gold,"
                " CASE WHEN EXISTS (SELECT 1 FROM gold_fact g WHERE g.instance_id = d.instance_id"
                "                   AND g.path = e.path) THEN 1 ELSE 0 END AS gold_in_file"
                " FROM rank_score s JOIN rank_call c ON c.rank_call_id = s.rank_call_id"
                " JOIN decision d ON d.decision_id = c.decision_id"
                " JOIN evidence_item e ON e.decision_id = d.decision_id AND e.item_id = s.item_id"
            )).all()
            screen = ab_screen(connection)
    assert [tuple(r) for r in runs] == [("ab/ctx08/default@oracle", "ranker: oracle"),
                                        ("ab/current/default", None)]
    assert calls and all(c == ("ok", "ab/ctx08/default@oracle") for c in calls)
    # a gold fact scores 1.0; a candidate of a file holding no gold fact 0.0 (an outline
    # or a class holding one is gold too: the oracle credits what recall credits); the
    # verdicts follow the scores (with the retriever's pool the gold symbols may be
    # admitted by structural links before the residue, so it may hold none)
    assert scores and all(s.relevance_score == 1.0 for s in scores if s.is_gold)
    assert all(s.relevance_score == 0.0 for s in scores if not s.gold_in_file)
    assert all((s.verdict == "admit") == (s.relevance_score >= 0.5) for s in scores)
    assert ORACLE_LEGEND in screen and "ab/ctx08/default@oracle  oracle" in screen
    # the reports group by arm and variant: another ranker's runs need another store
    with pytest.raises(ValueError, match="already holds run ab/ctx08/default@oracle"):
        run_ab(url, path, AbOptions(workers=1, cache_dir=tmp_path / "cache"))


def test_an_outcome_line_cut_short_is_placed_once(tmp_path):
    path = tmp_path / "outcomes.jsonl"
    path.write_text('{"run_id": "ab', encoding="utf-8")
    assert parse_outcomes(path) == ([], [(1, "not valid JSON (Unterminated string starting "
                                             "at column 12): expected one JSON object per line")])


def test_bad_bytes_and_deep_nesting_are_lines_named_not_a_whole_file_refused(tmp_path):
    """Each JSON Lines reader (outcomes, instances, a replay's runs) names a line of bytes
    that are not UTF-8, or nested deeper than the parser goes, and reads the lines after
    it: one bad byte refused the file without naming it, a deep line was a traceback."""
    from ctxdb.ab.instances import load_instances
    from ctxdb.agent.replay import load_run_specs

    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"run_id": "r\xff"}\n' + b"[" * 100_000 + b"]" * 100_000 + b"\n"
                     + b'{"run_id": "ab"}\n' + b"1" * 5000 + b"\n")
    good, bad = parse_outcomes(path)
    assert bad[:2] == [(1, "not UTF-8 text (byte 0xff at column 14): expected one JSON "
                           "object per line"),
                       (2, "not valid JSON (nested deeper than the parser goes): expected "
                           "one JSON object per line")]
    assert [line for line, _ in bad[2:]] == [3, 4]  # read, and refused for its own fields
    assert bad[3][1].startswith("not valid JSON (Exceeds the limit (4300 digits)")
    # a byte order mark before the first line is an editor's, not the JSON's
    marked = tmp_path / "marked.jsonl"
    marked.write_bytes(b'\xef\xbb\xbf{"run_id": "ab"}\n')
    assert "not valid JSON" not in parse_outcomes(marked)[1][0][1]
    _instances, errors = load_instances(path)
    assert errors[0].startswith(f"{path} line 1: not UTF-8 text (byte 0xff")
    assert errors[1].startswith(f"{path} line 2: not valid JSON (nested deeper")
    _specs, errors = load_run_specs(path)
    assert errors[:2] == [f"{path}:1: not UTF-8 text (byte 0xff at column 14)",
                          f"{path}:2: not valid JSON (nested deeper than the parser goes)"]


def test_outcomes_import_is_all_or_nothing(store_url, tmp_path):
    with ContextStore.open(store_url) as store:
        with store.write_transaction() as connection:
            connection.execute(text("INSERT INTO run (run_id, arm, created_at)"
                                    " VALUES ('ab/ctx08/default', 'ctx08', 'now')"))
            for instance in ("i1", "i2", "i4"):  # the run worked on these
                connection.execute(text(
                    "INSERT INTO decision (run_id, instance_id, seq, decision_type, task_text,"
                    " request_json, request_sha256, tokenizer, token_ceiling, created_at)"
                    " VALUES ('ab/ctx08/default', :i, 1, 'edit', 't', '{}', 'h', 'cl100k_base',"
                    " 1000, 'now')"), {"i": instance})
        path = tmp_path / "outcomes.jsonl"
        good = [json.dumps({"run_id": "ab/ctx08/default", "instance_id": "i1", "solved": True,
                            "cost_usd": 0.12}),
                json.dumps({"run_id": "ab/ctx08/default", "instance_id": "i4", "solved": False})]
        path.write_text("\n".join([
            good[0],
            json.dumps({"run_id": "ab/ctx08/default", "instance_id": "i2", "solved": "yes"}),
            json.dumps({"run_id": "nope", "instance_id": "i3", "solved": False}),
            good[1],
            # a typo: the run made no decision for it
            json.dumps({"run_id": "ab/ctx08/default", "instance_id": "i-4", "solved": True}),
        ]) + "\n")
        recorded, errors = import_outcomes(store, path)
        with store.engine.connect() as connection:
            rows = connection.execute(text("SELECT instance_id, solved FROM outcome")).all()
        assert recorded == 0 and rows == []  # three bad lines: the good ones are not written
        assert errors == [
            f"{path} line 2: field 'solved': expected true or false, got 'yes'",
            f"{path} line 3: field 'run_id': no run 'nope' in this store (expected the id of "
            "a run `ctxdb ab run` or a harness's agent loop made, such as mini-swe-agent's "
            "CtxdbModel.run_id; record outcomes after it)",
            f"{path} line 5: field 'instance_id': run 'ab/ctx08/default' made no decision for "
            "instance 'i-4' (expected an instance the run worked on)",
        ]
        with pytest.raises(ValueError, match="made no decision for instance 'i-4'"):
            store.record_outcome("ab/ctx08/default", "i-4", True)
        path.write_text("\n".join(good) + "\n")
        assert import_outcomes(store, path) == (2, [])
        # a later file recording the same run and instance again replaces it
        path.write_text(json.dumps({"run_id": "ab/ctx08/default", "instance_id": "i1",
                                    "solved": False}) + "\n")
        assert import_outcomes(store, path) == (1, [])
        with store.engine.connect() as connection:
            rows = connection.execute(text(
                "SELECT instance_id, solved FROM outcome ORDER BY instance_id")).all()
    assert [(r[0], bool(r[1])) for r in rows] == [("i1", False), ("i4", False)]


# -- reports on hand-made rows ---------------------------------------------------------------------

def _decision(connection, decision_id, run_id, instance, seq, tokens, items):
    """items: (item_id, entity_key, kind, tokens, rendering, block, edge_critical, path, s, e)"""
    connection.execute(text(
        "INSERT INTO decision (decision_id, run_id, instance_id, seq, decision_type, task_text,"
        " request_json, request_sha256, tokenizer, token_ceiling, token_count, created_at)"
        " VALUES (:d, :r, :i, :s, 'edit', 't', '{}', 'h', 'cl100k_base', 1000, :t, 'now')"),
        {"d": decision_id, "r": run_id, "i": instance, "s": seq, "t": tokens})
    for position, (item_id, key, kind, item_tokens, rendering, block, critical, path, start,
                   end) in enumerate(items, start=1):
        connection.execute(text(
            "INSERT INTO evidence_text (content_sha256, content) VALUES ('h', 'c')"
            " ON CONFLICT (content_sha256) DO NOTHING"))
        connection.execute(text(
            "INSERT INTO evidence_item (decision_id, item_id, item_no, source, kind, entity_key,"
            " content_sha256, provenance, path, start_line, end_line)"
            " VALUES (:d, :item, :no, '04', :kind, :key, 'h', 'p', :path, :s, :e)"),
            {"d": decision_id, "item": item_id, "no": int(item_id[1:]), "kind": kind, "key": key,
             "path": path, "s": start, "e": end})
        connection.execute(text(
            "INSERT INTO window_item (decision_id, position, item_id, role, rendering, tier,"
            " block, edge_critical, token_count, rendered_sha256)"
            " VALUES (:d, :p, :item, 'related_symbol', :rendering, 'working_set', :block,"
            " :critical, :t, 'h')"),
            {"d": decision_id, "p": position, "item": item_id, "rendering": rendering,
             "block": block, "critical": critical, "t": item_tokens})


@pytest.fixture
def report_store(store_url):
    with ContextStore.open(store_url) as store:
        with store.write_transaction() as connection:
            for run_id, arm, variant in (("c", "ctx08", "default"), ("b", "current", "default"),
                                         ("v", "ctx08", "no_signatures")):
                connection.execute(text(
                    "INSERT INTO run (run_id, arm, variant, created_at)"
                    " VALUES (:r, :a, :v, 'now')"), {"r": run_id, "a": arm, "v": variant})
            connection.execute(text(
                "INSERT INTO gold_fact (instance_id, fact_no, fact_kind, entity_key, path,"
                " start_line, end_line) VALUES ('i1', 1, 'edited_entity', 'a.py::C.f', 'a.py',"
                " 10, 20), ('i1', 2, 'test_function', 't.py::test_f', 't.py', 1, 5)"))
            # the plan node names its target entity (here a gold fact) but holds no code
            plan = ("E9", "t.py::test_f", "plan_node", 50, "verbatim", "front", True, None,
                    None, None)
            # an older construction of the same decision: the reports must ignore it
            _decision(connection, 1, "c", "i1", 1, 900, [plan])
            # ctx08: 2 evidence items, 1 gold (a.py::C.f verbatim, 100 of 150 tokens)
            _decision(connection, 2, "c", "i1", 1, 200, [
                plan,
                ("E1", "a.py::C.f", "retrieved_hit", 100, "verbatim", "front", True, "a.py",
                 10, 20),
                ("E2", "b.py::g", "retrieved_hit", 50, "signature", "middle", False, "b.py", 1, 3),
            ])
            # baseline: 4 evidence items, 2 gold (the class holds C.f; the test verbatim)
            _decision(connection, 3, "b", "i1", 1, 800, [
                plan,
                ("E1", "a.py::C", "source_code", 300, "verbatim", "middle", False, "a.py", 5, 40),
                ("E2", "b.py::g", "retrieved_hit", 200, "verbatim", "middle", False, "b.py", 1, 3),
                ("E3", "t.py::test_f", "source_code", 100, "verbatim", "middle", False, "t.py",
                 1, 5),
                ("E4", "c.py::h", "retrieved_hit", 150, "verbatim", "middle", False, "c.py", 1, 9),
            ])
            _decision(connection, 4, "v", "i1", 1, 300, [
                plan,
                ("E1", "a.py::C.f", "retrieved_hit", 100, "verbatim", "front", True, "a.py",
                 10, 20),
                ("E2", "b.py::g", "retrieved_hit", 150, "verbatim", "middle", False, "b.py", 1, 3),
            ])
        yield store


def _report(store, name):
    with store.engine.connect() as connection:
        report = run_report(connection, name)
    return [dict(zip(report.columns, row, strict=True)) for row in report.rows]


def test_precision_and_recall_by_hand(report_store):
    precision = {(r["arm"], r["variant"]): r for r in _report(report_store, "precision")}
    assert precision[("ctx08", "default")]["precision_items"] == pytest.approx(1 / 2)
    assert precision[("ctx08", "default")]["precision_tokens"] == pytest.approx(100 / 150)
    # baseline: gold items are t.py::test_f only (a.py::C is not itself a gold key)
    assert precision[("current", "default")]["precision_items"] == pytest.approx(1 / 4)
    assert precision[("current", "default")]["precision_tokens"] == pytest.approx(100 / 750)
    recall = {(r["arm"], r["variant"]): r for r in _report(report_store, "gold_recall")}
    # C.f verbatim; t.py::test_f only as the plan node's target: 1 of 2
    assert recall[("ctx08", "default")]["gold_recall"] == pytest.approx(1 / 2)
    # the class shown verbatim holds C.f; the test is verbatim: 2 of 2
    assert recall[("current", "default")]["gold_recall"] == pytest.approx(1.0)


def test_tokens_and_adherence_by_hand(report_store):
    rows = {(r["arm"], r["variant"]): r for r in _report(report_store, "tokens")}
    assert rows[("ctx08", "default")]["median_tokens"] == 200  # decision 1 is superseded
    assert rows[("ctx08", "default")]["decisions"] == 1
    assert rows[("current", "default")]["max_tokens"] == 800
    assert rows[("ctx08", "default")]["budget_adherence"] == pytest.approx(1.0)


def test_edge_placement_by_hand(report_store):
    rows = {(r["arm"], r["variant"]): r for r in _report(report_store, "edge_placement")}
    # ctx08: gold item E1 covers tokens 50-150 of 200, middle at 100/200 = 0.5: middle span
    assert rows[("ctx08", "default")]["critical_at_edges"] == pytest.approx(0.0)
    # baseline: gold E3 covers 550-650 of 800, middle 600/800 = 0.75: at the edge
    assert rows[("current", "default")]["critical_at_edges"] == pytest.approx(1.0)
    assert rows[("ctx08", "default")]["edge_critical_outside_middle"] == pytest.approx(1.0)
    # the placement plot counts the same critical items (the plan node, a gold entity's
    # target, is none), and the plan node among no evidence either
    from ctxdb.sqlfiles import sql_statement

    with report_store.engine.connect() as connection:
        plotted = connection.execute(sql_statement("reports_support/placement_bins"),
                                     {"bins": 20}).all()
    for (arm, variant), row in rows.items():
        mine = [p for p in plotted if (p.arm, p.variant) == (arm, variant)]
        assert sum(p.items for p in mine if p.is_gold) == row["critical_items"], (arm, variant)
    assert sum(p.items for p in plotted if (p.arm, p.variant) == ("ctx08", "default")) == 2


def _outcomes(store, c_solved, b_solved, c_cost, b_cost):
    for run_id, solved, cost in (("c", c_solved, c_cost), ("b", b_solved, b_cost)):
        store.record_outcome(run_id, "i1", solved, cost_usd=cost)


CLAUSE_CASES = {
    # (ctx08 solved, baseline solved, ctx08 cost, baseline cost): clause verdicts 1-5, decision
    "win": ((True, True, 0.10, 0.10), ["pass", "pass", "pass", "pass", "pass"], "WIN: adopt"),
    "resolve regresses": ((False, True, 0.10, 0.10), ["fail", "pass", "fail", "pass", "pass"],
                          "LOSE: keep the current path"),
    "cost over 1.5x": ((True, True, 0.20, 0.10), ["pass", "pass", "pass", "fail", "pass"],
                       "LOSE: keep the current path"),
    "baseline never solves": ((True, False, 0.10, 0.10), ["pass", "pass", "pass", "pass", "pass"],
                              "WIN: adopt"),
    # outcomes without their cost: undecided, saying so (not "record outcomes")
    "no cost recorded": ((True, True, None, None),
                         ["pass", "pass", "pass", "no cost recorded", "pass"],
                         "undecided: record outcomes with cost_usd"),
}


@pytest.mark.parametrize("case", sorted(CLAUSE_CASES))
def test_decision_rule_clauses(report_store, case):
    args, clauses, decision = CLAUSE_CASES[case]
    _outcomes(report_store, *args)
    rows = _report(report_store, "decision_rule")
    assert [r["verdict"] for r in rows[:5]] == clauses
    assert rows[5]["verdict"] == decision


def test_decision_rule_without_outcomes_waits_unless_a_clause_already_fails(report_store):
    rows = _report(report_store, "decision_rule")
    assert [r["verdict"] for r in rows] == ["no outcomes", "pass", "no outcomes",
                                            "no outcomes", "no outcomes",
                                            "undecided: record outcomes"]
    with report_store.write_transaction() as connection:  # precision 0/2 against 1/4
        connection.execute(text("DELETE FROM gold_fact WHERE fact_no = 1"))
    rows = _report(report_store, "decision_rule")
    assert rows[1]["verdict"] == "fail" and rows[5]["verdict"] == "LOSE: keep the current path"


def test_decision_rule_tokens_and_precision_clauses_fail(report_store):
    # make the candidate send more than 1.5x the baseline's tokens and lose on precision
    with report_store.write_transaction() as connection:
        connection.execute(text("UPDATE decision SET token_count = 5000 WHERE decision_id = 2"))
        connection.execute(text("DELETE FROM gold_fact WHERE fact_no = 1"))
    _outcomes(report_store, True, True, 0.1, 0.1)
    rows = _report(report_store, "decision_rule")
    verdicts = {r["clause_no"]: r["verdict"] for r in rows}
    assert verdicts[1] == "fail"  # 5000 tokens per solved vs 800
    assert verdicts[2] == "fail"  # precision 0/2 vs 1/4
    assert verdicts[5] == "fail"  # 5000 > 1.5 x 800
    assert verdicts[6] == "LOSE: keep the current path"


def test_ablation_verdicts(report_store):
    rows = {r["variant"]: r for r in _report(report_store, "ablation")}
    # no_signatures: same items (precision by items Δ 0) but precision by tokens drops
    # from 100/150 to 100/250: removing signatures degrades it, so signatures are KEPT
    assert rows["no_signatures"]["d_precision_items"] == pytest.approx(0.0)
    assert rows["no_signatures"]["d_precision_tokens"] == pytest.approx((0.4 - 2 / 3) / (2 / 3))
    # a degradation is final: KEEP without waiting for outcomes, naming what degrades
    assert rows["no_signatures"]["verdict"] == "KEEP: worse without it: precision_tokens"


def _same_window_variant(store, variant="no_digests"):
    """A ctx08 run of VARIANT whose window is ctx08/default's: nothing degrades."""
    with store.write_transaction() as connection:
        connection.execute(text("INSERT INTO run (run_id, arm, variant, created_at)"
                                " VALUES ('w', 'ctx08', :v, 'now')"), {"v": variant})
        _decision(connection, 5, "w", "i1", 1, 200, [
            ("E9", None, "plan_node", 50, "verbatim", "front", True, None, None, None),
            ("E1", "a.py::C.f", "retrieved_hit", 100, "verbatim", "front", True, "a.py", 10, 20),
            ("E2", "b.py::g", "retrieved_hit", 50, "signature", "middle", False, "b.py", 1, 3),
        ])


def test_ablation_needs_outcomes_until_they_exist(report_store):
    _same_window_variant(report_store)
    rows = {r["variant"]: r for r in _report(report_store, "ablation")}
    assert rows["no_digests"]["d_precision_items"] == pytest.approx(0.0)
    assert rows["no_digests"]["verdict"] == "needs outcomes"  # not DELETE before outcomes
    with report_store.engine.connect() as connection:
        screen = ab_screen(connection)
    assert "needs outcomes" in screen and "DELETE" not in screen

    # outcomes for the default and the variant alike: nothing degrades, so DELETE
    for run_id in ("c", "w"):
        report_store.record_outcome(run_id, "i1", True, cost_usd=0.1)
    rows = {r["variant"]: r for r in _report(report_store, "ablation")}
    assert rows["no_digests"]["verdict"] == "DELETE: |Δ| <= 5% or better without it"

    # the variant solves less: removing it degrades the resolve rate, so KEEP
    report_store.record_outcome("w", "i1", False, cost_usd=0.1)
    rows = {r["variant"]: r for r in _report(report_store, "ablation")}
    assert rows["no_digests"]["verdict"] == "KEEP: worse without it: resolve_rate"


def test_the_litm_probe_needs_outcomes_then_judges_ordering(report_store):
    _same_window_variant(report_store, "litm_buried")
    rows = {r["variant"]: r for r in _report(report_store, "ablation")}
    assert rows["litm_buried"]["verdict"] == "needs outcomes"
    report_store.record_outcome("c", "i1", True)
    report_store.record_outcome("w", "i1", False)
    rows = {r["variant"]: r for r in _report(report_store, "ablation")}
    assert rows["litm_buried"]["verdict"] == "ordering earns its place"


def test_html_report_has_a_legend_axes_and_a_panel_per_variant(report_store):
    with report_store.engine.connect() as connection:
        page = ab_html(connection)
    # three legends (tokens, precision, placement), each naming both arms by colour
    for arm, color in (("ctx08", "#2b6cb0"), ("current", "#c05621")):
        entries = re.findall(rf'<span class="legend-entry" data-arm="{arm}">'
                             rf'<i class="swatch" style="--key:{color}">', page)
        assert len(entries) == 3, arm
    # axes: tick marks with labels, and units on the axis titles
    labels = re.findall(r'class="tick-label">([^<]*)</text>', page)
    assert {"0", "200", "400", "600", "800", "0.0", "0.2", "1.0", "0%", "0.25", "1.00"} \
        <= set(labels)
    assert page.count('class="tick"') >= len(labels)
    assert ">tokens per decision (mean over the run&#x27;s decisions)</text>" in page
    assert ">relevance precision (items)</text>" in page
    # small multiples: one placement panel per arm and variant, baseline first
    panels = re.findall(r'<svg class="chart placement"[^>]*><title>([^<]*)</title>', page)
    assert panels == ["current/default", "ctx08/default", "ctx08/no_signatures"]
    assert "1 critical items, 0% of them at the edges" in page  # ctx08/default: E1 mid-window
    # no script, no network, and the verdict column's cells may wrap, never be cut
    assert "<script" not in page and "http" not in page
    assert '<div class="table-scroll">' in page and "td.verdict{min-width" in page


def test_numbers_are_written_one_way_in_the_table_and_the_page(report_store):
    # make the figures large enough to need a thousands separator: 2,003 and 8,003
    with report_store.write_transaction() as connection:
        connection.execute(text("UPDATE decision SET token_count = 10 * token_count + 3"))
    with report_store.engine.connect() as connection:
        screen = ab_screen(connection)
        page = ab_html(connection)
    current = next(line for line in screen.splitlines() if line.startswith("current  default")
                   and "no call (baseline)" in line and "8,003" in line)
    # mean_tokens (a float from AVG) and max_tokens (an integer) are written alike
    assert current.count("8,003") == 2
    bare = re.compile(r"(?<![\w.,])\d{4,}(?![\w,])")  # four digits or more, no separator
    assert bare.findall(screen) == []
    cells = re.findall(r'<td class="num">([^<]*)</td>', page)
    assert "8,003" in cells and "0.250" in cells
    assert [c for c in cells if bare.fullmatch(c)] == []
    # relative changes are signed percents; missing values a dash, in both
    assert "−40.0%" in screen and '<td class="num">−40.0%</td>' in page
    assert "–" in screen and '<td class="num">–</td>' in page


def test_outcomes_and_arms_by_hand(report_store):
    _outcomes(report_store, True, True, 0.10, 0.30)
    rows = {r["arm"]: r for r in _report(report_store, "outcomes")}
    assert rows["ctx08"]["instances"] == 1 and rows["ctx08"]["solved"] == 1
    assert rows["ctx08"]["resolve_rate"] == pytest.approx(1.0)
    assert rows["ctx08"]["cost_per_instance"] == pytest.approx(0.10)
    assert rows["ctx08"]["tokens_per_instance"] == pytest.approx(200)  # the newest decision only
    assert rows["ctx08"]["tokens_per_solved"] == pytest.approx(200)
    assert rows["current"]["tokens_per_solved"] == pytest.approx(800)
    arms = {(r["arm"], r["variant"]): r for r in _report(report_store, "arms")}
    assert arms[("ctx08", "default")]["mean_tokens"] == pytest.approx(200)
    assert arms[("ctx08", "default")]["tokens_per_solved"] == pytest.approx(200)
    assert arms[("current", "default")]["precision_items"] == pytest.approx(0.25)


def test_oracle_localization_targets_the_first_gold_symbol_at_its_changed_line():
    from ctxdb.ab.decisions import oracle_localization
    from ctxdb.ab.gold import GoldFact

    module_level = GoldFact("edited_entity", "shopcart/pricing.py:1-2", "", (1, 2))
    first_symbol = GoldFact("edited_entity", TARGET, "", (64, 66))
    second_symbol = GoldFact("edited_entity", "shopcart/cart.py::Cart.add", "", (10, 10), "method")
    class_body = GoldFact("edited_entity", "shopcart/cart.py::Cart", "", (4, 5), "class")
    target, point, others, sites = oracle_localization(
        [module_level, first_symbol, second_symbol, class_body])
    assert target == TARGET
    assert (point.path, point.line, point.end_line) == ("shopcart/pricing.py", 64, 66)
    # a method by its key; a change in a class's own body by the lines it changes
    assert others == ["shopcart/pricing.py:1-2", "shopcart/cart.py::Cart.add",
                      "shopcart/cart.py:4-5"]
    # each other location's changed lines are a change site of the plan node
    assert [(s.path, s.line, s.end_line) for s in sites] == [
        ("shopcart/pricing.py", 1, 2), ("shopcart/cart.py", 10, 10), ("shopcart/cart.py", 4, 5)]
    # only a change that is module-level alone targets the changed lines
    target, point, others, sites = oracle_localization([module_level])
    assert (target, point.line, others, sites) == ("shopcart/pricing.py:1-2", 1, [], [])


def test_window_recall_by_hand(store_url):
    """One localize decision: a gold method held in the pool by its own hit (residual,
    then rejected) and by its file's outline (residual, in the window as an outline
    showing its def line); a module-level hunk nobody holds; a F2P test verbatim."""
    statements = [
        ("INSERT INTO run (run_id, arm, variant, note, created_at)"
         " VALUES ('c', 'ctx08', 'default', 'ranker: oracle', 'now')", {}),
        ("INSERT INTO decision (decision_id, run_id, instance_id, seq, decision_type, task_text,"
         " request_json, request_sha256, tokenizer, token_ceiling, token_count, created_at)"
         " VALUES (1, 'c', 'i1', 1, 'localize', 't', '{}', 'h', 'cl100k_base', 1000, 420, 'now')",
         {}),
        ("INSERT INTO gold_fact (instance_id, fact_no, fact_kind, entity_key, path, start_line,"
         " end_line, changed_start_line, changed_end_line, head_text) VALUES"
         " ('i1', 1, 'edited_entity', 'a.py::C.f', 'a.py', 10, 20, 12, 13, 'def f(self):'),"
         " ('i1', 2, 'edited_entity', 'a.py:1-2', 'a.py', 1, 2, 1, 2, NULL),"
         " ('i1', 3, 'fail_to_pass', 't.py::test_f', 't.py', 1, 5, NULL, NULL, NULL)", {}),
        ("INSERT INTO rank_call (rank_call_id, decision_id, model, base_url, request_json,"
         " parse_status, created_at) VALUES (1, 1, 'm', 'u', '{}', 'ok', 'now')", {}),
    ]
    items = [  # item, kind, entity, path, lines, content, residual, window (rendering, shown)
        ("E1", "symbol", "a.py", "a.py", (1, 100), "# a.py: outline\n    def f(self):  # L10",
         True, ("signature", None)),
        ("E2", "retrieved_hit", "a.py::C.f", "a.py", (10, 20), "def f(self):\n    pass",
         True, None),
        ("E3", "source_code", "t.py::test_f", "t.py", (1, 5), "def test_f(): ...",
         False, ("verbatim", (1, 5))),
        ("E4", "retrieved_hit", "a.py::g", "a.py", (30, 40), "def g(): ...", True, None),
    ]
    for number, (item_id, kind, key, path, (start, end), content, residual, shown) in \
            enumerate(items, start=1):
        digest = f"{number:064d}"
        statements += [
            ("INSERT INTO evidence_text (content_sha256, content) VALUES (:h, :c)",
             {"h": digest, "c": content}),
            ("INSERT INTO evidence_item (decision_id, item_id, item_no, source, kind, entity_key,"
             " content_sha256, provenance, path, start_line, end_line)"
             " VALUES (1, :i, :n, '04', :k, :e, :h, 'p', :p, :s, :t)",
             {"i": item_id, "n": number, "k": kind, "e": key, "h": digest, "p": path,
              "s": start, "t": end}),
        ]
        if residual:
            statements.append((
                "INSERT INTO item_event (decision_id, item_id, event_no, stage, action, driver)"
                " VALUES (1, :i, 1, 'gate', 'residual', 'near:shared_terms=f')", {"i": item_id}))
        if shown:
            rendering, lines = shown
            statements.append((
                "INSERT INTO window_item (decision_id, position, item_id, role, rendering, tier,"
                " block, edge_critical, token_count, rendered_sha256, shown_start_line,"
                " shown_end_line) VALUES (1, :n, :i, 'related_symbol', :r, 'working_set',"
                " 'middle', false, 10, :h, :s, :t)",
                {"n": number, "i": item_id, "r": rendering, "h": digest,
                 "s": lines[0] if lines else None, "t": lines[1] if lines else None}))
    with ContextStore.open(store_url) as store:
        with store.write_transaction() as connection:
            for sql, params in statements:
                connection.execute(text(sql), params)
        rows = {r["scope"]: r for r in _report(store, "window_recall")}
    edited, every = rows["edited code"], rows["all facts"]
    # edited code: C.f (held by its hit and by the outline's def line) and the module-level
    # hunk (an outline's whole-file span holds nothing by itself)
    assert edited["facts"] == 2
    assert edited["pool_recall"] == pytest.approx(1 / 2)
    assert edited["window_recall"] == pytest.approx(1 / 2)  # the outline shows `def f`
    assert edited["changed_recall"] == 0  # no window item shows lines 12-13
    assert edited["recall_ratio"] == pytest.approx(1.0)
    assert edited["residue_recall"] == pytest.approx(1 / 2)
    # all facts add the F2P test: in the pool, in the window, verbatim
    assert every["facts"] == 3
    assert (every["pool_recall"], every["window_recall"]) == (pytest.approx(2 / 3),) * 2
    assert every["changed_recall"] == pytest.approx(1 / 3)
    assert every["residue_recall"] == pytest.approx(1 / 3)
    # the residue the step takes: the outline stands for E2 and E4 of its file
    assert (edited["residue_median"], edited["residue_p95"]) == (1, 1)
    assert edited["ranked_share"] == pytest.approx(1.0)
    assert (edited["ranker"], edited["median_tokens"]) == ("oracle", 420)


def test_a_bare_fail_to_pass_name_is_the_test_of_that_name_the_test_patch_touches(
        shopcart_recon):
    """sympy's FAIL_TO_PASS are bare names: the gold fact is the test so named in a file
    the test patch changes, the key the pool's test items carry too."""
    from ctxdb.ab.gold import fail_to_pass_keys

    test_patch = "--- a/tests/test_pricing.py\n+++ b/tests/test_pricing.py\n@@ -1 +1 @@\n-a\n+b\n"
    name = "test_fixed_coupon_is_taken_before_tax"
    facts = fail_to_pass_keys(shopcart_recon, [name], test_patch)
    assert [(f.entity_key, f.detail) for f in facts] == [(f"tests/test_pricing.py::{name}", name)]
    # a test patch that touches no file with such a test leaves the name as it is
    assert [f.entity_key for f in fail_to_pass_keys(shopcart_recon, [name], "")] == [name]


def test_retrieval_localization_hands_over_the_top_candidates_as_change_sites(shopcart_recon):
    from ctxdb.ab.decisions import RETRIEVAL_EDIT_SITES, build_decisions
    from ctxdb.retrieval.localize import localize_pool

    instance = load_instances(INSTANCES)[0][0]
    pool = localize_pool(shopcart_recon, instance)
    _, edit = build_decisions(shopcart_recon, instance, [], "retrieval", "r")
    sites = [(e.kind, e.entity) for e in edit.evidence if e.source == "05"]
    top = [c.entity_key for c in pool.candidates[:RETRIEVAL_EDIT_SITES]]
    assert sites == [("fault_entity", top[0])] + [("changed_entity", key) for key in top[1:]]
    assert edit.plan_node.target_entity == top[0]
    assert edit.plan_node.dependencies == tuple(top[1:])
    assert edit.plan_node.required_validation == pool.test_ids


# Files in the commit: enough that git's answers fill their pipe and the ids fed to it
# fill theirs (64 KiB each), so a reader that stops early leaves both writers blocked.
MANY_FILES = 3000
# How long writing the tree may take to give up once stopped (it used to hang).
STOPPED_WITHIN_S = 30
STOP_AT_FIRST_FILE = """
import sys
from pathlib import Path
from ctxdb.ab import materialize
def stop(*args):
    raise KeyboardInterrupt
materialize._write_entry = stop
try:
    materialize.write_commit_tree(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
except KeyboardInterrupt:
    print("stopped")
"""


def test_writing_a_tree_stopped_at_its_first_file_ends_rather_than_hangs(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    for number in range(MANY_FILES):
        (work / f"f{number}.txt").write_text(f"file {number}\n" * 40)
    for args in (["init", "-q"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q",
                  "-m", "many"]):
        subprocess.run(["git", *args], cwd=work, check=True, capture_output=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, check=True,
                            capture_output=True, text=True).stdout.strip()
    (tmp_path / "tree").mkdir()
    done = subprocess.run([sys.executable, "-c", STOP_AT_FIRST_FILE, str(work / ".git"),
                           commit, str(tmp_path / "tree")], capture_output=True, text=True,
                          timeout=STOPPED_WITHIN_S)
    assert done.stdout == "stopped\n", done.stderr
