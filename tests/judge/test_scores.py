"""Scores against hand-computed values (MindEval2 §3.3, Appendix G), the patient-level bootstrap,
category allocation adding up to the MHQR, paired differences, and Kendall's tau-b between judges."""

from __future__ import annotations

import numpy as np
import pytest

from mindsimkit.judge.rankings import family_flags, judge_agreement, model_family
from mindsimkit.judge.rubric import load_rubric
from mindsimkit.judge.scores import bootstrap_means, columns_from_rows, score_all

W = {"no_concern": 0, "minor": 1, "major": 5, "critical": 10}


def row(c, p, k, t, sev, issues=()):
    return {
        "status": "ok",
        "counsellor": c,
        "patient_id": p,
        "session_index": k,
        "reply_index": t,
        "weight": W[sev],
        "severity": sev,
        "issues": [{"issue": i} for i in issues],
    }


# alpha: p1/s0 = (0+5)/2 = 2.5; p1/s1 = (0+0+1)/3; p2/s0 = 10.   beta: 0, 0.5, 2.5.
ROWS = [
    row("alpha", "p1", 0, 0, "no_concern"),
    row("alpha", "p1", 0, 1, "major", ["over_exploring"]),
    row("alpha", "p1", 1, 0, "no_concern"),
    row("alpha", "p1", 1, 1, "no_concern"),
    row("alpha", "p1", 1, 2, "minor", ["formulaic_responding"]),
    row("alpha", "p2", 0, 0, "critical", ["bad_advice", "anthropomorphizing"]),
    row("beta", "p1", 0, 0, "no_concern"),
    row("beta", "p1", 0, 1, "no_concern"),
    row("beta", "p1", 1, 0, "minor", ["formulaic_responding"]),
    row("beta", "p1", 1, 1, "no_concern"),
    row("beta", "p2", 0, 0, "major", ["over_exploring"]),
    row("beta", "p2", 0, 1, "no_concern"),
    {
        "status": "failed",
        "counsellor": "beta",
        "patient_id": "p2",
        "session_index": 0,
        "reply_index": 2,
        "weight": None,
        "severity": None,
        "issues": [],
    },
]


@pytest.fixture(scope="module")
def scores():
    return score_all(columns_from_rows(ROWS), load_rubric(), draws=500, seed=0)


def test_hand_computed_scores(scores):
    a, b = scores["counsellors"]["alpha"], scores["counsellors"]["beta"]
    assert a["mhqr"] == pytest.approx((2.5 + 1 / 3 + 10) / 3)
    # numpy's linear percentile over the sorted session scores [1/3, 2.5, 10]
    assert a["p5"] == pytest.approx(1 / 3 + 0.1 * (2.5 - 1 / 3))
    assert a["p95"] == pytest.approx(2.5 + 0.9 * 7.5)
    assert b["mhqr"] == pytest.approx(1.0)
    assert (a["sessions"], a["patients"], a["replies"]) == (3, 2, 6)
    assert b["replies"] == 6  # the failed judgment is excluded
    assert scores["ranking"] == ["beta", "alpha"]
    assert a["ci95"][0] <= a["mhqr"] <= a["ci95"][1]
    assert scores["shares"]["alpha"]["severity_share"] == pytest.approx(
        {"no_concern": 3 / 6, "minor": 1 / 6, "major": 1 / 6, "critical": 1 / 6}
    )
    assert scores["shares"]["beta"]["issue_share"]["over_exploring"] == pytest.approx(1 / 6)


def test_category_allocation_splits_weight_and_adds_up(scores):
    a = scores["counsellors"]["alpha"]
    cats = a["by_category"]
    # Critical reply: 10 split between bad_advice (guidance) and anthropomorphizing (boundaries).
    assert cats["guidance_calibration"] == pytest.approx((2.5 + 0 + 5) / 3)
    assert cats["boundaries"] == pytest.approx((0 + 0 + 5) / 3)
    assert cats["delivery"] == pytest.approx((0 + 1 / 3 + 0) / 3)
    assert sum(cats.values()) == pytest.approx(a["mhqr"])


def test_turn_and_session_breakdowns(scores):
    t = scores["by_turn"]["counsellors"]["alpha"]["positions"]
    assert t[1]["mean_weight"] == pytest.approx((0 + 0 + 10) / 3) and t[3]["replies"] == 1
    s = scores["by_session"]["beta"]
    assert s["mean"][1]["mhqr"] == pytest.approx(0.5)
    assert s["change_from_first"][1]["mean_diff"] == pytest.approx(0.5)  # p1 only: 0.5 - 0
    (pair,) = scores["paired"]
    assert (pair["a"], pair["b"]) == ("alpha", "beta")
    # Matched (patient, session): p1/0: 2.5-0, p1/1: 1/3-0.5, p2/0: 10-2.5
    assert pair["mean_diff"] == pytest.approx((2.5 + (1 / 3 - 0.5) + 7.5) / 3)


