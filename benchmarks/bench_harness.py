"""What the harness itself costs per request, measured against an instant OpenAI-compatible server.

    python benchmarks/bench_harness.py [--baseline-tree DIR] [--concurrency 1 16 64 256] [--rss]

A zero-latency stub (`instant_server.py`, in this process) answers every request at once, so what is measured
is the client side: for each stage — simulation (`run_simulation`), judge (`judge_all` over the simulated
sessions), profiles (`run_profiles` through distilabel) — one child process runs the stage against the stub,
and another child replays the very request bodies that stage sent with a bare `openai.AsyncOpenAI` client at
the same concurrency. Per run: requests per second and CPU milliseconds per request, from the first to the last
request the stub saw (start-up and the writing of final reports are outside the window); CPU is that of the
child and every process under it (distilabel's workers), read from /proc every 20 ms. Printed side by side
with the ratios; `--baseline-tree` (a checkout of an older commit, e.g. `git archive 1d6659f | tar -x -C DIR`)
runs the stages on that code too, in the same run, as "today". `--rss`: peak RSS of a simulation of 100 and of
1,000 patients, with the profiles read from a profiles folder (as `mindsim simulate` reads them) and with them
built in memory and handed in as a list.

The machine is 2 cores shared with other work: the stub takes one, the measured child the other. Compare ratios
measured in the same run, never absolute times across runs. Timings are never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from smoke import parse_args

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
TICK = os.sysconf("SC_CLK_TCK")


# -- the child side: one stage (or the bare client) against the stub ------------------------------------------
def _code(name: str):
    """Module `name` (e.g. "mindsim.simulate") of the code being measured, the tree in `BENCH_TREE`. A tree from
    before the one import namespace (no `mindsimkit/` folder) is imported by the plain name; a later one inside
    `mindsimkit`, its package path pointed at the tree's folders, since the installed package (an editable
    install included) maps `mindsimkit.<folder>` to its own tree. `PYTHONPATH` puts the tree's `mindsimkit`
    first."""
    import importlib

    tree = os.environ["BENCH_TREE"]
    if not (Path(tree) / "mindsimkit").is_dir():
        return importlib.import_module(name)
    import mindsimkit

    if tree not in mindsimkit.__path__:
        mindsimkit.__path__.append(tree)
    return importlib.import_module(f"mindsimkit.{name}")


def _engines(url: str, concurrency: int):
    c = _code("mindcore.config")
    cfg = c.EnginesConfig(
        engines={
            "instant": c.OpenAIEngine(base_url=url, model="instant", max_concurrency=concurrency, native_tools=False)
        },
        roles={"default": c.RoleSpec(engine="instant", max_tokens=400, seed=7)},
    )
    return _code("mindcore.engine").Engines.from_config(cfg)


def _sim_config(sessions: int, turn_cap: int):
    return _code("mindsim.config").SimulationConfig(
        sessions=sessions, turn_cap=turn_cap, max_todo_calls=1, final_memory=False
    )


def _rss_mib(field: str = "VmRSS") -> float:
    """This process's resident memory now (`VmRSS`) or at its peak (`VmHWM`). Not `ru_maxrss`: Linux carries
    the parent's peak across fork and exec into it, so a child of a big driver would report the driver's."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def child(args: argparse.Namespace) -> None:
    out = Path(args.out)
    if args.stage == "bare":
        _bare(args)
    elif args.stage == "pool":
        _code("profilegen.dataset").write_profiles(
            _code("profilegen.testing").make_profiles(args.patients, seed=3), out
        )
    elif args.stage == "simulate":
        simulate = _code("mindsim.simulate")
        dataset = _code("profilegen.dataset")
        if args.pool:
            # As `mindsim simulate --profiles` reads them: lazily where the tree can (`iter_profiles`).
            read = getattr(dataset, "iter_profiles", dataset.load_profiles)
        else:
            profiles = _code("profilegen.testing").make_profiles(args.patients, seed=3)
        with _engines(args.url, args.concurrency) as engines:
            started = _rss_mib()  # after the imports (and profiles built in memory): what the run adds is above this
            if args.pool:
                profiles = read(args.pool, pool_only=False)
            simulate.run_simulation(profiles, engines, _sim_config(args.sessions, args.turn_cap), out, seed=11)
    elif args.stage == "judge":
        judging = _code("judge.judging")
        inputs = _code("judge.inputs").load_sessions(Path(args.sessions))
        with _engines(args.url, args.concurrency) as engines:
            cfg = _code("judge.config").JudgeConfig(concurrency=args.concurrency)
            engines.run(
                judging.judge_all(
                    judging.judges_from_config(engines, cfg),
                    inputs,
                    _code("mindcore.io").CheckpointDir(out / "cache"),
                    cfg.max_replies,
                    cfg.concurrency,
                )
            )
    elif args.stage == "profiles":
        recipe = {
            "name": "bench",
            "seed": 5,
            "engines": {
                "instant": {
                    "kind": "openai",
                    "base_url": args.url,
                    "model": "instant",
                    "max_concurrency": args.concurrency,
                    "native_tools": False,
                }
            },
            "roles": {"default": {"engine": "instant", "max_tokens": 2000, "seed": 7}},
            "profiles": {
                "candidates": args.patients,
                "pool_size": 2,
                "benchmark_size": 1,
                "concurrency": args.concurrency,
                "use_distilabel": True,
                **({"distilabel_batch_size": args.batch} if args.batch else {}),
            },
        }
        path = out / "recipe.json"
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(recipe))
        r = _code("mindcore.recipe").load_recipe(path)
        with _code("mindcore.engine").Engines.from_config(r.engines_config()) as engines:
            _code("profilegen.pipeline").run_profiles(r, engines, out)
    print(json.dumps({"maxrss_mib": _rss_mib("VmHWM"), "start_rss_mib": locals().get("started", 0.0)}), flush=True)


