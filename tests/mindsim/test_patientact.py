"""PatientAct patient engine on the fake engine (mindsim/patientact/, its wiring in mindsim/session.py): trust
gating, blocked items as pressure, bounded stepped trust, the three ablations, trust across sessions, and
invalid step answers re-asked then counted."""

from __future__ import annotations

import asyncio
import random

import pytest

from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindcore.types import ChatRequest
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.patientact.data import trust_rules
from mindsimkit.mindsim.patientact.decompose import Decomposition, DraftItem, Piece, make_item
from mindsimkit.mindsim.patientact.retrieval import gate, relevant, stems
from mindsimkit.mindsim.patientact.seed import psych_seed
from mindsimkit.mindsim.patientact.trust import apply_change, session_start
from mindsimkit.mindsim.prompting import TurnFailed
from mindsimkit.mindsim.records import ScenarioRecord, SessionRecord, session_id
from mindsimkit.mindsim.scenario import Scenario
from mindsimkit.mindsim.schedule import SessionPlan, draw_schedule
from mindsimkit.mindsim.session import Arc, Roles, SessionInput, run_arc, run_session
from mindsimkit.profilegen.moves import load_vocabulary
from simfakes import SCENARIO, make_profile

V = load_vocabulary()
SLEEP = "I lie awake until four most nights and drag myself through the morning."
WORK = "My manager stopped giving me the client calls after the spring review."
FATHER = "When I was nine my dad left a birthday party early because I cried, and never came to another."
CORE = "Deep down I think I am a waste of space."
STATIC = {
    "demographics": "41, man, supervisor, lives with partner.",
    "current_concern": "Low mood since losing the job.",
    "precipitating": "two months ago: lost the job.",
    "protective": ["Sister texts daily."],
    "coping": ["keeps busy and jokes it off"],
    "emotional_range": "Irritation comes easily; sadness is kept down.",
    "therapist_wish": "to be taken seriously",
    "therapist_expects": "to be judged",
    "therapist_reaction": "keeps it light",
}
ITEMS = [
    {
        "id": "m1",
        "type": "symptom",
        "source": "test",
        "content": SLEEP,
        "topic": "sleep",
        "level": 1.5,
        "tags": ["sleep", "nights", "tired"],
        "category": "physical_symptom",
        "discomfort": False,
    },
    {
        "id": "m2",
        "type": "pattern",
        "source": "test",
        "content": WORK,
        "topic": "work",
        "level": 3.0,
        "tags": ["work", "manager", "review"],
        "category": "maintenance_cycle",
        "discomfort": False,
    },
    {
        "id": "m3",
        "type": "memory",
        "source": "test",
        "content": FATHER,
        "topic": "family history",
        "level": 4.0,
        "tags": ["father", "childhood", "birthday"],
        "category": "formative_memory",
        "discomfort": True,
    },
    {
        "id": "m4",
        "type": "core_belief",
        "source": "test",
        "content": CORE,
        "topic": "how I see myself",
        "level": 4.0,
        "tags": ["worth", "yourself", "waste"],
        "category": "shame_or_trauma",
        "discomfort": True,
    },
]


def draft_answer(req: ChatRequest, shift: float = 0.0, category: str = "emotional_state") -> dict:
    """A decomposer's answer with exactly as many entries as the request's schema asks for."""
    n = req.response_schema["properties"]["items"]["minItems"]
    return {
        "items": [
            {"topic": f"area {i}", "shift": shift, "tags": [f"tag{i}a", f"tag{i}b", f"tag{i}c"], "category": category}
            for i in range(n)
        ]
    }


PSYCH = {
    "intermediate_beliefs": ["If I slow down, people will see I'm useless."],
    "automatic_thoughts": ["here we go again"],
    "triggers": ["job rejection emails"],
    "coping_patterns": ["keeps busy and jokes it off"],
    "emotional_range": "Quick to irritation; sadness kept out of sight.",
    "therapist_pattern": {
        "wish": "to be taken seriously",
        "response_of_other": "judgement",
        "response_of_self": "keeps it light",
    },
    "interpersonal_patterns": [
        {"domain": "partner", "wish": "to be relied on", "response_of_other": "worry", "response_of_self": "hides it"},
    ],
}
COUNSELLOR = [
    "How have you been sleeping lately?",
    "Can you tell me about your father?",
    "And how are things at work with your manager?",
    "What was your childhood like?",
]


