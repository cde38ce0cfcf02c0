"""llama.cpp server settings the embedded engine leaves at their defaults, measured side by side against those
defaults on the model it serves (SmolLM2-135M as Q8_0): flash attention forced on or off, the KV cache as Q8_0,
and the micro-batch that prompt evaluation runs in.

Why: on 2 cores the embedded test suite and the quickstart are bound by the model's tokens (a study run evaluated
~40k prompt tokens and generated ~9k in 334 s, the server busy 322 s of them), so a setting that evaluated prompts
or generated faster would shorten every embedded run without touching what the runs prove. Each setting answers
the same prompts at three lengths (the patient and judge prompts are 2-3k tokens), greedy, from an empty cache;
the settings are interleaved so a machine's drift hits each alike.

    python benchmarks/bench_server_options.py [--repeat 2] [--tokens 150]
"""

from __future__ import annotations

import argparse
import json
import statistics
import urllib.request
from pathlib import Path
from typing import Any

from smoke import parse_args

from mindsimkit.mindcore.config import EmbeddedEngine
from mindsimkit.mindcore.embedded import EmbeddedServer

# (name, flash attention: -1 auto / 0 off / 1 on, KV cache type: 1 F16 / 8 Q8_0, micro-batch)
SETTINGS = [
    ("defaults (auto, f16, 512)", -1, 1, 512),
    ("flash attention off", 0, 1, 512),
    ("flash attention on", 1, 1, 512),
    ("KV cache q8_0", -1, 8, 512),
    ("micro-batch 128", -1, 1, 128),
    ("micro-batch 2048", -1, 1, 2048),
]
TEXT = (Path(__file__).resolve().parents[1] / "README.md").read_text().split()
# The served model on one slot of the context the quickstart gives each slot, on both cores.
SPEC = EmbeddedEngine(parallel=1, ctx_per_slot=8192, threads=2)


def measure(fa: int, kv: int, ubatch: int, words: list[int], tokens: int) -> list[tuple[float, float]]:
    """(prompt tok/s, generated tok/s) for one prompt of each length in `words`, on a server of its own that
    differs from the embedded engine's only in the setting given."""

    def tune(params: Any) -> None:
        params.flash_attn_type, params.cache_type_k, params.cache_type_v = fa, kv, kv
        params.n_ubatch, params.n_batch = ubatch, max(2048, ubatch)

    out = []
    with EmbeddedServer(SPEC, tune=tune) as server:
        for i, n in enumerate(words):
            body = {
                "messages": [{"role": "user", "content": " ".join(TEXT[i * 40 : i * 40 + n])}],
                "max_tokens": tokens,
                "temperature": 0.0,
                "ignore_eos": True,
                "cache_prompt": False,
            }
            request = urllib.request.Request(
                f"{server.base_url}/chat/completions",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=600) as r:
                timings = json.loads(r.read())["timings"]
            out.append((timings["prompt_per_second"], timings["predicted_per_second"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=2, help="interleaved rounds over every setting")
    ap.add_argument("--tokens", type=int, default=150, help="tokens generated per prompt")
    ap.add_argument("--words", type=int, nargs="+", default=[300, 1500, 2800], help="prompt lengths in words")
    args = parse_args(ap, repeat=1, tokens=4, words=[20])
    settings = SETTINGS[:2] if args.smoke else SETTINGS
    runs: dict[str, list[list[tuple[float, float]]]] = {name: [] for name, *_ in settings}
    for _ in range(args.repeat):
        for name, fa, kv, ubatch in settings:
            runs[name].append(measure(fa, kv, ubatch, args.words, args.tokens))
    base = settings[0][0]

    def median(name: str, i: int, j: int) -> float:
        return statistics.median(run[i][j] for run in runs[name])

    print(f"medians of {args.repeat} interleaved rounds; {args.tokens} tokens generated per prompt; 2 threads")
    head = "".join(f" | {w:>5} words: prompt tok/s (×), gen tok/s (×)" for w in args.words)
    print(f"{'setting':27}{head}")
    for name, *_ in settings:
        cells = ""
        for i in range(len(args.words)):
            p, g = median(name, i, 0), median(name, i, 1)
            cells += f" | {p:14.0f} ({p / median(base, i, 0):4.2f}) {g:9.1f} ({g / median(base, i, 1):4.2f})"
        print(f"{name:27}{cells}")


if __name__ == "__main__":
    main()
