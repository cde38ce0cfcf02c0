"""Repeated trials (mindsim/simulate.py, mindsim/arc.py, mindcore/client.py): `simulation.trials: N`
runs each arc N times with the patient's and counsellor's sampling seeds moved on per trial, while the schedule and
the first scenario (written once per patient) are shared; one trial leaves every file and request as it was."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from mindsimkit.mindcore.client import TRIAL_SEED_STRIDE, RoleClient
from mindsimkit.mindcore.config import RoleSpec
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindcore.types import UsageLedger
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.records import session_id
from mindsimkit.mindsim.simulate import run_simulation
from simfakes import make_profile
from test_shared_scenario import VaryingWriter
from trials_golden import GOLDEN, ROLES, fingerprint, golden_run

PATIENTS = ["p1", "p2"]
COUNSELLORS = ["counsellor", "counsellor:b"]


class SeedEcho(VaryingWriter):
    """Patient and counsellor words carry the request's seed, so trials that sampled with the same seeds would
    write the same transcripts."""

    def __call__(self, req):
        out = super().__call__(req)
        if isinstance(out, str) and (req.role == "patient" or req.role.startswith("counsellor")):
            return f"{out} [seed {req.seed}]"
        return out


def simulate(out: Path, responder, *, trials: int, sessions: int = 2):
    config = SimulationConfig(sessions=sessions, turn_cap=3, counsellors=COUNSELLORS, trials=trials)
    backend = FakeBackend(responder)
    with Engines.with_backend(backend, roles=ROLES) as engines:
        summary = run_simulation([make_profile(p) for p in PATIENTS], engines, config, out, seed=3)
    return summary, backend


def rows(out: Path) -> list[dict]:
    return pq.read_table(out / "sessions" / "sessions.parquet").to_pylist()


def test_each_arc_runs_once_per_trial_with_its_own_ids(tmp_path):
    summary, _ = simulate(tmp_path, SeedEcho(end_after=99), trials=3)
    assert (summary.trials, summary.arcs, summary.sessions_expected, summary.sessions_written) == (3, 12, 24, 24)
    assert not summary.failed_arcs
    # The shared first scenario was drafted once per patient, not once per trial: 2 + 12 later sessions.
    assert summary.scenario_drafts == 2 + 12
    got = rows(tmp_path)
    by_arc = defaultdict(list)
    for r in got:
        by_arc[(r["patient_id"], r["counsellor"])].append((r["trial"], r["session_index"]))
    assert set(by_arc) == {(p, c) for p in PATIENTS for c in COUNSELLORS}
    assert all(sorted(v) == [(t, i) for t in range(3) for i in range(2)] for v in by_arc.values())
    ids = [r["session_id"] for r in got]
    assert len(set(ids)) == 24
    # Trial 0 keeps the one-trial id; later trials add theirs to the key.
    for r in got:
        assert r["session_id"] == session_id(
            r["patient_id"], r["counsellor"], r["session_index"], 3, "mindsim", r["trial"]
        )
    assert {r["session_id"] for r in got if r["trial"] == 0} == {
        session_id(p, c, i, 3, "mindsim") for p in PATIENTS for c in COUNSELLORS for i in range(2)
    }
    # The dataset's order: counsellor, patient, engine, trial, session; transcripts carry the trial too.
    assert [(r["counsellor"], r["patient_id"], r["trial"], r["session_index"]) for r in got] == sorted(
        (r["counsellor"], r["patient_id"], r["trial"], r["session_index"]) for r in got
    )
    lines = [json.loads(x) for x in (tmp_path / "transcripts" / "transcripts.jsonl").read_text().splitlines()]
    assert [(x["id"], x["trial"]) for x in lines] == [(r["session_id"], r["trial"]) for r in got]
    assert json.loads((tmp_path / "sessions" / "summary.json").read_text())["config"]["trials"] == 3


def test_trials_sample_with_distinct_seeds_for_patient_and_counsellor_only(tmp_path):
    _, backend = simulate(tmp_path, SeedEcho(end_after=99), trials=3)
    trial_of = {r["session_id"]: r["trial"] for r in rows(tmp_path)}
    seeds = defaultdict(set)
    for req in backend.requests:
        if req.affinity in trial_of:
            seeds[(req.role, trial_of[req.affinity])].add(req.seed)
    stride = TRIAL_SEED_STRIDE
    for t in range(3):
        # First asks use the trial's seed; re-asks move on from it by their attempt number, below the stride.
        assert min(seeds[("patient", t)]) == 11 + t * stride and max(seeds[("patient", t)]) < 11 + (t + 1) * stride
        assert seeds[("counsellor", t)] == {11 + t * stride}
        assert seeds[("counsellor:b", t)] == {40 + t * stride}
        # The harness roles keep their seed in every trial.
        assert seeds[("memory_compactor", t)] and seeds[("memory_compactor", t)] <= {11, 12, 13}
    assert {req.seed for req in backend.requests if req.role == "scenario_writer"} == {11}
    for r in rows(tmp_path):
        engines = json.loads(r["engines"]) if isinstance(r["engines"], str) else r["engines"]
        assert engines["patient"]["seed"] == 11 + r["trial"] * stride
        assert engines["scenario_writer"]["seed"] == 11
    # Different seeds, different conversations: no two trials of an arc say the same thing.
    talk = defaultdict(set)
    for r in rows(tmp_path):
        talk[(r["patient_id"], r["counsellor"], r["session_index"])].add(
            json.dumps([m["content"] for m in r["counsellor_messages"][1:]])
        )
    assert all(len(v) == 3 for v in talk.values())


def test_trials_share_the_schedule_and_one_first_scenario_per_patient(tmp_path):
    writer = SeedEcho(end_after=99)
    simulate(tmp_path, writer, trials=3)
    scenarios = sorted(p.name for p in (tmp_path / "sessions" / "scenarios").glob("*.json"))
    assert scenarios == ["p1-3.json", "p2-3.json"]
    first_calls = [c for c in writer.scenario_calls if "first conversation" in c]
    assert len(first_calls) == len(PATIENTS)
    got = rows(tmp_path)
    for p in PATIENTS:
        firsts = [r for r in got if r["patient_id"] == p and r["session_index"] == 0]
        assert len(firsts) == 6 and all(r["scenario_shared"] for r in firsts)
        assert len({r["scenario"]["opening_message"] for r in firsts}) == 1
        assert len({json.dumps(r["scenario"], sort_keys=True) for r in firsts}) == 1
        assert (
            len(
                {
                    json.dumps(r["schedule"], sort_keys=True)
                    for r in got
                    if r["patient_id"] == p and r["session_index"] == 1
                }
            )
            == 1
        )


def test_raising_trials_reuses_the_one_trial_sessions_and_reruns_resume(tmp_path):
    simulate(tmp_path, SeedEcho(end_after=99), trials=1)
    one = {r["session_id"]: r for r in rows(tmp_path)}
    assert all("trial" not in r for r in one.values())
    summary, backend = simulate(tmp_path, SeedEcho(end_after=99), trials=3)
    assert summary.sessions_written == 24
    asked = {req.affinity for req in backend.requests if req.affinity}
    assert not asked & set(one), "trial 0 was simulated again"
    got = rows(tmp_path)
    assert {r["session_id"] for r in got if r["trial"] == 0} == set(one)
    # Delete one later trial's last session: only it is simulated again, the rest is loaded.
    gone = next(r for r in got if r["trial"] == 2 and r["session_index"] == 1)
    (tmp_path / "sessions" / "checkpoints" / f"{gone['session_id']}.json").unlink()
    summary, backend = simulate(tmp_path, SeedEcho(end_after=99), trials=3)
    assert summary.sessions_written == 24
    assert {req.affinity for req in backend.requests if req.affinity} == {gone["session_id"]}
    again = {r["session_id"]: r for r in rows(tmp_path)}
    redone = again[gone["session_id"]]
    assert (redone["trial"], redone["session_index"]) == (2, 1)
    assert redone["engines"]["counsellor"]["seed"] == 11 + 2 * TRIAL_SEED_STRIDE
    assert {k: v for k, v in again.items() if k != gone["session_id"]} == {
        r["session_id"]: r for r in got if r["session_id"] != gone["session_id"]
    }


def test_one_trial_writes_and_sends_exactly_what_the_simulator_did_before_trials(tmp_path):
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    for name, simulation in (("absent", None), ("one", {"trials": 1})):
        out = tmp_path / name
        found = fingerprint(out, golden_run(out, simulation))
        changed = sorted(k for k in golden.keys() | found.keys() if golden.get(k) != found.get(k))
        assert not changed, (
            f"trials: 1 changed {changed}; if the change is meant (a prompt, a record field), "
            "rewrite tests/mindsim/data/trials_golden.json (see tests/mindsim/trials_golden.py)"
        )
        summary = json.loads((out / "sessions" / "summary.json").read_text())
        assert "trials" not in summary and "trials" not in summary["config"]


def test_role_client_for_trial():
    ledger = UsageLedger()
    seeded = RoleClient(
        "patient", FakeBackend(lambda r: "x"), RoleSpec(engine="fake", seed=7), "m", ledger, affinity="s"
    )
    assert seeded.for_trial(0) is seeded
    two = seeded.for_trial(2)
    assert (two.spec.seed, two.affinity, two.spec.engine) == (7 + 2 * TRIAL_SEED_STRIDE, "s", "fake")
    assert seeded.spec.seed == 7
    # Re-asks of one trial never reach the next trial's first seed.
    assert two.reseeded({}, 9)["seed"] < seeded.for_trial(3).spec.seed
    unseeded = RoleClient("patient", FakeBackend(lambda r: "x"), RoleSpec(engine="fake"), "m", ledger)
    assert unseeded.for_trial(4) is unseeded


@pytest.mark.parametrize("bad", [0, -1, 51])
def test_trials_out_of_range_names_the_field(bad):
    with pytest.raises(ConfigError, match="simulation.trials"):
        SimulationConfig.from_section({"trials": bad})


class SilentInTrial1(SeedEcho):
    """The counsellor `counsellor` answers nothing in trial 1 (its seeds there), so those arcs fail."""

    def __call__(self, req):
        if req.role == "counsellor" and req.seed is not None and TRIAL_SEED_STRIDE <= req.seed < 2 * TRIAL_SEED_STRIDE:
            return ""
        return super().__call__(req)


def test_a_failed_trial_arc_names_its_trial_and_the_other_trials_stand(tmp_path):
    summary, _ = simulate(tmp_path, SilentInTrial1(end_after=99), trials=3)
    assert sorted((f.patient_id, f.counsellor, f.trial) for f in summary.failed_arcs) == [
        ("p1", "counsellor", 1),
        ("p2", "counsellor", 1),
    ]
    assert summary.sessions_written == 20
    stored = json.loads((tmp_path / "sessions" / "summary.json").read_text())
    assert [f["trial"] for f in stored["failed_arcs"]] == [1, 1]
    assert {(r["counsellor"], r["trial"]) for r in rows(tmp_path)} == {
        (c, t) for c in COUNSELLORS for t in range(3)
    } - {("counsellor", 1)}


def test_trials_of_both_patient_engines_share_one_decomposition_per_patient(tmp_path):
    from test_patientact_both import responder

    config = SimulationConfig(
        sessions=2, turn_cap=3, patient_engine=["mindsim", "patientact"], counsellors=COUNSELLORS, trials=2
    )
    backend = FakeBackend(responder())
    with Engines.with_backend(backend, roles=ROLES) as engines:
        summary = run_simulation(
            [make_profile("p1"), make_profile("p2", "joker", "formal")], engines, config, tmp_path, seed=3
        )
    assert (summary.sessions_expected, summary.sessions_written, summary.failed_arcs) == (32, 32, [])
    got = rows(tmp_path)
    assert len({r["session_id"] for r in got}) == 32
    assert sorted(p.name for p in (tmp_path / "sessions" / "decompositions").glob("*.json")) == [
        "p1-3.json",
        "p2-3.json",
    ]
    assert sum(req.schema_name == "DecompositionDraft" for req in backend.requests) == 2
    pa = [r for r in got if r["patient_engine"] == "patientact"]
    assert {r["trial"] for r in pa} == {0, 1}
    # The appraiser is the patient's side: its seed moves on per trial too.
    assert {(r["trial"], r["engines"]["appraiser"]["seed"]) for r in pa} == {(0, 11), (1, 11 + TRIAL_SEED_STRIDE)}
