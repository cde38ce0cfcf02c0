"""Transports: how a `ChatRequest` reaches a server. Only `OpenAIBackend` talks to the network; the
fake backend for tests lives in `mindcore.fake` and implements the same two methods. One engine may
name several servers of the same model (one `vllm serve` per GPU, data-parallel replicas); the
backend spreads requests over them, keeps a session on one server, and routes around failing ones.

Retries with backoff on transport errors live here so every engine behaves the same; errors a retry
cannot fix (wrong URL path, bad key, bad request) fail at once with a message naming the setting.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime
import email.utils
import hashlib
import json
import logging
import os
import random
import re
import threading
import time
import urllib.parse
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Protocol

import httpcore

from mindsimkit.mindcore import tool_template, wire
from mindsimkit.mindcore.config import SAMPLING_FIELDS, deep_merge
from mindsimkit.mindcore.errors import ConfigError, EngineUnavailable, FieldRefused, TransportError
from mindsimkit.mindcore.redact import shown_url
from mindsimkit.mindcore.types import REASONING_FIELDS, ChatRequest, RawReply

# One INFO line per HTTP request buries progress bars (and breaks once distilabel has swapped the
# root handlers); transport problems surface as our own errors instead.
for _name in ("httpx", "httpx2", "httpcore", "openai"):
    logging.getLogger(_name).setLevel(logging.WARNING)

log = logging.getLogger(__name__)

# Sessions remembered for server affinity; the oldest are forgotten first (a forgotten session just
# gets a fresh least-busy pick).
_AFFINITY_KEYS = 100_000
# A Retry-After longer than this is treated as this long (engines.<name>.max_retry_after_s overrides): the run
# keeps probing instead of sleeping for a day on one header, and the worst case of a request stays known.
MAX_RETRY_AFTER_S = 60.0
# Set while an engine is being probed (`engines check`, the preflight): a probe that timed out is not sent again,
# so a server that never answers is reported after one timeout instead of after every retry of every probe.
PROBING: contextvars.ContextVar[bool] = contextvars.ContextVar("mindsim_probing", default=False)
# OpenAI's reasoning families (o1, o3, o4-mini, gpt-5 and later, optionally behind an "openai/" router
# prefix) refuse `max_tokens` and take `max_completion_tokens`; see `token_field`.
_OPENAI_REASONING_MODEL = re.compile(r"^(?:openai/)?(?:o[1-9](?:-|$)|gpt-(?:[5-9]|[1-9]\d)(?:[.\-]|$))", re.I)
_OPENAI_HOSTS = ("api.openai.com",)
_AZURE_SUFFIXES = (".openai.azure.com", ".cognitiveservices.azure.com")


def token_field(token_param: str, kind: str, base_url: str, model: str) -> str:
    """The body field an output budget goes in. `max_tokens` / `max_completion_tokens` as stated;
    `auto`: `max_completion_tokens` on an `openai` engine whose server is OpenAI's own API or Azure
    OpenAI (which take it for every model and refuse `max_tokens` for reasoning models), or whose model
    is an OpenAI reasoning model wherever it is served; `max_tokens` everywhere else (vLLM, llama.cpp,
    SGLang and most routers read it; vLLM reads both)."""
    if token_param in ("max_tokens", "max_completion_tokens"):
        return token_param
    if kind != "openai":
        return "max_tokens"
    host = (urllib.parse.urlsplit(base_url).hostname or "").lower()
    if host in _OPENAI_HOSTS or host.endswith(_AZURE_SUFFIXES) or _OPENAI_REASONING_MODEL.match(model or ""):
        return "max_completion_tokens"
    return "max_tokens"


def refusal_hint(message: str, sent: dict[str, Any]) -> str:
    """What to change in the recipe when a server refuses (HTTP 400) a field the role sent, read from the
    server's message; '' when the message names none of them."""
    text = message.lower()
    hints = []
    if "max_tokens" in sent and "max_tokens" in text and "max_completion_tokens" not in sent:
        hints.append("set token_param: max_completion_tokens on the role (or the engine)")
    elif "max_completion_tokens" in sent and "max_completion_tokens" in text:
        hints.append("set token_param: max_tokens on the role (or the engine)")
    refused = [f for f in SAMPLING_FIELDS if f in sent and re.search(rf"\b{f}\b", text)]
    if refused:
        hints.append(f"add omit: [{', '.join(refused)}] to the role (the model takes only its default)")
    if "reasoning_effort" in sent and "reasoning" in text:
        hints.append("remove reasoning_effort from the role (this model takes none, or not that value)")
    if "chat_template_kwargs" in json_keys(sent) and ("chat_template" in text or "thinking" in text):
        hints.append(
            "remove thinking from the role, or fix thinking_key to the variable this model's chat template reads"
        )
    return "; ".join(hints)


