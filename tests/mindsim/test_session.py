"""Tests for one session and the participants (mindsim/session.py, mindsim/patient.py) on the fake engine."""

from __future__ import annotations

import asyncio
import json

import pytest

from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.patient import TurnFailed, clean_message
from mindsimkit.mindsim.scenario import Scenario
from mindsimkit.mindsim.schedule import draw_schedule
from mindsimkit.mindsim.session import Arc, Roles, SessionInput, run_session
from mindsimkit.profilegen.moves import load_vocabulary
from simfakes import SCENARIO, SimResponder, make_profile

V = load_vocabulary()


def run(responder, *, archetype="minimiser", memory=(), native=False, max_depth=None, **cfg):
    backend = FakeBackend(responder, native_tools=native)
    config = SimulationConfig(**{"sessions": 1, "turn_cap": 6, **cfg})
    profile = make_profile("p1", archetype)
    plan = draw_schedule("p1", 0, config).sessions[0]
    if max_depth is not None:
        plan = plan.model_copy(update={"max_depth": max_depth})
    with Engines.with_backend(backend) as engines:
        roles = Roles(*(engines.role(r) for r in ("patient", "counsellor", "scenario_writer", "memory_compactor")))
        arc = Arc.of(profile, V, roles, config, counsellor="counsellor", seed=0)
        rec = asyncio.run(run_session(arc, SessionInput(plan, Scenario(**SCENARIO), list(memory))))
    return rec, backend


def test_removed_move_is_rejected_then_recommitted():
    rec, backend = run(SimResponder(first_moves=["minimise", "hopelessness", "answer"]), archetype="catastrophiser")
    turn = rec.turns[1]
    assert [r.arguments["move"] for r in turn.rejected] == ["minimise"]
    assert "You never call any of it small" in turn.rejected[0].reason
    assert turn.move == "hopelessness"
    # the enum the patient was offered never held the archetype's removed moves
    commit_reqs = [r for r in backend.requests if "commit_move" in json.dumps(r.response_schema or {})]
    enum = commit_reqs[0].response_schema["properties"]["arguments"]["properties"]["move"]["enum"]
    assert not {"minimise", "relief", "deny"} & set(enum)
    assert all(t.move not in V.archetype("catastrophiser").removed_ids for t in rec.turns[1:])


def test_commits_exhausted_fail_the_turn():
    with pytest.raises(TurnFailed, match="no acceptable move"):
        run(SimResponder(first_moves=["relief"] * 5), archetype="catastrophiser", max_commit_retries=2)


def test_patient_history_shape_tool_calls_then_results_then_message():
    rec, _ = run(SimResponder(first_moves=["hopelessness", "answer"]))
    msgs = rec.patient_messages
    assert msgs[0]["role"] == "system" and msgs[1] == {"role": "assistant", "content": SCENARIO["opening_message"]}
    i = 2
    for turn in rec.turns[1:]:
        assert msgs[i]["role"] == "user"
        i += 1
        names = []
        while msgs[i]["role"] == "assistant" and msgs[i].get("tool_calls"):
            call = msgs[i]["tool_calls"][0]
            result = msgs[i + 1]
            assert (
                result["role"] == "tool"
                and result["tool_call_id"] == call["id"]
                and result["name"] == call["function"]["name"]
            )
            json.loads(call["function"]["arguments"])
            names.append(call["function"]["name"])
            i += 2
        # commit(s) first, accepted last, then agenda calls
        commits = [n for n in names if n == "commit_move"]
        assert names[: len(commits)] == commits and len(commits) == len(turn.rejected) + 1
        assert len(names) - len(commits) == len(turn.todo_updates)
        assert msgs[i] == {"role": "assistant", "content": turn.message}
        i += 1
    assert i == len(msgs)
    first = rec.turns[1]
    assert first.todo_updates and first.todo_updates[0].tool == "complete_todo"
    assert "Still open" in first.todo_updates[0].result and rec.agenda.done == ["the rejection email"]


def test_counsellor_sees_only_plain_messages():
    rec, backend = run(SimResponder())
    c = rec.counsellor_messages
    assert c[0]["role"] == "system" and all(set(m) == {"role", "content"} for m in c)
    assert [m["role"] for m in c[1:]] == ["user", "assistant"] * (len(rec.turns) - 1) + ["user"]
    assert [m["content"] for m in c[1::2]] == [t.message for t in rec.turns]
    for req in backend.requests:
        if req.role == "counsellor":
            assert not any(m["role"] == "tool" or m.get("tool_calls") for m in req.messages)
            assert "commit_move" not in json.dumps(req.messages)


