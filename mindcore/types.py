"""Value types shared by the engine layer: requests, replies, tool specs and token accounting."""

from __future__ import annotations

import json
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterable

from pydantic import BaseModel


@dataclass
class ChatRequest:
    """One chat completion as the backend sends it (OpenAI wire shape, minus transport details)."""

    role: str
    model: str
    messages: list[dict[str, Any]]
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    stop: list[str] | None = None
    response_schema: dict[str, Any] | None = None
    schema_name: str = "output"
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    # Request options of the role (`mindcore.config.RequestOptions`); the backend turns them into body fields.
    reasoning_effort: str | None = None
    thinking: bool | None = None
    thinking_key: str = "enable_thinking"
    token_param: str | None = None  # None: the engine's
    omit: tuple[str, ...] = ()
    extra_body: dict[str, Any] | None = None
    timeout_s: float | None = None  # None: the engine's
    # Ask the server for each generated token's log probability and this many alternatives at each position
    # (OpenAI `logprobs`/`top_logprobs`; llama.cpp and vLLM take the same fields). None: not asked.
    top_logprobs: int | None = None
    # Requests sharing a key go to the same server of a multi-server engine while it is healthy and
    # not much busier than the others, so its prefix cache stays warm (a session id is the natural
    # key). Never sent on the wire.
    affinity: str | None = None


@dataclass
class RawReply:
    """What came back from a backend before any parsing."""

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    # Part of completion_tokens spent reasoning, where the server says (usage.completion_tokens_details).
    reasoning_tokens: int = 0
    finish_reason: str | None = None
    server: str | None = None  # base URL that answered, on engines with several servers
    # What the reply carried besides its words, as the server returned it (`REASONING_FIELDS`): reasoning text,
    # thinking blocks, reasoning items. Empty when the server sent none.
    reasoning: dict[str, Any] = field(default_factory=dict)
    # Per generated token, where the request asked for them and the server sent them: OpenAI's
    # `choices[0].logprobs.content` entries ({"token", "logprob", "top_logprobs": [{"token", "logprob"}]}).
    logprobs: list[dict[str, Any]] | None = None
    # Where the backend read the tool calls out of the text itself (`tool_parser: template`): what was wrong with a
    # call block that did not parse ('' when none was wrong). The client re-asks as for any unusable call.
    tool_call_error: str = ""


# The reply fields that hold a model's reasoning on OpenAI-compatible chat servers, in the shape a caller sends
# back on that model's own earlier turn: `reasoning_content` (vLLM, SGLang, llama.cpp, DeepSeek; vLLM's newer
# `reasoning` is read into it), `thinking_blocks` (Claude through a LiteLLM proxy), `reasoning_items` (OpenAI's
# Responses bridge in LiteLLM), `reasoning_details` (OpenRouter).
REASONING_FIELDS: tuple[str, ...] = ("reasoning_content", "thinking_blocks", "reasoning_items", "reasoning_details")


@dataclass
class Completion:
    """A plain chat reply."""

    content: str
    message: dict[str, Any]
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    finish_reason: str | None = None
    reasoning: dict[str, Any] = field(default_factory=dict)  # RawReply.reasoning


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class ToolCallResult:
    """The assistant message (always OpenAI `tool_calls` shape, whichever engine) and parsed calls."""

    message: dict[str, Any]
    calls: list[ToolCall]
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    # `RoleClient.reply_or_call` only: the words when the model answered instead of calling (calls empty).
    content: str | None = None
    finish_reason: str | None = None


_SCHEMAS: "weakref.WeakKeyDictionary[type[BaseModel], dict[str, Any]]" = weakref.WeakKeyDictionary()
_SCHEMAS_LOCK = threading.Lock()


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """`model.model_json_schema()`, built once per model class: pydantic rebuilds it from scratch on every call,
    which was 6-11% of the CPU of a simulated or judged request. Shared by every request of that
    model, so callers must not change it (build a new dict around it instead). Keyed weakly: a model class made
    for one row (a narrowed schema) is dropped with it."""
    schema = _SCHEMAS.get(model)
    if schema is None:
        schema = model.model_json_schema()
        with _SCHEMAS_LOCK:
            schema = _SCHEMAS.setdefault(model, schema)
    return schema


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call; its arguments are a pydantic model (the schema comes from it)."""

    name: str
    description: str
    parameters: type[BaseModel]

    @classmethod
    def from_model(cls, name: str, description: str, parameters: type[BaseModel]) -> "ToolSpec":
        return cls(name=name, description=description, parameters=parameters)

    def schema(self) -> dict[str, Any]:
        """The arguments' JSON schema (shared: see `model_schema`)."""
        return model_schema(self.parameters)

    def openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.schema()},
        }


