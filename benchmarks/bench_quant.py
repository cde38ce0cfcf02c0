"""Prompt evaluation and generation speed of the shipped embedded model (SmolLM2-135M, Q4_1) against the same
weights re-encoded as Q8_0 (and Q4_0), measured side by side in one run, plus how often the re-encoded model's
greedy answer is the shipped one's word for word.

Why: on 2 cores an embedded run's time is mostly prompt evaluation (a MindSim patient turn sends ~11k prompt
tokens, docs/baselines.md), and llama.cpp's fast CPU matrix kernels cover Q8_0 and Q4_0 but not Q4_1. Q8_0
holds every Q4_1 weight almost exactly (8 bits for values that had 4 plus an offset), so it is the same model
for any practical purpose; Q4_0 drops Q4_1's offset and is a different, coarser model.

    python benchmarks/bench_quant.py [--words 250] [--repeat 2] [--agree 8]

The re-encoded files are written to a temporary folder and removed at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import urllib.request
from pathlib import Path

from mindsimkit.mindcore.config import EmbeddedEngine
from mindsimkit.mindcore.embedded import EmbeddedServer, default_model_path, reencode
from smoke import parse_args


def ask(port: int, system: str, user: str, tokens: int) -> dict:
    body = {
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "max_tokens": tokens,
        "temperature": 0.0,
        "cache_prompt": False,
    }
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--words", type=int, default=250, help="facts in the long system prompt (~24 tokens each)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--agree", type=int, default=8, help="short prompts whose greedy answers are compared")
    args = parse_args(ap, words=3, repeat=1, agree=1)
    try:
        import gguf  # noqa: F401
    except ImportError:
        sys.exit("bench_quant needs the gguf package: pip install gguf")
    system = "You are a client in counselling. " + " ".join(
        f"Fact {i}: on day {i} you walked to shop number {i} and felt tired." for i in range(args.words)
    )
    shipped = default_model_path()
    with tempfile.TemporaryDirectory() as tmp:
        # Small mode: the shipped file against the encoding the embedded engine serves (Q8_0) only.
        models = {
            "q4_1 (shipped)": shipped,
            **{
                q: reencode(shipped, Path(tmp) / f"{q}.gguf", q)
                for q in (("q8_0",) if args.smoke else ("q8_0", "q4_0"))
            },
        }
        pp: dict[str, list[float]] = {m: [] for m in models}
        tg: dict[str, list[float]] = {m: [] for m in models}
        answers: dict[str, list[str]] = {m: [] for m in models}
        prompt_n = 0
        for rep in range(args.repeat):
            for name, path in models.items():  # interleaved so drift on a noisy machine hits every model alike
                with EmbeddedServer(EmbeddedEngine(model_path=str(path), parallel=1, ctx_per_slot=8192)) as server:
                    d = ask(server.port, system, f"What happened on day {rep + 1}?", 64)
                    pp[name].append(d["timings"]["prompt_per_second"])
                    tg[name].append(d["timings"]["predicted_per_second"])
                    prompt_n = d["timings"]["prompt_n"]
                    if rep == 0:
                        answers[name] = [
                            ask(server.port, "Answer in one sentence.", f"Name a fruit that is number {i}.", 24)[
                                "choices"
                            ][0]["message"]["content"]
                            for i in range(args.agree)
                        ]
    base = "q4_1 (shipped)"
    print(f"prompt of {prompt_n} tokens, evaluated from scratch; median of {args.repeat} runs per model")
    print(f"{'model':16} {'prompt tok/s':>12} {'ratio':>6} {'gen tok/s':>10} {'ratio':>6} {'same greedy answer':>19}")
    for name in models:
        p, g = statistics.median(pp[name]), statistics.median(tg[name])
        same = sum(a == b for a, b in zip(answers[name], answers[base]))
        print(
            f"{name:16} {p:12.0f} {p / statistics.median(pp[base]):6.2f} {g:10.1f} "
            f"{g / statistics.median(tg[base]):6.2f} {same:>12}/{len(answers[base])}"
        )


if __name__ == "__main__":
    main()
