"""The recon index on real code nobody here wrote: the requests 2.32.3 sdist from PyPI
(conftest.requests_root).

The expectations are exact: the sdist is pinned and indexing is deterministic, so a
change to extraction or name resolution shows here. A deliberate one updates them (and
RECON_SCHEMA_VERSION).
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from ctxdb.recon import IndexStats, index_repository, lookup_symbol, open_recon

FILES = 34
TEST_FILES = 15  # tests/**: conftest, testserver and helpers too
SYMBOLS_BY_KIND = {"class": 85, "function": 174, "method": 493, "module": 34}
# kind: (edges, edges resolved to a symbol of the sdist)
EDGES_BY_KIND = {
    "calls": (1829, 970),
    "imports": (453, 268),
    "inherits": (57, 36),
    "tests": (703, 703),
}

pytestmark = pytest.mark.network


@pytest.fixture(scope="session")
def requests_index(requests_root, tmp_path_factory) -> tuple[str, IndexStats]:
    """(recon.db path, the run's IndexStats)."""
    target = str(tmp_path_factory.mktemp("requests-recon") / "recon.db")
    return target, index_repository(requests_root, target)


@pytest.fixture(scope="session")
def requests_recon(requests_index) -> str:
    return requests_index[0]


def _rows(target, sql: str, **params) -> list[tuple]:
    with open_recon(target) as conn:
        return [tuple(r) for r in conn.execute(sa.text(sql), params)]


def _edges_from(target, src: str, kind: str) -> list[tuple]:
    """(dst key or None, dst_name, typed_name, line) of one symbol's edges, in id order."""
    return _rows(
        target,
        "SELECT d.key, e.dst_name, e.typed_name, e.line FROM recon.edge e"
        " JOIN recon.symbol s ON s.id = e.src_symbol_id"
        " LEFT JOIN recon.symbol d ON d.id = e.dst_symbol_id"
        " WHERE s.key = :src AND e.kind = :kind ORDER BY e.id",
        src=src, kind=kind,
    )


def test_totals(requests_index):
    requests_recon, stats = requests_index
    assert (stats.files_seen, stats.files_parsed, stats.files_flagged) == (FILES, FILES, 0)
    assert stats.symbols == sum(SYMBOLS_BY_KIND.values())
    assert stats.edges == sum(total for total, _ in EDGES_BY_KIND.values())
    assert _rows(requests_recon, "SELECT count(*), sum(CASE WHEN is_test THEN 1 ELSE 0 END)"
                                 " FROM recon.file") == [(FILES, TEST_FILES)]
    assert dict(_rows(requests_recon, "SELECT kind, count(*) FROM recon.symbol GROUP BY kind")) \
        == SYMBOLS_BY_KIND
    edges = _rows(requests_recon, "SELECT kind, count(*), count(dst_symbol_id) FROM recon.edge"
                                  " GROUP BY kind")
    assert {kind: (total, resolved) for kind, total, resolved in edges} == EDGES_BY_KIND


@pytest.mark.parametrize(
    ("key", "kind", "lines", "bytes_", "signature", "doc", "parent"),
    [
        ("src/requests/sessions.py::Session.send", "method", (673, 748), (24976, 27699),
         "def send(self, request, **kwargs):", "Send a given PreparedRequest.",
         "src/requests/sessions.py::Session"),
        ("src/requests/sessions.py::Session", "class", (356, 816), (13254, 30099),
         "class Session(SessionRedirectMixin):", "A Requests session.",
         "src/requests/sessions.py"),
        ("src/requests/models.py::PreparedRequest", "class", (313, 637), (9458, 20947),
         "class PreparedRequest(RequestEncodingMixin, RequestHooksMixin):",
         "The fully mutable :class:`PreparedRequest <PreparedRequest>` object,",
         "src/requests/models.py"),
        ("src/requests/api.py::get", "function", (62, 73), (3106, 3567),
         "def get(url, params=None, **kwargs):", "Sends a GET request.", "src/requests/api.py"),
        ("src/requests/adapters.py::HTTPAdapter.send", "method", (613, 719), (23321, 27450),
         "def send(\n        self, request, stream=False, timeout=None, verify=True, cert=None,"
         " proxies=None\n    ):",
         "Sends PreparedRequest object. Returns Response object.",
         "src/requests/adapters.py::HTTPAdapter"),
        ("src/requests/api.py", "module", (1, 157), (0, 6449), None, "requests.api", None),
    ],
)
def test_symbols(requests_recon, key, kind, lines, bytes_, signature, doc, parent):
    with open_recon(requests_recon) as conn:
        symbol = lookup_symbol(conn, key)
        parent_key = conn.execute(sa.text("SELECT key FROM recon.symbol WHERE id = :id"),
                                  {"id": symbol["parent_id"]}).scalar()
        text = conn.execute(
            sa.text("SELECT t.text FROM recon.file_source t JOIN recon.file f"
                    " ON f.id = t.file_id WHERE f.path = :path"), {"path": symbol["path"]}
        ).scalar()
    assert symbol["kind"] == kind
    assert (symbol["start_line"], symbol["end_line"]) == lines
    assert (symbol["start_byte"], symbol["end_byte"]) == bytes_
    assert symbol["signature"] == signature
    assert symbol["doc"] == doc
    assert parent_key == parent
    span = text.encode("utf-8")[bytes_[0]:bytes_[1]].decode("utf-8")
    if kind == "module":
        assert span == text
    else:
        assert span.startswith(signature)


def test_call_edges(requests_recon):
    assert _edges_from(requests_recon, "src/requests/sessions.py::Session.request", "calls") == [
        ("src/requests/models.py::Request", "Request", None, 563),
        (None, "method.upper", None, 564),
        ("src/requests/sessions.py::Session.prepare_request", "self.prepare_request", None, 575),
        ("src/requests/sessions.py::Session.merge_environment_settings",
         "self.merge_environment_settings", None, 579),
        (None, "send_kwargs.update", None, 588),
        ("src/requests/sessions.py::Session.send", "self.send", None, 589),
    ]
    # `with sessions.Session() as session` types nothing: session.request stays unresolved
    assert _edges_from(requests_recon, "src/requests/api.py::request", "calls") == [
        ("src/requests/sessions.py::Session", "sessions.Session", None, 58),
        (None, "session.request", None, 59),
    ]
    assert _edges_from(requests_recon, "src/requests/api.py::get", "calls") == [
        ("src/requests/api.py::request", "request", None, 73),
    ]


def test_inherits_edges(requests_recon):
    assert _edges_from(requests_recon, "src/requests/models.py::PreparedRequest", "inherits") == [
        ("src/requests/models.py::RequestEncodingMixin", "RequestEncodingMixin", None, 313),
        ("src/requests/models.py::RequestHooksMixin", "RequestHooksMixin", None, 313),
    ]
    assert _edges_from(requests_recon, "src/requests/sessions.py::Session", "inherits") == [
        ("src/requests/sessions.py::SessionRedirectMixin", "SessionRedirectMixin", None, 356),
    ]


def test_import_edges(requests_recon):
    imports = _edges_from(requests_recon, "src/requests/sessions.py", "imports")
    assert len(imports) == 38
    assert imports[:6] == [
        (None, "os", None, 8),
        (None, "sys", None, 9),
        (None, "time", None, 10),
        (None, "collections.OrderedDict", None, 11),
        (None, "datetime.timedelta", None, 12),
        ("src/requests/_internal_utils.py", "requests._internal_utils.to_native_string", None, 14),
    ]
    assert ("src/requests/models.py", "requests.models.PreparedRequest", None, 33) in imports


def test_tests_edges(requests_recon):
    test = "tests/test_requests.py::TestRequests.test_HTTP_200_OK_GET_ALTERNATIVE"
    assert _edges_from(requests_recon, test, "tests") == [
        ("src/requests/models.py::Request", "requests.Request", None, 202),
        ("tests/conftest.py::httpbin", "httpbin", None, 202),
        ("src/requests/sessions.py::Session", "requests.Session", None, 203),
        # s = requests.Session() two lines up: the typed name resolves s.send
        ("src/requests/sessions.py::Session.send", "s.send", "requests.Session.send", 206),
        ("src/requests/models.py::Request.prepare", "r.prepare", "requests.Request.prepare", 206),
    ]
    into_library = _rows(
        requests_recon,
        "SELECT count(*), count(DISTINCT e.dst_symbol_id), count(DISTINCT e.src_symbol_id)"
        " FROM recon.edge e JOIN recon.symbol d ON d.id = e.dst_symbol_id"
        " WHERE e.kind = 'tests' AND d.key LIKE 'src/requests/%'",
    )
    assert into_library == [(508, 80, 314)]