# Slots: one is made per call (folded into the ledger's totals at once, not kept).
@dataclass(slots=True)
class CallRecord:
    role: str
    engine: str
    model: str
    kind: str
    ok: bool
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    latency_s: float
    attempts: int = 1
    server: str | None = None  # base URL that answered the call's last attempt, when known
    reasoning_tokens: int = 0  # included in completion_tokens


# What the ledger counts per (role, engine, model, kind, server); `latency_s` is summed unrounded and rounded
# when shown.
_COUNTERS = (
    "calls",
    "failed",
    "attempts",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "latency_s",
)
_KEY = ("role", "engine", "model", "kind", "server")
_SERVER_COUNTERS = (
    "calls",
    "failed",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "latency_s",
)


def _summed(rows: Iterable[dict[str, Any]], counters: tuple[str, ...] = _COUNTERS) -> dict[str, Any]:
    out: dict[str, Any] = dict.fromkeys(counters, 0)
    out["latency_s"] = 0.0
    for r in rows:
        for c in counters:
            out[c] += r[c]
    out["latency_s"] = round(out["latency_s"], 3)
    return out


class UsageLedger:
    """Token and latency accounting, summarised per role (and, inside each role, per server under `servers`).
    Each call is folded into running totals as it is added, keyed by role, engine, model, kind and server, so
    the ledger's size does not grow with the calls of a run (it used to keep every call, ~200 bytes each).
    Safe to use from threads. `completion_tokens` include the reasoning tokens, which are also counted apart
    (`reasoning_tokens`); `cached_tokens` are the part of `prompt_tokens` the server read from its prompt
    cache. Both stay 0 where the server does not report them."""

    def __init__(self) -> None:
        self._totals: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self.started = time.monotonic()

    def add(self, record: CallRecord) -> None:
        self._fold(
            (record.role, record.engine, record.model, record.kind, record.server),
            {
                "calls": 1,
                "failed": 0 if record.ok else 1,
                "attempts": record.attempts,
                "prompt_tokens": record.prompt_tokens,
                "completion_tokens": record.completion_tokens,
                "cached_tokens": record.cached_tokens,
                "reasoning_tokens": record.reasoning_tokens,
                "latency_s": record.latency_s,
            },
        )

    def absorb(self, rows: Iterable[dict[str, Any]]) -> None:
        """Add another ledger's `rows()` (a worker's calls, on the driver)."""
        for r in rows:
            self._fold(tuple(r[k] for k in _KEY), r)

    def _fold(self, key: tuple[Any, ...], counts: dict[str, Any]) -> None:
        with self._lock:
            t = self._totals.pop(key, None) or dict.fromkeys(_COUNTERS, 0)
            for c in _COUNTERS:
                t[c] += counts[c]
            self._totals[key] = t  # re-inserted last: a role's engine and model are those of its latest call

    def rows(self) -> list[dict[str, Any]]:
        """The totals as plain rows (key fields and counters), oldest key first: what a Ray worker sends back."""
        with self._lock:
            return [{**dict(zip(_KEY, k)), **t} for k, t in self._totals.items()]

    def totals(self, role: str | None = None, kind: str | None = None) -> dict[str, Any]:
        """Counters summed over every call, or over one role's and/or one kind's."""
        return _summed(
            r for r in self.rows() if (role is None or r["role"] == role) and (kind is None or r["kind"] == kind)
        )

    def summary(self) -> dict[str, dict[str, Any]]:
        rows = self.rows()
        out: dict[str, dict[str, Any]] = {}
        for role in dict.fromkeys(r["role"] for r in rows):
            mine = [r for r in rows if r["role"] == role]
            s = _summed(mine)
            s["engine"], s["model"] = mine[-1]["engine"], mine[-1]["model"]
            s["servers"] = self._servers(mine)
            out[role] = s
        return out

    def by_server(self) -> dict[str, dict[str, Any]]:
        """Usage per server across roles (calls without a known server are left out)."""
        return self._servers(self.rows())

    @staticmethod
    def _servers(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        servers = dict.fromkeys(r["server"] for r in rows if r["server"] is not None)
        return {u: _summed((r for r in rows if r["server"] == u), _SERVER_COUNTERS) for u in servers}

    def to_json(self) -> str:
        return json.dumps(self.summary(), indent=2, sort_keys=True)
