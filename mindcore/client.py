"""`RoleClient`: what a stage holds to talk to its LLM. It adds to a backend the things every stage
needs and none should re-implement: per-role sampling, structured output validated by pydantic and
re-asked with the error, tool calls that look the same on every engine, and token accounting.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import time
from typing import Any, Callable, TypeVar

from pydantic import BaseModel, ValidationError

from mindsimkit.mindcore.backends import Backend
from mindsimkit.mindcore.config import REQUEST_OPTION_DEFAULTS, RoleSpec
from mindsimkit.mindcore.errors import StructuredOutputError
from mindsimkit.mindcore.types import (
    CallRecord,
    ChatRequest,
    Completion,
    RawReply,
    ToolCall,
    ToolCallResult,
    ToolSpec,
    UsageLedger,
    model_schema,
)

M = TypeVar("M", bound=BaseModel)
V = TypeVar("V")  # what a re-asked reply parses into

# Seed step between repeated trials of one arc (`RoleClient.for_trial`): larger than any re-ask count.
TRIAL_SEED_STRIDE = 1000

_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.MULTILINE)


class RoleClient:
    """One role bound to one backend with that role's model and sampling settings."""

    def __init__(
        self, role: str, backend: Backend, spec: RoleSpec, model: str, ledger: UsageLedger, affinity: str | None = None
    ):
        self.role = role
        self.backend = backend
        self.spec = spec
        self.model = model
        self.ledger = ledger
        self.affinity = affinity

    def with_affinity(self, key: str) -> "RoleClient":
        """The same role whose every request carries `key` (e.g. a session id): a backend with several
        servers keeps those requests on one server, so its prefix cache serves the growing conversation."""
        return RoleClient(self.role, self.backend, self.spec, self.model, self.ledger, affinity=key)

    def for_trial(self, trial: int) -> "RoleClient":
        """The same role for repeated trial `trial` (0 = the first, this client itself): its seed moved on by
        `trial * TRIAL_SEED_STRIDE`, so each trial samples differently yet reproducibly, and no trial's seed
        meets another's re-ask seeds (`reseeded` adds the attempt number, far below the stride). A role
        without a seed samples freshly on every call already and is returned as it is."""
        if trial == 0 or self.spec.seed is None:
            return self
        spec = self.spec.model_copy(update={"seed": self.spec.seed + trial * TRIAL_SEED_STRIDE})
        return RoleClient(self.role, self.backend, spec, self.model, self.ledger, affinity=self.affinity)

    @property
    def engine_name(self) -> str:
        return self.backend.name

    def describe(self) -> dict[str, Any]:
        spec = self.spec
        return {
            "role": self.role,
            "engine": self.backend.name,
            "model": self.model,
            "temperature": spec.temperature,
            "top_p": spec.top_p,
            "max_tokens": spec.max_tokens,
            "seed": spec.seed,
            **{k: v for k in ("frequency_penalty", "presence_penalty", "stop") if (v := getattr(spec, k)) is not None},
            # Request options only where set, so provenance of runs without them reads as before.
            **{
                k: v
                for k, v in spec.model_dump(include=set(REQUEST_OPTION_DEFAULTS)).items()
                if v != REQUEST_OPTION_DEFAULTS[k]
            },
            # Named only when it is not the historical max_tokens (rows of older runs keep their shape).
            **({"token_field": field} if (field := self._token_field()) not in (None, "max_tokens") else {}),
        }

    def _token_field(self) -> str | None:
        """The field this role's output budget goes out in, where the backend says (remote engines)."""
        pick = getattr(self.backend, "token_field", None)
        return pick(self.build_request([])) if pick is not None else None

    # -- plain chat -------------------------------------------------------------------------------
    async def chat(self, messages: list[dict[str, Any]], **sampling: Any) -> Completion:
        req = self.build_request(messages, **sampling)
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
            reasoning=raw.reasoning,
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
        obj, _ = await self.structured_reply(
            messages, output, max_attempts=max_attempts, schema_name=schema_name, **sampling
        )
        return obj

    async def structured_reply(
        self,
        messages: list[dict[str, Any]],
        output: type[M],
        *,
        max_attempts: int | None = None,
        schema_name: str | None = None,
        **sampling: Any,
    ) -> tuple[M, RawReply]:
        """`structured`, with the reply it was parsed from: its text and, where the request asked for them
        (`top_logprobs=N`), the token log probabilities (`RawReply.logprobs`); usage sums every attempt."""
        schema = model_schema(output)
        name = schema_name or output.__name__
        obj, totals = await self._ask_json(
            "structured", messages, schema, name, lambda text: output.model_validate_json(text), max_attempts, sampling
        )
        return obj, totals

    async def _ask_json(
        self,
        kind: str,
        messages: list[dict[str, Any]],
        schema: dict[str, Any],
        name: str,
        parse: Callable[[str], V],
        max_attempts: int | None,
        sampling: dict[str, Any],
    ) -> tuple[V, RawReply]:
        def feedback(raw: RawReply, error: str) -> list[dict[str, Any]]:
            return [
                {"role": "assistant", "content": raw.content or ""},
                {
                    "role": "user",
                    "content": f"That reply could not be used: {error}. "
                    "Answer again with JSON only, matching the schema exactly.",
                },
            ]

        return await self._with_reasks(
            kind,
            name,
            messages,
            lambda raw: parse(_strip_fences(raw.content or "")),
            feedback,
            max_attempts,
            dict(sampling, response_schema=schema, schema_name=name),
        )

    async def _with_reasks(
        self,
        kind: str,
        what: str,
        messages: list[dict[str, Any]],
        parse: Callable[[RawReply], V],
        feedback: Callable[[RawReply, str], list[dict[str, Any]]],
        max_attempts: int | None,
        request_kw: dict[str, Any],
    ) -> tuple[V, RawReply]:
        """The one bounded re-ask loop: send, parse, and on a parse error append `feedback` to the
        original messages and ask again. Usage sums every attempt; the ledger gets one record."""
        attempts = max_attempts or self.spec.max_attempts
        convo = list(messages)
        t0 = time.monotonic()
        totals = RawReply(content=None)
        last_error = ""
        for attempt in range(1, attempts + 1):
            try:
                raw = await self.backend.complete(self.build_request(convo, **self.reseeded(request_kw, attempt - 1)))
            except Exception:
                self._record(kind, False, totals, time.monotonic() - t0, attempt)
                raise
            totals.prompt_tokens += raw.prompt_tokens
            totals.completion_tokens += raw.completion_tokens
            totals.cached_tokens += raw.cached_tokens
            totals.reasoning_tokens += raw.reasoning_tokens
            totals.content = raw.content
            totals.server = raw.server
            totals.logprobs = raw.logprobs  # the accepted answer's, like its text
            try:
                value = parse(raw)
            except (ValidationError, ValueError) as exc:
                last_error = _brief_error(exc)
                convo = [*messages, *feedback(raw, last_error)]
                continue
            self._record(kind, True, totals, time.monotonic() - t0, attempt)
            return value, totals
        self._record(kind, False, totals, time.monotonic() - t0, attempts)
        raise StructuredOutputError(
            f"role '{self.role}' ({self.backend.name}/{self.model}): no valid {what} after "
            f"{attempts} attempts; last error: {last_error}",
            attempts=attempts,
            last_error=last_error,
            raw=totals.content,
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
        t0 = time.monotonic()
        if self.backend.native_tools:
            calls, totals = await self._with_reasks(
                "tool_call",
                "tool call",
                messages,
                lambda raw: _native_calls(raw, by_name, allow_none),
                lambda _raw, error: [
                    {"role": "user", "content": f"That tool call could not be used: {error}. Call the tool again."}
                ],
                max_attempts,
                dict(sampling, tools=[t.openai() for t in tools], tool_choice="auto" if allow_none else "required"),
            )
        else:

            def parse(text: str) -> list[ToolCall]:
                data = json.loads(text)
                if not isinstance(data, dict) or "name" not in data:
                    raise ValueError("expected an object with 'name' and 'arguments'")
                if data["name"] == "none" and allow_none:
                    return []
                return [_validated_call(by_name, data["name"], data.get("arguments") or {}, "")]

            calls, totals = await self._ask_json(
                "tool_call",
                messages,
                tool_choice_schema(tools, allow_none),
                "tool_choice",
                parse,
                max_attempts,
                sampling,
            )
        for c in calls:
            c.id = c.id or _call_id(messages, c)
        return ToolCallResult(
            message=_assistant_tool_message(calls),
            calls=calls,
            prompt_tokens=totals.prompt_tokens,
            completion_tokens=totals.completion_tokens,
            latency_s=time.monotonic() - t0,
        )

    @property
    def native_tools(self) -> bool:
        """Whether this role's engine calls tools natively (else tool calls go through a JSON schema)."""
        return bool(getattr(self.backend, "native_tools", False))

    @property
    def schema_alternatives(self) -> bool:
        """Whether this role's engine holds a structured answer to one branch of a root `anyOf` schema (a grammar
        engine: `backends.SCHEMA_ALTERNATIVE_KINDS`); elsewhere such a rule is left to validation and re-asks."""
        return bool(getattr(self.backend, "schema_alternatives", False))

    async def reply_or_call(
        self, messages: list[dict[str, Any]], tools: list[ToolSpec], **sampling: Any
    ) -> ToolCallResult:
        """One request offering `tools` beside a plain reply (`tool_choice: auto`): the model calls one of them
        (`calls`, and `message` in OpenAI `tool_calls` shape) or answers in words (`content`, no calls). A call
        that does not parse is re-asked like any tool call. Native tool calling only: through a JSON schema a reply
        is one shape or the other, so callers check `native_tools` and ask the two apart there."""
        if not self.native_tools:
            raise ValueError(
                f"role '{self.role}': engine '{self.backend.name}' has no native tool calls; "
                "ask for the call and the words in separate requests"
            )
        by_name = {t.name: t for t in tools}
        t0 = time.monotonic()
        (calls, raw), totals = await self._with_reasks(
            "tool_call",
            "tool call or reply",
            messages,
            lambda raw: (_native_calls(raw, by_name, True), raw),
            lambda _raw, error: [
                {
                    "role": "user",
                    "content": f"That tool call could not be used: {error}. Call the tool again, or answer in words.",
                }
            ],
            None,
            dict(sampling, tools=[t.openai() for t in tools], tool_choice="auto"),
        )
        for c in calls:
            c.id = c.id or _call_id(messages, c)
        content = None if calls else (raw.content or "")
        return ToolCallResult(
            message=_assistant_tool_message(calls) if calls else {"role": "assistant", "content": content},
            calls=calls,
            prompt_tokens=totals.prompt_tokens,
            completion_tokens=totals.completion_tokens,
            latency_s=time.monotonic() - t0,
            content=content,
            finish_reason=raw.finish_reason,
        )

    # -- helpers ----------------------------------------------------------------------------------
    def reseeded(self, sampling: dict[str, Any], attempt: int) -> dict[str, Any]:
        """`sampling` for try number `attempt` (0 = the first) of the same question. With a fixed seed, a re-ask
        whose messages come out as the last one did (the same bad answer, the same note) draws the same answer
        again — a 135M patient echoed a note six times running that way — so each re-ask moves the seed on by
        its attempt number: still reproducible, and the first try keeps the role's seed."""
        seed = sampling.get("seed", self.spec.seed)
        if attempt == 0 or seed is None:
            return sampling
        return {**sampling, "seed": seed + attempt}

    def build_request(self, messages: list[dict[str, Any]], **kw: Any) -> ChatRequest:
        spec = self.spec
        wire = messages if self.backend.native_tools else _wire_history(messages)
        budget = kw.pop("max_tokens", spec.max_tokens)
        # A stage's budget bounds the answer; a reasoning model spends its thinking from the same field,
        # so the role's reasoning_budget goes on top (an uncapped call stays uncapped).
        if budget is not None and spec.reasoning_budget:
            budget += spec.reasoning_budget
        return ChatRequest(
            role=self.role,
            model=self.model,
            messages=wire,
            temperature=kw.pop("temperature", spec.temperature),
            top_p=kw.pop("top_p", spec.top_p),
            max_tokens=budget,
            seed=kw.pop("seed", spec.seed),
            frequency_penalty=kw.pop("frequency_penalty", spec.frequency_penalty),
            presence_penalty=kw.pop("presence_penalty", spec.presence_penalty),
            # A stop string inside JSON would cut the object short: only plain replies get them.
            stop=kw.pop("stop", None if kw.get("response_schema") is not None or kw.get("tools") else spec.stop),
            affinity=kw.pop("affinity", self.affinity),
            **spec.request_options(),
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
                reasoning_tokens=raw.reasoning_tokens,
                latency_s=latency,
                attempts=attempts,
                server=raw.server,
            )
        )