def tool_parser_for(kind: str) -> str:
    """Who reads an engine kind's tool calls out of the model's text (`OpenAIBackend.tool_parser`): the embedded
    llama.cpp's chat endpoint parses them but does not force one, so the backend does both there."""
    return "template" if kind == "embedded" else "server"


# Engine kinds whose structured outputs come from a grammar built from any JSON schema, a root `anyOf` of objects
# included (llama.cpp's converter; vLLM's structured outputs), so a schema can state a rule across fields as
# alternatives. Hosted APIs' strict modes want an object at the root.
SCHEMA_ALTERNATIVE_KINDS = frozenset({"embedded", "vllm"})


def json_keys(body: dict[str, Any]) -> set[str]:
    """Top-level keys of a request as it goes on the wire (`extra_body` merged in)."""
    return {k for k in body if k != "extra_body"} | set(body.get("extra_body") or {})


class Backend(Protocol):
    name: str
    native_tools: bool
    max_concurrency: int

    async def complete(self, request: ChatRequest) -> RawReply: ...

    def describe(self) -> dict[str, Any]: ...


@dataclass
class _Server:
    """One server of an engine: its load, health and usage counters (shared by all event loops)."""

    url: str
    cap: int  # requests this process may have in flight there; 0 keeps it out of rotation entirely
    outstanding: int = 0  # queued here or in flight: what "least outstanding requests" compares
    failures_in_row: int = 0
    out_until: float = 0.0  # end of a health cool-down (monotonic clock)
    wait_until: float = 0.0  # end of a 429 Retry-After window (monotonic clock)
    was_out: bool = False
    stats: dict[str, int] = field(
        default_factory=lambda: {"requests": 0, "ok": 0, "errors": 0, "rate_limited": 0, "taken_out": 0}
    )


