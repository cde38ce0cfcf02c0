"""Kill-and-resume: a simulation killed with a real SIGKILL and rerun ends with every session present
exactly once, and sessions finished before the kill are not simulated again (mindsim/simulate.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from killing import kill_when
from mindsimkit.mindsim.records import session_id

DRIVER = Path(__file__).resolve().parent / "sim_driver.py"
PATIENTS = ["k1", "k2", "k3", "k4"]
SESSIONS = 3


def _ckpts(out: Path) -> list[Path]:
    d = out / "sessions" / "checkpoints"
    return sorted(d.glob("*.json")) if d.is_dir() else []


def test_sigkill_then_rerun_gives_every_session_exactly_once(tmp_path):
    out = tmp_path / "run"
    kill_when([sys.executable, str(DRIVER), str(out)], lambda: len(_ckpts(out)) >= 2, timeout_s=120, poll_s=0.02)
    before = {p.name: p.read_bytes() for p in _ckpts(out)}
    scenarios = {p.name: p.read_bytes() for p in (out / "sessions" / "scenarios").glob("*.json")}
    assert scenarios, "first scenarios are checkpointed before any session"
    total = len(PATIENTS) * SESSIONS
    assert 2 <= len(before) < total, "the kill must land mid-run"
    assert not (out / "sessions" / "sessions.parquet").exists()

    done = subprocess.run([sys.executable, str(DRIVER), str(out)], capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]

    expected = {session_id(p, "counsellor", i, 9) for p in PATIENTS for i in range(SESSIONS)}
    assert {p.stem for p in _ckpts(out)} == expected
    for name, data in before.items():  # finished before the kill → kept, not re-simulated
        assert (out / "sessions" / "checkpoints" / name).read_bytes() == data
    for name, data in scenarios.items():  # a first scenario is never rewritten
        assert (out / "sessions" / "scenarios" / name).read_bytes() == data
    assert {p.stem for p in (out / "sessions" / "scenarios").glob("*.json")} == {f"{p}-9" for p in PATIENTS}
    ids = [r["session_id"] for r in pq.read_table(out / "sessions" / "sessions.parquet").to_pylist()]
    assert sorted(ids) == sorted(expected)
    lines = (out / "transcripts" / "transcripts.jsonl").read_text().splitlines()
    assert sorted(json.loads(l)["id"] for l in lines) == sorted(expected)
    # every arc continued from its own memory: session k+1 starts from session k's memory_after
    rows = {
        (r["patient_id"], r["session_index"]): r
        for r in pq.read_table(out / "sessions" / "sessions.parquet").to_pylist()
    }
    for p in PATIENTS:
        for i in range(1, SESSIONS):
            assert rows[(p, i)]["memory_before"] == rows[(p, i - 1)]["memory_after"]
