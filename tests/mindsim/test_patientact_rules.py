"""PatientAct's decision rules and memory layer on the fake engine (PatientAct §3.3):
each rule, field and switch pinned by a test that fails without it — the reaction default and trigger /
sensitive notes, the five behaviour rules, trust criteria with unchanged as default, the attachment rules,
typed items in the reaction prompt and the signal, no trust-gated text by another path, the LLM matcher,
`opening: counsellor`, and the four arms on byte-identical shared inputs."""

from __future__ import annotations

import json

import pytest

from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindsim import simulate
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.patientact.data import attachment_prior, step_rules, trust_rules
from mindsimkit.mindsim.patientact.participant import conditions, session_items, trailing_therapeutic
from mindsimkit.mindsim.patientact.trust import session_start, update
from mindsimkit.mindsim.scenario import Scenario
from mindsimkit.mindsim.schedule import draw_schedule
from simfakes import SCENARIO, make_profile
from test_patientact import COUNSELLOR, FATHER, PAResponder, _content, decomposition, run


def _steps(backend, name):
    """The user message of every request of one step, in order."""
    return [r.messages[-1]["content"] for r in backend.requests if r.schema_name == name]


class Says(PAResponder):
    """The counsellor says `lines` in order (last repeats)."""

    def __init__(self, lines, **kw):
        super().__init__(**kw)
        self.lines = lines

    def __call__(self, req):
        if req.role.startswith("counsellor"):
            n = sum(m["role"] == "assistant" for m in req.messages)
            return self.lines[min(n, len(self.lines) - 1)]
        return super().__call__(req)


# -- reaction step ----------------------------------------------------------------------------------------


def test_reaction_step_defaults_to_no_reaction_when_nothing_is_activated_and_notes_triggers_and_sensitive_areas():
    from mindsimkit.mindsim.patientact.decompose import MemoryItem

    d = decomposition()
    trig = MemoryItem(
        id="m5",
        type="trigger",
        source="test",
        content="Rejection emails make my stomach drop.",
        topic="setbacks",
        level=2.0,
        tags=["rejection", "email", "applications"],
        category="emotional_state",
        discomfort=False,
    )
    d = d.model_copy(update={"items": [*d.items, trig]})
    rec, backend, _ = run(
        Says(["What's for lunch?", "Any rejection email lately?", "Tell me about your father."]), decomp=d, turn_cap=4
    )
    lunch, rejection, father = _steps(backend, "Reaction")[:3]
    assert (
        "likeliest answer is no_reaction with low intensity" in lunch
        and "Nothing in the client's own material" in lunch
    )
    assert "likeliest answer is no_reaction" not in rejection
    assert "[trigger] Rejection emails" in rejection and "a [trigger] was hit" in rejection
    assert "a [trigger] was hit" not in lunch and "sensitive area" not in lunch
    assert "sensitive area" in father and "(family history)" in father
    # The type reaches the signal too, and the signal names reaction and behaviour with their descriptions.
    sig = rec.turns[2].patientact.signal
    assert (
        "[trigger] Rejection emails" in sig
        and "Feeling: challenged (moderate):" in sig
        and "Acting: resistance:" in sig
    )
    assert "Resisting by: minimal talk:" in sig


# -- behaviour step ---------------------------------------------------------------------------------------


def test_pullback_after_two_therapeutic_behaviours_in_a_row():
    assert trailing_therapeutic(["insight", "recounting", "insight", "affective_exploration"]) == 2
    assert step_rules().pullback_after == 2
    responder = PAResponder(
        behaviour=["cognitive_exploration", "insight", "recounting", "insight"], reaction=("understood", "moderate")
    )
    rec, backend, _ = run(responder, turn_cap=6)
    prompts = _steps(backend, "Behaviour")
    held = [t.patientact.rules for t in rec.turns[1:]]
    assert ["pullback" in h for h in held] == [False, False, True, False, False]
    assert "pull back now" in prompts[2] and not any("pull back now" in p for p in prompts[:2] + prompts[3:])
    # The positive-moderate rule is said only when the pullback does not override it.
    assert "positive and moderate" in prompts[0] and "positive and moderate" not in prompts[2]


