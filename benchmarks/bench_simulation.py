"""Benchmark the simulator on the embedded engine: sessions per minute with all conversations
batched vs a serial loop over the same patients, and how busy the engine was during the batched run
compared with the same requests replayed raw (each conversation's requests in order, all conversations
at once, no simulator in between: the engine's ceiling for that work). Each mode runs on a freshly
started engine so no mode inherits another's prompt cache.

    python benchmarks/bench_simulation.py [--patients 4] [--turn-cap 3] [--parallel 4]

Prints the numbers side by side; record them in docs/simulator.md. Timings are never asserted in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "mindsim"))  # hand-built profiles shared with the tests

from mindsimkit.mindcore.config import EmbeddedEngine, EnginesConfig, OpenAIEngine, RoleSpec  # noqa: E402
from mindsimkit.mindcore.engine import Engines  # noqa: E402
from mindsimkit.mindsim.config import SimulationConfig  # noqa: E402
from mindsimkit.mindsim.simulate import simulate_async  # noqa: E402
from mindsimkit.profilegen.moves import archetype_ids  # noqa: E402
from simfakes import make_profile  # noqa: E402

from instant_server import InstantServer  # noqa: E402
from recording import Recorder, cached_share, processed  # noqa: E402
from smoke import parse_args  # noqa: E402


async def replay_lanes(backend, calls, together: bool = True) -> float:
    """The simulation's engine work without the simulator: each conversation's requests in their order
    (so prompt caching behaves as in the run), output capped at what each reply produced; all
    conversations at once, or (`together=False`) one after another. Returns the wall time."""
    lanes: dict[int, list] = {}
    for lane, req, rep in calls:
        lanes.setdefault(lane, []).append(dataclasses.replace(req, max_tokens=max(1, rep.completion_tokens)))

    async def run(reqs):
        for req in reqs:
            await backend.complete(req)

    t0 = time.monotonic()
    if together:
        await asyncio.gather(*(run(reqs) for reqs in lanes.values()))
    else:
        for reqs in lanes.values():
            await run(reqs)
    return time.monotonic() - t0


def on_fresh_engine(engines_cfg, work):
    """Run `work(engines, tmp_dir)` on a freshly started engine; return its result, wall seconds and the
    requests it sent. Fresh because llama.cpp keeps prompts in its slots and a RAM cache, and the modes
    send identical requests (same profiles, same seed): a shared engine would hand later modes earlier
    ones' work."""
    with Engines.from_config(engines_cfg) as engines, tempfile.TemporaryDirectory() as tmp:
        rec = Recorder(engines.backend("local"))
        t0 = time.monotonic()
        result = work(engines, Path(tmp))
        return result, time.monotonic() - t0, list(rec.calls)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--patients", type=int, default=4)
    ap.add_argument("--turn-cap", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=4)
    args = parse_args(ap, patients=1, turn_cap=2, parallel=2)
    with contextlib.ExitStack() as stack:
        # Small mode: the instant stub stands in for the model (the simulator and the replays run as measured).
        engine = (
            OpenAIEngine(base_url=stack.enter_context(InstantServer()).base_url, model="instant", native_tools=False)
            if args.smoke
            else EmbeddedEngine(parallel=args.parallel, ctx_per_slot=4096)
        )
        measure(args, engine)


def measure(args, engine) -> None:
    arch = archetype_ids()
    profiles = [
        make_profile(f"b{i}", arch[i % len(arch)], ("casual", "plain", "formal")[i % 3]) for i in range(args.patients)
    ]
    # Small budgets: a 135M model often runs a memory log or scenario to its token limit, which would make
    # the benchmark measure looping rather than the harness.
    config = SimulationConfig(
        sessions=1,
        turn_cap=args.turn_cap,
        max_todo_calls=1,
        message_max_tokens=40,
        scenario_max_tokens=600,
        memory_max_tokens=300,
        memory_retries=0,
    )
    engines_cfg = EnginesConfig(
        engines={"local": engine},
        roles={"default": RoleSpec(engine="local", temperature=0.3, max_tokens=200, seed=0)},
    )

    def serial_loop(engines, tmp):  # one conversation after another: the baseline
        return sum(
            asyncio.run(simulate_async([p], engines, config, tmp / f"serial{i}", seed=1)).sessions_written
            for i, p in enumerate(profiles)
        )

    batched, t_batched, batched_calls = on_fresh_engine(
        engines_cfg, lambda e, tmp: asyncio.run(simulate_async(profiles, e, config, tmp / "batched", seed=1))
    )
    print(f"[batched done in {t_batched:.1f} s, {len(batched_calls)} requests]", flush=True)
    serial_sessions, t_serial, serial_calls = on_fresh_engine(engines_cfg, serial_loop)
    print(f"[serial done in {t_serial:.1f} s, {len(serial_calls)} requests]", flush=True)
    _, t_raw, raw_calls = on_fresh_engine(
        engines_cfg, lambda e, _tmp: asyncio.run(replay_lanes(e.backend("local"), batched_calls))
    )
    print(f"[raw replay done in {t_raw:.1f} s]", flush=True)
    # What concurrency buys on this engine at all, with no simulator: the same lanes one at a time.
    _, t_raw1, raw1_calls = on_fresh_engine(
        engines_cfg, lambda e, _tmp: asyncio.run(replay_lanes(e.backend("local"), batched_calls, together=False))
    )
    print(f"[raw one-lane-at-a-time replay done in {t_raw1:.1f} s]", flush=True)

    spm_b = batched.sessions_written / t_batched * 60
    spm_s = serial_sessions / t_serial * 60
    tps_b, tps_raw = processed(batched_calls) / t_batched, processed(raw_calls) / t_raw
    print(f"patients={args.patients} turn_cap={args.turn_cap} parallel={args.parallel} requests={len(batched_calls)}")
    for name, n, t, calls in (
        ("batched", batched.sessions_written, t_batched, batched_calls),
        ("serial ", serial_sessions, t_serial, serial_calls),
    ):
        print(
            f"{name}: {n} sessions in {t:7.1f} s = {n / t * 60:6.2f} sessions/min   "
            f"{len(calls)} requests, {processed(calls)} tokens computed, {cached_share(calls):.0%} of prompt from cache"
        )
    for f in batched.failed_arcs:
        print(f"  batched arc failed (135M output, counted): {f.patient_id}: {f.error[:160]}")
    print(f"speed-up batched / serial = {spm_b / spm_s:.2f}x   (goal >= 1.5x)")
    print(
        f"computed tokens/s: batched simulation {tps_b:7.1f}   same requests replayed raw, per conversation in "
        f"order, all at once {tps_raw:7.1f} ({cached_share(raw_calls):.0%} from cache)"
    )
    print(f"engine busy vs raw concurrent = {tps_b / tps_raw:.0%}   (goal >= 90%)")
    tps_s, tps_raw1 = processed(serial_calls) / t_serial, processed(raw1_calls) / t_raw1
    print(f"computed tokens/s, batched / serial simulation = {tps_b / tps_s:.2f}x   (independent of failed arcs)")
    print(
        f"the engine's own gain from concurrency (raw replay all lanes at once / one lane at a time) = "
        f"{tps_raw / tps_raw1:.2f}x   — no harness can batch beyond this here"
    )


if __name__ == "__main__":
    main()
