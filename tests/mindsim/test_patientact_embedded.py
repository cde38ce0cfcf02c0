"""The PatientAct patient engine end to end on the real embedded engine (SmolLM2-135M): two patients, two
sessions each, one full patient turn per session. A 135M model's answers are often poor or fail after their
re-asks; the assertions hold whatever it says: every arc either writes its sessions or is counted as failed,
and what was written obeys the engine's rules (trust on the scale and stepped, the signal only on the patient
side, items above trust never in the patient's messages)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from mindcore.config import RoleSpec
from mindsim.config import SimulationConfig
from mindsim.simulate import run_simulation
from simfakes import make_profile


@pytest.mark.embedded
def test_patientact_two_patients_two_sessions_on_the_embedded_engine(embedded_engines, tmp_path):
    config = SimulationConfig(
        sessions=2, turn_cap=2, patient_engine="patientact", message_max_tokens=120, max_message_retries=5,
        scenario_max_tokens=2550, memory_max_tokens=300, memory_retries=0,
        patientact={"step_max_tokens": 320, "decomposition_max_tokens": 2400, "formulation_max_tokens": 1500},
    )
    roles = embedded_engines.config.roles  # shared by the session's embedded tests: restored below
    before = roles.get("patient")
    roles["patient"] = RoleSpec(engine="local", temperature=1.0, max_tokens=500, seed=0, stop=["\n"],
                                frequency_penalty=0.6, max_attempts=5)
    profiles = [make_profile("e1", "minimiser", "casual"), make_profile("e2", "joker", "formal")]
    try:
        summary = run_simulation(profiles, embedded_engines, config, tmp_path, seed=1)
    finally:
        if before is None:
            roles.pop("patient")
        else:
            roles["patient"] = before
    written = summary["sessions_written"]
    failed = summary["failed_arcs"]
    assert len(failed) <= 2 and written + 2 * len(failed) >= 4 and written <= 4, failed
    assert all(f["error"] for f in failed)
    rows = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist() if written else []
    assert len(rows) == written
    for r in rows:
        assert r["patient_engine"] == "patientact"
        pa = r["patientact"]
        assert 1.0 <= pa["trust_start"] <= 4.0 and 1.0 <= pa["trust_end"] <= 4.0
        items = {i["id"]: i for i in pa["decomposition"]["items"]}
        assert items and all(i["level"] in (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0) for i in items.values())
        for t in r["turns"]:
            s = t["patientact"]
            assert round(s["trust_after"] - s["trust_before"], 2) in {0.0, 0.25, -0.25, 0.5, -0.5}
            assert t["message"].strip() and "[inner state]" not in t["message"]
            assert set(s["retrieved"]) | set(s["blocked"]) | set(s["withheld"]) == set(s["relevant"])
            shown = {items[i]["content"] for i in s["retrieved"]}
            for iid in s["blocked"] + s["withheld"]:
                assert items[iid]["level"] > s["trust_before"]
                # (a 135M decomposition may repeat one text in two items; only a text no retrieved item has counts)
                if s["signal"] and not any(items[iid]["content"] in c for c in shown):
                    assert items[iid]["content"] not in s["signal"]
        assert all("[inner state]" not in (m["content"] or "") for m in r["counsellor_messages"])
    lines = (tmp_path / "transcripts" / "transcripts.jsonl").read_text().splitlines()
    assert len(lines) == written
