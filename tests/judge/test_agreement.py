"""`mindsim judge agreement` against statistics computed by hand on a small worked annotation file, plus
Kendall's W and Fleiss' κ against worked examples, and the input checks (file and line named)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mindsimkit.judge import stats
from mindsimkit.judge.agreement import run_agreement
from mindsimkit.mindcore.errors import InputError

LEVELS = ["no_concern", "minor", "major", "critical"]
WEIGHTS = {"no_concern": 0, "minor": 1, "major": 5, "critical": 10}
OE, UG = "over_exploring", "under_guiding"

# The worked example: three sessions (one per counsellor), two replies each, annotators A and B, judge J.
# Severity levels as indices 0..3; issue flags per reply.
A = [0, 1, 1, 2, 2, 2]
B = [0, 0, 1, 1, 2, 1]
J = [0, 1, 3, 1, 2, 2]
A_ISSUES = [[], [OE], [OE], [OE, UG], [UG], [UG]]
B_ISSUES = [[], [], [OE], [UG], [UG], [OE]]
J_ISSUES = [[], [OE], [OE, UG], [UG], [], [UG]]
REPLIES = [("s1", 0), ("s1", 1), ("s2", 0), ("s2", 1), ("s3", 0), ("s3", 1)]
COUNSELLOR = {"s1": "c1", "s2": "c2", "s3": "c3"}


def write_annotations(path: Path, who: str, levels, issues) -> Path:
    with path.open("w") as f:
        for (sid, ri), lv, iss in zip(REPLIES, levels, issues):
            f.write(
                json.dumps(
                    {
                        "session_id": sid,
                        "reply_index": ri,
                        "annotator": who,
                        "severity": LEVELS[lv].replace("_", " ").title(),
                        "issues": iss,
                    }
                )
                + "\n"
            )
    return path


def write_judgments(folder: Path, levels, issues, status=None) -> Path:
    rows = []
    for k, ((sid, ri), lv, iss) in enumerate(zip(REPLIES, levels, issues)):
        ok = status is None or status[k] == "ok"
        rows.append(
            {
                "session_id": sid,
                "patient_id": "p" + sid,
                "counsellor": COUNSELLOR[sid],
                "session_index": 0,
                "reply_index": ri,
                "judge": "J",
                "judge_model": "fake-judge",
                "severity": LEVELS[lv] if ok else None,
                "weight": float(WEIGHTS[LEVELS[lv]]) if ok else None,
                "issues": [{"issue": i, "category": "x", "reason": "r", "quote": "q"} for i in iss] if ok else [],
                "status": "ok" if ok else "failed",
            }
        )
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "judgments.parquet")
    return folder


@pytest.fixture
def worked(tmp_path):
    files = [
        write_annotations(tmp_path / "a.jsonl", "A", A, A_ISSUES),
        write_annotations(tmp_path / "b.jsonl", "B", B, B_ISSUES),
    ]
    jdir = write_judgments(tmp_path / "judgments", J, J_ISSUES)
    report = run_agreement(files, judgments=jdir, out=tmp_path / "out", draws=200, seed=1)
    return report, tmp_path / "out"


def test_kendall_w_worked_example():
    # Raters × items:   A = 1 2 2 3 → ranks 1, 2.5, 2.5, 4   (one pair tied: T = 2³−2 = 6)
    #                   B = 1 1 2 3 → ranks 1.5, 1.5, 3, 4   (T = 6)
    #                   C = 2 1 3 3 → ranks 2, 1, 3.5, 3.5   (T = 6)
    # Rank sums R = 4.5, 5, 9, 11.5; mean 7.5; S = 9 + 6.25 + 2.25 + 16 = 33.5.
    # W = 12·S / (m²(n³−n) − m·ΣT) = 402 / (9·60 − 3·18) = 402 / 486 = 0.8271605
    assert stats.kendall_w([[1, 2, 2, 3], [1, 1, 2, 3], [2, 1, 3, 3]]) == pytest.approx(402 / 486)
    # Without ties and in perfect agreement W is 1; every rater constant leaves it undefined.
    assert stats.kendall_w([[1, 2, 3], [1, 2, 3]]) == pytest.approx(1.0)
    assert math.isnan(stats.kendall_w([[1, 1, 1], [2, 2, 2]]))


def test_fleiss_kappa_worked_examples():
    # 4 items, 3 raters, 2 categories; counts [[3,0],[0,3],[2,1],[1,2]].
    # P_i = (Σn² − 3)/6 = 1, 1, 1/3, 1/3 → P̄ = 2/3. Category shares 6/12, 6/12 → P_e = 1/2.
    # κ = (2/3 − 1/2)/(1 − 1/2) = 1/3
    assert stats.fleiss_kappa([[3, 0], [0, 3], [2, 1], [1, 2]]) == pytest.approx(1 / 3)
    # Fleiss (1971)'s textbook table as reproduced on Wikipedia: 10 items, 14 raters, κ ≈ 0.210.
    table = [
        [0, 0, 0, 0, 14],
        [0, 2, 6, 4, 2],
        [0, 0, 3, 5, 6],
        [0, 3, 9, 2, 0],
        [2, 2, 8, 1, 1],
        [7, 7, 0, 0, 0],
        [3, 2, 6, 3, 0],
        [2, 5, 3, 2, 2],
        [6, 5, 2, 1, 0],
        [0, 2, 2, 3, 7],
    ]
    assert stats.fleiss_kappa(table) == pytest.approx(0.2099, abs=5e-4)
    with pytest.raises(ValueError):
        stats.fleiss_kappa([[2, 0], [1, 0]])


def test_inter_annotator_severity_by_hand(worked):
    report, _ = worked
    sev = report["inter_annotator"]["severity"]
    # A vs B quadratic κ_w: observed Σw·O = 3 (three pairs one level apart);
    # expected Σw·E = Σ a_i b_j (i−j)² / N with A margins (1,2,3), B margins (2,3,1) = 46/6
    # → κ_w = 1 − 3/(46/6) = 14/23
    assert sev["mean_pairwise_kappa_w"] == pytest.approx(14 / 23)
    assert sev["exact"] == pytest.approx(0.5) and sev["within_one"] == pytest.approx(1.0)
    # Turn-level W: A ranks 1, 2.5, 2.5, 5, 5, 5 (T = 6 + 24); B ranks 1.5, 1.5, 4, 4, 6, 4 (T = 30).
    # R = 2.5, 4, 6.5, 9, 11, 9; mean 7; S = 53.5; W = 642 / (4·210 − 2·60) = 642/720
    assert sev["kendall_w_turn"] == pytest.approx(642 / 720)
    # Conversation W on the max: A = 1, 2, 2 (ranks 1, 2.5, 2.5; T = 6), B = 0, 1, 2 (ranks 1, 2, 3);
    # R = 2, 4.5, 5.5; S = 6.5; W = 78 / (4·24 − 2·6) = 78/84
    assert sev["conversation_w"]["max"] == pytest.approx(78 / 84)
    # Over-exploring flags among A and B: P̄ = 1/2, P_e = (5/12)² + (7/12)² = 74/144 → Fleiss κ = −1/35;
    # Cohen κ: p_o = 1/2, p_e = 1/2·1/3 + 1/2·2/3 = 1/2 → 0.
    oe = report["inter_annotator"]["issues"][OE]
    assert oe["fleiss_kappa"] == pytest.approx(-1 / 35)
    assert oe["mean_cohen_kappa"] == pytest.approx(0.0)
    assert oe["observed"] == pytest.approx(0.5)
    assert report["inter_annotator"]["issues"]["formulaic_responding"]["fleiss_kappa"] is None  # nobody flags it


def test_judge_severity_by_hand(worked):
    report, _ = worked
    s = report["judges"]["J"]["severity"]
    # 12 annotations against J: A agrees on 4 replies, B on 3.
    assert s["accuracy"] == pytest.approx(7 / 12)
    # No concern: gold 3, predicted 2, both right → P 1, R 2/3, F1 0.8.
    # Minor: gold 5, predicted 4, 2 right → P .5, R .4, F1 4/9.  Major: gold 4, predicted 4, 3 right → .75.
    assert s["f1"]["no_concern"] == pytest.approx(0.8)
    assert s["f1"]["minor"] == pytest.approx(4 / 9)
    assert s["f1"]["major"] == pytest.approx(0.75)
    assert s["f1"]["critical"] is None  # no annotation is Critical
    assert s["macro_f1"] == pytest.approx((0.8 + 4 / 9 + 0.75) / 3)
    assert s["within_one"] == pytest.approx(10 / 12)  # reply s2/0 is two levels off for both annotators
    # Pooled severity with two annotators = the more severe one = A here. κ_w(A, J):
    # Σw·O = 4 (1 vs 3) + 1 (2 vs 1) = 5; Σw·E = 54/6 = 9 → 1 − 5/9 = 4/9
    assert s["kappa_w_pooled"] == pytest.approx(4 / 9)
    assert s["kappa_w_by_annotator"]["A"] == pytest.approx(4 / 9)


def test_judge_issues_by_hand(worked):
    report, _ = worked
    iss = report["judges"]["J"]["issues"]
    # Over-exploring: gold 5, J flags it on 4 annotations, 3 right → P 3/4, R 3/5, F1 2/3.
    oe = iss["per_issue"][OE]
    assert (oe["gold"], oe["predicted"]) == (5, 4)
    assert oe["precision"] == pytest.approx(0.75) and oe["recall"] == pytest.approx(0.6)
    assert oe["f1"] == pytest.approx(2 / 3)
    # Under-guiding: gold 5, predicted 6, 3 right → P .5, R .6, F1 6/11.
    assert iss["per_issue"][UG]["f1"] == pytest.approx(6 / 11)
    assert iss["per_issue"]["formulaic_responding"]["f1"] is None
    assert iss["pooled"]["f1"] == pytest.approx(0.6)  # 6 right of 10 predicted, 10 gold
    assert iss["macro_f1"] == pytest.approx((2 / 3 + 6 / 11) / 2)


def test_ranking_by_hand(worked):
    report, out = worked
    rk = report["ranking"]
    # Units: A scores s1 (0+1)/2 = .5, s2 (1+5)/2 = 3, s3 5; B scores 0, 1, 3.
    assert rk["pooled"] == pytest.approx({"c1": 0.25, "c2": 2.0, "c3": 4.0})
    # J: s1 .5, s2 (10+1)/2 = 5.5, s3 5 → order c1 < c3 < c2: one of three pairs discordant → τ_b = 1/3.
    j = rk["judges"]["J"]
    assert j["scores"] == pytest.approx({"c1": 0.5, "c2": 5.5, "c3": 5.0})
    assert j["tau_b"] == pytest.approx(1 / 3)
    assert j["matched"] == 0 and j["of"] == 2
    assert 0.0 <= j["bootstrap"] <= 1.0 and 0.0 <= rk["bootstrap"]["annotators"] <= 1.0
    on_disk = json.loads((out / "agreement.json").read_text())
    assert on_disk["ranking"]["judges"]["J"]["tau_b"] == pytest.approx(1 / 3)
    md = (out / "agreement.md").read_text()
    assert "Table 7" in md and "| J |" in md


def test_a_judge_that_copies_the_annotator_agrees_perfectly(tmp_path):
    files = [write_annotations(tmp_path / "a.jsonl", "A", A, A_ISSUES)]
    jdir = write_judgments(tmp_path / "j", A, A_ISSUES)
    rep = run_agreement(files, judgments=jdir, out=tmp_path / "o", draws=300, seed=3)
    s = rep["judges"]["J"]["severity"]
    assert s["accuracy"] == 1.0 and s["kappa_w"] == pytest.approx(1.0)
    assert rep["judges"]["J"]["issues"]["pooled"]["f1"] == pytest.approx(1.0)
    assert rep["ranking"]["judges"]["J"]["tau_b"] == pytest.approx(1.0)
    assert rep["ranking"]["judges"]["J"]["matched"] == 1
    assert rep["ranking"]["judges"]["J"]["bootstrap"] == 1.0


def test_failed_judgments_count_as_errors(tmp_path):
    files = [write_annotations(tmp_path / "a.jsonl", "A", A, A_ISSUES)]
    jdir = write_judgments(tmp_path / "j", A, A_ISSUES, status=["ok", "failed", "ok", "ok", "ok", "ok"])
    s = run_agreement(files, judgments=jdir, out=tmp_path / "o", draws=0)["judges"]["J"]["severity"]
    assert s["failed"] == 1
    assert s["accuracy"] == pytest.approx(5 / 6)
    assert s["kappa_w"] == pytest.approx(1.0)  # κ over the five judged replies


def test_bad_input_names_file_and_line(tmp_path):
    good = json.dumps({"session_id": "s1", "reply_index": 0, "annotator": "A", "severity": "minor", "issues": []})
    cases = {
        "unknown severity": {"session_id": "s1", "reply_index": 1, "annotator": "A", "severity": "awful"},
        "unknown issue": {
            "session_id": "s1",
            "reply_index": 1,
            "annotator": "A",
            "severity": "minor",
            "issues": ["rudeness"],
        },
        "field 'annotator'": {"session_id": "s1", "reply_index": 1, "severity": "minor"},
        "give excerpt_id": {"annotator": "A", "severity": "minor"},
    }
    for expected, obj in cases.items():
        f = tmp_path / "bad.jsonl"
        f.write_text(good + "\n" + json.dumps(obj) + "\n")
        with pytest.raises(InputError, match=rf"bad\.jsonl:2: .*{expected}"):
            run_agreement([f], out=tmp_path / "o")
    # An annotated reply the judge never saw.
    f = tmp_path / "extra.jsonl"
    f.write_text(
        good + "\n" + json.dumps({"session_id": "s9", "reply_index": 0, "annotator": "A", "severity": "minor"}) + "\n"
    )
    jdir = write_judgments(tmp_path / "j", J, J_ISSUES)
    with pytest.raises(InputError, match=r"extra\.jsonl:2: .*no judgment"):
        run_agreement([f], judgments=jdir, out=tmp_path / "o")


def test_ranking_is_skipped_when_counsellors_are_unknown(tmp_path):
    files = [
        write_annotations(tmp_path / "a.jsonl", "A", A, A_ISSUES),
        write_annotations(tmp_path / "b.jsonl", "B", B, B_ISSUES),
    ]
    rep = run_agreement(files, out=tmp_path / "o")
    assert rep["judges"] == {} and "skipped" in rep["ranking"]
    assert rep["inter_annotator"]["severity"]["mean_pairwise_kappa_w"] == pytest.approx(14 / 23)
    assert "Skipped" in (tmp_path / "o" / "agreement.md").read_text()


def test_mode_ties_go_to_the_more_severe_level():
    assert stats.mode_level([0, 0, 1]) == 0  # a clear mode below the maximum
    assert stats.mode_level([0, 1]) == 1  # 1–1 tie → the more severe
    assert stats.mode_level([2, 0, 2, 0, 1]) == 2  # 2–2 tie between 0 and 2
    assert stats.mode_level([3, 1, 1, 3, 0, 0]) == 3  # three-way tie


def test_conversation_w_on_the_mode_by_hand(worked):
    report, _ = worked
    # Annotators, per session (ties → more severe): A s1 [0,1] → 1, s2 [1,2] → 2, s3 [2,2] → 2; B s1 [0,0] → 0,
    # s2 [1,1] → 1, s3 [2,1] → 2: the same vectors as the maximum's, so W = 78/84 as there.
    assert report["inter_annotator"]["severity"]["conversation_w"]["mode"] == pytest.approx(78 / 84)
    # Judge J against the units (session, annotator): gold modes A 1, 2, 2 and B 0, 1, 2; J's modes on the same
    # replies 1 ([0,1]), 3 ([3,1]), 2 ([2,2]), twice. Ranks: gold 2.5, 5, 5, 1, 2.5, 5 (T = 6 + 24);
    # J 1.5, 5.5, 3.5, 1.5, 5.5, 3.5 (T = 3·6). R = 4, 10.5, 8.5, 2.5, 8, 8.5; mean 7; S = 9 + 12.25 + 2.25 + 20.25
    # + 1 + 2.25 = 47; W = 12·47/(4·210 − 2·48) = 564/744. (Ties to the milder level would give 708/744.)
    assert report["judges"]["J"]["severity"]["conversation_w"]["mode"] == pytest.approx(564 / 744)
    assert report["judges"]["J"]["severity"]["conversation_units"] == 6


def test_conversation_w_of_mode_and_max_differ_when_the_mode_is_not_the_max():
    from mindsimkit.judge.agreement import _conversation_w

    sessions = {"s1": ([0, 0, 2], [0, 1, 1]), "s2": ([1, 1, 0], [2, 2, 2]), "s3": ([2, 2, 1], [0, 0, 0])}
    # Modes: a 0, 1, 2 and b 1, 2, 0 → ranks 1, 2, 3 and 2, 3, 1; R = 3, 5, 4; S = 2; W = 24/(4·24) = 1/4.
    # Maxima: a 2, 1, 2 (ranks 2.5, 1, 2.5; T = 6) and b 1, 2, 0; R = 4.5, 4, 3.5; S = 0.5; W = 6/(96 − 12) = 1/14.
    assert _conversation_w(sessions) == pytest.approx({"mode": 1 / 4, "max": 1 / 14})


def test_distance_shares_and_issue_means_by_hand(worked):
    report, _ = worked
    ia = report["inter_annotator"]
    # |A − B| per reply: 0, 1, 0, 1, 0, 1 → half at distance 0, half at 1, none further.
    assert ia["severity"]["distance_shares"] == pytest.approx({"0": 0.5, "1": 0.5, "2": 0.0, "3": 0.0})
    # Under-guiding: A flags replies 4–6, B 4–5. Cohen κ: p_o = 5/6, p_e = 1/2·1/3 + 1/2·2/3 = 1/2 → 2/3.
    # Fleiss: P_i = 1, 1, 1, 1, 1, 0 → P̄ = 5/6; shares 5/12, 7/12 → P_e = 74/144; κ = (120 − 74)/(144 − 74) = 23/35.
    ug = ia["issues"][UG]
    assert ug["mean_cohen_kappa"] == pytest.approx(2 / 3) and ug["fleiss_kappa"] == pytest.approx(23 / 35)
    # Means over the issues anyone flagged (over-exploring: Cohen 0, Fleiss −1/35; the rest are undefined).
    assert ia["issue_means"] == pytest.approx(
        {"mean_cohen_kappa": (0 + 2 / 3) / 2, "fleiss_kappa": (-1 / 35 + 23 / 35) / 2}
    )


def test_ranking_bootstrap_equals_a_brute_force_loop():
    """`stats.bootstrap` against a plain loop over the same draws: one `rng.integers` call per counsellor (sorted),
    sessions resampled within the counsellor, each draw's score the mean of the drawn sessions' units."""
    from scipy.stats import rankdata

    counsellor = {
        ("s1", "A"): "c1",
        ("s1", "B"): "c1",
        ("s2", "A"): "c1",
        ("s3", "A"): "c1",
        ("s3", "B"): "c1",
        ("s4", "A"): "c2",
        ("s4", "B"): "c2",
        ("s5", "A"): "c2",
        ("s5", "B"): "c2",
        ("s6", "A"): "c2",
    }
    score = dict(zip(counsellor, [0.5, 1.0, 3.0, 2.0, 5.0, 1.0, 2.0, 4.0, 0.0, 2.5]))
    # The judge scored no unit of s3: a draw of only s3 leaves c1 without a judge score (never a match).
    judge = {u: v for u, v in zip(counsellor, [1.0, 0.0, 5.0, 9.0, 9.0, 2.0, 1.0, 5.0, 1.0, 0.5]) if u[0] != "s3"}
    units = stats.Units(counsellor, {u: [(u[0], 0)] for u in counsellor}, score)
    draws, seed = 400, 5
    got = stats.bootstrap(units, {"J": judge}, draws, seed)

    rng = np.random.default_rng(seed)
    names = ["c1", "c2"]
    picks = {}
    for c in names:
        sessions = sorted({u[0] for u, cc in counsellor.items() if cc == c})
        picks[c] = [[sessions[i] for i in row] for row in rng.integers(0, len(sessions), size=(draws, len(sessions)))]

    def draw_scores(scorer, b):
        out = []
        for c in names:
            vals = [scorer[u] for s in picks[c][b] for u in counsellor if u[0] == s and u in scorer]
            out.append(sum(vals) / len(vals) if vals else float("nan"))
        return out

    def same(x, y):
        return not any(math.isnan(v) for v in x + y) and list(rankdata(x, method="min")) == list(
            rankdata(y, method="min")
        )

    full = [np.mean([v for u, v in score.items() if counsellor[u] == c]) for c in names]
    annot = sum(same(draw_scores(score, b), full) for b in range(draws)) / draws
    by_judge = sum(same(draw_scores(judge, b), draw_scores(score, b)) for b in range(draws)) / draws
    assert 0 < annot < 1 and 0 < by_judge < 1  # the draws do move the rankings
    assert got == pytest.approx({"draws": draws, "seed": seed, "annotators": annot, "J": by_judge})
