"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for the rank tests.

Speaks enough of the protocol for the official ``openai`` client: POST
/v1/chat/completions with a JSON body, a chat.completion JSON reply. Each
request takes the next scripted answer; every request body is recorded.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Answer:
    content: str | None = None  # the assistant message's content
    status: int = 200
    delay_seconds: float = 0.0
    raw_body: str | None = None  # send this body instead of a chat.completion
    raw_bytes: bytes | None = None  # send these bytes instead (not UTF-8, huge, …)
    trickle_seconds: float = 0.0  # pause this long after each byte written
    hang_seconds: float = 0.0  # after the headers, send nothing this long


def completion(content: str) -> str:
    return json.dumps({
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": "deepseek-v4-pro",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 321, "completion_tokens": 45, "total_tokens": 366},
    })


class ChatServer:
    def __init__(self, responder=None) -> None:
        """``responder``: request body -> Answer, used once the scripted answers run out."""
        self.answers: list[Answer] = []
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append({"path": self.path, "body": body})
                if server.answers:
                    answer = server.answers.pop(0)
                elif responder is not None:
                    answer = responder(body)
                else:
                    answer = Answer(status=503)
                if answer.delay_seconds:
                    time.sleep(answer.delay_seconds)
                data = answer.raw_bytes
                if data is None:
                    payload = answer.raw_body
                    if payload is None:
                        payload = (completion(answer.content) if answer.status == 200
                                   else json.dumps({"error": {"message": "scripted failure"}}))
                    data = payload.encode("utf-8")
                try:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.flush()
                    if answer.hang_seconds:
                        time.sleep(answer.hang_seconds)
                    if answer.trickle_seconds:
                        for index in range(len(data)):
                            self.wfile.write(data[index:index + 1])
                            self.wfile.flush()
                            time.sleep(answer.trickle_seconds)
                    else:
                        self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
