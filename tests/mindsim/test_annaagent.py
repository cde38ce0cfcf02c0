"""The AnnaAgent baseline (docs/baselines.md "AnnaAgent") on the fake engine: the seeded emotion perturbation
and its weights, the complaint chain's stage rule, the memory check, the mapping from our profile, a two-session
arc with its per-turn state in the session rows and the patient export, bounded re-asks, and the role wiring."""

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
from mindsimkit.mindsim.baselines import annaagent
from mindsimkit.mindsim.baselines import annaagent_data as mech
from mindsimkit.mindsim.config import BaselinesConfig, SimulationConfig
from mindsimkit.mindsim.patient_engines import engine_roles, role_schemas, variant
from simfakes import SimResponder, make_profile

CHAIN = [
    "My friend cancelled on me again.",
    "I wonder whether she values me.",
    "Maybe I push people away.",
    "I feel alone with all of it.",
]
MAP_ANSWER = {
    "status": "Low mood most days, sleeping badly, still going to work but withdrawn at home.",
    "statements": ["I don't know why I'm even here.", "It's fine, really."],
    "style": ["guarded", "self-critical", "short answers"],
    "complaint_chain": CHAIN,
}
RECALLED = "Last time I said the job rejections made me feel useless."


class AnnaResponder:
    """Plays AnnaAgent's calls: a fixed mapping, `emotion` every turn, the switch says yes on the client turns
    listed in `switch_on` (counted per session), the memory check says `needs`, recall returns RECALLED."""

    def __init__(self, emotion: str = "sadness", switch_on: tuple[int, ...] = (2,), needs: bool = True):
        self.emotion, self.switch_on, self.needs = emotion, switch_on, needs
        self.sim = SimResponder(end_after=99)

    def __call__(self, req):
        if req.schema_name == "AnnaAgentMap":
            return MAP_ANSWER
        if req.schema_name == "AnnaEmotion":
            return {"emotion": self.emotion}
        if req.schema_name == "ComplaintSwitch":
            said = req.messages[0]["content"].count("\nClient: ")
            return {"recognised": said in self.switch_on}
        if req.schema_name == "MemoryCheck":
            return {"needs_earlier_sessions": self.needs}
        if req.role == "annaagent_modulator":
            return RECALLED
        return self.sim(req)


def run(tmp_path, responder, sessions=2, turn_cap=3, seed=3):
    config = SimulationConfig(sessions=sessions, turn_cap=turn_cap, patient_engine=["annaagent"])
    backend = FakeBackend(responder)
    with Engines.with_backend(backend) as engines:
        summary = simulate.run_simulation([make_profile("p1")], engines, config, tmp_path, seed=seed)
    rows = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist() if summary.sessions_written else []
    return summary, sorted(rows, key=lambda r: r["session_index"]), backend


# -- the emotion taxonomy and its weighted transitions --------------------------------------------------------
def test_the_taxonomy_is_goemotions_in_four_groups():
    tax = mech.taxonomy()
    assert len(tax.emotions) == len(set(tax.emotions)) == 28
    assert {g: len(m) for g, m in tax.groups.items()} == {"positive": 15, "neutral": 1, "ambiguous": 3, "negative": 9}
    assert tax.group_of("grief") == "negative" and tax.group_of("surprise") == "positive"


@pytest.mark.parametrize(
    "emotion,by_group",
    [
        ("sadness", {"negative": 10, "ambiguous": 5, "neutral": 2, "positive": 1}),
        ("neutral", {"negative": 2, "ambiguous": 5, "neutral": 10, "positive": 5}),
        ("confusion", {"negative": 5, "ambiguous": 10, "neutral": 5, "positive": 2}),
        ("joy", {"negative": 1, "ambiguous": 2, "neutral": 5, "positive": 10}),
    ],
)
def test_transition_weights_fall_with_the_distance_between_groups(emotion, by_group):
    tax = mech.taxonomy()
    weights = tax.transition_weights(emotion)
    assert set(weights) == set(tax.emotions)  # PatientHub keeps the emotion itself among the outcomes
    for e, w in weights.items():
        assert w == by_group[tax.group_of(e)], e


