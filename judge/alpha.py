"""Krippendorff's α at any level of measurement, with missing data as α defines it (Krippendorff, *Content
Analysis*, ch. 12; "Computing Krippendorff's alpha-reliability", 2011).

Every value that has a partner counts: a unit (an item × unit of a rubric, e.g. one rated turn) with at least
two values adds its pairs to the coincidence matrix, each weighted 1/(m_u − 1); a unit with fewer than two
values adds nothing and drops out. Raters need not rate the same units. This is the "pairable" α every report
of the toolkit gives; the paper tables that restrict α to the units every rater rated (MindEval2 Table 13)
get that subset as a second, labelled figure (`all_rater_subset`).

Pure numpy, no model and no optional package: the `krippendorff` PyPI package is the test's reference
(tests/judge/test_alpha.py: equal to 1e-9 at every level, random data with missing values), not a dependency.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal, Optional, Sequence

import numpy as np

Level = Literal["nominal", "ordinal", "interval", "ratio"]
LEVELS: tuple[Level, ...] = ("nominal", "ordinal", "interval", "ratio")


def _distances(domain: np.ndarray, n_v: np.ndarray, level: Level) -> np.ndarray:
    """δ² between every two values of the (ordered) domain; ordinal distances use the marginal counts."""
    a, b = domain[:, None], domain[None, :]
    if level == "nominal":
        nominal: np.ndarray = (a != b).astype(float)
        return nominal
    if level == "interval":
        interval: np.ndarray = (a - b) ** 2
        return interval
    if level == "ratio":
        s = a + b
        ratio: np.ndarray = np.divide(a - b, s, out=np.zeros(np.broadcast(a, b).shape), where=s != 0) ** 2
        return ratio
    # ordinal: the mass between two ranks, their own half-masses excluded, squared
    cum = np.concatenate([[0.0], np.cumsum(n_v)])
    i = np.arange(len(domain))
    lo, hi = np.minimum(i[:, None], i[None, :]), np.maximum(i[:, None], i[None, :])
    between = cum[hi + 1] - cum[lo]
    ordinal: np.ndarray = (between - (n_v[lo] + n_v[hi]) / 2) ** 2
    return ordinal


def alpha(
    data: Sequence[Sequence[Optional[float]]] | np.ndarray,
    level: Level = "ordinal",
    domain: Optional[Sequence[float]] = None,
) -> Optional[float]:
    """α of a raters × units matrix (None or NaN = not rated). `domain`: the ordered values the scale allows
    (default: those that occur; for the ordinal level an unused value changes nothing). None when α is
    undefined: fewer than two pairable values, or no disagreement is possible (one value only)."""
    if level not in LEVELS:
        raise ValueError(f"level of measurement {level!r}: use one of {', '.join(LEVELS)}")
    m = (
        np.array([[np.nan if v is None else v for v in row] for row in data], dtype=float)
        if not isinstance(data, np.ndarray)
        else data.astype(float)
    )
    if m.ndim != 2 or m.size == 0:
        return None
    present = ~np.isnan(m)
    values = np.unique(m[present])
    dom = np.array(sorted(set(domain) | set(values.tolist())), dtype=float) if domain is not None else values
    if len(dom) < 2:
        return None
    # value counts per unit (units × values), then the coincidences of the units with two or more values
    counts = (m.T[:, :, None] == dom[None, None, :]).sum(axis=1).astype(float)
    m_u = counts.sum(axis=1)
    keep = m_u >= 2
    counts, m_u = counts[keep], m_u[keep]
    if not len(counts):
        return None
    o = np.einsum("uc,uk->ck", counts, counts / (m_u - 1)[:, None]) - np.diag((counts / (m_u - 1)[:, None]).sum(axis=0))
    n_v = o.sum(axis=0)
    n = n_v.sum()
    if n < 2:
        return None
    d = _distances(dom, n_v, level)
    expected = (np.outer(n_v, n_v) - np.diag(n_v)) / (n - 1)
    de = float((expected * d).sum())
    if de == 0:
        return None
    return float(1 - (o * d).sum() / de)


@dataclass(frozen=True)
class Agreement:
    """α of one rubric item, both ways, with what each was computed on."""

    level: Level
    pairable: Optional[float]
    pairable_units: int
    all_rater_subset: Optional[float]
    subset_units: int
    raters: int
    reason: Optional[str] = None  # why α is missing, in words, when it is

    def as_dict(self) -> dict[str, object]:
        return {
            "level": self.level,
            "alpha_pairable": self.pairable,
            "units_pairable": self.pairable_units,
            "alpha_all_rater_subset": self.all_rater_subset,
            "units_all_rater_subset": self.subset_units,
            "raters": self.raters,
            **({"reason": self.reason} if self.reason else {}),
        }


def agreement(
    cells: Iterable[tuple[str, str, float]], level: Level, domain: Optional[Sequence[float]] = None
) -> Agreement:
    """From (unit, rater, value) triples: α on every pairable value, and α on the units every rater rated."""
    by_unit: dict[str, dict[str, float]] = {}
    for unit, rater, value in cells:
        by_unit.setdefault(unit, {})[rater] = value
    raters = sorted({r for d in by_unit.values() for r in d})
    units = sorted(by_unit)
    matrix = np.array([[by_unit[u].get(r, np.nan) for u in units] for r in raters], dtype=float).reshape(
        len(raters), len(units)
    )
    pairable = [u for u in units if len(by_unit[u]) >= 2]
    full = [u for u in units if len(by_unit[u]) == len(raters)]
    if len(raters) < 2:
        return Agreement(
            level,
            None,
            0,
            None,
            0,
            len(raters),
            f"one rater only ({raters[0] if raters else 'none'}): α compares raters, it needs two or more",
        )
    if not pairable:
        return Agreement(level, None, 0, None, 0, len(raters), "no unit was rated by two raters")
    a = alpha(matrix, level, domain)
    sub = alpha(matrix[:, [units.index(u) for u in full]], level, domain) if len(full) >= 2 else None
    reason = None if a is not None else "every pairable value is the same: no disagreement was possible, α is undefined"
    return Agreement(level, a, len(pairable), sub, len(full), len(raters), reason)
