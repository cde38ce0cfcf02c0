"""The task's parameters against the recipe, the counsellor's name, and an inspect model behind the engine layer
(`backend`): what a request sets reaches inspect's config and nothing else, nested schemas survive inspect's
`JSONSchema`, and a model's failure is the engine layer's failure."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from inspectfakes import write_patients
from mindsimkit.mindcore.errors import ConfigError, TransportError
from mindsimkit.mindcore.types import ChatRequest, model_schema
from mindsimkit.mindsim_app.inspect.backend import InspectBackend, generate_config, inline_refs
from mindsimkit.mindsim_app.inspect.harness import Harness, TaskSettings, counsellor_label, simulation_section
from mindsimkit.mindcore.recipe import load_recipe

REPO = Path(__file__).resolve().parents[3]


def _recipe(tmp_path, simulation: dict) -> str:
    raw = yaml.safe_load((REPO / "recipes" / "quickstart.yaml").read_text())
    raw["simulation"] = simulation
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


@pytest.mark.parametrize("opening, cap", [("patient", 4), ("counsellor", 3)])
def test_replies_set_the_turn_cap_for_either_opening(tmp_path, opening, cap):
    recipe = load_recipe(_recipe(tmp_path, {"opening": opening, "turn_cap": 30}))
    section = simulation_section(recipe, TaskSettings(profiles="x", replies=3))
    assert section["turn_cap"] == cap


def test_the_recipes_presets_and_engine_sessions_of_other_engines_are_left_out(tmp_path):
    recipe = load_recipe(
        _recipe(
            tmp_path,
            {
                "patient_engine": ["mindsim", "patientact"],
                "sessions": 3,
                "engine_sessions": {"patientact": 1},
                "preset": ["mindeval2-reference", "patientact-reference"],
            },
        )
    )
    mine = simulation_section(recipe, TaskSettings(profiles="x", patient_engine="patientact"))
    assert mine["engine_sessions"] == {"patientact": 1} and mine["preset"] == ["patientact-reference"]
    theirs = simulation_section(recipe, TaskSettings(profiles="x", patient_engine="mindsim", preset="ours"))
    assert theirs["engine_sessions"] == {} and theirs["preset"] == ["ours"]


def test_a_harness_reads_the_patients_and_refuses_a_bad_folder_or_recipe(tmp_path):
    profiles = write_patients(tmp_path / "profiles")
    h = Harness(TaskSettings(profiles=str(profiles), recipe="quickstart", sessions=1, max_patients=1, seed=9))
    assert [s.id for s in h.samples()] == ["p1"] and h.seed == 9 and h.config.sessions == 1
    assert h.samples()[0].metadata["profile"]["profile_id"] == "p1"
    with pytest.raises(ConfigError, match="not a folder"):  # a task argument: checked before anything is read
        Harness(TaskSettings(profiles=str(tmp_path / "nowhere")))
    with pytest.raises(ConfigError, match="nor a shipped recipe"):
        Harness(TaskSettings(profiles=str(profiles), recipe="no-such-recipe"))
    with pytest.raises(ConfigError, match="unknown patient engine"):
        Harness(TaskSettings(profiles=str(profiles), patient_engine="nobody"))


def test_the_counsellor_is_named_after_the_model_without_its_provider():
    assert counsellor_label("mindsim/counsellor") == "counsellor"
    assert counsellor_label("openai-api/local/SmolLM2 135M") == "local_SmolLM2_135M"
    assert counsellor_label("anthropic/claude-x", "claude") == "claude"
    with pytest.raises(ConfigError):
        counsellor_label("x/y", "a/b")


def test_only_what_a_request_sets_reaches_inspects_config_and_nested_schemas_survive():
    from inspect_ai.util import JSONSchema

    from mindsimkit.judge.rubric import answer_model, load_rubric

    plain = generate_config(ChatRequest(role="counsellor", model="m", messages=[]))
    assert plain.model_dump(exclude_none=True) == {}
    schema = model_schema(answer_model(load_rubric(None), None))
    assert "$defs" in schema
    flat = inline_refs(schema)
    assert "$ref" not in str(flat) and "$defs" not in flat
    kept = JSONSchema.model_validate(flat).model_dump(exclude_none=True)
    issue = kept["properties"]["issues"]["items"]
    assert set(issue["properties"]) >= {"issue", "reason", "quote"} and issue["properties"]["issue"]["enum"]
    req = ChatRequest(
        role="judge",
        model="m",
        messages=[],
        temperature=0.0,
        max_tokens=50,
        seed=4,
        response_schema=schema,
        schema_name="mhqr_judgment",
    )
    config = generate_config(req)
    assert (config.temperature, config.max_tokens, config.seed) == (0.0, 50, 4)
    assert config.response_schema.name == "mhqr_judgment"


def test_a_failing_inspect_model_is_an_engine_layer_transport_error():
    class Broken:
        async def generate(self, *_a, **_k):
            raise RuntimeError("provider down")

        def __str__(self):
            return "broken/model"

    backend = InspectBackend(Broken())
    with pytest.raises(TransportError, match="provider down"):
        asyncio.run(
            backend.complete(ChatRequest(role="counsellor", model="m", messages=[{"role": "user", "content": "hi"}]))
        )
    with pytest.raises(ValueError, match="plain text"):
        asyncio.run(
            backend.complete(ChatRequest(role="counsellor", model="m", messages=[{"role": "tool", "content": "x"}]))
        )
