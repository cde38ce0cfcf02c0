"""`Engines`: builds one backend per engine named in a recipe, starts what must be started (the
embedded server, a launched `vllm serve`), and hands each role its `RoleClient`. The one place in the
toolkit where LLM connections are made."""

from __future__ import annotations

import asyncio
from contextlib import ExitStack
from typing import Any

from mindsimkit.mindcore.backends import Backend, OpenAIBackend
from mindsimkit.mindcore.client import RoleClient
from mindsimkit.mindcore.config import (
    ROLES,
    EmbeddedEngine,
    EnginesConfig,
    OpenAIEngine,
    RoleSpec,
    VLLMEngine,
    role_chain,
)
from mindsimkit.mindcore.embedded import embedded_server
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.prompts import snapshot
from mindsimkit.mindcore.types import ToolSpec, UsageLedger
from mindsimkit.mindcore.vllm_serve import VLLMProcess

__all__ = ["Engines", "RoleClient", "ToolSpec"]


class Engines:
    """Owns the engines of one run. Enter it (`with` or `async with`) before asking for roles."""

    def __init__(self, config: EnginesConfig, *, backends: dict[str, Backend] | None = None):
        self.config = config
        self.ledger = UsageLedger()
        self._backends: dict[str, Backend] = dict(backends or {})
        self._stack: ExitStack | None = None

    # -- construction -----------------------------------------------------------------------------
    @classmethod
    def from_config(cls, config: EnginesConfig) -> "Engines":
        return cls(config)

    @classmethod
    def with_backend(cls, backend: Backend, roles: dict[str, RoleSpec] | None = None) -> "Engines":
        """All roles on one given backend (tests use this with `FakeBackend`)."""
        name = backend.name
        cfg = EnginesConfig.model_construct(
            engines={name: OpenAIEngine(base_url="http://fake.invalid/v1", model=name)},
            roles=roles or {"default": RoleSpec(engine=name)},
        )
        return cls(cfg, backends={name: backend})

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> "Engines":
        if self._stack is not None:
            return self
        stack = ExitStack()
        try:
            for name, spec in self.config.engines.items():
                if name in self._backends:
                    continue
                self._backends[name] = self._start_engine(stack, name, spec)
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def _start_engine(self, stack: ExitStack, name: str, spec: Any) -> Backend:
        pool: dict[str, Any] = {}
        if isinstance(spec, EmbeddedEngine):
            server = stack.enter_context(embedded_server(spec))
            urls, model, limit, kind = [server.base_url], server.model_name, spec.parallel, "embedded"
            pool["attached"], pool["threads"] = server.attached, server.threads
        elif isinstance(spec, VLLMEngine):
            if spec.launch:
                stack.callback(VLLMProcess(spec).start().stop)
            urls, model, limit, kind = spec.urls, spec.model, spec.max_concurrency, "vllm"
        elif isinstance(spec, OpenAIEngine):
            urls, model, limit, kind = spec.urls, spec.model, spec.max_concurrency, "openai"
        else:
            raise ConfigError(f"engines.{name}: unsupported engine kind {type(spec).__name__}")
        if isinstance(spec, (VLLMEngine, OpenAIEngine)):
            pool = {
                "failure_limit": spec.failure_limit,
                "cooldown_s": spec.cooldown_s,
                "connect_timeout_s": spec.connect_timeout_s,
                "max_retry_after_s": spec.max_retry_after_s,
            }
        return OpenAIBackend(
            name,
            base_urls=urls,
            default_model=model,
            api_key_env=getattr(spec, "api_key_env", None),
            # Per server: N servers of one engine take up to N x max_concurrency requests at once.
            max_concurrency=limit,
            timeout_s=spec.timeout_s,
            native_tools=spec.native_tools,
            # vLLM ignores the old guided_* fields; its structured_outputs field is the one that works.
            structured_mode="vllm" if kind == "vllm" else getattr(spec, "structured_mode", "json_schema"),
            strict_schema=getattr(spec, "strict_schema", False),
            kind=kind,
            # The embedded llama.cpp reads max_tokens; remote engines say (or leave it to `auto`).
            token_param=getattr(spec, "token_param", "max_tokens"),
            serial_prefix_chars=getattr(spec, "serial_prefix_chars", 0),
            **pool,
        )

    def close(self) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()

    def __enter__(self) -> "Engines":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> "Engines":
        return self.start()

    async def __aexit__(self, *exc: Any) -> None:
        self.close()

    def run(self, coro: Any) -> Any:
        """`asyncio.run(coro)`, closing this loop's HTTP clients before the loop goes away."""

        async def wrapper() -> Any:
            try:
                return await coro
            finally:
                for backend in self._backends.values():
                    closer = getattr(backend, "aclose_loop", None)
                    if closer is not None:
                        await closer()

        return asyncio.run(wrapper())

    # -- roles ------------------------------------------------------------------------------------
    def role(self, role: str) -> RoleClient:
        """The client for `role`. An unbound role takes the binding of the first key of `role_chain` the recipe
        has: `counsellor:NAME` falls back to `counsellor`, `first_scenario_writer` to `scenario_writer`, all to
        `default`."""
        spec = self.role_spec(role)
        if not self._backends:
            raise RuntimeError("Engines not started: use `with Engines.from_config(cfg) as engines:`")
        backend = self._backends.get(spec.engine)
        if backend is None:
            raise ConfigError(f"roles.{role}.engine: engine '{spec.engine}' is not defined")
        model = spec.model or getattr(backend, "default_model", None) or spec.engine
        return RoleClient(role, backend, spec, model, self.ledger)

    def role_spec(self, role: str) -> RoleSpec:
        roles = self.config.roles
        for key in role_chain(role):
            if key in roles:
                return roles[key]
        raise ConfigError(f"roles: no entry for '{role}' and no 'default' role to fall back to")

    def backend(self, name: str) -> Backend:
        return self._backends[name]

    def wire_spec(self, role: str) -> dict[str, Any]:
        """Picklable settings to rebuild this role's client in another process (distilabel workers)."""
        client = self.role(role)
        b = client.backend
        if not isinstance(b, OpenAIBackend):
            raise ConfigError(f"role '{role}' uses a backend that cannot be shared across processes")
        return {
            "role": role,
            "engine": b.name,
            "kind": b.kind,
            "base_url": b.base_url,
            # Every server of the engine, so a distilabel worker spreads its calls as the parent would.
            "base_urls": list(b.base_urls),
            "failure_limit": b.failure_limit,
            "cooldown_s": b.cooldown_s,
            "model": client.model,
            "api_key_env": b.api_key_env,
            "max_concurrency": b.max_concurrency,
            "timeout_s": b.timeout_s,
            "connect_timeout_s": b.connect_timeout_s,
            "max_retry_after_s": b.max_retry_after_s,
            "native_tools": b.native_tools,
            "structured_mode": b.structured_mode,
            "strict_schema": b.strict_schema,
            "token_param": b.token_param,
            "role_spec": client.spec.model_dump(),
            # The recipe's swapped prompts travel with the role: distilabel workers render them too.
            "prompt_overrides": snapshot(),
        }

    def describe(self) -> dict[str, Any]:
        """Engines and models per role, for provenance (never a key)."""
        roles = sorted({*self.config.roles} - {"default"} | set(ROLES))
        return {r: self.role(r).describe() for r in roles} if self._backends else {}
