"""Benchmark the sessions dataset build at release scale: 100,000 fake sessions.

Before: the pre-issue-12 export, which re-read every session checkpoint at the end of the run, held
all of them in memory, sorted them and wrote `sessions.parquet` + `transcripts.jsonl` in one go
(reproduced here as `rebuild_from_checkpoints`, line for line what `mindsim/simulate.py` did).
After: each shard writes its own slice as it finishes (`write_shard`, in the worker, from the
sessions it already holds), and the driver streams the slices together (`merge_shards`).

    python benchmarks/bench_dataset_build.py [--sessions 100000] [--shards 64] [--dir /tmp/bench-ds]

Every phase runs in a fresh subprocess so its peak RSS (`ru_maxrss`) is its own. The fake sessions
are copies of one session simulated on the fake engine (turn cap `--turn-cap`), with their own ids and
every message text made distinct.
Prints time and peak memory per phase; record them in docs/scale.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "mindsim"))

from mindsimkit.mindcore.layout import RunLayout  # noqa: E402
from smoke import parse_args

COUNSELLORS = ["counsellor", "counsellor:b"]
SESSIONS = 3


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def template(turn_cap: int) -> dict:
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.fake import FakeBackend
    from mindsimkit.mindsim.config import SimulationConfig
    from mindsimkit.mindsim.simulate import SessionStore, run_simulation
    from simfakes import SimResponder, make_profile

    with tempfile.TemporaryDirectory() as tmp, Engines.with_backend(FakeBackend(SimResponder(end_after=99))) as engines:
        run_simulation([make_profile("t")], engines, SimulationConfig(sessions=1, turn_cap=turn_cap), tmp, seed=1)
        return SessionStore(Path(tmp)).all()[0].model_dump(mode="json")


def clone(text: str, i: int) -> dict:
    """Fake session number `i` from the template's JSON text."""
    from mindsimkit.mindsim.records import session_id

    per_patient = len(COUNSELLORS) * SESSIONS
    pid, rest = divmod(i, per_patient)
    c, k = divmod(rest, SESSIONS)
    patient, counsellor = f"p{pid:06d}", COUNSELLORS[c]
    # Every message of every copy made distinct, or parquet would compress the copies to nothing.
    row = json.loads(text.replace('"content": "', f'"content": "[{i}] '))
    return {
        **row,
        "patient_id": patient,
        "counsellor": counsellor,
        "session_index": k,
        "session_id": session_id(patient, counsellor, k, row["seed"]),
    }


def clones(base: dict, n: int):
    text = json.dumps(base, ensure_ascii=False)
    for i in range(n):
        yield clone(text, i)


def phase_generate(folder: Path, n: int, turn_cap: int) -> dict:
    base = template(turn_cap)
    ck = RunLayout(folder).sessions.checkpoints
    ck.mkdir(parents=True, exist_ok=True)
    size = 0
    for row in clones(base, n):
        data = json.dumps(row, indent=2, ensure_ascii=False, sort_keys=True)
        (ck / f"{row['session_id']}.json").write_text(data)
        size += len(data)
    return {"checkpoint_bytes": size}


def rebuild_from_checkpoints(out: Path, store, patient_ids: set[str], counsellors: list[str], seed: int) -> list:
    """The pre-issue-12 `mindsim.simulate.export`: every checkpoint read back and held at once."""
    from mindsimkit.mindcore.io import atomic_write_jsonl, atomic_write_parquet

    records = [r for r in store.all() if r.patient_id in patient_ids and r.counsellor in counsellors and r.seed == seed]
    records.sort(key=lambda r: (r.counsellor, r.patient_id, r.session_index))
    rows = [r.model_dump(mode="json") for r in records]
    if rows:
        atomic_write_parquet(RunLayout(out).sessions.parquet, rows)
    atomic_write_jsonl(
        RunLayout(out).transcripts,
        [
            {
                "id": r.session_id,
                "patient_id": r.patient_id,
                "counsellor": r.counsellor,
                "session_index": r.session_index,
                "messages": r.transcript(),
            }
            for r in records
        ],
    )
    return records