class PAResponder:
    """Plays every role. `trust` is the sequence of trust changes (last repeats); `bad_first` names a step
    whose first answer is invalid; `bad_always` a step that never answers validly."""

    CRITERION = {
        "unchanged": "proceeding_normally",
        "rise_slight": "named_unsaid",
        "rise_significant": "respected_redirect",
        "fall_slight": "formulaic",
        "fall_significant": "missed_resistance",
    }

    def __init__(
        self,
        trust=("unchanged",),
        behaviour="resistance",
        end_after=99,
        bad_first=None,
        bad_always=None,
        reaction=("challenged", "moderate"),
        criteria=None,
    ):
        self.trust = list(trust)
        self.behaviour = behaviour
        self.reaction = reaction
        self.end_after = end_after
        self.bad_first = bad_first
        self.bad_always = bad_always
        self.criteria = criteria
        self.seen: dict[str, int] = {}

    def __call__(self, req: ChatRequest):
        name = req.schema_name
        if name:
            self.seen[name] = self.seen.get(name, 0) + 1
        if name == "Scenario":
            return SCENARIO
        if name == "DecompositionDraft":
            return draft_answer(req)
        if name == "PsychFormulation":
            return PSYCH
        if name in (self.bad_always, self.bad_first) and (name == self.bad_always or self.seen[name] == 1):
            return {
                "why": "x",
                "reaction": "furious",
                "intensity": "extreme",
                "behaviour": "shout",
                "pattern": "?",
                "change": "skyrocket",
                "criterion": "?",
                "end_conversation": "maybe",
            }
        if name == "Reaction":
            return {"why": "it stings", "reaction": self.reaction[0], "intensity": self.reaction[1]}
        if name == "Behaviour":
            turns = self.seen[name]
            b = self.behaviour if isinstance(self.behaviour, str) else self.behaviour[(turns - 1) % len(self.behaviour)]
            out = {"why": "not ready", "behaviour": b, "end_conversation": turns >= self.end_after}
            # Without `allow_end` the schema offers no way out, and an answer must fit the schema it was given.
            if "end_conversation" not in ((req.response_schema or {}).get("properties") or {}):
                out.pop("end_conversation")
            return out
        if name == "Resistance":
            return {"why": "I shut down", "pattern": "minimal_talk"}
        if name == "TrustChange":
            n = self.seen[name] - 1
            change = self.trust[min(n, len(self.trust) - 1)]
            criterion = self.criteria[min(n, len(self.criteria) - 1)] if self.criteria else self.CRITERION[change]
            return {"why": "felt pushed", "criterion": criterion, "change": change}
        if req.role == "memory_compactor":
            return "- Patient talked about sleep."
        if req.role.startswith("counsellor"):
            n = sum(m["role"] == "assistant" for m in req.messages)
            return COUNSELLOR[n % len(COUNSELLOR)]
        return "dunno really."


def _roles(engines):
    return Roles(
        *(engines.role(r) for r in ("patient", "counsellor", "scenario_writer", "memory_compactor")),
        extra={
            "appraiser": engines.role("patient_appraiser"),
            "decomposer": engines.role("profile_decomposer"),
            "matcher": engines.role("patient_matcher"),
        },
    )


def decomposition(pid="p1", seed=0) -> Decomposition:
    from mindsimkit.mindsim.patientact.decompose import MemoryItem, StaticLayer

    return Decomposition(
        patient_id=pid,
        seed=seed,
        psych=psych_seed(make_profile(pid), seed),
        static=StaticLayer(**STATIC),
        items=[MemoryItem(**it) for it in ITEMS],
    )


def run(
    responder,
    *,
    trust_start=2.5,
    turn_cap=5,
    decomp=None,
    counsellor_template="counsellor/system.jinja2",
    opening="patient",
    scenario=None,
    **pa,
):
    backend = FakeBackend(responder)
    config = SimulationConfig(
        sessions=1,
        turn_cap=turn_cap,
        patient_engine="patientact",
        patientact=pa,
        counsellor_template=counsellor_template,
        opening=opening,
    )
    profile = make_profile("p1")
    plan = draw_schedule("p1", 0, config).sessions[0]
    with Engines.with_backend(backend) as engines:
        arc = Arc.of(
            profile,
            V,
            _roles(engines),
            config,
            counsellor="counsellor",
            seed=0,
            engine="patientact",
            preparation=decomp or decomposition(),
        )
        rec = asyncio.run(
            run_session(arc, SessionInput(plan, Scenario(**(scenario or SCENARIO)), [], carried=trust_start))
        )
        ledger = engines.ledger
    return rec, backend, ledger


def _content(req: ChatRequest) -> str:
    return "\n".join(str(m.get("content") or "") for m in req.messages)


# -- the trust gate ----------------------------------------------------------------------------------------


