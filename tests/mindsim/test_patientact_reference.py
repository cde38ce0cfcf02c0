"""The `patientact-reference` preset: PatientAct as the authors' public code runs it —
trust from 2.5 each session, five trust directions applied as named, the matcher reading only the counsellor's
latest message, the steps seeing the whole conversation, the extra behaviour rules, the therapy-session frame —
and the four arms differing only in their switch. Fake engine throughout."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindsim import simulate
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.patientact.data import step_rules, trust_rules
from mindsimkit.mindsim.patientact.engine import ENGINE
from mindsimkit.mindsim.patientact.participant import conditions
from mindsimkit.mindsim.scenario import Scenario
from mindsimkit.mindsim.schedule import draw_schedule
from mindsimkit.mindsim.session import Arc, SessionInput, run_session
from simfakes import SCENARIO, make_profile
from test_patientact import COUNSELLOR, V, PAResponder, _roles, decomposition

REF = "patientact-reference"


class Direct(PAResponder):
    """Answers the reference's trust step (a direction only) and the matcher (no tag)."""

    def __call__(self, req):
        if req.schema_name == "TagMatch":
            return {"why": "nothing of theirs", "tags": []}
        if req.schema_name == "FormulationScreen":
            return {"passed": True, "issues": []}
        out = super().__call__(req)
        if req.schema_name == "TrustChange" and "criterion" not in req.response_schema["properties"]:
            out = {k: v for k, v in out.items() if k != "criterion"}
        return out


def run(responder, *, preset=REF, decomp=None, turn_cap=4, **pa):
    backend = FakeBackend(responder)
    config = SimulationConfig(
        sessions=1, turn_cap=turn_cap, patient_engine="patientact", preset=preset, opening="patient", patientact=pa
    )
    plan = draw_schedule("p1", 0, config).sessions[0]
    with Engines.with_backend(backend) as engines:
        arc = Arc.of(
            make_profile("p1"),
            V,
            _roles(engines),
            config,
            counsellor="counsellor",
            seed=0,
            engine="patientact",
            preparation=decomp or decomposition(),
        )
        rec = asyncio.run(run_session(arc, SessionInput(plan, Scenario(**SCENARIO), [], carried=2.5)))
    return rec, backend


def _steps(backend, name):
    return [r.messages[-1]["content"] for r in backend.requests if r.schema_name == name]


def _as(attachment):
    d = decomposition()
    return d.model_copy(update={"psych": d.psych.model_copy(update={"attachment": attachment})})


def test_the_preset_fills_the_reference_settings_under_the_recipes_own():
    cfg = SimulationConfig.from_section({"patient_engine": "patientact", "preset": REF})
    pa = cfg.patientact
    assert (cfg.turn_cap, cfg.opening) == (15, "counsellor")
    assert not (pa.concealment_offset or pa.carry_trust or pa.allow_end or pa.trust_sees_reply)
    assert (pa.retrieval, pa.matcher_context, pa.step_context, pa.trust_update, pa.frame) == (
        "llm",
        "message",
        "whole",
        "direction",
        "session",
    )
    small = SimulationConfig.from_section(
        {
            "patient_engine": "patientact",
            "preset": REF,
            "turn_cap": 2,
            "sessions": 2,
            "patientact": {"retrieval": "lexical"},
        }
    )
    assert (small.turn_cap, small.sessions, small.patientact.retrieval, small.patientact.step_context) == (
        2,
        2,
        "lexical",
        "whole",
    )
    # Ours is untouched by the preset's existence.
    ours = SimulationConfig.from_section({"patient_engine": "patientact"}).patientact
    assert (ours.trust_update, ours.step_context, ours.matcher_context, ours.frame) == (
        "criterion",
        "recent",
        "recent",
        "chat",
    )


def test_the_preset_data_has_no_trust_caps_four_criteria_a_group_and_the_extra_behaviour_rules():
    ref, own = trust_rules(REF), trust_rules()
    assert [len(ref.criteria[g]) for g in ("raise", "keep", "lower")] == [4, 4, 4]
    assert [len(own.criteria[g]) for g in ("raise", "keep", "lower")] == [3, 3, 4]
    assert all(
        r.max_rise == r.max_fall == 0.5 and not r.floor_fall and not r.reverse_after_rises
        for r in ref.attachment.values()
    )
    assert (ref.start, ref.minimum, ref.maximum, ref.changes) == (own.start, own.minimum, own.maximum, own.changes)
    assert set(ref.concealment_offset.values()) == {0.0}
    s, o = step_rules(REF), step_rules()
    assert (s.recent_behaviours, s.same_behaviour_run, s.neutral_or_low) == (3, 3, True)
    assert (o.recent_behaviours, o.same_behaviour_run, o.neutral_or_low) == (4, 0, False)


