"""Transports: how a `ChatRequest` reaches a server. Only `OpenAIBackend` talks to the network; the
fake backend for tests lives in `mindcore.fake` and implements the same two methods.

Retries with backoff on transport errors live here so every engine behaves the same; errors a retry
cannot fix (wrong URL path, bad key, bad request) fail at once with a message naming the setting.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from typing import Any, Protocol

import openai

from mindcore.errors import ConfigError, EngineUnavailable, TransportError
from mindcore.types import ChatRequest, RawReply

# One INFO line per HTTP request buries progress bars (and breaks once distilabel has swapped the
# root handlers); transport problems surface as our own errors instead.
for _name in ("httpx", "httpx2", "openai"):
    logging.getLogger(_name).setLevel(logging.WARNING)


class Backend(Protocol):
    name: str
    native_tools: bool
    max_concurrency: int

    async def complete(self, request: ChatRequest) -> RawReply: ...

    def describe(self) -> dict[str, Any]: ...


class OpenAIBackend:
    """Any OpenAI-compatible chat server: the embedded llama.cpp, `vllm serve`, hosted APIs."""

    def __init__(
        self,
        name: str,
        *,
        base_url: str,
        default_model: str,
        api_key_env: str | None = None,
        max_concurrency: int = 8,
        timeout_s: float = 120.0,
        native_tools: bool = True,
        structured_mode: str = "json_schema",
        strict_schema: bool = False,
        max_retries: int = 3,
        kind: str = "openai",
    ) -> None:
        self.name = name
        self.kind = kind
        self.base_url = base_url
        self.default_model = default_model
        self.api_key_env = api_key_env
        self.max_concurrency = max_concurrency
        self.timeout_s = timeout_s
        self.native_tools = native_tools
        self.structured_mode = structured_mode
        self.strict_schema = strict_schema
        self.max_retries = max_retries
        # An AsyncOpenAI client and a semaphore are bound to the event loop they were first used in;
        # stages may run several `asyncio.run` calls, so keep one of each per loop.
        self._per_loop: dict[int, tuple[openai.AsyncOpenAI, asyncio.Semaphore]] = {}
        # Clients of loops that ended without `aclose_loop` are kept referenced: garbage-collecting
        # one schedules its close on a dead loop, which only prints noise.
        self._retired: list[openai.AsyncOpenAI] = []

    def describe(self) -> dict[str, Any]:
        # Never include the key itself: only the name of the variable that holds it.
        return {
            "engine": self.name,
            "kind": self.kind,
            "base_url": self.base_url,
            "model": self.default_model,
            "api_key_env": self.api_key_env,
            "native_tools": self.native_tools,
            "structured_mode": self.structured_mode,
        }

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

    def _loop_state(self) -> tuple[openai.AsyncOpenAI, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        state = self._per_loop.get(id(loop))
        if state is None:
            client = openai.AsyncOpenAI(
                base_url=self.base_url, api_key=self._api_key(), max_retries=0, timeout=self.timeout_s
            )
            state = (client, asyncio.Semaphore(self.max_concurrency))
            self._retired.extend(c for c, _ in self._per_loop.values())
            self._per_loop = {id(loop): state}
        return state

    async def aclose_loop(self) -> None:
        """Close this loop's HTTP client; call before the loop ends (`Engines.run` does)."""
        state = self._per_loop.pop(id(asyncio.get_running_loop()), None)
        if state is not None:
            await state[0].close()

    def _kwargs(self, req: ChatRequest) -> dict[str, Any]:
        kw: dict[str, Any] = {"model": req.model or self.default_model, "messages": req.messages}
        for key in ("temperature", "top_p", "max_tokens", "seed"):
            value = getattr(req, key)
            if value is not None:
                kw[key] = value
        if req.response_schema is not None:
            if self.structured_mode == "vllm":
                kw["extra_body"] = {"structured_outputs": {"json": req.response_schema}}
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
        return kw

    async def complete(self, request: ChatRequest) -> RawReply:
        client, sem = self._loop_state()
        kwargs = self._kwargs(request)
        attempt = 0
        async with sem:
            while True:
                try:
                    resp = await client.chat.completions.create(**kwargs)
                    return _raw_reply(resp)
                except openai.APIConnectionError as exc:  # includes timeouts
                    attempt += 1
                    what = "timed out" if isinstance(exc, openai.APITimeoutError) else "could not connect"
                    # A refused connection will not fix itself in seconds: retry once, then stop.
                    limit = self.max_retries if isinstance(exc, openai.APITimeoutError) else 1
                    if attempt > limit:
                        raise TransportError(
                            f"engine '{self.name}' at {self.base_url}: {what} after {attempt} tries "
                            f"({exc.__class__.__name__}). Is the server running? Check "
                            f"engines.{self.name}.base_url / port, or run `mindsim engines check`."
                        ) from exc
                except (openai.RateLimitError, openai.InternalServerError) as exc:
                    attempt += 1
                    if attempt > self.max_retries:
                        raise TransportError(
                            f"engine '{self.name}' at {self.base_url}: HTTP {exc.status_code} after "
                            f"{attempt} tries: {_short(exc)}"
                        ) from exc
                except openai.AuthenticationError as exc:
                    raise EngineUnavailable(
                        f"engine '{self.name}' at {self.base_url} refused the API key "
                        f"(HTTP {exc.status_code}); check the variable named by engines.{self.name}.api_key_env"
                    ) from exc
                except openai.NotFoundError as exc:
                    raise EngineUnavailable(
                        f"engine '{self.name}': {self.base_url} answered 404 for model "
                        f"'{kwargs['model']}' — check base_url (usually ends in /v1) and the model name"
                    ) from exc
                except openai.BadRequestError as exc:
                    raise TransportError(
                        f"engine '{self.name}' rejected the request (HTTP 400): {_short(exc)}"
                    ) from exc
                await asyncio.sleep(min(8.0, 0.5 * 2 ** (attempt - 1)) * (0.75 + random.random() / 2))


def _short(exc: Exception, limit: int = 300) -> str:
    text = str(exc)
    return text if len(text) <= limit else text[:limit] + "…"


def _raw_reply(resp: Any) -> RawReply:
    choice = resp.choices[0]
    msg = choice.message
    calls = []
    for tc in msg.tool_calls or []:
        calls.append(
            {
                "id": tc.id,
                "type": "function",
                "function": {"name": tc.function.name, "arguments": tc.function.arguments},
            }
        )
    usage = resp.usage
    cached = 0
    if usage is not None and getattr(usage, "prompt_tokens_details", None) is not None:
        cached = usage.prompt_tokens_details.cached_tokens or 0
    return RawReply(
        content=msg.content,
        tool_calls=calls,
        prompt_tokens=usage.prompt_tokens if usage else 0,
        completion_tokens=usage.completion_tokens if usage else 0,
        cached_tokens=cached,
        finish_reason=choice.finish_reason,
    )