def test_item_above_trust_never_reaches_any_prompt_and_blocked_item_is_named_as_pressure():
    rec, backend, _ = run(PAResponder(trust=["unchanged"]))
    assert all(t.patientact.trust_before == 2.5 for t in rec.turns)
    for req in backend.requests:
        assert FATHER not in _content(req) and WORK not in _content(req) and CORE not in _content(req)
    father_turn = rec.turns[2].patientact  # answers "tell me about your father"
    assert father_turn.relevant == ["m3"] and father_turn.blocked == ["m3"] and father_turn.retrieved == []
    assert "family history" in father_turn.signal and "not ready" in father_turn.signal
    work_turn = rec.turns[3].patientact  # above trust, no discomfort: neither shown nor named
    assert work_turn.withheld == ["m2"] and work_turn.blocked == [] and "work" not in work_turn.signal.split("(")[-1]
    sleep_turn = rec.turns[1].patientact
    assert sleep_turn.retrieved == ["m1"] and SLEEP in sleep_turn.signal
    # The signal rides with the counsellor's message on the patient side only, in that turn's request alone.
    replies = [r for r in backend.requests if r.role == "patient"]
    assert replies[0].messages[-1]["content"].endswith(sleep_turn.signal)
    assert rec.patient_messages[2]["content"] == rec.counsellor_messages[2]["content"]
    assert all("[inner state]" not in m["content"] for m in rec.counsellor_messages)
    assert all("[inner state]" not in m["content"] for m in rec.transcript())


def test_an_item_retrieved_at_high_trust_is_out_of_view_once_trust_falls():
    """Signals live one turn: what the gate let through at 4.0 is not in any later request once trust is lower."""
    from test_patientact_rules import Says

    rec, backend, _ = run(
        Says(
            ["Can you tell me about your father?", "How have you been sleeping?"],
            trust=["fall_significant", "unchanged"],
        ),
        trust_start=4.0,
        turn_cap=4,
    )
    first, second = rec.turns[1].patientact, rec.turns[2].patientact
    assert first.retrieved == ["m3"] and FATHER in first.signal and second.trust_before == 3.5
    replies = [r for r in backend.requests if r.role == "patient"]
    assert FATHER in replies[0].messages[-1]["content"]
    after = backend.requests[backend.requests.index(replies[0]) + 1 :]
    assert after and all(FATHER not in _content(r) for r in after)
    assert all("[inner state]" not in m["content"] for m in rec.patient_messages[1:])
    assert sum("[inner state]" in m["content"] for m in replies[1].messages[1:]) == 1


def test_item_is_retrieved_once_trust_reaches_its_level():
    rec, _, _ = run(PAResponder(trust=["rise_significant"]), trust_start=3.0, turn_cap=8)
    father = [t.patientact for t in rec.turns[1:] if "m3" in t.patientact.relevant]
    assert father and all(("m3" in p.retrieved) == (p.trust_before >= 4.0) for p in father)
    assert any("m3" in p.retrieved for p in father) and any("m3" in p.blocked for p in father)


def test_system_prompts_stay_byte_identical_within_a_session():
    rec, backend, _ = run(PAResponder(trust=["rise_slight", "fall_slight"]))
    for role in ("patient", "patient_appraiser"):
        systems = {r.messages[0]["content"] for r in backend.requests if r.role == role}
        assert len(systems) == 1, role
    assert rec.patient_system_prompt in {r.messages[0]["content"] for r in backend.requests if r.role == "patient"}
    assert rec.patientact.appraiser_system_prompt in {r.messages[0]["content"] for r in backend.requests}


# -- trust ----------------------------------------------------------------------------------------------


def test_trust_stays_on_the_scale_and_moves_only_by_allowed_steps():
    rng = random.Random(7)
    changes = list(trust_rules().changes)
    rec, _, _ = run(PAResponder(trust=[rng.choice(changes) for _ in range(40)]), turn_cap=40)
    for t in rec.turns[1:]:
        p = t.patientact
        assert 1.0 <= p.trust_after <= 4.0
        assert round(p.trust_after - p.trust_before, 2) in {0.0, 0.25, -0.25, 0.5, -0.5}
    assert rec.patientact.trust_end == rec.turns[-1].patientact.trust_after


def test_trust_rules_caps_and_bounds():
    assert apply_change(4.0, "rise_significant", "anxious") == (4.0, 0.0)
    assert apply_change(1.25, "fall_significant", "anxious") == (1.0, -0.25)
    assert apply_change(2.5, "rise_significant", "avoidant") == (2.75, 0.25)  # avoidant trust builds slowly
    assert apply_change(2.5, "rise_significant", "disorganized") == (3.0, 0.5)
    with pytest.raises(ValueError):
        apply_change(2.5, "soar", "anxious")
    rng = random.Random(3)
    t = 2.5
    for _ in range(500):
        new, delta = apply_change(
            t, rng.choice(list(trust_rules().changes)), rng.choice(["avoidant", "anxious", "disorganized"])
        )
        assert 1.0 <= new <= 4.0 and delta in {0.0, 0.25, -0.25, 0.5, -0.5}
        t = new


