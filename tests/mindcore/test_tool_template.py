"""Native tool calls the embedded backend makes itself (`mindcore.tool_template`, `OpenAIBackend.tool_parser ==
"template"`): the prompt it renders, the schema a required call is held to, the parser that turns `<tool_call>` blocks
into OpenAI `tool_calls`, and the backend's requests to the raw completion endpoint, on a scripted link."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import BaseModel

from mindsimkit.mindcore import tool_template as tt
from mindsimkit.mindcore.backends import OpenAIBackend
from mindsimkit.mindcore.client import RoleClient
from mindsimkit.mindcore.config import RoleSpec
from mindsimkit.mindcore.errors import StructuredOutputError
from mindsimkit.mindcore.types import ChatRequest, ToolSpec, UsageLedger


class Mood(BaseModel):
    mood: str


class Move(BaseModel):
    move: str
    reasoning: str = ""


MOOD = ToolSpec.from_model("record_mood", "Record the mood", Mood)
MOVE = ToolSpec.from_model("commit_move", "Commit the move", Move)
TOOLS = [MOOD.openai(), MOVE.openai()]

HISTORY = [
    {"role": "system", "content": "You are Sam."},
    {"role": "user", "content": "How are you?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "commit_move", "arguments": '{"move": "deflect"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "name": "commit_move", "content": "Accepted: deflect."},
    {"role": "assistant", "content": "Fine, I guess."},
    {"role": "user", "content": "Only fine?"},
]


# -- the prompt --------------------------------------------------------------------------------------------------
def test_the_prompt_lists_the_tools_and_writes_earlier_calls_and_results_as_turns():
    text = tt.render_prompt(HISTORY, TOOLS)
    system, rest = text.split("<|im_end|>\n", 1)
    assert system.startswith("<|im_start|>system\nYou are Sam.\n\n")
    # Each tool once, as the JSON the request carried, inside the system turn.
    listed = system.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].splitlines()
    assert [json.loads(line) for line in listed] == TOOLS
    assert rest == (
        "<|im_start|>user\nHow are you?<|im_end|>\n"
        '<|im_start|>assistant\n<tool_call>\n{"name": "commit_move", "arguments": {"move": "deflect"}}\n'
        "</tool_call><|im_end|>\n"
        "<|im_start|>tool\nAccepted: deflect.<|im_end|>\n"
        "<|im_start|>assistant\nFine, I guess.<|im_end|>\n"
        "<|im_start|>user\nOnly fine?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_the_prompt_writes_object_arguments_and_words_beside_a_call():
    msgs = [
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": "Let me note that.",
            "tool_calls": [
                {"id": "x", "type": "function", "function": {"name": "record_mood", "arguments": {"mood": "low"}}}
            ],
        },
    ]
    text = tt.render_prompt(msgs, [MOOD.openai()])
    assert text.startswith("<|im_start|>system\nTools you can call")  # no system message: a turn for the tools alone
    assert (
        '<|im_start|>assistant\nLet me note that.\n<tool_call>\n{"name": "record_mood", "arguments": {"mood": '
        '"low"}}\n</tool_call><|im_end|>'
    ) in text


def test_without_tools_the_prompt_is_plain_chatml():
    assert tt.render_prompt([{"role": "user", "content": "Hi"}], None) == (
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


# -- what forces a call, and its schema ------------------------------------------------------------------------------
def test_tool_choice_says_which_call_is_forced():
    assert tt.forced_name("required", TOOLS) == ""
    assert tt.forced_name({"type": "function", "function": {"name": "commit_move"}}, TOOLS) == "commit_move"
    assert tt.forced_name("auto", TOOLS) is None and tt.forced_name(None, TOOLS) is None
    with pytest.raises(ValueError, match="not among the offered tools"):
        tt.forced_name({"type": "function", "function": {"name": "nope"}}, TOOLS)


def test_the_call_schema_names_one_offered_tool_and_its_arguments():
    both = tt.call_schema(TOOLS)
    assert [o["properties"]["name"] for o in both["anyOf"]] == [{"const": "record_mood"}, {"const": "commit_move"}]
    one = tt.call_schema(TOOLS, "commit_move")
    assert one["properties"]["name"] == {"const": "commit_move"}
    assert one["properties"]["arguments"] == {**MOVE.schema(), "additionalProperties": False}
    assert one["required"] == ["name", "arguments"] and "additionalProperties" not in MOVE.schema()  # a copy


def test_arguments_that_allow_other_keys_keep_them():
    tool = {
        "type": "function",
        "function": {"name": "t", "parameters": {"type": "object", "additionalProperties": True}},
    }
    assert tt.call_schema([tool])["properties"]["arguments"]["additionalProperties"] is True


def test_definitions_the_arguments_refer_to_move_to_the_root():
    tool = {
        "type": "function",
        "function": {
            "name": "t",
            "parameters": {
                "type": "object",
                "properties": {"x": {"$ref": "#/$defs/X"}},
                "$defs": {"X": {"enum": ["a"]}},
            },
        },
    }
    schema = tt.call_schema([tool])
    assert schema["$defs"] == {"X": {"enum": ["a"]}} and "$defs" not in schema["properties"]["arguments"]
    assert "$defs" in tool["function"]["parameters"]  # the tool's own schema is left as it was


# -- the parser ------------------------------------------------------------------------------------------------------
def test_a_block_becomes_an_openai_tool_call():
    parsed = tt.parse_calls(
        'Sure.\n<tool_call>\n{"name": "record_mood", "arguments": {"mood": "calm"}}\n</tool_call>', TOOLS
    )
    assert parsed.error == "" and parsed.content == "Sure."
    (call,) = parsed.calls
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"] == {"name": "record_mood", "arguments": '{"mood": "calm"}'}  # a JSON string, as on the wire


def test_arguments_written_as_a_string_of_json_are_read():
    parsed = tt.parse_calls(
        '<tool_call>{"name": "record_mood", "arguments": "{\\"mood\\": \\"ok\\"}"}</tool_call>', TOOLS
    )
    assert parsed.content is None and json.loads(parsed.calls[0]["function"]["arguments"]) == {"mood": "ok"}


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('<tool_call>\n{"name": "record_mood", "arguments": {"mood": "ca', "never closed"),
        ("<tool_call>\nrecord_mood(calm)\n</tool_call>", "not JSON"),
        ('<tool_call>["record_mood"]</tool_call>', "not an object with a 'name'"),
        (
            '<tool_call>{"name": "delete_all", "arguments": {}}</tool_call>',
            "'delete_all' is not one of the offered tools",
        ),
        ('<tool_call>{"name": "record_mood", "arguments": [1]}</tool_call>', "are not a JSON object"),
        ('<tool_call>{"name": "record_mood", "arguments": "calm"}</tool_call>', "are not a JSON object"),
    ],
)
def test_a_broken_block_is_reported_never_dropped(text, said):
    parsed = tt.parse_calls(text, TOOLS)
    assert parsed.calls == [] and said in parsed.error


def test_plain_words_are_content():
    assert tt.parse_calls("  I'm fine.  ", TOOLS) == tt.ParsedReply(content="I'm fine.")


# -- the backend, on a scripted link ---------------------------------------------------------------------------------
class _Link:
    """Stands in for the HTTP link: records (endpoint, body) and answers from a script of completion texts."""

    def __init__(self, texts: list[tuple[str, str]]):
        self.texts = list(texts)
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def post_json(self, data: bytes, timeout_s: float | None = None, endpoint: str = "") -> dict[str, Any]:
        self.sent.append((endpoint, json.loads(data)))
        text, finish = self.texts.pop(0)
        return {
            "choices": [{"text": text, "finish_reason": finish}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "prompt_tokens_details": {"cached_tokens": 90}},
        }


def _backend(link: _Link, kind: str = "embedded") -> OpenAIBackend:
    backend = OpenAIBackend(
        "local", base_url="http://127.0.0.1:9/v1", default_model="smol", kind=kind, native_tools=True, max_retries=0
    )
    backend._loop_state = lambda: [(link, asyncio.Semaphore(1))]  # type: ignore[method-assign]
    backend._gates = {}
    return backend


def _run(backend: OpenAIBackend, coro_of: Any) -> Any:
    async def go() -> Any:
        from mindsimkit.mindcore.backends import _PrefixGate

        backend._gates[id(asyncio.get_running_loop())] = _PrefixGate()
        return await coro_of()

    return asyncio.run(go())


def _client(backend: OpenAIBackend, ledger: UsageLedger) -> RoleClient:
    return RoleClient(
        "patient", backend, RoleSpec(engine="local", max_tokens=64, temperature=0.5, seed=1), "smol", ledger
    )


def test_the_embedded_engine_declares_its_own_parser():
    assert _backend(_Link([])).tool_parser == "template"
    assert _backend(_Link([]), kind="vllm").tool_parser == "server"
    assert _backend(_Link([])).describe()["tool_parser"] == "template"


def test_grammar_engines_take_schema_alternatives_hosted_apis_do_not():
    """A cross-field rule (the judge's no-issue rule) goes out as root `anyOf` alternatives only where a grammar holds
    the answer to one of them; hosted APIs' strict modes refuse a root that is not an object. Provenance says which."""
    assert _backend(_Link([])).describe()["schema_alternatives"] is True
    assert _backend(_Link([]), kind="vllm").schema_alternatives
    assert _backend(_Link([]), kind="openai").describe()["schema_alternatives"] is False


def test_a_required_call_is_opened_and_held_to_the_schema_then_parsed():
    link = _Link([('{"name": "commit_move", "arguments": {"move": "open up"}}', "stop")])
    backend = _backend(link)
    req = ChatRequest(
        role="patient",
        model="smol",
        messages=HISTORY,
        tools=[MOVE.openai()],
        tool_choice="required",
        max_tokens=64,
        temperature=0.5,
        seed=1,
    )
    reply = _run(backend, lambda: backend.complete(req))
    ((endpoint, body),) = link.sent
    assert endpoint == "completions" and "messages" not in body and "tools" not in body
    assert body["prompt"] == tt.render_prompt(HISTORY, [MOVE.openai()]) + "<tool_call>\n"
    assert body["json_schema"] == tt.call_schema([MOVE.openai()])
    assert (body["max_tokens"], body["temperature"], body["seed"]) == (64, 0.5, 1)
    assert reply.content is None and reply.finish_reason == "tool_calls" and reply.tool_call_error == ""
    assert [c["function"] for c in reply.tool_calls] == [{"name": "commit_move", "arguments": '{"move": "open up"}'}]
    assert (reply.prompt_tokens, reply.completion_tokens, reply.cached_tokens) == (100, 10, 90)


def test_a_named_call_is_held_to_that_tool_alone():
    link = _Link([('{"name": "record_mood", "arguments": {"mood": "ok"}}', "stop")])
    backend = _backend(link)
    req = ChatRequest(
        role="patient",
        model="smol",
        messages=HISTORY[:2],
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "record_mood"}},
    )
    _run(backend, lambda: backend.complete(req))
    assert link.sent[0][1]["json_schema"] == tt.call_schema(TOOLS, "record_mood")


