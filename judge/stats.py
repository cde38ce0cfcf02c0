"""Agreement statistics for the clinician study (MindEval2 §3.4, Tables 2, 3, 7, 9 and 10), as pure
functions of stored labels.

- Kendall's coefficient of concordance W with the tie correction, and Fleiss' κ: neither scipy nor
  scikit-learn has them, so they are written here and tested against worked examples. They return NaN
  where the statistic is undefined (every rater gives every item the same value; one category in use).
- Thin wrappers over scikit-learn (weighted and binary Cohen κ, F1) and scipy (Kendall's τ_b) that
  turn undefined values into None, so reports say "undefined" instead of a misleading 0 or 1.
- The counsellor ranking against clinicians: MHQR per unit (one annotator's replies of one session),
  per counsellor, and the session bootstrap of ranking stability.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

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
    return 12.0 * s / float(denom)


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


def defined(x: float) -> float | None:
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
    return defined(k)


def binary_kappa(a: Sequence[bool], b: Sequence[bool]) -> float | None:
    """Unweighted Cohen κ of two binary flag vectors; None when both raters are constant and equal."""
    import warnings

    from sklearn.metrics import cohen_kappa_score

    if len(a) < 2:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        k = cohen_kappa_score([bool(x) for x in a], [bool(x) for x in b], labels=[False, True])
    return defined(k)


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
    return defined(kendalltau([a[n] for n in names], [b[n] for n in names]).statistic)


# -- counsellor ranking against clinicians (Table 3) -------------------------------------------------------------------


@dataclass
class Units:
    """Annotator units (excerpt × annotator; session × annotator without a sample key) of one
    counsellor-labelled annotation set."""

    counsellor: dict[tuple[str, str], str]
    replies: dict[tuple[str, str], list[tuple[str, int]]]
    score: dict[tuple[str, str], float]  # the annotator's MHQR of the unit


def build_units(annotations: Sequence[Any], counsellor_of: dict[str, str], weights: Sequence[float]) -> Units:
    replies: dict[tuple[str, str], list[tuple[str, int]]] = defaultdict(list)
    per_unit: dict[tuple[str, str], list[float]] = defaultdict(list)
    session_of: dict[tuple[str, str], str] = {}
    for a in annotations:
        # One unit = one excerpt x one annotator (the session stands in when there is no excerpt id).
        u = (getattr(a, "unit", None) or a.reply[0], a.annotator)
        replies[u].append(a.reply)
        per_unit[u].append(weights[a.level])
        session_of[u] = a.reply[0]
    return Units(
        {u: counsellor_of[session_of[u]] for u in replies},
        dict(replies),
        {u: float(np.mean(w)) for u, w in per_unit.items()},
    )


def judge_unit_scores(j: Any, units: Units, weights: Sequence[float]) -> dict[tuple[str, str], float]:
    """The judge's MHQR of each unit, over the same replies the annotator saw (failed judgments left out)."""
    out = {}
    for u, replies in units.replies.items():
        w = [weights[j.level[r]] for r in replies if j.level[r] >= 0]
        if w:
            out[u] = float(np.mean(w))
    return out


def counsellor_scores(
    unit_scores: dict[tuple[str, str], float], units: Units, keep: Callable[[tuple[str, str]], bool] = lambda u: True
) -> dict[str, float]:
    by: dict[str, list[float]] = defaultdict(list)
    for u, s in unit_scores.items():
        if keep(u):
            by[units.counsellor[u]].append(s)
    return {c: float(np.mean(v)) for c, v in sorted(by.items())}


def _same_ranking(a: dict[str, float], b: dict[str, float]) -> bool:
    names = sorted(a)
    return sorted(b) == names and ranks(a, names) == ranks(b, names)


def bootstrap(units: Units, judges: dict[str, dict[tuple[str, str], float]], draws: int, seed: int) -> dict[str, Any]:
    """Resample excerpts (the units' first key; sessions when annotated without a sample) with replacement
    within each counsellor; per draw compare rankings.

    Annotators: share of draws whose pooled ranking equals the one on all units. Judge: share of draws in
    which the judge's ranking equals the pooled annotators' ranking on the same draw."""
    rng = np.random.default_rng(seed)
    names = sorted(set(units.counsellor.values()))
    full = counsellor_scores(units.score, units)
    scorers = {"annotators": units.score, **judges}
    per_counsellor: dict[str, dict[str, np.ndarray]] = {}
    for c in names:
        sessions = sorted({u[0] for u, cc in units.counsellor.items() if cc == c})
        sums = {k: np.zeros(len(sessions)) for k in scorers}
        counts = {k: np.zeros(len(sessions)) for k in scorers}
        pos = {s: i for i, s in enumerate(sessions)}
        for k, sc in scorers.items():
            for u, v in sc.items():
                if units.counsellor[u] == c:
                    sums[k][pos[u[0]]] += v
                    counts[k][pos[u[0]]] += 1
        idx = rng.integers(0, len(sessions), size=(draws, len(sessions)))
        per_counsellor[c] = {}
        for k in scorers:
            n = counts[k][idx].sum(axis=1)
            # A draw holding no unit the judge could score has no score: NaN never equals a ranking.
            per_counsellor[c][k] = np.where(n > 0, sums[k][idx].sum(axis=1) / np.maximum(n, 1), np.nan)

    def ranking(k: str, b: int) -> dict[str, float]:
        return {c: float(per_counsellor[c][k][b]) for c in names}

    out: dict[str, Any] = {
        "draws": draws,
        "seed": seed,
        "annotators": float(np.mean([_same_ranking(ranking("annotators", b), full) for b in range(draws)])),
    }
    for k in judges:
        out[k] = float(np.mean([_same_ranking(ranking(k, b), ranking("annotators", b)) for b in range(draws)]))
    return out


def ranking_block(
    annotations: Sequence[Any],
    judges: dict[str, Any],
    counsellor_of: dict[str, str],
    weights: Sequence[float],
    draws: int,
    seed: int,
) -> dict[str, Any]:
    """Table 3: MHQR per counsellor from the pooled annotators, each annotator and each judge on the same
    units; τ_b, reproduced annotator rankings and bootstrap stability."""
    units = build_units(annotations, counsellor_of, weights)
    annotators = sorted({a.annotator for a in annotations})
    pooled_scores = counsellor_scores(units.score, units)
    out: dict[str, Any] = {"units": len(units.score), "pooled": pooled_scores, "annotators": {}, "judges": {}}
    for name in annotators:
        own = counsellor_scores(units.score, units, lambda u: u[1] == name)
        out["annotators"][name] = {"scores": own, "tau_b_vs_pooled": tau_b(own, pooled_scores)}
    judge_units = {n: judge_unit_scores(j, units, weights) for n, j in judges.items()}
    for n, ju in judge_units.items():
        js = counsellor_scores(ju, units)
        matched, per = 0, {}
        for name in annotators:
            own = out["annotators"][name]["scores"]
            theirs = counsellor_scores(ju, units, lambda u: u[1] == name)
            same = len(own) >= 2 and _same_ranking(theirs, own)
            matched += same
            per[name] = {"tau_b": tau_b(theirs, own), "reproduced": same}
        out["judges"][n] = {
            "scores": js,
            "tau_b": tau_b(js, pooled_scores),
            "matched": matched,
            "of": len(annotators),
            "per_annotator": per,
        }
    if len(pooled_scores) >= 2 and draws > 0:
        boot = bootstrap(units, judge_units, draws, seed)
        out["bootstrap"] = boot
        for n in judges:
            out["judges"][n]["bootstrap"] = boot[n]
    return out
