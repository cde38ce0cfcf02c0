"""Profile shape (text_scale, screen_max_faults): the knobs that shrink what a profile costs on a small
model. They must reach every schema the engine sees (first draft, revision, screen), the budgets, the
checkpoint key and the provenance, and change nothing when left at the full shape."""

from __future__ import annotations

import asyncio

import pytest

from mindsimkit.mindcore.recipe import Recipe
from mindsimkit.profilegen.stage import formulation_schema as _formulation_schema
from mindsimkit.profilegen.stage import screen_schema as _screen_schema
from mindsimkit.profilegen.anchors import anchor_personas
from mindsimkit.profilegen.config import ProfilesConfig
from mindsimkit.profilegen.formulation import MIN_TEXT_LIMIT, draft_model
from mindsimkit.profilegen.generate import checkpoint_key, make_profile
from mindsimkit.profilegen.personas import load_personas
from mindsimkit.profilegen.rates import load_rates
from mindsimkit.profilegen.schemas import ProfileShape, Provenance
from mindsimkit.profilegen.screen import JudgeVerdict, verdict_model


def _limits(schema: dict) -> dict[str, int]:
    """maxLength of every string property, by dotted path (definitions inlined by name)."""
    defs = schema.get("$defs", {})
    out: dict[str, int] = {}

    def walk(node: dict, path: str) -> None:
        if "$ref" in node:
            node = defs[node["$ref"].split("/")[-1]]
        if node.get("type") == "array":
            walk(node["items"], path + "[]")
        for key, sub in node.get("properties", {}).items():
            if sub.get("type") == "string" and "maxLength" in sub:
                out[f"{path}.{key}"] = sub["maxLength"]
            else:
                walk(sub, f"{path}.{key}")

    walk(schema, "")
    return out


@pytest.fixture(scope="module")
def row():
    return anchor_personas(load_personas("synthetic", 5, seed=1).rows, load_rates(), seed=1)[0]


def test_scaled_draft_halves_every_text_limit():
    full, half = _limits(draft_model().model_json_schema()), _limits(draft_model(0.5).model_json_schema())
    assert full and full.keys() == half.keys()
    for path, n in full.items():
        assert half[path] == max(MIN_TEXT_LIMIT, round(n * 0.5)), path
    assert full[".summary"] == 240 and half[".summary"] == 120


def test_fault_cap_and_full_shape_is_the_plain_model():
    assert verdict_model() is JudgeVerdict
    assert verdict_model(2).model_json_schema()["properties"]["faults"]["maxItems"] == 2
    assert JudgeVerdict.model_json_schema()["properties"]["faults"]["maxItems"] == 6
    with pytest.raises(ValueError):
        verdict_model(2).model_validate(
            {"faults": [{"quote": "abc", "reason": "why", "severity": "minor"}] * 3, "verdict": "minor"}
        )


def test_every_call_of_a_profile_uses_the_recipe_shape(fake_engines, fakes, row):
    calls = {"screen": 0}

    def screener(request):  # serious once, so the revision's schema is seen too
        calls["screen"] += 1
        if calls["screen"] == 1:
            return {
                "faults": [{"quote": "emptied savings", "reason": "contradicts", "severity": "serious"}],
                "verdict": "serious",
            }
        return fakes.clean_verdict(request)

    shape = ProfileShape(text_scale=0.5, screen_max_faults=2)
    prov = Provenance(seed=1, toolkit_version="test", shape=shape)
    engines, backend = fake_engines(fakes.make_responder(screener=screener))
    with engines:
        out = asyncio.run(make_profile(engines.role("profile_writer"), engines.role("screener"), row, 1, prov))
    assert out.status == "ok" and out.profile.provenance.shape == shape
    writes = [r for r in backend.requests if r.schema_name == "formulation"]
    screens = [r for r in backend.requests if r.schema_name == "screen"]
    assert len(writes) == 2 and len(screens) == 2
    for r in writes:
        assert _limits(r.response_schema)[".summary"] == 120
    for r in screens:
        assert r.response_schema["properties"]["faults"]["maxItems"] == 2


def test_checkpoint_key_moves_only_with_a_non_default_shape(row):
    plain = Provenance(seed=1, toolkit_version="test")
    # The key of the full shape is the key written before shapes existed (old checkpoints stay valid).
    assert checkpoint_key(row, 1, plain) == checkpoint_key(row, 1, plain.model_copy(update={"shape": ProfileShape()}))
    smaller = plain.model_copy(update={"shape": ProfileShape(text_scale=0.5)})
    assert checkpoint_key(row, 1, smaller) != checkpoint_key(row, 1, plain)


def test_budgets_follow_the_recipe_shape():
    base = {"name": "t", "engines": {"local": {"kind": "embedded"}}, "roles": {"default": {"engine": "local"}}}
    small = Recipe(**base, profiles={"text_scale": 0.5, "screen_max_faults": 2})
    assert _limits(_formulation_schema(small))[".summary"] == 120
    assert _limits(_formulation_schema(Recipe(**base)))[".summary"] == 240
    assert _screen_schema(small)["properties"]["faults"]["maxItems"] == 2
    assert ProfilesConfig(text_scale=0.5, screen_max_faults=2).shape == ProfileShape(
        text_scale=0.5, screen_max_faults=2
    )
    with pytest.raises(ValueError):
        ProfilesConfig(text_scale=0.1)


def test_budget_warning_uses_the_recipe_shape():
    """Budgets that fit the shaped schemas (as the quickstart's do) draw no warning; the full shape does."""
    from mindsimkit.mindcore.config import RoleSpec
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.fake import FakeBackend
    from mindsimkit.profilegen.pipeline import _budget_warnings

    backend = FakeBackend(lambda req: {})
    small = ProfileShape(text_scale=0.5, screen_max_faults=2)
    roles = {
        "default": RoleSpec(engine=backend.name),
        "profile_writer": RoleSpec(engine=backend.name, max_tokens=2100),
        "screener": RoleSpec(engine=backend.name, max_tokens=1050),
    }
    with Engines.with_backend(backend, roles) as engines:
        assert _budget_warnings(engines, small) == []
        (line,) = _budget_warnings(engines)
    assert "roles.profile_writer.max_tokens is 2100" in line and "roles.screener.max_tokens is 1050" in line