class _PrefixGate:
    """One request at a time per long prompt prefix, in one event loop.

    llama.cpp keeps a prompt's evaluated prefix in the slot that evaluated it and does not share it with the
    other slots (measured: a prefix warm in one slot was evaluated again in full by each concurrent request that
    landed on another). On a CPU, where prompt evaluation gains nothing from running several at once, two
    requests that open with the same long system prompt (a judge's rubric, a writer's vocabulary) are faster one
    after the other: the second lands on the warm slot and evaluates only what follows the prefix."""

    def __init__(self) -> None:
        self._locks: dict[str, list[Any]] = {}  # key -> [lock, requests holding or waiting for it]

    @contextlib.asynccontextmanager
    async def hold(self, key: str | None) -> AsyncIterator[None]:
        if key is None:
            yield
            return
        entry = self._locks.setdefault(key, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if not entry[1]:
                del self._locks[key]


class OpenAIBackend:
    """Any OpenAI-compatible chat server: the embedded llama.cpp, `vllm serve`, hosted APIs — or
    several of them serving the same model, spread as follows.

    - No affinity key: the server with the fewest outstanding requests (queued + in flight) in this
      process; ties go round-robin, so sequential calls alternate.
    - Affinity key (`ChatRequest.affinity`, e.g. a session id): a key's first call goes to the least
      busy server and later calls follow it there, so its prompt prefix stays cached. A key moves
      only if its server is out of rotation, rate-limited, or busier than the least busy server by a
      whole batch (`max_concurrency` more outstanding requests): waiting behind a full batch costs
      more than re-reading a prefix elsewhere. After a move the key stays on its new server.
    - Health: `failure_limit` connection errors, timeouts or 5xx in a row take a server out for
      `cooldown_s` (one WARNING line); afterwards it is tried again and one more failure takes it
      out again, one success resets it. A request that fails on one server is retried at once on
      another healthy one without using its own retry budget, so a call fails only when no healthy
      server is left. With a single server nothing changes from the one-server behaviour.
    - 429: that server alone is skipped until its `Retry-After` (seconds or an HTTP date; without
      the header, the usual backoff) has passed; requests go elsewhere or wait for the window.
    - `max_concurrency` caps each server (not the sum); `server_caps` overrides it per server (a
      Ray worker's share of the global cap, see `worker_caps`).
    - `serial_prefix_chars` (the embedded engine): requests whose first message (with the tools, which a
      template renders before it) is at least this long and the same are sent one at a time (`_PrefixGate`);
      0, for servers that share cached prefixes across requests (vLLM) or hosted APIs, sends them as they come.
    - `tool_parser` says who turns a model's tool calls into `tool_calls` where `native_tools` is on: "server"
      (vLLM's or an API's own tool-call parser reads the chat request's `tools`), or "template" (the embedded
      engine, whose chat endpoint does not force a call: the backend renders the tools itself and asks the raw
      completion endpoint under a schema, `mindcore.tool_template`).
    """

    def __init__(
        self,
        name: str,
        *,
        base_url: str | None = None,
        base_urls: list[str] | None = None,
        default_model: str,
        api_key_env: str | None = None,
        max_concurrency: int = 8,
        timeout_s: float = 120.0,
        native_tools: bool = True,
        structured_mode: str = "json_schema",
        strict_schema: bool = False,
        max_retries: int = 3,
        kind: str = "openai",
        server_caps: list[int] | None = None,
        failure_limit: int = 3,
        cooldown_s: float = 30.0,
        token_param: str = "auto",
        serial_prefix_chars: int = 0,
        attached: str | None = None,
        threads: int | None = None,
        connect_timeout_s: float = wire.CONNECT_TIMEOUT_S,
        max_retry_after_s: float = MAX_RETRY_AFTER_S,
    ) -> None:
        urls = list(base_urls or ([base_url] if base_url else []))
        if not urls or (base_url and base_urls and [base_url] != urls[:1]):
            raise ConfigError(f"engines.{name}: give base_url or base_urls (one or more server URLs)")
        caps = list(server_caps) if server_caps is not None else [max_concurrency] * len(urls)
        if len(caps) != len(urls) or min(caps) < 0 or max(caps) < 1:
            raise ConfigError(f"engines.{name}: server_caps needs one cap >= 0 per server, at least one above 0")
        self.name = name
        self.kind = kind
        self.base_urls = urls
        self.base_url = urls[0]  # single-server code paths (tokenizer, health hints) use the first
        self.default_model = default_model
        self.api_key_env = api_key_env
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.max_retry_after_s = max_retry_after_s
        self.native_tools = native_tools
        self.tool_parser = tool_parser_for(kind)
        self.schema_alternatives = kind in SCHEMA_ALTERNATIVE_KINDS
        self.structured_mode = structured_mode
        self.strict_schema = strict_schema
        self.max_retries = max_retries
        self.failure_limit = failure_limit
        self.cooldown_s = cooldown_s
        self.token_param = token_param
        self.serial_prefix_chars = serial_prefix_chars
        # An embedded engine using another process's server (mindcore.embedded.ATTACH_ENV): said in provenance.
        self.attached = attached
        # The CPU threads this process's embedded server computes with (it takes fewer when other work keeps
        # cores busy at its start, and then runs slower): said in provenance, so a slow run can say why.
        self.threads = threads
        self.servers = [_Server(url, cap) for url, cap in zip(urls, caps)]
        self._lock = threading.Lock()
        self._rr = 0
        self._affinity: OrderedDict[str, int] = OrderedDict()
        # Sockets and semaphores belong to the event loop they were first used in; stages may run several
        # `asyncio.run` calls, so keep one set per loop (cheap: the SSL context is shared per process).
        self._per_loop: dict[int, list[tuple[wire.ServerLink, asyncio.Semaphore]]] = {}
        self._gates: dict[int, _PrefixGate] = {}  # per event loop, as the semaphores
        # Links of loops that ended without `aclose_loop` are kept referenced: garbage-collecting their
        # sockets after the loop has gone only prints noise.
        self._retired: list[wire.ServerLink] = []

    @property
    def total_concurrency(self) -> int:
        return sum(s.cap for s in self.servers)

    def describe(self) -> dict[str, Any]:
        # Never include the key itself: only the name of the variable that holds it (and URLs as shown).
        out: dict[str, Any] = {
            "engine": self.name,
            "kind": self.kind,
            "base_url": shown_url(self.base_url),
            "model": self.default_model,
            "api_key_env": self.api_key_env,
            "native_tools": self.native_tools,
            "structured_mode": self.structured_mode,
            # Whether a rule across answer fields went out as schema alternatives (the judge's no-issue rule).
            "schema_alternatives": self.schema_alternatives,
        }
        if self.native_tools:
            out["tool_parser"] = self.tool_parser
        if len(self.servers) > 1:
            out["base_urls"] = [shown_url(u) for u in self.base_urls]
        if self.attached:
            out["attached"] = self.attached
        if self.threads:
            out["threads"] = self.threads
        return out

    def server_stats(self) -> dict[str, dict[str, int]]:
        """Per-server counters of this process: requests sent, ok, errors, 429s, times taken out."""
        with self._lock:
            return {shown_url(s.url): dict(s.stats) for s in self.servers}

    def _api_key(self) -> str:
        if not self.api_key_env:
            return "not-needed"
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ConfigError(
                f"engines.{self.name}.api_key_env: environment variable {self.api_key_env} is not set; "
                f"export it before running (the key is read from the environment only)"
            )
        return key

    def _loop_state(self) -> list[tuple[wire.ServerLink, asyncio.Semaphore]]:
        loop = asyncio.get_running_loop()
        state = self._per_loop.get(id(loop))
        if state is None:
            key = self._api_key()
            state = [
                (
                    wire.ServerLink(s.url, key, self.timeout_s, connect_timeout_s=self.connect_timeout_s),
                    asyncio.Semaphore(max(1, s.cap)),
                )
                for s in self.servers
            ]
            self._retired.extend(link for per in self._per_loop.values() for link, _ in per)
            self._per_loop = {id(loop): state}
            self._gates = {id(loop): _PrefixGate()}
        return state

    def _prefix_key(self, body: dict[str, Any]) -> str | None:
        """What `_PrefixGate` serialises on: the model, the tools and the first message, when that is long."""
        if not self.serial_prefix_chars or not body.get("messages"):
            return None
        first = body["messages"][0].get("content")
        if not isinstance(first, str) or len(first) < self.serial_prefix_chars:
            return None
        head = json.dumps([body.get("model"), body.get("tools"), body["messages"][0]], sort_keys=True)
        return hashlib.sha256(head.encode()).hexdigest()

    async def aclose_loop(self) -> None:
        """Close this loop's HTTP clients; call before the loop ends (`Engines.run` does)."""
        loop = id(asyncio.get_running_loop())
        state = self._per_loop.pop(loop, None)
        self._gates.pop(loop, None)
        for link, _ in state or []:
            await link.aclose()

    def token_field(self, req: ChatRequest) -> str:
        """The field `req`'s output budget is sent in (the role's token_param, else the engine's)."""
        return token_field(
            req.token_param or self.token_param, self.kind, self.base_url, req.model or self.default_model
        )

    def body(self, req: ChatRequest) -> dict[str, Any]:
        """The JSON body `req` goes out as: model, messages, the sampling fields not omitted, the output budget
        in the engine's field, then one merge of the role's extra_body, the thinking switch and the schema (the
        toolkit's own keys win; config validation already refuses a recipe that sets the same key twice)."""
        kw: dict[str, Any] = {"model": req.model or self.default_model, "messages": req.messages}
        for key in SAMPLING_FIELDS:
            value = getattr(req, key)
            if value is not None and key not in req.omit:
                kw[key] = value
        if req.max_tokens is not None:
            kw[self.token_field(req)] = req.max_tokens
        if req.reasoning_effort is not None:
            kw["reasoning_effort"] = req.reasoning_effort
        if req.top_logprobs is not None:
            kw["logprobs"] = True
            kw["top_logprobs"] = req.top_logprobs
        extra = dict(req.extra_body or {})
        if req.thinking is not None:
            extra = deep_merge(extra, {"chat_template_kwargs": {req.thinking_key: req.thinking}})
        if req.response_schema is not None:
            if self.structured_mode == "vllm":
                extra = deep_merge(extra, {"structured_outputs": {"json": req.response_schema}})
            else:
                kw["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {
                        "name": req.schema_name,
                        "schema": req.response_schema,
                        "strict": self.strict_schema,
                    },
                }
        if req.tools:
            kw["tools"] = req.tools
            if req.tool_choice is not None:
                kw["tool_choice"] = req.tool_choice
        # As the SDK merged extra_body: its keys land at the top level of the body, over any of the same name.
        kw.update(extra)
        return kw

    def sent_fields(self, req: ChatRequest) -> dict[str, Any]:
        """The body fields `req` goes out with, besides the model and the messages (as `engines check`
        reports them); `extra_body` is merged in, as the server sees it."""
        body = self.body(req)
        body.pop("messages", None), body.pop("model", None)
        return body

    # -- choosing a server ------------------------------------------------------------------------
    def _choose(self, affinity: str | None, avoid: set[int]) -> tuple[int | None, float]:
        """(server index, 0) — or (None, seconds to wait) when every candidate is rate-limited."""
        now = time.monotonic()
        usable = [i for i, s in enumerate(self.servers) if s.cap > 0]
        healthy = [i for i in usable if self.servers[i].out_until <= now]
        candidates = [i for i in healthy if i not in avoid] or healthy
        if not candidates:
            # Everything is cooling down: use the server back soonest and let the request's own retry
            # budget decide, exactly as a one-server engine would.
            candidates = [min(usable, key=lambda i: self.servers[i].out_until)]
        ready = [i for i in candidates if self.servers[i].wait_until <= now]
        if not ready:
            return None, min(self.servers[i].wait_until for i in candidates) - now
        n = len(self.servers)
        least = min(ready, key=lambda i: (self.servers[i].outstanding, (i - self._rr) % n))
        pick = least
        if affinity is not None:
            home = self._affinity.get(affinity)
            if home in ready and (
                self.servers[home].outstanding - self.servers[least].outstanding < max(1, self.servers[home].cap)
            ):
                pick = home
            self._affinity[affinity] = pick
            self._affinity.move_to_end(affinity)
            while len(self._affinity) > _AFFINITY_KEYS:
                self._affinity.popitem(last=False)
        if pick == least:
            self._rr = pick + 1
        return pick, 0.0

    async def _acquire(self, affinity: str | None, avoid: set[int]) -> int:
        while True:
            with self._lock:
                pick, wait = self._choose(affinity, avoid)
                if pick is not None:
                    server = self.servers[pick]
                    server.outstanding += 1
                    server.stats["requests"] += 1
                    return pick
            await asyncio.sleep(max(0.01, wait))

    def _has_alternative(self, avoid: set[int]) -> bool:
        now = time.monotonic()
        return any(s.cap > 0 and s.out_until <= now and i not in avoid for i, s in enumerate(self.servers))

    def _server_failed(self, server: _Server, what: str) -> None:
        with self._lock:
            server.stats["errors"] += 1
            server.failures_in_row += 1
            now = time.monotonic()
            if len(self.servers) < 2 or server.failures_in_row < self.failure_limit or server.out_until > now:
                return
            server.out_until = now + self.cooldown_s
            server.was_out = True
            server.stats["taken_out"] += 1
        log.warning(
            "engine '%s': server %s taken out of rotation for %.0fs after %d failures in a row (last: %s)",
            self.name,
            server.url,
            self.cooldown_s,
            server.failures_in_row,
            what,
        )

    def _server_ok(self, server: _Server) -> None:
        with self._lock:
            server.stats["ok"] += 1
            server.failures_in_row = 0
            back, server.was_out = server.was_out, False
        if back:
            log.info("engine '%s': server %s answers again; back in rotation", self.name, server.url)

    def _rate_limited(self, server: _Server, exc: wire.HTTPStatusError, attempt: int) -> float:
        wait = _retry_after(exc.headers)
        wait = _backoff(attempt) if wait is None else min(wait, self.max_retry_after_s)
        with self._lock:
            server.stats["rate_limited"] += 1
            server.wait_until = max(server.wait_until, time.monotonic() + wait)
        return wait

    # -- one request ------------------------------------------------------------------------------
    async def complete(self, request: ChatRequest) -> RawReply:
        state = self._loop_state()
        body = self.body(request)
        async with self._gates[id(asyncio.get_running_loop())].hold(self._prefix_key(body)):
            if request.tools and self.native_tools and self.tool_parser == "template":
                return await self._complete_by_template(request, state, body["model"])
            # Encoded once, whichever server and however many tries it takes.
            return await self._send(request, state, body["model"], wire.dumps(body))

    # -- tool calls the backend parses itself (`tool_parser: template`) ---------------------------------------
    async def _complete_by_template(
        self, request: ChatRequest, state: list[tuple[wire.ServerLink, asyncio.Semaphore]], model: str
    ) -> RawReply:
        """`request` answered as a tool-calling chat server would, through the raw completion endpoint: the prompt
        rendered with the tools template, a required call opened with its tag and held to the calls' schema, a free
        answer that opens a call asked again from the tag under that schema; the calls parsed into `tool_calls`."""
        tools = request.tools or []
        forced = tool_template.forced_name(request.tool_choice, tools)
        prompt = tool_template.render_prompt(request.messages, tools)
        if forced is not None:
            return await self._template_call(request, state, model, prompt, "", forced)
        free = await self._send(
            request, state, model, wire.dumps(self._completion_body(request, model, prompt)), endpoint="completions"
        )
        head, opened = tool_template.split_at_call(free.content or "")
        if request.tool_choice == "none" or not opened:
            return free
        reply = await self._template_call(request, state, model, prompt, head, "")
        reply.prompt_tokens += free.prompt_tokens
        reply.completion_tokens += free.completion_tokens
        reply.cached_tokens += free.cached_tokens
        return reply

    async def _template_call(
        self,
        request: ChatRequest,
        state: list[tuple[wire.ServerLink, asyncio.Semaphore]],
        model: str,
        prompt: str,
        head: str,
        only: str,
    ) -> RawReply:
        """One call written after `head` (the words before it), its object held to the schema of the offered tools
        (or of the one named `only`)."""
        tools = request.tools or []
        opened = head + tool_template.CALL_PREFIX
        body = self._completion_body(request, model, prompt + opened)
        body["json_schema"] = tool_template.call_schema(tools, only)
        reply = await self._send(request, state, model, wire.dumps(body), endpoint="completions")
        # A call cut off at the output budget keeps its open tag and no close: parsed as the broken block it is.
        closing = "" if reply.finish_reason == "length" else "\n" + tool_template.CLOSE_TAG
        parsed = tool_template.parse_calls(opened + (reply.content or "") + closing, tools)
        reply.content, reply.tool_calls, reply.tool_call_error = parsed.content, parsed.calls, parsed.error
        if parsed.calls and not parsed.error:
            reply.finish_reason = "tool_calls"
        return reply

    def _completion_body(self, req: ChatRequest, model: str, prompt: str) -> dict[str, Any]:
        """The raw completion request for `req` with its prompt already rendered: its sampling fields and output
        budget, the role's extra_body merged as on the chat path."""
        body: dict[str, Any] = {"model": model, "prompt": prompt}
        for key in SAMPLING_FIELDS:
            value = getattr(req, key)
            if value is not None and key not in req.omit:
                body[key] = value
        if req.max_tokens is not None:
            body["max_tokens"] = req.max_tokens
        body.update(req.extra_body or {})
        return body

    async def _send(
        self,
        request: ChatRequest,
        state: list[tuple[wire.ServerLink, asyncio.Semaphore]],
        model: str,
        data: bytes,
        endpoint: str = "",
    ) -> RawReply:
        attempt = 0  # failures charged to this request's retry budget
        tried: set[int] = set()
        while True:
            idx = await self._acquire(request.affinity, tried)
            server = self.servers[idx]
            link, sem = state[idx]
            limit = self.max_retries
            rate_limited = False
            try:
                async with sem:
                    token = IN_FLIGHT.start(self.name, server.url)
                    try:
                        resp = await link.post_json(data, request.timeout_s, endpoint)
                    finally:
                        IN_FLIGHT.end(token)
                reply = _text_reply(resp) if endpoint == "completions" else _raw_reply(resp)
                self._server_ok(server)
                reply.server = server.url
                return reply
            except (*wire.TIMEOUTS, *wire.NETWORK_ERRORS) as exc:
                timed_out = isinstance(exc, wire.TIMEOUTS)
                what = _timeout_text(exc, request, self) if timed_out else "could not connect"
                # A refused connection will not fix itself in seconds: retry once, then stop.
                limit = (0 if PROBING.get() else self.max_retries) if timed_out else 1
                self._server_failed(server, what)
                failure = TransportError(
                    f"engine '{self.name}' at {shown_url(server.url)}: {what} after {attempt + 1} tries "
                    f"({exc.__class__.__name__}). Is the server running? Check "
                    f"engines.{self.name}.base_url / port, or run `mindsim engines check`."
                )
                failure.__cause__ = exc
            except wire.BadReply as exc:
                # A 2xx that is not a chat completion: the server is broken, as with a 5xx.
                self._server_failed(server, "no chat completion")
                failure = TransportError(
                    f"engine '{self.name}' at {shown_url(server.url)}: answered without a chat completion "
                    f"after {attempt + 1} tries: {_short(exc)}"
                )
                failure.__cause__ = exc
            except wire.HTTPStatusError as exc:
                status = exc.status
                if status == 429:
                    self._rate_limited(server, exc, attempt + 1)
                    rate_limited = True
                elif status >= 500:
                    self._server_failed(server, f"HTTP {status}")
                elif status in (401, 403):
                    raise EngineUnavailable(
                        f"engine '{self.name}' at {shown_url(server.url)} refused the API key "
                        f"(HTTP {status}); check the variable named by engines.{self.name}.api_key_env"
                    ) from exc
                elif status == 404:
                    raise EngineUnavailable(
                        f"engine '{self.name}': {shown_url(server.url)} answered 404 for model "
                        f"'{model}' — check base_url (usually ends in /v1) and the model name"
                    ) from exc
                elif status == 400:
                    hint = refusal_hint(str(exc), self.sent_fields(request))
                    raise (FieldRefused if hint else TransportError)(
                        f"engine '{self.name}' rejected the request (HTTP 400): {_short(exc)}"
                        + (f" — {hint}" if hint else "")
                    ) from exc
                else:  # another 4xx: the request, not the server, so no retry
                    raise TransportError(
                        f"engine '{self.name}' at {shown_url(server.url)}: HTTP {status}: {_short(exc)}"
                    ) from exc
                failure = TransportError(
                    f"engine '{self.name}' at {shown_url(server.url)}: HTTP {status} after "
                    f"{attempt + 1} tries: {_short(exc)}"
                )
                failure.__cause__ = exc
            finally:
                with self._lock:
                    server.outstanding -= 1
            tried.add(idx)
            if self._has_alternative(tried):
                continue  # another healthy server has not failed this request yet: free retry
            attempt += 1
            if attempt > limit:
                raise failure
            if not rate_limited:
                # (A 429 already set that server's wait window, which `_acquire` honours.)
                await asyncio.sleep(_backoff(attempt))


