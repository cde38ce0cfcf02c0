"""`mindcore.yamlio.safe_load`: libyaml's speed with the pure-Python loader's values and error messages."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mindsimkit.mindcore import yamlio

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(
    p
    for d in ("mindcore", "mindsim", "mindsim_app", "profilegen", "validation", "judge", "prompts", "recipes")
    for p in (REPO / d).rglob("*.y*ml")
)


def test_every_shipped_yaml_file_parses_to_what_the_pure_loader_gives():
    assert len(SHIPPED) > 20
    for path in SHIPPED:
        text = path.read_text(encoding="utf-8")
        assert yamlio.safe_load(text) == yaml.safe_load(text), path


def test_a_valid_document_never_reaches_the_pure_loader(monkeypatch):
    # PyYAML's wheels are built with libyaml; an install without it would lose the speed-up silently.
    assert yaml.__with_libyaml__ and issubclass(yamlio._FAST, yaml.CSafeLoader)

    load = yaml.load

    def refuse(text, Loader):  # noqa: N803 - PyYAML's own argument name
        assert Loader is not yamlio._PureLoader, "the pure-Python loader ran on a valid document"
        return load(text, Loader=Loader)

    monkeypatch.setattr(yaml, "load", refuse)
    assert yamlio.safe_load((REPO / "recipes" / "quickstart.yaml").read_text())["name"] == "quickstart"


@pytest.mark.parametrize("bad", ["a: [1, 2\nb: 3", "a: 1\n\tb: 2", "a: b: c", 'x: "\\q"'])
def test_a_refused_document_raises_the_pure_loaders_message(bad):
    with pytest.raises(yaml.YAMLError) as pure:
        yaml.safe_load(bad)
    with pytest.raises(yaml.YAMLError) as ours:
        yamlio.safe_load(bad)
    assert str(ours.value) == str(pure.value) and "^" in str(ours.value)


def test_without_libyaml_the_pure_loader_parses(monkeypatch):
    monkeypatch.setattr(yamlio, "_FAST", None)
    assert yamlio.safe_load("a: [1, 2]") == {"a": [1, 2]}


@pytest.mark.parametrize("fast", [True, False], ids=["libyaml", "pure"])
def test_a_key_given_twice_is_an_error_naming_both_lines(fast, monkeypatch):
    """PyYAML keeps the last of two equal keys without a word: a second `simulation:` block in a recipe dropped
    every setting of the first. Both loaders refuse it, naming the lines."""
    if not fast:
        monkeypatch.setattr(yamlio, "_FAST", None)
    with pytest.raises(yaml.YAMLError) as exc:
        yamlio.safe_load("name: x\nroles:\n  a: 1\n  a: 2\n")
    assert exc.value.problem_mark.line + 1 == 4 and "the key 'a' is given twice (first at line 3)" in str(exc.value)
    with pytest.raises(yaml.YAMLError, match="the key 'simulation' is given twice \\(first at line 2\\)"):
        yamlio.safe_load("name: x\nsimulation: {sessions: 3}\nsimulation: {turn_cap: 4}\n")
    assert yamlio.safe_load("a: &x {b: 1}\nc:\n  <<: *x\n  d: 2\n") == {"a": {"b": 1}, "c": {"b": 1, "d": 2}}


def test_every_shipped_yaml_file_has_unique_keys():
    for path in REPO.rglob("*.yaml"):
        if ".venv" not in path.parts and "node_modules" not in path.parts:
            yamlio.safe_load(path.read_text(encoding="utf-8"))
