"""The patient-engine registry (mindsim/patient_engines): names validate against it, variants are engines
with settings that flow into every key and record and share their engine's per-patient preparation, and a new
engine is one module and one registration (tests/mindsim/echo_engine.py, run end to end on the fake engine)."""

from __future__ import annotations

import asyncio
import importlib
import json

import pyarrow.parquet as pq
import pytest

from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindsim import patient_engines, simulate
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.records import ScenarioRecord, SessionRecord, session_id
from mindsimkit.mindsim.scenario import Scenario
from mindsimkit.mindsim.schedule import draw_schedule
from mindsimkit.mindsim.session import Arc, Roles, run_arc
from mindsimkit.profilegen.moves import load_vocabulary
from simfakes import SCENARIO, SimResponder, make_profile
from test_patientact import PAResponder

STEPS = {"DecompositionDraft", "PsychFormulation", "Reaction", "Behaviour", "Resistance", "TrustChange"}


@pytest.fixture
def echo():
    """The echo engine registered for one test, and gone afterwards."""
    import echo_engine

    patient_engines.register(importlib.reload(echo_engine).ENGINE)
    yield echo_engine.ENGINE
    patient_engines.unregister("echo")


def _both(sim=None, pa=None):
    sim, pa = sim or SimResponder(end_after=99), pa or PAResponder(trust=["rise_slight"])
    return lambda req: pa(req) if req.schema_name in STEPS else sim(req)


def _rows(out):
    return pq.read_table(out / "sessions" / "sessions.parquet").to_pylist()


# -- the registry ----------------------------------------------------------------------------------------


def test_built_in_engines_and_patientact_arms_are_registered():
    assert {"mindsim", "patientact", "patientact:no_tg", "patientact:no_dm", "patientact:no_pipe"} <= set(
        patient_engines.names()
    )
    arm = patient_engines.variant("patientact:no_tg")
    assert arm.engine is patient_engines.variant("patientact").engine and dict(arm.settings) == {"trust_gating": False}


def test_an_unknown_engine_is_one_config_error_listing_the_registered_names():
    with pytest.raises(ConfigError) as exc:
        SimulationConfig.from_section({"patient_engine": ["mindsim", "patientact:no_tgg"]})
    message = str(exc.value)
    assert message.count("\n") == 0 and "simulation.patient_engine" in message and "'patientact:no_tgg'" in message
    assert (
        "registered: annaagent, consistentmi, mindeval, mindsim, patient_psi, patientact, patientact:no_dm, patientact:no_pipe, patientact:no_tg"
        in message
    )
    with pytest.raises(
        ConfigError, match="unknown patient engine 'bogus'; registered: annaagent, consistentmi, mindeval, mindsim"
    ):
        patient_engines.variant("bogus")


def test_variant_names_validate_and_must_be_listed_once():
    cfg = SimulationConfig(patient_engine=["mindsim", "patientact", "patientact:no_pipe"])
    assert cfg.patient_engines == ["mindsim", "patientact", "patientact:no_pipe"]
    assert SimulationConfig(patient_engine="patientact:no_dm").patient_engines == ["patientact:no_dm"]
    with pytest.raises(ConfigError, match="name each engine once"):
        SimulationConfig.from_section({"patient_engine": ["patientact:no_tg", "patientact:no_tg"]})


def test_a_variant_may_not_change_the_shared_preparation_nor_name_an_unknown_switch():
    with pytest.raises(ValueError, match="psych_formulation, which the engine's per-patient preparation reads"):
        patient_engines.register_variant("patientact", "no_formulation", {"psych_formulation": False})
    with pytest.raises(ValueError, match="trust_gatin"):
        patient_engines.register_variant("patientact", "typo", {"trust_gatin": False})
    with pytest.raises(ValueError, match="engine 'nope' is not registered"):
        patient_engines.register_variant("nope", "x", {"a": 1})
    with pytest.raises(ValueError, match="has no settings to vary"):
        patient_engines.register_variant("mindsim", "x", {"agenda_plain": True})
    assert "patientact:no_formulation" not in patient_engines.names()


def test_session_ids_keep_the_mindsim_key_and_carry_any_other_name():
    old = session_id("p1", "counsellor", 0, 0)
    assert old == session_id("p1", "counsellor", 0, 0, "mindsim")
    ids = {session_id("p1", "counsellor", 0, 0, n) for n in ("patientact", "patientact:no_tg", "patientact:no_dm")}
    assert len(ids) == 3 and old not in ids


def test_roles_extra_come_from_the_recipes_engines_only():
    assert simulate.shared_roles(SimulationConfig()) == (
        "patient",
        "first_scenario_writer",
        "scenario_writer",
        "memory_compactor",
    )
    both = (
        "patient",
        "first_scenario_writer",
        "scenario_writer",
        "memory_compactor",
        "patient_appraiser",
        "profile_decomposer",
        "patient_matcher",
    )
    assert simulate.shared_roles(SimulationConfig(patient_engine=["mindsim", "patientact:no_tg"])) == both
    assert simulate.shared_roles(SimulationConfig(patient_engine=["patientact", "patientact:no_dm"])) == both


