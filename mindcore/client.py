"""`RoleClient`: what a stage holds to talk to its LLM. It adds to a backend the things every stage
needs and none should re-implement: per-role sampling, structured output validated by pydantic and
re-asked with the error, tool calls that look the same on every engine, and token accounting.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from mindcore.backends import Backend
from mindcore.config import RoleSpec
from mindcore.errors import StructuredOutputError
from mindcore.types import (
    CallRecord,
    ChatRequest,
    Completion,
    RawReply,
    ToolCall,
    ToolCallResult,
    ToolSpec,
    UsageLedger,
)

M = TypeVar("M", bound=BaseModel)

_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.MULTILINE)


class RoleClient:
    """One role bound to one backend with that role's model and sampling settings."""

    def __init__(self, role: str, backend: Backend, spec: RoleSpec, model: str, ledger: UsageLedger):
        self.role = role
        self.backend = backend
        self.spec = spec
        self.model = model
        self.ledger = ledger

    @property
    def engine_name(self) -> str:
        return self.backend.name

    def describe(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "engine": self.backend.name,
            "model": self.model,
            "temperature": self.spec.temperature,
            "top_p": self.spec.top_p,
            "max_tokens": self.spec.max_tokens,
            "seed": self.spec.seed,
        }

    # -- plain chat -------------------------------------------------------------------------------
    async def chat(self, messages: list[dict[str, Any]], **sampling: Any) -> Completion:
        req = self._request(messages, **sampling)
        t0 = time.monotonic()
        ok = False
        raw = RawReply(content=None)
        try:
            raw = await self.backend.complete(req)
            ok = True
        finally:
            self._record("chat", ok, raw, time.monotonic() - t0)
        content = raw.content or ""
        return Completion(
            content=content,
            message={"role": "assistant", "content": content},
            prompt_tokens=raw.prompt_tokens,
            completion_tokens=raw.completion_tokens,
            latency_s=time.monotonic() - t0,
            finish_reason=raw.finish_reason,
        )

    # -- structured output ------------------------------------------------------------------------
    async def structured(
        self,
        messages: list[dict[str, Any]],
        output: type[M],
        *,
        max_attempts: int | None = None,
        schema_name: str | None = None,
        **sampling: Any,
    ) -> M:
        """Ask for JSON fitting `output`; re-ask with the validation error until it fits or the
        attempts run out, then raise `StructuredOutputError` (recorded as a failed call)."""
        schema = output.model_json_schema()
        name = schema_name or output.__name__
        obj, _raw, _ = await self._ask_json(
            messages, schema, name, lambda text: output.model_validate_json(text), max_attempts, sampling
        )
        return obj

    async def _ask_json(self, messages, schema, name, parse, max_attempts, sampling):
        attempts = max_attempts or self.spec.max_attempts
        convo = list(messages)
        t0 = time.monotonic()
        totals = RawReply(content=None)
        last_error, raw_text = "", None
        for attempt in range(1, attempts + 1):
            req = self._request(convo, response_schema=schema, schema_name=name, **sampling)
            try:
                raw = await self.backend.complete(req)
            except Exception:
                self._record("structured", False, totals, time.monotonic() - t0, attempt)
                raise
            totals.prompt_tokens += raw.prompt_tokens
            totals.completion_tokens += raw.completion_tokens
            totals.cached_tokens += raw.cached_tokens
            raw_text = raw.content or ""
            try:
                value = parse(_strip_fences(raw_text))
                self._record("structured", True, totals, time.monotonic() - t0, attempt)
                return value, raw_text, totals
            except (ValidationError, ValueError) as exc:
                last_error = _brief_error(exc)
                convo = [
                    *messages,
                    {"role": "assistant", "content": raw_text},
                    {
                        "role": "user",
                        "content": (
                            "That reply could not be used: "
                            f"{last_error}. Answer again with JSON only, matching the schema exactly."
                        ),
                    },
                ]
        self._record("structured", False, totals, time.monotonic() - t0, attempts)
        raise StructuredOutputError(
            f"role '{self.role}' ({self.backend.name}/{self.model}): no valid {name} after "
            f"{attempts} attempts; last error: {last_error}",
            attempts=attempts,
            last_error=last_error,
            raw=raw_text,
        )

    # -- tool calls -------------------------------------------------------------------------------
    async def tool_call(
        self,
        messages: list[dict[str, Any]],
        tools: list[ToolSpec],
        *,
        allow_none: bool = False,
        max_attempts: int | None = None,
        **sampling: Any,
    ) -> ToolCallResult:
        """Get exactly one call to one of `tools` (or none, if `allow_none`). Engines without native
        tool calling get a JSON schema instead; either way the result is an OpenAI assistant message
        with `tool_calls`, so stored histories look the same whichever engine produced them."""
        by_name = {t.name: t for t in tools}
        if self.backend.native_tools:
            return await self._native_tool_call(messages, tools, by_name, allow_none, max_attempts, sampling)
        schema = _tool_choice_schema(tools, allow_none)

        def parse(text: str) -> ToolCall | None:
            data = json.loads(text)
            if not isinstance(data, dict) or "name" not in data:
                raise ValueError("expected an object with 'name' and 'arguments'")
            if data["name"] == "none" and allow_none:
                return None
            tool = by_name.get(data["name"])
            if tool is None:
                raise ValueError(f"unknown tool '{data['name']}' (allowed: {', '.join(by_name)})")
            args = tool.parameters.model_validate(data.get("arguments") or {})
            return ToolCall(id="", name=tool.name, arguments=args.model_dump(mode="json"))

        t0 = time.monotonic()
        call, _raw, totals = await self._ask_json(
            messages, schema, "tool_choice", parse, max_attempts, sampling
        )
        calls = [] if call is None else [call]
        for c in calls:
            c.id = _call_id(messages, c)
        return ToolCallResult(
            message=_assistant_tool_message(calls),
            calls=calls,
            prompt_tokens=totals.prompt_tokens,
            completion_tokens=totals.completion_tokens,
            latency_s=time.monotonic() - t0,
        )

    async def _native_tool_call(self, messages, tools, by_name, allow_none, max_attempts, sampling):
        attempts = max_attempts or self.spec.max_attempts
        convo = list(messages)
        t0 = time.monotonic()
        totals = RawReply(content=None)
        last_error = ""
        for attempt in range(1, attempts + 1):
            req = self._request(
                convo,
                tools=[t.openai() for t in tools],
                tool_choice="auto" if allow_none else "required",
                **sampling,
            )
            try:
                raw = await self.backend.complete(req)
            except Exception:
                self._record("tool_call", False, totals, time.monotonic() - t0, attempt)
                raise
            totals.prompt_tokens += raw.prompt_tokens
            totals.completion_tokens += raw.completion_tokens
            try:
                calls = []
                for tc in raw.tool_calls[:1]:  # one call per step keeps the protocol simple
                    fn = tc["function"]
                    tool = by_name.get(fn["name"])
                    if tool is None:
                        raise ValueError(f"unknown tool '{fn['name']}'")
                    args = tool.parameters.model_validate_json(fn.get("arguments") or "{}")
                    calls.append(ToolCall(id=tc.get("id") or "", name=tool.name, arguments=args.model_dump(mode="json")))
                if not calls and not allow_none:
                    raise ValueError("no tool was called; a tool call is required here")
                for c in calls:
                    c.id = c.id or _call_id(messages, c)
                self._record("tool_call", True, totals, time.monotonic() - t0, attempt)
                return ToolCallResult(
                    message=_assistant_tool_message(calls),
                    calls=calls,
                    prompt_tokens=totals.prompt_tokens,
                    completion_tokens=totals.completion_tokens,
                    latency_s=time.monotonic() - t0,
                )
            except (ValidationError, ValueError) as exc:
                last_error = _brief_error(exc)
                convo = [
                    *messages,
                    {"role": "user", "content": f"That tool call could not be used: {last_error}. Call the tool again."},
                ]
        self._record("tool_call", False, totals, time.monotonic() - t0, attempts)
        raise StructuredOutputError(
            f"role '{self.role}': no valid tool call after {attempts} attempts; last error: {last_error}",
            attempts=attempts,
            last_error=last_error,
            raw=None,
        )

    # -- helpers ----------------------------------------------------------------------------------
    def _request(self, messages: list[dict[str, Any]], **kw: Any) -> ChatRequest:
        spec = self.spec
        wire = messages if self.backend.native_tools else _wire_history(messages)
        return ChatRequest(
            role=self.role,
            model=self.model,
            messages=wire,
            temperature=kw.pop("temperature", spec.temperature),
            top_p=kw.pop("top_p", spec.top_p),
            max_tokens=kw.pop("max_tokens", spec.max_tokens),
            seed=kw.pop("seed", spec.seed),
            **kw,
        )

    def _record(self, kind: str, ok: bool, raw: RawReply, latency: float, attempts: int = 1) -> None:
        self.ledger.add(
            CallRecord(
                role=self.role,
                engine=self.backend.name,
                model=self.model,
                kind=kind,
                ok=ok,
                prompt_tokens=raw.prompt_tokens,
                completion_tokens=raw.completion_tokens,
                cached_tokens=raw.cached_tokens,
                latency_s=latency,
                attempts=attempts,
            )
        )