def test_session_start_offsets_and_drift():
    config = SimulationConfig(sessions=3)
    plans = draw_schedule("p1", 0, config).sessions
    first = plans[0].model_copy(update={"concealment": "closed"})
    assert session_start(first, None, None, 0.0) == 2.0
    later = plans[1].model_copy(update={"concealment": "guarded", "gap_hours": 48})
    assert session_start(later, first, 3.5, 0.0) == 4.0  # carried, plus the concealment opening
    assert session_start(later, first, 3.5, 0.5) == 3.0  # two days of drift toward 2.5, not past it
    assert session_start(later, first, 3.5, 4.0) == 2.5
    assert session_start(later, later, 1.0, 0.25) == 1.5


# -- ablations ------------------------------------------------------------------------------------------


def _names(backend):
    steps = {"Reaction", "Behaviour", "Resistance", "TrustChange"}
    return [r.schema_name for r in backend.requests if r.schema_name in steps]


def test_without_trust_gating_relevant_items_are_all_retrieved_and_nothing_else_changes():
    full, fb, _ = run(PAResponder())
    off, ob, _ = run(PAResponder(), trust_gating=False)
    for a, b in zip(full.turns[1:], off.turns[1:]):
        assert a.patientact.relevant == b.patientact.relevant
        assert b.patientact.retrieved == b.patientact.relevant and not b.patientact.blocked
        assert (a.patientact.reaction, a.patientact.behaviour, a.patientact.trust_after) == (
            b.patientact.reaction,
            b.patientact.behaviour,
            b.patientact.trust_after,
        )
    assert _names(fb) == _names(ob)
    assert FATHER in off.turns[2].patientact.signal
    assert full.patient_system_prompt == off.patient_system_prompt


def test_without_dynamic_memory_the_whole_profile_is_in_the_system_prompt_and_nothing_is_retrieved():
    from mindsimkit.profilegen.psych import PsychFormulation

    decomp = decomposition().model_copy(update={"formulation": PsychFormulation(**PSYCH)})
    full, fb, _ = run(PAResponder(), decomp=decomp)
    off, ob, _ = run(PAResponder(), decomp=decomp, dynamic_memory=False)
    whole = [
        make_profile("p1").writer_brief,
        PSYCH["intermediate_beliefs"][0],
        PSYCH["automatic_thoughts"][0],
        PSYCH["triggers"][0],
        SCENARIO["automatic_thoughts"][0],
        SCENARIO["behaviors"][0],
    ]
    for text in whole:
        assert text in off.patient_system_prompt and text not in full.patient_system_prompt, text
    # The steps see what they see in every arm: w/o DM changes the patient's prompt alone.
    assert off.patientact.appraiser_system_prompt == full.patientact.appraiser_system_prompt
    for text in whole:
        assert not any(text in _content(r) for r in ob.requests if r.role == "patient_appraiser"), text
    assert all(not (t.patientact.relevant or t.patientact.retrieved or t.patientact.blocked) for t in off.turns)
    assert _names(fb) == _names(ob)


def test_without_the_pipeline_no_reaction_behaviour_or_resistance_steps_run():
    full, fb, _ = run(PAResponder())
    off, ob, _ = run(PAResponder(), pipeline=False)
    # One switch: w/o Pipe's signal keeps the content (items, the blocked note) and no behaviour cue, trust
    # level included.
    for t in off.turns[1:]:
        assert "How much you trust" not in t.patientact.signal and "deflect" not in t.patientact.signal
    assert all("How much you trust" in t.patientact.signal for t in full.turns[1:])
    assert "not ready to share (family history)" in off.turns[2].patientact.signal
    assert {"Reaction", "Behaviour", "Resistance"} <= set(_names(fb))
    assert set(_names(ob)) == {"TrustChange"}
    for a, b in zip(full.turns[1:], off.turns[1:]):
        assert (b.patientact.reaction, b.patientact.behaviour, b.patientact.resistance_pattern) == (None, None, None)
        assert (a.patientact.relevant, a.patientact.retrieved, a.patientact.blocked) == (
            b.patientact.relevant,
            b.patientact.retrieved,
            b.patientact.blocked,
        )
        assert b.patientact.trust_after == a.patientact.trust_after
    # The shared prompt differs only in how it explains the note: without the steps it carries no reaction or
    # inclination, so the prompt says nothing of them nor of steering away (PatientAct Table 4's w/o Pipe).
    assert "steer away" in full.patient_system_prompt and "steer away" not in off.patient_system_prompt
    assert "inclined to act" not in off.patient_system_prompt
    kept = [ln for ln in full.patient_system_prompt.splitlines() if not ln.startswith("Each counsellor message")]
    assert kept == [ln for ln in off.patient_system_prompt.splitlines() if not ln.startswith("Each counsellor message")]


def test_resistance_pattern_only_follows_resistance():
    rec, backend, _ = run(PAResponder(behaviour="recounting"))
    assert "Resistance" not in _names(backend)
    assert all(
        t.patientact.resistance_pattern is None and t.patientact.behaviour == "recounting" for t in rec.turns[1:]
    )
    rec, _, _ = run(PAResponder(behaviour="resistance"))
    assert all(t.patientact.resistance_pattern == "minimal_talk" for t in rec.turns[1:])
    assert "two or three words" in rec.turns[1].patientact.signal