def _bare(args: argparse.Namespace) -> None:
    """The same bodies through `openai.AsyncOpenAI`, `concurrency` at a time: the SDK's own cost, no harness."""
    import asyncio

    import openai

    known = {
        "model",
        "messages",
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "seed",
        "stop",
        "frequency_penalty",
        "presence_penalty",
        "response_format",
        "tools",
        "tool_choice",
        "reasoning_effort",
    }
    bodies = [json.loads(line) for line in Path(args.bodies).read_text().splitlines()]

    async def main() -> None:
        client = openai.AsyncOpenAI(base_url=args.url, api_key="not-needed", max_retries=0)
        gate = asyncio.Semaphore(args.concurrency)

        async def one(body: dict) -> None:
            kw = {k: v for k, v in body.items() if k in known}
            extra = {k: v for k, v in body.items() if k not in known}
            async with gate:
                reply = await client.chat.completions.create(**kw, **({"extra_body": extra} if extra else {}))
            assert reply.choices[0].message is not None

        await asyncio.gather(*(one(b) for b in bodies))
        await client.close()

    asyncio.run(main())


# -- the driver side: the stub, the children, the CPU window ----------------------------------------------------
def _proc_cpu(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def _descendants(root: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        out.add(pid)
        todo.extend(kids.get(pid, []))
    return out


def measure(cmd: list[str], env: dict[str, str], server, record: Path | None = None, coarse: bool = False) -> dict:
    """Run `cmd`; CPU seconds of its process tree and wall seconds between the first and the last request the
    stub answered, and those requests. `coarse` (the small mode): a run so short that every request fell between two
    polls is measured over the whole process instead of being refused; its numbers then include start-up."""
    server.recording = [] if record is not None else None
    start_count = server.requests
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = time.monotonic()
    last_cpu: dict[int, float] = {}
    pids = {proc.pid}
    window: dict[str, float] = {}
    n = 0
    while proc.poll() is None:
        if n % 25 == 0:
            pids |= _descendants(proc.pid)
        n += 1
        count = server.requests - start_count
        for pid in list(pids):
            cpu = _proc_cpu(pid)
            if cpu is not None:
                last_cpu[pid] = cpu
        total = sum(last_cpu.values())
        if count and "t0" not in window:
            window.update(t0=time.monotonic(), c0=total, n0=count)
        if count and count != window.get("n1"):
            window.update(t1=time.monotonic(), c1=total, n1=count)
        time.sleep(0.02)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[2:6])} failed ({proc.returncode}):\n{err[-3000:]}")
    if record is not None:
        record.write_text("".join(json.dumps(b) + "\n" for b in server.recording))
        server.recording = None
    if "t1" not in window or window["n1"] <= window["n0"]:
        if not coarse or not server.requests - start_count:
            raise SystemExit(f"{cmd[2:6]}: too few requests to measure")
        total = sum(last_cpu.values())
        window = {
            "t0": started,
            "c0": 0.0,
            "n0": 0,
            "t1": time.monotonic(),
            "c1": total,
            "n1": server.requests - start_count,
        }
    reqs = window["n1"] - window["n0"]
    info = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    return {
        "requests": reqs,
        "total_requests": server.requests - start_count,
        "req_s": reqs / (window["t1"] - window["t0"]),
        "cpu_ms": 1000 * (window["c1"] - window["c0"]) / reqs,
        **info,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--stage", default="simulate")
    ap.add_argument("--url")
    ap.add_argument("--out")
    ap.add_argument("--bodies")
    ap.add_argument("--sessions")
    ap.add_argument("--pool", help=argparse.SUPPRESS)  # a profiles folder the simulate child reads
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64, 256])
    ap.add_argument("--patients", type=int, default=64, help="simulated patients per run (at least one per slot)")
    ap.add_argument("--judged-patients", type=int, default=128, help="patients whose sessions the judge runs judge")
    ap.add_argument("--sessions-per-patient", dest="sim_sessions", type=int, default=2)
    ap.add_argument("--turn-cap", type=int, default=4)
    ap.add_argument("--candidates", type=int, default=160, help="profile candidates per run")
    ap.add_argument("--batch", type=int, help="profiles.distilabel_batch_size (default: the recipe default)")
    ap.add_argument("--stages", nargs="*", default=["simulate", "judge", "profiles"])
    ap.add_argument("--baseline-tree", help="a checkout of the code to compare with ('today')")
    ap.add_argument("--rss", action="store_true", help="peak RSS of 100 vs 1,000 simulated patients")
    args = parse_args(
        ap,
        concurrency=[2],
        patients=4,
        judged_patients=16,
        sim_sessions=1,
        turn_cap=3,
        candidates=4,
        baseline_tree=None,
        rss=False,
    )
    if args.child:
        args.concurrency = args.concurrency[0]
        args.sessions = args.sessions if args.stage != "simulate" else args.sim_sessions
        child(args)
        return
    sys.path.insert(0, str(HERE))
    from instant_server import InstantServer

    trees = {"now": REPO, **({"today": Path(args.baseline_tree).resolve()} if args.baseline_tree else {})}
    work = Path(tempfile.mkdtemp(prefix="bench-harness-"))
    print(f"load average at start: {os.getloadavg()}", flush=True)
    rows = []
    with InstantServer() as server:

        def env_for(tree: Path) -> dict[str, str]:
            # The measured code comes from `tree` (this file's own imports are only the stub's).
            return {**os.environ, "PYTHONPATH": str(tree), "BENCH_TREE": str(tree), "TERM": "dumb"}

        def run(tree: str, stage: str, c: int, record: Path | None = None, **extra) -> dict:
            out = work / f"{tree}-{stage}-{c}-{time.monotonic_ns()}"
            cmd = [
                sys.executable,
                __file__,
                "--child",
                "--stage",
                stage,
                "--url",
                server.base_url,
                "--out",
                str(out),
                "--concurrency",
                str(c),
            ]
            for k, v in extra.items():
                cmd += [f"--{k.replace('_', '-')}", str(v)]
            got = measure(cmd, env_for(trees[tree]), server, record, coarse=args.smoke)
            got["out"] = out
            return got

        sessions_dir = None
        for c in args.concurrency:
            for stage in args.stages:
                # Enough patients that every request slot has a conversation to serve.
                extra = {
                    "simulate": {
                        "patients": max(args.patients, c),
                        "sessions_per_patient": args.sim_sessions,
                        "turn_cap": args.turn_cap,
                    },
                    "profiles": {"patients": args.candidates, **({"batch": args.batch} if args.batch else {})},
                }.get(stage, {})
                if stage == "judge":
                    if sessions_dir is None:
                        sessions_dir = run(
                            "now",
                            "simulate",
                            64,
                            patients=args.judged_patients,
                            turn_cap=args.turn_cap,
                            sessions_per_patient=args.sim_sessions,
                        )["out"]
                    extra = {"sessions": sessions_dir}
                bodies = work / f"bodies-{stage}-{c}.jsonl"
                results = {}
                for tree in trees:
                    results[tree] = run(tree, stage, c, record=bodies if tree == "now" else None, **extra)
                results["bare"] = run("now", "bare", c, bodies=bodies)
                rows.append((stage, c, results))
                _print_row(stage, c, results, flush=True)
        if args.rss:
            print(
                f"\npeak RSS, simulation ({args.sim_sessions} sessions, turn cap {args.turn_cap}, concurrency 64):",
                flush=True,
            )
            # Each size's profiles written once as a profiles folder, by the code measured as "now".
            pools = {}
            for n in (100, 1000):
                pools[n] = work / f"pool-{n}"
                subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--child",
                        "--stage",
                        "pool",
                        "--out",
                        str(pools[n]),
                        "--patients",
                        str(n),
                    ],
                    env=env_for(REPO),
                    check=True,
                    stdout=subprocess.DEVNULL,
                )
            for source, label in (
                ("folder", "read from a profiles folder, as `mindsim simulate` reads them"),
                ("list", "built in memory by the caller and handed in as a list"),
            ):
                print(f"  profiles {label}:", flush=True)
                for tree in trees:
                    got = {
                        n: run(
                            tree,
                            "simulate",
                            64,
                            patients=n,
                            sessions_per_patient=args.sim_sessions,
                            turn_cap=args.turn_cap,
                            **({"pool": pools[n]} if source == "folder" else {}),
                        )
                        for n in (100, 1000)
                    }
                    peak = {n: g["maxrss_mib"] for n, g in got.items()}
                    print(
                        f"  {tree:6s} 100 patients {peak[100]:7.1f} MiB (run started at {got[100]['start_rss_mib']:.1f})"
                        f"   1,000 patients {peak[1000]:7.1f} MiB (started at {got[1000]['start_rss_mib']:.1f})   "
                        f"ratio {peak[1000] / peak[100]:.3f}   (+{(peak[1000] - peak[100]) / 900 * 1024:.0f} KiB/patient)",
                        flush=True,
                    )
                    # The run's own memory: above what the child held before it (imports, engines, the input profiles).
                    own = {n: g["maxrss_mib"] - g["start_rss_mib"] for n, g in got.items()}
                    print(
                        f"  {tree:6s} above the start: {own[100]:.1f} and {own[1000]:.1f} MiB, "
                        f"ratio {own[1000] / own[100]:.3f}",
                        flush=True,
                    )
    print(f"load average at end: {os.getloadavg()}")
    _summary(rows, trees)


