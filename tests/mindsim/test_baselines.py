"""The baseline patient engines (Patient-Psi, MindEval; docs/baselines.md) on the fake engine: the mapping from our
profile, what their prompts carry, the seeded style draw, one preparation per patient, a side-by-side run with
MindSim and PatientAct, resume, and the budget and role wiring."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow.parquet as pq
import pytest

from mindsimkit.mindcore.budget import worst_case_tokens
from mindsimkit.mindcore.config import EnginesConfig, RoleSpec
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindsim import simulate
from mindsimkit.mindsim.arc import Arc, Roles, SessionInput
from mindsimkit.mindsim.baselines import common, mindeval, patient_psi
from mindsimkit.mindsim.config import PSI_STYLES, SimulationConfig
from mindsimkit.mindsim.patient_engines import TalkStart, engine_roles, role_schemas, variant
from mindsimkit.mindsim.records import session_id
from mindsimkit.mindsim.scenario import Scenario
from mindsimkit.mindsim.schedule import draw_schedule
from mindsimkit.profilegen.moves import load_vocabulary
from simfakes import SCENARIO, SimResponder, make_profile
from test_patientact import PAResponder

PA_STEPS = {"DecompositionDraft", "PsychFormulation", "Reaction", "Behaviour", "Resistance", "TrustChange"}


def psi_answer(req) -> dict:
    schema = req.response_schema["properties"]
    belief = schema["core_beliefs"]["items"]["enum"][0]
    return {
        "name": "Sam",
        "core_beliefs": [belief],
        "intermediate_beliefs": ["If I slow down, I fall behind."],
        "intermediate_beliefs_low": ["If I ask, they will see I can't cope."],
        "emotions": ["sad, down, lonely, unhappy", "guilty"],
    }


MINDEVAL_ANSWER = {
    "name": "Sam",
    "sexual_orientation": "Heterosexual / Straight",
    "race": "Caucasian",
    "thought_process": "overthinks every detail",
    "general_outlook": "Expects the worst but keeps going.",
    "recent_mood": "flat",
    "financial_situation": "tight since the redundancy",
    "siblings": "one sister",
    "exercise": "none lately",
    "sleep_quality": "wakes at 4am",
    "attitude_towards_mindfulness": "sceptical",
    "depressive_symptoms": "moderate depressive symptoms",
    "anxious_symptoms": "mild anxious symptoms",
}


def responder(req):
    if req.schema_name == "PatientPsiMap":
        return psi_answer(req)
    if req.schema_name == "MindEvalMap":
        return MINDEVAL_ANSWER
    if req.schema_name in PA_STEPS:
        return PA(req)
    return SIM(req)


SIM, PA = SimResponder(end_after=99), PAResponder(trust=["rise_slight"])


def prepare(engine_name: str, profile, seed=0, config=None, backend=None):
    backend = backend or FakeBackend(responder)
    config = config or SimulationConfig(patient_engine=engine_name)
    with Engines.with_backend(backend) as engines:
        roles = Roles(
            patient=engines.role("patient"),
            counsellor=None,
            scenario_writer=None,
            memory_compactor=None,
            extra={"mapper": engines.role("baseline_mapper")},
        )
        prep = engines.run(variant(engine_name).engine.prepare(profile, seed, roles, config))
    return prep, backend


def system_of(engine_name: str, profile, prep, memory=(), config=None):
    config = config or SimulationConfig(patient_engine=engine_name)
    plan = draw_schedule(profile.profile_id, 0, config).sessions[0]
    arc = Arc(
        profile, load_vocabulary(), Roles(None, None, None, None), config, "counsellor", 0, variant(engine_name), prep
    )
    inp = SessionInput(plan=plan, scenario=Scenario.model_validate(SCENARIO), memory=list(memory))
    participant = variant(engine_name).engine.participant(TalkStart(arc, inp, "s", None, config))
    return participant.history[0]["content"]


# -- Patient-Psi: the mapping ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "cluster,expected",
    [
        ("helpless", "helpless"),
        ("unlovable", "unlovable"),
        ("worthless", "worthless"),
        ("unsafe", "helpless"),
        ("exploitative", "helpless"),
        ("unchangeable", "helpless"),
        ("futile", "helpless"),
    ],
)
def test_each_core_belief_cluster_maps_to_its_patient_psi_category(cluster, expected):
    assert patient_psi.category(cluster) == expected
    cands = patient_psi.candidates(cluster)
    assert cands and set(cands) <= set(patient_psi.data()["categories"][expected])


def test_every_cluster_of_the_profile_vocabulary_is_mapped_and_an_unknown_one_is_refused():
    from mindsimkit.mindcore.errors import ConfigError, InputError
    from mindsimkit.profilegen.vocab import load_vocabularies

    assert set(load_vocabularies().core_beliefs) == set(patient_psi.data()["clusters"])
    with pytest.raises(ConfigError, match="no Patient-Psi category"):
        patient_psi.category("doomed")
    p = make_profile()
    p.formulation.core_belief.cluster = "doomed"
    with pytest.raises(InputError, match="doomed"):
        variant("patient_psi").engine.check_profiles([p])


def test_the_mapper_may_only_pick_sub_beliefs_of_the_patients_cluster():
    p = make_profile()
    p.formulation.core_belief.cluster = "exploitative"
    prep, backend = prepare("patient_psi", p)
    (req,) = [q for q in backend.requests if q.schema_name == "PatientPsiMap"]
    assert req.role == "baseline_mapper"
    assert req.response_schema["properties"]["core_beliefs"]["items"]["enum"] == patient_psi.candidates("exploitative")
    assert prep.profile["category"] == "helpless" and prep.profile["core_beliefs"] == ["I am a victim."]
    # The fields our profile carries are ours, not the mapper's.
    assert prep.filled == ["core_beliefs", "emotions", "intermediate_beliefs", "intermediate_beliefs_low", "name"]
    assert "A critical father." in prep.profile["history"] and "No routine now." in prep.profile["history"]
    assert "Never good enough." in prep.profile["history"]
    assert any("Skips football with friends" in c for c in prep.profile["coping_strategies"])
    # The mapper saw our case (with its core belief, which the baseline's prompt does not get verbatim).
    assert "I'm a waste of space." in req.messages[0]["content"]


def test_a_mapper_answer_outside_the_lists_is_re_asked_not_stored():
    def bad_once(req, seen=[]):  # noqa: B006 - the list remembers the first call on purpose
        if req.schema_name == "PatientPsiMap" and not seen:
            seen.append(1)
            return {**psi_answer(req), "core_beliefs": ["I am a teapot."]}
        return responder(req)

    prep, backend = prepare("patient_psi", make_profile(), backend=FakeBackend(bad_once))
    assert sum(q.schema_name == "PatientPsiMap" for q in backend.requests) == 2
    assert prep.profile["core_beliefs"] == ["I am worthless, a waste."]


def test_a_repeated_option_in_the_mappers_answer_is_kept_once():
    model = patient_psi.map_model(patient_psi.candidates("helpless"))
    answer = model.model_validate(
        {
            "name": "Sam",
            "core_beliefs": ["I am trapped.", "I am trapped."],
            "intermediate_beliefs": ["If I try, I fail."],
            "intermediate_beliefs_low": ["Why try."],
            "emotions": ["guilty", "hurt", "guilty"],
        }
    )
    assert answer.core_beliefs == ["I am trapped."] and answer.emotions == ["guilty", "hurt"]


# -- Patient-Psi: styles -----------------------------------------------------------------------------------
def test_the_style_draw_is_seeded_per_patient_and_covers_all_six():
    draws = {pid: common.draw(pid, 7, "patient_psi_style", list(PSI_STYLES)) for pid in (f"p{i}" for i in range(300))}
    again = {pid: common.draw(pid, 7, "patient_psi_style", list(PSI_STYLES)) for pid in draws}
    assert draws == again
    counts = Counter(draws.values())
    assert set(counts) == set(PSI_STYLES) and min(counts.values()) >= 30  # uniform: 50 expected each
    other_seed = {pid: common.draw(pid, 8, "patient_psi_style", list(PSI_STYLES)) for pid in draws}
    assert other_seed != draws
    # The recipe may narrow the set; the draw stays inside it.
    cfg = SimulationConfig(patient_engine="patient_psi", baselines={"psi_styles": ["reserved"]})
    prep, _ = prepare("patient_psi", make_profile(), config=cfg)
    assert prep.style == "reserved"


def test_a_reserved_patient_psi_prompt_carries_that_style_and_only_that_one():
    cfg = SimulationConfig(patient_engine="patient_psi", baselines={"psi_styles": ["reserved"]})
    p = make_profile()
    prep, _ = prepare("patient_psi", p, config=cfg)
    text = system_of("patient_psi", p, prep, config=cfg)
    assert "You are a guarded client" in text
    assert "upset client" not in text and "talks a lot" not in text and "wants to please" not in text
    # The cognitive model and this session's situation triad are in it; the agenda is not.
    assert "Core beliefs (worthless): I am worthless, a waste." in text and "If I slow down, I fall behind." in text
    assert SCENARIO["event"] in text and "nobody wants me" in text and "skipped dinner" in text
    assert "sad, down, lonely, unhappy; guilty" in text and SCENARIO["opening_message"] in text
    assert "the rejection email" not in text  # an agenda checkpoint
    plain = prep.model_copy(update={"style": "plain"})
    assert "You are a guarded client" not in system_of("patient_psi", p, plain, config=cfg)


def test_patient_psi_sees_the_running_memory_only_after_a_first_session():
    p = make_profile()
    prep, _ = prepare("patient_psi", p)
    assert "earlier sessions" not in system_of("patient_psi", p, prep)
    assert "- Patient mentioned the football." in system_of(
        "patient_psi", p, prep, memory=["Patient mentioned the football."]
    )


# -- MindEval ------------------------------------------------------------------------------------------------
def test_mindeval_profile_is_ours_where_we_have_it_and_the_mappers_elsewhere():
    p = make_profile()
    prep, backend = prepare("mindeval", p)
    m = prep.profile
    assert (m["sex"], m["gender_identity"], m["age"]) == ("Male", "Male", 41)
    assert m["employment_status"] == "unemployed, looking for work" and m["relationship_status"] == "in a relationship"
    assert m["living_situation"] == "with partner or family" and m["program_goal"] == p.goal
    assert m["member_narrative"] == p.case_summary and "You say little." in m["conversation_style"]
    assert set(prep.filled) == set(MINDEVAL_ANSWER) and m["recent_mood"] == "flat"
    (req,) = [q for q in backend.requests if q.schema_name == "MindEvalMap"]
    props = req.response_schema["properties"]
    assert props["depressive_symptoms"]["enum"] == mindeval.data()["depressive_symptoms"]
    assert props["recent_mood"]["enum"] == mindeval.data()["moods"]
    text = system_of("mindeval", p, prep)
    for line in (
        "- Name: Sam",
        "- Age: 41",
        "- Thought process: overthinks every detail",
        "- Depressive symptoms: moderate depressive symptoms",
        f"Your goal for this conversation: {p.goal}",
        p.case_summary,
        SCENARIO["event"],
    ):
        assert line in text
    assert "Do not agree by default" in text and "the rejection email" not in text


def test_a_demographic_value_without_a_mindeval_phrasing_is_refused_before_any_call():
    from mindsimkit.mindcore.errors import InputError

    p = make_profile()
    p.demographics.living_situation = "boat"  # type: ignore[assignment]  # bypasses the Literal on purpose
    with pytest.raises(InputError, match="living_situation 'boat'"):
        variant("mindeval").engine.check_profiles([p])


# -- wiring ----------------------------------------------------------------------------------------------
def test_the_mapper_role_falls_back_to_the_patients_binding_then_default():
    cfg = EnginesConfig(
        engines={"e": {"kind": "openai", "base_url": "http://x/v1", "model": "d"}},
        roles={"default": RoleSpec(engine="e", model="d"), "patient": RoleSpec(engine="e", model="p")},
    )
    assert Engines(cfg).role_spec("baseline_mapper").model == "p"
    cfg.roles["baseline_mapper"] = RoleSpec(engine="e", model="m")
    assert Engines(cfg).role_spec("baseline_mapper").model == "m"
    assert engine_roles(["mindsim", "patient_psi", "mindeval"]) == {"baseline_mapper": "mapper"}


def test_mapper_budgets_are_registered_per_baseline_and_the_default_fits_the_worst_case():
    from mindsimkit.mindsim.config import BaselinesConfig

    entries = {e.name: e for e in role_schemas() if e.role == "baseline_mapper"}
    # AnnaAgent's mapping has its own budget (tests/mindsim/test_annaagent.py).
    assert set(entries) == {
        "patient_psi:PatientPsiMap",
        "mindeval:MindEvalMap",
        "annaagent:AnnaAgentMap",
        "consistentmi:ConsistentMIMap",
    }
    del entries["annaagent:AnnaAgentMap"]

    class R:
        simulation = {"patient_engine": ["mindsim", "mindeval"], "baselines": {"mapper_max_tokens": 2000}}

    assert not entries["patient_psi:PatientPsiMap"].active(R) and entries["mindeval:MindEvalMap"].active(R)
    b = entries["mindeval:MindEvalMap"].budget(R)
    assert (b.value, b.setting, b.explicit) == (2000, "simulation.baselines.mapper_max_tokens", True)
    default = BaselinesConfig().mapper_max_tokens
    for e in entries.values():
        assert worst_case_tokens(e.schema()).tokens <= default


# -- side by side ----------------------------------------------------------------------------------------
ALL = ["mindsim", "patientact", "patient_psi", "mindeval"]


def test_four_engines_side_by_side_write_four_systems_and_resume(tmp_path):
    config = SimulationConfig(sessions=2, turn_cap=3, patient_engine=ALL, counsellors=["counsellor", "counsellor:b"])
    profiles = [make_profile("p1"), make_profile("p2", "joker", "formal")]
    backend = FakeBackend(responder)
    with Engines.with_backend(backend) as engines:
        summary = simulate.run_simulation(profiles, engines, config, tmp_path, seed=3)
    assert summary.sessions_expected == summary.sessions_written == 32 and not summary.failed_arcs
    rows = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist()
    assert Counter(r["patient_engine"] for r in rows) == dict.fromkeys(ALL, 8)
    for r in rows:
        assert r["session_id"] == session_id(
            r["patient_id"], r["counsellor"], r["session_index"], 3, r["patient_engine"]
        )
        is_baseline = r["patient_engine"] in ("patient_psi", "mindeval")
        assert (r["baseline"] is not None) == is_baseline
        if is_baseline:
            # The same first scenario as every other engine, and sessions that run to the cap (no leaving).
            assert r["ended_by"] == "turn_cap" and len(r["turns"]) == 3
            assert r["baseline"]["engine"] == r["patient_engine"] and "mapper" in r["engines"]
            assert all(t["move"] is None for t in r["turns"])
    first = {r["patient_engine"]: r["scenario"] for r in rows if r["patient_id"] == "p1" and r["session_index"] == 0}
    assert len({json.dumps(s, sort_keys=True) for s in first.values()}) == 1
    # Patient-Psi: one style per patient, the same for both counsellors and both sessions.
    psi = [r for r in rows if r["patient_engine"] == "patient_psi"]
    assert all(len({r["baseline"]["style"] for r in psi if r["patient_id"] == pid}) == 1 for pid in ("p1", "p2"))
    assert {r["baseline"]["style"] for r in psi} <= set(PSI_STYLES)
    # One mapper call per patient and baseline, checkpointed on its own; the first session has no memory.
    assert Counter(q.schema_name for q in backend.requests if q.role == "baseline_mapper") == {
        "PatientPsiMap": 2,
        "MindEvalMap": 2,
    }
    for engine in ("patient_psi", "mindeval"):
        assert len(list((tmp_path / "sessions" / "baselines" / engine).glob("*.json"))) == 2
    # Four systems per counsellor in the transcripts validation reads.
    lines = [json.loads(l) for l in (tmp_path / "transcripts" / "transcripts.jsonl").read_text().splitlines()]
    assert {(l["patient_engine"], l["counsellor"]) for l in lines} == {
        (e, c) for e in ALL for c in ("counsellor", "counsellor:b")
    }
    # A rerun finds everything done: no new calls.
    before = len(backend.requests)
    with Engines.with_backend(backend) as engines:
        again = simulate.run_simulation(profiles, engines, config, tmp_path, seed=3)
    assert again.sessions_written == 32 and len(backend.requests) == before


def test_a_killed_baseline_arc_resumes_from_its_checkpoint_without_mapping_again(tmp_path):
    config = SimulationConfig(sessions=2, turn_cap=2, patient_engine=["patient_psi"])
    profiles = [make_profile("p1")]

    class FailSecond:
        """The patient's reply fails in the arc's second session only (every re-ask too)."""

        def __call__(self, req):
            system = req.messages[0]["content"] if req.messages else ""
            if req.role == "patient" and "earlier sessions" in system:
                return ""
            return responder(req)

    backend = FakeBackend(FailSecond())
    with Engines.with_backend(backend) as engines:
        summary = simulate.run_simulation(profiles, engines, config, tmp_path, seed=1)
    assert summary.sessions_written == 1 and len(summary.failed_arcs) == 1
    assert summary.failed_arcs[0].patient_engine == "patient_psi"
    backend2 = FakeBackend(responder)
    with Engines.with_backend(backend2) as engines:
        again = simulate.run_simulation(profiles, engines, config, tmp_path, seed=1)
    assert again.sessions_written == 2 and not again.failed_arcs
    assert not [q for q in backend2.requests if q.role == "baseline_mapper"]  # the checkpointed model was reused
    rows = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist()
    assert len({json.dumps(r["baseline"]["preparation"], sort_keys=True) for r in rows}) == 1


def test_card_sections_count_styles_per_patient_and_symptom_levels(tmp_path):
    config = SimulationConfig(
        sessions=1, turn_cap=2, patient_engine=["patient_psi", "mindeval"], counsellors=["counsellor", "counsellor:b"]
    )
    with Engines.with_backend(FakeBackend(responder)) as engines:
        simulate.run_simulation([make_profile("p1"), make_profile("p2")], engines, config, tmp_path, seed=0)
    rows = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist()
    psi = variant("patient_psi").engine.card_section([r for r in rows if r["patient_engine"] == "patient_psi"])
    assert psi["record_fields"] and psi["patients"] == 2 and sum(n for _, n, _ in psi["style_share"]) == 2
    me = variant("mindeval").engine.card_section([r for r in rows if r["patient_engine"] == "mindeval"])
    assert me["symptom_levels"] == [("moderate depressive symptoms", "mild anxious symptoms", 2)]