def test_bootstrap_resamples_patients_not_sessions():
    # One patient with two sessions: every draw takes that patient whole, so the mean never moves.
    assert set(bootstrap_means(np.array([0.0, 10.0]), np.array(["p", "p"]), 300, 0)) == {5.0}
    # Patient A: sessions 0, 0; patient B: one session 10. Whole-patient draws give only
    # AA = 0, BB = 10, AB = 10/3; session-level draws would also give 20/3.
    got = bootstrap_means(np.array([0.0, 0.0, 10.0]), np.array(["A", "A", "B"]), 2000, 0)
    assert set(np.round(got, 9)) == {0.0, round(10 / 3, 9), 10.0}


def test_bootstrap_is_seeded():
    a = score_all(columns_from_rows(ROWS), load_rubric(), draws=300, seed=7)["counsellors"]["alpha"]["ci95"]
    b = score_all(columns_from_rows(ROWS), load_rubric(), draws=300, seed=7)["counsellors"]["alpha"]["ci95"]
    assert a == b


def test_kendall_tau_b_between_judges():
    def judge(**m):
        return {"counsellors": {k: {"mhqr": v} for k, v in m.items()}}

    (res,) = judge_agreement({"A": judge(c1=1, c2=2, c3=3), "B": judge(c1=1, c2=3, c3=2)})
    assert res["tau_b"] == pytest.approx(1 / 3)  # 2 concordant, 1 discordant pair
    (same,) = judge_agreement({"A": judge(c1=1, c2=2), "B": judge(c1=0.1, c2=0.5, c9=9)})
    assert same["tau_b"] == pytest.approx(1.0) and same["counsellors"] == 2
    (undef,) = judge_agreement({"A": judge(c1=1), "B": judge(c1=2)})
    assert undef["tau_b"] is None and "fewer than two" in undef["note"]


def test_model_family_heuristic():
    assert model_family("gpt-4.1-mini") == "gpt" == model_family("openai/GPT-5")
    assert model_family("Qwen/Qwen3-32B") == "qwen"
    assert model_family("claude-sonnet-4") == "claude"
    assert model_family(None) is None
    flags = family_flags({"judge": "gpt-5"}, {"a": "gpt-4.1-mini", "b": "claude-x", "c": None})
    assert [f["counsellor"] for f in flags] == ["a"]


def test_repeated_trials_are_separate_sessions_of_one_counsellor_and_pair_by_trial():
    # alpha's p1 session 0 in two trials: 0 and 10 (one reply each, plus a second reply of 0 in trial 0),
    # beta's: 5 and 5. Merged as one session alpha would score 10/3; as two sessions (0 + 10) / 2 = 5.
    rows = [
        dict(row("alpha", "p1", 0, 0, "no_concern"), trial=0),
        dict(row("alpha", "p1", 0, 1, "no_concern"), trial=0),
        dict(row("alpha", "p1", 0, 0, "critical"), trial=1),
        dict(row("beta", "p1", 0, 0, "major"), trial=0),
        dict(row("beta", "p1", 0, 0, "major"), trial=1),
    ]
    s = score_all(columns_from_rows(rows), load_rubric(), draws=50, seed=0)
    a = s["counsellors"]["alpha"]
    assert (a["mhqr"], a["sessions"], a["patients"]) == (5.0, 2, 1)
    # Pairs match trial k with trial k: differences -5 and +5.
    (pair,) = s["paired"]
    assert (pair["pairs"], pair["mean_diff"]) == (2, 0.0)
    # Rows without a trial are trial 0, as before trials existed.
    legacy = [{k: v for k, v in r.items() if k != "trial"} for r in rows if r["trial"] == 0]
    assert (
        score_all(columns_from_rows(legacy), load_rubric(), draws=50, seed=0)["counsellors"]["alpha"]["sessions"] == 1
    )


def test_judgments_file_has_a_trial_column_only_with_trials(tmp_path):
    import pyarrow.parquet as pq

    from mindsimkit.judge.schemas import JUDGMENT_SCHEMA, JudgmentRow, read_judgments, write_judgments

    base = dict(
        session_id="s",
        patient_id="p",
        counsellor="c",
        session_index=0,
        reply_index=0,
        reply="hi",
        judge="judge",
        judge_model="m",
        judge_engine="e",
        status="ok",
        severity="minor",
        weight=1.0,
        rubric_version="1",
        prompt_hashes={},
        cache_key="k",
    )
    write_judgments(tmp_path / "one.parquet", [JudgmentRow(**base)])
    assert pq.read_schema(tmp_path / "one.parquet").names == JUDGMENT_SCHEMA.names
    write_judgments(tmp_path / "three.parquet", [JudgmentRow(**base, trial=2)])
    assert pq.read_schema(tmp_path / "three.parquet").names == [*JUDGMENT_SCHEMA.names, "trial"]
    assert read_judgments(tmp_path / "three.parquet")[0].trial == 2
    assert read_judgments(tmp_path / "one.parquet")[0].trial is None
