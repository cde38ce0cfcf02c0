"""The MindEval2 analyses beyond the headline table (§5.2–5.3, Appendix G.1), as pure functions of one
judge's ok rows (`judge.scores.Columns`):

- `issue_by_turn`: per issue and category, the share of replies flagged at each turn position, in
  two-turn buckets (the paper reads Figure 9 as "turns 1–2", "from turn 9 on", "turns 19–20"), with those
  three read-outs per issue (`points`).
- `early_vs_late`: mean severity weight in turns 1–4 against turns 11–20 (paper: 1.46 → 3.72, rising for
  every counsellor).
- `shares_by_session`: per session index, and first against later sessions, the share of replies
  flagged with each issue and with any issue of each category, and the MHQR allocated to each
  category (Figure 5; paper: the share of replies with a fidelity issue goes from 7.6% to 17.2%).
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

from mindsimkit.judge import stats
from mindsimkit.judge.rubric import Rubric
from mindsimkit.judge.scores import Columns, counsellor_scores, session_table

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


def _grouped(code: np.ndarray, groups: int, matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Replies per group and flagged replies per group and column, in one pass per column (paper scale:
    ~60k replies × 18 counsellors × 16 buckets must not loop over masks)."""
    n = np.bincount(code, minlength=groups)
    sums = (
        np.stack([np.bincount(code, weights=matrix[:, j], minlength=groups) for j in range(matrix.shape[1])], axis=1)
        if matrix.shape[1]
        else np.zeros((groups, 0))
    )
    return n, sums


def issue_by_turn(c: Columns, rubric: Rubric) -> dict[str, Any]:
    """Share of replies flagged with each issue (and category) per two-turn bucket, per counsellor and
    over all; `points` gives the paper's three read-outs per issue over all counsellors."""
    issues, cats = [i.id for i in rubric.issues], [x.id for x in rubric.categories]
    by_issue, by_cat = flag_matrix(c, rubric)
    turn = c.reply_index + 1
    labels = [_label(lo, hi) for lo, hi in TURN_PAIRS]
    bucket = np.searchsorted(np.array([lo for lo, _ in TURN_PAIRS]), turn, side="right") - 1
    names, cc = np.unique(c.counsellor, return_inverse=True)
    nb = len(TURN_PAIRS)

    def tables(code: np.ndarray, units: int) -> list[dict[str, Any]]:
        n, si = _grouped(code, units * nb, by_issue)
        _, sc = _grouped(code, units * nb, by_cat)
        out = []
        for u in range(units):
            t: dict[str, Any] = {
                "replies": {},
                "issue_share": {i: {} for i in issues},
                "category_share": {k: {} for k in cats},
            }
            for b, label in enumerate(labels):
                g = u * nb + b
                if not n[g]:
                    continue
                t["replies"][label] = int(n[g])
                for j, i in enumerate(issues):
                    t["issue_share"][i][label] = float(si[g, j] / n[g])
                for j, k in enumerate(cats):
                    t["category_share"][k][label] = float(sc[g, j] / n[g])
            out.append(t)
        return out

    points: dict[str, dict[str, Any]] = {}
    for name, (lo, hi) in TURN_POINTS.items():
        m = (turn >= lo) & (turn <= hi)
        points[name] = {"replies": int(m.sum()), "issue_share": _shares(m, by_issue, issues)}
    return {
        "buckets": labels,
        "all": tables(bucket, 1)[0],
        "counsellors": dict(zip((str(x) for x in names), tables(cc * nb + bucket, len(names)))),
        "points": points,
    }


def early_vs_late(c: Columns) -> dict[str, Any]:
    """Mean severity weight of replies in turns 1–4 and 11–20, per counsellor and over all."""
    turn = c.reply_index + 1

    def row(unit: np.ndarray) -> dict[str, Any]:
        e = unit & (turn >= EARLY[0]) & (turn <= EARLY[1])
        late = unit & (turn >= LATE[0]) & (turn <= LATE[1])
        a = float(c.weight[e].mean()) if e.any() else None
        b = float(c.weight[late].mean()) if late.any() else None
        return {
            "early": a,
            "late": b,
            "early_replies": int(e.sum()),
            "late_replies": int(late.sum()),
            "change": None if a is None or b is None else b - a,
        }

    per = {str(n): row(c.counsellor == n) for n in np.unique(c.counsellor)}
    changes = [v["change"] for v in per.values() if v["change"] is not None]
    return {
        "early_turns": list(EARLY),
        "late_turns": list(LATE),
        "all": row(np.ones(len(c), dtype=bool)),
        "counsellors": per,
        "rises_for": sum(x > 0 for x in changes),
        "of": len(changes),
    }


