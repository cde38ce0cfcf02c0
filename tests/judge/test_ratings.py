"""The long ratings format (judge/ratings.py) and `mindsim judge alpha`: strict types, scale checks, missing
values, and α per item in both labelled forms."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from mindsimkit.judge import rubrics
from mindsimkit.judge.cli import app
from mindsimkit.judge.ratings import item_agreement, read_ratings
from mindsimkit.mindcore.errors import InputError

krippendorff = pytest.importorskip("krippendorff")
HUMAN = rubrics.load("mindeval_v1_human")


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_csv_and_jsonl_give_the_same_rows_and_a_1_to_6_rubric_takes_6(tmp_path):
    csv = tmp_path / "r.csv"
    csv.write_text(
        "item,unit,rater,value,system,patient\ncriterion_1,c1,ana,6,S1,p1\ncriterion_1,c1,ben,5,,\n"
        "criterion_4,c1,ana,0,,\ncriterion_4,c1,ben,,,\n"
    )
    got = read_ratings([csv], HUMAN)
    assert [(r.item, r.unit, r.rater, r.value, r.system, r.patient) for r in got.rows] == [
        ("criterion_1", "c1", "ana", 6, "S1", "p1"),
        ("criterion_1", "c1", "ben", 5, None, None),
    ]
    assert got.not_applicable == 1 and got.missing == 1  # 0 is MindEval's "not rated", an empty cell is missing
    js = jsonl(
        tmp_path / "r.jsonl",
        [
            {"item": "criterion_1", "unit": "c1", "rater": "ana", "value": 6, "system": "S1", "patient": "p1"},
            {"item": "criterion_1", "unit": "c1", "rater": "ben", "value": 5},
            {"item": "criterion_4", "unit": "c1", "rater": "ana", "value": 0},
            {"item": "criterion_4", "unit": "c1", "rater": "ben", "value": None},
        ],
    )
    assert read_ratings([js], HUMAN).rows == got.rows


@pytest.mark.parametrize("value", [True, "6", 6.0, 7, "six"])
def test_jsonl_values_are_strictly_typed(tmp_path, value):
    path = jsonl(tmp_path / "r.jsonl", [{"item": "criterion_1", "unit": "c1", "rater": "ana", "value": value}])
    with pytest.raises(InputError, match=r"r.jsonl:1: value: value .* is not on the scale 1-6"):
        read_ratings([path], HUMAN)


@pytest.mark.parametrize("cell", ["true", "6.0", "+6", " 6", "7"])
def test_csv_cells_must_be_plain_integers_on_an_integer_scale(tmp_path, cell):
    path = tmp_path / "r.csv"
    path.write_text(f'item,unit,rater,value\ncriterion_1,c1,ana,"{cell}"\n')
    with pytest.raises(InputError, match=r"r.csv:2: value: value .* is not on the scale 1-6"):
        read_ratings([path], HUMAN)


def test_structural_problems_are_one_error_each(tmp_path):
    cases = [
        ([{"item": "criterion_5", "unit": "c1", "rater": "a", "value": 3}], "item 'criterion_5' is not an item"),
        ([{"item": "criterion_1", "unit": "c1", "value": 3}], "missing rater"),
        ([{"item": "criterion_1", "unit": "c1", "rater": "a", "value": 3, "score": 1}], "score"),
        (
            [{"item": "criterion_1", "unit": "c1", "rater": "a", "value": 3}] * 2,
            "rates item 'criterion_1' of unit 'c1' twice",
        ),
        ([{"item": "criterion_1", "unit": True, "rater": "a", "value": 3}], "boolean is not an id"),
    ]
    for rows, problem in cases:
        with pytest.raises(InputError, match=problem):
            read_ratings([jsonl(tmp_path / "r.jsonl", rows)], HUMAN)
    # Numbered units are ids: a JSON integer unit is read as its digits.
    assert (
        read_ratings(
            [jsonl(tmp_path / "r.jsonl", [{"item": "criterion_1", "unit": 7, "rater": "a", "value": 3}])], HUMAN
        )
        .rows[0]
        .unit
        == "7"
    )


def test_alpha_per_item_equals_the_package_on_pairable_values_and_the_subset_apart(tmp_path):
    rng = np.random.default_rng(3)
    rows, matrix = [], np.full((4, 30), np.nan)
    for u in range(30):
        truth = rng.integers(1, 7)
        for k, rater in enumerate("abcd"):
            if rng.random() < 0.3:
                continue
            v = int(np.clip(truth + rng.integers(-1, 2), 1, 6))
            matrix[k, u] = v
            rows.append({"item": "criterion_2", "unit": f"c{u}", "rater": rater, "value": v})
    got = read_ratings([jsonl(tmp_path / "r.jsonl", rows)], HUMAN)
    a = item_agreement(got.rows, HUMAN)["criterion_2"]
    assert a.pairable == pytest.approx(
        float(krippendorff.alpha(reliability_data=matrix, level_of_measurement="ordinal")), abs=1e-9
    )
    full = ~np.isnan(matrix).any(axis=0)
    assert a.subset_units == int(full.sum()) and a.all_rater_subset == pytest.approx(
        float(krippendorff.alpha(reliability_data=matrix[:, full], level_of_measurement="ordinal")), abs=1e-9
    )


def test_alpha_command_says_why_alpha_is_missing_for_one_rater(tmp_path):
    path = jsonl(
        tmp_path / "r.jsonl",
        [{"item": "criterion_1", "unit": f"c{u}", "rater": "ana", "value": 1 + u % 6} for u in range(8)],
    )
    res = CliRunner().invoke(app, ["alpha", str(path), "--rubric", "mindeval_v1_human", "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    assert "α is missing for every item: one rater only (ana)" in res.output
    rep = json.loads((tmp_path / "a" / "alpha.json").read_text())
    assert (
        rep["items"]["criterion_1"]["alpha_pairable"] is None
        and "one rater only" in rep["items"]["criterion_1"]["reason"]
    )
    rows = [
        {"item": "criterion_1", "unit": f"c{u}", "rater": r, "value": 1 + (u + (r == "ben")) % 6}
        for u in range(8)
        for r in ("ana", "ben")
    ]
    res = CliRunner().invoke(
        app, ["alpha", str(jsonl(path, rows)), "--rubric", "mindeval_v1_human", "--out", str(tmp_path / "a")]
    )
    assert "criterion_1: α pairable" in res.output and "all-rater subset" in res.output
    assert "α (pairable)" in (tmp_path / "a" / "alpha.md").read_text()
