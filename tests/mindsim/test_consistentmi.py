"""The ConsistentMI patient engine (docs/baselines.md "ConsistentMI") on the fake engine: its tables and rules (topic
distance and engagement, receptivity bands, stage moves, action constraints and draws), the mapping from our profile,
the per-turn tracker calls and their bounded re-asks, and a two-session arc with its state in the session rows and
the transcript export."""

from __future__ import annotations

import json
import random
from typing import Any

import pyarrow.parquet as pq
import pytest

from mindsimkit.mindcore.budget import worst_case_tokens
from mindsimkit.mindcore.config import EnginesConfig, RoleSpec
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindsim import simulate
from mindsimkit.mindsim.arc import Arc, Roles, SessionInput
from mindsimkit.mindsim.baselines import consistentmi as cmi
from mindsimkit.mindsim.config import ConsistentMIConfig, SimulationConfig
from mindsimkit.mindsim.patient_engines import TalkStart, engine_roles, role_schemas, variant
from mindsimkit.mindsim.prompting import TurnFailed
from mindsimkit.mindsim.scenario import Scenario
from mindsimkit.mindsim.schedule import draw_schedule
from mindsimkit.profilegen.moves import load_vocabulary
from simfakes import SCENARIO, SimResponder, make_profile

MAP_ANSWER = {
    "behavior": "skipping football",
    "goal": "going back to football on Sundays",
    "beliefs": ["You believe resting at home is what helps.", "You think nobody there misses you."],
    "plans": ["You could text the captain about Sunday."],
    "motivation_topic": "Career Break",
    "motivation": "You are motivated by getting back into work before the gap shows.",
}


class Script:
    """Answers the tracker from per-call scripts (topic, motivation check, the stage's one weighted action,
    grounding item) and every other role as the simulator's fake does."""

    def __init__(
        self,
        topics: list[str] | None = None,
        motivated: list[bool] | None = None,
        actions: dict[str, str] | None = None,
        item: int = 1,
    ):
        self.topics = list(topics or ["Career Break"])
        self.motivated = list(motivated or [False])
        self.actions = actions or {"contemplation": "hesitate", "preparation": "plan", "precontemplation": "deny"}
        self.item = item
        self.sim = SimResponder(end_after=99)

    def __call__(self, req: Any) -> Any:
        name = req.schema_name or ""
        if name == "ConsistentMIMap":
            return MAP_ANSWER
        if name == "ConsistentMITopic":
            return {"topic": self.topics.pop(0) if len(self.topics) > 1 else self.topics[0]}
        if name == "MotivationCheck":
            answer = self.motivated.pop(0) if len(self.motivated) > 1 else self.motivated[0]
            return {"analysis": "It names the work gap.", "answer": answer}
        if name.startswith("ConsistentMIWeights_"):
            stage = name.split("_", 1)[1]
            return {a: (100 if a == self.actions[stage] else 0) for a in req.response_schema["properties"]}
        if name == "ConsistentMIGrounding":
            return {"item": self.item}
        return self.sim(req)


def prepare(profile: Any = None, backend: Any = None, config: Any = None) -> tuple[Any, Any]:
    backend = backend or FakeBackend(Script())
    config = config or SimulationConfig(patient_engine="consistentmi")
    with Engines.with_backend(backend) as engines:
        roles = Roles(
            patient=engines.role("patient"),
            counsellor=None,
            scenario_writer=None,
            memory_compactor=None,
            extra={"mapper": engines.role("baseline_mapper")},
        )
        prep = engines.run(variant("consistentmi").engine.prepare(profile or make_profile(), 0, roles, config))
    return prep, backend


def play(script: Script, messages: list[str], config: Any = None, carried: Any = None) -> tuple[list[Any], Any, Any]:
    """One session of `messages` from the counsellor; the patient's turns, the participant and the backend."""
    config = config or SimulationConfig(patient_engine="consistentmi")
    profile = make_profile()
    prep, _ = prepare(profile)
    backend = FakeBackend(script)
    plan = draw_schedule(profile.profile_id, 0, config).sessions[0]
    turns = []
    with Engines.with_backend(backend) as engines:
        roles = Roles(
            patient=engines.role("patient"),
            counsellor=None,
            scenario_writer=None,
            memory_compactor=None,
            extra={"tracker": engines.role("consistentmi_tracker")},
        )
        arc = Arc(profile, load_vocabulary(), roles, config, "counsellor", 0, variant("consistentmi"), prep)
        inp = SessionInput(plan=plan, scenario=Scenario.model_validate(SCENARIO), memory=[], carried=carried)
        patient = variant("consistentmi").engine.participant(TalkStart(arc, inp, "s1", None, config))
        turns.append(patient.open(SCENARIO["opening_message"]))
        for i, text in enumerate(messages, 1):
            turns.append(engines.run(patient.turn(i, text)))
    return turns, patient, backend