# -- invalid output -------------------------------------------------------------------------------------


def test_invalid_step_answer_is_reasked_and_the_call_counts_its_attempts():
    rec, _, ledger = run(PAResponder(bad_first="Reaction"))
    steps = ledger.totals(role="patient_appraiser", kind="structured")
    assert steps["failed"] == 0 and steps["attempts"] == steps["calls"] + 1  # one step asked twice, then fine
    assert rec.turns[1].patientact.reaction == "challenged"


def test_a_step_that_never_fits_fails_the_turn():
    with pytest.raises(TurnFailed, match="patientact trust step"):
        run(PAResponder(bad_always="TrustChange"))


# -- arcs -----------------------------------------------------------------------------------------------


def _arc(responder, store, sessions=2, **pa):
    backend = FakeBackend(responder)
    config = SimulationConfig(sessions=sessions, turn_cap=4, patient_engine="patientact", patientact=pa)
    profile = make_profile("p1")
    schedule = draw_schedule("p1", 0, config)
    first = ScenarioRecord(patient_id="p1", seed=0, scenario=Scenario(**SCENARIO), engine={}, prompt={})

    def save(r: SessionRecord) -> SessionRecord:
        store.setdefault(r.session_id, r)
        return store[r.session_id]

    with Engines.with_backend(backend) as engines:
        arc = Arc.of(profile, V, _roles(engines), config, counsellor="counsellor", seed=0)
        recs = asyncio.run(run_arc(arc, schedule, first=first, load=store.get, save=save))
    return recs, backend


def test_trust_carries_into_the_next_session_and_a_rerun_resumes_it():
    store: dict[str, SessionRecord] = {}
    recs, backend = _arc(PAResponder(trust=["rise_slight"]), store, sessions=2)
    a, b = recs
    assert a.patientact.trust_end > a.patientact.trust_start
    assert b.patientact.trust_start == session_start(b.schedule, a.schedule, a.patientact.trust_end, 0.0)
    assert b.turns[0].patientact.trust_before == b.patientact.trust_start
    assert b.patientact.decomposition == a.patientact.decomposition
    assert sum(r.schema_name == "DecompositionDraft" for r in backend.requests) == 1
    # A rerun with session 1 lost resumes from session 0's checkpoint: same starting trust, no new decomposition.
    del store[b.session_id]
    recs2, backend2 = _arc(PAResponder(trust=["fall_slight"]), store, sessions=2)
    assert recs2[1].patientact.trust_start == b.patientact.trust_start
    assert not any(r.schema_name == "DecompositionDraft" for r in backend2.requests)


def test_session_ids_carry_the_engine_and_mindsim_ids_are_unchanged():
    assert session_id("p1", "counsellor", 0, 0) == session_id("p1", "counsellor", 0, 0, "mindsim")
    assert session_id("p1", "counsellor", 0, 0, "patientact") != session_id("p1", "counsellor", 0, 0)
    store: dict[str, SessionRecord] = {}
    recs, _ = _arc(PAResponder(), store, sessions=1)
    assert recs[0].session_id == session_id("p1", "counsellor", 0, 0, "patientact")
    assert recs[0].patient_engine == "patientact"


def test_a_recipe_with_both_engines_must_name_the_arcs_engine():
    config = SimulationConfig(patient_engine=["mindsim", "patientact"])
    assert config.patient_engines == ["mindsim", "patientact"]
    store: dict[str, SessionRecord] = {}
    first = ScenarioRecord(patient_id="p1", seed=0, scenario=Scenario(**SCENARIO), engine={}, prompt={})
    with Engines.with_backend(FakeBackend(PAResponder())) as engines:
        with pytest.raises(ValueError, match="name the arc's engine"):
            arc = Arc.of(make_profile("p1"), V, _roles(engines), config, counsellor="counsellor", seed=0)
            asyncio.run(run_arc(arc, draw_schedule("p1", 0, config), first=first, load=store.get, save=lambda r: r))


# -- decomposition, seed, retrieval -----------------------------------------------------------------------