def test_high_intensity_with_low_trust_and_blocked_content_make_resistance_likely():
    low, lb, _ = run(PAResponder(reaction=("scared", "high")), trust_start=2.0, turn_cap=3)
    mid, mb, _ = run(PAResponder(reaction=("scared", "high")), trust_start=3.0, turn_cap=3)
    assert all("strong and trust is low" in p for p in _steps(lb, "Behaviour"))
    assert not any("strong and trust is low" in p for p in _steps(mb, "Behaviour"))
    father = _steps(mb, "Behaviour")[1]  # "Can you tell me about your father?" at 3.0 < 4.0
    assert "near material the client is not ready for" in father
    assert "near material" not in _steps(mb, "Behaviour")[0]
    assert "blocked" in mid.turns[2].patientact.rules


def test_nothing_activated_and_neutral_leans_to_a_simple_response_or_recounting():
    rec, backend, _ = run(Says(["What's for lunch?"], reaction=("no_reaction", "low")), turn_cap=3)
    prompt = _steps(backend, "Behaviour")[0]
    assert "lean towards simple_response or recounting" in prompt
    assert rec.turns[1].patientact.rules == ["nothing_activated", "nothing_activated_neutral"]
    assert (
        conditions(activated=True, blocked=False, trigger=False, trust=2.5, reaction="no_reaction", intensity="low")
        == []
    )


# -- trust ------------------------------------------------------------------------------------------------


def test_under_a_neutral_counsellor_trust_stays_flat_whatever_change_is_named():
    rec, backend, _ = run(
        PAResponder(trust=["rise_significant"], criteria=["empathic_reflection", "reasonable_question"]), turn_cap=8
    )
    assert [t.patientact.trust_after for t in rec.turns] == [2.5] * 8
    prompt = _steps(backend, "TrustChange")[0]
    assert "Most exchanges leave trust unchanged" in prompt and "pick proceeding_normally" in prompt
    for group in trust_rules().criteria.values():
        assert all(c in prompt for c in group)
    assert "rises often" not in rec.patientact.appraiser_system_prompt.lower()
    assert "a little at a time" not in rec.patientact.appraiser_system_prompt


def test_a_change_against_its_criterion_moves_slightly_the_criterion_s_way():
    assert update(2.5, "formulaic", "rise_significant", "disorganized") == (2.25, -0.25)
    assert update(2.5, "named_unsaid", "fall_significant", "disorganized") == (2.75, 0.25)
    assert update(2.5, "reasonable_question", "fall_significant", "anxious") == (2.5, 0.0)
    with pytest.raises(ValueError):
        update(2.5, "flattery", "unchanged", "anxious")


def test_every_attachment_style_has_an_asymmetry_that_acts():
    # avoidant: slow to build (rise capped) and pushing costs the most
    assert update(2.5, "respected_redirect", "rise_significant", "avoidant") == (2.75, 0.25)
    assert update(2.5, "pushed_disclosure", "fall_slight", "avoidant") == (2.0, -0.5)
    assert update(2.5, "pushed_disclosure", "fall_slight", "anxious") == (2.25, -0.25)
    # anxious: being brushed off is a large fall
    assert update(2.5, "formulaic", "fall_slight", "anxious") == (2.0, -0.5)
    assert update(2.5, "formulaic", "fall_slight", "avoidant") == (2.25, -0.25)
    # disorganized: after two rises running, the next rise turns into a fall
    assert update(3.0, "named_unsaid", "rise_slight", "disorganized", [0.25, 0.25]) == (2.75, -0.25)
    assert update(3.0, "named_unsaid", "rise_slight", "disorganized", [0.25, 0.0]) == (3.25, 0.25)
    assert update(3.0, "named_unsaid", "rise_slight", "anxious", [0.25, 0.25]) == (3.25, 0.25)
    rules = trust_rules().attachment
    for style in attachment_prior().weights:
        r = rules[style]
        assert r.floor_fall or r.reverse_after_rises or r.max_rise < 0.5, style


def test_concealment_offset_and_carrying_are_switches():
    config = SimulationConfig(sessions=2)
    a, b = draw_schedule("p1", 0, config).sessions
    closed = a.model_copy(update={"concealment": "closed"})
    assert session_start(closed, None, None, 0.0) == 2.0
    assert session_start(closed, None, None, 0.0, concealment_offset=False) == 2.5
    assert session_start(b, closed, 3.75, 0.0, concealment_offset=False) == 3.75
    assert session_start(b, closed, 3.75, 0.0, concealment_offset=False, carry=False) == 2.5


# -- nothing trust-gated by another path ---------------------------------------------------------------------


