"""A counsellor that writes its reasoning into its reply's text (`<think>…</think>`, as DeepSeek-R1 and Qwen3 do when
a server does not parse it out): over HTTP against the scripted server, the patient hears only the words, the
session row keeps the reasoning apart, a reply that is all reasoning is re-asked, and the switch turns it off."""

from __future__ import annotations

import asyncio

import pytest

from mindsimkit.mindcore.backends import OpenAIBackend
from mindsimkit.mindcore.client import RoleClient
from mindsimkit.mindcore.config import RoleSpec
from mindsimkit.mindcore.types import UsageLedger
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.patient import Counsellor
from mindsimkit.mindsim.prompting import split_inline_reasoning
from mindsimkit.mindsim.records import CounsellorFlags
from openai_stub import OpenAIStub, Reply


@pytest.mark.parametrize(
    ("raw", "words", "reasoning"),
    [
        ("<think>they sound tired</think>\n\nThat sounds exhausting.", "That sounds exhausting.", "they sound tired"),
        ("<THINK>a</THINK>Hi. <think>b</think>How are you?", "Hi. How are you?", "a\n\nb"),
        # The opening tag was in the prompt (a thinking chat template): everything before the closing one.
        ("weigh what to ask first</think>What brings you here?", "What brings you here?", "weigh what to ask first"),
        # Cut off while still reasoning: nothing was said.
        ("<think>maybe I should ask about sleep and", "", "maybe I should ask about sleep and"),
        ("I hear you.<|START_THINKING|>note<|END_THINKING|>", "I hear you.", "note"),
        ("<thinking>x</thinking>Tell me more.", "Tell me more.", "x"),
    ],
)
def test_each_shape_of_inline_reasoning_is_split_off(raw, words, reasoning):
    assert split_inline_reasoning(raw) == (words, reasoning)


def test_a_reply_without_tags_is_returned_as_it_is():
    text = "  I think that matters, and it's worth saying.  "
    assert split_inline_reasoning(text) == (text, None)


def _talk(replies: list[str], config: SimulationConfig, turns: int):
    said_by_server = iter(replies)
    with OpenAIStub(lambda body: Reply(content=next(said_by_server))) as stub:
        backend = OpenAIBackend("stub", base_url=stub.base_url, default_model="c", kind="openai")
        client = RoleClient("counsellor", backend, RoleSpec(engine="stub"), "c", UsageLedger())
        counsellor = Counsellor(client=client, config=config, history=[{"role": "system", "content": "be brief"}])

        async def go():
            try:
                heard = []
                for n in range(turns):
                    counsellor.hear(f"patient words {n}")
                    heard.append(await counsellor.reply())
                return heard
            finally:
                await backend.aclose_loop()

        heard = asyncio.run(go())
    return heard, counsellor, stub.requests


def test_the_patient_hears_words_only_and_the_row_keeps_the_reasoning():
    heard, counsellor, bodies = _talk(
        [
            "<think>open gently</think>Hello, what brings you in?",
            "<think>cut off while still thinking about",  # all reasoning: re-asked like a blank reply
            "<think>reflect</think>That sounds hard.",
        ],
        SimulationConfig(),
        turns=2,
    )
    assert heard == ["Hello, what brings you in?", "That sounds hard."]
    assert [f.inline_reasoning for f in counsellor.flags] == ["open gently", "reflect"]
    assert [f.blank_retries for f in counsellor.flags] == [0, 1]
    # What goes back to the counsellor and on into the transcript is its words, never the reasoning.
    assert [m["content"] for m in counsellor.history if m["role"] == "assistant"] == heard
    assert not any("think" in m["content"] for b in bodies for m in b["messages"] if m["role"] == "assistant")
    # The session row keeps it; a reply without inline reasoning serialises as before.
    dumped = counsellor.flags[0].model_dump(mode="json")
    assert dumped["inline_reasoning"] == "open gently"
    assert "inline_reasoning" not in CounsellorFlags(reply_index=0).model_dump(mode="json")


def test_switched_off_the_reply_goes_on_exactly_as_written():
    raw = "<think>open gently</think>Hello."
    heard, counsellor, _ = _talk([raw], SimulationConfig(split_inline_reasoning=False), turns=1)
    assert heard == [raw]
    assert counsellor.flags[0].inline_reasoning is None
