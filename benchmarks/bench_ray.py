"""Benchmark the Ray runner against the local runner, side by side in one run.

The engine is a fake served over HTTP from its own process (the unit tests' `SimResponder` behind
`tests/openai_stub.py`), with a fixed latency per call: I/O-bound like a remote model server, so
what is measured is the runner. Each worker (the local process counts as one) may keep at most
`--per-worker` requests in flight, below the engine's global cap `--cap`; more workers can
therefore go faster, up to the cap.

    python benchmarks/bench_ray.py [--patients 24] [--sessions 2] [--turn-cap 4] [--latency 0.05]
                                   [--per-worker 4] [--cap 16] [--two-servers] [--repeat 1]

Prints sessions per minute for: local runner, Ray with 1 worker, Ray with 2 workers (on a local
2-CPU Ray started here), the ratios (goals: 2 workers >= 1.8x 1 worker; Ray 1 worker >= 0.9x local)
and the Ray path's overhead per arc. `--two-servers` adds a Ray run against two fake servers behind
one engine, one of which starts refusing (HTTP 503) halfway through: the request split and whether
any arc failed. Record the numbers in docs/scale.md; timings are never asserted in tests.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from smoke import parse_args

REPO = Path(__file__).resolve().parent.parent
for extra in (REPO / "tests", REPO / "tests" / "mindsim"):
    sys.path.insert(0, str(extra))

ROLES = ["patient", "scenario_writer", "memory_compactor", "counsellor"]
ARCHETYPES = ["minimiser", "joker", "stoic", "venter"]


def _serve(latency: float, urls: "mp.Queue", refuse_after: int | None, counts: "mp.Array", slot: int) -> None:
    """A fake model server in its own process (so its HTTP threads do not share the runner's GIL)."""
    import threading

    from openai_stub import OpenAIStub, Reply, from_responder
    from simfakes import SimResponder

    answer = from_responder(SimResponder(end_after=99))
    lock = threading.Lock()

    def behave(body):
        with lock:
            counts[slot] += 1
            n = counts[slot]
        time.sleep(latency)
        if refuse_after is not None and n > refuse_after:
            return Reply(status=503, error="overloaded (benchmark)")
        return answer(body)

    with OpenAIStub(behave) as stub:
        stub.serve(*ROLES)
        urls.put(stub.base_url)
        threading.Event().wait()


def start_server(latency: float, counts, slot: int, refuse_after: int | None = None):
    ctx = mp.get_context("spawn")
    urls = ctx.Queue()
    proc = ctx.Process(target=_serve, args=(latency, urls, refuse_after, counts, slot), daemon=True)
    proc.start()
    return proc, urls.get(timeout=60)


def engines_for(urls: list[str], cap: int):
    from mindsimkit.mindcore.config import EnginesConfig, OpenAIEngine, RoleSpec
    from mindsimkit.mindcore.engine import Engines

    return Engines.from_config(
        EnginesConfig(
            engines={
                "fake": OpenAIEngine(
                    base_urls=urls, model="m", native_tools=False, max_concurrency=cap, failure_limit=2, cooldown_s=600
                )
            },
            roles={"default": RoleSpec(engine="fake"), **{r: RoleSpec(engine="fake", model=r) for r in ROLES}},
        )
    )


def timed(fn) -> tuple[float, dict]:
    t0 = time.perf_counter()
    summary = fn()
    return time.perf_counter() - t0, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--patients", type=int, default=24)
    ap.add_argument("--sessions", type=int, default=2)
    ap.add_argument("--turn-cap", type=int, default=4)
    ap.add_argument("--latency", type=float, default=0.05, help="seconds per fake call")
    ap.add_argument("--per-worker", type=int, default=4, help="requests one worker keeps in flight")
    ap.add_argument("--cap", type=int, default=16, help="the engine's global max_concurrency")
    ap.add_argument("--two-servers", action="store_true")
    ap.add_argument("--repeat", type=int, default=1, help="rounds of the three runners (median reported)")
    args = parse_args(ap, patients=2, sessions=1, turn_cap=2, latency=0.001, repeat=1, two_servers=False)

    import ray

    from mindsimkit.mindcore.recipe import RaySettings
    from mindsimkit.mindcore.runners import RayRunner
    from mindsimkit.mindsim.config import SimulationConfig
    from mindsimkit.mindsim.simulate import run_simulation
    from simfakes import make_profile

    profiles = [make_profile(f"b{i:03d}", ARCHETYPES[i % 4]) for i in range(args.patients)]
    config = SimulationConfig(sessions=args.sessions, turn_cap=args.turn_cap)
    arcs = len(profiles) * len(config.counsellors)
    counts = mp.get_context("spawn").Array("i", 2)
    server, url = start_server(args.latency, counts, 0)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:

            def local():
                # The local process is one worker: its client-side limit is the per-worker limit.
                with engines_for([url], args.per_worker) as engines:
                    return run_simulation(profiles, engines, config, Path(tmp) / "local", seed=1)

            def on_ray(workers: int):
                def run():
                    with engines_for([url], args.cap) as engines:
                        settings = RaySettings(workers=workers, max_concurrency_per_worker=args.per_worker)
                        return run_simulation(
                            profiles, engines, config, Path(tmp) / f"ray{workers}", seed=1, runner=RayRunner(settings)
                        )

                return run

            modes = [("local", local), ("ray, 1 worker", on_ray(1)), ("ray, 2 workers", on_ray(2))]
            # Rounds alternate the order (a shared machine's load drifts); each runner's median counts.
            for r in range(args.repeat):
                for name, fn in modes if r % 2 == 0 else modes[::-1]:
                    counts[0] = 0
                    wall, summary = timed(fn)
                    rows.append((name, wall, summary.sessions_written, len(summary.failed_arcs), counts[0]))
                    shutil.rmtree(Path(tmp) / ("local" if name == "local" else f"ray{name[5]}"), ignore_errors=True)

            two = []
            if args.two_servers:
                # Healthy, then the second server refusing (HTTP 503) after its first 200 requests.
                for refuse in (None, 200):
                    counts[0] = counts[1] = 0
                    second, url2 = start_server(args.latency, counts, 1, refuse_after=refuse)
                    try:
                        with engines_for([url, url2], args.cap) as engines:
                            wall, summary = timed(
                                lambda: run_simulation(
                                    profiles,
                                    engines,
                                    config,
                                    Path(tmp) / f"two{refuse}",
                                    seed=1,
                                    runner=RayRunner(
                                        RaySettings(workers=2, max_concurrency_per_worker=args.per_worker)
                                    ),
                                )
                            )
                        two.append((refuse, wall, summary, counts[0], counts[1]))
                    finally:
                        second.terminate()
    finally:
        ray.shutdown()
        server.terminate()

    print(
        f"workload: {len(profiles)} patients x {len(config.counsellors)} counsellor x {config.sessions} sessions "
        f"(turn cap {config.turn_cap}) = {arcs} arcs; {args.latency * 1000:.0f} ms per call; "
        f"{args.per_worker} in flight per worker, global cap {args.cap}"
    )
    print(f"{'runner':<16}{'wall s':>8}{'sessions':>10}{'failed arcs':>13}{'calls':>8}{'sessions/min':>14}")
    for name, wall, written, failed, calls in rows:
        print(f"{name:<16}{wall:>8.2f}{written:>10}{failed:>13}{calls:>8}{written / wall * 60:>14.1f}")
    walls = {name: statistics.median(w for n, w, *_ in rows if n == name) for name, *_ in rows}
    rate = {name: rows[0][2] / wall * 60 for name, wall in walls.items()}
    if args.repeat > 1:
        print("medians: " + ", ".join(f"{n} {walls[n]:.2f} s = {rate[n]:.1f} sessions/min" for n in walls))
    r1, r2, loc = rate["ray, 1 worker"], rate["ray, 2 workers"], rate["local"]
    print(f"ray 2 workers / ray 1 worker: {r2 / r1:.2f}x (goal >= 1.8)")
    print(f"ray 1 worker / local:         {r1 / loc:.2f}x (goal >= 0.9)")
    print(f"Ray overhead per arc (1 worker vs local): {(walls['ray, 1 worker'] - walls['local']) / arcs * 1000:.0f} ms")
    for refuse, wall, summary, a, b in two:
        what = "both healthy" if refuse is None else f"the second refusing after {refuse} requests"
        print(
            f"two servers, {what}: {a} / {b} requests ({abs(a - b) / ((a + b) / 2) * 100:.0f}% apart), "
            f"{summary.sessions_written} sessions, {len(summary.failed_arcs)} failed arcs, {wall:.2f} s"
        )


if __name__ == "__main__":
    main()