def test_under_auto_words_stay_words_and_an_opened_call_is_asked_again_under_the_schema():
    words = _Link([("I'd rather not say.", "stop")])
    backend = _backend(words)
    req = ChatRequest(role="patient", model="smol", messages=HISTORY, tools=TOOLS, tool_choice="auto")
    reply = _run(backend, lambda: backend.complete(req))
    assert reply.content == "I'd rather not say." and reply.tool_calls == []
    assert "json_schema" not in words.sent[0][1]

    link = _Link(
        [
            ("Okay.\n<tool_call>\n{name: record_mood", "length"),
            ('{"name": "record_mood", "arguments": {"mood": "tired"}}', "stop"),
        ]
    )
    backend = _backend(link)
    reply = _run(backend, lambda: backend.complete(req))
    first, second = (body for _, body in link.sent)
    assert second["prompt"] == first["prompt"] + "Okay.\n<tool_call>\n" and "json_schema" in second
    assert reply.content == "Okay." and reply.tool_calls[0]["function"]["name"] == "record_mood"
    assert (reply.prompt_tokens, reply.completion_tokens) == (200, 20)  # both requests counted


def test_a_call_cut_off_at_the_budget_is_a_counted_failure_and_asked_again():
    link = _Link(
        [
            ('{"name": "commit_move", "arguments": {"move": "op', "length"),
            ('{"name": "commit_move", "arguments": {"move": "open up"}}', "stop"),
        ]
    )
    backend, ledger = _backend(link), UsageLedger()
    res = _run(backend, lambda: _client(backend, ledger).tool_call(HISTORY, [MOVE]))
    assert res.calls[0].arguments["move"] == "open up" and len(link.sent) == 2
    # The re-ask tells the model what was wrong, and the ledger counts both attempts.
    assert "never closed" in link.sent[1][1]["prompt"]
    totals = ledger.totals(role="patient")
    assert (totals["calls"], totals["attempts"], totals["failed"]) == (1, 2, 0)