def test_perturbation_is_seeded_per_session_and_follows_the_weights():
    a, b = mech.session_rng("s_1"), mech.session_rng("s_1")
    assert [mech.modulate("sadness", a) for _ in range(50)] == [mech.modulate("sadness", b) for _ in range(50)]
    assert [mech.modulate("sadness", mech.session_rng("s_2")) for _ in range(50)] != [
        mech.modulate("sadness", mech.session_rng("s_1")) for _ in range(50)
    ]
    rng = mech.session_rng("many")
    draws = [mech.modulate("sadness", rng) for _ in range(40000)]
    perturbed = [d for d in draws if d.perturbed]
    assert all(d.emotion == d.inferred == "sadness" for d in draws if not d.perturbed)
    assert abs(len(perturbed) / len(draws) - 10 / 101) < 0.01  # a draw of 0..100 above 90
    # From a negative emotion: negative 9 x 10, ambiguous 3 x 5, neutral 1 x 2, positive 15 x 1 (of 122).
    groups = Counter(mech.taxonomy().group_of(d.emotion) for d in perturbed)
    for group, share in {"negative": 90 / 122, "ambiguous": 15 / 122, "neutral": 2 / 122, "positive": 15 / 122}.items():
        assert abs(groups[group] / len(perturbed) - share) < 0.03, group


# -- the complaint chain ------------------------------------------------------------------------------------
def test_the_chain_moves_one_stage_on_a_yes_and_stays_on_its_last_stage():
    assert mech.stage_after(1, False) == 1 and mech.stage_after(1, True) == 2
    assert [mech.complaint_at(CHAIN, s) for s in (1, 4, 5, 9)] == [CHAIN[0], CHAIN[3], CHAIN[3], CHAIN[3]]


# -- the mapping from our profile ---------------------------------------------------------------------------
def test_the_seeker_profile_is_ours_where_we_have_it_and_the_mappers_elsewhere():
    p = make_profile()
    backend = FakeBackend(AnnaResponder())
    with Engines.with_backend(backend) as engines:
        from mindsimkit.mindsim.arc import Roles

        roles = Roles(
            patient=engines.role("patient"),
            counsellor=None,
            scenario_writer=None,
            memory_compactor=None,
            extra={"mapper": engines.role("baseline_mapper")},
        )
        prep = engines.run(
            variant("annaagent").engine.prepare(p, 0, roles, SimulationConfig(patient_engine="annaagent"))
        )
    fixed = annaagent.fixed_fields(p)
    assert fixed == {
        "age": p.persona.age,
        "gender": p.demographics.gender.replace("_", " "),
        "marital_status": p.demographics.relationship.replace("_", " "),
        "occupation": p.persona.occupation.replace("_", " "),
        "symptoms": "Low mood since a redundancy.",
    }
    assert prep.engine == "annaagent" and prep.filled == ["complaint_chain", "statements", "status", "style"]
    assert prep.profile["complaint_chain"] == CHAIN and prep.profile["age"] == fixed["age"]
    (req,) = backend.requests
    assert req.role == "baseline_mapper" and p.persona.persona in req.messages[0]["content"]
    schema = req.response_schema["properties"]["complaint_chain"]
    assert (schema["minItems"], schema["maxItems"]) == (3, 7)


def test_a_chain_shorter_than_three_stages_is_re_asked_not_stored():
    answers = iter([{**MAP_ANSWER, "complaint_chain": CHAIN[:2]}])

    def short_once(req):
        if req.schema_name == "AnnaAgentMap":
            return next(answers, MAP_ANSWER)
        return AnnaResponder()(req)

    backend = FakeBackend(short_once)
    with Engines.with_backend(backend) as engines:
        from mindsimkit.mindsim.arc import Roles

        roles = Roles(
            patient=engines.role("patient"),
            counsellor=None,
            scenario_writer=None,
            memory_compactor=None,
            extra={"mapper": engines.role("baseline_mapper")},
        )
        prep = engines.run(variant("annaagent").engine.prepare(make_profile(), 0, roles, SimulationConfig()))
    assert len(backend.requests) == 2 and prep.profile["complaint_chain"] == CHAIN


