"""Three simulation knobs that make small-model runs cheaper without storing anything that is not speech
(they shorten the quickstart): `message_context: speech` (the first ask of a MindSim message shows the spoken
exchange, not the tool-call turns), `trim_cut_off` (a message that ran into its budget ends at its last
complete sentence) and `final_memory: false` (no memory rewrite after an arc's last session)."""

from __future__ import annotations

import asyncio
import json

import pytest

from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindcore.types import RawReply
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.prompting import last_complete_sentence, load_harness_text, speech_defects
from mindsimkit.mindsim.simulate import run_simulation
from simfakes import SimResponder, make_profile
from test_harness_text import NOTE, _is_patient_message, _session


def test_last_complete_sentence():
    assert last_complete_sentence("It was fine. Then she said that i shou") == "It was fine."
    assert last_complete_sentence('ok. She said "no way." and then we') == 'ok. She said "no way."'
    assert last_complete_sentence("Really? I don't know what") == "Really?"
    assert last_complete_sentence("it cost 3.5 dollars and th") is None  # "3.5" is no sentence end
    assert last_complete_sentence("no sentence ends here at al") is None
    assert last_complete_sentence("") is None


def _speech_only(req) -> bool:
    # An engine without native tools gets the tool turns as JSON text and "[name result]" lines.
    return not any(
        m["role"] == "tool" or m.get("tool_calls") or m["content"].startswith(("{", "[commit_move", "[complete_todo"))
        for m in req.messages
    )


def test_speech_context_asks_the_first_message_without_tool_turns():
    rec, backend = _session(SimResponder(end_after=99), message_context="speech")
    asks = [r for r in backend.requests if _is_patient_message(r)]
    assert len(asks) == len(rec.turns) - 1  # one ask per turn: nothing was re-asked
    first_note = load_harness_text().speech_first_note
    for req in asks:
        assert _speech_only(req)
        assert req.messages[-1]["content"].startswith(f"{NOTE} Accepted: ")
        assert req.messages[-1]["content"].endswith(first_note)
        assert req.messages[0] == rec.patient_messages[0]
    # the stored patient history is still the full protocol: tool turns, then the message
    assert any(m["role"] == "tool" for m in rec.patient_messages)
    assert NOTE not in json.dumps(rec.patient_messages)


def test_full_context_is_the_default_and_sends_the_tool_turns():
    rec, backend = _session(SimResponder(end_after=99))
    asks = [r for r in backend.requests if _is_patient_message(r)]
    assert asks and not any(_speech_only(r) for r in asks)


CUT = "It has been a rough week. Work keeps piling up and i cant even think about the"


def _cut_responder(text: str):
    base = SimResponder(end_after=99)

    def responder(req):
        if _is_patient_message(req) and not req.messages[-1]["content"].startswith(NOTE):
            return RawReply(content=text, finish_reason="length", completion_tokens=120)
        return base(req)

    return responder


def test_trim_keeps_the_complete_sentences_of_a_cut_message_and_marks_it():
    rec, backend = _session(_cut_responder(CUT), trim_cut_off=True)
    for turn in rec.turns[1:]:
        assert turn.message == "It has been a rough week." and turn.trimmed and not turn.rejected_messages
    assert not rec.turns[0].trimmed
    assert not any(r.messages[-1]["content"].startswith(NOTE) for r in backend.requests if _is_patient_message(r))
    assert "i cant even think" not in json.dumps(rec.patient_messages) + json.dumps(rec.counsellor_messages)


def test_without_trim_or_without_a_complete_sentence_the_message_is_reasked():
    rec, _ = _session(_cut_responder(CUT))
    assert all([r.reason for r in t.rejected_messages] == ["cut_off"] and not t.trimmed for t in rec.turns[1:])
    rec, _ = _session(
        _cut_responder("i just keep thinking that if i had tried harder at the intervi"), trim_cut_off=True
    )
    assert all([r.reason for r in t.rejected_messages] == ["cut_off"] and not t.trimmed for t in rec.turns[1:])
    assert all(t.message.startswith("yeah idk") for t in rec.turns[1:])
    assert speech_defects("It has been a rough week.") == []


