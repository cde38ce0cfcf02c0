"""Does the embedded engine give the same answers on a rerun? One chain of requests (each after the last, one long
system prompt shared by all, as a profile writer or a judge sends them; a fixed seed) is sent to a fresh server
and to a server that answered other prompts first, once with llama.cpp's prompt cache and once without it
(`cache_prompt: false` in the body, which a role sets with `extra_body`). It prints, for each setting, how many
answers came back the same on the warm server as on the cold one, and the chain's wall time.

    python benchmarks/bench_rerun.py [--requests 6] [--rules 60] [--tokens 160] [--warm 6]

A seed fixes the sampling, not the arithmetic: a prefix read from the cache is evaluated in other batches than
the same prefix evaluated afresh, and on a 135M model the small differences that makes are enough to pick other
tokens (docs/engines.md, "The same answers on a rerun").
"""

from __future__ import annotations

import argparse
import time

from mindsimkit.mindcore.config import EmbeddedEngine, EnginesConfig, RoleSpec
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.types import ChatRequest
from smoke import parse_args


def vocabulary(rules: int) -> str:
    body = " ".join(
        f"Label {i}: a coping habit that keeps problem {i} going by bringing quick relief." for i in range(rules)
    )
    return f"You write short case notes about a client, choosing labels from this list only. {body}"


def ask(engines: Engines, system: str, user: str, tokens: int, cache: bool) -> str:
    backend = engines.backend("local")
    reply = engines.run(
        backend.complete(
            ChatRequest(
                role="profile_writer",
                model=backend.default_model,
                temperature=0.7,
                max_tokens=tokens,
                seed=0,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                extra_body=None if cache else {"cache_prompt": False},
            )
        )
    )
    return reply.content or ""


def chain(args: argparse.Namespace, cache: bool, warm: bool) -> tuple[list[str], float]:
    """The chain's answers on a server started for it, after `args.warm` other prompts when `warm`."""
    cfg = EnginesConfig(
        engines={"local": EmbeddedEngine(parallel=4, ctx_per_slot=8192)},
        roles={"default": RoleSpec(engine="local")},
    )
    with Engines.from_config(cfg) as engines:  # the last user of a server stops it: each chain gets a fresh one
        system = vocabulary(args.rules)
        # Other prompts that open as the chain's do and part after a sentence, as two stages' instructions may:
        # the server may then read that opening from its cache when the chain comes.
        opening = system.split(". ", 1)[0]
        for i in range(args.warm if warm else 0):
            ask(engines, f"{opening}. Note {i} is about the weather of a week.", f"Day {i}?", 24, cache)
        t0 = time.perf_counter()
        answers = [
            ask(engines, system, f"Case {i}: a client who avoids calls. Write its note.", args.tokens, cache)
            for i in range(args.requests)
        ]
        return answers, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=6, help="requests in the chain, one after the other")
    ap.add_argument("--rules", type=int, default=60, help="labels in the shared system prompt (~20 tokens each)")
    ap.add_argument("--tokens", type=int, default=160, help="answer budget of each request")
    ap.add_argument("--warm", type=int, default=6, help="other prompts the warm server answers first")
    args = parse_args(ap, requests=2, rules=2, tokens=4, warm=1)
    print(f"a chain of {args.requests} requests on a ~{args.rules * 20}-token system prompt, {args.tokens} tokens out")
    print("| prompt cache | same answers, warm vs cold server | chain wall s, cold | warm |")
    print("|---|---|---|---|")
    for cache in (True, False):
        cold, t_cold = chain(args, cache, warm=False)
        warm, t_warm = chain(args, cache, warm=True)
        same = sum(a == b for a, b in zip(cold, warm))
        print(f"| {'on' if cache else 'off'} | {same} of {len(cold)} | {t_cold:.1f} | {t_warm:.1f} |", flush=True)


if __name__ == "__main__":
    main()
