"""A tiny OpenAI-compatible chat server on 127.0.0.1 for multi-server tests and the server benchmark.

It answers `POST /v1/chat/completions` after a fixed latency with a canned reply and usage counts,
and logs every request (arrival time, status sent). Tests steer it while it runs: `script` holds
statuses (with headers) for the next requests, `status` is the answer after that, and `stop()`
closes the port so new connections are refused. It stops by itself after `max_requests` requests
or `lifetime_s` seconds, so a test that forgets it cannot leave a server behind.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Hit:
    at: float  # time.monotonic() when the request arrived
    status: int
    body: dict[str, Any]


class StubServer:
    def __init__(
        self, name: str = "stub", *, latency_s: float = 0.0, max_requests: int = 2000, lifetime_s: float = 120.0
    ) -> None:
        self.name = name
        self.latency_s = latency_s
        self.max_requests = max_requests
        self.lifetime_s = lifetime_s
        self.status = 200
        self.script: deque[tuple[int, dict[str, str]]] = deque()
        self.hits: list[Hit] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._timer: threading.Timer | None = None
        self.port = 0

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> "StubServer":
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                stub._handle(self)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self._timer = threading.Timer(self.lifetime_s, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        """Close the port: from now on connections are refused."""
        httpd, self._httpd = self._httpd, None
        if self._timer is not None:
            self._timer.cancel()
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()

    def __enter__(self) -> "StubServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.hits)

    def served(self) -> int:
        """Requests answered with 200."""
        with self._lock:
            return sum(1 for h in self.hits if h.status == 200)

    # -- one request ------------------------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        body = json.loads(h.rfile.read(int(h.headers.get("Content-Length") or 0)) or b"{}")
        with self._lock:
            if len(self.hits) >= self.max_requests:
                status, headers = 503, {}
                threading.Thread(target=self.stop, daemon=True).start()
            else:
                status, headers = self.script.popleft() if self.script else (self.status, {})
            self.hits.append(Hit(time.monotonic(), status, body))
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if status == 200 and self.latency_s:
                time.sleep(self.latency_s)
            payload = _completion(self.name, body) if status == 200 else {"error": {"message": f"stub {status}"}}
            data = json.dumps(payload).encode()
            h.send_response(status)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            for k, v in headers.items():
                h.send_header(k, v)
            h.end_headers()
            h.wfile.write(data)
        finally:
            with self._lock:
                self.in_flight -= 1


def _completion(name: str, body: dict[str, Any]) -> dict[str, Any]:
    prompt = sum(len(str(m.get("content") or "").split()) for m in body.get("messages", []))
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "stub"),
        "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": f"reply from {name}"}}
        ],
        "usage": {"prompt_tokens": prompt, "completion_tokens": 3, "total_tokens": prompt + 3},
    }
