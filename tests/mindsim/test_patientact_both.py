"""Both patient engines in one recipe (the simulator's per-engine loop). Every
key carries the engine — session ids, checkpoints, failed-arc rows, transcripts — so nothing collides and
each engine's arcs resume on their own."""

from __future__ import annotations

import json

from arc_checks import check_arc_ledger, check_trust_carry
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindsim import simulate
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.records import session_id
from simfakes import SimResponder, make_profile
from test_patientact import PAResponder

STEPS = {"DecompositionDraft", "PsychFormulation", "Reaction", "Behaviour", "Resistance", "TrustChange"}


def responder(fail_trust_for=None):
    sim, pa = SimResponder(end_after=99), PAResponder(trust=["rise_slight"])

    def respond(req):
        if req.schema_name == "TrustChange" and fail_trust_for and fail_trust_for in json.dumps(req.messages):
            return {"change": "soar"}
        return pa(req) if req.schema_name in STEPS else sim(req)

    return respond


def test_both_engines_run_side_by_side_with_the_engine_in_every_key(tmp_path):
    config = SimulationConfig(
        sessions=2, turn_cap=3, patient_engine=["mindsim", "patientact"], counsellors=["counsellor", "counsellor:b"]
    )
    profiles = [make_profile("p1"), make_profile("p2", "joker", "formal")]
    backend = FakeBackend(responder())
    with Engines.with_backend(backend) as engines:
        summary = simulate.run_simulation(profiles, engines, config, tmp_path, seed=3)
    assert summary.sessions_expected == 16 and summary.sessions_written == 16 and not summary.failed_arcs
    rows, _ = check_arc_ledger(tmp_path, sessions=2)
    # Every PatientAct arc carried trust from session 0 into session 1 (the responder raises it each turn).
    assert check_trust_carry(rows) == 4
    assert len({r["session_id"] for r in rows}) == 16
    assert {(r["patient_engine"], r["counsellor"]) for r in rows} == {
        (e, c) for e in ("mindsim", "patientact") for c in ("counsellor", "counsellor:b")
    }
    for r in rows:
        assert r["session_id"] == session_id(
            r["patient_id"], r["counsellor"], r["session_index"], 3, r["patient_engine"]
        )
        assert (r["patientact"] is not None) == (r["patient_engine"] == "patientact")
    # One decomposition per patient, shared by both counsellors; checkpointed on its own.
    assert sum(q.schema_name == "DecompositionDraft" for q in backend.requests) == 2
    assert len(list((tmp_path / "sessions" / "decompositions").glob("*.json"))) == 2
    pa = [r for r in rows if r["patient_engine"] == "patientact" and r["patient_id"] == "p1"]
    assert len({json.dumps(r["patientact"]["decomposition"], sort_keys=True) for r in pa}) == 1
    lines = [json.loads(l) for l in (tmp_path / "transcripts" / "transcripts.jsonl").read_text().splitlines()]
    assert sorted(l["patient_engine"] for l in lines) == ["mindsim"] * 8 + ["patientact"] * 8
    # The patient-side export carries the engine and PatientAct's per-turn state.

    from mindsimkit.mindsim_app.exports.sft import patient_export

    pat, _, details = patient_export(tmp_path)
    assert sorted(r["patient_engine"] for r in pat) == ["mindsim"] * 8 + ["patientact"] * 8
    for r, d in zip(pat, details, strict=True):  # PatientAct's per-turn state is in the provenance lines
        states = [t for t in d["patientact_turns"] if t]
        if r["patient_engine"] == "mindsim":
            assert not states
        else:
            assert states and all(1.0 <= st["trust_after"] <= 4.0 for st in states)
    # A rerun finds everything done: no new calls.
    before = len(backend.requests)
    with Engines.with_backend(backend) as engines:
        again = simulate.run_simulation(profiles, engines, config, tmp_path, seed=3)
    assert again.sessions_written == 16 and len(backend.requests) == before


def test_a_failing_patientact_arc_is_counted_under_its_engine_and_keeps_its_finished_sessions(tmp_path):
    config = SimulationConfig(sessions=2, turn_cap=3, patient_engine=["mindsim", "patientact"])
    profiles = [make_profile("p1")]

    class Late:
        """The trust step fails from its third call on: the PatientAct arc's second session (2 turns a session)."""

        def __init__(self):
            self.inner = responder()

        def __call__(self, req):
            if req.schema_name == "TrustChange" and sum(q.schema_name == "TrustChange" for q in backend.requests) > 2:
                return {"change": "soar"}
            return self.inner(req)

    backend = FakeBackend(Late())
    with Engines.with_backend(backend) as engines:
        summary = simulate.run_simulation(profiles, engines, config, tmp_path, seed=3)
    assert [(f.patient_engine, f.counsellor) for f in summary.failed_arcs] == [("patientact", "counsellor")]
    rows, _ = check_arc_ledger(tmp_path, sessions=2)
    assert sorted((r["patient_engine"], r["session_index"]) for r in rows) == [
        ("mindsim", 0),
        ("mindsim", 1),
        ("patientact", 0),
    ]