def test_scenario_thoughts_reach_the_patient_only_through_the_gate():
    items = session_items(Scenario(**SCENARIO))
    thought = next(i for i in items if i.type == "thought")
    assert thought.level == 3.0 and thought.content == SCENARIO["automatic_thoughts"][0]
    ask = f"Does it feel like {' '.join(thought.tags)}?"
    low, lb, _ = run(Says([ask]), trust_start=2.5, turn_cap=3)
    assert thought.id in low.turns[1].patientact.withheld
    for req in lb.requests:
        if req.role == "patient":
            text = _content(req)
            for t in SCENARIO["automatic_thoughts"]:
                assert t not in text
            assert FATHER not in text
    high, hb, _ = run(Says([ask]), trust_start=3.0, turn_cap=3)
    assert thought.id in high.turns[1].patientact.retrieved
    assert f"[thought] {thought.content}" in high.turns[1].patientact.signal
    assert SCENARIO["automatic_thoughts"][0] not in high.patient_system_prompt


def test_blocked_item_words_appear_in_no_prompt_the_patient_sees_at_that_trust():
    rec, backend, _ = run(PAResponder(), turn_cap=5)
    assert any("m3" in t.patientact.blocked for t in rec.turns[1:])
    seen = [_content(r) for r in backend.requests if r.role == "patient"]
    assert seen and not any(FATHER in s or "birthday" in s for s in seen)


# -- LLM matcher --------------------------------------------------------------------------------------------


def test_llm_retrieval_asks_the_matcher_with_the_patients_own_tags():
    class M(PAResponder):
        def __call__(self, req):
            if req.schema_name == "TagMatch":
                enum = req.response_schema["properties"]["tags"]["items"]["enum"]
                assert "father" in enum and "sleep" in enum
                assert "Recent conversation" in _content(req) or "hey. rough week" in _content(req)
                return {"why": "about his dad", "tags": ["father"]}
            return super().__call__(req)

    rec, backend, _ = run(M(), retrieval="llm", turn_cap=3)
    assert all(t.patientact.relevant == ["m3"] for t in rec.turns[1:])
    assert rec.turns[1].patientact.why.matcher == "about his dad"
    assert {r.role for r in backend.requests if r.schema_name == "TagMatch"} == {"patient_matcher"}
    lexical, lb, _ = run(PAResponder(), turn_cap=3)
    assert not any(r.schema_name == "TagMatch" for r in lb.requests)


# -- who speaks first ---------------------------------------------------------------------------------------


def test_opening_counsellor_greets_first_and_the_patient_answers_every_engine():
    rec, backend, _ = run(PAResponder(), opening="counsellor", turn_cap=3)
    first = next(r for r in backend.requests if r.role == "counsellor")
    assert [m["role"] for m in first.messages] == ["system"] and "You speak first" in first.messages[0]["content"]
    assert len(rec.turns) == 3 and not rec.turns[0].opening and rec.turns[0].patientact.reaction == "challenged"
    assert rec.transcript()[0] == {"role": "assistant", "content": COUNSELLOR[0]}
    assert SCENARIO["opening_message"] not in [m["content"] for m in rec.transcript()]
    plain, _, _ = run(PAResponder(), turn_cap=3)
    assert plain.transcript()[0]["content"] == SCENARIO["opening_message"] and plain.turns[0].opening


def test_opening_counsellor_with_the_mindsim_patient(tmp_path):
    from simfakes import SimResponder

    config = SimulationConfig(sessions=1, turn_cap=3, opening="counsellor")
    with Engines.with_backend(FakeBackend(SimResponder(end_after=99))) as engines:
        summary = simulate.run_simulation([make_profile("p1")], engines, config, tmp_path, seed=0)
    assert summary.sessions_written == 1
    line = json.loads((tmp_path / "transcripts" / "transcripts.jsonl").read_text().splitlines()[0])
    roles = [m["role"] for m in line["messages"]]
    assert roles[:2] == ["assistant", "user"] and roles.count("user") == 3


# -- the four arms on the same inputs ------------------------------------------------------------------------


