"""Which issue categories a counsellor's replies are flagged with, alone and together (MindEval2 §5.3, Figure 5,
App. G.1), as pure functions of one judge's ok rows (`judge.scores.Columns`):

- `category_shares`: per counsellor and over all, the share of ALL its replies flagged with at least one issue of
  each category (§5.3 reads e.g. "Distortion Reinforcement ... flagged in 30% and 25% of their replies") and the
  category's share of the counsellor's MHQR (allocated weight over MHQR: "0.57, 22% of its MHQR").
- `coflag_groups`: every reply with an issue falls in exactly one group, the set of categories it is flagged
  with (e.g. "Factual & Contextual Fidelity + Guidance Calibration", the group App. G.1 says carries most of the
  memory ablation's rise); per group its replies, their share of all replies and their share of the severity
  weight. Beside it, the issue pairs flagged on the same reply most often (§5.3: under-guiding and over-exploring
  "usually flagged together"), each with the share of the first issue's replies that also carry the second.
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np

from mindsimkit.judge.analyses import flag_matrix
from mindsimkit.judge.rubric import Rubric
from mindsimkit.judge.scores import Columns

# Issue pairs listed per counsellor in coflag_groups (the rest are in none of the paper's readings).
TOP_PAIRS = 10


def _units(c: Columns) -> list[tuple[str, np.ndarray]]:
    return [("all", np.ones(len(c), dtype=bool)), *((str(n), c.counsellor == n) for n in np.unique(c.counsellor))]


def category_shares(c: Columns, rubric: Rubric, full: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`full`: the counsellors' scores (`judge.scores.counsellor_scores`), for the MHQR and its allocation."""
    _, by_cat = flag_matrix(c, rubric)
    cats = [x.id for x in rubric.categories]
    out: dict[str, Any] = {}
    for name, m in _units(c):
        n = int(m.sum())
        entry: dict[str, Any] = {
            "replies": n,
            "flagged_share": {k: float(by_cat[m, j].mean()) if n else 0.0 for j, k in enumerate(cats)},
        }
        s = full.get(name)
        if s is not None:
            entry["mhqr_share"] = {k: (s["by_category"][k] / s["mhqr"] if s["mhqr"] else 0.0) for k in cats}
        out[name] = entry
    return out


def coflag_groups(c: Columns, rubric: Rubric) -> dict[str, Any]:
    by_issue, by_cat = flag_matrix(c, rubric)
    cats = [x.id for x in rubric.categories]
    issues = [i.id for i in rubric.issues]
    # A reply's group is the bit pattern of its categories; 0 (no issue) is not a group.
    code = by_cat.astype(np.int64) @ (1 << np.arange(len(cats), dtype=np.int64))
    out: dict[str, Any] = {}
    for name, m in _units(c):
        n, weight = int(m.sum()), float(c.weight[m].sum())
        groups: list[dict[str, Any]] = []
        for g in np.unique(code[m & (code > 0)]):
            sel = m & (code == g)
            groups.append(
                {
                    "categories": [k for j, k in enumerate(cats) if g >> j & 1],
                    "replies": int(sel.sum()),
                    "reply_share": float(sel.sum() / n),
                    "weight_share": float(c.weight[sel].sum() / weight) if weight else 0.0,
                }
            )
        groups.sort(key=lambda e: (-e["replies"], e["categories"]))
        flagged = by_issue[m]
        counts = flagged.sum(axis=0)
        pairs: list[dict[str, Any]] = []
        for a, b in combinations(range(len(issues)), 2):
            both = int((flagged[:, a] & flagged[:, b]).sum())
            if both:
                first, second = (a, b) if counts[a] >= counts[b] else (b, a)
                pairs.append(
                    {
                        "issues": [issues[first], issues[second]],
                        "replies": both,
                        "share_of_first": float(both / counts[first]),
                    }
                )
        pairs.sort(key=lambda e: (-e["replies"], e["issues"]))
        out[name] = {
            "replies": n,
            "flagged_replies": int((code[m] > 0).sum()),
            "groups": groups,
            "pairs": pairs[:TOP_PAIRS],
        }
    return out


def coflag_analyses(c: Columns, rubric: Rubric, full: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Both analyses of this module for one judge, JSON-ready; the report keeps them beside `judge.analyses`'."""
    if len(c) == 0:
        return {}
    return {"category_shares": category_shares(c, rubric, full), "coflag_groups": coflag_groups(c, rubric)}
