"""Config errors name the field in one readable line."""

from __future__ import annotations

import pytest

from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.recipe import load_recipe


def write(tmp_path, text):
    p = tmp_path / "r.yaml"
    p.write_text(text)
    return p


def test_unknown_engine_kind(tmp_path):
    p = write(tmp_path, "name: x\nengines:\n  a: {kind: llamafile}\nroles:\n  default: {engine: a}\n")
    with pytest.raises(ConfigError) as info:
        load_recipe(p)
    msg = str(info.value)
    assert "engines.a" in msg and "unknown engine kind" in msg and len(msg.splitlines()) == 1


def test_missing_field_is_named(tmp_path):
    p = write(tmp_path, "name: x\nengines:\n  a: {kind: openai, model: m}\nroles:\n  default: {engine: a}\n")
    with pytest.raises(ConfigError) as info:
        load_recipe(p)
    assert "engines.a.base_url: required field is missing" in str(info.value)


def test_role_naming_unknown_engine(tmp_path):
    p = write(tmp_path, "name: x\nengines:\n  a: {kind: embedded}\nroles:\n  patient: {engine: b}\n")
    with pytest.raises(ConfigError) as info:
        load_recipe(p)
    assert "roles.patient.engine" in str(info.value) and "'b'" in str(info.value)


def test_unknown_role_and_typo(tmp_path):
    p = write(tmp_path, "name: x\nengines:\n  a: {kind: embedded}\nroles:\n  patiant: {engine: a}\n")
    with pytest.raises(ConfigError, match="roles.patiant: unknown role"):
        load_recipe(p)
    p = write(tmp_path, "name: x\nengines:\n  a: {kind: embedded, paralel: 2}\nroles:\n  default: {engine: a}\n")
    with pytest.raises(ConfigError, match="engines.a.paralel: unknown field"):
        load_recipe(p)


def test_bad_yaml_names_the_line(tmp_path):
    p = write(tmp_path, "name: x\nengines: [\n")
    with pytest.raises(ConfigError, match=r"r.yaml:\d+: not valid YAML"):
        load_recipe(p)


def test_shipped_recipes_validate():
    from pathlib import Path

    for path in sorted((Path(__file__).resolve().parents[2] / "recipes").glob("*.yaml")):
        assert load_recipe(path).name
