"""Tokens per second an engine serves, measured once and recorded for `mindsim plan`'s wall times.

`mindsim engines check RECIPE --measure-throughput` (or `mindsim plan RECIPE --measure`) sends each engine two
short bursts at its own concurrency (at most `MAX_BURST` requests in flight): one of long prompts asking for a
single token (prefill: prompt tokens per second) and one of short prompts asking for `DECODE_TOKENS` tokens
(generation: completion tokens per second). Each is the tokens the server reported over the burst's wall time, so
it is what one server does with that many requests at once, the figure a plan divides work by.

The figures go to `throughput.json` in mindsim's cache folder (`$MINDSIM_CACHE`, else
`$XDG_CACHE_HOME/mindsim`, else `~/.cache/mindsim`), keyed by what the engine is — its kind, model and servers
(addresses without any user part) — so a recipe that names the same server under another engine name reads the
same measurement, and a changed model or server is measured afresh.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from mindsimkit.mindcore.budget import fill_text
from mindsimkit.mindcore.config import EmbeddedEngine, EnginesConfig, RoleSpec
from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.io import atomic_write_json
from mindsimkit.mindcore.redact import url_without_userinfo

FILE_NAME = "throughput.json"
MAX_BURST = 16
DECODE_TOKENS = 64
PREFILL_CHARS = 4000  # about 1,000 tokens of English


class Throughput(BaseModel):
    """One engine's measured rates, per server."""

    prompt_tokens_per_s: float = Field(gt=0)
    completion_tokens_per_s: float = Field(gt=0)
    concurrency: int = Field(ge=1, description="Requests in flight while measured")
    measured_at: str
    model: str


def cache_folder() -> Path:
    if os.environ.get("MINDSIM_CACHE"):
        return Path(os.environ["MINDSIM_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mindsim"


def record_path() -> Path:
    return cache_folder() / FILE_NAME


def engine_key(spec: Any) -> str:
    """What an engine is, for the record: kind, model and servers (no user part of any address)."""
    if isinstance(spec, EmbeddedEngine):
        return f"embedded|{spec.model_path or 'shipped'}|parallel={spec.parallel}"
    urls = ",".join(url_without_userinfo(u) for u in spec.urls)
    return f"{spec.kind}|{spec.model}|{urls}"


def servers_of(spec: Any) -> int:
    """Servers the engine's requests are spread over (an embedded engine is one)."""
    return 1 if isinstance(spec, EmbeddedEngine) else len(spec.urls)


def load_records(path: Path | None = None) -> dict[str, Throughput]:
    path = path or record_path()
    if not path.is_file():
        return {}
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {k: Throughput.model_validate(v) for k, v in (data.get("engines") or {}).items()}
    except (OSError, ValueError, AttributeError) as exc:
        raise InputError(
            f"{path}: not a throughput record ({type(exc).__name__}); delete it and measure again "
            "with `mindsim engines check RECIPE --measure-throughput`"
        ) from exc


def save_record(key: str, value: Throughput, path: Path | None = None) -> Path:
    path = path or record_path()
    records = load_records(path)
    records[key] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_json(path, {"engines": {k: v.model_dump() for k, v in sorted(records.items())}})


async def _burst(client: Any, messages: list[dict[str, Any]], n: int, max_tokens: int) -> tuple[int, int, float]:
    before = client.ledger.totals()
    t0 = time.monotonic()
    await asyncio.gather(*(client.chat(messages, max_tokens=max_tokens, seed=i) for i in range(n)))
    wall = time.monotonic() - t0
    after = client.ledger.totals()
    return (
        after["prompt_tokens"] - before["prompt_tokens"],
        after["completion_tokens"] - before["completion_tokens"],
        wall,
    )


def measure_engine(engines: Any, name: str) -> Throughput:
    """Measure one started engine (`engines`: a started `mindcore.engine.Engines`)."""
    from mindsimkit.mindcore.client import RoleClient

    backend = engines.backend(name)
    spec = engines.config.engines[name]
    n = max(1, min(int(getattr(backend, "max_concurrency", 1) or 1), MAX_BURST))
    model = getattr(backend, "default_model", None) or name
    client = RoleClient(f"{name}:__throughput", backend, RoleSpec(engine=name, temperature=0.0), model, engines.ledger)
    long = [{"role": "user", "content": fill_text(PREFILL_CHARS) + "\nReply with one word."}]
    short = [{"role": "user", "content": "Tell a short story about a lighthouse keeper."}]

    async def both() -> tuple[tuple[int, int, float], tuple[int, int, float]]:
        return await _burst(client, long, n, 1), await _burst(client, short, n, DECODE_TOKENS)

    (p_tokens, _, p_wall), (_, c_tokens, c_wall) = asyncio.run(both())
    if p_tokens <= 0 or c_tokens <= 0:
        raise InputError(
            f"engine '{name}' reported no token usage, so its throughput cannot be measured; "
            "a server that omits `usage` cannot be planned in hours"
        )
    return Throughput(
        prompt_tokens_per_s=p_tokens / p_wall,
        completion_tokens_per_s=c_tokens / c_wall,
        concurrency=n,
        measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        model=str(spec.model_path if isinstance(spec, EmbeddedEngine) else spec.model),
    )


def measure_all(config: EnginesConfig, names: list[str] | None = None) -> dict[str, tuple[str, Throughput]]:
    """Start the recipe's engines, measure each (or `names`) and record it; engine → (key, measurement)."""
    from mindsimkit.mindcore.engine import Engines

    out: dict[str, tuple[str, Throughput]] = {}
    with Engines.from_config(config) as engines:
        for name in names or list(config.engines):
            value = measure_engine(engines, name)
            key = engine_key(config.engines[name])
            save_record(key, value)
            out[name] = (key, value)
    return out