def test_decomposition_answer_off_its_anchor_grid_or_short_of_the_pieces_is_reasked():
    answers = []

    class R(PAResponder):
        def __call__(self, req):
            if req.schema_name == "DecompositionDraft":
                good = draft_answer(req, shift=0.5)
                bad = [
                    {**good, "items": good["items"][:-1]},  # one entry short
                    {"items": [{**good["items"][0], "shift": 0.2}, *good["items"][1:]]},  # off the grid
                    {"items": [{**good["items"][0], "tags": ["a", "b"]}, *good["items"][1:]]},  # two tags
                    good,
                ]
                answers.append(len(answers))
                return bad[min(len(answers) - 1, 3)]
            return super().__call__(req)

    store: dict[str, SessionRecord] = {}
    recs, backend = _arc(R(), store, sessions=1, step_attempts=4)
    assert sum(r.schema_name == "DecompositionDraft" for r in backend.requests) == 4
    items = Decomposition.model_validate(recs[0].patientact.decomposition).items
    anchors = {
        "pattern": 2.5,
        "memory": 4.0,
        "core_belief": 4.0,
        "belief": 3.0,
        "thought": 3.0,
        "trigger": 3.0,
        "relational": 3.5,
    }
    assert all(i.level == min(4.0, anchors[i.type] + 0.5) for i in items)
    with pytest.raises(ValueError):
        DraftItem(topic="t", shift=0.0, tags=["x", "y"], category="emotional_state")
    with pytest.raises(ValueError):
        DraftItem(topic="t", shift=0.0, tags=["x", "y", "z"], category="sadness")
    with pytest.raises(ValueError, match="fit any client"):
        DraftItem(topic="t", shift=0.0, tags=["football", "feelings", "Sunday league"], category="emotional_state")
    # Repeats (a looping small model) are dropped; an item short of three distinct tags is topped up from its
    # own words, counted, and an item with three keeps exactly the decomposer's.
    kept = DraftItem(
        topic="t",
        shift=0.0,
        tags=["allotment", "Allotment", "brother", "allotment", "night shifts"],
        category="emotional_state",
    )
    assert kept.tags == ["allotment", "brother", "night shifts"]
    piece = Piece("memory", "formulation.predisposing", "Her brother still tends the allotment their father dug.")
    item = make_item("m1", piece, kept)
    assert item.tags == kept.tags and item.tags_from_content == 0 and "tags_from_content" not in item.model_dump()
    short = DraftItem(topic="t", shift=0.0, tags=["allotment", "allotment", "brother"], category="emotional_state")
    item = make_item("m1", piece, short)
    assert item.tags == ["allotment", "brother", "father"] and item.tags_from_content == 1


def test_psych_seed_is_stable_and_theme_follows_the_cluster():
    from mindsimkit.mindcore.errors import InputError
    from mindsimkit.mindsim.patientact.seed import check_profiles

    p = make_profile("p1")
    check_profiles([p])
    odd = p.model_copy(
        update={
            "formulation": p.formulation.model_copy(
                update={"core_belief": p.formulation.core_belief.model_copy(update={"cluster": "doomed"})}
            )
        }
    )
    with pytest.raises(InputError, match="doomed"):
        check_profiles([p, odd])
    with pytest.raises(InputError, match="doomed"):
        psych_seed(odd, 0)
    assert psych_seed(p, 0) == psych_seed(p, 0)
    assert psych_seed(p, 0).theme == "worthless" and psych_seed(p, 0).attachment in {
        "avoidant",
        "anxious",
        "disorganized",
    }
    draws = [psych_seed(make_profile(f"p{i}"), 0).attachment for i in range(600)]
    assert draws.count("disorganized") > draws.count("avoidant") > draws.count("anxious")


def test_lexical_retrieval():
    items = decomposition().items
    assert relevant(items, "How are your nights? Sleeping ok?") == ["m1"]
    assert relevant(items, "What about your dad?") == ["m3"]
    assert relevant(items, "What's for lunch?") == []
    g = gate(items, "your dad and your manager", 2.5)
    assert (g.retrieved, g.blocked, g.withheld) == ([], ["m3"], ["m2"])
    assert stems("") == set()


# -- through the simulator ------------------------------------------------------------------------------


def test_a_patientact_recipe_runs_through_the_simulator_and_a_failing_arc_is_counted(tmp_path):
    import pyarrow.parquet as pq

    from mindsimkit.mindsim.simulate import run_simulation

    class OneBad(PAResponder):
        """p2's trust step never fits: its arc fails, p1's does not. p2's patient (whose prompt holds its
        occupation) says the marker, so the trust step, which sees the reply and not the profile, can tell."""

        def __call__(self, req):
            if req.role == "patient" and "marker two" in _content(req):
                return "marker two here."
            if req.schema_name == "TrustChange" and "marker two" in _content(req):
                return {"change": "soar"}
            return super().__call__(req)

    p2 = make_profile("p2", "joker", "formal")
    p2 = p2.model_copy(update={"persona": p2.persona.model_copy(update={"occupation": "marker_two"})})
    profiles = [make_profile("p1"), p2]
    config = SimulationConfig(sessions=2, turn_cap=3, patient_engine="patientact")
    with Engines.with_backend(FakeBackend(OneBad(trust=["rise_slight"]))) as engines:
        summary = run_simulation(profiles, engines, config, tmp_path, seed=1)
    assert summary.sessions_written == 2 and len(summary.failed_arcs) == 1
    assert summary.failed_arcs[0].patient_id == "p2" and "trust step" in summary.failed_arcs[0].error
    rows = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist()
    assert {r["patient_engine"] for r in rows} == {"patientact"}
    plans = [SessionPlan.model_validate(r["schedule"]) for r in rows]
    assert rows[1]["patientact"]["trust_start"] == session_start(
        plans[1], plans[0], rows[0]["patientact"]["trust_end"], 0.0
    )
    assert rows[1]["turns"][1]["patientact"]["why"]["trust"] == "felt pushed"
    assert all(t["patientact"]["trust_after"] is not None for r in rows for t in r["turns"])