# -- variants end to end -----------------------------------------------------------------------------------


def test_arms_flow_into_ids_records_and_transcripts_and_share_one_decomposition(tmp_path):
    arms = ["patientact", "patientact:no_tg", "patientact:no_dm"]
    config = SimulationConfig(sessions=2, turn_cap=3, patient_engine=arms)
    profiles = [make_profile("p1"), make_profile("p2", "joker", "formal")]
    backend = FakeBackend(_both())
    with Engines.with_backend(backend) as engines:
        summary = simulate.run_simulation(profiles, engines, config, tmp_path, seed=4)
    assert summary.sessions_written == 12 and not summary.failed_arcs and summary.patient_engines == arms
    rows = _rows(tmp_path)
    assert len({r["session_id"] for r in rows}) == 12
    for r in rows:
        assert r["session_id"] == session_id(
            r["patient_id"], r["counsellor"], r["session_index"], 4, r["patient_engine"]
        )
    # One decomposition per patient for all three arms, checkpointed once.
    assert sum(q.schema_name == "DecompositionDraft" for q in backend.requests) == 2
    assert len(list((tmp_path / "sessions" / "decompositions").glob("*.json"))) == 2
    for pid in ("p1", "p2"):
        mine = [r for r in rows if r["patient_id"] == pid]
        assert {r["patient_engine"] for r in mine} == set(arms)
        assert len({json.dumps(r["patientact"]["decomposition"], sort_keys=True) for r in mine}) == 1
    # Each arm's switch reached its sessions: the record says so and the prompts show it.
    switches = {r["patient_engine"]: r["patientact"]["switches"] for r in rows}
    assert switches["patientact"]["trust_gating"] and switches["patientact"]["dynamic_memory"]
    assert not switches["patientact:no_tg"]["trust_gating"] and switches["patientact:no_tg"]["dynamic_memory"]
    assert not switches["patientact:no_dm"]["dynamic_memory"] and switches["patientact:no_dm"]["trust_gating"]
    first = [r for r in rows if r["session_index"] == 0 and r["patient_id"] == rows[0]["patient_id"]]
    item = first[0]["patientact"]["decomposition"]["items"][0]["content"]
    brief = {p.profile_id: p.writer_brief for p in profiles}[rows[0]["patient_id"]]
    by_arm = {r["patient_engine"]: r["patient_system_prompt"] for r in first}
    assert brief in by_arm["patientact:no_dm"] and brief not in by_arm["patientact"]
    assert item not in by_arm["patientact"]
    lines = [json.loads(x) for x in (tmp_path / "transcripts" / "transcripts.jsonl").read_text().splitlines()]
    assert sorted({x["patient_engine"] for x in lines}) == sorted(arms)
    # A rerun finds every arm's checkpoints: nothing is asked again.
    again = FakeBackend(_both())
    with Engines.with_backend(again) as engines:
        assert simulate.run_simulation(profiles, engines, config, tmp_path, seed=4).sessions_written == 12
    assert again.requests == []


def test_engine_sessions_give_some_engines_fewer_sessions(tmp_path):
    """`engine_sessions`: one run with MindSim and PatientAct over two sessions and an arm over one. The short arm
    plays the first session of the patient's one schedule, is complete (not a failed arc) with one session, and
    the expected count is what the engines owe; a rerun asks nothing again."""
    from arc_checks import check_arc_ledger

    kinds = ["mindsim", "patientact", "patientact:no_tg"]
    config = SimulationConfig(sessions=2, turn_cap=3, patient_engine=kinds, engine_sessions={"patientact:no_tg": 1})
    assert [config.sessions_for(k) for k in kinds] == [2, 2, 1] and config.sessions_per_patient() == 5
    profiles = [make_profile("p1"), make_profile("p2", "joker", "formal")]
    with Engines.with_backend(FakeBackend(_both())) as engines:
        summary = simulate.run_simulation(profiles, engines, config, tmp_path, seed=4)
    assert summary.sessions_expected == summary.sessions_written == 10 and not summary.failed_arcs
    rows, _ = check_arc_ledger(tmp_path, sessions=2)
    short = [r for r in rows if r["patient_engine"] == "patientact:no_tg"]
    assert sorted(r["session_index"] for r in short) == [0, 0]
    # The same schedule entry as the two-session engines' first session: the schedule is the patient's.
    full = {
        r["patient_id"]: r["schedule"] for r in rows if r["patient_engine"] == "patientact" and r["session_index"] == 0
    }
    assert all(r["schedule"] == full[r["patient_id"]] for r in short)
    again = FakeBackend(_both())
    with Engines.with_backend(again) as engines:
        assert simulate.run_simulation(profiles, engines, config, tmp_path, seed=4).sessions_written == 10
    assert again.requests == []


