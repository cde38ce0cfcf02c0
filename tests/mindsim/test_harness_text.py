"""Harness text is never patient speech: patient messages and opening messages that are
tool calls, JSON, hold tool-call syntax or were cut off mid-sentence are re-asked and counted, never stored;
counsellor replies with those defects are stored as sent and flagged (mindsim/patient.py, mindsim/scenario.py,
mindsim/prompting.py, mindsim/data/harness_text.yaml)."""

from __future__ import annotations

import asyncio
import json

import pytest

from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindcore.types import RawReply
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.patient import Patient, TurnFailed
from mindsimkit.mindsim.prompting import counsellor_flags, load_harness_text, speech_defects
from mindsimkit.mindsim.scenario import OPENING_MAX_CHARS, Scenario, first_scenario
from mindsimkit.mindsim.schedule import draw_schedule
from mindsimkit.mindsim.session import Arc, Roles, SessionInput, run_session
from mindsimkit.mindsim.simulate import run_simulation
from mindsimkit.profilegen.moves import load_vocabulary
from simfakes import SCENARIO, SimResponder, make_profile

V = load_vocabulary()
NOTE = "[harness note]"

# The shapes seen in the quickstart's transcripts, and their close relatives.
BAD = {
    "tool_call": '{"name": "commit_move", "arguments": {"move": "sustain_talk", "secondary_move": nu',
    "tool_syntax": 'yeah ok {"name": "add_todo", "arguments": {"item": "sister"}} anyway',
    "json": '{"message": "idk really", "mood": "low"}',
    "cut_off": RawReply(
        content="i keep thinking that if i just tried harder at the intervi",
        finish_reason="length",
        completion_tokens=120,
    ),
}


def _text(shape) -> str:
    return shape.content if isinstance(shape, RawReply) else shape


def _is_patient_message(req) -> bool:
    return req.role == "patient" and not req.response_schema


def test_detector_on_each_shape_and_on_plain_speech():
    for reason, shape in BAD.items():
        fr = shape.finish_reason if isinstance(shape, RawReply) else "stop"
        assert speech_defects(_text(shape), finish_reason=fr)[0] == reason
    assert speech_defects('```json\n{"name": "none"}\n```') == ["tool_call"]
    assert speech_defects("add_todo: call my sister") == ["tool_syntax"]
    # PatientAct's private note echoed back (seen on the embedded engine): not the patient's words
    assert speech_defects("The_2022; What you have been through: [inner state]") == ["tool_syntax"]
    assert speech_defects("How much you trust the counsellor right now: a little") == ["tool_syntax"]
    # The re-ask note's label echoed with another word (the embedded study run, 2026-12-06: "[harness point]")
    assert speech_defects("The gift of two great minds. [harness point] It was not a gift.") == ["tool_syntax"]
    for fine in ("idk", "[sighs] fine i guess", "ya its been a lot lately", "Work was a lot: {too much}."):
        assert speech_defects(fine) == [], fine
    # stopped by the budget at a sentence end is a whole message; mid-sentence is not
    assert speech_defects("that's all really.", finish_reason="length") == []
    assert speech_defects('she said "no."', finish_reason="length") == []
    assert speech_defects("that's all real", finish_reason="length") == ["cut_off"]
    assert speech_defects("x" * OPENING_MAX_CHARS, max_chars=OPENING_MAX_CHARS) == ["cut_off"]
    assert speech_defects("x" * (OPENING_MAX_CHARS - 1), max_chars=OPENING_MAX_CHARS) == []


def test_data_file_names_every_patient_tool():
    config = SimulationConfig(sessions=1)
    plan = draw_schedule("p1", 0, config).sessions[0]
    from mindsimkit.mindsim.agenda import Agenda

    p = Patient(
        client=None,
        vocab=V,
        archetype="minimiser",
        max_depth=plan.max_depth,
        style_cues=["x"],
        agenda=Agenda.from_checkpoints(["a"]),
        config=config,
        rng=None,
        history=[],
    )
    assert {p.commit_tool.name, *(t.name for t in p.todo_tools)} <= set(load_harness_text().tool_names)