# -- tables and rules ------------------------------------------------------------------------------------------
def test_the_topic_graph_gives_chains_distances_and_engagement_as_patienthub_does():
    t = cmi.tables()
    assert len(t.links) == 74
    assert t.chain("Career Break") == ["Career Break", "Employment", "Economy"]
    assert t.chain("Divorce") == ["Divorce", "Family", "Interpersonal Relationships"]
    assert "Career Break" in t.motivation_topics() and "Health" not in t.motivation_topics()
    assert cmi.distance("Career Break", "Employment") == 1
    assert cmi.distance("Career Break", "Health") == 4  # → Employment 1, → Workplace Wellness 2, → Health 1
    assert cmi.engagement_level("Career Break", "Career Break") == (4, 0.0)
    assert cmi.engagement_level("Career Break", "Economy") == (3, 2)
    assert cmi.engagement_level("Career Break", "Health") == (2, 4)
    assert cmi.engagement_level("Career Break", "Divorce")[0] == 1
    # The links are directed as the authors' file lists them: a leaf with none reaches nothing.
    assert cmi.distance("Maternal Health", "Sexual Health") == float("inf")


@pytest.mark.parametrize(
    "receptivity,band",
    [(1.0, "very_low"), (1.99, "very_low"), (2.0, "low"), (3.4, "medium"), (4.0, "high"), (5.0, "very_high")],
)
def test_receptivity_falls_in_its_band(receptivity, band):
    assert cmi.tables().band(receptivity).band == band


def test_a_contemplating_client_with_no_belief_left_moves_to_preparation_and_no_one_else_moves():
    assert cmi.stage_after_update("contemplation", []) == "preparation"
    assert cmi.stage_after_update("contemplation", ["You believe it helps."]) == "contemplation"
    assert cmi.stage_after_update("precontemplation", []) == "precontemplation"
    assert cmi.stage_after_update("preparation", []) == "preparation"


def test_actions_without_material_are_ruled_out_and_all_zero_falls_back_to_engage():
    full = {"personas": ["p"], "beliefs": ["b"], "plans": ["x"]}
    pre = {"deny": 5, "downplay": 5, "blame": 5, "inform": 5, "engage": 5}
    assert cmi.constrained(pre, "precontemplation", full) == pre
    assert cmi.constrained(pre, "precontemplation", {**full, "personas": []})["inform"] == 0
    assert cmi.constrained(pre, "precontemplation", {**full, "beliefs": []})["blame"] == 0
    con = {"inform": 1, "engage": 1, "hesitate": 1, "doubt": 1, "acknowledge": 1}
    assert cmi.constrained(con, "contemplation", {**full, "beliefs": []})["hesitate"] == 0
    prep = {"inform": 1, "engage": 1, "reject": 1, "accept": 1, "plan": 1}
    assert cmi.constrained(prep, "preparation", {**full, "plans": []})["plan"] == 0
    assert cmi.draw_action({"deny": 0, "blame": 0}, random.Random(0)) == "engage"
    assert cmi.draw_action({"deny": 0, "blame": 7}, random.Random(0)) == "blame"
    draws = [cmi.draw_action({"deny": 1, "blame": 3}, random.Random(i)) for i in range(400)]
    assert 240 < draws.count("blame") < 360  # 300 expected