def shares_by_session(c: Columns, rubric: Rubric) -> dict[str, Any]:
    """Per counsellor: issue and category shares of replies, and allocated category MHQR, for each
    session index and for the first session against all later ones (Figure 5)."""
    issues, cats = [i.id for i in rubric.issues], [x.id for x in rubric.categories]
    by_issue, by_cat = flag_matrix(c, rubric)
    s = session_table(c, rubric)
    first = int(c.session_index.min()) if len(c) else 0
    names = [str(n) for n in np.unique(c.counsellor)]
    idx = sorted(int(k) for k in np.unique(c.session_index))
    pos = {k: i for i, k in enumerate(idx)}
    # Groups: (unit, session index) and (unit, first/later); unit 0 is "all", unit u+1 is counsellor u.
    row_c = np.searchsorted(names, c.counsellor) + 1
    ses_c = np.searchsorted(names, s.counsellor) + 1
    row_k = np.fromiter((pos[int(k)] for k in c.session_index), dtype=np.int64, count=len(c))
    ses_k = np.fromiter((pos[int(k)] for k in s.session_index), dtype=np.int64, count=len(s.mhqr))
    units, nk = len(names) + 1, len(idx)

    # Every row and session counts twice: for its counsellor and for "all" (unit 0).
    def twice(x: np.ndarray) -> np.ndarray:
        return np.concatenate([x, x])

    rows_u, ses_u = np.concatenate([row_c, np.zeros_like(row_c)]), np.concatenate([ses_c, np.zeros_like(ses_c)])
    row_k2, ses_k2 = twice(row_k), twice(ses_k)
    mats = (twice(by_issue), twice(by_cat), twice(s.mhqr)[:, None], twice(s.by_category))

    def tally(row_code: np.ndarray, ses_code: np.ndarray, groups: int) -> tuple[np.ndarray, ...]:
        n, si = _grouped(row_code, groups, mats[0])
        _, sc = _grouped(row_code, groups, mats[1])
        ns, mh = _grouped(ses_code, groups, mats[2])
        _, alloc = _grouped(ses_code, groups, mats[3])
        return n, si, sc, ns, mh[:, 0], alloc

    def group(st: tuple[np.ndarray, ...], g: int) -> dict[str, Any]:
        n, si, sc, ns, mh, alloc = st
        return {
            "replies": int(n[g]),
            "sessions": int(ns[g]),
            "issue_share": {i: float(si[g, j] / n[g]) for j, i in enumerate(issues)} if n[g] else {},
            "category_share": {k: float(sc[g, j] / n[g]) for j, k in enumerate(cats)} if n[g] else {},
            "category_mhqr": {k: float(alloc[g, j] / ns[g]) for j, k in enumerate(cats)} if ns[g] else {},
            "mhqr": float(mh[g] / ns[g]) if ns[g] else None,
        }

    per_index = tally(rows_u * nk + row_k2, ses_u * nk + ses_k2, units * nk)
    later_r, later_s = (row_k2 != pos[first]).astype(np.int64), (ses_k2 != pos[first]).astype(np.int64)
    split = tally(rows_u * 2 + later_r, ses_u * 2 + later_s, units * 2)

    def unit(u: int) -> dict[str, Any]:
        present = [k for k in idx if per_index[0][u * nk + pos[k]]]
        return {
            "by_index": {k: group(per_index, u * nk + pos[k]) for k in present},
            "first": group(split, u * 2),
            "later": group(split, u * 2 + 1) if split[0][u * 2 + 1] else None,
        }

    return {"first_session_index": first, "all": unit(0), "counsellors": {n: unit(u + 1) for u, n in enumerate(names)}}


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
            per[int(k)] = {
                "sessions": int(len(v)),
                "mean": float(v.mean()),
                **{f"p{p}": float(x) for p, x in zip(QUANTILES, q)},
                "values": [float(x) for x in np.sort(v)],
            }
        out[str(n)] = per
    return out


