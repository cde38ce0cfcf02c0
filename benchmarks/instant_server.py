"""An OpenAI-compatible chat server that answers at once, for measuring what the harness itself costs per
request (`bench_harness.py`). Not a model: every answer is canned, but valid for the request it answers.

- `POST …/chat/completions`: a tool call when the request carries `tools` (arguments built from the tool's
  parameter schema), JSON built from the schema when it carries `response_format` (json_schema) or vLLM's
  `structured_outputs`, else a short plain sentence. Usage counts come back as a server would send them.
- `GET …/models`: the model the request names is always served, so preflight-style probes pass.

The JSON is a valid instance of the request's schema (enums, consts, lengths, item counts, `$ref`s), picked
with a per-request seeded RNG so a simulated patient does not commit the same move every turn. One asyncio
protocol per connection with HTTP/1.1 keep-alive, so the server spends far less than a client per request.
"""

from __future__ import annotations

import asyncio
import random
import threading
from typing import Any

import orjson

_WORDS = (
    "I have been sleeping badly and work keeps piling up, so most evenings I just sit there feeling "
    "tired and a bit lost about what to do next with all of it"
).split()


def instance(schema: dict[str, Any], defs: dict[str, Any], rng: random.Random, depth: int = 0) -> Any:
    """A small valid instance of `schema` (`defs`: the root's `$defs`)."""
    if "$ref" in schema:
        return instance(defs[schema["$ref"].rsplit("/", 1)[-1]], defs, rng, depth)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [o for o in schema[key] if o.get("type") != "null"] or schema[key]
            return instance(rng.choice(options), defs, rng, depth)
    if "allOf" in schema:
        return instance(schema["allOf"][0], defs, rng, depth)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: instance(v, defs, rng, depth + 1) for k, v in props.items()}
    if kind == "array":
        n = max(schema.get("minItems", 0), min(1, schema.get("maxItems", 1)))
        items = schema.get("items") or {"type": "string"}
        out = [instance(items, defs, rng, depth + 1) for _ in range(n)]
        if schema.get("uniqueItems"):
            out = list({orjson.dumps(x): x for x in out}.values())
        return out
    if kind == "string":
        return _text(rng, schema.get("minLength", 0), schema.get("maxLength", 120))
    if kind == "integer":
        return int(schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1))
    if kind == "number":
        return float(schema.get("minimum", 0.0))
    if kind == "boolean":
        return False
    return None


def _text(rng: random.Random, low: int, high: int) -> str:
    start = rng.randrange(len(_WORDS))
    words = " ".join(_WORDS[start:] + _WORDS[:start])
    text = words[: max(low, min(high, 60))].rstrip()
    return text if len(text) >= low else text.ljust(low, "x")


def answer(body: dict[str, Any]) -> dict[str, Any]:
    """The completion for one request body."""
    rng = random.Random(orjson.dumps([len(body.get("messages") or []), body.get("seed")]))
    message: dict[str, Any] = {"role": "assistant", "content": None}
    finish = "stop"
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema") or (
        body.get("structured_outputs") or {}
    ).get("json")
    if body.get("tools"):
        tool = body["tools"][0]["function"]
        params = tool.get("parameters") or {}
        args = instance(params, params.get("$defs") or {}, rng)
        message["tool_calls"] = [
            {
                "id": f"call_{rng.getrandbits(48):012x}",
                "type": "function",
                "function": {"name": tool["name"], "arguments": orjson.dumps(args).decode()},
            }
        ]
        finish = "tool_calls"
    elif schema:
        message["content"] = orjson.dumps(instance(schema, schema.get("$defs") or {}, rng)).decode()
    else:
        message["content"] = _text(rng, 20, 90) + "."
    prompt = sum(len(str(m.get("content") or "")) for m in body.get("messages") or []) // 4
    return {
        "id": "chatcmpl-instant",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "m"),
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": 12, "total_tokens": prompt + 12},
    }


class _Connection(asyncio.Protocol):
    def __init__(self, server: "InstantServer") -> None:
        self.server = server
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buf) < end + 4 + length:
                return
            body, self.buf = self.buf[end + 4 : end + 4 + length], self.buf[end + 4 + length :]
            method, path = head.split(" ", 2)[:2]
            self._respond(method, path, body)

    def _respond(self, method: str, path: str, body: bytes) -> None:
        status = 200
        if method == "POST" and path.rstrip("/").endswith("/chat/completions"):
            request = orjson.loads(body or b"{}")
            payload = answer(request)
            self.server.count(request)
        elif method == "GET" and path.rstrip("/").endswith("/models"):
            payload = {"object": "list", "data": [{"id": m, "object": "model"} for m in self.server.models]}
        else:
            status, payload = 404, {"error": {"message": f"no route {path}"}}
        data = orjson.dumps(payload)
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 %d OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (status, len(data), data)
        )


class InstantServer:
    """`with InstantServer() as s:` serves on 127.0.0.1 (`s.base_url`) from a thread of this process."""

    def __init__(self, models: tuple[str, ...] = ("instant",)) -> None:
        self.models = list(models)
        self.requests = 0
        self.recording: list[dict[str, Any]] | None = None  # request bodies, while a caller wants them
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.port = 0

    def count(self, body: dict[str, Any]) -> None:
        with self._lock:
            self.requests += 1
            if self.recording is not None:
                self.recording.append(body)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "InstantServer":
        def serve() -> None:
            asyncio.set_event_loop(self._loop)
            srv = self._loop.run_until_complete(
                self._loop.create_server(lambda: _Connection(self), "127.0.0.1", 0, backlog=1024)
            )
            self.port = srv.sockets[0].getsockname()[1]
            self._ready.set()
            self._loop.run_forever()
            srv.close()

        self._thread = threading.Thread(target=serve, name="instant-server", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


if __name__ == "__main__":
    import time

    with InstantServer() as s:
        print(s.base_url, flush=True)
        while True:
            time.sleep(3600)
