"""Shared fixtures: every store test runs on SQLite and on a real PostgreSQL server.

The PostgreSQL cluster starts once per session and is stopped when the session
ends, whether tests passed or not. If it cannot start, every PostgreSQL test
errors with the reason: the backend is never skipped silently.
"""

from __future__ import annotations

import itertools
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
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
_database_numbers = itertools.count(1)


@pytest.fixture(autouse=True)
def _away_from_the_checkout(tmp_path, monkeypatch):
    """Every test runs in its own empty directory, with no recon named by the
    environment: the CLI looks for ./recon.db and $CTXDB_RECON, and what `make demo`
    (or a developer) left in the checkout must not change a test's outcome."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CTXDB_RECON", raising=False)


@pytest.fixture(scope="session")
def pg_cluster():
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
