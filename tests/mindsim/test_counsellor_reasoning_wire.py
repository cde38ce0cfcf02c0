"""A reasoning counsellor's own earlier reasoning on the wire, against the scripted
OpenAI-compatible server: what the server returns beside the words is read into the reply, kept per counsellor
reply, and — with `return_reasoning`, on under the `mindeval2-reference` preset — is in the JSON body of every later
request on that counsellor's own earlier turns, in the shape the server gave it (MindEval2's reference code sends
`reasoning_content`, `thinking_blocks` and `reasoning_items` back the same way, `session.py` `CARRIED`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mindsimkit.mindcore.backends import OpenAIBackend, reasoning_of
from mindsimkit.mindcore.client import RoleClient
from mindsimkit.mindcore.config import RoleSpec
from mindsimkit.mindcore.types import UsageLedger
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.patient import Counsellor
from openai_stub import OpenAIStub, Reply

BLOCKS = [{"type": "thinking", "thinking": "they want direction", "signature": "sig-1"}]


def test_the_reply_message_s_reasoning_fields_are_read_and_vllm_s_reasoning_is_reasoning_content():
    assert reasoning_of({"content": "hi", "reasoning_content": "r"}) == {"reasoning_content": "r"}
    assert reasoning_of({"content": "hi", "reasoning": "r"}) == {"reasoning_content": "r"}
    assert reasoning_of({"content": "hi", "reasoning_content": "a", "reasoning": "b"}) == {"reasoning_content": "a"}
    assert reasoning_of(
        {
            "content": "hi",
            "thinking_blocks": BLOCKS,
            "reasoning_items": [{"id": "rs_1"}],
            "reasoning_details": [],
            "reasoning_content": None,
        }
    ) == {"thinking_blocks": BLOCKS, "reasoning_items": [{"id": "rs_1"}]}
    assert reasoning_of({"content": "hi"}) == {}


def _talk(behaviour, spec: RoleSpec, config: SimulationConfig, turns: int = 3):
    """`turns` counsellor replies over HTTP to a stub server playing `behaviour`, the patient's words in between:
    the replies, the counsellor, and every request body the server got."""
    with OpenAIStub(behaviour) as stub:
        said, counsellor = _converse(stub, spec, config, turns)
    return said, counsellor, stub.requests


def _converse(stub, spec: RoleSpec, config: SimulationConfig, turns: int):
    backend = OpenAIBackend("stub", base_url=stub.base_url, default_model="c", kind="openai")
    client = RoleClient("counsellor", backend, spec, "c", UsageLedger())
    counsellor = Counsellor(client=client, config=config, history=[{"role": "system", "content": "be brief"}])

    async def go():
        try:
            said = []
            for n in range(turns):
                counsellor.hear(f"patient words {n}")
                said.append(await counsellor.reply())
            return said, counsellor
        finally:
            await backend.aclose_loop()

    return asyncio.run(go())


def _thinking_server(body: dict[str, Any]) -> Reply:
    n = sum(m["role"] == "assistant" for m in body["messages"])
    # vLLM-style `reasoning` on even replies, `reasoning_content` plus Claude-style blocks on odd ones.
    fields = (
        {"reasoning": f"thought {n}"}
        if n % 2 == 0
        else {"reasoning_content": f"thought {n}", "thinking_blocks": BLOCKS}
    )
    return Reply(content=f"reply {n}", message_fields=fields)


@pytest.mark.parametrize("where", ["preset", "role"])
def test_with_return_reasoning_every_later_body_carries_the_counsellors_earlier_reasoning(where):
    config = SimulationConfig.from_section({"preset": "mindeval2-reference"} if where == "preset" else {})
    spec = RoleSpec(engine="stub", return_reasoning=True if where == "role" else None)
    said, counsellor, bodies = _talk(_thinking_server, spec, config)
    assert said == ["reply 0", "reply 1", "reply 2"]
    first, second, third = (b["messages"] for b in bodies)
    assert not any(m["role"] == "assistant" for m in first)
    assert [m for m in second if m["role"] == "assistant"] == [
        {"role": "assistant", "content": "reply 0", "reasoning_content": "thought 0"}
    ]
    assert [m for m in third if m["role"] == "assistant"] == [
        {"role": "assistant", "content": "reply 0", "reasoning_content": "thought 0"},
        {"role": "assistant", "content": "reply 1", "reasoning_content": "thought 1", "thinking_blocks": BLOCKS},
    ]
    assert "return_reasoning" not in bodies[0]  # a switch of ours, never a body field
    assert [f.reasoning for f in counsellor.flags] == [
        {"reasoning_content": "thought 0"},
        {"reasoning_content": "thought 1", "thinking_blocks": BLOCKS},
        {"reasoning_content": "thought 2"},
    ]


def test_without_it_the_bodies_carry_words_only_and_the_reasoning_is_still_kept():
    _, counsellor, bodies = _talk(_thinking_server, RoleSpec(engine="stub"), SimulationConfig())
    for body in bodies:
        assert all(set(m) == {"role", "content"} for m in body["messages"])
    assert [bool(f.reasoning) for f in counsellor.flags] == [True, True, True]


def test_a_server_that_returns_no_reasoning_gets_plain_turns_back_under_the_preset():
    preset = SimulationConfig.from_section({"preset": "mindeval2-reference"})
    _, counsellor, bodies = _talk(lambda body: Reply(content="plain"), RoleSpec(engine="stub"), preset)
    assert all(set(m) == {"role", "content"} for m in bodies[-1]["messages"])
    assert [f.reasoning for f in counsellor.flags] == [None, None, None]