def _validated_call(by_name: dict[str, ToolSpec], name: str, arguments: Any, call_id: str) -> ToolCall:
    tool = by_name.get(name)
    if tool is None:
        raise ValueError(f"unknown tool '{name}' (allowed: {', '.join(by_name)})")
    args = (
        tool.parameters.model_validate_json(arguments or "{}")
        if isinstance(arguments, str)
        else tool.parameters.model_validate(arguments)
    )
    return ToolCall(id=call_id, name=tool.name, arguments=args.model_dump(mode="json"))


def _native_calls(raw: RawReply, by_name: dict[str, ToolSpec], allow_none: bool) -> list[ToolCall]:
    if raw.tool_call_error:
        raise ValueError(raw.tool_call_error)
    # One call per step keeps the patient protocol simple; extra parallel calls are ignored.
    calls = [
        _validated_call(by_name, tc["function"]["name"], tc["function"].get("arguments"), tc.get("id") or "")
        for tc in raw.tool_calls[:1]
    ]
    if not calls and not allow_none:
        raise ValueError("no tool was called; a tool call is required here")
    return calls


def _strip_fences(text: str) -> str:
    return _FENCE.sub("", text.strip()).strip()


def _brief_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        from mindsimkit.mindcore.recipe import format_validation_error

        return format_validation_error(exc, limit=5, sep="; ", top="(root)", plain=True)
    return str(exc)[:300]


