"""The realism gate on publishing (mindsim_app/release.py): each criterion passes and
fails on a fixture run's own validation report, `mindsim publish` refuses outside the gate with exit 1 and
one line per failed criterion, `--force` publishes and the card says so, and the card always shows the gate."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.layout import RunLayout
from mindsimkit.mindcore.recipe import Recipe
from mindsimkit.mindsim_app.release import ReleaseConfig, evaluate, failure_lines
from reportfix import write_fixture_run
from restamp import restamp

SYSTEM = "mindsim/counsellor"


@pytest.fixture(scope="module")
def base_run(tmp_path_factory) -> Path:
    return write_fixture_run(tmp_path_factory.mktemp("gate") / "run", patients=3)


@pytest.fixture
def run(base_run, tmp_path) -> Path:
    return Path(shutil.copytree(base_run, tmp_path / "run"))


def _report(run: Path) -> dict:
    return json.loads((run / "validation" / "report.json").read_text())


def _one(run: Path, **cfg) -> list[dict]:
    result = evaluate(run, ReleaseConfig(**cfg, systems=[SYSTEM]))
    assert result["set"]
    return result["checks"]


def test_index_over_floor(run):
    v = _report(run)
    ratio = v["systems"][SYSTEM]["index"]["distance"] / v["floor"]["index"]
    [ok] = _one(run, max_index_over_floor=ratio * 1.01)
    [bad] = _one(run, max_index_over_floor=ratio * 0.99)
    assert ok["ok"] and not bad["ok"] and bad["value"] == pytest.approx(ratio)


def test_per_feature_limits(run):
    d = _report(run)["systems"][SYSTEM]["words_per_turn"]["distance"]
    [ok] = _one(run, max_feature_distance={"words_per_turn": d + 0.01})
    [bad] = _one(run, max_feature_distance={"words_per_turn": d - 0.01})
    assert ok["ok"] and not bad["ok"] and bad["criterion"] == "max_feature_distance.words_per_turn"


def test_arc_agreement(run):
    [missing] = _one(run, min_arc_agreement=0.5)
    assert not missing["ok"] and missing["value"] is None and "validation.arc" in missing["detail"]
    v = _report(run)
    v["arc"] = {
        "reference": {"0": {"P": 0.5, "T": 0.2, "C": 0.2, "F": 0.1}},
        SYSTEM: {"0": {"P": 0.7, "T": 0.1, "C": 0.1, "F": 0.1}},
    }
    (run / "validation" / "report.json").write_text(json.dumps(v))
    [ok] = _one(run, min_arc_agreement=0.8)  # 1 - TV = 1 - 0.5 * (0.2 + 0.1 + 0.1) = 0.8
    [bad] = _one(run, min_arc_agreement=0.81)
    assert ok["ok"] and ok["value"] == pytest.approx(0.8) and not bad["ok"]


def test_failed_arc_share(run):
    [ok] = _one(run, max_failed_arc_share=0.0)
    s = json.loads((run / "sessions" / "summary.json").read_text())
    s["failed_arcs"] = [
        {
            "patient_id": "p1",
            "counsellor": "counsellor",
            "patient_engine": "mindsim",
            "error": "BlankItems: scenario writer returned blank items",
        }
    ]
    (run / "sessions" / "summary.json").write_text(json.dumps(s))
    [bad] = _one(run, max_failed_arc_share=0.1)
    assert ok["ok"] and not bad["ok"] and bad["value"] == pytest.approx(1 / s["arcs"])
    assert "max_failed_arc_share is 0.167, needs ≤ 0.1" in failure_lines({"checks": [bad]})[0]


def test_release_section_is_checked_like_any_recipe_section():
    recipe = Recipe.model_validate({"name": "r", "engines": {}, "roles": {}, "release": {"max_index_ovr": 2}})
    with pytest.raises(ConfigError, match=r"release\.max_index_ovr: unknown field"):
        recipe.section("release", ReleaseConfig)
    with pytest.raises(ConfigError, match="unknown feature"):
        Recipe.model_validate(
            {"name": "r", "engines": {}, "roles": {}, "release": {"max_feature_distance": {"words": 1.0}}}
        ).section("release", ReleaseConfig)


def _set_gate(run: Path, **release) -> None:
    info = json.loads((run / "run.json").read_text())
    info["recipe"]["release"] = release
    (run / "run.json").write_text(json.dumps(info))
    restamp(run)  # stands for a run whose recipe had this gate


def test_publish_refuses_outside_the_gate_then_force_publishes_and_the_card_says_so(run, capsys):
    from mindsimkit.mindsim_app.cli import main

    _set_gate(run, max_index_over_floor=0.01, max_feature_distance={"mtld": 0.001}, max_failed_arc_share=0.5)
    assert main(["publish", str(run), "--repo-id", "someone/x", "--dry-run"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    # 2 validated systems × (index + mtld) failed; the failed-arc share passed.
    assert sum(line.startswith("error: release gate: ") for line in err) == 4
    assert any("max_index_over_floor (mindsim/counsellor:worse)" in line for line in err)
    assert not (run / "dataset").exists()  # refused before anything was built

    assert main(["publish", str(run), "--repo-id", "someone/x", "--dry-run", "--force"]) == 0
    card = (run / "dataset" / "README.md").read_text()
    assert "### Release gate" in card and "published anyway with --force" in card and "**fail**" in card
    assert "release gate: FAILED 4 of 5 criteria" in capsys.readouterr().out


def test_the_card_shows_a_passing_gate_and_an_absent_one(run, capsys):
    from mindsimkit.mindsim_app.cli import main

    _set_gate(run, max_failed_arc_share=0.0)
    assert main(["publish", str(run), "--repo-id", "someone/x", "--dry-run"]) == 0
    card = (run / "dataset" / "README.md").read_text()
    assert "**passed (1 criteria)**" in card and "| max_failed_arc_share | all arcs | 0 | ≤ 0.0 | pass |" in card
    _set_gate(run)
    assert main(["publish", str(run), "--repo-id", "someone/x", "--dry-run"]) == 0
    assert "No release gate" in (run / "dataset" / "README.md").read_text()


def test_a_bad_gate_recorded_in_run_json_is_exit_2(run, capsys):
    from mindsimkit.mindsim_app.cli import main

    _set_gate(run, max_index_over_floor=-1)
    assert main(["publish", str(run), "--repo-id", "someone/x", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "recipe.release.max_index_over_floor" in err[0]


def test_a_dataset_folder_inside_a_run_is_gated_too_and_published_as_it_is(run, capsys):
    from mindsimkit.mindsim_app.cards import build_dataset_folder
    from mindsimkit.mindsim_app.cli import main

    _set_gate(run, max_index_over_floor=0.01)
    build_dataset_folder(run, RunLayout(run).header())
    card = (run / "dataset" / "README.md").read_bytes()
    assert main(["publish", str(run / "dataset"), "--repo-id", "someone/x", "--dry-run"]) == 1
    assert "error: release gate: max_index_over_floor" in capsys.readouterr().err
    assert main(["publish", str(run / "dataset"), "--repo-id", "someone/x", "--dry-run", "--force"]) == 2
    assert f"publish {run} instead" in capsys.readouterr().err
    assert (run / "dataset" / "README.md").read_bytes() == card  # checked as it is, never rebuilt
