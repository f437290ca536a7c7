"""The recon index on real code nobody here wrote: the requests 2.32.3 sdist from PyPI."""

from __future__ import annotations

import subprocess
import sys
import tarfile

import pytest
import sqlalchemy as sa

from ctxdb.recon import index_repository, lookup_symbol, open_recon

REQUIREMENT = "requests==2.32.3"
SDIST_ROOT = "requests-2.32.3"

pytestmark = pytest.mark.network


@pytest.fixture(scope="session")
def requests_root(tmp_path_factory):
    """The extracted sdist root, downloaded once per session."""
    download = tmp_path_factory.mktemp("requests-sdist")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
         "--disable-pip-version-check", "-q", REQUIREMENT, "-d", str(download)],
        check=True,
    )
    (archive,) = download.glob("requests-*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(download, filter="data")
    return download / SDIST_ROOT


@pytest.fixture(scope="session")
def requests_recon(requests_root, tmp_path_factory):
    target = str(tmp_path_factory.mktemp("requests-recon") / "recon.db")
    stats = index_repository(requests_root, target)
    assert stats.files_parsed == stats.files_seen > 30
    return target


def _edge(target, kind, src, dst) -> bool:
    with open_recon(target) as conn:
        return conn.execute(
            sa.text(
                "SELECT count(*) FROM recon.edge e"
                " JOIN recon.symbol s ON s.id = e.src_symbol_id"
                " JOIN recon.symbol d ON d.id = e.dst_symbol_id"
                " WHERE e.kind = :kind AND s.key = :src AND d.key = :dst"
            ),
            {"kind": kind, "src": src, "dst": dst},
        ).scalar() > 0


def test_session_send_signature(requests_recon):
    with open_recon(requests_recon) as conn:
        send = lookup_symbol(conn, "src/requests/sessions.py::Session.send")
    assert send is not None
    assert send["kind"] == "method"
    assert send["signature"] == "def send(self, request, **kwargs):"
    assert send["doc"] == "Send a given PreparedRequest."


def test_session_request_calls_send(requests_recon):
    assert _edge(requests_recon, "calls", "src/requests/sessions.py::Session.request",
                 "src/requests/sessions.py::Session.send")


def test_prepared_request_inherits_its_mixins(requests_recon):
    for base in ("RequestEncodingMixin", "RequestHooksMixin"):
        assert _edge(requests_recon, "inherits", "src/requests/models.py::PreparedRequest",
                     f"src/requests/models.py::{base}")


def test_tests_edges_reach_the_library(requests_recon):
    with open_recon(requests_recon) as conn:
        n = conn.execute(
            sa.text(
                "SELECT count(*) FROM recon.edge e JOIN recon.symbol d ON d.id = e.dst_symbol_id"
                " WHERE e.kind = 'tests' AND d.key LIKE 'src/requests/%'"
            )
        ).scalar()
    assert n > 50
