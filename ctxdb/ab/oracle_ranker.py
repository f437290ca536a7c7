"""The oracle ranker: an instance's gold facts behind the ranking step's real HTTP path.

``ctxdb ab run --ranker oracle`` bounds the ranking step (§4) from above (docs/ab.md,
"The ranker"): an OpenAI-compatible chat-completions server on
127.0.0.1 that scores each residue candidate 1.0 if its item holds one of the
instance's gold facts — by the definition the recall reports credit
(``sql/reports/window_recall.sql``): an item of the fact's entity, or an item of the
same file whose line span holds the fact's (an enclosing class, a module's lines) —
and 0.0 otherwise. That is what a perfect ranking model would answer; the call goes
through the same ``openai`` client, prompt, parse, threshold and ``rank_call`` /
``rank_score`` rows as a real model's. It is not a model, and the reports say so.

How it knows which candidate is gold: the prompt shows a candidate as ``{id, kind,
signature}`` only (``pipeline/rank_client.py`` ``build_request_body``), and the pool's rows
are not committed when the call is made (it happens before the decision's write
transaction). Matching on the signature text was rejected: a signature does not name
its symbol uniquely (two ``def raw_amount(self, ...)`` read alike), and its format is
the pipeline's to change. Instead, before each decision the runner registers
(:meth:`OracleRanker.expect`) the decision's pool as the pipeline's own assembly builds
it from the very request about to be sent (:func:`pool_entities`) — item id → (kind,
entity key, path, lines) — with the instance's gold facts and their spans. Assembly is
deterministic, so the ids the server is asked about are the registered ones; each
candidate's kind is checked against the registration too. A candidate not registered, a
kind that differs, or a call with nothing registered is answered HTTP 409, which the
ranking step records as a failed call (``parse_status`` ``http_error``) instead of a guess.

One server per instance, started by the worker process running it on a free loopback
port: no two workers share one, and within a worker decisions are constructed one at
a time, so the registration a call finds is always its own decision's.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import NamedTuple

from ..pipeline.construct import assemble, normalise
from ..recon.reader import ReconReader

ORACLE_MODEL = "ctxdb-oracle"
GOLD_SCORE, OTHER_SCORE = 1.0, 0.0
COMPLETIONS_PATH = "/v1/chat/completions"
SHUTDOWN_POLL_SECONDS = 0.02


class OracleRefusal(ValueError):
    """A ranking request the oracle cannot answer truthfully (answered HTTP 409)."""


class Place(NamedTuple):
    """Where a pool item or a gold fact sits: its entity key, file and lines; for an
    outline (a whole module's symbol item) its text, for a def/class fact its head."""

    entity_key: str | None
    path: str | None = None
    start_line: int | None = None
    end_line: int | None = None
    text: str | None = None  # an item: its text; a fact: its def/class line (head_text)
    is_outline: bool = False

    def holds(self, fact: Place) -> bool:
        """Recall's "holds" (sql/reports/window_recall.sql): the fact's own entity; a
        span of its file around it (a class; not an outline, whose span is the file's);
        or, from its file, a text showing the fact's def/class line."""
        if self.entity_key is not None and self.entity_key == fact.entity_key:
            return True
        if self.path is None or self.path != fact.path:
            return False
        if fact.text and self.text and fact.text in self.text:
            return True
        if self.is_outline or self.start_line is None or self.end_line is None \
                or fact.start_line is None or fact.end_line is None:
            return False
        return self.start_line <= fact.start_line and self.end_line >= fact.end_line


@dataclass(frozen=True)
class Expected:
    """The decision the next ranking call belongs to."""

    items: dict[str, tuple[str, Place]]  # item id -> (kind, where it sits)
    gold: tuple[Place, ...]

    def is_gold(self, item_id: str) -> bool:
        """The candidate holds a gold fact; an outline — the ranking step's one candidate
        for its file's residual symbols (pipeline/gate.py) — when it or an item of its
        file does."""
        place = self.items[item_id][1]
        places = [place]
        if place.is_outline:
            places += [other for _, other in self.items.values() if other.path == place.path]
        return any(p.holds(fact) for p in places for fact in self.gold)


def pool_entities(store, request) -> dict[str, tuple[str, Place]]:
    """Item id -> (kind, place) of the pool ``store.construct(request)`` will build:
    the pipeline's own normalisation and assembly, over the store's recon."""
    normalised = normalise(request, store.settings)
    with store.engine.connect() as connection, store.recon_connection(connection) as rc:
        inputs = assemble(normalised, ReconReader(rc) if store.recon_available else None)
    return {item.item_id: (item.kind, Place(item.entity_key, item.path, item.start_line,
                                            item.end_line, item.content, item.is_outline))
            for item in inputs.pool}



def oracle_scores(body: dict, expected: Expected | None) -> list[dict]:
    """The rankings for one chat-completions request body, in the residue's order."""
    if expected is None:
        raise OracleRefusal("oracle: no decision registered for this call")
    try:
        user = next(m["content"] for m in body["messages"] if m.get("role") == "user")
        residue = json.loads(user)["residue"]
        if not isinstance(residue, list) or not all(isinstance(c, dict) for c in residue):
            raise TypeError("residue is not a list of objects")
    except (KeyError, TypeError, AttributeError, StopIteration, json.JSONDecodeError) as exc:
        raise OracleRefusal(f"oracle: not a ranking prompt ({type(exc).__name__})") from None
    rankings = []
    for candidate in residue:
        item_id, kind = candidate.get("id"), candidate.get("kind")
        if item_id not in expected.items:
            raise OracleRefusal(f"oracle: candidate {item_id!r} is not in the registered pool")
        registered_kind = expected.items[item_id][0]
        if kind != registered_kind:
            raise OracleRefusal(f"oracle: candidate {item_id} is {kind!r} in the request but "
                                f"{registered_kind!r} in the registered pool")
        score = GOLD_SCORE if expected.is_gold(item_id) else OTHER_SCORE
        rankings.append({"candidate_id": item_id, "relevance_score": score})
    return rankings


def _completion(content: str) -> bytes:
    return json.dumps({
        "id": "chatcmpl-ctxdb-oracle", "object": "chat.completion", "created": 0,
        "model": ORACLE_MODEL,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
    }).encode("utf-8")


class OracleRanker:
    """The oracle's HTTP server on 127.0.0.1 (a free port), in a thread of this process."""

    def __init__(self) -> None:
        self._expected: Expected | None = None
        self._lock = threading.Lock()
        self.calls_answered = 0
        oracle = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # the ab run's output is its summary, not an access log
                pass

            def do_POST(self):
                if self.path.rstrip("/") != COMPLETIONS_PATH:
                    self._reply(404, {"error": {"message": f"oracle: no route {self.path}"}})
                    return
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                    with oracle._lock:
                        rankings = oracle_scores(body, oracle._expected)
                        oracle.calls_answered += 1
                except ValueError as exc:  # a refusal, or a body that is not JSON
                    self._reply(409, {"error": {"message": str(exc)}})
                    return
                self._reply(200, _completion(json.dumps({"rankings": rankings})))

            def _reply(self, status: int, payload) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        # shutdown() waits for the serving loop's next poll: a server per instance must
        # not cost the default half second each
        self._thread = threading.Thread(target=self._httpd.serve_forever,
                                        kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS},
                                        daemon=True, name="ctxdb-oracle-ranker")

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        host_text = host.decode() if isinstance(host, bytes) else host
        return f"http://{host_text}:{port}/v1"

    def expect(self, items: dict[str, tuple[str, Place]], gold) -> None:
        """Register the decision whose ranking call comes next, with the instance's gold
        facts (places, or bare entity keys)."""
        facts = tuple(fact if isinstance(fact, Place) else Place(fact) for fact in gold)
        items = {item_id: (kind, place if isinstance(place, Place) else Place(place))
                 for item_id, (kind, place) in items.items()}
        with self._lock:
            self._expected = Expected(items, facts)

    def forget(self) -> None:
        with self._lock:
            self._expected = None

    def __enter__(self) -> OracleRanker:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()