def _strip_fences(text: str) -> str:
    return _FENCE.sub("", text.strip()).strip()


def _brief_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        parts = []
        for err in exc.errors()[:5]:
            loc = ".".join(str(p) for p in err["loc"]) or "(root)"
            parts.append(f"{loc}: {err['msg']}")
        return "; ".join(parts)
    return str(exc)[:300]


def _tool_choice_schema(tools: list[ToolSpec], allow_none: bool) -> dict[str, Any]:
    options = []
    for t in tools:
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": t.name}, "arguments": t.schema()},
                "required": ["name", "arguments"],
            }
        )
    if allow_none:
        options.append({"type": "object", "properties": {"name": {"const": "none"}}, "required": ["name"]})
    schema: dict[str, Any] = options[0] if len(options) == 1 else {"anyOf": options}
    # Hoist nested $defs so references resolve from the root of the combined schema.
    defs: dict[str, Any] = {}
    for opt in options:
        args = opt["properties"].get("arguments")
        if isinstance(args, dict) and "$defs" in args:
            defs.update(args.pop("$defs"))
    if defs:
        schema = {**schema, "$defs": defs}
    return schema


def _call_id(messages: list[dict[str, Any]], call: ToolCall) -> str:
    # Content-derived ids keep reruns byte-identical, which checkpoint ids rely on.
    h = hashlib.sha1(
        json.dumps([len(messages), call.name, call.arguments], sort_keys=True).encode()
    ).hexdigest()[:12]
    return f"call_{h}"


def _assistant_tool_message(calls: list[ToolCall]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
            }
            for c in calls
        ],
    }


def _wire_history(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For engines without native tools: show earlier tool calls and results as plain text turns, so a
    chat template that knows nothing of tools still lets the model see what happened."""
    out = []
    for m in messages:
        if m.get("role") == "assistant" and m.get("tool_calls"):
            text = "\n".join(
                json.dumps({"name": tc["function"]["name"], "arguments": json.loads(tc["function"]["arguments"])})
                for tc in m["tool_calls"]
            )
            out.append({"role": "assistant", "content": text})
        elif m.get("role") == "tool":
            name = m.get("name") or "tool"
            out.append({"role": "user", "content": f"[{name} result] {m.get('content', '')}"})
        else:
            out.append(m)
    return out
