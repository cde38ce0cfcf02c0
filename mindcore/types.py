"""Value types shared by the engine layer: requests, replies, tool specs and token accounting."""

from __future__ import annotations

import json
import threading
import time
import weakref
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

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


@dataclass
class Completion:
    """A plain chat reply."""

    content: str
    message: dict[str, Any]
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    finish_reason: str | None = None


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


_SCHEMAS: "weakref.WeakKeyDictionary[type[BaseModel], dict[str, Any]]" = weakref.WeakKeyDictionary()
_SCHEMAS_LOCK = threading.Lock()


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """`model.model_json_schema()`, built once per model class: pydantic rebuilds it from scratch on every call,
    which was 6-11% of the CPU of a simulated or judged request (issue 35). Shared by every request of that
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


# Slots: the ledger keeps one per call for the whole run (a 1,000-patient simulation makes tens of thousands).
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


def _server_totals() -> dict[str, Any]:
    return {"calls": 0, "failed": 0, "prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0,
            "reasoning_tokens": 0, "latency_s": 0.0}


def _add_to_server(s: dict[str, Any], r: CallRecord) -> None:
    s["calls"] += 1
    s["failed"] += 0 if r.ok else 1
    s["prompt_tokens"] += r.prompt_tokens
    s["completion_tokens"] += r.completion_tokens
    s["cached_tokens"] += r.cached_tokens
    s["reasoning_tokens"] += r.reasoning_tokens
    s["latency_s"] = round(s["latency_s"] + r.latency_s, 3)


class UsageLedger:
    """Per-call token and latency accounting, summarised per role (and, inside each role, per server
    under `servers`). Safe to use from threads. `completion_tokens` include the reasoning tokens, which
    are also counted apart (`reasoning_tokens`); `cached_tokens` are the part of `prompt_tokens` the
    server read from its prompt cache. Both stay 0 where the server does not report them."""

    def __init__(self) -> None:
        self._records: list[CallRecord] = []
        self._lock = threading.Lock()
        self.started = time.monotonic()

    def add(self, record: CallRecord) -> None:
        with self._lock:
            self._records.append(record)

    @property
    def records(self) -> list[CallRecord]:
        with self._lock:
            return list(self._records)

    def summary(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = defaultdict(
            lambda: {
                "calls": 0,
                "failed": 0,
                "attempts": 0,
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "cached_tokens": 0,
                "reasoning_tokens": 0,
                "latency_s": 0.0,
            }
        )
        for r in self.records:
            s = out[r.role]
            s["engine"], s["model"] = r.engine, r.model
            s["calls"] += 1
            s["failed"] += 0 if r.ok else 1
            s["attempts"] += r.attempts
            s["prompt_tokens"] += r.prompt_tokens
            s["completion_tokens"] += r.completion_tokens
            s["cached_tokens"] += r.cached_tokens
            s["reasoning_tokens"] += r.reasoning_tokens
            s["latency_s"] = round(s["latency_s"] + r.latency_s, 3)
            servers = s.setdefault("servers", {})
            if r.server is not None:
                _add_to_server(servers.setdefault(r.server, _server_totals()), r)
        return dict(out)

    def by_server(self) -> dict[str, dict[str, Any]]:
        """Usage per server across roles (records without a server are left out)."""
        out: dict[str, dict[str, Any]] = {}
        for r in self.records:
            if r.server is not None:
                _add_to_server(out.setdefault(r.server, _server_totals()), r)
        return out

    def to_json(self) -> str:
        return json.dumps(self.summary(), indent=2, sort_keys=True)
