"""The fixed fake run that pins `simulation.trials: 1` to the simulator's output from before trials existed
(one trial must change nothing): `fingerprint` hashes every checkpoint, the first scenarios, the transcript export, the
sessions table's rows and every request the engine received. `trials_golden.json` holds the fingerprint taken
at the commit before trials were added.

A deliberate change to what the simulator writes or sends (a prompt, a record field) changes the fingerprint:
check that the change is meant, then rewrite the file with `PYTHONPATH=$PWD python tests/mindsim/trials_golden.py`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mindsimkit.mindcore.config import RoleSpec  # noqa: E402
from mindsimkit.mindcore.engine import Engines  # noqa: E402
from mindsimkit.mindcore.fake import FakeBackend  # noqa: E402
from mindsimkit.mindsim.config import SimulationConfig  # noqa: E402
from mindsimkit.mindsim.simulate import run_simulation  # noqa: E402
from simfakes import SimResponder, make_profile  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "data" / "trials_golden.json"
# Roles with fixed seeds, so the requests' seeds are part of what is pinned.
ROLES = {"default": RoleSpec(engine="fake", seed=11), "counsellor:b": RoleSpec(engine="fake", seed=40)}


def golden_run(out: Path, simulation: dict | None = None) -> FakeBackend:
    config = SimulationConfig(sessions=2, turn_cap=4, counsellors=["counsellor", "counsellor:b"], **(simulation or {}))
    backend = FakeBackend(SimResponder(end_after=99))
    with Engines.with_backend(backend, roles=ROLES) as engines:
        run_simulation([make_profile("g1", "minimiser"), make_profile("g2", "joker")], engines, config, out, seed=5)
    return backend


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fingerprint(out: Path, backend: FakeBackend) -> dict[str, str]:
    """File name → sha256 of its bytes (checkpoints, scenarios, transcripts), of the sessions table's rows
    (parquet bytes carry the writer's version) and of the sorted requests (their order follows the scheduler)."""
    sessions = out / "sessions"
    found = {}
    for folder in ("checkpoints", "scenarios"):
        for f in sorted((sessions / folder).glob("*.json")):
            found[f"{folder}/{f.name}"] = _sha(f.read_bytes())
    found["transcripts.jsonl"] = _sha((out / "transcripts" / "transcripts.jsonl").read_bytes())
    rows = pq.read_table(sessions / "sessions.parquet").to_pylist()
    found["sessions.parquet rows"] = _sha(json.dumps(rows, sort_keys=True, default=str).encode())
    requests = sorted(json.dumps(dataclasses.asdict(r), sort_keys=True, default=str) for r in backend.requests)
    found["requests"] = _sha("\n".join(requests).encode())
    found["request count"] = str(len(requests))
    return found


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        backend = golden_run(Path(tmp))
        GOLDEN.write_text(
            json.dumps(fingerprint(Path(tmp), backend), indent=1, sort_keys=True) + "\n", encoding="utf-8"
        )
    print(f"wrote {GOLDEN}")