@pytest.mark.parametrize("final_memory", [True, False])
def test_final_memory_switch(tmp_path, final_memory):
    backend = FakeBackend(SimResponder(end_after=99))
    config = SimulationConfig(sessions=3, turn_cap=3, final_memory=final_memory)
    with Engines.with_backend(backend) as engines:
        summary = run_simulation([make_profile("p1")], engines, config, tmp_path, seed=1)
    assert summary.sessions_written == 3
    recs = sorted(
        (json.loads(p.read_text()) for p in (tmp_path / "sessions" / "checkpoints").glob("*.json")),
        key=lambda r: r["session_index"],
    )
    rewrites = [r for r in backend.requests if r.role == "memory_compactor"]
    assert len(rewrites) == (3 if final_memory else 2)
    last = recs[-1]
    assert last["memory_update"]["skipped"] is (not final_memory)
    if not final_memory:
        assert last["memory_after"] == last["memory_before"] and last["memory_update"]["attempts"] == 0
    assert not any(r["memory_update"]["skipped"] for r in recs[:-1])
    assert recs[1]["memory_before"] == recs[0]["memory_after"]  # the sessions in between still carry memory
    assert summary.memory_skipped == (0 if final_memory else 1)


def test_scenario_scale_shrinks_only_the_text_limits_of_the_writers_schema():
    from mindsimkit.mindsim.scenario import _ScenarioDraft, draft_model

    assert draft_model(1.0) is _ScenarioDraft
    full, half = _ScenarioDraft.model_json_schema(), draft_model(0.5).model_json_schema()
    assert half["required"] == full["required"] and half["properties"].keys() == full["properties"].keys()
    for name, prop in full["properties"].items():
        other = half["properties"][name]
        limit = prop.get("maxLength") or (prop.get("items") or {}).get("maxLength")
        if limit:
            scaled = other.get("maxLength") or other["items"]["maxLength"]
            assert scaled == (limit if name == "opening_message" else max(24, int(limit * 0.5))), name
        # everything else (item counts, types, descriptions) is the same
        strip = lambda p: {k: v for k, v in p.items() if k not in ("maxLength", "items")}  # noqa: E731
        assert strip(other) == strip(prop), name


def test_scenario_scale_reaches_the_request_and_the_budget_but_not_the_opening_limit():
    from mindsimkit.mindcore.budget import worst_case_tokens
    from mindsimkit.mindcore.recipe import Recipe
    from mindsimkit.mindcore.budget_fit import fit_budgets
    from mindsimkit.mindsim.scenario import OPENING_MAX_CHARS, draft_model, first_scenario
    from mindsimkit.mindsim.schedule import draw_schedule
    from simfakes import SCENARIO

    cut = (
        "so i have been meaning to write this for a while and i just do not know how to start it because every time i "
        * 3
    )
    queue = [cut[:OPENING_MAX_CHARS]]

    def responder(req):
        if req.schema_name == "Scenario":
            return {**SCENARIO, "opening_message": queue.pop(0) if queue else "hey. rough week."}
        return SimResponder()(req)

    backend = FakeBackend(responder)
    plan = draw_schedule("p1", 0, SimulationConfig(sessions=1)).sessions[0]
    with Engines.with_backend(backend) as engines:
        scenario, bad = asyncio.run(first_scenario(engines.role("scenario_writer"), make_profile(), plan, 900, 2, 0.5))
    assert [r.reason for r in bad] == ["cut_off"] and scenario.opening_message == "hey. rough week."
    sent = backend.requests[0].response_schema
    assert sent["properties"]["event"]["maxLength"] == 250 and sent["properties"]["opening_message"]["maxLength"] == 200

    def recipe(**sim):
        return Recipe(
            name="t", engines={"local": {"kind": "embedded"}}, roles={"default": {"engine": "local"}}, simulation=sim
        )

    full = fit_budgets(recipe(), recipe().engines_config(), {"simulate"}).worst("scenario_writer")
    half = fit_budgets(recipe(scenario_scale=0.5), recipe().engines_config(), {"simulate"}).worst("scenario_writer")
    assert half == worst_case_tokens(draft_model(0.5).model_json_schema()).tokens < full