# -- the mapping --------------------------------------------------------------------------------------------
def test_our_profile_feeds_the_client_fields_and_the_mapper_writes_the_rest():
    p = make_profile()
    fixed = cmi.fixed_fields(p)
    assert "Skips football with friends" in fixed["target"]
    assert fixed["personas"] == [
        "Low mood since a redundancy.",
        "No routine now (two months ago).",
        "A critical father.",
        "Sister texts daily.",
    ]
    assert fixed["receptivity"] == 3.0 and fixed["stage"] == "precontemplation"
    prep, backend = prepare(p)
    (req,) = [q for q in backend.requests if q.schema_name == "ConsistentMIMap"]
    assert req.role == "baseline_mapper"
    assert req.response_schema["properties"]["motivation_topic"]["enum"] == cmi.tables().motivation_topics()
    assert "I'm a waste of space." in req.messages[0]["content"] and fixed["target"] in req.messages[0]["content"]
    assert prep.filled == ["behavior", "beliefs", "goal", "motivation", "motivation_topic", "plans"]
    assert prep.profile["motivation_chain"] == ["Career Break", "Employment", "Economy"]
    p.style.frustration_reactivity = "high"
    assert cmi.fixed_fields(p)["receptivity"] == 2.0


def test_a_profile_without_a_coping_behaviour_is_refused_before_any_call():
    p = make_profile()
    p.formulation.perpetuating = []
    with pytest.raises(InputError, match="no perpetuating"):
        variant("consistentmi").engine.check_profiles([p])


def test_a_motivation_topic_outside_the_graph_is_re_asked_not_stored():
    def bad_once(req, seen=[]):  # noqa: B006 - the list remembers the first call on purpose
        if req.schema_name == "ConsistentMIMap" and not seen:
            seen.append(1)
            return {**MAP_ANSWER, "motivation_topic": "Astrology"}
        return Script()(req)

    prep, backend = prepare(backend=FakeBackend(bad_once))
    assert sum(q.schema_name == "ConsistentMIMap" for q in backend.requests) == 2
    assert prep.profile["motivation_topic"] == "Career Break"


# -- turns ------------------------------------------------------------------------------------------------------
def test_hitting_the_motivation_moves_precontemplation_through_contemplation_to_preparation():
    script = Script(topics=["Career Break", "Economy", "Economy", "Economy"], motivated=[True])
    turns, patient, backend = play(script, ["What about work?", "How is that?", "And then?", "What now?"])
    states = [t.consistentmi for t in turns[1:]]
    assert turns[0].consistentmi is None  # the scenario's opening message decides nothing
    # 1: on the motivation topic, the check says yes: the client acknowledges, then contemplates.
    assert (states[0].stage, states[0].action, states[0].engagement, states[0].motivated) == (
        "motivated",
        "acknowledge",
        4,
        True,
    )
    assert states[0].stage_after == "contemplation" and states[0].weights is None
    assert "onto something: Career Break" in states[0].instruction
    # 2-3: contemplating, it hesitates on each sustaining belief in turn and uses it up.
    assert [(s.stage, s.action) for s in states[1:3]] == [("contemplation", "hesitate")] * 2
    assert [s.grounding for s in states[1:3]] == MAP_ANSWER["beliefs"]
    assert states[1].engagement == 3 and states[1].motivated is None  # Economy: two steps up the chain
    assert "Career Break" not in states[1].instruction  # no engagement hint outside precontemplation
    # 4: no belief left, so it prepares and proposes its plan.
    assert (states[3].stage, states[3].action, states[3].grounding) == ("preparation", "plan", MAP_ANSWER["plans"][0])
    assert MAP_ANSWER["plans"][0] in states[3].instruction
    assert patient.stage == "preparation" and patient.beliefs == [] and patient.plans == []
    # The instruction rides on its request only; the history keeps the counsellor's words.
    reply = [q for q in backend.requests if q.role == "patient"][-1]
    assert reply.messages[-1]["content"].endswith(states[3].instruction)
    assert all("[" not in m["content"] for m in patient.history[1:] if m["role"] == "user")


def test_a_precontemplation_draw_adds_the_receptivity_bands_weights():
    turns, _, _ = play(Script(topics=["Economy"]), ["How is work?"])
    s = turns[1].consistentmi
    weights = json.loads(s.weights)
    band = cmi.tables().band(3.0).weights
    assert weights == {a: w + (100 if a == "deny" else 0) for a, w in band.items()}
    assert s.stage == "precontemplation" and s.action in weights and s.receptivity == 3.0


