"""An inspect_ai model as a backend of the toolkit's engine layer (`mindcore.backends.Backend`).

The session loop and the judges talk to role clients (`mindcore.client.RoleClient`); a client asks its backend
for one completion at a time. Behind this backend is whatever model inspect resolved — any of its providers — so
the counsellor under test, or a judge bound as an inspect model role, is driven by the very code `mindsim run`
uses: the counsellor's blank-reply re-asks and flags, the judge's structured answers re-asked on a schema error,
token accounting. Only what a request sets goes into inspect's `GenerateConfig`; everything else is the model's
own configuration (`--temperature`, `--max-tokens`, `-M …` on the command line).
"""

from __future__ import annotations

import copy
from typing import Any, Optional

from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageUser,
    GenerateConfig,
    Model,
    ModelOutput,
    ResponseSchema,
)
from inspect_ai.util import JSONSchema

from mindsimkit.mindcore.client import RoleClient
from mindsimkit.mindcore.config import RoleSpec
from mindsimkit.mindcore.errors import TransportError
from mindsimkit.mindcore.types import ChatRequest, RawReply

ENGINE = "inspect"
# inspect's stop reasons and the OpenAI finish reasons the toolkit reads (a reply cut by its budget is `length`).
FINISH = {
    "stop": "stop",
    "max_tokens": "length",
    "model_length": "length",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
}
_ROLES = {"system": ChatMessageSystem, "user": ChatMessageUser, "assistant": ChatMessageAssistant}


def chat_messages(messages: list[dict[str, Any]]) -> list[ChatMessage]:
    """OpenAI-shaped messages (system / user / assistant with text) as inspect's. The roles this backend serves
    (the counsellor, the judges) exchange plain text; anything else is a programming error, said so."""
    out: list[ChatMessage] = []
    for m in messages:
        kind = _ROLES.get(m.get("role", ""))
        if kind is None or not isinstance(m.get("content"), str):
            raise ValueError(f"an inspect model is asked plain text messages; got role {m.get('role')!r}")
        out.append(kind(content=m["content"]))
    return out


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with every local `$ref` replaced by its definition. inspect's `JSONSchema` keeps no `$defs`, and
    the judges' answers nest models (an issue inside a judgment); the toolkit's schemas are not recursive."""
    defs = schema.get("$defs", {})

    def walk(node: Any, depth: int = 0) -> Any:
        if depth > 32:
            raise ValueError("schema nests deeper than 32 levels (a recursive $ref?)")
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                target = copy.deepcopy(defs[ref.removeprefix("#/$defs/")])
                merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
                return walk(merged, depth + 1)
            return {k: walk(v, depth + 1) for k, v in node.items() if k != "$defs"}
        if isinstance(node, list):
            return [walk(v, depth + 1) for v in node]
        return node

    walked: dict[str, Any] = walk(schema)
    return walked


class KeptSchema(JSONSchema):
    """inspect's `JSONSchema` with the array bounds it has no field for. inspect-ai 0.3.285 drops `minItems` and
    `maxItems` when it reads a schema, and the judge's issue list is capped by `maxItems`: without the cap a small
    model behind a JSON grammar lists issues until its token budget cuts the answer off, and every judgment fails.
    The subclass rides through inspect's config unchanged (inspect copies it, never re-reads it), so the provider
    sends the schema the native path sends; the answer check enforces the cap as well, whatever the provider does."""

    minItems: int | None = None
    maxItems: int | None = None
    items: Optional["KeptSchema"] = None  # type: ignore[assignment]
    properties: dict[str, "KeptSchema"] | None = None  # type: ignore[assignment]
    additionalProperties: Optional["KeptSchema"] | bool | None = None  # type: ignore[assignment]
    anyOf: list["KeptSchema"] | None = None  # type: ignore[assignment]


def generate_config(req: ChatRequest) -> GenerateConfig:
    """What this request itself sets; unset fields leave the model's configuration as the user gave it."""
    fields: dict[str, Any] = {
        "temperature": req.temperature,
        "top_p": req.top_p,
        "max_tokens": req.max_tokens,
        "seed": req.seed,
        "stop_seqs": req.stop,
        "frequency_penalty": req.frequency_penalty,
        "presence_penalty": req.presence_penalty,
    }
    if req.response_schema is not None:
        fields["response_schema"] = ResponseSchema(
            name=req.schema_name, json_schema=KeptSchema.model_validate(inline_refs(req.response_schema))
        )
    return GenerateConfig(**{k: v for k, v in fields.items() if v is not None})


def raw_reply(output: ModelOutput) -> RawReply:
    usage = output.usage
    prompt = (usage.input_tokens + (usage.input_tokens_cache_read or 0)) if usage else 0
    return RawReply(
        content=output.completion,
        prompt_tokens=prompt,
        completion_tokens=usage.output_tokens if usage else 0,
        cached_tokens=(usage.input_tokens_cache_read or 0) if usage else 0,
        reasoning_tokens=(usage.reasoning_tokens or 0) if usage else 0,
        finish_reason=FINISH.get(output.stop_reason, output.stop_reason),
    )


class InspectBackend:
    """One inspect `Model` behind the engine layer's backend interface. inspect bounds its own connections
    (`--max-connections`), so this adds no limit of its own."""

    native_tools = False  # the roles it serves never call tools
    max_concurrency = 1_000_000

    def __init__(self, model: Model):
        self.model = model
        self.name = ENGINE
        self.default_model = str(model)

    async def complete(self, request: ChatRequest) -> RawReply:
        messages, config = chat_messages(request.messages), generate_config(request)
        try:
            output = await self.model.generate(messages, config=config)
        except Exception as exc:  # inspect has already retried what its provider says is worth retrying
            raise TransportError(f"inspect model {self.model}: {type(exc).__name__}: {exc}") from exc
        if output.error:
            raise TransportError(f"inspect model {self.model}: {output.error}")
        return raw_reply(output)

    def describe(self) -> dict[str, Any]:
        return {"engine": ENGINE, "kind": "inspect", "model": str(self.model)}


def inspect_role(role: str, model: Model, ledger: Any, max_tokens: int | None = None) -> RoleClient:
    """`role` (the counsellor under test, or a judge bound as an inspect model role) as a role client on `model`,
    sampling as the model's own configuration says; its `describe()` records that configuration. `max_tokens`:
    the bound when the model's configuration sets none (a judge's longest possible answer)."""
    c = model.config
    spec = RoleSpec(
        engine=ENGINE, temperature=c.temperature, top_p=c.top_p, max_tokens=c.max_tokens or max_tokens, seed=c.seed
    )
    return RoleClient(role, InspectBackend(model), spec, str(model), ledger)
