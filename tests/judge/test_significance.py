"""Paired tests of two judges' pooled issue recall, precision and F1 (judge/significance.py; MindEval2 §3.4
"significantly lower pooled issue recalls and F1-scores") and the agreement-against-cost figure (judge/tradeoff.py;
Figure 2), both in `mindsim judge agreement`'s report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mindsimkit.judge import stats
from mindsimkit.judge.agreement import Annotation, JudgeView, run_agreement
from mindsimkit.judge.significance import compare_pair, issue_tests
from mindsimkit.mindcore.errors import InputError

OE, UG, FF = "over_exploring", "under_guiding", "formulaic_responding"
ISSUES = [OE, UG, FF]


def annotation(unit: str, reply: int, who: str, issues) -> Annotation:
    return Annotation((unit, reply), who, 1, frozenset(issues), "c1", "test", unit)


def judge(name: str, flags: dict) -> JudgeView:
    return JudgeView(name, "m", level={r: 1 for r in flags}, issues={r: frozenset(v) for r, v in flags.items()})


# Six excerpts of two replies, two annotators; judge G finds most of what they flag, judge W much less.
GOLD = {
    ("e1", 0): [OE],
    ("e1", 1): [OE, UG],
    ("e2", 0): [],
    ("e2", 1): [FF],
    ("e3", 0): [UG],
    ("e3", 1): [OE],
    ("e4", 0): [OE, FF],
    ("e4", 1): [],
    ("e5", 0): [UG],
    ("e5", 1): [UG, OE],
    ("e6", 0): [FF],
    ("e6", 1): [OE],
}
ANNS = [annotation(u, r, who, iss if who == "A" else iss[:1]) for (u, r), iss in GOLD.items() for who in "AB"]
G = judge("G", {r: (iss + [FF] if r == ("e3", 1) else iss) for r, iss in GOLD.items()})
W = judge("W", {r: (iss[:1] if r[0] in ("e1", "e4") else []) for r, iss in GOLD.items()})


def test_the_vectorised_paired_bootstrap_equals_a_plain_loop_over_the_same_draws():
    draws, seed = 300, 7
    got = compare_pair(ANNS, G, W, ISSUES, draws, np.random.default_rng(seed))

    units = sorted({a.unit for a in ANNS})
    counts = np.random.default_rng(seed).multinomial(len(units), np.full(len(units), 1 / len(units)), size=draws)
    diffs = {m: [] for m in ("recall", "precision", "f1")}
    for row in counts:
        drawn = [a for u, k in zip(units, row, strict=True) for a in ANNS if a.unit == u for _ in range(k)]
        res = [
            stats.prf(
                [i in a.issues for a in drawn for i in ISSUES], [i in j.issues[a.reply] for a in drawn for i in ISSUES]
            )
            for j in (G, W)
        ]
        for m in diffs:
            x, y = res[0][m], res[1][m]
            diffs[m].append(float("nan") if x is None or y is None else x - y)
    full = [
        stats.prf([i in a.issues for a in ANNS for i in ISSUES], [i in j.issues[a.reply] for a in ANNS for i in ISSUES])
        for j in (G, W)
    ]
    for m, d in diffs.items():
        d = np.array(d)
        d = d[~np.isnan(d)]
        assert got[m]["difference"] == pytest.approx(full[0][m] - full[1][m])
        assert (got[m]["first"], got[m]["second"]) == pytest.approx((full[0][m], full[1][m]))
        assert got[m]["interval"] == pytest.approx([np.percentile(d, 2.5), np.percentile(d, 97.5)])
        want_p = min(1.0, 2 * min((d <= 0).sum() + 1, (d >= 0).sum() + 1) / (len(d) + 1))
        assert got[m]["p"] == pytest.approx(want_p)
    assert got["recall"]["difference"] > 0 and got["recall"]["p"] < 0.05


def test_mcnemar_counts_the_annotated_pairs_each_judge_alone_finds():
    got = compare_pair(ANNS, G, W, ISSUES, 10, np.random.default_rng(0))["mcnemar_recall"]
    only_g = sum(i in G.issues[a.reply] and i not in W.issues[a.reply] for a in ANNS for i in a.issues)
    only_w = sum(i in W.issues[a.reply] and i not in G.issues[a.reply] for a in ANNS for i in a.issues)
    assert (got["only_first"], got["only_second"]) == (only_g, only_w) and only_w == 0
    assert got["p"] == pytest.approx(2 * 0.5**only_g)


def test_two_identical_judges_differ_by_nothing_and_p_is_one():
    twin = judge("T", {r: sorted(v) for r, v in G.issues.items()})
    got = compare_pair(ANNS, G, twin, ISSUES, 50, np.random.default_rng(0))
    assert all(got[m]["difference"] == 0 and got[m]["p"] == 1.0 for m in ("recall", "precision", "f1"))
    assert got["mcnemar_recall"] == {"only_first": 0, "only_second": 0, "p": 1.0}


def test_a_failed_judgment_by_either_judge_drops_the_annotation_from_that_pair():
    failing = judge("F", {r: sorted(v) for r, v in G.issues.items()})
    failing.level[("e1", 0)] = -1
    got = compare_pair(ANNS, G, failing, ISSUES, 20, np.random.default_rng(0))
    assert got["annotations"] == len(ANNS) - 2  # both annotators' lines on that reply


def test_the_best_judge_is_the_highest_pooled_f1_and_the_worse_ones_are_named():
    out = issue_tests(ANNS, {"G": G, "W": W}, ISSUES, {"G": 0.8, "W": 0.3}, draws=400, seed=3)
    assert out["best_f1"] == "G" and out["significantly_lower_than_best"] == {"W": ["recall", "f1"]}
    assert [p["judges"] for p in out["pairs"]] == [["G", "W"]]


# -- through `judge agreement`: the report, its markdown and Figure 2 -------------------------------------------------


def _write_run(tmp_path: Path, prices: bool = True) -> tuple[list[Path], Path]:
    """Annotations by A and B on 12 replies, judgments by two judge roles, and the judge run's cost table."""
    ann = tmp_path / "ann.jsonl"
    with ann.open("w") as f:
        for a in ANNS:
            f.write(
                json.dumps(
                    {
                        "session_id": a.reply[0],
                        "reply_index": a.reply[1],
                        "annotator": a.annotator,
                        "severity": "minor",
                        "issues": sorted(a.issues),
                    }
                )
                + "\n"
            )
    rows = []
    for name, j in (("judge", G), ("judge:small", W)):
        for (sid, ri), flags in j.issues.items():
            rows.append(
                {
                    "session_id": sid,
                    "patient_id": "p",
                    "counsellor": "c1" if sid < "e4" else "c2",
                    "session_index": 0,
                    "reply_index": ri,
                    "judge": name,
                    "judge_model": f"model-{name}",
                    "severity": "minor",
                    "weight": 1.0,
                    "status": "ok",
                    "issues": [{"issue": i, "category": "x", "reason": "r", "quote": "q"} for i in sorted(flags)],
                }
            )
    folder = tmp_path / "run" / "judgments"
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "judgments.parquet")
    cost = (lambda x: x) if prices else (lambda x: None)
    (folder / "report.json").write_text(
        json.dumps(
            {
                "costs": {
                    "rows": [
                        {"role": "judge", "list_cost_per_query": cost(0.012)},
                        {"role": "judge:small", "list_cost_per_query": cost(0.0004)},
                        {"role": "patient", "list_cost_per_query": cost(0.001)},
                    ]
                }
            }
        )
    )
    return [ann], folder