def test_trust_moves_by_the_named_direction_uncapped_and_resets_to_2_5_each_session():
    # An avoidant client: ours caps a rise at 0.25, the reference applies the +0.5 as named.
    rec, backend = run(Direct(trust=["rise_significant"]), decomp=_as("avoidant"))
    assert [t.patientact.trust_after for t in rec.turns[1:]] == [3.0, 3.5, 4.0]
    assert all(t.patientact.trust_criterion is None for t in rec.turns[1:])
    schema = next(r.response_schema for r in backend.requests if r.schema_name == "TrustChange")
    assert set(schema["properties"]) == {"why", "change"} and len(schema["properties"]["change"]["enum"]) == 5
    ours, _ = run(PAResponder(trust=["rise_significant"]), preset="ours", decomp=_as("avoidant"))
    assert [t.patientact.trust_after for t in ours.turns[1:]] == [2.75, 3.0, 3.25]
    # A falling direction is applied as named too, bounded at 1.0.
    fall, _ = run(Direct(trust=["fall_significant"]), turn_cap=6)
    assert [t.patientact.trust_after for t in fall.turns[1:]] == [2.0, 1.5, 1.0, 1.0, 1.0]
    # Every session starts at 2.5: no concealment offset, nothing carried.
    cfg = SimulationConfig.from_section({"patient_engine": "patientact", "preset": REF, "sessions": 3})
    plans = draw_schedule("p1", 0, cfg).sessions
    prev = type("R", (), {"patientact": type("P", (), {"trust_end": 4.0})(), "schedule": plans[0]})()
    for plan in plans:
        assert ENGINE.carry(plan, prev, cfg) == 2.5


def test_the_trust_step_sees_the_exchange_before_the_reply_and_the_steps_the_whole_conversation():
    rec, backend = run(Direct(), turn_cap=5, context_turns=1)
    trust = _steps(backend, "TrustChange")
    assert all("The client answered" not in p for p in trust)
    assert "How did the counsellor's last message move" in trust[0] and "adjusted_approach" not in trust[0]
    assert "changed course on noticing the client pull back" in trust[0]
    last = _steps(backend, "Reaction")[-1]
    assert COUNSELLOR[0] in last and SCENARIO["opening_message"] in last  # the whole conversation
    ours, ob = run(PAResponder(), preset="ours", turn_cap=5, context_turns=1)
    assert COUNSELLOR[0] not in _steps(ob, "Reaction")[-1] and "The client answered" in _steps(ob, "TrustChange")[0]


def test_the_matcher_reads_only_the_counsellors_latest_message():
    rec, backend = run(Direct(), turn_cap=4)
    asks = [r.messages[-1]["content"] for r in backend.requests if r.schema_name == "TagMatch"]
    assert len(asks) == 3 and all("Recent conversation" not in a for a in asks)
    assert SCENARIO["opening_message"] not in asks[1]
    ours, ob = run(Direct(), preset="ours", turn_cap=4, retrieval="llm")
    assert "Recent conversation" in [r.messages[-1]["content"] for r in ob.requests if r.schema_name == "TagMatch"][1]


def test_the_behaviour_step_avoids_a_third_same_behaviour_and_sees_the_last_three():
    rec, backend = run(Direct(behaviour="resistance", reaction=("scared", "high")), turn_cap=6)
    prompts = _steps(backend, "Behaviour")
    assert all("Do not pick one behaviour 3 turns running" in p for p in prompts)
    said = ["pick something else this time" in p for p in prompts]
    assert said == [False, False, True, True, True]
    assert "same_run" in rec.turns[3].patientact.rules and "same_run" not in rec.turns[2].patientact.rules
    assert (
        "resistance, resistance, resistance." in prompts[4] and "resistance, resistance, resistance, " not in prompts[4]
    )
    assert conditions(
        activated=True, blocked=False, trigger=False, trust=3.0, reaction="understood", intensity="low", preset=REF
    ) == ["neutral_or_low"]
    ours, ob = run(PAResponder(behaviour="resistance"), preset="ours", turn_cap=6)
    assert not any("turns running" in p or "pick something else" in p for p in _steps(ob, "Behaviour"))


def test_the_client_prompt_frames_a_therapy_session_without_the_chat_rules():
    rec, _ = run(Direct())
    prompt = rec.patient_system_prompt
    assert "in a therapy session" in prompt and "one to three sentences" in prompt
    assert "AI counsellor" not in prompt and "Self-harm" not in prompt and "phone" not in prompt
    ours, _ = run(PAResponder(), preset="ours")
    assert "AI counsellor" in ours.patient_system_prompt and "Self-harm" in ours.patient_system_prompt