def test_the_four_arms_share_byte_identical_profiles_formulations_decompositions_schedules_and_first_scenarios(
    tmp_path,
):
    import pyarrow.parquet as pq

    arms = ["patientact", "patientact:no_tg", "patientact:no_dm", "patientact:no_pipe"]
    config = SimulationConfig(sessions=1, turn_cap=3, patient_engine=arms)
    profiles = [make_profile("p1"), make_profile("p2", "joker", "formal")]
    with Engines.with_backend(FakeBackend(PAResponder())) as engines:
        summary = simulate.run_simulation(profiles, engines, config, tmp_path, seed=3)
    assert summary.sessions_written == 8 and not summary.failed_arcs
    rows = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist()
    dump = lambda v: json.dumps(v, sort_keys=True)  # noqa: E731
    for pid in ("p1", "p2"):
        mine = {r["patient_engine"]: r for r in rows if r["patient_id"] == pid}
        assert set(mine) == set(arms)
        for key in ("scenario", "schedule"):
            assert len({dump(r[key]) for r in mine.values()}) == 1, key
        decomps = {dump(r["patientact"]["decomposition"]) for r in mine.values()}
        formulations = {dump(r["patientact"]["decomposition"]["formulation"]) for r in mine.values()}
        assert len(decomps) == 1 and len(formulations) == 1
        assert json.loads(decomps.pop())["formulation"] is not None
    assert len(list((tmp_path / "sessions" / "decompositions").glob("*.json"))) == 2


def test_turn_cap_one_is_a_greeting_and_one_reply_and_needs_the_counsellor_to_open(tmp_path):
    from mindsimkit.mindcore.errors import ConfigError

    rec, backend, _ = run(PAResponder(), opening="counsellor", turn_cap=1)
    assert len(rec.turns) == 1 and not rec.turns[0].opening and rec.ended_by == "turn_cap"
    assert [m["role"] for m in rec.transcript()] == ["assistant", "user"]
    assert sum(r.role == "counsellor" for r in backend.requests) == 1
    with pytest.raises(
        ConfigError, match="turn_cap: 1 leaves only the scenario's scripted opening.*opening: counsellor"
    ):
        SimulationConfig.from_section({"turn_cap": 1})
    with pytest.raises(ConfigError, match="turn_cap"):
        SimulationConfig.from_section({"turn_cap": 0, "opening": "counsellor"})


# -- what each step sees ------------------------------------------------------------------------------------


def test_each_step_sees_what_its_figure_gives_it():
    """PatientAct Figs. 10-14: reaction sees the conversation and the retrieved items; behaviour and resistance
    also the reaction, trust and coping; trust the exchange, trust, attachment and the client's expectation of a
    counsellor. No step sees the rest of the static layer, the core-belief theme or the coping archetype."""
    from mindsimkit.mindsim.patientact.data import theme_map
    from mindsimkit.profilegen.moves import load_vocabulary
    from test_patientact import STATIC, SLEEP

    profile = make_profile("p1")
    rec, backend, _ = run(Says(["How have you been sleeping lately?"]), turn_cap=2)
    steps = {name: _steps(backend, name)[0] for name in ("Reaction", "Behaviour", "Resistance", "TrustChange")}
    system = rec.patientact.appraiser_system_prompt
    attachment = rec.patientact.attachment
    theme_text = theme_map().themes[rec.patientact.theme]
    archetype = load_vocabulary().archetype(profile.style.archetype).text
    coping = "- " + STATIC["coping"][0]
    private = [
        STATIC["current_concern"],
        STATIC["precipitating"],
        STATIC["protective"][0],
        STATIC["emotional_range"],
        STATIC["demographics"],
        theme_text,
        archetype,
    ]
    for text in private:
        assert text not in system and not any(text in step for step in steps.values()), text
    assert all(a not in system for a in attachment_prior().descriptions.values())
    # reaction: the conversation and the retrieved item, nothing else of the client
    assert "How have you been sleeping" in steps["Reaction"] and SLEEP in steps["Reaction"]
    assert coping not in steps["Reaction"] and "trust in the counsellor" not in steps["Reaction"]
    assert attachment not in steps["Reaction"]
    # behaviour and resistance: plus reaction, trust and coping
    for name in ("Behaviour", "Resistance"):
        assert coping in steps[name] and "trust in the counsellor: 2.50" in steps[name], name
        assert "The client's reaction: challenged (moderate)" in steps[name]
        assert "attachment style" not in steps[name] and STATIC["therapist_expects"] not in steps[name]
    # trust: attachment, how its trust moves, the expected response; not coping nor the retrieved items
    leaning = trust_rules().attachment[attachment].leaning
    assert f"attachment style: {attachment}." in steps["TrustChange"] and leaning in steps["TrustChange"]
    assert STATIC["therapist_expects"] in steps["TrustChange"]
    assert coping not in steps["TrustChange"] and SLEEP not in steps["TrustChange"]