class _InFlight:
    """Requests on the wire in this process, by engine and server, for progress lines that say who a job is
    waiting on (`waiting_on`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: dict[int, tuple[str, str, float]] = {}
        self._next = 0

    def start(self, engine: str, url: str) -> int:
        with self._lock:
            self._next += 1
            self._started[self._next] = (engine, url, time.monotonic())
            return self._next

    def end(self, token: int) -> None:
        with self._lock:
            self._started.pop(token, None)

    def waiting_on(self, min_age_s: float = 0.0) -> str:
        """`engine 'x' at URL (3 requests, the oldest 42 s)` per server with a request older than `min_age_s`,
        the longest wait first; '' when none."""
        now = time.monotonic()
        with self._lock:
            rows = list(self._started.values())
        per: dict[tuple[str, str], list[float]] = {}
        for engine, url, t0 in rows:
            per.setdefault((engine, url), []).append(now - t0)
        shown = sorted(
            ((max(ages), len(ages), engine, url) for (engine, url), ages in per.items() if max(ages) >= min_age_s),
            reverse=True,
        )
        return "; ".join(
            f"engine '{engine}' at {url} ({n} request{'s' if n > 1 else ''}, the oldest {age:.0f} s)"
            for age, n, engine, url in shown
        )


IN_FLIGHT = _InFlight()


def _timeout_text(exc: BaseException, request: ChatRequest, backend: "OpenAIBackend") -> str:
    """Which timeout ran out, and the setting that holds it."""
    total = request.timeout_s or backend.timeout_s
    setting = "the role's timeout_s" if request.timeout_s else f"engines.{backend.name}.timeout_s"
    if isinstance(exc, wire.TotalTimeout):
        return f"did not answer within {total:g} s ({setting})"
    if isinstance(exc, httpcore.ConnectTimeout):
        return (
            f"did not take the connection within {min(backend.connect_timeout_s, total):g} s "
            f"(engines.{backend.name}.connect_timeout_s)"
        )
    return f"timed out ({setting}: {total:g} s)"


def _backoff(attempt: int) -> float:
    return min(8.0, 0.5 * 2.0 ** (attempt - 1)) * (0.75 + random.random() / 2)


def _retry_after(headers: Any) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `Retry-After` given as seconds or an HTTP date."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds())


def worker_caps(cap: int, workers: int, worker: int, servers: int = 1) -> list[int]:
    """Worker `worker`'s (0-based, of `workers`) in-flight cap on each of `servers` servers, such that
    the workers' caps on every server add up to exactly `cap` — the cap stays global instead of
    being multiplied by the number of workers.

    Each worker gets `cap // workers` on each server; the `cap % workers` leftover slots of server j
    go to the workers from j × leftover on (mod workers), so successive servers hand their extras to
    different workers. If that leaves a worker with nothing anywhere (more workers than slots in total), it
    still gets 1 on server `worker % servers`: a worker that cannot send anything would hang, so
    that case oversubscribes by at most one request per such worker (see docs/scale.md).
    """
    if cap < 1 or workers < 1 or servers < 1 or not 0 <= worker < workers:
        raise ValueError(
            f"worker_caps: need cap, workers, servers >= 1 and 0 <= worker < workers "
            f"(got cap={cap}, workers={workers}, worker={worker}, servers={servers})"
        )
    base, extra = divmod(cap, workers)
    caps = [base + (1 if (worker - j * extra) % workers < extra else 0) for j in range(servers)]
    if not any(caps):
        caps[worker % servers] = 1
    return caps


def _short(exc: Exception, limit: int = 300) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + "…"


def _raw_reply(resp: dict[str, Any]) -> RawReply:
    try:
        choice = resp["choices"][0]
        msg = choice["message"]
        calls = [
            {
                "id": tc.get("id"),
                "type": "function",
                "function": {"name": tc["function"]["name"], "arguments": tc["function"].get("arguments")},
            }
            for tc in msg.get("tool_calls") or []
        ]
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise wire.BadReply(f"not a chat completion ({type(exc).__name__}: {exc})") from None
    usage = resp.get("usage") or {}
    # Servers that do not report the details send null or leave them out: counted as 0, not guessed.
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    return RawReply(
        content=msg.get("content"),
        tool_calls=calls,
        prompt_tokens=usage.get("prompt_tokens") or 0,
        completion_tokens=usage.get("completion_tokens") or 0,
        cached_tokens=prompt_details.get("cached_tokens") or 0,
        reasoning_tokens=completion_details.get("reasoning_tokens") or 0,
        finish_reason=choice.get("finish_reason"),
        reasoning=reasoning_of(msg),
        logprobs=_token_logprobs(choice),
    )


def _text_reply(resp: dict[str, Any]) -> RawReply:
    """A raw completion (`/completions`) read as a reply whose content is the generated text."""
    try:
        choice = resp["choices"][0]
        text = choice["text"]
    except (KeyError, IndexError, TypeError) as exc:
        raise wire.BadReply(f"not a text completion ({type(exc).__name__}: {exc})") from None
    if not isinstance(text, str):
        raise wire.BadReply("not a text completion (its text is not a string)")
    usage = resp.get("usage") or {}
    return RawReply(
        content=text,
        prompt_tokens=usage.get("prompt_tokens") or 0,
        completion_tokens=usage.get("completion_tokens") or 0,
        cached_tokens=(usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0,
        finish_reason=choice.get("finish_reason"),
    )


def _token_logprobs(choice: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The per-token log probabilities of a choice, or None where the server sent none (or a shape it is not)."""
    content = (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
    if not isinstance(content, list) or not all(isinstance(t, dict) and "token" in t for t in content):
        return None
    return content


def reasoning_of(msg: dict[str, Any]) -> dict[str, Any]:
    """The reasoning a reply message carries (`REASONING_FIELDS`), empty fields left out; a server that names the
    text `reasoning` (newer vLLM, several routers) has it read as `reasoning_content`, the name chat templates
    read on an earlier turn."""
    out = {k: msg[k] for k in REASONING_FIELDS if msg.get(k)}
    if "reasoning_content" not in out and isinstance(msg.get("reasoning"), str) and msg["reasoning"]:
        out["reasoning_content"] = msg["reasoning"]
    return out