def _session(responder, **cfg):
    backend = FakeBackend(responder)
    config = SimulationConfig(**{"sessions": 1, "turn_cap": 4, **cfg})
    plan = draw_schedule("p1", 0, config).sessions[0]
    with Engines.with_backend(backend) as engines:
        roles = Roles(*(engines.role(r) for r in ("patient", "counsellor", "scenario_writer", "memory_compactor")))
        arc = Arc.of(make_profile("p1"), V, roles, config, counsellor="counsellor", seed=0)
        rec = asyncio.run(run_session(arc, SessionInput(plan, Scenario(**SCENARIO), [])))
    return rec, backend


@pytest.mark.parametrize("reason", list(BAD))
def test_patient_message_shape_is_reasked_counted_and_never_stored(reason):
    base = SimResponder(end_after=99)

    def responder(req):
        # every turn's first message attempt is bad; the re-ask (which carries the note) is answered well
        if _is_patient_message(req) and not req.messages[-1]["content"].startswith(NOTE):
            return BAD[reason]
        return base(req)

    rec, backend = _session(responder)
    bad_text = _text(BAD[reason])
    for turn in rec.turns[1:]:
        assert [r.reason for r in turn.rejected_messages] == [reason]
        assert turn.rejected_messages[0].text == bad_text[:200]
        assert turn.message.startswith("yeah idk, turn")
    assert getattr(rec.rejected_messages, "json_" if reason == "json" else reason) == len(rec.turns) - 1
    stored = json.dumps(rec.patient_messages) + json.dumps(rec.counsellor_messages) + json.dumps(rec.transcript())
    assert bad_text not in stored and NOTE not in stored
    reasks = [r for r in backend.requests if _is_patient_message(r) and r.messages[-1]["content"].startswith(NOTE)]
    assert len(reasks) == len(rec.turns) - 1
    assert load_harness_text().reask_notes[reason] in reasks[0].messages[-1]["content"]
    for req in reasks:  # the re-ask shows speech only, plus this turn's accepted move and its cue
        assert req.messages[-1]["content"].startswith(f"{NOTE} Accepted: ")
        assert not any(m["role"] == "tool" or m.get("tool_calls") for m in req.messages)
        assert not any(m["content"].startswith("{") or m["content"].startswith("[commit_move") for m in req.messages)
        assert req.messages[0] == rec.patient_messages[0]


def test_patient_message_that_never_becomes_speech_fails_the_turn():
    base = SimResponder(end_after=99)
    calls = []

    def responder(req):
        if _is_patient_message(req):
            calls.append(req)
            return BAD["tool_call"]
        return base(req)

    with pytest.raises(TurnFailed, match=r"no usable message after 3 attempts \(reasons: tool_call"):
        _session(responder, max_message_retries=2)
    assert len(calls) == 3


def test_failed_turn_sinks_the_arc_with_no_session_written(tmp_path):
    base = SimResponder(end_after=99)

    def responder(req):
        if _is_patient_message(req) and "You are p2" in req.messages[0]["content"]:
            return BAD["cut_off"]
        return base(req)

    with Engines.with_backend(FakeBackend(responder)) as engines:
        summary = run_simulation(
            [make_profile("p1"), make_profile("p2")],
            engines,
            SimulationConfig(sessions=1, turn_cap=3),
            tmp_path,
            seed=1,
        )
    assert [(f.patient_id, f.error.split(":")[0]) for f in summary.failed_arcs] == [("p2", "TurnFailed")]
    assert summary.sessions_written == 1


def _scenario_responder(bad_openers: list[str]):
    queue = list(bad_openers)

    def responder(req):
        if req.schema_name == "Scenario":
            return {**SCENARIO, "opening_message": queue.pop(0) if queue else SCENARIO["opening_message"]}
        return SimResponder()(req)

    return responder


