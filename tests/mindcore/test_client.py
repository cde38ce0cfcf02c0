"""RoleClient logic on the fake backend: re-asking on invalid output, counted failures, tool-call
shape on engines with and without native tools, accounting."""

from __future__ import annotations

import asyncio
import json
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from mindsimkit.mindcore.errors import StructuredOutputError
from mindsimkit.mindcore.fake import scripted
from mindsimkit.mindcore.types import RawReply, ToolSpec


class Pet(BaseModel):
    name: str = Field(..., max_length=20)
    legs: int = Field(..., ge=0, le=8)


class Commit(BaseModel):
    move: Literal["share", "deflect"]
    reasoning: str = Field(..., max_length=100)


def run(coro):
    return asyncio.run(coro)


def test_structured_reasks_with_the_validation_error(fake_engines):
    engines, backend = fake_engines(scripted({"name": "Rex", "legs": 40}, "not json", {"name": "Rex", "legs": 4}))
    pet = run(engines.role("profile_writer").structured([{"role": "user", "content": "a pet"}], Pet))
    assert pet == Pet(name="Rex", legs=4)
    assert len(backend.requests) == 3
    second = backend.requests[1].messages
    assert second[-1]["role"] == "user" and "legs" in second[-1]["content"]
    assert backend.requests[0].response_schema == Pet.model_json_schema()
    summary = engines.ledger.summary()["profile_writer"]
    assert summary["calls"] == 1 and summary["attempts"] == 3 and summary["failed"] == 0


def test_structured_failure_is_raised_and_counted(fake_engines):
    engines, backend = fake_engines(scripted("{}"))
    with pytest.raises(StructuredOutputError) as info:
        run(engines.role("screener").structured([{"role": "user", "content": "x"}], Pet, max_attempts=2))
    assert info.value.attempts == 2 and "name" in info.value.last_error
    assert engines.ledger.summary()["screener"]["failed"] == 1
    assert len(backend.requests) == 2


def test_emulated_tool_call_yields_openai_tool_message(fake_engines):
    engines, backend = fake_engines(
        scripted({"name": "commit_move", "arguments": {"move": "share", "reasoning": "I want to"}})
    )
    tool = ToolSpec.from_model("commit_move", "Commit this turn's move", Commit)
    res = run(engines.role("patient").tool_call([{"role": "user", "content": "hi"}], [tool]))
    assert res.message["role"] == "assistant" and res.message["content"] is None
    (tc,) = res.message["tool_calls"]
    assert tc["type"] == "function" and tc["function"]["name"] == "commit_move"
    assert json.loads(tc["function"]["arguments"]) == {"move": "share", "reasoning": "I want to"}
    assert tc["id"].startswith("call_") and res.calls[0].id == tc["id"]
    # The engine was asked through a JSON schema, not `tools`.
    assert backend.requests[0].tools is None and backend.requests[0].response_schema is not None


def test_emulated_history_is_sent_as_text(fake_engines):
    engines, backend = fake_engines(scripted({"name": "none"}))
    history = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "commit_move", "arguments": '{"move": "share"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "name": "commit_move", "content": "accepted"},
    ]
    tool = ToolSpec.from_model("commit_move", "x", Commit)
    res = run(engines.role("patient").tool_call(history, [tool], allow_none=True))
    assert res.calls == [] and res.message["tool_calls"] == []
    sent = backend.requests[0].messages
    assert all(m.get("content") is not None and "tool_calls" not in m for m in sent)
    assert sent[2]["role"] == "user" and "accepted" in sent[2]["content"]


def test_native_tool_call_reasks_when_no_tool_called(fake_engines):
    replies = [
        RawReply(content="sure"),
        RawReply(
            content=None,
            tool_calls=[
                {
                    "id": "x1",
                    "type": "function",
                    "function": {"name": "commit_move", "arguments": '{"move": "deflect", "reasoning": "no"}'},
                }
            ],
        ),
    ]
    engines, backend = fake_engines(lambda req: replies.pop(0), native_tools=True)
    tool = ToolSpec.from_model("commit_move", "x", Commit)
    res = run(engines.role("patient").tool_call([{"role": "user", "content": "hi"}], [tool]))
    assert res.calls[0].arguments["move"] == "deflect" and res.calls[0].id == "x1"
    assert backend.requests[0].tools[0]["function"]["name"] == "commit_move"
    assert backend.requests[0].tool_choice == "required"
    assert len(backend.requests) == 2


