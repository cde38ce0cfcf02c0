"""One engine on one server vs the same engine on two: request split and throughput, side by side in
one run, against two local stub servers that answer after a fixed latency (no model involved, so
this measures the engine layer's spreading, not a GPU). With a per-server cap of C in flight and a
latency of L seconds, one server tops out near C / L requests per second and two near 2 C / L.

    python benchmarks/bench_servers.py [--requests 400] [--latency 0.05] [--cap 4] [--in-flight 32]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from mindsimkit.mindcore.backends import OpenAIBackend
from mindsimkit.mindcore.types import ChatRequest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "mindcore"))
from stub_servers import StubServer  # noqa: E402
from smoke import parse_args


async def drive(backend: OpenAIBackend, n: int, in_flight: int, sessions: int) -> float:
    sem = asyncio.Semaphore(in_flight)

    async def one(i: int) -> None:
        key = f"session-{i % sessions}" if sessions else None
        req = ChatRequest(role="bench", model="m", messages=[{"role": "user", "content": f"message {i}"}], affinity=key)
        async with sem:
            await backend.complete(req)

    t0 = time.perf_counter()
    try:
        await asyncio.gather(*(one(i) for i in range(n)))
    finally:
        await backend.aclose_loop()
    return time.perf_counter() - t0


def measure(servers: int, args: argparse.Namespace, sessions: int) -> dict:
    stubs = [
        StubServer(f"s{i}", latency_s=args.latency, max_requests=args.requests + 10).start() for i in range(servers)
    ]
    try:
        backend = OpenAIBackend(
            "bench", base_urls=[s.base_url for s in stubs], default_model="m", max_concurrency=args.cap, timeout_s=30.0
        )
        wall = asyncio.run(drive(backend, args.requests, args.in_flight, sessions))
        return {
            "servers": servers,
            "sessions": sessions,
            "wall_s": wall,
            "rps": args.requests / wall,
            "split": [s.served() for s in stubs],
            "peak": [s.max_in_flight for s in stubs],
        }
    finally:
        for s in stubs:
            s.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--latency", type=float, default=0.05, help="seconds each stub takes per call")
    ap.add_argument("--cap", type=int, default=4, help="max_concurrency (per server)")
    ap.add_argument("--in-flight", type=int, default=32, help="requests the caller keeps open")
    ap.add_argument("--sessions", type=int, default=16, help="affinity keys for the affinity rows")
    args = parse_args(ap, requests=24, latency=0.002, in_flight=8, sessions=4)
    ceiling = args.cap / args.latency
    print(
        f"{args.requests} requests, {args.latency * 1000:.0f} ms per call, cap {args.cap} per server, "
        f"{args.in_flight} in flight; ideal {ceiling:.0f} req/s per server"
    )
    print(f"{'servers':>7} {'affinity':>9} {'wall s':>7} {'req/s':>7} {'vs 1':>5}  split (peak in flight)")
    base = None
    for servers, sessions in ((1, 0), (2, 0), (2, args.sessions)):
        r = measure(servers, args, sessions)
        base = base or r["rps"]
        split = "  ".join(f"{n} ({p})" for n, p in zip(r["split"], r["peak"]))
        aff = f"{sessions} keys" if sessions else "none"
        print(f"{servers:>7} {aff:>9} {r['wall_s']:7.2f} {r['rps']:7.1f} {r['rps'] / base:5.2f}  {split}")


if __name__ == "__main__":
    main()
