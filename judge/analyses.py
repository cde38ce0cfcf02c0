"""The MindEval2 analyses beyond the headline table (§5.2–5.3, Appendix G.1), as pure functions of one
judge's ok rows (`judge.scores.Columns`):

- `issue_by_turn`: per issue and category, the share of replies flagged at each turn position, in
  two-turn buckets (the paper reads Figure 9 as "turns 1–2", "from turn 9 on", "turns 19–20"), with those
  three read-outs per issue (`points`).
- `early_vs_late`: mean severity weight in turns 1–4 against turns 11–20 (paper: 1.46 → 3.72, rising for
  every counsellor).
- `shares_by_session`: per session index, and first against later sessions, the share of replies
  flagged with each issue and with any issue of each category, and the MHQR allocated to each
  category (Figure 5; paper: replies with a fidelity issue 7.6% → 17.2%).
- `session_distribution`: quantiles of the session MHQR per counsellor and session index (Figure 10).
- `without_flagged`: MHQR and ranking again without the replies the simulator flagged
  `speaks_as_patient` (§5.2: 5.8% of one counsellor's replies, 0.22 of its MHQR), with the weight those
  replies contribute and Kendall's τ_b between the two rankings.
- `subset_ranking`: MHQR and ranking on the benchmark subset of patients against the full pool
  (Appendix G "Pool": the 50-patient benchmark keeps the 100-patient ranking), with τ_b.

A "turn" is the counsellor's reply position in its session (1 = first reply), as in `scores.by_turn`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from judge import stats
from judge.rubric import Rubric
from judge.scores import Columns, counsellor_scores, session_table

# Two-turn buckets to 30 turns (the paper's session cap), then the rest.
TURN_PAIRS: tuple[tuple[int, int], ...] = tuple((k, k + 1) for k in range(1, 31, 2)) + ((31, 10**9),)
# The paper's read-outs of Figure 9 (§5.3, App. G.1): first two turns, from turn 9 on, turns 19–20.
TURN_POINTS: dict[str, tuple[int, int]] = {"1-2": (1, 2), "9+": (9, 10**9), "19-20": (19, 20)}
# App. G.1: mean severity weight of turns 1–4 against turns 11–20.
EARLY, LATE = (1, 4), (11, 20)


def _label(lo: int, hi: int) -> str:
    return f"{lo}+" if hi >= 10**9 else f"{lo}-{hi}"


def flag_matrix(c: Columns, rubric: Rubric) -> tuple[np.ndarray, np.ndarray]:
    """(replies × issues) and (replies × categories) booleans: flagged with the issue / any issue of it."""
    issues = [i.id for i in rubric.issues]
    cats = [x.id for x in rubric.categories]
    by_issue = np.zeros((len(c), len(issues)), dtype=bool)
    if len(c.issue):
        col = np.fromiter((issues.index(i) for i in c.issue), dtype=np.int64, count=len(c.issue))
        by_issue[c.issue_row, col] = True
    cat_of = np.array([cats.index(i.category) for i in rubric.issues], dtype=np.int64)
    by_cat = np.zeros((len(c), len(cats)), dtype=bool)
    for j, k in enumerate(cat_of):
        by_cat[:, k] |= by_issue[:, j]
    return by_issue, by_cat


def _shares(mask: np.ndarray, matrix: np.ndarray, ids: list[str]) -> dict[str, float]:
    n = int(mask.sum())
    return {i: float(matrix[mask, j].sum() / n) for j, i in enumerate(ids)} if n else {}


def issue_by_turn(c: Columns, rubric: Rubric) -> dict[str, Any]:
    """Share of replies flagged with each issue (and category) per two-turn bucket, per counsellor and
    over all; `points` gives the paper's three read-outs per issue over all counsellors."""
    issues, cats = [i.id for i in rubric.issues], [x.id for x in rubric.categories]
    by_issue, by_cat = flag_matrix(c, rubric)
    turn = c.reply_index + 1

    def table(unit: np.ndarray) -> dict[str, Any]:
        out: dict[str, Any] = {"replies": {}, "issue_share": {i: {} for i in issues},
                               "category_share": {k: {} for k in cats}}
        for lo, hi in TURN_PAIRS:
            m = unit & (turn >= lo) & (turn <= hi)
            if not m.any():
                continue
            b = _label(lo, hi)
            out["replies"][b] = int(m.sum())
            for i, v in _shares(m, by_issue, issues).items():
                out["issue_share"][i][b] = v
            for k, v in _shares(m, by_cat, cats).items():
                out["category_share"][k][b] = v
        return out

    everyone = np.ones(len(c), dtype=bool)
    points: dict[str, dict[str, Any]] = {}
    for name, (lo, hi) in TURN_POINTS.items():
        m = (turn >= lo) & (turn <= hi)
        points[name] = {"replies": int(m.sum()), "issue_share": _shares(m, by_issue, issues)}
    return {"buckets": [_label(lo, hi) for lo, hi in TURN_PAIRS], "all": table(everyone),
            "counsellors": {str(n): table(c.counsellor == n) for n in np.unique(c.counsellor)},
            "points": points}