def test_a_call_that_never_parses_fails_loudly():
    link = _Link([('{"name": "commit_move", "arguments": {"move": "op', "length")] * 2)
    backend = _backend(link)
    with pytest.raises(StructuredOutputError, match="never closed"):
        _run(backend, lambda: _client(backend, UsageLedger()).tool_call(HISTORY, [MOVE], max_attempts=2))


def test_requests_without_tools_stay_on_the_chat_endpoint():
    class ChatLink(_Link):
        async def post_json(self, data: bytes, timeout_s: float | None = None, endpoint: str = "") -> dict[str, Any]:
            self.sent.append((endpoint, json.loads(data)))
            return {"choices": [{"message": {"role": "assistant", "content": "Hi."}, "finish_reason": "stop"}]}

    link = ChatLink([])
    backend = _backend(link)
    reply = _run(backend, lambda: backend.complete(ChatRequest(role="r", model="smol", messages=HISTORY[:2])))
    assert reply.content == "Hi." and link.sent[0][0] == "" and "messages" in link.sent[0][1]


def test_the_preflight_records_which_parser_read_the_forced_call():
    from mindsimkit.mindcore.engine_health import EngineHealth, tool_path

    h = EngineHealth("local", "embedded", "http://127.0.0.1:9/v1", "smol", ok=True, tool_call="native")
    assert tool_path("patient", "native", "local", True, h, "template").path == "native-template"
    assert tool_path("patient", "native", "local", True, h).path == "native"
    h.tool_call = "text"  # the template path's call did not parse either: the preset still refuses it
    assert tool_path("patient", "native", "local", True, h, "template").problem
