"""Worst-case output tokens of JSON schemas (mindcore.budget): hand-computed small schemas under the
byte bound and a fake tokenizer, unbounded parts named, the largest instance, the server tokenizer
over HTTP, and (embedded) the real llama.cpp tokenizer and its grammar's maxLength."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mindsimkit.mindcore.budget import (
    END_OF_TURN_TOKENS,
    GAP_TOKENS,
    RoleSchema,
    ServerTokenizer,
    byte_counter,
    largest_instance,
    register_role_schema,
    registered,
    worst_case_tokens,
)

G, EOT = GAP_TOKENS, END_OF_TURN_TOKENS


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_string_bytes_bound():
    # leading gap + '""' (2 bytes) + 10 characters + 1 boundary token + end of turn
    wc = worst_case_tokens({"type": "string", "maxLength": 10})
    assert wc.tokens == G + 2 + 10 + 1 + EOT and wc.counted_with == "bytes" and wc.unbounded == []


def test_object_with_every_gap_counted():
    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"a": {"type": "string", "maxLength": 5}, "ok": {"type": "boolean"}},
    }
    # '{' gap '}'  +  '"a"' gap ':' gap value gap  +  '"ok"' gap ':' gap 'false' gap  +  ',' gap
    body = (1 + G + 1) + (3 + G + 1 + G + (2 + 5 + 1) + G) + (4 + G + 1 + G + 5 + G) + (1 + G)
    assert worst_case_tokens(schema).tokens == G + body + EOT


def test_array_enum_const_null_numbers():
    arr = {"type": "array", "maxItems": 3, "items": {"enum": ["x", "yy"]}}
    # '[' gap ']' + 3 × ('"yy"' gap) + 2 × (',' gap)
    assert worst_case_tokens(arr).tokens == G + (1 + G + 1) + 3 * (4 + G) + 2 * (1 + G) + EOT
    assert worst_case_tokens({"const": "commit_move"}).tokens == G + len('"commit_move"') + EOT
    assert worst_case_tokens({"type": "null"}).tokens == G + 4 + EOT
    assert worst_case_tokens({"type": "integer", "minimum": -5, "maximum": 100}).tokens == G + 3 + EOT
    assert worst_case_tokens({"type": "integer"}).tokens == G + 17 + EOT
    assert worst_case_tokens({"type": "number"}).tokens == G + 52 + EOT
    assert worst_case_tokens({"type": ["string", "null"], "maxLength": 1}).tokens == G + 4 + EOT
    assert worst_case_tokens({"type": "array", "maxItems": 0, "items": {"type": "null"}}).tokens == G + 1 + G + 1 + EOT


def test_anyof_and_defs_take_the_longest_branch():
    schema = {
        "$defs": {"Big": {"type": "string", "maxLength": 40}},
        "anyOf": [{"type": "null"}, {"$ref": "#/$defs/Big"}, {"type": "boolean"}],
    }
    assert worst_case_tokens(schema).tokens == G + 2 + 40 + 1 + EOT


def test_fake_tokenizer_counts_literals_not_content():
    calls = []

    def one_token(text: str) -> int:
        calls.append(text)
        return 1

    schema = {
        "type": "object",
        "additionalProperties": False,
        "properties": {"automatic_thoughts": {"type": "string", "maxLength": 10}},
    }
    wc = worst_case_tokens(schema, count=one_token)
    # '{' '}' '"automatic_thoughts"' ':' '""' are one token each; content stays 1 per character
    assert wc.tokens == G + (1 + G + 1) + (1 + G + 1 + G + (1 + 10 + 1) + G) + EOT
    assert wc.counted_with == "tokenizer"
    assert '"automatic_thoughts"' in calls and len(calls) == len(set(calls))  # each literal counted once
    assert wc.tokens < worst_case_tokens(schema).tokens


@pytest.mark.parametrize(
    "schema, where",
    [
        ({"type": "object", "properties": {"note": {"type": "string"}}}, "note: string without maxLength"),
        ({"type": "array", "items": {"type": "string", "maxLength": 3}}, "(root): array without maxItems"),
        (
            {"type": "object", "properties": {"a": {"type": "null"}}, "additionalProperties": True},
            "object open to any keys",
        ),
        (
            {"$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}}}}, "$ref": "#/$defs/N"},
            "recursive $ref",
        ),
        ({}, "any value allowed"),
    ],
)
def test_unbounded_parts_are_named(schema, where):
    wc = worst_case_tokens(schema, name="thing")
    assert wc.tokens is None and not wc.bounded
    assert any(where in u for u in wc.unbounded), wc.unbounded


def test_real_schemas_are_bounded_and_largest_instance_validates():
    from mindsimkit.profilegen.formulation import draft_model
    from mindsimkit.profilegen.screen import JudgeVerdict

    model = draft_model()
    wc = worst_case_tokens(model.model_json_schema(), name="formulation")
    assert wc.bounded and wc.tokens > 2000  # ~2,200 characters of free text alone
    inst = largest_instance(model.model_json_schema())
    draft = model.model_validate(inst)
    assert len(draft.summary) == 240 and len(draft.predisposing) == 2 and len(draft.protective) == 3
    # the JSON of the largest instance fits the bound (bytes: every token covers at least one byte)
    assert byte_counter(json.dumps(inst)) < wc.tokens
    verdict = JudgeVerdict.model_validate(largest_instance(JudgeVerdict.model_json_schema()))
    assert len(verdict.faults) == 6 and len(verdict.faults[0].quote) == 200
    with pytest.raises(ValueError, match="maxLength"):
        largest_instance({"type": "string"})


def test_registry_is_open():
    from mindsimkit.mindcore import budget

    entry = register_role_schema(RoleSchema("judge", "test-judgment", lambda: {"const": 1}, frozenset({"judge"})))
    try:
        assert entry in registered({"judge"}) and entry not in registered({"profiles"})
    finally:
        budget._REGISTRY.pop(("judge", "test-judgment"))


class _TokenizeHandler(BaseHTTPRequestHandler):
    seen: list[dict] = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body)
        if self.path != "/tokenize":
            self.send_response(404)
            self.end_headers()
            return
        data = json.dumps({"tokens": list(range(len(body["content"].split()) or 1))}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_server_tokenizer_over_http_and_unreachable():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TokenizeHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        tok = ServerTokenizer(f"http://127.0.0.1:{server.server_address[1]}/v1")
        assert tok.available() and tok("three word text") == 3 and tok("three word text") == 3
        assert _TokenizeHandler.seen[-1]["content"] == "three word text"
        assert sum(1 for b in _TokenizeHandler.seen if b["content"] == "three word text") == 1  # cached
    finally:
        server.shutdown()
        server.server_close()
    assert not ServerTokenizer(f"http://127.0.0.1:{_closed_port()}/v1", timeout_s=2).available()


@pytest.mark.embedded
def test_embedded_tokenizer_and_maxlength_grammar(embedded_engines):
    """The embedded llama.cpp serves /tokenize (a tighter count than bytes) and its JSON grammar
    enforces maxLength: a 10-character limit holds however long the model wants to write."""
    from mindsimkit.mindcore.budget import tokenizer_for
    from mindsimkit.mindcore.types import ChatRequest
    from mindsimkit.profilegen.formulation import draft_model

    backend = embedded_engines.backend("local")
    tok = tokenizer_for(backend)
    assert tok is not None and tok("hello world") == 2
    schema = draft_model().model_json_schema()
    by_tok, by_bytes = worst_case_tokens(schema, count=tok), worst_case_tokens(schema)
    assert by_tok.tokens < by_bytes.tokens

    limited = {
        "type": "object",
        "additionalProperties": False,
        "required": ["story"],
        "properties": {"story": {"type": "string", "maxLength": 10}},
    }
    ask = [{"role": "user", "content": "Write a very long story, at least 300 words, about a dragon, in 'story'."}]

    async def three():
        out = []
        for seed in range(3):
            req = ChatRequest(
                role="t",
                model=backend.default_model,
                messages=ask,
                temperature=0.8,
                seed=seed,
                max_tokens=worst_case_tokens(limited, count=tok).tokens + 24,
                response_schema=limited,
                schema_name="story",
            )
            out.append(await backend.complete(req))
        return out

    replies = embedded_engines.run(three())
    for r in replies:
        story = json.loads(r.content)["story"]
        assert len(story) <= 10, story