def early_vs_late(c: Columns) -> dict[str, Any]:
    """Mean severity weight of replies in turns 1–4 and 11–20, per counsellor and over all."""
    turn = c.reply_index + 1

    def row(unit: np.ndarray) -> dict[str, Any]:
        e = unit & (turn >= EARLY[0]) & (turn <= EARLY[1])
        late = unit & (turn >= LATE[0]) & (turn <= LATE[1])
        a = float(c.weight[e].mean()) if e.any() else None
        b = float(c.weight[late].mean()) if late.any() else None
        return {"early": a, "late": b, "early_replies": int(e.sum()), "late_replies": int(late.sum()),
                "change": None if a is None or b is None else b - a}

    per = {str(n): row(c.counsellor == n) for n in np.unique(c.counsellor)}
    changes = [v["change"] for v in per.values() if v["change"] is not None]
    return {"early_turns": list(EARLY), "late_turns": list(LATE), "all": row(np.ones(len(c), dtype=bool)),
            "counsellors": per, "rises_for": sum(x > 0 for x in changes), "of": len(changes)}


def shares_by_session(c: Columns, rubric: Rubric) -> dict[str, Any]:
    """Per counsellor: issue and category shares of replies, and allocated category MHQR, for each
    session index and for the first session against all later ones (Figure 5)."""
    issues, cats = [i.id for i in rubric.issues], [x.id for x in rubric.categories]
    by_issue, by_cat = flag_matrix(c, rubric)
    s = session_table(c, rubric)
    first = int(c.session_index.min()) if len(c) else 0

    def group(rows: np.ndarray, sess: np.ndarray) -> dict[str, Any]:
        return {"replies": int(rows.sum()), "sessions": int(sess.sum()),
                "issue_share": _shares(rows, by_issue, issues), "category_share": _shares(rows, by_cat, cats),
                "category_mhqr": ({k: float(v) for k, v in zip(cats, s.by_category[sess].mean(axis=0))}
                                  if sess.any() else {}),
                "mhqr": float(s.mhqr[sess].mean()) if sess.any() else None}

    def unit(rows: np.ndarray, sess: np.ndarray) -> dict[str, Any]:
        out: dict[str, Any] = {"by_index": {}}
        for k in np.unique(c.session_index[rows]):
            out["by_index"][int(k)] = group(rows & (c.session_index == k), sess & (s.session_index == k))
        out["first"] = group(rows & (c.session_index == first), sess & (s.session_index == first))
        later_rows, later_sess = rows & (c.session_index != first), sess & (s.session_index != first)
        out["later"] = group(later_rows, later_sess) if later_rows.any() else None
        return out

    return {"first_session_index": first,
            "all": unit(np.ones(len(c), dtype=bool), np.ones(len(s.mhqr), dtype=bool)),
            "counsellors": {str(n): unit(c.counsellor == n, s.counsellor == n) for n in np.unique(c.counsellor)}}


QUANTILES = (5, 25, 50, 75, 95)


def session_distribution(c: Columns, rubric: Rubric) -> dict[str, Any]:
    """Per counsellor and session index: the session MHQR values and their quantiles (Figure 10's boxes,
    whiskers at the 5th and 95th percentiles as in Table 6)."""
    s = session_table(c, rubric)
    out: dict[str, Any] = {}
    for n in np.unique(s.counsellor):
        per: dict[int, Any] = {}
        for k in np.unique(s.session_index[s.counsellor == n]):
            v = s.mhqr[(s.counsellor == n) & (s.session_index == k)]
            q = np.percentile(v, QUANTILES)
            per[int(k)] = {"sessions": int(len(v)), "mean": float(v.mean()),
                           **{f"p{p}": float(x) for p, x in zip(QUANTILES, q)},
                           "values": [float(x) for x in np.sort(v)]}
        out[str(n)] = per
    return out


def _ranking(scores: dict[str, dict[str, Any]]) -> list[str]:
    return sorted(scores, key=lambda n: (scores[n]["mhqr"], n))


