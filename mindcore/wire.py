"""The HTTP under `OpenAIBackend`: one JSON POST to one OpenAI-compatible server, and nothing else.

Why not the openai SDK: measured against an instant server (benchmarks/bench_harness.py), the SDK
spent more CPU per request than all of our own session logic — a typing-driven walk over every request body,
reply parsing into its pydantic models — and its httpcore connection pool scans every connection for every
request (quadratic at 64–256 in flight). Here the body is encoded once (orjson), the reply decoded once into
plain dicts, and each server keeps its idle keep-alive connections in a stack: a request takes the most
recently used one or opens a new one, in constant time. httpcore does the HTTP/1.1 and TLS work.

A `ServerLink` belongs to one event loop (its sockets do); the SSL context, which is what costs to build, is
made once per process and shared by every link. When an HTTP(S) proxy from the environment applies to a
server (as the SDK honoured them), that server's requests go through httpcore's own proxy pool instead.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import threading
import urllib.parse
import urllib.request
from typing import Any

import httpcore

from mindsimkit.mindcore.redact import shown_url

try:  # ~5x faster than json for request bodies of a few tens of KB
    import orjson

    def dumps(obj: Any) -> bytes:
        return orjson.dumps(obj)

    loads = orjson.loads
except ImportError:  # pragma: no cover - orjson is a dependency; kept for a trimmed install
    import json

    def dumps(obj: Any) -> bytes:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    def loads(data: bytes | bytearray | memoryview[int] | str) -> Any:
        return json.loads(bytes(data) if isinstance(data, memoryview) else data)


_USER_AGENT = b"mindsim"
# Seconds to open a connection (TCP, TLS, proxy) when the engine does not say: a host that does not take the
# connection in this long is down or unreachable, and saying so beats waiting out the whole request timeout.
CONNECT_TIMEOUT_S = 10.0
# The most a reply body may hold. A chat completion is a few hundred kB at the very most; a server that sends more
# is broken or hostile, and reading it would fill memory before any timeout fires.
MAX_REPLY_BYTES = 64 * 1024 * 1024


class TotalTimeout(httpcore.TimeoutException):
    """The whole exchange (connect, send, headers, body) took longer than the request's timeout. Read timeouts
    alone never fire on a server that sends one byte a second, so the total is enforced around the exchange."""


# What the SDK counted as a retryable network failure, kept apart from a timeout (see OpenAIBackend._send).
NETWORK_ERRORS = (
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.ProxyError,
    httpcore.UnsupportedProtocol,
    OSError,
)
TIMEOUTS = (httpcore.TimeoutException,)


class HTTPStatusError(Exception):
    """A server's answer other than 2xx. The text is the SDK's (`Error code: 400 - {…}`), so what reads the
    server's message (a refused field's recipe hint) reads the same thing it always did."""

    def __init__(self, status: int, headers: dict[str, str], body: Any):
        self.status = status
        self.headers = headers
        self.body = body
        super().__init__(f"Error code: {status}" + (f" - {body}" if body not in (None, "", b"") else ""))


class BadReply(Exception):
    """A 2xx answer that is not a chat completion (not JSON, or no choices)."""


class ReplyTooLarge(BadReply):
    """A reply body over `MAX_REPLY_BYTES` (or a smaller bound the caller set): broken, whatever its status."""


@functools.lru_cache(maxsize=1)
def _ssl_context() -> ssl.SSLContext:
    # Honours SSL_CERT_FILE / SSL_CERT_DIR as the SDK's httpx client did; built once per process (forked
    # workers inherit it), not once per client and event loop.
    import httpx

    return httpx.create_ssl_context(verify=True, trust_env=True)


def _proxy_for(url: urllib.parse.SplitResult) -> str | None:
    proxies = urllib.request.getproxies()
    proxy = proxies.get(url.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass(url.hostname or ""):
        return None
    return proxy


def _host(url: urllib.parse.SplitResult) -> bytes:
    """The Host header of `url`: its host, with the port unless it is the scheme's default."""
    port = url.port or (443 if url.scheme == "https" else 80)
    default = (url.scheme == "https" and port == 443) or (url.scheme == "http" and port == 80)
    return (url.hostname if default else f"{url.hostname}:{port}").encode()  # type: ignore[union-attr]


