"""A scripted OpenAI-compatible server for tests that run the real `mindsim` command in a subprocess,
where the in-process FakeBackend cannot reach (issue 9: exit codes of failing engines and arcs).

It listens on 127.0.0.1 on a free port, in a thread of the test process, and serves the two endpoints
the toolkit uses: `GET /v1/models` and `POST /v1/chat/completions`. What a completion returns is a
*behaviour*: a function from the request body (the JSON the client sent) to a `Reply`. Ready-made ones:

    always_status(500)        every completion fails with that HTTP status
    always_text("{oops")      every completion is that text (e.g. invalid JSON for a schema)
    from_responder(fn)        adapts a FakeBackend-style responder (ChatRequest -> text | dict | RawReply),
                              so the fakes the unit tests already use can play roles over HTTP
    by_model({...}, default)  picks a behaviour by the request's `model`

A recipe reaches it with `kind: openai`, `base_url: <stub.base_url>`, and (for `from_responder`, which
needs to know the role) one model name per role: `patient: {engine: stub, model: patient}`.
Loopback only; nothing here opens a port beyond 127.0.0.1.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import pytest


@dataclass
class Reply:
    """One scripted answer: an HTTP error (`status` >= 400) or a chat message."""

    status: int = 200
    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    error: str = "scripted failure"


Behaviour = Callable[[dict[str, Any]], Reply]


def always_status(status: int, error: str = "scripted failure") -> Behaviour:
    return lambda _body: Reply(status=status, error=error)


def always_text(text: str) -> Behaviour:
    return lambda _body: Reply(content=text)


def after_probe(behaviour: Behaviour, probe_calls: int = 2) -> Behaviour:
    """Answer the preflight's health probe (its first `probe_calls` requests: a greeting, then the
    structured round trip) like a working model, then behave as given: an engine that passes the check
    before a job and fails once the job's real calls start."""
    seen = [0]
    lock = threading.Lock()

    def behave(body: dict[str, Any]) -> Reply:
        with lock:
            seen[0] += 1
            probing = seen[0] <= probe_calls
        if not probing:
            return behaviour(body)
        fmt = (body.get("response_format") or {}).get("json_schema") or {}
        return Reply(content=json.dumps({"mood": "steady", "calm": True}) if fmt else "Hello.")

    return behave


def by_model(behaviours: dict[str, Behaviour], default: Behaviour) -> Behaviour:
    return lambda body: behaviours.get(body.get("model", ""), default)(body)


def from_responder(responder: Callable[[Any], Any]) -> Behaviour:
    """A FakeBackend responder over HTTP. The request's `model` is taken as its role (name the models
    after the roles in the recipe); the JSON schema and tools come from the wire format."""
    from mindcore.types import ChatRequest, RawReply

    def behave(body: dict[str, Any]) -> Reply:
        fmt = (body.get("response_format") or {}).get("json_schema") or {}
        req = ChatRequest(
            role=body.get("model", ""),
            model=body.get("model", ""),
            messages=body.get("messages", []),
            temperature=body.get("temperature"),
            max_tokens=body.get("max_tokens"),
            seed=body.get("seed"),
            response_schema=fmt.get("schema"),
            schema_name=fmt.get("name", "output"),
            tools=body.get("tools"),
            tool_choice=body.get("tool_choice"),
        )
        if req.schema_name == "_Probe":
            # The toolkit's preflight probes every engine once before a job; a served fake answers it as
            # any working model would, so the test exercises the job, not the probe.
            return Reply(content=json.dumps({"mood": "steady", "calm": True}))
        out = responder(req)
        if isinstance(out, RawReply):
            return Reply(content=out.content, tool_calls=out.tool_calls)
        return Reply(content=out if isinstance(out, str) else json.dumps(out))

    return behave


class OpenAIStub:
    """`with OpenAIStub(behaviour) as stub:` serves at `stub.base_url` (ends in /v1) until the block ends.
    `stub.requests` holds every completion body received, in order."""

    def __init__(self, behaviour: Behaviour, model: str = "stub-model") -> None:
        self.behaviour = behaviour
        self.model = model
        # What `GET /v1/models` lists: the toolkit's preflight refuses a role whose model is not served,
        # so a test that names models per role adds them here (see `serve`).
        self.models: list[str] = [model]
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="openai-stub", daemon=True)

    def serve(self, *models: str) -> "OpenAIStub":
        """List `models` in `/v1/models` too."""
        self.models.extend(m for m in models if m not in self.models)
        return self

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> "OpenAIStub":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _completion(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
        try:
            reply = self.behaviour(body)
        except Exception as exc:  # a broken behaviour shows up as a 500 naming it, not a hung client
            reply = Reply(status=500, error=f"stub behaviour raised {type(exc).__name__}: {exc}")
        if reply.status >= 400:
            return reply.status, {"error": {"message": reply.error, "type": "stub_error", "code": reply.status}}
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = reply.tool_calls
        words = sum(len(str(m.get("content") or "").split()) for m in body.get("messages", []))
        return 200, {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model") or self.model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
            "usage": {"prompt_tokens": words, "completion_tokens": len(str(reply.content or "").split()),
                      "total_tokens": words + len(str(reply.content or "").split())},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def _send(self, status: int, obj: dict[str, Any]) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/v1/models"):
                    self._send(200, {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "stub"}
                                                                for m in stub.models]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if not self.path.split("?")[0].rstrip("/").endswith("/v1/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "request body is not JSON"}})
                    return
                status, reply = stub._completion(body)
                try:
                    self._send(status, reply)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout, the Ctrl-C test): nobody is left to answer

        return Handler


@pytest.fixture
def openai_stub():
    """Factory: `openai_stub(behaviour)` -> a running `OpenAIStub`, stopped after the test."""
    started: list[OpenAIStub] = []

    def start(behaviour: Behaviour, **kw: Any) -> OpenAIStub:
        stub = OpenAIStub(behaviour, **kw).__enter__()
        started.append(stub)
        return stub

    yield start
    for stub in started:
        stub.__exit__(None, None, None)
