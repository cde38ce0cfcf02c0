"""Leaderboard and significance clusters for the HTML report (MindEval2 §3.3 for the
MHQR itself). MHQR, its patient-bootstrap interval, severity shares and category allocation are read
from `judgments/report.json` as the judge computed them; this module adds which systems cannot be told
apart.

Method (ours; docs/report.md):
- unit: a *system*, as the judge ranks it (counsellor, or counsellor/patient engine when the run holds
  several engines);
- per-patient score: a patient's mean session MHQR with that system (session MHQR = mean severity weight
  of its judged replies), so a patient with more sessions does not weigh more in the test than in the
  MHQR's bootstrap;
- test: for each pair of systems, the paired differences over the patients both met; a two-sided
  sign-flip permutation test of their mean (exact over all 2^n sign patterns up to `EXACT_MAX` patients,
  else `draws` random patterns with a fixed seed, p = (hits + 1) / (draws + 1));
- correction: Holm over all k(k-1)/2 pairs, family-wise level `alpha` (0.05);
- clusters: non-significance is not transitive, so groups are built in rank order (lowest MHQR first)
  and each system joins the group of the best-ranked system it cannot be told apart from (itself if it
  differs from every better one, which then starts a new group). A pair with fewer than two shared
  patients cannot be told apart (no evidence is not a difference).

Repeated trials (`simulation.trials`): a trial's sessions are more sessions of the same system
(in the per-patient score above, as in the judge's MHQR). Across trials the board adds, per system, the MHQR of
each trial alone (mean session MHQR of that trial's sessions) with their mean and min–max, and per pair how
often each system scored lower in a trial, set against the order of the overall MHQR (`flip_rates`).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

if TYPE_CHECKING:  # pragma: no cover - typing only
    from mindsimkit.judge.schemas import JudgmentRow
    from mindsimkit.mindcore.runlog import JudgeReport

EXACT_MAX = 16
ALPHA = 0.05


def system_of(row: Any, by_engine: bool) -> str:
    """The system a session or judgment row belongs to (`SessionView`, `JudgmentRow`: counsellor, patient engine)."""
    from mindsimkit.judge.scores import system_label

    return system_label(row.counsellor, row.patient_engine, by_engine)


def patient_means(rows: Iterable[JudgmentRow], judge: str, by_engine: bool) -> dict[str, dict[str, float]]:
    """system → patient → mean session MHQR, from the judge's successful rows."""
    per: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (system, patient, _engine, _trial, _idx), score in session_scores(rows, judge, by_engine).items():
        per[system][patient].append(score)
    return {s: {p: float(np.mean(v)) for p, v in pats.items()} for s, pats in per.items()}


def session_scores(
    rows: Iterable[JudgmentRow], judge: str, by_engine: bool
) -> dict[tuple[str, str, str, int, int], float]:
    """(system, patient, engine, trial, session index) → the session's MHQR, from the judge's successful rows."""
    sessions: dict[tuple[str, str, str, int, int], list[float]] = defaultdict(list)
    for r in rows:
        if r.judge != judge or r.status != "ok" or r.weight is None:
            continue
        # The patient engine and the trial are part of the session key even when the label omits them
        # (judge/scores.py); rows of one-trial runs have no trial: trial 0.
        sessions[(system_of(r, by_engine), r.patient_id, r.patient_engine or "", r.trial or 0, r.session_index)].append(
            float(r.weight)
        )
    return {k: sum(ws) / len(ws) for k, ws in sessions.items()}


def session_quartiles(rows: Iterable[JudgmentRow], judge: str, by_engine: bool) -> dict[str, tuple[float, float]]:
    """system → (p25, p75) of its session MHQR scores, with the same interpolation as the judge's p5 and p95
    (numpy's linear): the box of MindEval2 Table 6's session-score plot."""
    per: dict[str, list[float]] = defaultdict(list)
    for (system, *_rest), score in session_scores(rows, judge, by_engine).items():
        per[system].append(score)
    return {s: (float(np.percentile(v, 25)), float(np.percentile(v, 75))) for s, v in per.items()}