OPENERS = {
    "tool_call": '{"name": "add_todo", "arguments": {"item": "the rejection email"}}',
    "tool_syntax": 'hey. {"name": "commit_move"} rough week',
    "json": '{"text": "hey"}',
    "cut_off": (
        "so basically the thing is that ever since the depot let me go i have been sitting around "
        "and i cant really explain it but every morning i wake up and think about how i should be "
        "getting ready for a shift and th"
    )[:OPENING_MAX_CHARS],
}


def _first(responder, retries=2):
    backend = FakeBackend(responder)
    plan = draw_schedule("p1", 0, SimulationConfig(sessions=1)).sessions[0]
    with Engines.with_backend(backend) as engines:
        out = asyncio.run(first_scenario(engines.role("scenario_writer"), make_profile(), plan, 900, retries))
    return out, backend


@pytest.mark.parametrize("reason", list(OPENERS))
def test_opening_message_shape_is_redrafted_and_counted(reason):
    assert len(OPENERS["cut_off"]) == OPENING_MAX_CHARS
    (scenario, bad), backend = _first(_scenario_responder([OPENERS[reason]]))
    assert scenario.opening_message == SCENARIO["opening_message"]
    assert [(r.reason, r.text) for r in bad] == [(reason, OPENERS[reason][:200])]
    assert len(backend.requests) == 2
    redraft = backend.requests[1].messages
    assert json.loads(redraft[-2]["content"])["opening_message"] == OPENERS[reason]  # the draft is shown back
    assert load_harness_text().opening_notes[reason].format(max_chars=OPENING_MAX_CHARS) in redraft[-1]["content"]


def test_opening_message_that_never_becomes_speech_fails_and_sinks_every_arc_of_that_patient(tmp_path):
    with pytest.raises(TurnFailed, match="no usable opening message after 2 scenario drafts"):
        _first(_scenario_responder([OPENERS["json"]] * 5), retries=1)

    def responder(req):
        if req.schema_name == "Scenario" and "p2:" in req.messages[0]["content"]:
            return {**SCENARIO, "opening_message": OPENERS["tool_call"]}
        return SimResponder()(req)

    config = SimulationConfig(sessions=1, turn_cap=3, counsellors=["counsellor", "counsellor:b"])
    with Engines.with_backend(FakeBackend(responder)) as engines:
        summary = run_simulation([make_profile("p1"), make_profile("p2")], engines, config, tmp_path, seed=1)
    assert sorted((f.patient_id, f.counsellor) for f in summary.failed_arcs) == [
        ("p2", "counsellor"),
        ("p2", "counsellor:b"),
    ]
    assert not (tmp_path / "sessions" / "scenarios" / "p2-1.json").exists()
    assert summary.sessions_written == 2


def test_rejected_openers_ride_on_turn_zero_and_are_summed_once_per_patient(tmp_path):
    queue = {"p1": [OPENERS["cut_off"]], "p2": [OPENERS["json"], OPENERS["tool_call"]]}

    def responder(req):
        if req.schema_name == "Scenario" and "first conversation" in req.messages[0]["content"]:
            pid = "p1" if "p1:" in req.messages[0]["content"] else "p2"
            if queue[pid]:
                return {**SCENARIO, "opening_message": queue[pid].pop(0)}
        return SimResponder()(req)

    config = SimulationConfig(sessions=2, turn_cap=3, counsellors=["counsellor", "counsellor:b"])
    with Engines.with_backend(FakeBackend(responder)) as engines:
        summary = run_simulation([make_profile("p1"), make_profile("p2")], engines, config, tmp_path, seed=1)
    assert summary.sessions_written == 8
    # each counsellor's session 0 carries the shared scenario's rejected drafts; the run counts them once
    assert summary.rejected_messages == {"blank": 0, "tool_call": 1, "json": 1, "tool_syntax": 0, "cut_off": 1}
    import pyarrow.parquet as pq

    rows = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist()
    p2_first = [r for r in rows if r["patient_id"] == "p2" and r["session_index"] == 0]
    assert len(p2_first) == 2
    for r in p2_first:
        assert [x["reason"] for x in r["turns"][0]["rejected_messages"]] == ["json", "tool_call"]
        assert r["rejected_messages"]["json"] == 1 and r["scenario_shared"]