def _ranking(scores: dict[str, dict[str, Any]]) -> list[str]:
    return sorted(scores, key=lambda n: (scores[n]["mhqr"], n))


def _compare(full: dict[str, dict[str, Any]], other: dict[str, dict[str, Any]]) -> dict[str, Any]:
    a = {n: v["mhqr"] for n, v in full.items()}
    b = {n: v["mhqr"] for n, v in other.items()}
    common = sorted(set(a) & set(b))
    return {
        "ranking": _ranking(other),
        "same_ranking": _ranking({n: full[n] for n in common}) == _ranking({n: other[n] for n in common}),
        "tau_b": stats.tau_b(a, b),
        "compared": len(common),
    }


def without_flagged(
    c: Columns, rubric: Rubric, full: dict[str, dict[str, Any]], *, draws: int, seed: int
) -> dict[str, Any]:
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
        per[str(n)] = {
            "replies": int(m.sum()),
            "mhqr": full.get(str(n), {}).get("mhqr"),
            "flagged": int(flagged[m].sum()),
            "flagged_share": float(flagged[m].mean()),
            "contribution": float(contrib.mhqr[s.counsellor == n].mean()),
        }
    kept = c.subset(~flagged)
    if not flagged.any():
        return {
            "flag": "speaks_as_patient",
            "flagged": 0,
            "counsellors": per,
            "skipped": "no reply is flagged speaks_as_patient (or the sessions carry no counsellor_flags)",
        }
    scores = counsellor_scores(session_table(kept, rubric), draws=draws, seed=seed) if len(kept) else {}
    for n, v in scores.items():
        per[n].update({"mhqr_without": v["mhqr"], "ci95_without": v["ci95"]})
    return {"flag": "speaks_as_patient", "flagged": int(flagged.sum()), "counsellors": per, **_compare(full, scores)}


def subset_ranking(
    c: Columns,
    rubric: Rubric,
    full: dict[str, dict[str, Any]],
    subset: set[str] | None,
    *,
    draws: int,
    seed: int,
    source: str | None = None,
) -> dict[str, Any]:
    """Counsellor MHQR on the sessions of the benchmark patients against the full pool, and Kendall's
    τ_b between the two rankings. Skipped, with the reason, when membership is unknown or the subset is
    empty or the whole pool."""
    if subset is None:
        return {
            "skipped": "benchmark membership unknown: no in_benchmark column in the sessions and no "
            "profiles file (judge.profiles, or RUN_DIR/profiles/profiles.parquet)"
        }
    patients = set(np.unique(c.patient).tolist())
    inside = patients & subset
    base = {"source": source, "patients": len(patients), "benchmark_patients": len(inside)}
    if not inside:
        return {**base, "skipped": "no judged patient is in the benchmark subset"}
    if inside == patients:
        return {**base, "skipped": "every judged patient is in the benchmark subset: nothing to compare"}
    m = np.isin(c.patient, sorted(inside))
    scores = counsellor_scores(session_table(c.subset(m), rubric), draws=draws, seed=seed)
    return {
        **base,
        "full": {n: v["mhqr"] for n, v in full.items()},
        "benchmark": {n: {"mhqr": v["mhqr"], "ci95": v["ci95"], "sessions": v["sessions"]} for n, v in scores.items()},
        **_compare(full, scores),
    }


def analyses(
    c: Columns,
    rubric: Rubric,
    full: dict[str, dict[str, Any]],
    *,
    draws: int,
    seed: int,
    benchmark: set[str] | None = None,
    benchmark_source: str | None = None,
) -> dict[str, Any]:
    """Every analysis of this module for one judge, JSON-ready (`judge.coflags.coflag_analyses` adds its own)."""
    if len(c) == 0:
        return {}
    return {
        "issue_by_turn": issue_by_turn(c, rubric),
        "early_vs_late": early_vs_late(c),
        "shares_by_session": shares_by_session(c, rubric),
        "session_distribution": session_distribution(c, rubric),
        "without_speaks_as_patient": without_flagged(c, rubric, full, draws=draws, seed=seed),
        "benchmark_subset": subset_ranking(c, rubric, full, benchmark, draws=draws, seed=seed, source=benchmark_source),
    }
