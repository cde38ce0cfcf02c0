"""`mindcore.yamlio.safe_load`: libyaml's speed with the pure-Python loader's values and error messages."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mindsimkit.mindcore import yamlio

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p for d in ("mindcore", "mindsim", "mindsim_app", "profilegen", "validation", "judge", "prompts",
                             "recipes") for p in (REPO / d).rglob("*.y*ml"))


def test_every_shipped_yaml_file_parses_to_what_the_pure_loader_gives():
    assert len(SHIPPED) > 20
    for path in SHIPPED:
        text = path.read_text(encoding="utf-8")
        assert yamlio.safe_load(text) == yaml.safe_load(text), path


def test_a_valid_document_never_reaches_the_pure_loader(monkeypatch):
    # PyYAML's wheels are built with libyaml; an install without it would lose the speed-up silently.
    assert yaml.__with_libyaml__ and yamlio._FAST is yaml.CSafeLoader

    def refuse(_text):
        raise AssertionError("the pure-Python loader ran on a valid document")

    monkeypatch.setattr(yaml, "safe_load", refuse)
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
