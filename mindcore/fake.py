"""A deterministic fake backend for unit tests: it answers from a function you give it and records
every request, so tests can assert on exactly what a stage sent."""

from __future__ import annotations

import json
from typing import Any, Callable

from mindsimkit.mindcore.types import ChatRequest, RawReply

Responder = Callable[[ChatRequest], "str | dict[str, Any] | RawReply"]


class FakeBackend:
    """`responder(request)` returns text, a dict (sent back as JSON text) or a full `RawReply`."""

    kind = "fake"

    def __init__(
        self,
        responder: Responder,
        *,
        name: str = "fake",
        native_tools: bool = False,
        max_concurrency: int = 4,
        schema_alternatives: bool = False,
    ) -> None:
        self.name = name
        self.default_model = name
        self.responder = responder
        self.native_tools = native_tools
        # As a grammar engine (`OpenAIBackend.schema_alternatives`): tests see which schema a role then sends.
        self.schema_alternatives = schema_alternatives
        self.max_concurrency = max_concurrency
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> RawReply:
        self.requests.append(request)
        out = self.responder(request)
        if isinstance(out, RawReply):
            return out
        text = out if isinstance(out, str) else json.dumps(out)
        words = sum(len(str(m.get("content") or "").split()) for m in request.messages)
        return RawReply(content=text, prompt_tokens=words, completion_tokens=len(text.split()), finish_reason="stop")

    def describe(self) -> dict[str, Any]:
        return {"engine": self.name, "kind": "fake", "model": self.name}


def scripted(*replies: "str | dict[str, Any]") -> Responder:
    """A responder that returns the given replies in order, then repeats the last one."""
    queue = list(replies)

    def respond(_req: ChatRequest) -> "str | dict[str, Any]":
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return respond
