"""The embedded engine's prefix gate (`serial_prefix_chars`, mindcore/backends.py) on and off, side by side on one
server: groups of requests that open with the same long system prompt (a judge's rubric, a writer's
vocabulary) and differ after it, sent 2 or 4 at a time as a stage sends them.

With the gate off, every request that starts while no idle slot holds the prompt evaluates it in full; with it
on, they go one at a time and each after the first reuses the slot that holds it. Each group gets a system
prompt no earlier group had (the nonce is at its start), so nothing is warm from before.

    python benchmarks/bench_prefix_gate.py [--rules 100] [--requests 4] [--tokens 120] [--repeat 2]

(--rules 100 is a ~2.3k-token prompt, the size of the quickstart judge's rubric; ~4 min per repeat on 2 cores.)
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from mindsimkit.mindcore.config import EmbeddedEngine, EnginesConfig, RoleSpec
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.types import ChatRequest
from smoke import parse_args


def system_prompt(nonce: str, rules: int) -> str:
    body = " ".join(
        f"Rule {i}: a reply that ignores what the client said about topic {i} is an issue." for i in range(rules)
    )
    return f"Review {nonce}. You judge counsellor replies. {body}"


async def group(backend, system: str, requests: int, in_flight: int, tokens: int) -> dict:
    sem = asyncio.Semaphore(in_flight)

    async def one(i: int):
        async with sem:
            return await backend.complete(
                ChatRequest(
                    role="judge",
                    model=backend.default_model,
                    temperature=0.0,
                    max_tokens=tokens,
                    seed=0,
                    messages=[
                        {"role": "system", "content": system},
                        {"role": "user", "content": f"Reply {i}: tell me more about your week."},
                    ],
                )
            )

    t0 = time.perf_counter()
    replies = await asyncio.gather(*(one(i) for i in range(requests)))
    return {
        "wall": time.perf_counter() - t0,
        "prompt": sum(r.prompt_tokens for r in replies),
        "cached": sum(r.cached_tokens or 0 for r in replies),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rules", type=int, default=100, help="rules in the shared system prompt (~23 tokens each)")
    ap.add_argument("--requests", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=120)
    ap.add_argument("--repeat", type=int, default=2)
    args = parse_args(ap, rules=2, requests=2, tokens=4, repeat=1)
    cfg = EnginesConfig(
        engines={"local": EmbeddedEngine(parallel=4, ctx_per_slot=8192)},
        roles={"default": RoleSpec(engine="local", temperature=0.0, seed=0)},
    )
    results: dict[tuple[int, bool], list[dict]] = {}
    with Engines.from_config(cfg) as engines:
        backend = engines.backend("local")
        on = backend.serial_prefix_chars
        n = 0
        for rep in range(args.repeat):
            for in_flight in (2, 4):
                for gated in (True, False) if rep % 2 == 0 else (False, True):  # interleaved: drift hits both
                    backend.serial_prefix_chars = on if gated else 0
                    n += 1
                    r = engines.run(
                        group(backend, system_prompt(f"#{n}", args.rules), args.requests, in_flight, args.tokens)
                    )
                    results.setdefault((in_flight, gated), []).append(r)
                    print(
                        f"  in flight {in_flight}, gate {'on ' if gated else 'off'}: {r['wall']:6.1f} s, "
                        f"{r['prompt']} prompt tokens, {r['cached']} from the cache",
                        flush=True,
                    )
    print(f"\n{args.requests} requests per group, one ~{args.rules * 23}-token system prompt, {args.tokens} tokens out")
    print("| in flight | gate off (s) | gate on (s) | on/off | prompt tokens from the cache, off → on |")
    print("|---|---|---|---|---|")
    for in_flight in (2, 4):
        off, gon = results[(in_flight, False)], results[(in_flight, True)]
        w_off, w_on = statistics.median(r["wall"] for r in off), statistics.median(r["wall"] for r in gon)
        c_off, c_on = statistics.median(r["cached"] for r in off), statistics.median(r["cached"] for r in gon)
        print(f"| {in_flight} | {w_off:.1f} | {w_on:.1f} | {w_on / w_off:.2f}× | {c_off:.0f} → {c_on:.0f} |")


if __name__ == "__main__":
    main()
