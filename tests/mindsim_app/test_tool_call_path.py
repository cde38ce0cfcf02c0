"""How the MindSim patient's tool calls travel, checked before any work (`mindsim engines check` and the preflight
every job runs): an engine that declares native tool calls is sent one forced tool call with the patient's
settings; under the `mindeval2-reference` preset an engine that answers it with text is refused with the fix (the
paper's patient commits its moves through real tool calls), otherwise the run falls back to JSON-schema answers and
says so, and run.json records which path each tool-calling role took."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.preflight import preflight
from mindsimkit.mindcore.recipe import load_recipe
from openai_stub import OpenAIStub, Reply, probe_answers
from test_exit_codes import ENV, mindsim

CALL = {"id": "call_1", "type": "function", "function": {"name": "record_mood", "arguments": '{"mood": "calm"}'}}


def _server(calls: bool):
    def behave(body: dict[str, Any]) -> Reply:
        if body.get("tools"):
            # A server started without a tool parser writes the call out as words.
            return (
                Reply(tool_calls=[CALL]) if calls else Reply(content='<tool_call>{"name": "record_mood"}</tool_call>')
            )
        return probe_answers(body)

    return behave


def _recipe(tmp_path: Path, url: str, preset: str | None, native: bool = True) -> Path:
    sim = f"simulation: {{preset: {preset}}}\n" if preset else ""
    path = tmp_path / "recipe.yaml"
    path.write_text(
        f"name: tools\nengines:\n  srv: {{kind: openai, base_url: '{url}', model: stub-model, "
        f"native_tools: {str(native).lower()}}}\nroles:\n  default: {{engine: srv}}\n{sim}"
    )
    return path


def _tool_requests(stub: OpenAIStub) -> list[dict[str, Any]]:
    return [b for b in stub.requests if b.get("tools")]


def test_engines_check_refuses_a_text_answer_under_the_reference_preset_in_one_line_naming_the_fix(tmp_path):
    with OpenAIStub(_server(calls=False)) as stub:
        proc = mindsim("engines", "check", _recipe(tmp_path, stub.base_url, "mindeval2-reference"), cwd=tmp_path)
        forced = _tool_requests(stub)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    joined = " ".join(proc.stderr.split())
    assert "answered a forced tool call with text" in joined and "--enable-auto-tool-choice" in joined
    assert "native_tools: false" in joined
    assert len(forced) == 1 and forced[0]["tool_choice"] == "required"
    assert "Traceback" not in proc.stderr


def test_engines_check_passes_an_engine_that_returns_a_real_tool_call(tmp_path):
    with OpenAIStub(_server(calls=True)) as stub:
        proc = mindsim(
            "engines",
            "check",
            _recipe(tmp_path, stub.base_url, "mindeval2-reference"),
            cwd=tmp_path,
            env={**ENV, "COLUMNS": "200"},
        )
        forced = _tool_requests(stub)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "native" in proc.stdout and len(forced) == 1


def test_outside_the_preset_a_text_answer_is_one_line_and_the_run_falls_back_to_json_schema(tmp_path):
    with OpenAIStub(_server(calls=False)) as stub:
        proc = mindsim(
            "engines", "check", _recipe(tmp_path, stub.base_url, None), cwd=tmp_path, env={**ENV, "COLUMNS": "400"}
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    notes = [ln for ln in proc.stdout.splitlines() if ln.startswith("tool calls:")]
    assert len(notes) == 1 and "JSON-schema answers" in notes[0]


@pytest.mark.parametrize(
    ("preset", "calls", "native", "expect"),
    [
        (None, False, True, "json-schema"),
        ("mindeval2-reference", True, True, "native"),
        ("mindeval2-reference", False, False, "json-schema"),  # declared without native tools: said, not refused
    ],
)
def test_the_preflight_records_each_tool_calling_roles_path(tmp_path, preset, calls, native, expect):
    with OpenAIStub(_server(calls=calls)) as stub:
        recipe = load_recipe(_recipe(tmp_path, stub.base_url, preset, native))
        with Engines.from_config(recipe.engines_config()) as engines:
            report = preflight(recipe, engines, {"simulate"})
            declared = engines.backend("srv").native_tools
        forced = _tool_requests(stub)
    assert report.tool_calls() == {"patient": expect}
    assert declared is (expect == "native")  # a failed forced call turns the run to JSON-schema answers
    assert len(forced) == (1 if native else 0)
    if expect == "json-schema":
        assert any("JSON-schema answers" in n for n in report.notes)


def test_the_preflight_refuses_text_under_the_reference_preset(tmp_path):
    with OpenAIStub(_server(calls=False)) as stub:
        recipe = load_recipe(_recipe(tmp_path, stub.base_url, "mindeval2-reference"))
        with Engines.from_config(recipe.engines_config()) as engines, pytest.raises(ConfigError) as caught:
            preflight(recipe, engines, {"simulate"})
    assert "answered a forced tool call with text" in str(caught.value)
    json.dumps(str(caught.value))  # one printable message