def test_five_off_topic_turns_after_the_early_ones_make_a_precontemplation_client_terminate():
    config = SimulationConfig(patient_engine="consistentmi", consistentmi={"end_on_terminate": True})
    messages = [f"Tell me about your family {i}?" for i in range(10)]
    turns, _, _ = play(Script(topics=["Divorce"]), messages, config=config)
    counts = [t.consistentmi.off_topic for t in turns[1:]]
    assert counts == [0, 0, 0, 0, 0, 1, 2, 3, 4, 5]
    assert [t.consistentmi.action == "terminate" for t in turns[1:]] == [False] * 9 + [True]
    assert turns[-1].end_conversation and not any(t.end_conversation for t in turns[:-1])
    # By default the client says it wants to stop and the session runs on (PatientHub).
    turns, _, _ = play(Script(topics=["Divorce"]), messages)
    assert turns[-1].consistentmi.action == "terminate" and not turns[-1].end_conversation


def test_grounding_needs_a_question_and_falls_back_to_a_seeded_pick():
    turns, _, backend = play(
        Script(topics=["Economy"], actions={"precontemplation": "downplay"}, item=0),
        ["Work has been on your mind.", "What keeps you at home?"],
    )
    assert turns[1].consistentmi.grounding is None  # no question: nothing to ground
    assert turns[2].consistentmi.grounding in MAP_ANSWER["beliefs"]  # none fitted: one drawn, not used up
    assert sum(q.schema_name == "ConsistentMIGrounding" for q in backend.requests) == 1


def test_a_tracker_answer_that_never_fits_fails_the_turn_and_a_bad_one_is_re_asked():
    class Bad(Script):
        def __init__(self, times: int):
            super().__init__(topics=["Economy"])
            self.times = times

        def __call__(self, req):
            if req.schema_name == "ConsistentMITopic" and self.times:
                self.times -= 1
                return {"topic": "Astrology"}
            return super().__call__(req)

    turns, _, backend = play(Bad(1), ["How is work?"])
    assert turns[1].consistentmi.topic == "Economy"
    assert sum(q.schema_name == "ConsistentMITopic" for q in backend.requests) == 2
    assert all(q.role == "consistentmi_tracker" for q in backend.requests if q.schema_name == "ConsistentMITopic")
    with pytest.raises(TurnFailed, match="consistentmi topic"):
        play(Bad(99), ["How is work?"])


# -- the arc ------------------------------------------------------------------------------------------------
def test_a_two_session_arc_carries_the_stage_and_records_every_turns_state(tmp_path):
    config = SimulationConfig(sessions=2, turn_cap=4, patient_engine=["consistentmi"])
    script = Script(topics=["Career Break", "Economy"], motivated=[True])
    backend = FakeBackend(script)
    with Engines.with_backend(backend) as engines:
        summary = simulate.run_simulation([make_profile("p1")], engines, config, tmp_path, seed=0)
    assert summary.sessions_written == 2 and not summary.failed_arcs
    rows = sorted(
        pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist(), key=lambda r: r["session_index"]
    )
    first, second = (r["baseline"] for r in rows)
    assert (first["stage_start"], first["stage_end"]) == ("precontemplation", "contemplation")
    assert first["left"] == {"beliefs": [], "plans": MAP_ANSWER["plans"]}
    # The second session starts where the first ended: no belief left, so it prepares at once.
    assert second["stage_start"] == "contemplation" and rows[1]["turns"][1]["consistentmi"]["stage"] == "preparation"
    for r in rows:
        assert r["patient_engine"] == "consistentmi" and {"mapper", "tracker"} <= set(r["engines"])
        assert all(t["consistentmi"]["action"] for t in r["turns"][1:])
        assert set(r["prompts"]) >= {cmi.TRACKER_TEMPLATE, cmi.INSTRUCTION_TEMPLATE}
    assert sum(q.schema_name == "ConsistentMIMap" for q in backend.requests) == 1  # one preparation per patient
    lines = [json.loads(line) for line in (tmp_path / "transcripts" / "transcripts.jsonl").read_text().splitlines()]
    for line in lines:
        assert [s["turn"] for s in line["patient_states"]] == [1, 2, 3]
        assert {"stage", "topic", "engagement", "action", "receptivity"} <= set(line["patient_states"][0])
    fresh = SimulationConfig(
        sessions=2, turn_cap=4, patient_engine=["consistentmi"], consistentmi={"carry_state": False}
    )
    with Engines.with_backend(FakeBackend(Script(topics=["Economy"]))) as engines:
        simulate.run_simulation([make_profile("p1")], engines, fresh, tmp_path / "fresh", seed=0)
    rows = pq.read_table(tmp_path / "fresh" / "sessions" / "sessions.parquet").to_pylist()
    assert {r["baseline"]["stage_start"] for r in rows} == {"precontemplation"}