def test_engine_sessions_name_a_listed_engine_and_a_count_within_sessions():
    with pytest.raises(ValueError, match="'mindeval' is not one of patient_engine"):
        SimulationConfig(sessions=2, patient_engine=["mindsim"], engine_sessions={"mindeval": 1})
    with pytest.raises(ValueError, match=r"engine_sessions.mindsim: 3 is not between 1 and sessions \(2\)"):
        SimulationConfig(sessions=2, patient_engine=["mindsim"], engine_sessions={"mindsim": 3})
    # Left out of the dumped config when unset, so summaries of runs without it read as before.
    assert "engine_sessions" not in SimulationConfig().model_dump()


def test_an_arc_of_an_arm_resumes_with_the_stored_decomposition():
    config = SimulationConfig(sessions=2, turn_cap=3, patient_engine="patientact:no_pipe")
    first = ScenarioRecord(patient_id="p1", seed=0, scenario=Scenario(**SCENARIO), engine={}, prompt={})
    store: dict[str, SessionRecord] = {}

    def arc_run(backend):
        with Engines.with_backend(backend) as engines:
            roles = Roles(*(engines.role(r) for r in ("patient", "counsellor", "scenario_writer", "memory_compactor")))
            arc = Arc.of(make_profile("p1"), load_vocabulary(), roles, config, counsellor="counsellor", seed=0)
            return asyncio.run(
                run_arc(
                    arc,
                    draw_schedule("p1", 0, config),
                    first=first,
                    load=store.get,
                    save=lambda r: store.setdefault(r.session_id, r),
                )
            )

    a, b = arc_run(FakeBackend(PAResponder()))
    assert a.patient_engine == b.patient_engine == "patientact:no_pipe" and not a.patientact.switches["pipeline"]
    assert all(t.patientact.reaction is None for t in a.turns)  # no pipeline steps in this arm
    del store[b.session_id]
    backend = FakeBackend(PAResponder())
    _, b2 = arc_run(backend)
    assert not any(q.schema_name == "DecompositionDraft" for q in backend.requests)
    assert b2.patientact.decomposition == a.patientact.decomposition


# -- a new engine: one module, one registration -----------------------------------------------------------


def test_a_registered_engine_runs_end_to_end_beside_mindsim(tmp_path, echo):
    config = SimulationConfig(sessions=2, turn_cap=6, patient_engine=["mindsim", "echo"])
    profiles = [make_profile("p1"), make_profile("p2", "joker", "formal")]
    with Engines.with_backend(FakeBackend(SimResponder(end_after=99))) as engines:
        summary = simulate.run_simulation(profiles, engines, config, tmp_path, seed=2)
    assert summary.sessions_written == 8 and not summary.failed_arcs
    rows = _rows(tmp_path)
    echo_rows = sorted(
        (r for r in rows if r["patient_engine"] == "echo"), key=lambda r: (r["patient_id"], r["session_index"])
    )
    assert len(echo_rows) == 4
    for r in echo_rows:
        assert r["session_id"] == session_id(r["patient_id"], "counsellor", r["session_index"], 2, "echo")
        assert r["ended_by"] == "patient" and len(r["turns"]) == 4
        said = [m["content"] for m in r["counsellor_messages"] if m["role"] == "assistant"]
        assert all(t["message"].startswith(f"You said: {c}") for t, c in zip(r["turns"][1:], said))
        assert r["prompts"].keys() >= {"counsellor/system.jinja2", "memory/compact.jinja2"}
        assert r["patient_system_prompt"].startswith(f"Patient {r['patient_id']}, session {r['session_index']}")
    # State carried across sessions: session 1 opens with what session 0 ended on.
    p1 = [r for r in echo_rows if r["patient_id"] == "p1"]
    assert p1[1]["turns"][1]["message"].endswith(f"Last time I ended with: {p1[0]['turns'][-1]['message']}")
    # The MindSim arcs are the ones a MindSim-only run writes (same ids, same turns).
    alone = tmp_path / "alone"
    with Engines.with_backend(FakeBackend(SimResponder(end_after=99))) as engines:
        simulate.run_simulation(profiles, engines, SimulationConfig(sessions=2, turn_cap=6), alone, seed=2)
    key = lambda r: r["session_id"]  # noqa: E731
    mine = sorted((r for r in rows if r["patient_engine"] == "mindsim"), key=key)
    assert [(r["session_id"], r["turns"]) for r in mine] == [
        (r["session_id"], r["turns"]) for r in sorted(_rows(alone), key=key)
    ]
    lines = [json.loads(x) for x in (tmp_path / "transcripts" / "transcripts.jsonl").read_text().splitlines()]
    assert sorted(x["patient_engine"] for x in lines) == ["echo"] * 4 + ["mindsim"] * 4


def test_an_unregistered_engine_is_refused_again(echo):
    assert SimulationConfig(patient_engine="echo").patient_engines == ["echo"]
    patient_engines.unregister("echo")
    with pytest.raises(ConfigError, match="unknown patient engine 'echo'"):
        SimulationConfig.from_section({"patient_engine": "echo"})
