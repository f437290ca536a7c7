"""Shared fixtures: every store test runs on SQLite and on a real PostgreSQL server.

The PostgreSQL cluster starts once per session and is stopped when the session
ends, whether tests passed or not. If it cannot start, every PostgreSQL test
errors with the reason: the backend is never skipped silently.

Markers are set here, from what a test uses, not in its body (pyproject.toml lists
them): ``pg`` on every test that reaches the cluster (a ``pg_cluster`` fixture or the
``postgresql`` side of a backend parameter), ``network`` on every test that downloads
(the ``requests_root`` fixture; whole modules mark themselves), ``slow`` on the tests
named in SLOW_TESTS. ``make test-fast`` deselects all three.
"""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
import tarfile
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).parent))

from pgcluster import PostgresCluster  # noqa: E402

BACKENDS = ("sqlite", "postgresql")
POSTGRESQL = BACKENDS[1]
# fixtures whose use marks a test: the cluster (pg_url and friends depend on it) and
# the sdist download
PG_FIXTURE = "pg_cluster"
NETWORK_FIXTURE = "requests_root"
# The tests that take 1 s or more on SQLite alone (`pytest -m "not pg and not network"
# --durations=60` on two busy cores), as "file.py::test_name" (every parametrization) or
# "file.py::test_name[id]" (one): the fast subset leaves them out. The golden windows
# and tests/test_install.py stay in it however long they take: `make test-minima` runs
# the fast subset to show that the lowest versions make the same windows.
SLOW_TESTS = frozenset({
    "test_ab.py::test_ab_run_both_arms_and_a_broken_line",
    "test_ab.py::test_ab_run_with_the_oracle_ranker",
    "test_ab.py::test_oracle_ranker_through_the_openai_client",
    "test_ab_cli.py::test_progress_bar_on_a_terminal_silence_in_a_pipe",
    "test_agent_hostile.py::test_a_huge_observation_and_odd_text_are_decisions_not_failures",
    "test_agent_hostile.py::"
    "test_a_long_run_masks_in_mask10_and_replays_beside_another_in_two_workers",
    "test_agent_hostile.py::test_a_run_whose_edit_does_not_replay_is_flagged_from_that_step_on",
    "test_agent_hostile.py::test_an_anchor_only_an_earlier_run_of_the_same_command_held_is_kept",
    "test_agent_hostile.py::"
    "test_commands_cannot_write_outside_the_copy_reach_the_network_or_outlive_their_limit",
    "test_agent_hostile.py::test_git_config_a_command_writes_is_never_run_by_the_host",
    "test_agent_sandbox.py::test_a_command_that_never_ends_is_killed_with_all_it_started",
    "test_agent_sandbox.py::test_a_fork_loop_is_contained_and_ended",
    "test_agent_sandbox.py::test_privileges_are_gone",
    "test_agent_sandbox.py::test_writes_in_the_tree_show_in_diff_and_submission",
    "test_analyst.py::test_a_real_datasette_serves_the_store_with_its_metadata",
    "test_docs.py::test_the_readme_library_example_runs_from_a_checkout",
    "test_hostile_input.py::test_fuzzed_requests_are_refused_by_name_writing_nothing",
    "test_live_aging.py::test_a_failure_of_one_long_line_keeps_its_end",
    "test_pipeline.py::test_window_is_identical_across_hash_seeds",
    "test_properties.py::test_invariants_hold_on_any_pool_sqlite",
    "test_rank.py::test_a_hostile_endpoint_costs_one_recorded_call_within_the_deadline"
    "[sqlite-hangs after the headers]",
    "test_rank.py::test_a_hostile_endpoint_costs_one_recorded_call_within_the_deadline"
    "[sqlite-trickles one byte a second]",
    "test_rank.py::test_the_write_lock_is_free_while_the_call_is_in_flight",
    "test_recon.py::test_deterministic_across_runs_hash_seeds_and_pool",
    "test_retrieve.py::test_byte_identical_across_hash_seeds",
    "test_tokens.py::test_counting_needs_no_network",
})
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
_database_numbers = itertools.count(1)