def test_the_session_frame_drops_the_chat_style_and_keeps_the_shared_scaffolding():
    rec, _ = run(Direct())
    ours, _ = run(PAResponder(), preset="ours")
    for text in ("Messages from you look like these", "# How you talk"):
        assert text not in rec.patient_system_prompt and text in ours.patient_system_prompt, text
    for text in (
        "# When this is",
        "# What has been happening",
        "# What you want from this conversation",
        "# What you remember",
    ):
        assert text in rec.patient_system_prompt and text in ours.patient_system_prompt, text


def test_w_o_dm_renders_as_each_side_does():
    """Ours (the paper's ablation): the whole profile under a plain heading that invites nothing. The preset: what
    the authors' code renders, the sections of the full arm without the counsellor pattern and the other
    sections' headings with nothing under them."""
    from mindsimkit.profilegen.psych import PsychFormulation
    from test_patientact import PSYCH

    decomp = decomposition().model_copy(update={"formulation": PsychFormulation(**PSYCH)})
    ours, _ = run(PAResponder(), preset="ours", decomp=decomp, dynamic_memory=False)
    ref, _ = run(Direct(), decomp=decomp, dynamic_memory=False)
    o, r = ours.patient_system_prompt, ref.patient_system_prompt
    assert "## More about you" in o and "whenever you like" not in o and "draw on" not in o
    assert PSYCH["intermediate_beliefs"][0] in o and make_profile("p1").writer_brief in o
    assert "## You and the counsellor" in o and "## You and the counsellor" not in r
    for text in (PSYCH["intermediate_beliefs"][0], PSYCH["triggers"][0], make_profile("p1").writer_brief):
        assert text not in r, text
    for heading in ("What made you vulnerable:", "Rules you live by:", "What sets it off:", "Your relationships:"):
        assert f"{heading}\n" in r, heading
    assert "no_dm_profile" in ref.patientact.switches and ref.patientact.switches["no_dm_profile"] == "reference"


def test_a_run_with_the_preset_and_small_overrides_writes_every_session(tmp_path):
    config = SimulationConfig.from_section(
        {"patient_engine": ["patientact", "patientact:no_pipe"], "preset": REF, "sessions": 2, "turn_cap": 2}
    )
    with Engines.with_backend(FakeBackend(Direct())) as engines:
        summary = simulate.run_simulation([make_profile("p1")], engines, config, tmp_path, seed=1)
    assert summary.sessions_written == 4 and not summary.failed_arcs
    import pyarrow.parquet as pq

    rows = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist()
    assert {r["patientact"]["trust_start"] for r in rows} == {2.5}
    assert all(len(r["turns"]) == 2 for r in rows)
    assert {
        json.loads(r["patientact"]["switches"])["trust_update"]
        if isinstance(r["patientact"]["switches"], str)
        else r["patientact"]["switches"]["trust_update"]
        for r in rows
    } == {"direction"}


# -- the four arms differ only in their switch ----------------------------------------------------------------

ARMS = {
    "patientact": None,
    "patientact:no_tg": "trust_gating",
    "patientact:no_dm": "dynamic_memory",
    "patientact:no_pipe": "pipeline",
}


@pytest.mark.parametrize("preset", ["ours", REF])
def test_the_four_arms_inputs_differ_only_in_their_switch(tmp_path, preset):
    import pyarrow.parquet as pq

    config = SimulationConfig.from_section(
        {"patient_engine": list(ARMS), "preset": preset, "sessions": 1, "turn_cap": 3, "opening": "counsellor"}
    )
    with Engines.with_backend(FakeBackend(Direct())) as engines:
        summary = simulate.run_simulation([make_profile("p1")], engines, config, tmp_path, seed=3)
    assert summary.sessions_written == 4 and not summary.failed_arcs
    rows = {r["patient_engine"]: r for r in pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist()}
    load = lambda v: json.loads(v) if isinstance(v, str) else v  # noqa: E731
    full = rows["patientact"]
    switches = {arm: load(r["patientact"]["switches"]) for arm, r in rows.items()}
    for arm, switch in ARMS.items():
        diff = {k for k in switches[arm] if switches[arm][k] != switches["patientact"][k]}
        assert diff == ({switch} if switch else set()), arm
        r = rows[arm]
        for key in ("scenario", "schedule", "counsellor_system_prompt"):
            assert r[key] == full[key], (arm, key)
        assert r["patientact"]["trust_start"] == full["patientact"]["trust_start"]
        for prompt in ("patient_system_prompt",):
            mine, theirs = r[prompt], full[prompt]
            if switch == "dynamic_memory":
                # w/o DM only adds (the whole profile, or under the preset the reference's empty sections, without
                # its counsellor pattern); every other line of the full arm's prompt is there, in order.
                kept = [
                    line
                    for line in theirs.splitlines()
                    if preset == "ours"
                    or not re.match(
                        r"(## You and the counsellor|- What you want|- What you "
                        r"expect|- How you react)",
                        line,
                    )
                ]
                lines = iter(mine.splitlines())
                assert all(any(line == m for m in lines) for line in kept), arm
                assert len(mine) > len(theirs) if preset == "ours" else "## You and the counsellor" not in mine
            elif switch == "pipeline":
                # w/o Pipe explains the note without reactions, inclinations or steering away; nothing else differs.
                def rest(text):
                    return [ln for ln in text.splitlines() if not ln.startswith("Each counsellor message")]

                assert rest(mine) == rest(theirs) and "steer away" in theirs and "steer away" not in mine, arm
            else:
                assert mine == theirs, arm
        ap, fp = r["patientact"]["appraiser_system_prompt"], full["patientact"]["appraiser_system_prompt"]
        assert ap == fp, arm  # the steps' prompt holds no profile, so no arm changes it
    # The name-bearing persona and the cultural background reach every arm, not only w/o DM.
    persona = make_profile("p1").persona
    for r in rows.values():
        assert persona.persona.strip() in r["patient_system_prompt"]
        if persona.cultural_background.strip():
            assert re.search("Cultural background: ", r["patient_system_prompt"])