def phase_before(folder: Path, n: int) -> dict:
    from mindsimkit.mindsim.simulate import SessionStore

    patients = {f"p{i:06d}" for i in range(n // (len(COUNSELLORS) * SESSIONS) + 1)}
    t0 = time.perf_counter()
    records = rebuild_from_checkpoints(folder, SessionStore(folder), patients, COUNSELLORS, 1)
    return {"rows": len(records), "wall_s": time.perf_counter() - t0}


def phase_shards(folder: Path, n: int, shards: int, turn_cap: int) -> dict:
    """What the workers do: each shard's slice written from sessions in memory (building the
    in-memory records is not timed, they exist in the worker already)."""
    from mindsimkit.mindcore.shards import stable_shard
    from mindsimkit.mindsim.records import SessionRecord
    from mindsimkit.mindsim.simulate import write_shard

    text = json.dumps(template(turn_cap), ensure_ascii=False)
    per_patient = len(COUNSELLORS) * SESSIONS
    by_shard: dict[int, list[int]] = {}
    for i in range(n):
        by_shard.setdefault(stable_shard(f"p{i // per_patient:06d}", shards), []).append(i)
    total, slowest = 0.0, 0.0
    for i, rows in sorted(by_shard.items()):
        # One shard in memory at a time, as in a worker.
        records = [SessionRecord.model_validate(clone(text, j)) for j in rows]
        t0 = time.perf_counter()
        write_shard(folder, i, shards, records)
        took = time.perf_counter() - t0
        total, slowest = total + took, max(slowest, took)
        del records
    return {
        "shards": len(by_shard),
        "write_s_total": total,
        "write_s_slowest_shard": slowest,
        "largest_shard_rows": max(len(v) for v in by_shard.values()),
    }


def phase_merge(folder: Path, shards: int) -> dict:
    from mindsimkit.mindsim.simulate import merge_shards

    live = {int(p.name.split("-")[0]) for p in RunLayout(folder).sessions.shards.glob(f"*-of-{shards:05d}.parquet")}
    t0 = time.perf_counter()
    rows = merge_shards(folder, shards, live)
    return {"rows": rows, "wall_s": time.perf_counter() - t0}


def run_phase(*args: str) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--phase", *args], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--turn-cap", type=int, default=8)
    ap.add_argument("--dir", default="/tmp/bench-dataset-build")
    ap.add_argument("--phase", nargs="+", help=argparse.SUPPRESS)
    args = parse_args(ap, sessions=12, shards=2, turn_cap=2, dir=tempfile.mkdtemp(prefix="bench-dataset-smoke-"))
    if args.phase:
        name, folder = args.phase[0], Path(args.phase[1])
        import mindsimkit.mindsim.simulate  # noqa: F401 - the libraries' own footprint, reported apart

        import_peak = _peak_mib()
        result = {
            "generate": lambda: phase_generate(folder, args.sessions, args.turn_cap),
            "before": lambda: phase_before(folder, args.sessions),
            "shards": lambda: phase_shards(folder, args.sessions, args.shards, args.turn_cap),
            "merge": lambda: phase_merge(folder, args.shards),
        }[name]()
        print(json.dumps({**result, "peak_rss_mib": _peak_mib(), "rss_after_imports_mib": import_peak}))
        return
    folder = Path(args.dir)
    shutil.rmtree(folder, ignore_errors=True)
    common = ["--sessions", str(args.sessions), "--shards", str(args.shards), "--turn-cap", str(args.turn_cap)]
    gen = run_phase("generate", str(folder), *common)
    print(f"{args.sessions} fake sessions, {gen['checkpoint_bytes'] / 2**20:.0f} MiB of checkpoints")
    before = run_phase("before", str(folder), *common)
    size = os.path.getsize(RunLayout(folder).sessions.parquet)
    RunLayout(folder).sessions.parquet.unlink()
    shards = run_phase("shards", str(folder), *common)
    merge = run_phase("merge", str(folder), *common)
    print(
        f"before (re-read every checkpoint at the end): {before['wall_s']:.1f} s, peak RSS "
        f"{before['peak_rss_mib']:.0f} MiB ({before['rows']} rows, parquet {size / 2**20:.0f} MiB)"
    )
    print(
        f"after, in the workers ({shards['shards']} shards): {shards['write_s_total']:.1f} s in total, slowest shard "
        f"{shards['write_s_slowest_shard']:.2f} s ({shards['largest_shard_rows']} rows)"
    )
    print(
        f"after, on the driver (streaming merge): {merge['wall_s']:.1f} s, peak RSS {merge['peak_rss_mib']:.0f} MiB "
        f"({merge['rows']} rows; {merge['rss_after_imports_mib']:.0f} MiB after imports)"
    )
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
