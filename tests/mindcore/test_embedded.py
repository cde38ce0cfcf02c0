"""Against the real embedded llama.cpp server (SmolLM2-135M): structured output, tool calls,
concurrency, and a wrong base_url failing fast."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Literal

import pytest
from pydantic import BaseModel, Field

from mindsimkit.mindcore.config import EnginesConfig, OpenAIEngine, RoleSpec
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import TransportError
from mindsimkit.mindcore.types import ToolSpec


class City(BaseModel):
    name: str = Field(..., max_length=40)
    country: str = Field(..., max_length=40)
    has_river: bool


class CommitMove(BaseModel):
    move: Literal["share", "deflect", "minimise"]
    reasoning: str = Field(..., max_length=120)
    end_conversation: bool


@pytest.mark.embedded
def test_structured_call_returns_valid_model(embedded_engines):
    city = asyncio.run(
        embedded_engines.role("profile_writer").structured(
            [{"role": "user", "content": "Describe one European capital city as JSON."}], City
        )
    )
    assert isinstance(city, City) and city.name


@pytest.mark.embedded
def test_tool_call_path_gives_valid_arguments(embedded_engines):
    tool = ToolSpec.from_model("commit_move", "Decide what this turn does", CommitMove)
    res = asyncio.run(
        embedded_engines.role("patient").tool_call(
            [
                {"role": "system", "content": "You are a tired patient."},
                {"role": "user", "content": "How was your week?"},
            ],
            [tool],
        )
    )
    (tc,) = res.message["tool_calls"]
    assert tc["function"]["name"] == "commit_move"
    CommitMove.model_validate(json.loads(tc["function"]["arguments"]))


@pytest.mark.embedded
def test_four_concurrent_requests_all_succeed(embedded_engines):
    client = embedded_engines.role("counsellor")

    async def four():
        return await asyncio.gather(
            *(
                client.chat([{"role": "user", "content": f"Name a colour, number {i}."}], max_tokens=16)
                for i in range(4)
            )
        )

    replies = asyncio.run(four())
    assert len(replies) == 4 and all(r.content.strip() for r in replies)
    # The embedded engine sends requests that open with one long system prompt one at a time (test_servers.py).
    assert embedded_engines.backend("local").serial_prefix_chars == 4000
    assert all(r.completion_tokens > 0 for r in replies)


def test_wrong_base_url_fails_fast_with_clear_message():
    cfg = EnginesConfig(
        engines={"remote": OpenAIEngine(base_url="http://127.0.0.1:9/v1", model="m")},
        roles={"default": RoleSpec(engine="remote")},
    )
    with Engines.from_config(cfg) as engines:
        t0 = time.monotonic()
        with pytest.raises(TransportError) as info:
            asyncio.run(engines.role("judge").chat([{"role": "user", "content": "x"}]))
        assert time.monotonic() - t0 < 10
    msg = str(info.value)
    assert "remote" in msg and "127.0.0.1:9" in msg and "base_url" in msg