def test_the_formulation_prompt_asks_for_a_counselling_trigger_and_observable_coping():
    """PatientAct Fig. 5: at least one trigger specific to the therapy setting; coping as what the client does,
    not what they think; relationship patterns shaped by the attachment style."""
    from mindsimkit.profilegen.psych import psych_messages

    text = psych_messages(make_profile("p1"), "avoidant", "keeps distance", "helpless", "cannot cope")[0]["content"]
    assert "at least one of them must be something that can happen in counselling itself" in text
    assert "what they visibly do when they feel threatened" in text and "not what they think" in text
    assert "each coloured by the attachment style" in text


def test_a_preset_data_file_that_is_missing_or_broken_stops_with_the_file_named(monkeypatch):
    from mindsimkit.mindcore.errors import ConfigError
    from mindsimkit.mindsim import presets
    from mindsimkit.mindsim.patientact import data

    table = dict(presets.table())
    table["x-reference"] = table[REF].model_copy(
        update={"data": {"trust": "patientact_reference/nope.yaml", "step_rules": "patientact_reference/trust.yaml"}}
    )
    monkeypatch.setattr(presets, "table", lambda: table)
    with pytest.raises(ConfigError, match="mindsim/data/presets/patientact_reference/nope.yaml is invalid"):
        data.trust_rules.__wrapped__("x-reference")
    with pytest.raises(ConfigError, match="presets/patientact_reference/trust.yaml is invalid"):
        data.step_rules.__wrapped__("x-reference")


def test_the_formulation_is_screened_and_revised_once_when_it_fails():
    """PatientAct Fig. 6: under the preset (or `psych_screen: true`) the formulation is screened; a
    failing screen gets one revision that names its issues, and the record says so. Off by default."""
    from mindsimkit.mindsim.patientact.decompose import decompose
    from test_patientact import PSYCH

    class Screen(Direct):
        def __init__(self, passed):
            super().__init__()
            self.passed = passed

        def __call__(self, req):
            if req.schema_name == "FormulationScreen":
                return {"passed": self.passed, "issues": [] if self.passed else ["Coping lists a thought, not an act."]}
            if req.schema_name == "PsychFormulation" and len(req.messages) > 1:
                return {**PSYCH, "coping_patterns": ["Cancels plans and stays in bed."]}
            return super().__call__(req)

    def made(responder, **kw):
        backend = FakeBackend(responder)
        with Engines.with_backend(backend) as engines:
            d = asyncio.run(decompose(engines.role("profile_decomposer"), make_profile("p1"), 0, **kw))
        return d, [r.schema_name for r in backend.requests], backend

    d, calls, backend = made(Screen(False), screen=True)
    assert calls == ["PsychFormulation", "FormulationScreen", "PsychFormulation", "DecompositionDraft"]
    revise = backend.requests[2].messages[-1]["content"]
    assert "Coping lists a thought, not an act." in revise
    assert d.formulation.coping_patterns == ["Cancels plans and stays in bed."]
    assert d.formulation_screen.revised and not d.formulation_screen.first.passed
    assert "patientact/psych_screen.jinja2" in d.prompt and "patientact/psych_revise.jinja2" in d.prompt
    d, calls, _ = made(Screen(True), screen=True)
    assert calls == ["PsychFormulation", "FormulationScreen", "DecompositionDraft"] and not d.formulation_screen.revised
    d, calls, _ = made(Screen(False))
    assert "FormulationScreen" not in calls and d.formulation_screen is None
    cfg = SimulationConfig.from_section({"patient_engine": "patientact", "preset": REF})
    assert cfg.patientact.psych_screen and not SimulationConfig().patientact.psych_screen
