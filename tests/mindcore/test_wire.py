"""The engine layer's own HTTP (`mindcore.wire`) against local stub servers: what reaches the server,
keep-alive connections reused and recovered when the server dropped them, replies that are not chat
completions, status codes outside the retry path, the API key kept out of every message, env proxies."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mindsimkit.mindcore.backends import OpenAIBackend
from mindsimkit.mindcore.client import RoleClient
from mindsimkit.mindcore.config import RoleSpec
from mindsimkit.mindcore.errors import EngineUnavailable, TransportError
from mindsimkit.mindcore.types import ChatRequest, UsageLedger

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stub_servers import StubServer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from openai_stub import OpenAIStub, Reply  # noqa: E402


def _run(backend: OpenAIBackend, coro_fn):
    async def main():
        try:
            return await coro_fn()
        finally:
            await backend.aclose_loop()

    return asyncio.run(main())


def _req(text: str = "hi", **kw) -> ChatRequest:
    return ChatRequest(role="patient", model="m", messages=[{"role": "user", "content": text}], **kw)


class _KeepAlive:
    """An HTTP/1.1 server that keeps connections open, drops each one `idle_s` after its last request, and
    counts the connections it accepted; `body` is what every completion answers."""

    def __init__(self, body: bytes, status: int = 200, idle_s: float = 30.0, headers: dict[str, str] | None = None):
        self.connections = 0
        self.requests: list[tuple[dict[str, str], bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = idle_s

            def setup(self):
                super().setup()
                outer.connections += 1

            def log_message(self, *a):
                pass

            def do_POST(self):
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests.append(({k.lower(): v for k, v in self.headers.items()}, data))
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


_OK = json.dumps(
    {
        "choices": [{"message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1},
    }
).encode()


def test_connections_are_kept_alive_and_one_the_server_dropped_is_replaced_without_failing():
    server = _KeepAlive(_OK, idle_s=0.3)
    try:
        b = OpenAIBackend("e", base_url=server.base_url, default_model="m", timeout_s=5)

        async def go():
            first = [await b.complete(_req()) for _ in range(20)]
            await asyncio.sleep(0.6)  # the server closes the idle connection meanwhile
            return first + [await b.complete(_req())]

        replies = _run(b, go)
        assert [r.content for r in replies] == ["fine"] * 21
        assert server.connections == 2  # one for the first twenty, one after the server dropped it
        assert b.server_stats()[server.base_url]["errors"] == 0
    finally:
        server.close()


def test_the_body_is_the_json_the_role_built_and_the_key_goes_in_the_header_only(monkeypatch):
    monkeypatch.setenv("MINDSIM_TEST_KEY", "sk-secret-123")
    server = _KeepAlive(_OK)
    try:
        b = OpenAIBackend("e", base_url=server.base_url, default_model="m", api_key_env="MINDSIM_TEST_KEY")
        client = RoleClient(
            "patient", b, RoleSpec(engine="e", temperature=0.3, extra_body={"priority": 1}), "m", UsageLedger()
        )
        _run(b, lambda: client.chat([{"role": "user", "content": "héllo"}], max_tokens=12))
        headers, raw = server.requests[0]
        assert headers["authorization"] == "Bearer sk-secret-123"
        assert json.loads(raw) == {
            "model": "m",
            "messages": [{"role": "user", "content": "héllo"}],
            "temperature": 0.3,
            "max_tokens": 12,
            "priority": 1,
        }
    finally:
        server.close()


@pytest.mark.parametrize("body", [b"<html>gateway</html>", b'{"object": "error"}', b'{"choices": []}'])
def test_a_2xx_that_is_not_a_chat_completion_is_a_server_failure(body):
    server = _KeepAlive(body)
    try:
        b = OpenAIBackend("e", base_url=server.base_url, default_model="m", max_retries=1)
        with pytest.raises(TransportError, match="without a chat completion after 2 tries"):
            _run(b, lambda: b.complete(_req()))
        assert len(server.requests) == 2 and b.server_stats()[server.base_url]["errors"] == 2
    finally:
        server.close()


def test_a_refused_key_names_the_variable_never_the_key(monkeypatch):
    monkeypatch.setenv("MINDSIM_TEST_KEY", "sk-secret-456")
    for status in (401, 403):
        with OpenAIStub(
            lambda _b, s=status: Reply(status=s, error="Incorrect API key provided: sk-secret-456")
        ) as stub:
            b = OpenAIBackend("e", base_url=stub.base_url, default_model="m", api_key_env="MINDSIM_TEST_KEY")
            with pytest.raises(EngineUnavailable) as info:
                _run(b, lambda: b.complete(_req()))
            assert "engines.e.api_key_env" in str(info.value) and "sk-secret" not in str(info.value)
            assert len(stub.requests) == 1


def test_other_4xx_fail_at_once_with_the_servers_message():
    with OpenAIStub(lambda _b: Reply(status=422, error="messages: field required")) as stub:
        b = OpenAIBackend("e", base_url=stub.base_url, default_model="m")
        with pytest.raises(TransportError, match="HTTP 422.*messages: field required"):
            _run(b, lambda: b.complete(_req()))
        assert len(stub.requests) == 1  # the request, not the server: no retry


def test_usage_details_and_tool_calls_come_back_as_sent():
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    with OpenAIStub(lambda _b: Reply(content=None, tool_calls=[call], reasoning_tokens=7, cached_tokens=3)) as stub:
        b = OpenAIBackend("e", base_url=stub.base_url, default_model="m")
        reply = _run(b, lambda: b.complete(_req("one two three four")))
    assert reply.tool_calls == [call] and reply.content is None and reply.finish_reason == "tool_calls"
    assert (reply.prompt_tokens, reply.completion_tokens, reply.cached_tokens, reply.reasoning_tokens) == (4, 7, 3, 7)
    assert reply.server == stub.base_url


def test_a_timeout_is_retried_then_reported_as_one():
    with StubServer("slow", latency_s=0.5) as slow:
        b = OpenAIBackend("e", base_url=slow.base_url, default_model="m", timeout_s=0.1, max_retries=1)
        t0 = time.monotonic()
        with pytest.raises(TransportError, match=r"did not answer within 0.1 s \(engines.e.timeout_s\) after 2 tries"):
            _run(b, lambda: b.complete(_req()))
        assert slow.count == 2 and time.monotonic() - t0 < 2.5


def test_an_http_proxy_from_the_environment_is_used(monkeypatch):
    with OpenAIStub(lambda _b: Reply(content="via proxy")) as proxy:
        monkeypatch.setenv("http_proxy", proxy.base_url.removesuffix("/v1"))
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        b = OpenAIBackend("e", base_url="http://model-host.invalid:8000/v1", default_model="m")
        reply = _run(b, lambda: b.complete(_req()))
    assert reply.content == "via proxy" and len(proxy.requests) == 1