def test_end_conversation_ends_after_last_words_and_cap_applies():
    rec, _ = run(SimResponder(end_after=2), turn_cap=10)
    assert rec.ended_by == "patient" and len(rec.turns) == 3 and rec.turns[-1].end_conversation
    assert rec.counsellor_messages[-1] == {"role": "user", "content": rec.turns[-1].message}
    rec, _ = run(SimResponder(end_after=99), turn_cap=4)
    assert rec.ended_by == "turn_cap" and len(rec.turns) == 4


def test_prompts_withhold_core_belief_and_carry_memory():
    rec, backend = run(SimResponder(), archetype="joker", memory=["Patient fears mornings."])
    p = rec.patient_system_prompt
    assert "waste of space" not in p and "recently made redundant" in p
    assert all(line in p for line in V.archetype("joker").never_lines)
    assert "`withhold`" not in p and "`deflect`" in p
    assert "Patient fears mornings." in p and "Patient fears mornings." in rec.counsellor_system_prompt
    assert rec.schedule.weekday in p and rec.schedule.weekday in rec.counsellor_system_prompt
    # the system prompt stays byte-identical for every patient call of the session
    sys_prompts = {r.messages[0]["content"] for r in backend.requests if r.role == "patient"}
    assert sys_prompts == {p}
    first, _ = run(SimResponder())
    assert "no earlier sessions" in first.counsellor_system_prompt
    assert "first time talking" in first.patient_system_prompt


def test_native_tool_engine_gives_the_same_history_shape():
    def native(req):
        from mindsimkit.mindcore.types import RawReply

        if req.tools:
            names = [t["function"]["name"] for t in req.tools]
            if "commit_move" in names:
                args = {
                    "move": "answer",
                    "secondary_move": None,
                    "end_conversation": True,
                    "reasoning": "I want to go.",
                }
                return RawReply(
                    content=None,
                    tool_calls=[
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "commit_move", "arguments": json.dumps(args)},
                        }
                    ],
                )
            return RawReply(content="")
        return SimResponder()(req)

    rec, _ = run(native, native=True)
    assert rec.turns[1].move == "answer" and rec.ended_by == "patient"
    assert rec.patient_messages[3]["tool_calls"][0]["function"]["name"] == "commit_move"


def test_clean_message():
    assert clean_message('"yeah ok"') == "yeah ok"
    assert clean_message("Patient: fine") == "fine"
    assert clean_message("   ") == ""


class DeepResponder(SimResponder):
    """A patient that always commits the deepest move its schema offers (the 135M patient's habit of reaching for
    `go_deeper` whatever its limit)."""

    def _commit(self, req, schema, system):
        enum = json.loads(schema)["properties"]["arguments"]["properties"]["move"]["enum"]
        move = max(enum, key=lambda m: (V.moves[m].depth or 0, -enum.index(m)))
        return {
            "name": "commit_move",
            "arguments": {
                "move": move,
                "secondary_move": None,
                "end_conversation": False,
                "reasoning": "I want to say more than before.",
            },
        }


def offered(backend) -> list[list[str]]:
    return [
        r.response_schema["properties"]["arguments"]["properties"]["move"]["enum"]
        for r in backend.requests
        if "commit_move" in json.dumps(r.response_schema or {})
    ]


def test_a_grammar_offering_only_acceptable_moves_loses_no_turn():
    deepest = max(V.moves[m].depth or 0 for m in V.depth_moves)
    # The paper's way: the too-deep move is committed, turned back, committed again, until the turn fails.
    with pytest.raises(TurnFailed, match="goes further than you are willing to go"):
        run(DeepResponder(), archetype="sceptic", max_commit_retries=2, max_depth=1)
    rec, backend = run(
        DeepResponder(), archetype="sceptic", max_commit_retries=2, acceptable_moves_only=True, max_depth=1
    )
    assert all(not t.rejected for t in rec.turns[1:]) and len(rec.turns) > 2
    for enum in offered(backend):
        assert max(V.moves[m].depth or 0 for m in enum) <= 1 < deepest
    # The moves still recorded as offered for the session are the archetype's, not one turn's.
    assert "go_deeper" in (rec.patient_tools or "")


def test_the_move_restriction_stays_off_under_the_reference_preset_and_on_native_tools():
    assert SimulationConfig(acceptable_moves_only=True).offers_acceptable_moves_only
    assert not SimulationConfig(acceptable_moves_only=True, preset="mindeval2-reference").offers_acceptable_moves_only
    assert "acceptable_moves_only" not in SimulationConfig().model_dump()  # runs that do not set it hash as before
