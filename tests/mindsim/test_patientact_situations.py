"""A situation-seeded PatientAct profile in the simulator: the PatientAct engine plays it from the chain's own
formulation and scaffold (no second formulation call), Patient-Psi from the fields its cognitive model takes
(PatientAct's Table 2 runs both on the same situations), and an engine that reads the persona parts refuses it
before any model call."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.patientact.card import card_markdown, profile_card
from mindsimkit.mindsim.simulate import chosen_profiles, run_simulation
from mindsimkit.profilegen.dataset import iter_profiles
from mindsimkit.profilegen.pipeline import run_profiles
from situation_fakes import PROBLEM, import_situations, responder, situation_recipe
from test_patientact import PAResponder


@pytest.fixture
def situation_profiles(tmp_path):
    with Engines.with_backend(FakeBackend(responder())) as engines:
        run_profiles(situation_recipe(import_situations(tmp_path)), engines, tmp_path / "run")
    return list(iter_profiles(tmp_path / "run" / "profiles"))


def test_patientact_plays_a_situation_profile_from_its_own_formulation(situation_profiles, tmp_path):
    profile = situation_profiles[0]
    pa = PAResponder()
    config = SimulationConfig(sessions=1, turn_cap=3, patient_engine="patientact")
    with Engines.with_backend(FakeBackend(pa)) as engines:
        summary = run_simulation([profile], engines, config, tmp_path / "sim", seed=1)
    assert summary.sessions_written == 1 and not summary.failed_arcs
    row = pq.read_table(tmp_path / "sim" / "sessions" / "sessions.parquet").to_pylist()[0]
    scaffold = profile.situation_profile.scaffold
    assert row["patientact"]["attachment"] == scaffold.attachment_style
    assert "PsychFormulation" not in pa.seen and pa.seen["DecompositionDraft"] >= 1


def test_an_engine_that_reads_persona_parts_refuses_a_situation_profile(situation_profiles):
    config = SimulationConfig(sessions=1, patient_engine=["patientact", "mindeval"])
    with pytest.raises(InputError, match=r"situation chain .* mindeval read; .* among mindsim, .*patientact"):
        chosen_profiles(situation_profiles, config)
    both = SimulationConfig(patient_engine=["patientact", "patient_psi"])
    assert len(chosen_profiles(situation_profiles, both)) == 3


def test_patient_psi_maps_a_situation_profile_from_its_theme_history_and_coping(situation_profiles, tmp_path):
    from test_baselines import responder as baseline_responder

    from mindsimkit.mindsim.baselines import patient_psi

    profile = situation_profiles[0]
    record = profile.situation_profile
    fixed = patient_psi.fixed_fields(profile)
    # The theme sampled for the situation is Patient-Psi's category; history and coping are the chain's own texts.
    assert fixed["category"] == patient_psi.category(patient_psi.cluster_of(profile))
    assert record.profile.problem_formulation.predisposing_factors.psychological[0].strip() in fixed["history"]
    assert fixed["coping_strategies"] == [
        c.rstrip(".") for c in record.profile.psychological_formulation.coping_patterns
    ]
    backend = FakeBackend(baseline_responder)
    config = SimulationConfig(sessions=1, turn_cap=3, patient_engine="patient_psi")
    with Engines.with_backend(backend) as engines:
        summary = run_simulation([profile], engines, config, tmp_path / "sim", seed=1)
    assert summary.sessions_written == 1 and not summary.failed_arcs
    mapping = next(r for r in backend.requests if r.schema_name == "PatientPsiMap")
    prompt = mapping.messages[-1]["content"]
    # No persona record: the mapper reads the situation and the generated demographics instead.
    assert record.situation[:40] in prompt and record.profile.demographics.name in prompt
    allowed = set(patient_psi.candidates(patient_psi.cluster_of(profile)))
    assert set(mapping.response_schema["properties"]["core_beliefs"]["items"]["enum"]) == allowed
    row = pq.read_table(tmp_path / "sim" / "sessions" / "sessions.parquet").to_pylist()[0]
    assert row["patient_engine"] == "patient_psi"


def test_the_card_of_a_situation_profile_hides_the_seeds_when_blind(situation_profiles):
    from mindsimkit.mindsim.patientact.decompose import situation_formulation

    p = situation_profiles[0]
    f = situation_formulation(p.situation_profile)
    seeds = {
        "attachment": p.situation_profile.scaffold.attachment_style,
        "theme": p.situation_profile.scaffold.core_belief_theme,
    }
    blind = card_markdown(profile_card(p, f, blind=True, seeds=seeds))
    full = card_markdown(profile_card(p, f, blind=False, seeds=seeds))
    assert PROBLEM["presenting_problem"]["impact"][0] in blind and "Interpersonal pattern: wife" in blind
    assert seeds["theme"] not in blind and seeds["theme"] in full


def test_a_whole_run_from_imported_situations_writes_sessions_of_every_arm(tmp_path):
    """`mindsim run`'s job on a recipe of recipes/patientact_situations.yaml's shape (situation source, PatientAct and
    an arm), every role on the fake engine: profiles, sessions of both arms, the dataset card and the report."""
    import yaml

    from mindsimkit.mindsim_app.job import run_job

    raw = {
        "name": "situations",
        "seed": 1,
        "engines": {"local": {"kind": "embedded"}},
        "roles": {"default": {"engine": "local"}},
        "profiles": {"source": "patientact-situations", "situations": str(import_situations(tmp_path))},
        "simulation": {"sessions": 1, "turn_cap": 2, "patient_engine": ["patientact", "patientact:no_dm"]},
        "validation": {},
        "output": {},
        "release": {},
    }
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(raw))
    chain, pa = responder(), PAResponder()

    def respond(req):
        if req.schema_name == "_Probe":  # the preflight's engine check
            return {"mood": "fine", "calm": True}
        return chain(req) if (req.schema_name or "").startswith("situation_") else pa(req)

    with Engines.with_backend(FakeBackend(respond, name="local")) as engines:
        summary = run_job(tmp_path / "r.yaml", tmp_path / "out", engines=engines)
    assert summary.info.status == "finished" and {"sessions", "dataset + card", "HTML report"} <= set(summary.outputs)
    rows = pq.read_table(tmp_path / "out" / "sessions" / "sessions.parquet", columns=["patient_engine"]).to_pylist()
    assert sorted(r["patient_engine"] for r in rows) == ["patientact"] * 3 + ["patientact:no_dm"] * 3
    card = (tmp_path / "out" / "dataset" / "README.md").read_text()
    assert "PatientAct authors' clinical situations" in card and "synthetic sample" not in card


def test_results_of_situation_profiles_group_by_disease_key(situation_profiles, tmp_path):
    from mindsimkit.judge.patientact import main_problems
    from mindsimkit.profilegen.dataset import write_profiles

    write_profiles(situation_profiles, tmp_path / "grouped" / "profiles")
    assert main_problems(tmp_path / "grouped") == {p.profile_id: "depression" for p in situation_profiles}


def test_annaagent_maps_a_situation_profile_from_its_demographics_and_impact(situation_profiles, tmp_path):
    from test_annaagent import AnnaResponder

    from mindsimkit.mindsim.baselines import annaagent

    profile = situation_profiles[0]
    record = profile.situation_profile
    fixed = annaagent.fixed_fields(profile)
    low, high = record.scaffold.age_range
    assert low <= fixed["age"] <= high and isinstance(fixed["age"], int)
    assert fixed["occupation"] == record.profile.demographics.occupation
    impact = record.profile.problem_formulation.presenting_problem.impact
    assert record.situation.strip() in fixed["symptoms"] and impact[0].rstrip(".") in fixed["symptoms"]
    backend = FakeBackend(AnnaResponder())
    config = SimulationConfig(sessions=1, turn_cap=3, patient_engine="annaagent")
    with Engines.with_backend(backend) as engines:
        summary = run_simulation([profile], engines, config, tmp_path / "sim", seed=1)
    assert summary.sessions_written == 1 and not summary.failed_arcs
    prompt = next(r for r in backend.requests if r.schema_name == "AnnaAgentMap").messages[-1]["content"]
    assert record.profile.demographics.name in prompt and record.situation[:40] in prompt


def test_consistentmi_maps_a_situation_profile_from_its_perpetuating_loop_and_facts(situation_profiles, tmp_path):
    from test_consistentmi import Script

    from mindsimkit.mindsim.baselines import consistentmi

    profile = situation_profiles[0]
    pf = profile.situation_profile.profile.problem_formulation
    fixed = consistentmi.fixed_fields(profile)
    # The behaviour to change is the client's own maintenance loop; the facts are the situation profile's.
    assert fixed["target"] == pf.perpetuating_factors.internal[0].strip().rstrip(".")
    assert profile.situation_profile.situation.strip() in fixed["personas"]
    assert pf.protective_factors.external[0].strip() in fixed["personas"]
    backend = FakeBackend(Script())
    config = SimulationConfig(sessions=1, turn_cap=3, patient_engine="consistentmi")
    with Engines.with_backend(backend) as engines:
        summary = run_simulation([profile], engines, config, tmp_path / "sim", seed=1)
    assert summary.sessions_written == 1 and not summary.failed_arcs
    prompt = next(r for r in backend.requests if r.schema_name == "ConsistentMIMap").messages[-1]["content"]
    assert profile.situation_profile.profile.demographics.name in prompt


def test_all_four_table_2_systems_play_the_same_situation_profiles(situation_profiles):
    config = SimulationConfig(patient_engine=["patientact", "patient_psi", "annaagent", "consistentmi"])
    assert len(chosen_profiles(situation_profiles, config)) == len(situation_profiles)
