"""Agreement statistics that neither scipy nor scikit-learn provide (MindEval2 §3.4, Tables 2, 7 and 9):
Kendall's coefficient of concordance W with the tie correction, and Fleiss' κ for several raters.

Both are pure functions over plain arrays. They return NaN where the statistic is undefined (every
rater gives every item the same value; a single category in use), so callers report "undefined"
instead of a misleading 0 or 1.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy.stats import rankdata


def kendall_w(ratings: Sequence[Sequence[float]]) -> float:
    """Kendall's W for `ratings[rater][item]`, ties given average ranks and corrected for.

    W = 12·S / (m²(n³−n) − m·Σ_j T_j), where S is the sum of squared deviations of the items' rank
    sums from their mean, m the number of raters, n the number of items, and T_j = Σ (t³ − t) over
    the groups of t tied values of rater j. With two raters W = (ρ_s + 1)/2, so 0.5 means no association.
    """
    r = np.asarray(ratings, dtype=float)
    if r.ndim != 2:
        raise ValueError("kendall_w needs a raters × items matrix")
    m, n = r.shape
    if m < 2 or n < 2:
        return math.nan
    ranks = np.vstack([rankdata(row, method="average") for row in r])
    rank_sums = ranks.sum(axis=0)
    s = float(((rank_sums - rank_sums.mean()) ** 2).sum())
    ties = 0.0
    for row in r:
        _, counts = np.unique(row, return_counts=True)
        ties += float((counts**3 - counts).sum())
    denom = m**2 * (n**3 - n) - m * ties
    if denom <= 0:
        return math.nan
    return 12.0 * s / denom


def fleiss_kappa(counts: Sequence[Sequence[int]]) -> float:
    """Fleiss' κ from `counts[item][category]` = how many raters put the item in that category.

    Every item must have the same number of raters (≥ 2). κ = (P̄ − P̄_e)/(1 − P̄_e) with P̄ the mean
    per-item share of agreeing rater pairs and P̄_e the sum of squared overall category shares.
    """
    c = np.asarray(counts, dtype=float)
    if c.ndim != 2 or c.shape[0] == 0:
        return math.nan
    per_item = c.sum(axis=1)
    k = per_item[0]
    if k < 2 or not np.all(per_item == k):
        raise ValueError("fleiss_kappa needs the same number (≥ 2) of raters for every item")
    p_item = ((c**2).sum(axis=1) - k) / (k * (k - 1))
    p_bar = float(p_item.mean())
    shares = c.sum(axis=0) / c.sum()
    p_e = float((shares**2).sum())
    if math.isclose(p_e, 1.0):
        return math.nan
    return (p_bar - p_e) / (1.0 - p_e)


# -- pairwise agreement on ordinal severities and binary issue flags --------------------------------


def _defined(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def weighted_kappa(a: Sequence[int], b: Sequence[int], n_levels: int) -> float | None:
    """Quadratically weighted Cohen κ over the full ordinal scale (sklearn); None where undefined."""
    import warnings

    from sklearn.metrics import cohen_kappa_score

    if len(a) < 2:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn warns and returns NaN when κ is undefined
        k = cohen_kappa_score(a, b, labels=list(range(n_levels)), weights="quadratic")
    return _defined(k)


def binary_kappa(a: Sequence[bool], b: Sequence[bool]) -> float | None:
    """Unweighted Cohen κ of two binary flag vectors; None when both raters are constant and equal."""
    import warnings

    from sklearn.metrics import cohen_kappa_score

    if len(a) < 2:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k = cohen_kappa_score([bool(x) for x in a], [bool(x) for x in b], labels=[False, True])
    return _defined(k)


def level_f1(gold: Sequence[int], pred: Sequence[int], levels: Sequence[str]) -> dict[str, object]:
    """Accuracy, F1 per severity level and macro F1 over the levels the gold side uses.

    `pred` may hold -1 for a judgment that failed: it matches no level, so it counts as an error, as the
    paper counts unparseable judge answers. A level no gold label uses has no F1 (None)."""
    from sklearn.metrics import f1_score

    idx = list(range(len(levels)))
    per = f1_score(gold, pred, labels=idx, average=None, zero_division=0.0)
    used = sorted(set(gold))
    f1 = {levels[i]: (float(per[i]) if i in used else None) for i in idx}
    macro = float(np.mean([per[i] for i in used])) if used else None
    acc = float(np.mean(np.asarray(gold) == np.asarray(pred))) if len(gold) else None
    return {"accuracy": acc, "f1": f1, "macro_f1": macro}


def within_one(gold: Sequence[int], pred: Sequence[int]) -> float | None:
    """Share of pairs at most one level apart (a failed judgment, -1 in `pred`, never is)."""
    if not len(gold):
        return None
    g, p = np.asarray(gold), np.asarray(pred)
    return float(np.mean((p >= 0) & (np.abs(g - p) <= 1)))


def prf(gold: Sequence[bool], pred: Sequence[bool]) -> dict[str, float | None]:
    """Precision, recall and F1 of binary decisions; each None where its denominator is 0."""
    g, p = np.asarray(gold, dtype=bool), np.asarray(pred, dtype=bool)
    tp = int((g & p).sum())
    n_pred, n_gold = int(p.sum()), int(g.sum())
    precision = tp / n_pred if n_pred else None
    recall = tp / n_gold if n_gold else None
    if precision is None or recall is None:
        f1 = None if not n_gold else 0.0
    else:
        f1 = 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)
    return {"gold": n_gold, "predicted": n_pred, "precision": precision, "recall": recall, "f1": f1}


def mode_level(levels: Sequence[int]) -> int:
    """Most frequent level; a tie goes to the more severe level (the conservative reading)."""
    values, counts = np.unique(np.asarray(levels), return_counts=True)
    return int(values[counts == counts.max()].max())


def upper_median(levels: Sequence[int]) -> int:
    """Median level; with an even count, the more severe of the two middle levels."""
    s = sorted(levels)
    return int(s[len(s) // 2])


# -- counsellor rankings ----------------------------------------------------------------------------


def ranks(scores: dict[str, float], names: Sequence[str]) -> tuple[float, ...]:
    """Rank of each counsellor (1 = lowest MHQR = best); tied scores share the lowest rank."""
    return tuple(rankdata([scores[n] for n in names], method="min"))


def tau_b(a: dict[str, float], b: dict[str, float]) -> float | None:
    """Kendall's τ_b between two counsellor score tables over their common counsellors (scipy)."""
    from scipy.stats import kendalltau

    names = sorted(set(a) & set(b))
    if len(names) < 2:
        return None
    return _defined(kendalltau([a[n] for n in names], [b[n] for n in names]).statistic)