# -- sessions -----------------------------------------------------------------------------------------------
def test_a_two_session_arc_records_emotion_stage_and_memory_per_turn(tmp_path):
    summary, rows, backend = run(tmp_path, AnnaResponder())
    assert summary.sessions_written == 2 and not summary.failed_arcs
    first, second = rows
    for r in rows:
        assert r["patient_engine"] == "annaagent" and r["baseline"]["engine"] == "annaagent"
        assert r["turns"][0]["opening"] and r["turns"][0]["annaagent"] is None
        states = [t["annaagent"] for t in r["turns"][1:]]
        assert len(states) == 2 and all(s["inferred_emotion"] == "sadness" for s in states)
        # The switch said yes once two client turns had been said: stage 1, then 2, at the chain's own words.
        assert [s["stage"] for s in states] == [1, 2] and [s["stage_moved"] for s in states] == [False, True]
        assert [s["complaint"] for s in states] == CHAIN[:2]
        assert r["annaagent"]["complaint_chain"] == CHAIN
        assert (r["annaagent"]["stage_start"], r["annaagent"]["stage_end"]) == (1, 2)
        assert "modulator" in r["engines"]
        # The reply is written with the note on the client side only; the counsellor never sees it.
        notes = [m["content"] for m in r["patient_messages"] if m["role"] == "user" and "private note" in m["content"]]
        assert len(notes) == 2 and CHAIN[1] in notes[1]
        assert not any("private note" in m["content"] for m in r["counsellor_messages"])
    # A first session has nothing earlier: the check is not asked and nothing is recalled.
    assert not any(t["annaagent"]["memory_checked"] for t in first["turns"][1:])
    assert first["annaagent"]["earlier_session"] is None and first["annaagent"]["memory_used"] == 0
    # In the second the check is asked every turn, and recall reads the first session's exchange.
    later = [t["annaagent"] for t in second["turns"][1:]]
    assert all(s["memory_checked"] and s["memory_used"] and s["recalled"] == RECALLED for s in later)
    assert second["annaagent"]["earlier_session"] == 0 and second["annaagent"]["memory_used"] == 2
    recalls = [q for q in backend.requests if q.role == "annaagent_modulator" and q.response_schema is None]
    assert len(recalls) == 2
    first_words = first["turns"][1]["message"]
    assert all(first_words in q.messages[0]["content"] for q in recalls)
    assert all("Patient mentioned point 1" in q.messages[0]["content"] for q in recalls)  # the running notes
    assert RECALLED in [m["content"] for m in second["patient_messages"] if m["role"] == "user"][1]
    # Calls per session: 2 structured per client turn, plus the check in the second session.
    by_schema = Counter(q.schema_name for q in backend.requests if q.role == "annaagent_modulator")
    assert by_schema == {"AnnaEmotion": 4, "ComplaintSwitch": 4, "MemoryCheck": 2, "output": 2}
    assert Counter(q.schema_name for q in backend.requests if q.role == "baseline_mapper") == {"AnnaAgentMap": 1}


def test_the_memory_check_gates_recall(tmp_path):
    summary, rows, backend = run(tmp_path, AnnaResponder(needs=False))
    assert summary.sessions_written == 2
    later = [t["annaagent"] for t in rows[1]["turns"][1:]]
    assert all(s["memory_checked"] and not s["memory_used"] and s["recalled"] is None for s in later)
    assert not [q for q in backend.requests if q.role == "annaagent_modulator" and q.response_schema is None]
    assert not any("earlier sessions that bears" in m["content"] for m in rows[1]["patient_messages"])


def test_the_perturbations_of_a_session_are_the_same_on_a_rerun(tmp_path):
    runs = [run(tmp_path / str(i), AnnaResponder(), sessions=1, turn_cap=12)[1] for i in range(2)]
    emotions = [[t["annaagent"]["emotion"] for t in rows[0]["turns"][1:]] for rows in runs]
    assert emotions[0] == emotions[1] and len(emotions[0]) == 11


def test_an_emotion_outside_the_taxonomy_is_re_asked_then_the_arc_fails_counted(tmp_path):
    summary, rows, backend = run(tmp_path, AnnaResponder(emotion="teapot"), sessions=1)
    assert summary.sessions_written == 0 and len(summary.failed_arcs) == 1
    assert summary.failed_arcs[0].patient_engine == "annaagent"
    assert sum(q.schema_name == "AnnaEmotion" for q in backend.requests) == BaselinesConfig().anna_attempts


def test_the_patient_export_carries_the_per_turn_state(tmp_path):
    from mindsimkit.mindsim_app.exports.sft import patient_export

    run(tmp_path, AnnaResponder())
    _, _, details = patient_export(tmp_path)
    turns = [d["annaagent_turns"] for d in details]
    assert [t is None for t in turns[0]] == [True, False, False]
    assert {t["complaint"] for d in turns for t in d if t} == set(CHAIN[:2])


# -- roles, budgets, preflight --------------------------------------------------------------------------------
def test_the_modulator_role_falls_back_to_the_patients_binding():
    cfg = EnginesConfig(
        engines={"e": {"kind": "openai", "base_url": "http://x/v1", "model": "d"}},
        roles={"default": RoleSpec(engine="e", model="d"), "patient": RoleSpec(engine="e", model="p")},
    )
    assert Engines(cfg).role_spec("annaagent_modulator").model == "p"
    assert engine_roles(["annaagent"]) == {"baseline_mapper": "mapper", "annaagent_modulator": "modulator"}


