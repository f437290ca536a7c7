"""ctxdb as a dependency: a wheel built from this checkout, installed into a fresh
virtual environment, indexes, constructs and verifies from a directory outside the
checkout — reading the SQL and migrations the wheel carries, not the checkout's.

The environment gets the newest versions pyproject.toml's ranges allow and no extra
(so no PostgreSQL driver): the golden windows must come out byte for byte there too.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.network  # the fresh environment installs from PyPI

ROOT = Path(__file__).resolve().parent.parent
SHOPCART = ROOT / "fixtures" / "repos" / "shopcart"
EDIT_REQUEST = ROOT / "fixtures" / "decisions" / "edit.json"
GOLDEN_WINDOWS_TEST = ROOT / "tests" / "test_windows_unchanged.py"
SUBPROCESS_TIMEOUT_S = 600  # a fresh environment installs from PyPI


def _run(args, cwd):
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True,
                            timeout=SUBPROCESS_TIMEOUT_S)
    assert result.returncode == 0, f"{args}: {result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(base / "dist"),
          str(ROOT)], base)
    wheel = next((base / "dist").glob("ctxdb-*.whl"))
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], base)
    # pytest only to run the golden windows' test there; ctxdb's ranges pick the rest
    _run([str(venv / "bin" / "pip"), "install", "-q", str(wheel), "pytest"], base)
    work = base / "work"  # outside the checkout: nothing of it on the path
    shutil.copytree(SHOPCART, work / "shopcart")
    return venv / "bin", work


def test_the_cli_runs_from_the_wheel(installed):
    bin_dir, work = installed
    assert _run([str(bin_dir / "ctxdb"), "--version"], work).startswith("ctxdb ")
    _run([str(bin_dir / "ctxdb"), "recon", "index", "shopcart", "--recon", "recon.db"], work)
    shutil.copy(EDIT_REQUEST, work / "edit.json")
    _run([str(bin_dir / "ctxdb"), "construct", "edit.json", "--db", "store.db",
          "--recon", "recon.db"], work)
    assert _run([str(bin_dir / "ctxdb"), "verify", "--db", "store.db"], work).startswith("ok")


def test_the_library_runs_from_the_wheel(installed):
    bin_dir, work = installed
    script = textwrap.dedent(f"""
        import importlib.util, json, pathlib
        import ctxdb, ctxdb.paths
        from ctxdb import ContextStore
        request = json.loads(pathlib.Path({str(EDIT_REQUEST)!r}).read_text())
        request["run_id"] = "wheel"
        with ContextStore.open("sqlite:///library.db") as store:
            context = store.construct(request)
            problems = store.verify()
        print(json.dumps({{"version": ctxdb.__version__, "sql": str(ctxdb.paths.SQL_DIR),
                           "migrations": str(ctxdb.paths.MIGRATIONS_DIR),
                           "tokens": context.token_count, "problems": problems,
                           "psycopg": importlib.util.find_spec("psycopg") is not None}}))
    """)
    out = json.loads(_run([str(bin_dir / "python"), "-c", script], work).splitlines()[-1])
    site = str(bin_dir.parent)
    assert out["sql"].startswith(site) and out["migrations"].startswith(site)
    assert out["problems"] == {} and out["tokens"] > 0
    assert out["version"] != "0+unknown"
    assert not out["psycopg"]  # SQLite needed no PostgreSQL driver


def test_the_golden_windows_are_unchanged_under_the_newest_versions(installed):
    """A new release inside a range (SQLAlchemy, tiktoken's BPE, tree-sitter, ...) that
    changes a window's bytes fails here, naming the versions it ran with."""
    bin_dir, work = installed
    result = subprocess.run(
        [str(bin_dir / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(GOLDEN_WINDOWS_TEST)],
        cwd=work, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    versions = _run([str(bin_dir / "pip"), "freeze"], work)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\nwith:\n{versions}"
