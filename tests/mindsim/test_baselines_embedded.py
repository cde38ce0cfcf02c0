"""The two baseline patient engines (Patient-Psi, MindEval; docs/baselines.md) in one short session each on the
real embedded engine (SmolLM2-135M, the shared `embedded_engines` fixture): the mapper's structured call, the
prompted patient and the record. A 135M model's answers are often poor or fail after their re-asks; the
assertions hold whatever it says: each arc either writes its session or is counted as failed, and what was
written is a whole session with the baseline's own record fields and a patient that spoke."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from mindsim import simulate
from mindsim.config import PSI_STYLES, SimulationConfig
from mindsim.prompting import speech_defects
from mindsim.records import ScenarioRecord
from mindsim.scenario import Scenario
from simfakes import SCENARIO, make_profile

pytestmark = pytest.mark.embedded


def test_one_short_session_per_baseline_on_the_embedded_engine(embedded_engines, tmp_path):
    config = SimulationConfig(sessions=1, turn_cap=2, patient_engine=["patient_psi", "mindeval"], final_memory=False,
                              message_max_tokens=80, max_message_retries=3, trim_cut_off=True)
    # The first scenario is checkpointed in advance, so the run resumes it: the scenario writer is the simulator's,
    # already exercised on this engine by the quickstart, and here only the baselines' calls are paid for.
    simulate.ScenarioStore(tmp_path).save(ScenarioRecord(patient_id="e1", seed=0, scenario=Scenario.model_validate(SCENARIO),
                                                         engine={}, prompt={}))
    # A rerun resumes, redoing only failed arcs; bounded, so a model that never speaks fails the test.
    for _ in range(3):
        summary = simulate.run_simulation([make_profile("e1")], embedded_engines, config, tmp_path, seed=0)
        failed = summary.failed_arcs
        assert summary.sessions_written + len(failed) == summary.sessions_expected == 2, failed
        assert all(f.error and f.patient_engine in ("patient_psi", "mindeval") for f in failed)
        if summary.sessions_written:
            break
    assert summary.sessions_written, f"the 135M model failed both arcs in three runs (counted): {failed}"
    rows = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist()
    for r in rows:
        b = r["baseline"]
        assert b["engine"] == r["patient_engine"] and b["filled"]
        assert r["engines"]["mapper"]["model"].startswith("SmolLM2")
        assert r["ended_by"] == "turn_cap" and len(r["turns"]) == 2
        assert r["turns"][0]["message"] == r["scenario"]["opening_message"] == SCENARIO["opening_message"]
        said = r["turns"][1]["message"]
        assert said.strip() and not speech_defects(said)
        prompt = r["patient_system_prompt"]
        if r["patient_engine"] == "patient_psi":
            assert b["style"] in PSI_STYLES and b["preparation"]["profile"]["name"] in prompt
            assert all(s in prompt for s in b["preparation"]["profile"]["core_beliefs"])
        else:
            assert f"- Depressive symptoms: {b['preparation']['profile']['depressive_symptoms']}" in prompt
    for engine in {r["patient_engine"] for r in rows}:
        assert len(list((tmp_path / "sessions" / "baselines" / engine).glob("*.json"))) == 1