class ServerLink:
    """Keep-alive connections to one server for one event loop; `post_json` sends one request."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        timeout_s: float,
        keepalive_s: float = 60.0,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ):
        self._base = base_url.rstrip("/")
        url = urllib.parse.urlsplit(self._base + "/chat/completions")
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) URL: {shown_url(base_url)}")
        port = url.port or (443 if url.scheme == "https" else 80)
        self._origin = httpcore.Origin(url.scheme.encode(), url.hostname.encode(), port)
        self._url = httpcore.URL(url.geturl().encode())
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.keepalive_s = keepalive_s
        self._headers = [
            (b"host", _host(url)),
            (b"authorization", f"Bearer {api_key}".encode()),
            (b"content-type", b"application/json"),
            (b"accept", b"application/json"),
            (b"user-agent", _USER_AGENT),
        ]
        self._ssl = _ssl_context() if url.scheme == "https" else None
        self._idle: list[httpcore.AsyncHTTPConnection] = []
        proxy = _proxy_for(url)
        self._proxy = (
            httpcore.AsyncHTTPProxy(
                proxy_url=proxy, ssl_context=self._ssl or _ssl_context(), keepalive_expiry=keepalive_s
            )
            if proxy
            else None
        )

    async def _connection(self) -> tuple[httpcore.AsyncHTTPConnection, bool]:
        """(connection, reused): the most recently used idle one still open, else a new one."""
        while self._idle:
            conn = self._idle.pop()
            if conn.is_available() and not conn.has_expired():
                return conn, True
            await conn.aclose()
        return self._new(), False

    def _new(self) -> httpcore.AsyncHTTPConnection:
        return httpcore.AsyncHTTPConnection(self._origin, ssl_context=self._ssl, keepalive_expiry=self.keepalive_s)

    async def post_json(self, body: bytes, timeout_s: float | None = None, endpoint: str = "") -> dict[str, Any]:
        """POST `body` (JSON bytes) to the server's chat completions (or to `endpoint`, a path below the base URL,
        e.g. "completions"): the decoded reply, or `HTTPStatusError`, `BadReply`, or a network error / timeout
        (`NETWORK_ERRORS`, `TIMEOUTS`). `timeout_s` bounds the whole exchange, however slowly the server sends
        (`TotalTimeout`)."""
        t = timeout_s if timeout_s is not None else self.timeout_s
        url = httpcore.URL(f"{self._base}/{endpoint}".encode()) if endpoint else self._url
        try:
            return await asyncio.wait_for(self._post(body, t, url), t)
        except TimeoutError:
            raise TotalTimeout(f"no complete answer within {t:g} s") from None

    async def _post(self, body: bytes, t: float, url: httpcore.URL) -> dict[str, Any]:
        request = httpcore.Request(
            b"POST",
            url,
            headers=[*self._headers, (b"content-length", str(len(body)).encode())],
            content=body,
            extensions={"timeout": _timeouts(t, self.connect_timeout_s)},
        )
        if self._proxy is not None:
            return _decoded(*await _exchange(self._proxy, request))
        conn, reused = await self._connection()
        try:
            try:
                response, content = await _exchange(conn, request)
            except (httpcore.ConnectionNotAvailable, httpcore.RemoteProtocolError):
                if not reused:
                    raise
                # A kept-alive connection the server closed while it sat idle (uvicorn drops them after 5 s): the
                # request never reached the server, so it goes once more on a fresh connection, as clients do.
                await conn.aclose()
                conn = self._new()
                response, content = await _exchange(conn, request)
        except BaseException:
            await conn.aclose()
            raise
        if conn.is_idle():
            self._idle.append(conn)
        else:  # the server said `Connection: close`, or the body was cut
            await conn.aclose()
        return _decoded(response, content)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.aclose()
        if self._proxy is not None:
            await self._proxy.aclose()


def _timeouts(total_s: float, connect_s: float) -> dict[str, float]:
    return {"connect": min(connect_s, total_s), "read": total_s, "write": total_s, "pool": total_s}


async def _exchange(
    handler: Any, request: httpcore.Request, max_bytes: int = MAX_REPLY_BYTES
) -> tuple[httpcore.Response, bytes]:
    response = await handler.handle_async_request(request)
    try:
        chunks, size = [], 0
        async for chunk in response.aiter_stream():
            size += len(chunk)
            if size > max_bytes:
                raise ReplyTooLarge(f"the reply body is over {max_bytes} bytes")
            chunks.append(chunk)
        return response, b"".join(chunks)
    finally:
        await response.aclose()


async def get_json(
    url: str,
    *,
    api_key: str | None = None,
    timeout_s: float = 10.0,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    method: str = "GET",
    body: Any = None,
    max_bytes: int = 8 * 1024 * 1024,
) -> Any:
    """One request outside chat completions (`/models`, `/props`, `/tokenize`, `/health`): the decoded JSON
    body. `timeout_s` bounds the whole exchange (`TotalTimeout`); a status of 300 or more raises
    `HTTPStatusError`, a body that is not JSON `BadReply`, network failures as `post_json`."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url}")
    headers = [(b"host", _host(parts)), (b"accept", b"application/json"), (b"user-agent", _USER_AGENT)]
    if api_key:
        headers.append((b"authorization", f"Bearer {api_key}".encode()))
    content = b""
    if body is not None:
        content = dumps(body)
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(content)).encode())]
    ssl_context = _ssl_context() if parts.scheme == "https" else None
    proxy = _proxy_for(parts)
    pool: Any = (
        httpcore.AsyncHTTPProxy(proxy_url=proxy, ssl_context=ssl_context or _ssl_context())
        if proxy
        else httpcore.AsyncConnectionPool(ssl_context=ssl_context, max_connections=1)
    )
    request = httpcore.Request(
        method.encode(),
        url.encode(),
        headers=headers,
        content=content,
        extensions={"timeout": _timeouts(timeout_s, connect_timeout_s)},
    )
    try:
        async with pool:
            response, data = await asyncio.wait_for(_exchange(pool, request, max_bytes), timeout_s)
    except TimeoutError:
        raise TotalTimeout(f"no complete answer within {timeout_s:g} s") from None
    if response.status >= 300:
        raise HTTPStatusError(response.status, {}, data[:300].decode("utf-8", "replace"))
    try:
        return loads(data)
    except ValueError:
        raise BadReply(f"HTTP {response.status} with a body that is not JSON: {data[:120]!r}") from None


# Everything `get_json` raises for a server that is down, slow, broken or not what was expected.
GET_ERRORS = (*NETWORK_ERRORS, *TIMEOUTS, HTTPStatusError, BadReply, ValueError)


def get_json_blocking(url: str, **kwargs: Any) -> Any:
    """`get_json` for code that is not async, callable from inside a running event loop too: it runs on its own
    loop in a helper thread, which ends within the timeout because `get_json` does."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = asyncio.run(get_json(url, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - handed to the calling thread, raised there
            outcome["error"] = exc

    worker = threading.Thread(target=run, name="mindsim-http", daemon=True)
    worker.start()
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def _decoded(response: httpcore.Response, content: bytes) -> dict[str, Any]:
    status = response.status
    if status >= 300:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.headers}
        try:
            body: Any = loads(content) if content else None
        except ValueError:
            body = content.decode("utf-8", "replace")
        raise HTTPStatusError(status, headers, body)
    try:
        data = loads(content)
    except ValueError:
        raise BadReply(f"HTTP {status} with a body that is not JSON: {content[:120]!r}") from None
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list) or not data["choices"]:
        raise BadReply(f"HTTP {status} without choices: {str(data)[:160]}")
    return data
