"""The pool table's presenting-problem section (MindEval2 Table 16's Main and Present shares): observed shares
counted by hand, and the target 'present' rate computed by hand from a small rates file."""

from __future__ import annotations

import pytest

from mindsimkit.profilegen.rates import MainCell, Rates, SecondaryCell
from mindsimkit.profilegen.report import markdown, present_target, problem_rows
from mindsimkit.profilegen.testing import make_profiles


def _with(p, main, secondary, pool=True, bench=False):
    return p.model_copy(
        update={
            "anchor": p.anchor.model_copy(update={"main_problem": main, "secondary_problem": secondary}),
            "in_pool": pool,
            "in_benchmark": bench,
        }
    )


def test_main_and_present_shares_count_a_problem_once_per_patient():
    base = make_profiles(4, seed=3)
    people = [
        _with(base[0], "low_mood", "anxiety", bench=True),
        _with(base[1], "anxiety", None, bench=True),
        _with(base[2], "low_mood", None),
        _with(base[3], "stress", "low_mood", pool=False),
    ]
    rows = {r[0]: r for r in problem_rows(people)}
    # Pool: 3 patients. low_mood main for 2 (66.7%), present for 2; anxiety main for 1, present for 2.
    assert rows["low_mood"][2:3] == ("66.7",) and rows["low_mood"][5] == "66.7"
    assert rows["anxiety"][2] == "33.3" and rows["anxiety"][5] == "66.7"
    # Benchmark: 2 patients, both with anxiety present; no rates file: the target columns are empty.
    assert rows["anxiety"][6] == "100.0" and rows["anxiety"][1] == rows["anxiety"][4] == ""
    assert rows["stress"][2] == "0.0"  # main only outside the pool


def test_the_present_target_adds_the_secondary_draw_to_the_main_one():
    people = [_with(p, "low_mood", None) for p in make_profiles(2, seed=1)]
    cells = {(p.demographics.age_band, p.demographics.gender) for p in people}
    rates = Rates(
        source="test",
        version="1",
        main=[MainCell(age_band=b, gender=g, probs={"low_mood": 0.6, "anxiety": 0.4}) for b, g in cells],
        secondary=[
            SecondaryCell(main=m, age_band=b, gender=g, probs=probs)
            for b, g in cells
            for m, probs in (("low_mood", {"anxiety": 0.5, "none": 0.5}), ("anxiety", {"low_mood": 0.25, "none": 0.75}))
        ],
    )
    target = present_target(people, rates)
    # anxiety: main 0.4, plus secondary after low_mood 0.6 × 0.5 = 0.3 → 70%; low_mood: 0.6 + 0.4 × 0.25 → 70%.
    assert target == {"low_mood": pytest.approx(70.0), "anxiety": pytest.approx(70.0)}
    table = markdown(people, rates)
    assert "| present: target % |" in table and "| anxiety | 40.0 | 0.0 | 0.0 | 70.0 | 0.0 | 0.0 |" in table
