"""Is one judge's pooled issue recall (or precision, or F1) really lower than another's? (MindEval2 §3.4: two judges
"achieve significantly lower pooled issue recalls and F1-scores", App. B Table 10.)

The paper names no test. Ours, for every pair of judges on the annotations both judged:

- A paired bootstrap over excerpts. Pooled recall, precision and F1 treat every (annotation, issue) as one binary
  decision (Table 10), but those decisions are not independent: the issues of one reply, and the replies and
  annotators of one excerpt, move together. So each draw resamples excerpts with replacement (each with all its
  annotations), recomputes both judges' pooled figures on the same draw, and keeps their difference. The interval
  is the 2.5th-97.5th percentile of the differences; the two-sided p-value is the smallest α at which the
  (1 - α) percentile interval leaves out 0, `2 · min(#{d ≤ 0} + 1, #{d ≥ 0} + 1) / (draws + 1)`, capped at 1
  (the +1 keeps a finite number of draws from reporting p = 0).
- For recall also the exact McNemar test: on the annotated (annotation, issue) pairs, how many one judge finds and
  the other misses, each way. It is exact but treats those pairs as independent, which the bootstrap does not.

Pure: reads the annotations and the judges' verdicts, calls no model.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any, Sequence

import numpy as np
from scipy.stats import binomtest

METRICS = ("recall", "precision", "f1")
ALPHA = 0.05


def _counts(annotations: Sequence[Any], judge: Any, issues: Sequence[str], units: list[str]) -> np.ndarray:
    """Per excerpt: true positives, predicted positives, gold positives of the judge's issue flags."""
    pos = {u: i for i, u in enumerate(units)}
    out = np.zeros((len(units), 3))
    for a in annotations:
        flagged = judge.issues[a.reply]
        row = out[pos[a.unit]]
        for issue in issues:
            gold, pred = issue in a.issues, issue in flagged
            row += (gold and pred, pred, gold)
    return out


def _metrics(tp: np.ndarray, pred: np.ndarray, gold: np.ndarray) -> dict[str, np.ndarray]:
    with np.errstate(divide="ignore", invalid="ignore"):
        return {
            "recall": np.where(gold > 0, tp / gold, np.nan),
            "precision": np.where(pred > 0, tp / pred, np.nan),
            "f1": np.where(pred + gold > 0, 2 * tp / (pred + gold), np.nan),
        }


def _p(diffs: np.ndarray) -> float | None:
    d = diffs[~np.isnan(diffs)]
    if not len(d):
        return None
    return float(min(1.0, 2 * min((d <= 0).sum() + 1, (d >= 0).sum() + 1) / (len(d) + 1)))


def _interval(diffs: np.ndarray) -> list[float] | None:
    d = diffs[~np.isnan(diffs)]
    return [float(np.percentile(d, 2.5)), float(np.percentile(d, 97.5))] if len(d) else None


def mcnemar_recall(annotations: Sequence[Any], a: Any, b: Any, issues: Sequence[str]) -> dict[str, Any]:
    """Exact McNemar on the annotated (annotation, issue) pairs: found by `a` only, by `b` only, and p."""
    only_a = only_b = 0
    for ann in annotations:
        for issue in ann.issues & set(issues):
            hit_a, hit_b = issue in a.issues[ann.reply], issue in b.issues[ann.reply]
            only_a += hit_a and not hit_b
            only_b += hit_b and not hit_a
    n = only_a + only_b
    return {"only_first": only_a, "only_second": only_b, "p": float(binomtest(only_a, n, 0.5).pvalue) if n else 1.0}


def compare_pair(
    annotations: Sequence[Any], a: Any, b: Any, issues: Sequence[str], draws: int, rng: np.random.Generator
) -> dict[str, Any]:
    """Judge `a` against judge `b` on the annotations both judged (a failed judgment by either drops the
    annotation from this pair): each metric's difference a - b, its bootstrap interval and p-value."""
    both = [x for x in annotations if a.level[x.reply] >= 0 and b.level[x.reply] >= 0]
    units = sorted({x.unit for x in both})
    out: dict[str, Any] = {"annotations": len(both), "excerpts": len(units)}
    if not units:
        return {**out, **{m: None for m in METRICS}, "mcnemar_recall": None}
    ca, cb = _counts(both, a, issues, units), _counts(both, b, issues, units)
    weights = np.vstack(
        [np.ones(len(units)), rng.multinomial(len(units), np.full(len(units), 1 / len(units)), size=draws)]
    )
    ma, mb = _metrics(*(weights @ ca).T), _metrics(*(weights @ cb).T)
    for m in METRICS:
        diff = ma[m] - mb[m]
        point = None if np.isnan(diff[0]) else float(diff[0])
        out[m] = {
            "first": None if np.isnan(ma[m][0]) else float(ma[m][0]),
            "second": None if np.isnan(mb[m][0]) else float(mb[m][0]),
            "difference": point,
            "interval": _interval(diff[1:]),
            "p": _p(diff[1:]) if point is not None else None,
        }
    out["mcnemar_recall"] = mcnemar_recall(both, a, b, issues)
    return out


def issue_tests(
    annotations: Sequence[Any],
    judges: dict[str, Any],
    issues: Sequence[str],
    pooled_f1: dict[str, Any],
    *,
    draws: int,
    seed: int,
) -> dict[str, Any]:
    """Every pair of judges compared; and, against the judge with the highest pooled F1 (`pooled_f1`, each judge's
    own Table 10 figure), the judges whose pooled recall or F1 is lower at p < 0.05 on the bootstrap."""
    rng = np.random.default_rng(seed)
    names = sorted(judges)
    pairs = [
        {"judges": [x, y], **compare_pair(annotations, judges[x], judges[y], issues, draws, rng)}
        for x, y in combinations(names, 2)
    ]
    out: dict[str, Any] = {"draws": draws, "seed": seed, "unit": "excerpt", "alpha": ALPHA, "pairs": pairs}
    scored = {n: f for n, f in pooled_f1.items() if f is not None}
    if not scored:
        return out
    best = max(sorted(scored), key=lambda n: scored[n])
    lower: dict[str, list[str]] = {}
    for p in pairs:
        if best not in p["judges"]:
            continue
        other = p["judges"][1 - p["judges"].index(best)]
        sign = 1 if p["judges"][0] == best else -1  # differences are first - second; read them as best - other
        worse = [
            m
            for m in ("recall", "f1")
            if p[m]
            and p[m]["difference"] is not None
            and sign * p[m]["difference"] > 0
            and p[m]["p"] is not None
            and p[m]["p"] < ALPHA
        ]
        if worse:
            lower[other] = worse
    out["best_f1"] = best
    out["significantly_lower_than_best"] = lower
    return out
