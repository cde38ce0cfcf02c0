"""Every counsellor meets each patient in the same first session, so counsellors are compared from the same opening:
the first scenario is written once per patient, checkpointed on its own before the arcs fan out, and reused by every
arc and by reruns; later scenarios follow each arc's own history (mindsim/session.py, mindsim/simulate.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.simulate import run_simulation
from simfakes import SCENARIO, SimResponder, make_profile

COUNSELLORS = ["counsellor", "counsellor:b"]
PATIENTS = ["p1", "p2"]


class VaryingWriter(SimResponder):
    """Every scenario request gets a different scenario, so an implementation that wrote the first scenario
    per arc would hand the two counsellors different first sessions."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.scenario_calls: list[str] = []

    def __call__(self, req):
        if req.schema_name == "Scenario":
            n = len(self.scenario_calls)
            self.scenario_calls.append(req.messages[0]["content"])
            return {
                **SCENARIO,
                "event": f"{SCENARIO['event']} (draft {n})",
                "opening_message": f"hey. rough week {n}",
                "checkpoints": [f"item {n}", "my sister"],
            }
        return super().__call__(req)


def _is_first(prompt: str) -> bool:
    return "first conversation" in prompt


def simulate(out: Path, responder, sessions=2):
    config = SimulationConfig(sessions=sessions, turn_cap=3, counsellors=COUNSELLORS)
    backend = FakeBackend(responder)
    with Engines.with_backend(backend) as engines:
        summary = run_simulation([make_profile(p) for p in PATIENTS], engines, config, out, seed=3)
    return summary, backend


def _rows(out: Path):
    return pq.read_table(out / "sessions" / "sessions.parquet").to_pylist()


def test_counsellors_get_the_same_first_scenario_written_once_per_patient(tmp_path):
    writer = VaryingWriter(end_after=99)
    summary, _ = simulate(tmp_path, writer)
    assert summary.sessions_written == 8 and not summary.failed_arcs
    firsts = [p for p in writer.scenario_calls if _is_first(p)]
    assert len(firsts) == len(PATIENTS)  # once per patient, not once per arc
    rows = _rows(tmp_path)
    transcripts = {
        (t["patient_id"], t["counsellor"], t["session_index"]): t
        for t in map(json.loads, (tmp_path / "transcripts" / "transcripts.jsonl").read_text().splitlines())
    }
    openers = set()
    for pid in PATIENTS:
        first = [r for r in rows if r["patient_id"] == pid and r["session_index"] == 0]
        assert sorted(r["counsellor"] for r in first) == sorted(COUNSELLORS)
        dumps = {json.dumps(r["scenario"], sort_keys=True) for r in first}
        assert len(dumps) == 1 and all(r["scenario_shared"] for r in first)
        opening = {transcripts[(pid, c, 0)]["messages"][0]["content"] for c in COUNSELLORS}
        assert len(opening) == 1
        assert {r["patient_messages"][1]["content"] for r in first} == opening
        # the checkpoint holds exactly what both counsellors met
        ckpt = json.loads((tmp_path / "sessions" / "scenarios" / f"{pid}-3.json").read_text())
        assert json.dumps(ckpt["scenario"], sort_keys=True) == dumps.pop()
        openers |= opening
        # later scenarios are written per arc, from that arc's own first session
        later = [r for r in rows if r["patient_id"] == pid and r["session_index"] == 1]
        assert len({json.dumps(r["scenario"], sort_keys=True) for r in later}) == 2
        assert not any(r["scenario_shared"] for r in later)
    assert len(openers) == len(PATIENTS)


def test_rerun_reuses_the_first_scenario_checkpoint(tmp_path):
    base = VaryingWriter(end_after=99)

    def counsellor_b_breaks(req):  # counsellor:b returns only blanks: its arcs fail, counsellor's arcs finish
        if req.role == "counsellor:b":
            return " "
        return base(req)

    summary, _ = simulate(tmp_path, counsellor_b_breaks, sessions=1)
    assert sorted(f.patient_id for f in summary.failed_arcs) == PATIENTS
    saved = {p: (tmp_path / "sessions" / "scenarios" / f"{p}-3.json").read_bytes() for p in PATIENTS}

    rerun = VaryingWriter(end_after=99)
    summary, backend = simulate(tmp_path, rerun, sessions=1)
    assert not summary.failed_arcs and summary.sessions_written == 4
    assert rerun.scenario_calls == []  # zero scenario requests: the checkpoint is reused
    assert all(r.schema_name != "Scenario" for r in backend.requests)
    rows = _rows(tmp_path)
    for p in PATIENTS:
        assert (tmp_path / "sessions" / "scenarios" / f"{p}-3.json").read_bytes() == saved[p]
        scen = {json.dumps(r["scenario"], sort_keys=True) for r in rows if r["patient_id"] == p}
        assert scen == {json.dumps(json.loads(saved[p])["scenario"], sort_keys=True)}


def test_a_run_folder_from_the_per_arc_layout_is_refused(tmp_path):
    old = tmp_path / "old"
    (old / "sessions" / "checkpoints").mkdir(parents=True)
    (old / "sessions" / "checkpoints" / "s_0123456789abcdef.json").write_text("{}")
    backend = FakeBackend(SimResponder())
    with pytest.raises(InputError, match="older simulator.*new --out folder"):
        simulate(old, backend.responder)
    assert not (old / "sessions" / "layout.json").exists()

    other = tmp_path / "other"
    (other / "sessions").mkdir(parents=True)
    (other / "sessions" / "layout.json").write_text('{"simulator_layout": 1}')
    with pytest.raises(InputError, match="different simulator layout.*new --out folder"):
        simulate(other, SimResponder())

    fresh = tmp_path / "fresh"
    summary, _ = simulate(fresh, SimResponder(), sessions=1)
    assert json.loads((fresh / "sessions" / "layout.json").read_text())["simulator_layout"] == 2
    summary, backend = simulate(fresh, SimResponder(), sessions=1)  # its own folder resumes fine
    assert backend.requests == [] and summary.sessions_written == 4