def test_other_engines_rows_and_transcripts_carry_no_consistentmi_fields(tmp_path):
    config = SimulationConfig(sessions=1, turn_cap=2, patient_engine=["patient_psi"])
    from test_baselines import responder

    with Engines.with_backend(FakeBackend(responder)) as engines:
        simulate.run_simulation([make_profile("p1")], engines, config, tmp_path, seed=0)
    line = json.loads((tmp_path / "transcripts" / "transcripts.jsonl").read_text().splitlines()[0])
    assert "patient_states" not in line
    assert "consistentmi" not in SimulationConfig().model_dump()


# -- wiring ----------------------------------------------------------------------------------------------------
def test_the_tracker_role_falls_back_to_the_patient_and_its_budgets_fit_the_worst_case():
    cfg = EnginesConfig(
        engines={"e": {"kind": "openai", "base_url": "http://x/v1", "model": "d"}},
        roles={"default": RoleSpec(engine="e", model="d"), "patient": RoleSpec(engine="e", model="p")},
    )
    assert Engines(cfg).role_spec("consistentmi_tracker").model == "p"
    assert engine_roles(["consistentmi"]) == {"baseline_mapper": "mapper", "consistentmi_tracker": "tracker"}
    entries = {e.name: e for e in role_schemas() if e.name.startswith("consistentmi:")}
    assert "consistentmi:ConsistentMIMap" in entries and "consistentmi:ConsistentMIWeights_preparation" in entries

    class R:
        simulation = {"patient_engine": ["mindsim", "consistentmi"], "consistentmi": {"tracker_max_tokens": 900}}

    class Other:
        simulation = {"patient_engine": ["mindsim"]}

    tracker = entries["consistentmi:MotivationCheck"]
    assert tracker.active(R) and not tracker.active(Other)
    b = tracker.budget(R)
    assert (b.value, b.setting, b.explicit) == (900, "simulation.consistentmi.tracker_max_tokens", True)
    default = ConsistentMIConfig().tracker_max_tokens
    for name, e in entries.items():
        if e.role == "consistentmi_tracker":
            assert worst_case_tokens(e.schema()).tokens <= default, name
    assert set(variant("consistentmi").engine.prompt_estimates()) == {"consistentmi_tracker"}


def test_the_card_section_counts_end_stages_and_actions_from_the_rows(tmp_path):
    config = SimulationConfig(
        sessions=1, turn_cap=4, patient_engine=["consistentmi"], counsellors=["counsellor", "counsellor:b"]
    )
    with Engines.with_backend(FakeBackend(Script(topics=["Career Break", "Economy"], motivated=[True]))) as engines:
        simulate.run_simulation([make_profile("p1")], engines, config, tmp_path, seed=0)
    rows = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist()
    section = variant("consistentmi").engine.card_section(rows)
    assert section["record_fields"] and section["patients"] == 1
    actions = [t["consistentmi"]["action"] for r in rows for t in r["turns"][1:]]
    assert dict(section["actions"]) == {a: actions.count(a) for a in set(actions)}
    ends = [r["baseline"]["stage_end"] for r in rows]
    assert dict(section["stage_end"]) == {e: ends.count(e) for e in set(ends)} and len(ends) == 2
    # The dataset card explains its fields and shows the counts.
    from restamp import header

    from mindsimkit.mindcore.provenance import base_provenance
    from mindsimkit.mindsim_app.cards import build_dataset_folder

    info = {"run_id": "c01", "recipe": {"name": "t", "seed": 0}, "provenance": base_provenance()}
    card = (build_dataset_folder(tmp_path, header(info), tmp_path / "dataset") / "README.md").read_text()
    assert "`turns[].consistentmi`" in card and "`stage_end`" in card and "ConsistentMI baseline patient" in card
    for action in set(actions):
        assert f"| {action} | {actions.count(action)} |" in card