def _compare(full: dict[str, dict[str, Any]], other: dict[str, dict[str, Any]]) -> dict[str, Any]:
    a = {n: v["mhqr"] for n, v in full.items()}
    b = {n: v["mhqr"] for n, v in other.items()}
    common = sorted(set(a) & set(b))
    return {"ranking": _ranking(other), "same_ranking": _ranking({n: full[n] for n in common}) == _ranking(
        {n: other[n] for n in common}), "tau_b": stats.tau_b(a, b), "compared": len(common)}


def without_flagged(c: Columns, rubric: Rubric, full: dict[str, dict[str, Any]], *, draws: int,
                    seed: int) -> dict[str, Any]:
    """MHQR and ranking without the replies flagged `speaks_as_patient`, against `full` (the counsellor
    scores on every reply). `contribution` is those replies' share of the MHQR: their weight divided by
    their session's reply count, averaged over sessions like the MHQR itself."""
    flagged = c.speaks_as_patient if c.speaks_as_patient is not None else np.zeros(len(c), dtype=bool)
    s = session_table(c, rubric)
    only = replace(c, weight=np.where(flagged, c.weight, 0.0))
    contrib = session_table(only, rubric)  # same sessions, weight of flagged replies only
    per: dict[str, Any] = {}
    for n in np.unique(c.counsellor):
        m = c.counsellor == n
        per[str(n)] = {"replies": int(m.sum()), "mhqr": full.get(str(n), {}).get("mhqr"), "flagged": int(flagged[m].sum()),
                       "flagged_share": float(flagged[m].mean()),
                       "contribution": float(contrib.mhqr[s.counsellor == n].mean())}
    kept = c.subset(~flagged)
    if not flagged.any():
        return {"flag": "speaks_as_patient", "flagged": 0, "counsellors": per,
                "skipped": "no reply is flagged speaks_as_patient (or the sessions carry no counsellor_flags)"}
    scores = counsellor_scores(session_table(kept, rubric), draws=draws, seed=seed) if len(kept) else {}
    for n, v in scores.items():
        per[n].update({"mhqr_without": v["mhqr"], "ci95_without": v["ci95"]})
    return {"flag": "speaks_as_patient", "flagged": int(flagged.sum()), "counsellors": per,
            **_compare(full, scores)}


def subset_ranking(c: Columns, rubric: Rubric, full: dict[str, dict[str, Any]], subset: set[str] | None, *,
                   draws: int, seed: int, source: str | None = None) -> dict[str, Any]:
    """Counsellor MHQR on the sessions of the benchmark patients against the full pool, and Kendall's
    τ_b between the two rankings. Skipped, with the reason, when membership is unknown or the subset is
    empty or the whole pool."""
    if subset is None:
        return {"skipped": "benchmark membership unknown: no in_benchmark column in the sessions and no "
                           "profiles file (judge.profiles, or RUN_DIR/profiles/profiles.parquet)"}
    patients = set(np.unique(c.patient).tolist())
    inside = patients & subset
    base = {"source": source, "patients": len(patients), "benchmark_patients": len(inside)}
    if not inside:
        return {**base, "skipped": "no judged patient is in the benchmark subset"}
    if inside == patients:
        return {**base, "skipped": "every judged patient is in the benchmark subset: nothing to compare"}
    m = np.isin(c.patient, sorted(inside))
    scores = counsellor_scores(session_table(c.subset(m), rubric), draws=draws, seed=seed)
    return {**base, "full": {n: v["mhqr"] for n, v in full.items()},
            "benchmark": {n: {"mhqr": v["mhqr"], "ci95": v["ci95"], "sessions": v["sessions"]}
                          for n, v in scores.items()},
            **_compare(full, scores)}


def analyses(c: Columns, rubric: Rubric, full: dict[str, dict[str, Any]], *, draws: int, seed: int,
             benchmark: set[str] | None = None, benchmark_source: str | None = None) -> dict[str, Any]:
    """Every analysis of this module for one judge, JSON-ready."""
    if len(c) == 0:
        return {}
    return {
        "issue_by_turn": issue_by_turn(c, rubric),
        "early_vs_late": early_vs_late(c),
        "shares_by_session": shares_by_session(c, rubric),
        "session_distribution": session_distribution(c, rubric),
        "without_speaks_as_patient": without_flagged(c, rubric, full, draws=draws, seed=seed),
        "benchmark_subset": subset_ranking(c, rubric, full, benchmark, draws=draws, seed=seed,
                                           source=benchmark_source),
    }