def test_budgets_are_registered_and_the_defaults_hold_the_worst_answers():
    entries = {e.name: e for e in role_schemas() if e.name.startswith("annaagent:")}
    assert set(entries) == {
        "annaagent:AnnaAgentMap",
        "annaagent:AnnaEmotion",
        "annaagent:ComplaintSwitch",
        "annaagent:MemoryCheck",
    }

    class R:
        simulation = {"patient_engine": ["mindsim", "annaagent"], "baselines": {"anna_max_tokens": 300}}

    class Off:
        simulation = {"patient_engine": ["mindsim"]}

    assert all(e.active(R) and not e.active(Off) for e in entries.values())
    b = entries["annaagent:AnnaEmotion"].budget(R)
    assert (b.value, b.setting, b.explicit) == (300, "simulation.baselines.anna_max_tokens", True)
    defaults = BaselinesConfig()
    assert worst_case_tokens(entries["annaagent:AnnaAgentMap"].schema()).tokens <= defaults.anna_map_max_tokens
    for name in ("AnnaEmotion", "ComplaintSwitch", "MemoryCheck"):
        assert worst_case_tokens(entries[f"annaagent:{name}"].schema()).tokens <= defaults.anna_max_tokens


def test_the_session_record_keeps_the_preparation_for_a_resumed_arc(tmp_path):
    _, rows, _ = run(tmp_path, AnnaResponder(), sessions=1)
    from mindsimkit.mindsim.records import SessionRecord

    record = SessionRecord.model_validate(rows[0])
    prep = variant("annaagent").engine.stored_preparation(record)
    assert prep.profile["complaint_chain"] == CHAIN and json.dumps(prep.profile)


def test_the_card_lists_the_emotions_the_replies_were_written_in(tmp_path):
    from restamp import header

    from mindsimkit.mindcore.provenance import base_provenance
    from mindsimkit.mindsim_app.cards import build_dataset_folder

    _, rows, _ = run(tmp_path, AnnaResponder(emotion="nervousness"), sessions=2, turn_cap=3)
    section = variant("annaagent").engine.card_section(rows)
    turns = [t["annaagent"] for r in rows for t in r["turns"][1:]]
    written = Counter(t["emotion"] for t in turns)
    assert section["annaagent_turns"] == 4 and section["stages_moved"] == 2
    assert (section["memory_checked"], section["memory_used"]) == (2, 2)
    assert section["perturbed"] == sum(t["perturbed"] for t in turns)
    info = {"run_id": "a01", "recipe": {"name": "t", "seed": 3}, "provenance": base_provenance()}
    card = (build_dataset_folder(tmp_path, header(info), tmp_path / "dataset") / "README.md").read_text()
    part = card.split("### Patient engines")[1].split("### Screening verdicts")[0]
    assert "AnnaAgent emotions over its 4 client turns" in part
    for emotion, n in written.items():
        assert f"| {emotion} | {n} | {100 * n / 4:.1f}% |" in part


def test_annaagent_beside_every_other_engine_writes_one_sessions_table(tmp_path):
    """Every baseline's preparation shares the `baseline` column: AnnaAgent's fields must not clash in type with
    MindEval's or Patient-Psi's (a string age beside MindEval's number broke the table on the embedded engine)."""
    from test_baselines import responder as others

    anna = AnnaResponder()
    engines_all = ["mindsim", "patientact", "patient_psi", "mindeval", "annaagent"]
    config = SimulationConfig(sessions=1, turn_cap=2, patient_engine=engines_all)

    def both(req):
        return (
            anna(req)
            if req.schema_name.startswith(("Anna", "Complaint", "Memory")) or (req.role == "annaagent_modulator")
            else others(req)
        )

    with Engines.with_backend(FakeBackend(both)) as engines:
        summary = simulate.run_simulation([make_profile("p1")], engines, config, tmp_path, seed=0)
    assert summary.sessions_written == 5 and not summary.failed_arcs
    rows = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist()
    (r,) = [r for r in rows if r["patient_engine"] == "annaagent"]
    assert r["baseline"]["preparation"]["profile"]["complaint_chain"] == CHAIN
    assert r["turns"][1]["annaagent"]["complaint"] == CHAIN[0]
