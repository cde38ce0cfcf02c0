"""Throughput of the embedded engine: the same 8 requests sent serially, then with 2 and 4 in
flight, measured side by side in one run (machines here are noisy, so only ratios are compared).

    python benchmarks/bench_engine.py [--tokens 64] [--repeat 2]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from mindsimkit.mindcore.config import EmbeddedEngine, EnginesConfig, RoleSpec
from mindsimkit.mindcore.engine import Engines
from smoke import parse_args

PROMPTS = [f"Write two sentences about a walk in park number {i}." for i in range(8)]


async def run(engines: Engines, in_flight: int, tokens: int) -> tuple[float, int]:
    client = engines.role("counsellor")
    sem = asyncio.Semaphore(in_flight)

    async def one(p: str) -> int:
        async with sem:
            r = await client.chat([{"role": "user", "content": p}], max_tokens=tokens, temperature=0.0)
            return r.completion_tokens

    t0 = time.perf_counter()
    toks = await asyncio.gather(*(one(p) for p in PROMPTS))
    return time.perf_counter() - t0, sum(toks)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=2)
    args = parse_args(ap, tokens=4, repeat=1)
    cfg = EnginesConfig(
        engines={"local": EmbeddedEngine(parallel=4)},
        roles={"default": RoleSpec(engine="local", seed=0)},
    )
    rates: dict[int, list[float]] = {1: [], 2: [], 4: []}
    with Engines.from_config(cfg) as engines:
        engines.run(run(engines, 1, 8))  # warm-up
        for _ in range(args.repeat):
            for k in rates:  # interleaved so drift on a noisy machine hits every setting alike
                secs, toks = engines.run(run(engines, k, args.tokens))
                rates[k].append(toks / secs)
    base = statistics.median(rates[1])
    print(f"{'in flight':>9}  {'tok/s (median)':>14}  {'vs serial':>9}")
    for k, r in rates.items():
        med = statistics.median(r)
        print(f"{k:>9}  {med:>14.1f}  {med / base:>8.2f}x")


if __name__ == "__main__":
    main()