def test_agreement_reports_the_paired_tests_and_draws_figure_2_from_the_runs_costs(tmp_path):
    anns, folder = _write_run(tmp_path)
    rep = run_agreement(anns, judgments=folder, out=tmp_path / "out", draws=300, seed=2)
    t = rep["issue_tests"]
    assert t["best_f1"] == "judge" and "judge:small" in t["significantly_lower_than_best"]
    pts = {p["judge"]: p for p in rep["cost_tradeoff"]["judges"]}
    assert pts["judge"]["list_cost_per_query"] == 0.012 and pts["judge:small"]["list_cost_per_query"] == 0.0004
    assert pts["judge"]["severity_macro_f1"] == rep["judges"]["judge"]["severity"]["macro_f1"]
    assert pts["judge:small"]["ranking_stability"] == rep["ranking"]["judges"]["judge:small"]["bootstrap"]
    assert rep["inputs"]["costs"] == str(folder / "report.json")
    png = tmp_path / "out" / "judge_cost_tradeoff.png"
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and rep["plots"] == [png.name]
    md = (tmp_path / "out" / "agreement.md").read_text()
    assert "Significantly lower than it (p < 0.05, bootstrap): judge:small" in md
    assert "![Figure 2: agreement against cost](judge_cost_tradeoff.png)" in md


def test_without_priced_judges_figure_2_is_not_drawn_and_says_why(tmp_path):
    anns, folder = _write_run(tmp_path, prices=False)
    rep = run_agreement(anns, judgments=folder, out=tmp_path / "out", draws=50, seed=2)
    assert not rep["cost_tradeoff"]["drawn"] and "judge.prices" in rep["cost_tradeoff"]["not_drawn"]
    assert not (tmp_path / "out" / "judge_cost_tradeoff.png").exists()
    assert "Not drawn: no judge has a list cost per query" in (tmp_path / "out" / "agreement.md").read_text()


def test_a_costs_file_without_a_cost_table_is_refused(tmp_path):
    anns, folder = _write_run(tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"judges": {}}))
    with pytest.raises(InputError, match="--costs .*bad.json: no cost table"):
        run_agreement(anns, judgments=folder, out=tmp_path / "out", costs=bad, draws=10)
    assert not (tmp_path / "out").exists()


def test_one_judge_gets_no_pairwise_tests(tmp_path):
    anns, folder = _write_run(tmp_path)
    t = pq.read_table(folder / "judgments.parquet").to_pylist()
    pq.write_table(pa.Table.from_pylist([r for r in t if r["judge"] == "judge"]), folder / "judgments.parquet")
    rep = run_agreement(anns, judgments=folder, out=tmp_path / "out", draws=20)
    assert "issue_tests" not in rep and rep["cost_tradeoff"]["drawn"]
    assert not math.isnan(rep["judges"]["judge"]["issues"]["pooled"]["f1"])
