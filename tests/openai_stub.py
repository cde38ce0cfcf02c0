"""A scripted OpenAI-compatible server for tests that run the real `mindsim` command in a subprocess,
where the in-process FakeBackend cannot reach (exit codes of failing engines and arcs).

It listens on 127.0.0.1 on a free port, in a thread of the test process, and serves the two endpoints
the toolkit uses: `GET /v1/models` and `POST /v1/chat/completions`. What a completion returns is a
*behaviour*: a function from the request body (the JSON the client sent) to a `Reply`. Ready-made ones:

    always_status(500)        every completion fails with that HTTP status
    always_text("{oops")      every completion is that text (e.g. invalid JSON for a schema)
    from_responder(fn)        adapts a FakeBackend-style responder (ChatRequest -> text | dict | RawReply),
                              so the fakes the unit tests already use can play roles over HTTP
    by_model({...}, default)  picks a behaviour by the request's `model`
    hosted_reasoning(inner)   enforces a hosted reasoning model's rules first (OpenAI's: HTTP 400 for
                              `max_tokens` and for a temperature/top_p other than the default), then
                              answers as `inner`, reporting reasoning and cached tokens in usage
    template_thinking(inner)  a vLLM-like chat-template server: reads `chat_template_kwargs` (400 for a
                              non-mapping or an unknown variable), thinks when the switch is on

A recipe reaches it with `kind: openai`, `base_url: <stub.base_url>`, and (for `from_responder`, which
needs to know the role) one model name per role: `patient: {engine: stub, model: patient}`.
Loopback only; nothing here opens a port beyond 127.0.0.1.
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.parse
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
    reasoning_tokens: int = 0  # reported in usage.completion_tokens_details (and added to completion_tokens)
    cached_tokens: int = 0  # reported in usage.prompt_tokens_details
    # Extra fields of the reply message, as reasoning servers add them (e.g. {"reasoning_content": "..."}).
    message_fields: dict[str, Any] = field(default_factory=dict)


Behaviour = Callable[[dict[str, Any]], Reply]


# In a `Reply.error`, replaced by the request's Authorization header: a server whose error body echoes what it was
# sent (some proxies do), to check that no key reaches what the toolkit prints or writes.
ECHO_AUTH = "{authorization}"
# The same header as other servers echo it: percent-encoded (as a query string or a logged URL would carry it),
# and base64 (as a proxy that logs headers encoded might).
ECHO_AUTH_URLENCODED = "{authorization_urlencoded}"
ECHO_AUTH_BASE64 = "{authorization_base64}"


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


def probe_answers(body: dict[str, Any]) -> Reply:
    """Answers a preflight probe as a working model would, whichever way the schema came: OpenAI's
    `response_format` or vLLM's `structured_outputs`."""
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema") or (
        body.get("structured_outputs") or {}
    ).get("json")
    return Reply(content=json.dumps({"mood": "steady", "calm": True}) if schema else "Hello.")


def tool_calling(inner: Behaviour) -> Behaviour:
    """A server with a tool parser (vLLM's --enable-auto-tool-choice): a request offering tools is answered with a
    call of the first one, arguments filled from its schema's required string fields; anything else as `inner`."""

    def behave(body: dict[str, Any]) -> Reply:
        tools = body.get("tools") or []
        if not tools:
            return inner(body)
        fn = tools[0]["function"]
        args = {k: "calm" for k in (fn.get("parameters") or {}).get("required", [])}
        return Reply(
            tool_calls=[
                {"id": "call_1", "type": "function", "function": {"name": fn["name"], "arguments": json.dumps(args)}}
            ]
        )

    return behave


def _refuse(message: str) -> Reply:
    return Reply(status=400, error=message)


def hosted_reasoning(
    inner: Behaviour,
    *,
    reasoning_tokens: int = 40,
    cached_tokens: int = 8,
    efforts: tuple[str, ...] = ("none", "minimal", "low", "medium", "high", "xhigh"),
) -> Behaviour:
    """Rules of OpenAI's reasoning models as its API states them: `max_tokens` is refused (they take
    `max_completion_tokens`); temperature and top_p are refused unless at their default of 1; an unknown
    `reasoning_effort` is refused. Each answer reports reasoning and cached prompt tokens."""

    def behave(body: dict[str, Any]) -> Reply:
        if "max_tokens" in body:
            return _refuse(
                "Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead."
            )
        for key in ("temperature", "top_p"):
            if key in body and body[key] != 1:
                return _refuse(
                    f"Unsupported value: '{key}' does not support {body[key]} with this model. "
                    "Only the default (1) value is supported."
                )
        effort = body.get("reasoning_effort")
        if effort is not None and effort not in efforts:
            return _refuse(f"Invalid value for 'reasoning_effort': {effort!r}.")
        reply = inner(body)
        if reply.status < 400:
            reply.reasoning_tokens = reply.reasoning_tokens or reasoning_tokens
            reply.cached_tokens = reply.cached_tokens or cached_tokens
        return reply

    return behave


