"""Krippendorff's α (judge/alpha.py) against the `krippendorff` package, and the pairable / all-rater split."""

from __future__ import annotations

import numpy as np
import pytest

from mindsimkit.judge.alpha import LEVELS, agreement, alpha

krippendorff = pytest.importorskip("krippendorff")  # the test extra's reference implementation


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("seed", range(12))
def test_alpha_equals_the_krippendorff_package_with_missing_values(level, seed):
    rng = np.random.default_rng(seed)
    raters, units = rng.integers(2, 7), rng.integers(3, 40)
    scales = [np.arange(1, 6), np.arange(1, 7), np.arange(0, 11), np.array([1.5, 2.0, 4.0, 9.0])]
    scale = scales[seed % len(scales)]
    # agreement above chance: a per-unit truth plus noise, then a third of the cells removed
    truth = rng.choice(scale, units)
    m = np.where(rng.random((raters, units)) < 0.6, truth[None, :], rng.choice(scale, (raters, units))).astype(float)
    m[rng.random((raters, units)) < 0.35] = np.nan
    ours = alpha(m, level)
    theirs = krippendorff.alpha(reliability_data=m, level_of_measurement=level)
    if ours is None:
        assert not np.isfinite(theirs) or np.sum(~np.isnan(m)) < 2
    else:
        assert ours == pytest.approx(float(theirs), abs=1e-9)


@pytest.mark.parametrize("level", LEVELS)
def test_a_declared_domain_matches_the_package_given_the_same_domain(level):
    rng = np.random.default_rng(7)
    m = rng.integers(2, 5, (4, 30)).astype(float)
    m[rng.random(m.shape) < 0.3] = np.nan
    domain = [1, 2, 3, 4, 5, 6]
    assert alpha(m, level, domain) == pytest.approx(
        float(krippendorff.alpha(reliability_data=m, level_of_measurement=level, value_domain=domain)), abs=1e-9
    )


def test_the_worked_example_of_the_package_docs():
    # Krippendorff's own example (3 coders, 15 units, missing values): nominal 0.691, interval 0.811.
    data = [
        [None, None, None, None, None, 3, 4, 1, 2, 1, 1, 3, 3, None, 3],
        [1, None, 2, 1, 3, 3, 4, 3, None, None, None, None, None, None, None],
        [None, None, 2, 1, 3, 4, 4, None, 2, 1, 1, 3, 3, None, 4],
    ]
    assert round(alpha(data, "nominal"), 6) == 0.691358
    assert round(alpha(data, "interval"), 6) == 0.810845


def test_units_with_one_value_drop_out_and_the_all_rater_subset_is_apart():
    cells = [
        ("u1", "a", 1),
        ("u1", "b", 1),
        ("u1", "c", 2),
        ("u2", "a", 4),
        ("u2", "b", 5),  # pairable, not rated by c
        ("u3", "a", 2),
        ("u3", "b", 2),
        ("u3", "c", 2),
        ("u4", "c", 6),  # one value: drops out
        ("u5", "a", 5),
        ("u5", "b", 6),
        ("u5", "c", 6),
    ]
    a = agreement(cells, "ordinal")
    assert a.pairable_units == 4 and a.subset_units == 3 and a.raters == 3
    m = np.array([[1, 4, 2, 5], [1, 5, 2, 6], [2, np.nan, 2, 6]], dtype=float)
    assert a.pairable == pytest.approx(float(krippendorff.alpha(reliability_data=m, level_of_measurement="ordinal")))
    sub = np.array([[1, 2, 5], [1, 2, 6], [2, 2, 6]], dtype=float)
    assert a.all_rater_subset == pytest.approx(
        float(krippendorff.alpha(reliability_data=sub, level_of_measurement="ordinal"))
    )
    assert a.pairable != a.all_rater_subset


def test_one_rater_or_no_variation_says_why_alpha_is_missing():
    one = agreement([("u1", "a", 1), ("u2", "a", 2)], "ordinal")
    assert one.pairable is None and "one rater only" in one.reason
    same = agreement([("u1", "a", 3), ("u1", "b", 3), ("u2", "a", 3), ("u2", "b", 3)], "interval")
    assert same.pairable is None and "undefined" in same.reason
    with pytest.raises(ValueError, match="level of measurement"):
        alpha([[1, 2], [1, 2]], "cardinal")
