"""PatientAct Table 1 from human profile ratings: mean ± sd and ordinal α per dimension, identification
accuracy and Fleiss' κ, diversity mean ± sd, each checked against a computation written here."""

from __future__ import annotations

import numpy as np
import pytest

from mindsimkit.mindsim_app.annotate.export import profile_summary
from test_roundtrip import ordinal_alpha

TRUTH = {
    "p1": ("avoidant", "worthless"),
    "p2": ("anxious", "unlovable"),
    "p3": ("disorganized", "helpless"),
    "p4": ("disorganized", "worthless"),
}
PICKS = {  # rater → profile → (plausibility, attachment, theme)
    "a": {"p1": (4, "avoidant", "worthless"), "p2": (5, "anxious", "helpless"), "p3": (3, "avoidant", "helpless")},
    "b": {
        "p1": (4, "avoidant", "worthless"),
        "p2": (4, "anxious", "unlovable"),
        "p4": (2, "disorganized", "worthless"),
    },
    "c": {
        "p1": (5, "anxious", "worthless"),
        "p3": (3, "disorganized", "helpless"),
        "p4": (3, "disorganized", "unlovable"),
    },
    "d": {"p2": (5, "anxious", "unlovable"), "p3": (2, "avoidant", "helpless"), "p4": (1, "disorganized", "worthless")},
}


def fleiss(table: list[list[int]]) -> float:
    t = np.array(table, float)
    n = t.sum(axis=1)[0]
    p_j = t.sum(axis=0) / t.sum()
    p_i = ((t**2).sum(axis=1) - n) / (n * (n - 1))
    return (p_i.mean() - (p_j**2).sum()) / (1 - (p_j**2).sum())


def test_profile_table_1():
    prof = [
        {
            "item_id": p,
            "rater": r,
            "scores": {"clinical_plausibility": s},
            "predicted": {"attachment": a, "theme": t},
            "truth": {"attachment": TRUTH[p][0], "theme": TRUTH[p][1]},
        }
        for r, ps in PICKS.items()
        for p, (s, a, t) in ps.items()
    ]
    div = [{"rater": r, "rating": v, "profiles": 3} for r, v in zip("abcd", (4, 5, 4, 3))]
    out = profile_summary(prof, div)
    scores = [s for ps in PICKS.values() for s, _, _ in ps.values()]
    d = out["dimensions"]["clinical_plausibility"]
    assert d["mean"] == pytest.approx(np.mean(scores)) and d["sd"] == pytest.approx(np.std(scores, ddof=1))
    units = [[PICKS[r][p][0] for r in PICKS if p in PICKS[r]] for p in TRUTH]
    assert d["alpha"] == pytest.approx(ordinal_alpha(units), abs=1e-9)
    for k, what in enumerate(("attachment", "theme")):
        hits = [ps[p][1 + k] == TRUTH[p][k] for ps in PICKS.values() for p in ps]
        ident = out["identification"][what]
        assert ident["accuracy"] == pytest.approx(np.mean(hits))
        cats = sorted({x[1 + k] for ps in PICKS.values() for x in ps.values()} | {t[k] for t in TRUTH.values()})
        table = [[sum(PICKS[r][p][1 + k] == c for r in PICKS if p in PICKS[r]) for c in cats] for p in TRUTH]
        assert ident["fleiss_kappa"] == pytest.approx(fleiss(table), abs=1e-12) and ident["kappa_raters_per_item"] == 3
    assert out["diversity"]["mean"] == pytest.approx(4.0) and out["diversity"]["sd"] == pytest.approx(
        np.std([4, 5, 4, 3], ddof=1)
    )