def template_thinking(
    inner: Behaviour, *, variables: tuple[str, ...] = ("enable_thinking",), reasoning_tokens: int = 25
) -> Behaviour:
    """A vLLM-like server whose chat template reads `variables` from `chat_template_kwargs`: anything
    else there, or a kwargs that is not a mapping, is refused with HTTP 400 (as a strict template check
    would); with the switch on, each answer reports reasoning tokens."""

    def behave(body: dict[str, Any]) -> Reply:
        kwargs = body.get("chat_template_kwargs")
        if kwargs is not None and not isinstance(kwargs, dict):
            return _refuse("chat_template_kwargs must be an object")
        unknown = sorted(set(kwargs or {}) - set(variables))
        if unknown:
            return _refuse(f"chat_template_kwargs: the chat template does not read {', '.join(unknown)}")
        reply = inner(body)
        if reply.status < 400 and any((kwargs or {}).get(v) for v in variables):
            reply.reasoning_tokens = reply.reasoning_tokens or reasoning_tokens
        return reply

    return behave


def by_model(behaviours: dict[str, Behaviour], default: Behaviour) -> Behaviour:
    return lambda body: behaviours.get(body.get("model", ""), default)(body)


def from_responder(responder: Callable[[Any], Any]) -> Behaviour:
    """A FakeBackend responder over HTTP. The request's `model` is taken as its role (name the models
    after the roles in the recipe); the JSON schema and tools come from the wire format."""
    from mindsimkit.mindcore.types import ChatRequest, RawReply

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
            return Reply(content=out.content, tool_calls=out.tool_calls, message_fields=dict(out.reasoning))
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

    def _completion(self, body: dict[str, Any], authorization: str = "") -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
        try:
            reply = self.behaviour(body)
        except Exception as exc:  # a broken behaviour shows up as a 500 naming it, not a hung client
            reply = Reply(status=500, error=f"stub behaviour raised {type(exc).__name__}: {exc}")
        if reply.status >= 400:
            error = (
                reply.error.replace(ECHO_AUTH, f"request had Authorization: {authorization}")
                .replace(
                    ECHO_AUTH_URLENCODED, "request had authorization=" + urllib.parse.quote(authorization, safe="")
                )
                .replace(
                    ECHO_AUTH_BASE64, "request header (base64): " + base64.b64encode(authorization.encode()).decode()
                )
            )
            return reply.status, {"error": {"message": error, "type": "stub_error", "code": reply.status}}
        message: dict[str, Any] = {"role": "assistant", "content": reply.content, **reply.message_fields}
        if reply.tool_calls:
            message["tool_calls"] = reply.tool_calls
        words = sum(len(str(m.get("content") or "").split()) for m in body.get("messages", []))
        completion = len(str(reply.content or "").split()) + reply.reasoning_tokens
        usage: dict[str, Any] = {
            "prompt_tokens": words,
            "completion_tokens": completion,
            "total_tokens": words + completion,
        }
        if reply.reasoning_tokens:
            usage["completion_tokens_details"] = {"reasoning_tokens": reply.reasoning_tokens}
        if reply.cached_tokens:
            usage["prompt_tokens_details"] = {"cached_tokens": min(reply.cached_tokens, words)}
        return 200, {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model") or self.model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if reply.tool_calls else "stop"}
            ],
            "usage": usage,
        }

    # `echo_auth`: unknown routes (the Hub's, when HF_ENDPOINT points here) answer 404 quoting the request's
    # Authorization header, as a careless server might.
    echo_auth = False

    def _no_route(self, handler: BaseHTTPRequestHandler) -> str:
        said = f"no route {handler.path}"
        return said + (
            f" (request had Authorization: {handler.headers.get('Authorization')})" if self.echo_auth else ""
        )

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
                    self._send(
                        200,
                        {
                            "object": "list",
                            "data": [{"id": m, "object": "model", "owned_by": "stub"} for m in stub.models],
                        },
                    )
                else:
                    self._send(404, {"error": {"message": stub._no_route(self)}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if not self.path.split("?")[0].rstrip("/").endswith("/v1/chat/completions"):
                    self._send(404, {"error": {"message": stub._no_route(self)}})
                    return
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "request body is not JSON"}})
                    return
                status, reply = stub._completion(body, self.headers.get("Authorization") or "")
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