def roles_of(recipe):
    return {k: v.model_dump() for k, v in recipe.roles.items()}


def test_both_patientact_recipes_play_patient_psi_in_patienthubs_one_default_style():
    from pathlib import Path

    from mindsimkit.mindcore.recipe import load_recipe

    for name in ("patientact_paper.yaml", "patientact_situations.yaml"):
        r = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / name)
        assert r.section("simulation", SimulationConfig).baselines.psi_styles == ["plain"], name


def test_reproduction_recipe_and_its_counsellor_prompt():
    from pathlib import Path

    from mindsimkit.mindcore.prompts import render
    from mindsimkit.mindcore.recipe import load_recipe

    r = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "patientact_paper.yaml")
    s = r.section("simulation", SimulationConfig)
    assert (s.sessions, s.turn_cap, s.opening) == (1, 15, "counsellor")
    # Table 2's built baselines beside Table 4's arms, in one run.
    assert s.patient_engines == [
        "patientact",
        "patientact:no_tg",
        "patientact:no_dm",
        "patientact:no_pipe",
        "patient_psi",
        "annaagent",
        "consistentmi",
    ]
    assert roles_of(r)["baseline_mapper"]["engine"] == roles_of(r)["profile_decomposer"]["engine"]
    # ConsistentMI's per-turn questions are asked of the simulation backbone, as PatientHub asks them of the client's model.
    assert roles_of(r)["consistentmi_tracker"]["engine"] == roles_of(r)["patient"]["engine"]
    pa = s.patientact
    assert pa.trust_gating and pa.dynamic_memory and pa.pipeline and not pa.allow_end
    assert not pa.concealment_offset and not pa.carry_trust and pa.retrieval == "llm"
    roles = {k: v.model_dump() for k, v in r.roles.items()}
    for role in (
        "patient",
        "counsellor",
        "patient_appraiser",
        "patient_matcher",
        "profile_decomposer",
        "consistentmi_tracker",
    ):
        assert roles[role]["temperature"] == 0.7, role
    judge, backbone = (
        r.engines[roles["judge"]["engine"]].model_dump(),
        r.engines[roles["patient"]["engine"]].model_dump(),
    )
    assert judge["model"] != backbone["model"]
    # §4.1-4.2: profiles (formulation and dynamic memory included) on GPT-5.4, the simulation on GPT-4o; the
    # authors' code's behaviour through the preset.
    assert backbone["model"] == "gpt-4o" and judge["model"] == "gpt-5.4"
    for role in ("profile_writer", "screener", "profile_decomposer"):
        assert r.engines[roles[role]["engine"]].model_dump()["model"] == "gpt-5.4", role
    assert s.preset == "patientact-reference" and pa.trust_update == "direction" and pa.frame == "session"
    text = (Path(__file__).resolve().parents[2] / "recipes" / "patientact_paper.yaml").read_text()
    assert "mindsim patientact profile-eval" in text and "judge profile-eval" not in text
    rec, _, _ = run(
        PAResponder(end_after=1), counsellor_template=s.counsellor_template, allow_end=False, opening="counsellor"
    )
    prompt = rec.counsellor_system_prompt
    for rule in (
        "One open question at a time",
        "No labels for their thinking",
        "Do not sum up",
        "No early comfort",
        "stock phrases",
        "accept it",
        "You speak first",
    ):
        assert rule in prompt, rule
    assert rec.ended_by == "turn_cap" and s.counsellor_template in rec.prompts
    # Fig. 8: an initial session with a new client; no medium, no time, no earlier sessions in a first session.
    assert "an initial session with a new client" in prompt and "text chat" not in prompt
    assert "# When this is" not in prompt and "# Earlier sessions" not in prompt
    later = render(
        s.counsellor_template,
        time_context="Tuesday evening",
        memory="- talked about sleep",
        opening_greeting=False,
        session_index=1,
    )
    assert "# When this is\nTuesday evening" in later and "- talked about sleep" in later
    assert "initial session" not in later and "You speak first" not in later


def test_the_behaviour_step_may_end_the_session():
    rec, _, _ = run(PAResponder(end_after=2), turn_cap=8)
    assert rec.ended_by == "patient" and len(rec.turns) == 3 and rec.turns[-1].end_conversation


def test_lexical_retrieval_recall_on_the_hand_written_cases_meets_the_goal():
    from mindsimkit.mindsim.patientact.recall import load_cases, measure

    cases = load_cases()
    assert len(cases.cases) >= 40
    result = measure(cases)
    assert result["recall"] >= 0.8, result["mismatches"]
    assert result["precision"] >= 0.8