def test_role_sampling_comes_from_the_role_spec(fake_engines):
    from mindsimkit.mindcore.config import RoleSpec
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.fake import FakeBackend

    backend = FakeBackend(scripted("ok"))
    engines = Engines.with_backend(
        backend,
        roles={
            "default": RoleSpec(engine="fake"),
            "counsellor": RoleSpec(engine="fake", temperature=1.0, max_tokens=77, seed=3),
        },
    )
    run(engines.role("counsellor:gpt").chat([{"role": "user", "content": "x"}]))
    req = backend.requests[0]
    assert (req.temperature, req.max_tokens, req.seed, req.role) == (1.0, 77, 3, "counsellor:gpt")


@pytest.mark.parametrize("native", [True, False])
def test_exhausted_tool_call_is_one_failed_ledger_record_with_every_attempt(fake_engines, native):
    # Native engines answer in prose (no tool call); emulated ones with JSON naming an unknown tool.
    reply = (
        RawReply(content="no thanks", prompt_tokens=10, completion_tokens=2, cached_tokens=4)
        if native
        else RawReply(
            content='{"name": "hang_up", "arguments": {}}', prompt_tokens=10, completion_tokens=2, cached_tokens=4
        )
    )
    engines, backend = fake_engines(lambda req: reply, native_tools=native)
    tool = ToolSpec.from_model("commit_move", "x", Commit)
    with pytest.raises(StructuredOutputError, match="after 3 attempts") as info:
        run(engines.role("patient").tool_call([{"role": "user", "content": "hi"}], [tool], max_attempts=3))
    assert info.value.attempts == 3
    assert ("no tool was called" if native else "unknown tool 'hang_up'") in info.value.last_error
    (rec,) = engines.ledger.rows()
    assert (rec["kind"], rec["calls"], rec["failed"], rec["attempts"]) == ("tool_call", 1, 1, 3)
    assert (rec["prompt_tokens"], rec["completion_tokens"], rec["cached_tokens"]) == (30, 6, 12)
    # Every re-ask goes back to the original messages plus one piece of feedback, never piling up.
    assert len(backend.requests) == 3 and len(backend.requests[2].messages) == len(backend.requests[1].messages)


def test_reasks_move_the_seed_on_so_a_repeated_question_can_get_another_answer():
    """With a fixed seed, a re-ask whose messages came out as the last one did would draw the same bad answer:
    each re-ask gets seed + attempt (the first try keeps the role's seed); a role without a seed stays unseeded."""
    from mindsimkit.mindcore.config import RoleSpec
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.fake import FakeBackend

    backend = FakeBackend(scripted("not json", "not json", {"name": "Rex", "legs": 4}))
    engines = Engines.with_backend(
        backend, roles={"default": RoleSpec(engine="fake"), "screener": RoleSpec(engine="fake", seed=3)}
    )
    run(engines.role("screener").structured([{"role": "user", "content": "a pet"}], Pet))
    assert [r.seed for r in backend.requests] == [3, 4, 5]
    # Identical messages on the second and third tries: only the seed tells them apart.
    assert backend.requests[1].messages == backend.requests[2].messages
    client = engines.role("screener")
    assert client.reseeded({"max_tokens": 9}, 0) == {"max_tokens": 9}
    assert client.reseeded({"max_tokens": 9}, 2) == {"max_tokens": 9, "seed": 5}
    assert client.reseeded({"seed": 10}, 1) == {"seed": 11}
    assert engines.role("judge").reseeded({}, 3) == {}


class Owner(BaseModel):
    pets: list[Pet]


def test_schemas_are_built_once_per_model_and_equal_to_pydantics(fake_engines):
    from mindsimkit.mindcore.client import tool_choice_schema
    from mindsimkit.mindcore.types import model_schema

    assert model_schema(Pet) is model_schema(Pet) and model_schema(Pet) == Pet.model_json_schema()
    engines, backend = fake_engines(scripted({"name": "Rex", "legs": 4}, {"name": "Tom", "legs": 3}))
    for _ in range(2):
        run(engines.role("profile_writer").structured([{"role": "user", "content": "a pet"}], Pet))
    assert backend.requests[0].response_schema is backend.requests[1].response_schema
    # The combined tool-choice schema hoists the tools' $defs without touching the tools' own (shared) schemas.
    tools = [ToolSpec.from_model("adopt", "adopt pets", Owner), ToolSpec.from_model("commit", "commit", Commit)]
    combined = tool_choice_schema(tools, True)
    assert combined is tool_choice_schema(list(tools), True)
    assert "$defs" in model_schema(Owner) and model_schema(Owner) == Owner.model_json_schema()
    assert combined["$defs"] == Owner.model_json_schema()["$defs"]
    args = combined["anyOf"][0]["properties"]["arguments"]
    assert "$defs" not in args and args["properties"] == Owner.model_json_schema()["properties"]
    assert [o["properties"]["name"]["const"] for o in combined["anyOf"]] == ["adopt", "commit", "none"]
