"""Two embedded servers on one machine: how many threads each should run.

Each server runs in its own process (as two `mindsim` jobs, or a job beside the test suite, would), sends the
same greedy chat request over and over for `--seconds`, and reports generated and prompt tokens per second.
Four settings side by side in one run:

  alone-all      one server, threads = every core (the old default)
  alone-free     one server, threads = `free_cores()` on an idle machine (the default now: every core)
  pair-all       two servers at once, each with every core's worth of threads
  pair-free      two servers, the second started while the first is busy: `free_cores()` gives it what is left

    python benchmarks/bench_threads.py [--seconds 30]

Ratios are against alone-all. ~3 min on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request

from smoke import parse_args

PROMPT = "Write a short paragraph about a person who has trouble sleeping after moving to a new city. " * 8


def serve_and_measure(threads: int | None, seconds: float, tokens: int) -> dict:
    from mindsimkit.mindcore.config import EmbeddedEngine
    from mindsimkit.mindcore.embedded import EmbeddedServer

    server = EmbeddedServer(EmbeddedEngine(parallel=1, ctx_per_slot=4096, threads=threads)).start()
    generated = prompt = n = 0
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        body = json.dumps(
            {
                "model": server.model_name,
                "temperature": 0,
                "max_tokens": tokens,
                "messages": [{"role": "system", "content": f"request {n}"}, {"role": "user", "content": PROMPT}],
            }
        ).encode()
        req = urllib.request.Request(
            server.base_url + "/chat/completions", data=body, headers={"Content-Type": "application/json"}
        )
        usage = json.loads(urllib.request.urlopen(req, timeout=900).read())["usage"]
        generated, prompt, n = generated + usage["completion_tokens"], prompt + usage["prompt_tokens"], n + 1
    elapsed = time.monotonic() - t0
    used = server.threads
    server.stop()
    return {"threads": used, "requests": n, "gen_tok_s": generated / elapsed, "prompt_tok_s": prompt / elapsed}


def child(threads: str, seconds: float, tokens: int, delay: float = 0.0) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--child",
            threads,
            "--seconds",
            str(seconds),
            "--tokens",
            str(tokens),
            "--delay",
            str(delay),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )


def result(p: subprocess.Popen) -> dict:
    out, _ = p.communicate()
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--delay", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--tokens", type=int, default=96, help="tokens each request generates")
    args = parse_args(ap, seconds=1.0, tokens=4)
    if args.child is not None:
        time.sleep(args.delay)
        print(
            json.dumps(serve_and_measure(None if args.child == "free" else int(args.child), args.seconds, args.tokens))
        )
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2
    rows = {
        "alone-all": [result(child(str(cores), args.seconds, args.tokens))],
        "alone-free": [result(child("free", args.seconds, args.tokens))],
    }
    if args.smoke:  # the lone server only: the pairs double the time and measure nothing more in small mode
        _table(rows)
        return
    pair = [child(str(cores), args.seconds, args.tokens), child(str(cores), args.seconds, args.tokens)]
    rows["pair-all"] = [result(p) for p in pair]
    # The second starts once the first is generating (its model load and first request take a few seconds).
    pair = [child("free", args.seconds + 10, args.tokens), child("free", args.seconds, args.tokens, delay=10)]
    rows["pair-free"] = [result(p) for p in pair]
    _table(rows)


def _table(rows: dict) -> None:
    base = rows["alone-all"][0]["gen_tok_s"]
    print(
        f"{'setting':<11} {'server':>6} {'threads':>7} {'requests':>8} {'gen tok/s':>9} {'prompt tok/s':>12} {'vs alone-all':>12}"
    )
    for name, servers in rows.items():
        for k, r in enumerate(servers):
            print(
                f"{name:<11} {k:>6} {r['threads']:>7} {r['requests']:>8} {r['gen_tok_s']:>9.1f} "
                f"{r['prompt_tok_s']:>12.1f} {r['gen_tok_s'] / base:>11.2f}x"
            )


if __name__ == "__main__":
    main()