def tool_choice_schema(tools: list[ToolSpec], allow_none: bool) -> dict[str, Any]:
    """One JSON schema for "call one of `tools`" on engines without native tool calls: {name, arguments}."""
    return _tool_choice_schema(tuple(tools), allow_none)


@functools.lru_cache(maxsize=512)
def _tool_choice_schema(tools: tuple[ToolSpec, ...], allow_none: bool) -> dict[str, Any]:
    # Built once per tool set (a patient's tools are the same every turn); shared like `model_schema`'s.
    options = []
    defs: dict[str, Any] = {}
    for t in tools:
        args = t.schema()
        if "$defs" in args:
            # Hoisted so references resolve from the root of the combined schema (a copy: the tool's own
            # schema is shared).
            defs.update(args["$defs"])
            args = {k: v for k, v in args.items() if k != "$defs"}
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": t.name}, "arguments": args},
                "required": ["name", "arguments"],
            }
        )
    if allow_none:
        options.append({"type": "object", "properties": {"name": {"const": "none"}}, "required": ["name"]})
    schema: dict[str, Any] = options[0] if len(options) == 1 else {"anyOf": options}
    if defs:
        schema = {**schema, "$defs": defs}
    return schema


def _call_id(messages: list[dict[str, Any]], call: ToolCall) -> str:
    # Content-derived ids keep reruns byte-identical, which checkpoint ids rely on.
    h = hashlib.sha1(json.dumps([len(messages), call.name, call.arguments], sort_keys=True).encode()).hexdigest()[:12]
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