def test_psych_formulation_needs_a_therapist_pattern_and_feeds_the_decomposition():
    no_therapist = {k: v for k, v in PSYCH.items() if k != "therapist_pattern"}
    answers = iter([no_therapist, PSYCH])

    class R(PAResponder):
        def __call__(self, req):
            if req.schema_name == "PsychFormulation":
                self.seen["PsychFormulation"] = self.seen.get("PsychFormulation", 0) + 1
                return next(answers)
            return super().__call__(req)

    store: dict[str, SessionRecord] = {}
    recs, backend = _arc(R(), store, sessions=1)
    assert sum(r.schema_name == "PsychFormulation" for r in backend.requests) == 2
    decomp_req = next(r for r in backend.requests if r.schema_name == "DecompositionDraft")
    assert "With partner: wants to be relied on" in _content(decomp_req)
    stored = Decomposition.model_validate(recs[0].patientact.decomposition)
    assert stored.formulation.therapist_pattern.wish == "to be taken seriously"
    assert stored.static.therapist_wish == "to be taken seriously"
    assert "patientact/psych_formulation.jinja2" in stored.prompt
    behaviour = next(r for r in backend.requests if r.schema_name == "Behaviour")
    assert "- keeps busy and jokes it off" in behaviour.messages[-1]["content"]
    # Switched off: one call, no formulation.
    recs, backend = _arc(PAResponder(), {}, sessions=1, psych_formulation=False)
    assert not any(r.schema_name == "PsychFormulation" for r in backend.requests)
    assert recs[0].patientact.decomposition["formulation"] is None


def test_decomposition_store_keeps_the_first_copy(tmp_path):
    from mindsimkit.mindsim.patientact.decompose import DecompositionStore, decomposition_key

    store = DecompositionStore(tmp_path)
    a = decomposition()
    assert store.load(decomposition_key("p1", 0)) is None
    assert store.save(a) == a
    b = a.model_copy(update={"items": a.items[:1]})
    assert store.save(b) == a and store.duplicates == 1
    assert DecompositionStore(tmp_path).load(decomposition_key("p1", 0)) == a


def test_an_arc_given_the_shared_decomposition_does_not_decompose():
    backend = FakeBackend(PAResponder())
    config = SimulationConfig(sessions=1, turn_cap=3, patient_engine="patientact")
    first = ScenarioRecord(patient_id="p1", seed=0, scenario=Scenario(**SCENARIO), engine={}, prompt={})
    with Engines.with_backend(backend) as engines:
        arc = Arc.of(
            make_profile("p1"), V, _roles(engines), config, counsellor="counsellor", seed=0, preparation=decomposition()
        )
        recs = asyncio.run(
            run_arc(arc, draw_schedule("p1", 0, config), first=first, load=lambda k: None, save=lambda r: r)
        )
    assert not any(r.schema_name in ("DecompositionDraft", "PsychFormulation") for r in backend.requests)
    assert recs[0].patientact.decomposition == decomposition().model_dump(mode="json")


def test_budget_entries_cover_every_structured_output_and_defaults_fit_the_worst_case():
    from types import SimpleNamespace

    from mindsimkit.mindcore.budget import worst_case_tokens
    from mindsimkit.mindsim.patientact.budgets import entries

    off = SimpleNamespace(simulation={})
    on = SimpleNamespace(
        simulation={"patient_engine": ["mindsim", "patientact"], "patientact": {"step_max_tokens": 400}}
    )
    no_formulation = SimpleNamespace(
        simulation={"patient_engine": "patientact", "patientact": {"psych_formulation": False}}
    )
    llm = SimpleNamespace(
        simulation={"patient_engine": "patientact", "patientact": {"retrieval": "llm", "psych_screen": True}}
    )
    # The preset turns the matcher and the formulation's screen on: their budgets are checked with it.
    preset = SimpleNamespace(simulation={"patient_engine": "patientact", "preset": "patientact-reference"})
    es = entries("patient", "patient", "patient")
    assert len(es) == 8 and not any(e.active(off) for e in es) and all(e.active(llm) for e in es)
    assert all(e.active(preset) for e in es)
    assert [e.name for e in es if not e.active(on)] == ["patientact:FormulationScreen", "patientact:TagMatch"]
    assert [e.name for e in es if not e.active(no_formulation)] == [
        "patientact:PsychFormulation",
        "patientact:FormulationScreen",
        "patientact:TagMatch",
    ]
    for e in es:
        worst = worst_case_tokens(e.schema()).tokens
        default = e.budget(off)
        assert not default.explicit and default.value >= worst, (e.name, default.value, worst)
    step = es[0].budget(on)
    assert (step.value, step.setting, step.explicit) == (400, "simulation.patientact.step_max_tokens", True)