def pytest_collection_modifyitems(items):
    for item in items:
        parameters = getattr(item, "callspec", None)
        if PG_FIXTURE in item.fixturenames or (
                parameters is not None and POSTGRESQL in parameters.params.values()):
            item.add_marker(pytest.mark.pg)
        if NETWORK_FIXTURE in item.fixturenames:
            item.add_marker(pytest.mark.network)
        file = Path(item.path).name
        for name in (f"{file}::{getattr(item, 'originalname', item.name)}",
                     f"{file}::{item.name}"):
            if name in SLOW_TESTS:
                item.add_marker(pytest.mark.slow)
    # a renamed slow test would quietly join the fast subset: name it instead (checked
    # in the modules collected, however few of their tests were asked for)
    modules = {Path(item.path).name: item.module for item in items
               if getattr(item, "module", None) is not None}
    lost = []
    for name in sorted(SLOW_TESTS):
        file, test = name.split("::", 1)
        if file in modules and not hasattr(modules[file], test.split("[", 1)[0]):
            lost.append(name)
    if lost:
        raise pytest.UsageError(f"conftest.py SLOW_TESTS names tests that are gone: {lost}")


@pytest.fixture(autouse=True, scope="session")
def _ctrl_c_as_a_terminal_gives_it():
    """A suite started in the background by a shell without job control (`make test &`
    in a script) ignores Ctrl-C, and so would every process it starts: the tests of how a
    stop is taken need SIGINT as a terminal's shell leaves it (Python's own handler; its
    children: the default)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield


@pytest.fixture(autouse=True)
def _away_from_the_checkout(tmp_path, monkeypatch):
    """Every test runs in its own empty directory, with no recon named by the
    environment: the CLI looks for ./recon.db and $CTXDB_RECON, and what `make demo`
    (or a developer) left in the checkout must not change a test's outcome."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CTXDB_RECON", raising=False)


@pytest.fixture(scope="session")
def pg_cluster(request):
    # a test that reaches the cluster another way than the hook above sees is caught
    # here, in the run that was meant to leave PostgreSQL out
    if "not pg" in (request.config.option.markexpr or ""):
        pytest.fail("a test reached PostgreSQL without the pg marker: name the "
                    f"{PG_FIXTURE} fixture or a backend parameter in it")
    cluster = PostgresCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@contextmanager
def fresh_pg_database(cluster):
    """The URL of a new, empty PostgreSQL database, dropped afterwards."""
    name = f"ctxdb_test_{next(_database_numbers)}"
    admin = create_engine(cluster.url("postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield cluster.url(name)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def pg_url(pg_cluster):
    """A fresh, empty PostgreSQL database for one test."""
    with fresh_pg_database(pg_cluster) as url:
        yield url


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture
def store_url(backend, request, tmp_path):
    """A URL for a new, empty store database on each backend."""
    if backend == "sqlite":
        return str(tmp_path / "ctx08.db")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def recon_target(backend, request, tmp_path):
    """Where to write a recon index: a recon.db path (SQLite) or a PostgreSQL URL."""
    if backend == "sqlite":
        return str(tmp_path / "recon.db")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


REQUESTS_REQUIREMENT = "requests==2.32.3"  # real code nobody here wrote, pinned
REQUESTS_SDIST_ROOT = "requests-2.32.3"


@pytest.fixture(scope="session")
def requests_root(tmp_path_factory):
    """The requests sdist from PyPI, extracted: downloaded once per session. Tests read
    it; one that changes files works on a copy."""
    download = tmp_path_factory.mktemp("requests-sdist")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
         "--disable-pip-version-check", "-q", REQUESTS_REQUIREMENT, "-d", str(download)],
        check=True,
    )
    (archive,) = download.glob("requests-*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(download, filter="data")
    return download / REQUESTS_SDIST_ROOT
