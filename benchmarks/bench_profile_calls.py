"""What the profile writer's calls cost on the embedded engine, side by side in one run:

1. formulation calls for distinct candidates with 1, 2 and 4 in flight (settings interleaved, each round on
   fresh candidates so no slot holds a prompt from before): generated tokens per second of wall time;
2. one candidate's call single-stream with and without the JSON-schema grammar (what the grammar costs).

On 2 cores the first comes out flat (docs/performance.md): the stage's time is its tokens, so the way to a
quicker profile stage is fewer or shorter calls, not more concurrency.

    python benchmarks/bench_profile_calls.py [--recipe recipes/quickstart.yaml] [--per-round 4] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time

from mindsimkit.mindcore.config import EnginesConfig, OpenAIEngine, RoleSpec
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.recipe import load_recipe
from mindsimkit.profilegen.anchors import anchor_personas
from mindsimkit.profilegen.config import profiles_config
from mindsimkit.profilegen.formulation import draft_model, label_choice, writer_messages
from mindsimkit.profilegen.personas import load_personas
from mindsimkit.profilegen.rates import load_rates
from mindsimkit.profilegen.schemas import AnchoredRow
from instant_server import InstantServer
from smoke import parse_args

IN_FLIGHT = (1, 2, 4)


async def writes(
    engines: Engines, rows: list[AnchoredRow], in_flight: int, scale: float, schema: bool = True
) -> tuple[float, int]:
    """Wall seconds and generated tokens for one formulation request per row, `in_flight` at a time. The raw
    backend is called (no re-asks) so every setting does exactly one request per row."""
    client = engines.role("profile_writer")
    gate = asyncio.Semaphore(in_flight)

    async def one(row: AnchoredRow) -> int:
        kw = (
            {
                "response_schema": draft_model(scale, label_choice(row.demographics)).model_json_schema(),
                "schema_name": "formulation",
            }
            if schema
            else {}
        )
        async with gate:
            raw = await client.backend.complete(client.build_request(writer_messages(row), **kw))
        return raw.completion_tokens

    t0 = time.perf_counter()
    tokens = await asyncio.gather(*(one(r) for r in rows))
    return time.perf_counter() - t0, sum(tokens)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--recipe", default="recipes/quickstart.yaml")
    ap.add_argument("--per-round", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    args = parse_args(ap, per_round=1, rounds=1)
    recipe = load_recipe(args.recipe)
    scale = profiles_config(recipe).shape.text_scale
    need = args.per_round * len(IN_FLIGHT) * args.rounds + 2
    rows = anchor_personas(load_personas("synthetic", need, 3).rows, load_rates(), 3)
    if len(rows) < need:
        raise SystemExit(f"only {len(rows)} synthetic personas; lower --per-round or --rounds")
    fresh = iter(rows)
    rates: dict[int, list[float]] = {k: [] for k in IN_FLIGHT}
    with contextlib.ExitStack() as stack:
        # Small mode: the instant stub stands in for the recipe's engines (the writer's requests are the real ones).
        config = (
            EnginesConfig(
                engines={
                    "stub": OpenAIEngine(
                        base_url=stack.enter_context(InstantServer()).base_url, model="instant", native_tools=False
                    )
                },
                roles={"default": RoleSpec(engine="stub", seed=0)},
            )
            if args.smoke
            else recipe.engines_config()
        )
        engines = stack.enter_context(Engines.from_config(config))
        for r in range(args.rounds):
            order = IN_FLIGHT if r % 2 == 0 else tuple(reversed(IN_FLIGHT))  # drift hits every setting alike
            for k in order:
                batch = [next(fresh) for _ in range(args.per_round)]
                secs, toks = engines.run(writes(engines, batch, k, scale))
                rates[k].append(toks / secs)
                print(f"  round {r + 1}, {k} in flight: {toks} tokens in {secs:.1f} s", flush=True)
        probe = [next(fresh)]
        engines.run(writes(engines, probe, 1, scale))  # the prompt is now in a slot: both probes below reuse it
        grammar = [engines.run(writes(engines, probe, 1, scale, schema=s)) for s in (True, False, True, False)]
    base = statistics.median(rates[1])
    print(f"\n{'in flight':>9}  {'tok/s (median)':>14}  {'vs 1':>6}")
    for k, r in rates.items():
        med = statistics.median(r)
        print(f"{k:>9}  {med:>14.1f}  {med / base:>5.2f}x")
    with_g = statistics.median(t / s for s, t in grammar[0::2])
    without = statistics.median(t / s for s, t in grammar[1::2])
    print(
        f"\nsingle stream, cached prompt: {with_g:.1f} tok/s with the schema grammar, {without:.1f} without "
        f"({with_g / without:.2f}x)"
    )


if __name__ == "__main__":
    main()
