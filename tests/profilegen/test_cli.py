"""The `profiles` sub-app: default command, fit-rates, error exit codes through mindsim's main."""

from __future__ import annotations

import csv

from typer.testing import CliRunner

from mindsimkit.profilegen.cli import app
from mindsimkit.profilegen.rates import load_rates


def test_fit_rates_command_writes_loadable_file(tmp_path):
    table = tmp_path / "ann.csv"
    with table.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["age_band", "gender", "main", "secondary"])
        for i in range(200):
            w.writerow(
                [
                    "25-34" if i % 2 else "65+",
                    "woman" if i % 3 else "man",
                    "low_mood" if i % 4 else "grief_and_loss",
                    "" if i % 5 == 0 else "anxiety_and_worry",
                ]
            )
    out = tmp_path / "rates.yaml"
    res = CliRunner().invoke(app, ["fit-rates", str(table), "--out", str(out)])
    assert res.exit_code == 0, res.output
    rates = load_rates(out)
    assert rates.fitted_from == 200 and rates.main_probs("25-34", "woman")["low_mood"] > 0.5


def test_default_command_and_bad_recipe_exit_code(tmp_path, capsys):
    from mindsimkit.mindsim_app.cli import main

    assert main(["profiles", str(tmp_path / "missing.yaml"), "--out", str(tmp_path)]) == 2
    assert "recipe" in capsys.readouterr().err  # reached generate's recipe loading, not "no such command"
    bad = tmp_path / "r.yaml"
    bad.write_text(
        "name: x\nengines: {local: {kind: embedded}}\nroles: {default: {engine: local}}\nprofiles: {candidatez: 3}\n"
    )
    assert main(["profiles", str(bad), "--out", str(tmp_path)]) == 2
    assert "profiles.candidatez" in capsys.readouterr().err
    assert main(["profiles", "fit-rates", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "r2.yaml")]) == 2
