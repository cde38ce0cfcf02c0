"""The context a request on an embedded engine really has: llama.cpp gives a slot no more than the model was trained
on, whatever `ctx_per_slot` asks (the shipped SmolLM2-135M stays at 8,192 under 18,432), so the preflight reads the
server's own figure and says what can and cannot be raised. A stub llama.cpp answers `/props` and `/v1/models`."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any, Iterator

import pytest

from mindsimkit.mindcore.config import EmbeddedEngine
from mindsimkit.mindcore.engine_health import llama_trained_context, slot_context
from mindsimkit.mindcore.budget import PromptSize
from mindsimkit.mindcore.preflight import ContextCheck, _context_fix

ANSWERS: dict[str, Any] = {
    "/props": {"default_generation_settings": {"n_ctx": 8192}},
    "/v1/models": {"data": [{"id": "smol", "meta": {"n_ctx": 8192, "n_ctx_train": 8192}}]},
}


class _LlamaStub(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the handler's own name)
        body = json.dumps(ANSWERS.get(self.path, {})).encode()
        self.send_response(200 if self.path in ANSWERS else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def llama_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _LlamaStub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_a_slot_asked_past_the_trained_context_is_sized_by_the_server(llama_url):
    n, source = slot_context("local", EmbeddedEngine(ctx_per_slot=18432), llama_url, "smol", {})
    assert n == 8192 and "ctx_per_slot 18432, capped by the server" in source
    # Within the model's context the recipe's own figure stands, and says where it came from.
    assert slot_context("local", EmbeddedEngine(ctx_per_slot=4096), llama_url, "smol", {}) == (
        4096,
        "engines.local.ctx_per_slot",
    )
    assert llama_trained_context(llama_url) == 8192


def test_a_server_that_does_not_say_leaves_the_recipes_figure():
    closed = "http://127.0.0.1:9/v1"
    assert slot_context("local", EmbeddedEngine(ctx_per_slot=18432), closed, "smol", {})[0] == 18432
    assert llama_trained_context(closed) is None


def _fix(need_prompt: int, trained: int | None) -> str:
    check = ContextCheck("judge", "local", PromptSize("judge", need_prompt, {}), 300, 8192, "x", False, "", trained)
    recipe = SimpleNamespace(engines={"local": EmbeddedEngine(ctx_per_slot=8192)})
    return _context_fix(recipe, check, SimpleNamespace(lines=[]))


def test_the_fix_says_ctx_per_slot_cannot_help_past_the_models_own_context():
    assert "trained on 8192 tokens" in _fix(9000, 8192) and "raise" not in _fix(9000, 8192)
    # Where the model could take it, raising ctx_per_slot is the fix.
    assert "raise engines.local.ctx_per_slot to at least 7300" in _fix(7000, 32768)
    assert "raise engines.local.ctx_per_slot to at least 9300" in _fix(9000, None)