def trial_scores(rows: Iterable[JudgmentRow], judge: str, by_engine: bool) -> dict[str, dict[int, float]]:
    """system → trial → that trial's MHQR (the mean of its sessions' MHQR, as the judge's MHQR over all)."""
    per: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (system, _patient, _engine, trial, _idx), score in session_scores(rows, judge, by_engine).items():
        per[system][trial].append(score)
    return {s: {t: float(np.mean(v)) for t, v in sorted(ts.items())} for s, ts in per.items()}


def trial_spread(scores: dict[str, dict[int, float]], ranking: list[str]) -> list[dict[str, Any]]:
    """Per system in rank order: each trial's MHQR, their mean, min and max."""
    out = []
    for s in ranking:
        values = scores.get(s) or {}
        v = np.array(list(values.values()), dtype=np.float64)
        out.append(
            {
                "system": s,
                "trials": len(v),
                "per_trial": values,
                "mean": float(v.mean()) if len(v) else None,
                "min": float(v.min()) if len(v) else None,
                "max": float(v.max()) if len(v) else None,
            }
        )
    return out


def flip_rates(
    scores: dict[str, dict[int, float]], overall: dict[str, float], ranking: list[str]
) -> list[dict[str, Any]]:
    """Every pair (a ranked above b) over the trials both have: the share of trials where a scored lower, where
    b did, and where they tied; `flips` is the share whose order is the reverse of the overall MHQR's (None when
    the overall MHQRs tie: there is no order to reverse)."""
    out = []
    for i, a in enumerate(ranking):
        for b in ranking[i + 1 :]:
            common = sorted(set(scores.get(a, {})) & set(scores.get(b, {})))
            n = len(common)
            a_lower = sum(scores[a][t] < scores[b][t] for t in common)
            b_lower = sum(scores[b][t] < scores[a][t] for t in common)
            oa, ob = overall.get(a), overall.get(b)
            reverse = None if oa is None or ob is None or oa == ob else (b_lower if oa < ob else a_lower)
            out.append(
                {
                    "a": a,
                    "b": b,
                    "trials": n,
                    "a_lower": a_lower / n if n else None,
                    "b_lower": b_lower / n if n else None,
                    "ties": (n - a_lower - b_lower) / n if n else None,
                    "flips": reverse / n if n and reverse is not None else None,
                }
            )
    return out


def sign_flip_p(d: np.ndarray, draws: int = 20000, seed: int = 0) -> float:
    """Two-sided p of mean(d) = 0 under random sign flips of the paired differences."""
    d = np.asarray(d, dtype=np.float64)
    n = len(d)
    if n < 2 or not np.any(d):
        return 1.0
    observed = abs(d.mean()) - 1e-12  # ties count as at least as extreme
    if n <= EXACT_MAX:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
        return float(np.mean(np.abs(signs @ d / n) >= observed))
    rng = np.random.default_rng(seed)
    # A flipped set B turns the sum S into S - 2·sum(d[B]): draw B as bits (much cheaper than drawing ±1 floats).
    bits = rng.integers(0, 2, size=(draws, n), dtype=np.int8).astype(np.float32)
    means = (d.sum() - 2 * (bits @ d.astype(np.float32))) / n
    hits = int(np.sum(np.abs(means) >= observed))
    return (hits + 1) / (draws + 1)


def holm(pvalues: list[float]) -> list[float]:
    """Holm step-down adjusted p-values, in the input's order."""
    m = len(pvalues)
    order = np.argsort(pvalues, kind="stable")
    adjusted = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted.tolist()


