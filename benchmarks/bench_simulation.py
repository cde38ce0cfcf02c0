"""Benchmark the simulator on the embedded engine (issue 4): sessions per minute with all conversations
batched vs a serial loop over the same patients, and how busy the engine was during the batched run
compared with the same requests fired as raw concurrent calls (the engine's ceiling for that work).

    python benchmarks/bench_simulation.py [--patients 4] [--turn-cap 3] [--parallel 4]

Prints the numbers side by side; record them in docs/simulator.md. Timings are never asserted in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "mindsim"))  # hand-built profiles shared with the tests

from mindcore.config import EmbeddedEngine, EnginesConfig, RoleSpec  # noqa: E402
from mindcore.engine import Engines  # noqa: E402
from mindsim.config import SimulationConfig  # noqa: E402
from mindsim.simulate import simulate_async  # noqa: E402
from profilegen.moves import archetype_ids  # noqa: E402
from simfakes import make_profile  # noqa: E402


class Recorder:
    """Wraps a backend's `complete` to keep every request and reply of a run."""

    def __init__(self, backend):
        self.backend = backend
        self.inner = backend.complete
        self.calls: list = []
        backend.complete = self.complete

    async def complete(self, request):
        reply = await self.inner(request)
        self.calls.append((request, reply))
        return reply

    def tokens(self) -> int:
        return sum(r.prompt_tokens + r.completion_tokens for _, r in self.calls)


async def replay(backend, calls) -> tuple[float, int]:
    """The same requests, all at once (the backend's semaphore still bounds what is in flight)."""
    t0 = time.monotonic()
    replies = await asyncio.gather(
        *(backend.complete(dataclasses.replace(req, max_tokens=max(1, rep.completion_tokens))) for req, rep in calls)
    )
    return time.monotonic() - t0, sum(r.prompt_tokens + r.completion_tokens for r in replies)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--patients", type=int, default=4)
    ap.add_argument("--turn-cap", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=4)
    args = ap.parse_args()
    arch = archetype_ids()
    profiles = [make_profile(f"b{i}", arch[i % len(arch)], ("casual", "plain", "formal")[i % 3]) for i in range(args.patients)]
    # Small budgets: a 135M model often runs a memory log or scenario to its token limit, which would make
    # the benchmark measure looping rather than the harness.
    config = SimulationConfig(sessions=1, turn_cap=args.turn_cap, max_todo_calls=1, message_max_tokens=40,
                              scenario_max_tokens=600, memory_max_tokens=300, memory_retries=0)
    engines_cfg = EnginesConfig(
        engines={"local": EmbeddedEngine(parallel=args.parallel, ctx_per_slot=4096)},
        roles={"default": RoleSpec(engine="local", temperature=0.3, max_tokens=200, seed=0)},
    )
    with Engines.from_config(engines_cfg) as engines, tempfile.TemporaryDirectory() as tmp:
        rec = Recorder(engines.backend("local"))
        t0 = time.monotonic()
        batched = asyncio.run(simulate_async(profiles, engines, config, Path(tmp) / "batched", seed=1))
        t_batched = time.monotonic() - t0
        batched_calls, batched_tokens = list(rec.calls), rec.tokens()
        print(f"[batched done in {t_batched:.1f} s, {len(batched_calls)} requests]", flush=True)

        rec.calls.clear()
        t0 = time.monotonic()
        serial_sessions = 0
        for i, p in enumerate(profiles):  # one conversation after another: the baseline
            s = asyncio.run(simulate_async([p], engines, config, Path(tmp) / f"serial{i}", seed=1))
            serial_sessions += s["sessions_written"]
        t_serial = time.monotonic() - t0
        print(f"[serial done in {t_serial:.1f} s]", flush=True)

        t_raw, raw_tokens = asyncio.run(replay(engines.backend("local"), batched_calls))

    spm_b = batched["sessions_written"] / t_batched * 60
    spm_s = serial_sessions / t_serial * 60
    tps_b, tps_raw = batched_tokens / t_batched, raw_tokens / t_raw
    print(f"patients={args.patients} turn_cap={args.turn_cap} parallel={args.parallel} requests={len(batched_calls)}")
    print(f"batched : {batched['sessions_written']} sessions in {t_batched:7.1f} s = {spm_b:6.2f} sessions/min")
    print(f"serial  : {serial_sessions} sessions in {t_serial:7.1f} s = {spm_s:6.2f} sessions/min")
    print(f"speed-up batched / serial = {spm_b / spm_s:.2f}x   (goal >= 1.5x)")
    print(f"engine tokens/s: batched sim {tps_b:7.1f}   raw replay of the same requests {tps_raw:7.1f}")
    print(f"engine busy vs raw concurrent = {tps_b / tps_raw:.0%}   (goal >= 90%)")


if __name__ == "__main__":
    main()
