"""Category shares over all replies (§5.3) and categories / issues flagged together (Figure 5, App. G.1), on six
hand-built replies whose every expected number is worked out below."""

from __future__ import annotations

import json

import pytest

from mindsimkit.judge.coflags import category_shares, coflag_groups
from mindsimkit.judge.config import JudgeConfig
from mindsimkit.judge.rubric import load_rubric
from mindsimkit.judge.scores import columns_from_rows, score_all

W = {"no_concern": 0, "minor": 1, "major": 5, "critical": 10}
# alpha (one session): guidance alone (5), fidelity + guidance (5), delivery (1), nothing (0): MHQR 11/4.
# beta (one session): distortion + guidance (10), nothing (0): MHQR 5.
REPLIES = [
    ("alpha", "major", ["under_guiding", "over_exploring"]),
    ("alpha", "major", ["missed_shared_context", "under_guiding"]),
    ("alpha", "minor", ["formulaic_responding"]),
    ("alpha", "no_concern", []),
    ("beta", "critical", ["bad_advice", "perspective_as_fact"]),
    ("beta", "no_concern", []),
]


def rows() -> list[dict]:
    return [
        {
            "status": "ok",
            "counsellor": c,
            "patient_id": "p1",
            "session_index": 0,
            "reply_index": k,
            "severity": sev,
            "weight": W[sev],
            "issues": [{"issue": i} for i in issues],
            "counsellor_flags": [],
        }
        for k, (c, sev, issues) in enumerate(REPLIES)
    ]


@pytest.fixture(scope="module")
def cols():
    return columns_from_rows(rows())


def test_category_shares_over_all_replies_and_of_the_mhqr(cols):
    rubric = load_rubric()
    full = score_all(cols, rubric, draws=100, seed=0)["counsellors"]
    a = category_shares(cols, rubric, full)["alpha"]
    assert a["replies"] == 4
    assert a["flagged_share"] == {
        "distortion_reinforcement": 0,
        "fidelity": 0.25,
        "guidance_calibration": 0.5,
        "boundaries": 0,
        "delivery": 0.25,
        "other": 0,
    }
    # Allocated weight: guidance 5 + 2.5, fidelity 2.5, delivery 1, over the session's total 11.
    assert a["mhqr_share"]["guidance_calibration"] == pytest.approx(7.5 / 11)
    assert a["mhqr_share"]["fidelity"] == pytest.approx(2.5 / 11)
    assert sum(a["mhqr_share"].values()) == pytest.approx(1.0)
    everyone = category_shares(cols, rubric, full)["all"]
    assert everyone["replies"] == 6 and everyone["flagged_share"]["guidance_calibration"] == pytest.approx(3 / 6)


def test_every_flagged_reply_falls_in_one_group_of_categories(cols):
    g = coflag_groups(cols, load_rubric())
    al = g["all"]
    assert al["replies"] == 6 and al["flagged_replies"] == 4
    got = {tuple(e["categories"]): (e["replies"], e["weight_share"]) for e in al["groups"]}
    assert got == {
        ("guidance_calibration",): (1, pytest.approx(5 / 21)),
        ("fidelity", "guidance_calibration"): (1, pytest.approx(5 / 21)),
        ("delivery",): (1, pytest.approx(1 / 21)),
        ("distortion_reinforcement", "guidance_calibration"): (1, pytest.approx(10 / 21)),
    }
    assert sum(e["reply_share"] for e in al["groups"]) == pytest.approx(4 / 6)
    assert sum(e["weight_share"] for e in al["groups"]) == pytest.approx(1.0)
    assert [tuple(e["categories"]) for e in g["beta"]["groups"]] == [
        ("distortion_reinforcement", "guidance_calibration")
    ]


def test_issue_pairs_name_the_more_frequent_issue_first(cols):
    pairs = {tuple(p["issues"]): p for p in coflag_groups(cols, load_rubric())["all"]["pairs"]}
    assert set(pairs) == {
        ("under_guiding", "over_exploring"),
        ("under_guiding", "missed_shared_context"),
        ("perspective_as_fact", "bad_advice"),
    }  # a tie keeps the rubric's order
    # Under-guiding is on two replies, one of them with over-exploring.
    assert pairs[("under_guiding", "over_exploring")]["share_of_first"] == pytest.approx(0.5)
    assert pairs[("perspective_as_fact", "bad_advice")]["share_of_first"] == 1.0


def test_report_has_both_tables(tmp_path):
    from judgefakes import fake_judge, write_run

    from mindsimkit.judge.run import run_judging
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.fake import FakeBackend

    run_dir = write_run(tmp_path / "run")
    with Engines.with_backend(FakeBackend(fake_judge)) as engines:
        run_judging(run_dir, engines, JudgeConfig(bootstrap_draws=200, plots=False))
    report = json.loads((run_dir / "judgments" / "report.json").read_text())
    a = report["judges"]["judge"]["analyses"]
    assert set(a["category_shares"]) == {"all", "alpha", "beta"} and "groups" in a["coflag_groups"]["alpha"]
    md = (run_dir / "judgments" / "report.md").read_text()
    assert "Issue categories over all replies (§5.3)" in md and "Issues flagged together" in md
    # The fake judge's critical reply flags bad advice and under-guiding: both Guidance Calibration.
    assert "| Guidance Calibration | " in md and "| Under-guiding | Gives bad advice | 1 |" in md