def pairwise(
    means: dict[str, dict[str, float]], ranking: list[str], *, draws: int = 20000, seed: int = 0
) -> list[dict[str, Any]]:
    """Every pair (a better-ranked than b): mean per-patient difference a − b, patients, raw and Holm p."""
    pairs: list[dict[str, Any]] = []
    for i, a in enumerate(ranking):
        for b in ranking[i + 1 :]:
            common = sorted(set(means.get(a, {})) & set(means.get(b, {})))
            d = np.array([means[a][p] - means[b][p] for p in common])
            pairs.append(
                {
                    "a": a,
                    "b": b,
                    "patients": len(common),
                    "mean_diff": float(d.mean()) if len(d) else None,
                    "p": sign_flip_p(d, draws, seed),
                }
            )
    for p, adj in zip(pairs, holm([p["p"] for p in pairs])):
        p["p_holm"] = adj
    return pairs


def clusters(ranking: list[str], pairs: list[dict[str, Any]], alpha: float = ALPHA) -> dict[str, int]:
    """system → group number (0 = the best-ranked system's group), by the rule in the module docstring."""
    differs = {(p["a"], p["b"]) for p in pairs if p["p_holm"] < alpha}
    group: dict[str, int] = {}
    next_group = 0
    for i, s in enumerate(ranking):
        same = next((t for t in ranking[:i] if (t, s) not in differs), None)
        if same is None:
            group[s] = next_group
            next_group += 1
        else:
            group[s] = group[same]
    return group


def group_name(k: int) -> str:
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return letters[k] if k < len(letters) else f"G{k + 1}"


def leaderboard(
    judge_report: JudgeReport | None, judgments: list[JudgmentRow], *, alpha: float = ALPHA, draws: int = 20000
) -> list[dict[str, Any]]:
    """One board per judge: rows in rank order with MHQR, interval, shares, categories and group."""
    if not judge_report:
        return []
    boards = []
    for name, j in judge_report.judges.items():
        sc = j.scores
        ranking = list(sc.ranking)
        by_engine = bool(sc.systems)
        means = patient_means(judgments, name, by_engine)
        pairs = pairwise(means, ranking, draws=draws, seed=int(judge_report.config.get("seed") or 0))
        groups = clusters(ranking, pairs, alpha)
        quartiles = session_quartiles(judgments, name, by_engine)
        rows = []
        for n in ranking:
            c = sc.counsellors[n]
            shares = sc.shares.get(n) or {}
            rows.append(
                {
                    "system": n,
                    "mhqr": c.mhqr,
                    "ci95": list(c.ci95) if c.ci95 else None,
                    "p5": c.p5,
                    "p95": c.p95,
                    "p25": quartiles.get(n, (None, None))[0],
                    "p75": quartiles.get(n, (None, None))[1],
                    "patients": c.patients,
                    "sessions": c.sessions,
                    "replies": c.replies,
                    "by_category": c.by_category,
                    "severity_share": shares.get("severity_share", {}),
                    "issue_share": shares.get("issue_share", {}),
                    "group": group_name(groups[n]),
                    "differs_from": [
                        p["b"] if p["a"] == n else p["a"]
                        for p in pairs
                        if n in (p["a"], p["b"]) and p["p_holm"] < alpha
                    ],
                }
            )
        per_trial = trial_scores(judgments, name, by_engine)
        trials = None
        if len({t for ts in per_trial.values() for t in ts}) > 1:
            overall = {r["system"]: r["mhqr"] for r in rows}
            trials = {
                "count": len({t for ts in per_trial.values() for t in ts}),
                "spread": trial_spread(per_trial, ranking),
                "flips": flip_rates(per_trial, overall, ranking),
            }
        boards.append(
            {
                "judge": name,
                "model": j.model,
                "engine": j.engine,
                "ok": j.ok,
                "failed": j.failed,
                "rows": rows,
                "pairs": pairs,
                "alpha": alpha,
                "trials": trials,
                "by_turn": sc.by_turn,
                "by_session": sc.by_session,
                "first_later": ((j.model_extra or {}).get("analyses") or {}).get("shares_by_session"),
                "dropped_quotes": j.dropped_quotes,
            }
        )
    return boards