def _print_row(stage: str, c: int, r: dict, flush: bool = False) -> None:
    now, bare = r["now"], r["bare"]
    line = (
        f"{stage:9s} c={c:<4d} now {now['req_s']:7.0f} req/s {now['cpu_ms']:6.2f} ms/req | bare SDK "
        f"{bare['req_s']:7.0f} req/s {bare['cpu_ms']:6.2f} ms/req | now/bare CPU {now['cpu_ms'] / bare['cpu_ms']:.2f}x"
    )
    if "today" in r:
        t = r["today"]
        line += (
            f" | today {t['req_s']:6.0f} req/s {t['cpu_ms']:6.2f} ms/req, today/bare {t['cpu_ms'] / bare['cpu_ms']:.2f}x,"
            f" now/today CPU {now['cpu_ms'] / t['cpu_ms']:.2f}x, req/s {now['req_s'] / t['req_s']:.2f}x"
        )
    print(line + f"  [{now['requests']} requests]", flush=flush)


def _summary(rows: list, trees: dict) -> None:
    print(
        "\n| stage | in flight | req/s now | CPU ms/req now | bare SDK ms/req | now/bare | "
        + ("today ms/req | now/today | " if "today" in trees else "")
        + "workers per 1,000 req/s now |"
    )
    print("|---|---|---|---|---|---|" + ("---|---|" if "today" in trees else "") + "---|")
    for stage, c, r in rows:
        now, bare = r["now"], r["bare"]
        cells = [
            stage,
            str(c),
            f"{now['req_s']:.0f}",
            f"{now['cpu_ms']:.2f}",
            f"{bare['cpu_ms']:.2f}",
            f"{now['cpu_ms'] / bare['cpu_ms']:.2f}×",
        ]
        if "today" in r:
            cells += [f"{r['today']['cpu_ms']:.2f}", f"{now['cpu_ms'] / r['today']['cpu_ms']:.2f}×"]
        # A worker process is one core: it completes 1000 / cpu_ms requests a second at most.
        cells.append(f"{now['cpu_ms']:.1f}")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
