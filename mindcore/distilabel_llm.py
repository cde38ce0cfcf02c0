"""A distilabel `AsyncLLM` that drives the mindcore engine layer, so distilabel pipelines use the same
engines, retries, structured output and tool-call handling as everything else — not distilabel's
in-process vLLM class or its outlines path, both broken with current releases (NOTES §1).

distilabel runs steps in worker processes, so the LLM is rebuilt there from a picklable wire spec
(`Engines.wire_spec(role)`); the embedded server started by the parent process is reached over HTTP.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, Optional

from distilabel.models.llms.base import AsyncLLM
from pydantic import BaseModel, PrivateAttr, field_serializer

from mindsimkit.mindcore.backends import OpenAIBackend
from mindsimkit.mindcore.client import RoleClient
from mindsimkit.mindcore.config import RoleSpec
from mindsimkit.mindcore.console import plain_tracebacks
from mindsimkit.mindcore.errors import EngineError
from mindsimkit.mindcore.prompts import install_overrides
from mindsimkit.mindcore.redact import scrub_data, shown_url
from mindsimkit.mindcore.types import UsageLedger

# distilabel's import (above) installed rich tracebacks that print every local variable: undo it.
plain_tracebacks()


# Per generation, beside distilabel's own input/output token counts: what the engine layer's ledger
# records, so a parent process can account for work done in distilabel's workers, and the error ("" if
# none) so a failed row says why instead of pointing at a worker log.
STATISTICS = ("input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens", "attempts", "latency_s", "errors")


def _import_model(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


class MindcoreLLM(AsyncLLM):  # type: ignore[misc]  # distilabel ships no type information
    """`wire`: from `Engines.wire_spec(role)`. `output_model`: optional "package.module:Model" — when
    set, every generation is that model's JSON (validated, re-asked on error) or None if it failed.
    `output_model` may also name a function that builds the model, called once in the worker with
    `output_args` (a schema shaped by the recipe, e.g. shorter text limits)."""

    wire: dict[str, Any]
    output_model: Optional[str] = None
    output_args: Optional[dict[str, Any]] = None

    _backend: Any = PrivateAttr(default=None)
    _spec: Any = PrivateAttr(default=None)
    _output: Any = PrivateAttr(default=None)

    @field_serializer("wire")
    def _wire_as_stored(self, wire: dict[str, Any]) -> dict[str, Any]:
        # distilabel writes every step's dump to its cache folder (pipeline.yaml) and hashes it for the cache's
        # name: what goes there shows the servers as a table would, with no user part, key or token. The worker
        # still gets the real URLs: it receives the object itself (pickled), never this dump.
        shown = dict(scrub_data(wire))
        if wire.get("base_url"):
            shown["base_url"] = shown_url(wire["base_url"])
        if wire.get("base_urls"):
            shown["base_urls"] = [shown_url(u) for u in wire["base_urls"]]
        return shown

    def load(self) -> None:
        super().load()
        # distilabel's worker logs at INFO; one line per HTTP request drowns its progress output.
        for name in ("httpx", "httpx2", "openai"):
            logging.getLogger(name).setLevel(logging.WARNING)
        w = self.wire
        # The steps that use this LLM render their prompts in this process: give it the recipe's overrides.
        install_overrides(w.get("prompt_overrides") or {})
        backend = OpenAIBackend(
            w["engine"],
            base_url=None if w.get("base_urls") else w["base_url"],
            base_urls=w.get("base_urls"),
            server_caps=w.get("server_caps"),
            failure_limit=w.get("failure_limit", 3),
            cooldown_s=w.get("cooldown_s", 30.0),
            default_model=w["model"],
            api_key_env=w.get("api_key_env"),
            max_concurrency=w.get("max_concurrency", 4),
            timeout_s=w.get("timeout_s", 120.0),
            connect_timeout_s=w.get("connect_timeout_s", 10.0),
            max_retry_after_s=w.get("max_retry_after_s", 60.0),
            native_tools=w.get("native_tools", False),
            structured_mode=w.get("structured_mode", "json_schema"),
            strict_schema=w.get("strict_schema", False),
            kind=w.get("kind", "openai"),
            token_param=w.get("token_param", "auto"),
        )
        self._backend = backend
        self._spec = RoleSpec(**w["role_spec"])
        self._output = _import_model(self.output_model) if self.output_model else None
        if self._output is not None and not (isinstance(self._output, type) and issubclass(self._output, BaseModel)):
            self._output = self._output(**(self.output_args or {}))

    def _fresh_client(self) -> RoleClient:
        # A client (and ledger) per generation: a step runs many generations at once on this LLM, and
        # each needs its own usage, not a slice of a shared ledger that others append to meanwhile.
        return RoleClient(self.wire["role"], self._backend, self._spec, self.wire["model"], UsageLedger())

    @property
    def model_name(self) -> str:
        model: str = self.wire["model"]
        return model

    async def agenerate(  # type: ignore[override]
        self,
        input: Any,
        num_generations: int = 1,
        max_new_tokens: Optional[int] = None,
        temperature: Optional[float] = None,
        output: Optional[type[BaseModel]] = None,
    ) -> dict[str, Any]:
        """Generate `num_generations` replies to one chat-formatted input.

        Args:
            input: the chat messages.
            num_generations: replies to produce.
            max_new_tokens: overrides the role's max_tokens.
            temperature: overrides the role's temperature.
            output: overrides `output_model` for this input (a schema narrowed for one row, e.g. the writer's
                per-patient label lists); without it the LLM's own model applies.
        """
        model = output if output is not None else self._output
        sampling: dict[str, Any] = {}
        if max_new_tokens is not None:
            sampling["max_tokens"] = max_new_tokens
        if temperature is not None:
            sampling["temperature"] = temperature
        generations: list[Optional[str]] = []
        stats: dict[str, list[Any]] = {k: [] for k in STATISTICS}
        for _ in range(num_generations):
            client = self._fresh_client()
            error = ""
            try:
                if model is not None:
                    obj = await client.structured(list(input), model, **sampling)
                    generations.append(obj.model_dump_json())
                else:
                    generations.append((await client.chat(list(input), **sampling)).content)
            except EngineError as exc:
                # distilabel would blank the whole batch on an exception; fail only this row, visibly,
                # and keep the error (class first) for callers that count or retry failures.
                self._logger.warning(f"{self.wire['role']}: generation failed: {exc}")
                generations.append(None)
                error = f"{type(exc).__name__}: {exc}"
            used = client.ledger.totals()
            stats["input_tokens"].append(used["prompt_tokens"])
            stats["output_tokens"].append(used["completion_tokens"])
            stats["cached_tokens"].append(used["cached_tokens"])
            stats["reasoning_tokens"].append(used["reasoning_tokens"])
            stats["attempts"].append(used["attempts"])
            stats["latency_s"].append(used["latency_s"])
            stats["errors"].append(error)
        return {"generations": generations, "statistics": stats}
