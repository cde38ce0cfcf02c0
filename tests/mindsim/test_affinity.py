"""Every request of a session carries its session id as the affinity key, so an engine with several
servers keeps the session on one server and the prefix cache serves its growing prompt."""

from __future__ import annotations

from collections import defaultdict

import pyarrow.parquet as pq

from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.simulate import run_simulation
from simfakes import SimResponder, make_profile


def test_session_calls_carry_the_session_id(tmp_path):
    backend = FakeBackend(SimResponder())
    config = SimulationConfig(sessions=2, turn_cap=3, counsellors=["counsellor", "counsellor:b"])
    with Engines.with_backend(backend) as engines:
        summary = run_simulation([make_profile("p1"), make_profile("p2")], engines, config, tmp_path, seed=1)
    assert summary.sessions_written == 8
    ids = set(pq.read_table(tmp_path / "sessions" / "sessions.parquet").column("session_id").to_pylist())
    by_key = defaultdict(set)
    for r in backend.requests:
        by_key[r.affinity].add(r.role)
    # The counsellor, patient and memory calls of each session are keyed by that session; only the first
    # and later scenarios go unkeyed (the first is written once per patient before any session exists).
    assert set(by_key) - {None} == ids
    for sid in ids:
        roles = {r.split(":")[0] for r in by_key[sid]}
        assert {"counsellor", "patient", "memory_compactor"} <= roles, by_key[sid]
        assert len([r for r in by_key[sid] if r.startswith("counsellor")]) == 1  # one counsellor per session
    assert by_key[None] <= {"first_scenario_writer", "scenario_writer"}
