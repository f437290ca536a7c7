"""ctxdb installs beside a harness: ranges, not pins, except for the data in a window's
bytes; SQLite without the PostgreSQL driver; a CLI that starts where the platform has
no ``os.sched_getaffinity`` (macOS, Windows).

tests/test_wheel.py installs the wheel into a fresh environment (the newest versions
the ranges allow) and checks the golden windows there; `make test-minima` runs the fast
tests on the lowest ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from window_snapshots import MADE_WITH, installed_window_data_versions

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
MINIMA = ROOT / "constraints" / "minima.txt"
DEVELOPMENT_LOCK = ROOT / "constraints" / "development.txt"
SHOPCART = ROOT / "fixtures" / "repos" / "shopcart"
EDIT_REQUEST = ROOT / "fixtures" / "decisions" / "edit.json"
SUBPROCESS_TIMEOUT_S = 300
PIN = "=="
LOWER_BOUND = ">="
UPPER_BOUND = "<"


def _requirements() -> list[Requirement]:
    """Every requirement pyproject.toml names, the extras' included."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    lines = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        lines += extra
    return [Requirement(line) for line in lines]


def _pinned(requirement: Requirement) -> bool:
    return any(spec.operator == PIN for spec in requirement.specifier)


def _lower_bound(requirement: Requirement) -> Version:
    (bound,) = [spec.version for spec in requirement.specifier
                if spec.operator in (PIN, LOWER_BOUND)]
    return Version(bound)


def _constraints(path: Path) -> dict[str, Version]:
    """{package: version} of a constraints file's ``name==version`` lines."""
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            requirement = Requirement(line)
            found[canonicalize_name(requirement.name)] = _lower_bound(requirement)
    return found


def _run_python(script: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)],
                            capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_only_the_window_data_is_pinned_and_at_the_goldens_versions():
    """A bumped tokenizer data file or grammar fails here until the golden windows are
    recorded again (which rewrites made_with.json)."""
    made_with = json.loads(MADE_WITH.read_text())
    pinned = {canonicalize_name(r.name): str(_lower_bound(r))
              for r in _requirements() if _pinned(r)}
    assert pinned == made_with


def test_every_other_dependency_is_a_range_with_a_lower_bound():
    for requirement in _requirements():
        if _pinned(requirement):
            continue
        operators = sorted(spec.operator for spec in requirement.specifier)
        assert operators in ([LOWER_BOUND], [UPPER_BOUND, LOWER_BOUND]), str(requirement)


def test_the_installed_window_data_is_what_the_goldens_were_made_with():
    assert installed_window_data_versions() == json.loads(MADE_WITH.read_text())


def test_the_minima_file_holds_each_range_lower_bound():
    assert _constraints(MINIMA) == {canonicalize_name(r.name): _lower_bound(r)
                                    for r in _requirements()}


def test_the_development_lock_is_inside_every_range():
    locked = _constraints(DEVELOPMENT_LOCK)
    for requirement in _requirements():
        name = canonicalize_name(requirement.name)
        assert name in locked, name
        assert requirement.specifier.contains(locked[name]), (str(requirement), locked[name])


def test_the_cli_starts_without_sched_getaffinity():
    """Every module imports, and the commands print their help, on a platform without
    ``os.sched_getaffinity``; the worker default is then every core."""
    result = _run_python("""
        import contextlib, importlib, io, os, pkgutil
        del os.sched_getaffinity  # as on macOS and Windows
        import ctxdb
        # the data packages: SQL files, and alembic's scripts that run only under alembic
        data = ("ctxdb.sql", "ctxdb.migrations")
        for module in pkgutil.walk_packages(ctxdb.__path__, "ctxdb."):
            if module.name.startswith(data):
                continue
            try:
                importlib.import_module(module.name)
            except ModuleNotFoundError as exc:
                if exc.name.startswith("ctxdb"):
                    raise
                # an optional extra's module where the extra is not installed
        from ctxdb.cli import main
        from ctxdb.workers import DEFAULT_WORKERS
        assert DEFAULT_WORKERS == os.cpu_count(), DEFAULT_WORKERS
        for argv in (["--help"], ["ab", "run", "--help"], ["replay", "--help"]):
            with contextlib.redirect_stdout(io.StringIO()) as shown:
                try:
                    main(argv)
                except SystemExit as exit:
                    assert exit.code == 0, (argv, exit.code)
            assert shown.getvalue().startswith("usage: ctxdb"), argv
        print("started")
    """)
    assert result.stdout.strip() == "started"


def test_sqlite_needs_no_postgresql_driver(tmp_path):
    """Without psycopg (ctxdb installed without its postgresql extra) a SQLite store
    indexes, constructs and verifies; a PostgreSQL URL is refused naming the extra."""
    result = _run_python(f"""
        import json, pathlib, sys
        sys.modules["psycopg"] = None  # any import of it now fails
        from ctxdb import ContextStore
        from ctxdb.recon import index_repository
        index_repository({str(SHOPCART)!r}, "recon.db", progress=False)
        request = json.loads(pathlib.Path({str(EDIT_REQUEST)!r}).read_text())
        with ContextStore.open("store.db", recon="recon.db") as store:
            context = store.construct(request)
            assert store.verify() == {{}}
        for open_postgresql in (lambda: ContextStore.open("postgresql+psycopg://u@h/db"),
                                lambda: index_repository({str(SHOPCART)!r},
                                                         "postgresql+psycopg://u@h/db")):
            try:
                open_postgresql()
            except ValueError as refusal:
                assert "pip install -e '.[postgresql]'" in str(refusal), refusal
            else:
                raise AssertionError("a PostgreSQL URL was accepted without psycopg")
        print(context.token_count)
    """)
    assert int(result.stdout.strip()) > 0
