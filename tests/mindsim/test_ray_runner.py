"""The Ray runner (issue 12): same outputs as the local runner, nothing lost or duplicated when a
worker is killed mid-run, and a rerun after the driver is SIGKILLed resumes.

One local Ray cluster (2 CPUs) serves the whole module. The deterministic fake engine is the unit
tests' `SimResponder` (and profilegen's fakes) behind `tests/openai_stub.py`: Ray workers are other
processes, so they reach it over HTTP on 127.0.0.1, as they would reach a real model server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

import ray  # noqa: E402

from killing import kill_when  # noqa: E402
from mindcore.config import EnginesConfig, OpenAIEngine, RoleSpec  # noqa: E402
from mindcore.engine import Engines  # noqa: E402
from mindcore.recipe import RaySettings  # noqa: E402
from mindsim.config import SimulationConfig  # noqa: E402
from mindsim.records import session_id  # noqa: E402
from mindsim.simulate import run_simulation  # noqa: E402
from openai_stub import OpenAIStub, Reply, from_responder  # noqa: E402
from simfakes import SimResponder, make_profile  # noqa: E402

SIM_ROLES = ["patient", "scenario_writer", "memory_compactor", "counsellor", "counsellor:b"]
PATIENTS = ["r1", "r2", "r3", "r4", "r5"]
COUNSELLORS = ["counsellor", "counsellor:b"]
# Fields that say when or how long, not what: they differ between any two runs.
TIMING = {"elapsed_s", "latency_s", "started_at", "finished_at", "created_at", "wall_s"}


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def slowed(behaviour, delay_s: float):
    def behave(body):
        time.sleep(delay_s)
        return behaviour(body)

    return behave


@pytest.fixture
def stub():
    with OpenAIStub(from_responder(SimResponder(end_after=3))) as s:
        s.serve(*SIM_ROLES)
        yield s


def engines_on(stub: OpenAIStub, cap: int = 8) -> Engines:
    return Engines.from_config(EnginesConfig(
        engines={"stub": OpenAIEngine(base_url=stub.base_url, model="m", native_tools=False, max_concurrency=cap)},
        roles={"default": RoleSpec(engine="stub"), **{r: RoleSpec(engine="stub", model=r) for r in SIM_ROLES}},
    ))


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in TIMING}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _sessions(out: Path) -> list[dict]:
    return _strip(pq.read_table(out / "sessions" / "sessions.parquet").to_pylist())


def _config(sessions: int = 2) -> SimulationConfig:
    return SimulationConfig(sessions=sessions, turn_cap=3, counsellors=COUNSELLORS)


def test_ray_sessions_equal_the_local_runners(cluster, stub, tmp_path):
    profiles = [make_profile(p, a) for p, a in zip(PATIENTS, ["minimiser", "joker", "stoic", "venter", "minimiser"])]
    with engines_on(stub) as engines:
        local = run_simulation(profiles, engines, _config(), tmp_path / "local", seed=4)
    with engines_on(stub) as engines:
        remote = run_simulation(profiles, engines, _config(), tmp_path / "ray", seed=4,
                                ray=RaySettings(workers=2, shards_per_worker=2))
        usage = engines.ledger.summary()
    assert remote["runner"]["runner"] == "ray" and remote["runner"]["shards"] == 4
    assert local["sessions_written"] == remote["sessions_written"] == len(PATIENTS) * 2 * 2
    assert _sessions(tmp_path / "local") == _sessions(tmp_path / "ray")
    assert ((tmp_path / "local" / "transcripts" / "transcripts.jsonl").read_bytes()
            == (tmp_path / "ray" / "transcripts" / "transcripts.jsonl").read_bytes())
    for key in ("ended_by_patient", "rejected_commits", "rejected_messages", "counsellor_flags", "failed_arcs",
                "memory_repaired", "arcs", "sessions_expected"):
        assert local[key] == remote[key], key
    # Every worker's calls reached the driver's ledger: the same calls as the local run made.
    assert {r: u["calls"] for r, u in usage.items()} == {r: u["calls"] for r, u in local["usage"].items()}