COUNSELLOR_DEFECTS = [
    ('{"name": "commit_move", "arguments": {"move": "answer"}}', ["tool_call"]),
    ('Let me note that. {"name": "add_todo", "arguments": {"item": "sleep"}} How are you?', ["tool_syntax"]),
    ('{"reply": "How are you feeling?"}', ["json"]),
    (RawReply(content="It sounds like what you are describing is a sense that", finish_reason="length"), ["cut_off"]),
    ("That sounds hard.\nPatient: yeah it is, i just feel stuck", ["speaks_as_patient"]),
    ("  That sounds really hard. What happened next?\n", []),
]


def test_counsellor_defects_are_stored_verbatim_and_flagged_never_reasked():
    base = SimResponder(end_after=99)

    def responder(req):
        if req.role == "counsellor":
            n = sum(m["role"] == "assistant" for m in req.messages)
            return COUNSELLOR_DEFECTS[n][0]
        return base(req)

    rec, backend = _session(responder, turn_cap=len(COUNSELLOR_DEFECTS) + 1)
    replies = [m["content"] for m in rec.counsellor_messages if m["role"] == "assistant"]
    assert replies == [_text(shape) for shape, _ in COUNSELLOR_DEFECTS]  # byte for byte, whitespace included
    assert [(f.reply_index, f.flags) for f in rec.counsellor_flags] == [
        (i, flags) for i, (_, flags) in enumerate(COUNSELLOR_DEFECTS)
    ]
    assert rec.counsellor_flags[3].finish_reason == "length"
    assert sum(r.role == "counsellor" for r in backend.requests) == len(COUNSELLOR_DEFECTS)  # nothing re-asked
    # the patient answered the reply exactly as it was sent
    heard = [m["content"] for m in rec.patient_messages if m["role"] == "user" and not m["content"].startswith("[")]
    assert heard[: len(replies)] == replies


def test_counsellor_flags_are_summed_in_the_summary(tmp_path):
    base = SimResponder(end_after=99)

    def responder(req):
        if req.role == "counsellor":
            return "Ok.\nClient: i guess"
        return base(req)

    with Engines.with_backend(FakeBackend(responder)) as engines:
        summary = run_simulation(
            [make_profile("p1")], engines, SimulationConfig(sessions=1, turn_cap=3), tmp_path, seed=1
        )
    assert summary.counsellor_flags == {
        "replies": 2,
        "tool_call": 0,
        "json": 0,
        "tool_syntax": 0,
        "cut_off": 0,
        "speaks_as_patient": 2,
    }
    assert counsellor_flags("The patient said they were tired.") == []


def test_reasked_patient_message_is_drawn_with_a_new_seed():
    """A 135M patient echoed the same note six times running: the re-asks went out with identical messages and
    the role's fixed seed. Each re-ask of a message now moves the seed on."""
    from mindsimkit.mindcore.config import RoleSpec

    base = SimResponder(end_after=99)
    echoes = iter([f"{NOTE} Accepted: answer."] * 2)

    def responder(req):
        if _is_patient_message(req):
            return next(echoes, "ok fine, it was a long week.")
        return base(req)

    backend = FakeBackend(responder)
    config = SimulationConfig(sessions=1, turn_cap=2, message_context="speech")
    plan = draw_schedule("p1", 0, config).sessions[0]
    roles_spec = {"default": RoleSpec(engine="fake"), "patient": RoleSpec(engine="fake", seed=7)}
    with Engines.with_backend(backend, roles=roles_spec) as engines:
        roles = Roles(*(engines.role(r) for r in ("patient", "counsellor", "scenario_writer", "memory_compactor")))
        arc = Arc.of(make_profile("p1"), V, roles, config, counsellor="counsellor", seed=0)
        rec = asyncio.run(run_session(arc, SessionInput(plan, Scenario(**SCENARIO), [])))
    assert [r.reason for r in rec.turns[1].rejected_messages] == ["tool_syntax", "tool_syntax"]
    assert [r.seed for r in backend.requests if _is_patient_message(r)] == [7, 8, 9]
