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
    assert (stats.files_seen, stats.files_parsed, stats.files_flagged) == (34, 34, 0)
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
    assert n == 508
    assert _edge(requests_recon, "tests",
                 "tests/test_requests.py::TestRequests.test_HTTP_200_OK_GET_ALTERNATIVE",
                 "src/requests/sessions.py::Session.send")


# What a real index of requests 2.32.3 holds, exactly: a change of extraction shows here.
SYMBOLS_BY_KIND = {"class": 85, "function": 174, "method": 493, "module": 34}
EDGES_BY_KIND = {"calls": 1829, "imports": 453, "inherits": 57, "tests": 703}
SPANS = {
    "src/requests/api.py::get": ("function", 62, 73),
    "src/requests/models.py::PreparedRequest": ("class", 313, 637),
    "src/requests/sessions.py::Session": ("class", 356, 816),
    "src/requests/sessions.py::Session.send": ("method", 673, 748),
}


def test_the_index_holds_exactly_what_requests_defines(requests_recon):
    with open_recon(requests_recon) as conn:
        symbols = dict(conn.execute(sa.text(
            "SELECT kind, count(*) FROM recon.symbol GROUP BY kind")).all())
        edges = dict(conn.execute(sa.text(
            "SELECT kind, count(*) FROM recon.edge GROUP BY kind")).all())
        spans = {row.key: (row.kind, row.start_line, row.end_line) for row in conn.execute(
            sa.text("SELECT key, kind, start_line, end_line FROM recon.symbol"
                    " WHERE key IN :keys").bindparams(sa.bindparam("keys", expanding=True)),
            {"keys": sorted(SPANS)})}
    assert symbols == SYMBOLS_BY_KIND
    assert edges == EDGES_BY_KIND
    assert spans == SPANS
