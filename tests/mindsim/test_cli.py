"""CLI contract: exit 2 with one readable message on bad input; --help everywhere."""

from __future__ import annotations

import pytest

from mindsim.cli import main


def test_missing_recipe_exits_2(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "not found" in err and not (tmp_path / "o").exists()


def test_bad_section_field_exits_2_before_any_engine(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: x\nengines:\n  local: {kind: embedded}\nroles:\n  default: {engine: local}\nsimulation:\n  sesions: 2\n")
    assert main(["run", str(recipe), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "simulation.sesions" in err and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "argv",
    [[], ["run"], ["engines", "check"], ["profiles"], ["profiles", "fit-rates"], ["simulate"], ["validate", "reference"],
     ["validate", "compare"], ["publish"], ["export", "sft"], ["export", "patient"]],
)
def test_help_everywhere(argv, capsys):
    assert main([*argv, "--help"]) == 0
    assert "Usage" in capsys.readouterr().out


def test_usage_error_exits_2(capsys):
    assert main(["run"]) == 2
