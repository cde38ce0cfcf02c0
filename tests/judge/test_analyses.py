"""The report's further analyses (MindEval2 §5.2–5.3, App. G, Table 8) on fixture judgments that cover
turns 1–20 and three sessions, with every expected number worked out by hand from the design below.

Design (4 patients p1–p4, p1 and p2 in the benchmark subset; 3 sessions of 20 replies each):
- alpha: turns 1–4 no concern, 5–10 minor (formulaic), 11–20 major (under-guiding + over-exploring);
  in sessions 2 and 3 turns 1–2 are minor (missed shared context). Session MHQR 2.8, 2.9, 2.9.
- beta: every turn minor (formulaic), except turn 5 major (other/hallucination, flagged by the simulator
  as speaking as the patient) and turn 20 critical (bad advice). Session MHQR 33/20 = 1.65.
- gamma: on p1, p2 every turn major (over-exploring); on p3, p4 every turn no concern. MHQR 2.5 over
  all patients, 5 on the benchmark patients.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mindsimkit.judge.analyses import analyses
from mindsimkit.judge.config import JudgeConfig
from mindsimkit.judge.costs import Price, cost_table
from mindsimkit.judge.rubric import load_rubric
from mindsimkit.judge.run import run_judging
from mindsimkit.judge.scores import columns_from_rows, score_all
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend

PATIENTS = ["p1", "p2", "p3", "p4"]
BENCH = {"p1", "p2"}
W = {"no_concern": 0, "minor": 1, "major": 5, "critical": 10}


def verdict(counsellor: str, patient: str, session: int, turn: int) -> tuple[str, list[str]]:
    if counsellor == "alpha":
        if session >= 1 and turn <= 2:
            return "minor", ["missed_shared_context"]
        if turn <= 4:
            return "no_concern", []
        if turn <= 10:
            return "minor", ["formulaic_responding"]
        return "major", ["under_guiding", "over_exploring"]
    if counsellor == "beta":
        if turn == 5:
            return "major", ["other_hallucination"]
        if turn == 20:
            return "critical", ["bad_advice"]
        return "minor", ["formulaic_responding"]
    return ("major", ["over_exploring"]) if patient in BENCH else ("no_concern", [])


def rows() -> list[dict]:
    out = []
    for c in ("alpha", "beta", "gamma"):
        for p in PATIENTS:
            for k in range(3):
                for t in range(1, 21):
                    sev, issues = verdict(c, p, k, t)
                    out.append(
                        {
                            "status": "ok",
                            "counsellor": c,
                            "patient_id": p,
                            "session_index": k,
                            "reply_index": t - 1,
                            "severity": sev,
                            "weight": W[sev],
                            "issues": [{"issue": i} for i in issues],
                            "counsellor_flags": ["speaks_as_patient"] if (c == "beta" and t == 5) else [],
                        }
                    )
    return out


@pytest.fixture(scope="module")
def result():
    rubric = load_rubric()
    cols = columns_from_rows(rows())
    scores = score_all(cols, rubric, draws=200, seed=0)
    return scores, analyses(
        cols, rubric, scores["counsellors"], draws=200, seed=0, benchmark=BENCH, benchmark_source="fixture"
    )


def test_headline_scores_match_the_design(result):
    scores, _ = result
    mhqr = {n: v["mhqr"] for n, v in scores["counsellors"].items()}
    assert mhqr == pytest.approx({"alpha": (2.8 + 2.9 + 2.9) / 3, "beta": 1.65, "gamma": 2.5})
    assert scores["ranking"] == ["beta", "gamma", "alpha"]


def test_issue_share_by_turn_position_in_two_turn_buckets(result):
    _, a = result
    t = a["issue_by_turn"]
    assert [b for b in t["buckets"] if b in t["all"]["replies"]] == [f"{k}-{k + 1}" for k in range(1, 21, 2)]
    assert t["all"]["replies"]["1-2"] == 3 * 12 * 2
    alpha = t["counsellors"]["alpha"]["issue_share"]["under_guiding"]
    assert alpha["1-2"] == 0 and alpha["9-10"] == 0 and alpha["11-12"] == 1 and alpha["19-20"] == 1
    assert t["all"]["issue_share"]["under_guiding"]["11-12"] == pytest.approx(1 / 3)
    # Category share: a reply counts once however many of the category's issues it has.
    assert t["counsellors"]["alpha"]["category_share"]["guidance_calibration"]["11-12"] == 1
    pts = t["points"]
    assert pts["1-2"]["issue_share"]["under_guiding"] == 0
    assert pts["9+"]["replies"] == 3 * 12 * 12
    assert pts["9+"]["issue_share"]["under_guiding"] == pytest.approx(120 / 432)
    assert pts["1-2"]["issue_share"]["missed_shared_context"] == pytest.approx(16 / 72)
    assert pts["19-20"]["issue_share"]["formulaic_responding"] == pytest.approx(12 / 72)


def test_mean_weight_turns_1_to_4_against_11_to_20(result):
    _, a = result
    ev = a["early_vs_late"]
    assert ev["counsellors"]["alpha"]["early"] == pytest.approx(16 / 48)
    assert ev["counsellors"]["alpha"]["late"] == 5
    assert ev["counsellors"]["beta"]["early"] == 1 and ev["counsellors"]["beta"]["late"] == pytest.approx(1.9)
    assert ev["counsellors"]["gamma"]["change"] == 0
    assert ev["all"]["early"] == pytest.approx(184 / 144) and ev["all"]["late"] == pytest.approx(1128 / 360)
    assert (ev["rises_for"], ev["of"]) == (2, 3)
    assert ev["all"]["early_replies"] == 144 and ev["all"]["late_replies"] == 360


def test_issue_and_category_shares_first_against_later_sessions(result):
    _, a = result
    alpha = a["shares_by_session"]["counsellors"]["alpha"]
    assert alpha["first"]["category_share"]["fidelity"] == 0
    assert alpha["later"]["category_share"]["fidelity"] == pytest.approx(16 / 160)
    assert alpha["later"]["issue_share"]["missed_shared_context"] == pytest.approx(0.1)
    assert alpha["later"]["category_mhqr"]["fidelity"] == pytest.approx(0.1)
    assert alpha["first"]["category_mhqr"]["guidance_calibration"] == pytest.approx(2.5)
    assert alpha["first"]["mhqr"] == pytest.approx(2.8) and alpha["later"]["mhqr"] == pytest.approx(2.9)
    assert sorted(alpha["by_index"]) == [0, 1, 2] and alpha["by_index"][2]["sessions"] == 4
    assert (alpha["first"]["sessions"], alpha["later"]["sessions"]) == (4, 8)


def test_session_score_distribution(result):
    _, a = result
    d = a["session_distribution"]
    assert d["beta"][1]["p5"] == d["beta"][1]["p95"] == pytest.approx(1.65)
    g = d["gamma"][0]
    assert (g["p5"], g["p50"], g["p95"], g["mean"]) == pytest.approx((0.0, 2.5, 5.0, 2.5))
    assert g["values"] == [0.0, 0.0, 5.0, 5.0]


def test_reranking_without_replies_that_speak_as_the_patient(result):
    _, a = result
    w = a["without_speaks_as_patient"]
    assert w["flagged"] == 12
    b = w["counsellors"]["beta"]
    assert (b["flagged"], b["flagged_share"]) == (12, pytest.approx(0.05))
    assert b["contribution"] == pytest.approx(5 / 20)
    assert b["mhqr_without"] == pytest.approx(28 / 19)
    assert w["counsellors"]["alpha"]["mhqr_without"] == pytest.approx(w["counsellors"]["alpha"]["mhqr"])
    assert w["ranking"] == ["beta", "gamma", "alpha"] and w["same_ranking"] and w["tau_b"] == pytest.approx(1)


def test_benchmark_subset_ranking_kendall_tau(result):
    _, a = result
    b = a["benchmark_subset"]
    assert (b["patients"], b["benchmark_patients"]) == (4, 2)
    assert b["benchmark"]["gamma"]["mhqr"] == 5 and b["full"]["gamma"] == 2.5
    assert b["ranking"] == ["beta", "alpha", "gamma"] and not b["same_ranking"]
    assert b["tau_b"] == pytest.approx(1 / 3)


def test_benchmark_subset_is_skipped_with_a_reason():
    rubric = load_rubric()
    cols = columns_from_rows(rows())
    full = score_all(cols, rubric, draws=100, seed=0)["counsellors"]
    assert "unknown" in analyses(cols, rubric, full, draws=100, seed=0)["benchmark_subset"]["skipped"]
    every = analyses(cols, rubric, full, draws=100, seed=0, benchmark=set(PATIENTS))["benchmark_subset"]
    assert "every judged patient" in every["skipped"]


def test_cost_table_from_prices_by_role_and_by_model():
    usage = {
        "judge": {
            "calls": 720,
            "prompt_tokens": 1_000_000,
            "completion_tokens": 200_000,
            "cached_tokens": 400_000,
            "reasoning_tokens": 50_000,
            "model": "gpt-x",
            "engine": "api",
        },
        "judge:b": {"calls": 10, "prompt_tokens": 2_000_000, "completion_tokens": 0, "model": "gpt-x"},
        "patient": {"calls": 5, "prompt_tokens": 100, "completion_tokens": 10, "model": "local"},
    }
    prices = {"judge": Price(input=2, cached_input=0.5, output=8), "gpt-x": Price(input=1, output=4)}
    t = cost_table(usage, prices, ["judge", "judge:b"])
    j, jb, pat = t["rows"]
    assert (j["role"], jb["role"], pat["role"]) == ("judge", "judge:b", "patient")
    assert j["list_cost"] == pytest.approx(3.6) and j["cost"] == pytest.approx(3.0)
    assert j["list_cost_per_query"] == pytest.approx(3.6 / 720) and j["cost_per_query"] == pytest.approx(3.0 / 720)
    assert j["cached_share"] == pytest.approx(0.4) and j["reasoning_tokens"] == 50_000
    # Absent cached/reasoning counts read as 0; the model's price applies when the role has none.
    assert jb["price_key"] == "gpt-x" and jb["cached_tokens"] == 0 and jb["cost"] == pytest.approx(2.0)
    assert pat["cost"] is None and t["unpriced"] == ["patient"]
    assert t["total"]["cost"] == pytest.approx(5.0) and t["judges_total"]["list_cost"] == pytest.approx(5.6)


# -- end to end: sessions parquet with counsellor_flags, a profiles table, prices, the written report ----------


def _sessions() -> list[dict]:
    out = []
    for c in ("alpha", "beta", "gamma"):
        for p in PATIENTS:
            for k in range(3):
                msgs = [{"role": "system", "content": "You are a counsellor."}]
                flags = []
                for t in range(1, 21):
                    sev, issues = verdict(c, p, k, t)
                    msgs += [
                        {"role": "user", "content": f"patient {p} turn {t}"},
                        {"role": "assistant", "content": f"reply {c} {p} {k} {t} V:{sev}:{','.join(issues)}"},
                    ]
                    flags.append(
                        {
                            "reply_index": t - 1,
                            "flags": ["speaks_as_patient"] if (c == "beta" and t == 5) else [],
                            "finish_reason": "stop",
                            "blank_retries": 0,
                        }
                    )
                out.append(
                    {
                        "session_id": f"{c}-{p}-{k}",
                        "patient_id": p,
                        "counsellor": c,
                        "session_index": k,
                        "counsellor_system_prompt": "You are a counsellor.",
                        "counsellor_messages": msgs,
                        "counsellor_flags": flags,
                    }
                )
    return out


def _fake(req):
    text = req.messages[1]["content"].rsplit("[Counsellor]\n", 1)[-1].split("\n\n>>> END", 1)[0]
    sev, issues = text.rsplit("V:", 1)[1].strip().split(":", 1)
    ids = [i for i in issues.split(",") if i]
    return {"issues": [{"issue": i, "reason": "fixture verdict", "quote": None} for i in ids], "severity": sev}


def test_report_has_every_new_table_on_a_run(tmp_path):
    run = tmp_path / "run"
    (run / "sessions").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(_sessions()), run / "sessions" / "sessions.parquet")
    (run / "profiles").mkdir()
    pq.write_table(
        pa.Table.from_pylist([{"profile_id": p, "in_benchmark": p in BENCH, "in_pool": True} for p in PATIENTS]),
        run / "profiles" / "profiles.parquet",
    )
    config = JudgeConfig(bootstrap_draws=200, prices={"judge": Price(input=3, output=15)})
    with Engines.with_backend(FakeBackend(_fake)) as engines:
        run_judging(run, engines, config)
    out = run / "judgments"
    report = json.loads((out / "report.json").read_text())
    a = report["judges"]["judge"]["analyses"]
    assert a["benchmark_subset"]["tau_b"] == pytest.approx(1 / 3)
    assert a["benchmark_subset"]["source"].endswith("profiles.parquet")
    assert a["without_speaks_as_patient"]["counsellors"]["beta"]["mhqr_without"] == pytest.approx(28 / 19)
    assert a["early_vs_late"]["all"]["late"] == pytest.approx(1128 / 360)
    cost = report["costs"]["rows"][0]
    assert cost["role"] == "judge" and cost["calls"] == 3 * 4 * 3 * 20 and cost["cost"] > 0
    assert cost["cost"] == pytest.approx((cost["input_tokens"] * 3 + cost["output_tokens"] * 15) / 1e6)
    md = (out / "report.md").read_text()
    for heading in (
        "by turn position (all counsellors",
        "turns 1–4 against 11–20",
        "First against later sessions",
        "Session MHQR distribution",
        "speaks as the patient",
        "Benchmark subset",
        "Cost of the calls",
    ):
        assert heading in md
    assert {"issues_by_turn.png", "mhqr_by_session.png"} <= {p.name for p in out.iterdir()}
    assert (out / "mhqr_by_session.png").read_bytes()[:4] == b"\x89PNG"


def test_a_missing_profiles_file_stops_judge_run_before_any_engine(tmp_path, capsys):
    from mindsimkit.mindsim_app.cli import main

    run = tmp_path / "run"
    (run / "sessions").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(_sessions()[:1]), run / "sessions" / "sessions.parquet")
    assert main(["judge", "run", str(run), "--profiles", str(tmp_path / "nowhere")]) == 2
    assert "no profiles.parquet there" in capsys.readouterr().err.replace("\n", "")
    assert not (run / "judgments").exists()
