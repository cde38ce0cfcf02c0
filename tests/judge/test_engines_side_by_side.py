"""Two patient engines in one judged run: each counsellor is scored once per patient engine
(`counsellor/engine`), sessions of different engines are never merged or paired, and a run of one
engine keeps exactly today's labels, reports and cache keys."""

from __future__ import annotations

import json

import pytest
from judgefakes import SESSIONS, fake_judge, session, write_run

from mindsimkit.judge.config import JudgeConfig
from mindsimkit.judge.inputs import load_sessions
from mindsimkit.judge.rubric import load_rubric
from mindsimkit.judge.run import run_judging
from mindsimkit.judge.schemas import read_judgments
from mindsimkit.judge.scores import columns_from_rows, score_all
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend

W = {"no_concern": 0, "minor": 1, "major": 5, "critical": 10}
CFG = JudgeConfig(bootstrap_draws=200, plots=False)


def row(c, engine, p, k, t, sev):
    r = {
        "status": "ok",
        "counsellor": c,
        "patient_id": p,
        "session_index": k,
        "reply_index": t,
        "weight": W[sev],
        "severity": sev,
        "issues": [],
    }
    return r if engine is None else {**r, "patient_engine": engine}


# Same patients, counsellors and session indices under both engines, different severities:
#   mindsim/alpha   p1/s0 = 5, p1/s1 = 0, p2/s0 = 1      patientact/alpha p1/s0 = 10, p1/s1 = 1
#   mindsim/beta    p1/s0 = 0, p1/s1 = 1, p2/s0 = 0      patientact/beta  p1/s0 = 5,  p1/s1 = 5
def _rows(engines=("mindsim", "patientact")):
    ms, pa = engines
    return [
        row("alpha", ms, "p1", 0, 0, "major"),
        row("alpha", ms, "p1", 1, 0, "no_concern"),
        row("alpha", ms, "p2", 0, 0, "minor"),
        row("alpha", pa, "p1", 0, 0, "critical"),
        row("alpha", pa, "p1", 1, 0, "minor"),
        row("beta", ms, "p1", 0, 0, "no_concern"),
        row("beta", ms, "p1", 1, 0, "minor"),
        row("beta", ms, "p2", 0, 0, "no_concern"),
        row("beta", pa, "p1", 0, 0, "major"),
        row("beta", pa, "p1", 1, 0, "major"),
    ]


def _score(rows, **kw):
    return score_all(columns_from_rows(rows, **kw), load_rubric(), draws=300, seed=0)


def test_each_counsellor_is_scored_once_per_patient_engine():
    sc = _score(_rows())
    c = sc["counsellors"]
    assert set(c) == {"mindsim/alpha", "patientact/alpha", "mindsim/beta", "patientact/beta"}
    assert c["mindsim/alpha"]["mhqr"] == pytest.approx(2.0) and c["mindsim/alpha"]["sessions"] == 3
    assert c["patientact/alpha"]["mhqr"] == pytest.approx(5.5) and c["patientact/alpha"]["sessions"] == 2
    assert c["mindsim/beta"]["mhqr"] == pytest.approx(1 / 3) and c["patientact/beta"]["mhqr"] == pytest.approx(5.0)
    assert sc["systems"]["patientact/alpha"] == {"counsellor": "alpha", "patient_engine": "patientact"}
    assert sc["ranking"] == ["mindsim/beta", "mindsim/alpha", "patientact/beta", "patientact/alpha"]


def test_pairs_match_only_sessions_of_the_same_patient_engine():
    sc = _score(_rows())
    pairs = {(p["a"], p["b"]): p for p in sc["paired"]}
    assert set(pairs) == {("mindsim/alpha", "mindsim/beta"), ("patientact/alpha", "patientact/beta")}
    assert pairs[("mindsim/alpha", "mindsim/beta")]["mean_diff"] == pytest.approx(((5 - 0) + (0 - 1) + (1 - 0)) / 3)
    assert pairs[("patientact/alpha", "patientact/beta")]["mean_diff"] == pytest.approx(((10 - 5) + (1 - 5)) / 2)
    change = sc["by_session"]["patientact/alpha"]["change_from_first"][1]
    assert change["mean_diff"] == pytest.approx(1 - 10) and change["pairs"] == 1


def test_sessions_of_two_engines_are_never_merged_even_under_one_label():
    """Forced counsellor-only units (by_engine=False): still one session per engine, pairs within an engine."""
    sc = _score(_rows(), by_engine=False)
    assert set(sc["counsellors"]) == {"alpha", "beta"} and "systems" not in sc
    assert sc["counsellors"]["alpha"]["sessions"] == 5
    assert sc["counsellors"]["alpha"]["mhqr"] == pytest.approx((5 + 0 + 1 + 10 + 1) / 5)
    pair = sc["paired"][0]
    assert pair["pairs"] == 5 and pair["mean_diff"] == pytest.approx((5 - 1 + 1 + 5 - 4) / 5)


@pytest.mark.parametrize("engine", [None, "mindsim", "patientact"])
def test_one_engine_scores_exactly_as_before(engine):
    one = [r for r in _rows((engine, engine))]
    base = _score([{k: v for k, v in r.items() if k != "patient_engine"} for r in one])
    assert _score(one) == base and set(base["counsellors"]) == {"alpha", "beta"} and "systems" not in base


def _engines():
    return Engines.with_backend(FakeBackend(fake_judge))


def _both_engine_sessions():
    ms = [{**s, "patient_engine": "mindsim"} for s in SESSIONS]
    pa = [
        session(
            f"{s['session_id']}-pa",
            s["patient_id"],
            s["counsellor"],
            s["session_index"],
            ["CRIT skip your meds" if s["counsellor"] == "beta" else "ok"],
            model="gpt-4.1-mini",
        )
        for s in SESSIONS
    ]
    return ms + [{**s, "patient_engine": "patientact"} for s in pa]


def test_a_run_with_both_engines_reports_them_side_by_side(tmp_path):
    run_dir = write_run(tmp_path / "run", _both_engine_sessions())
    with _engines() as engines:
        summary = run_judging(run_dir, engines, CFG)
    rows = read_judgments(run_dir / "judgments" / "judgments.parquet")
    assert {r.patient_engine for r in rows} == {"mindsim", "patientact"}
    assert all(r.patient_engine == ("patientact" if r.session_id.endswith("-pa") else "mindsim") for r in rows)
    report = json.loads((run_dir / "judgments" / "report.json").read_text())
    sc = report["judges"]["judge"]["scores"]
    assert report["patient_engines"] == ["mindsim", "patientact"]
    assert sc["counsellors"]["patientact/alpha"]["mhqr"] == 0 and sc["counsellors"]["patientact/beta"]["mhqr"] == 10
    # The MindSim units score exactly what a MindSim-only run of the same sessions scores.
    assert sc["counsellors"]["mindsim/alpha"]["mhqr"] == pytest.approx((2.5 + 1 / 3 + 10) / 3)
    assert {(p["a"], p["b"]) for p in sc["paired"]} == {
        ("mindsim/alpha", "mindsim/beta"),
        ("patientact/alpha", "patientact/beta"),
    }
    assert summary.judges["judge"].ranking == sc["ranking"]
    crit = {(c["session_id"], c["patient_engine"]) for c in report["critical_replies"]}
    assert crit == {("s3", "mindsim"), ("s4-pa", "patientact"), ("s5-pa", "patientact"), ("s6-pa", "patientact")}
    md = (run_dir / "judgments" / "report.md").read_text()
    assert "### MHQR per counsellor and patient engine" in md and "| patientact/alpha |" in md
    assert "**patientact/beta**, session `s4-pa`" in md
    paired = md.split("### Paired differences")[1].split("## Critical")[0]
    # Neighbours only within one engine's ranking: never a mindsim unit against a patientact one.
    table = [ln for ln in paired.splitlines() if ln.startswith("| ") and "/" in ln]
    units = [tuple(c.strip() for c in ln.strip("|").split("|")[:2]) for ln in table]
    assert units == [("mindsim/beta", "mindsim/alpha"), ("patientact/alpha", "patientact/beta")]


def test_a_one_engine_run_keeps_labels_reports_and_cache_keys(tmp_path):
    plain = write_run(tmp_path / "plain", SESSIONS)
    tagged = write_run(tmp_path / "tagged", [{**s, "patient_engine": "mindsim"} for s in SESSIONS])
    out = {}
    for name, run_dir in (("plain", plain), ("tagged", tagged)):
        with _engines() as engines:
            run_judging(run_dir, engines, CFG)
        report = json.loads((run_dir / "judgments" / "report.json").read_text())
        out[name] = (
            report["judges"]["judge"]["scores"],
            report["critical_replies"],
            report["failures"],
            "patient_engines" in report,
            (run_dir / "judgments" / "report.md").read_text(),
            [r.cache_key for r in read_judgments(run_dir / "judgments" / "judgments.parquet")],
        )
    assert out["plain"] == out["tagged"]
    assert set(out["plain"][0]["counsellors"]) == {"alpha", "beta"} and out["plain"][3] is False


def test_jsonl_sessions_may_name_their_patient_engine_or_not(tmp_path):
    path = tmp_path / "other.jsonl"
    rows = [{**SESSIONS[0], "patient_engine": "their_sim"}, SESSIONS[3]]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    loaded = {s.session_id: s.patient_engine for s in load_sessions(tmp_path, path)}
    assert loaded == {"s1": "their_sim", "s4": None}


def test_every_judge_ranks_the_same_units_even_when_one_fails_a_whole_engine(tmp_path):
    """The units come from the sessions, not from one judge's successes: a judge whose every answer on
    PatientAct sessions failed still labels its MindSim units `mindsim/counsellor`, and the family flag
    (on counsellor gpt-4.1-mini) marks both engines' units of that counsellor."""
    from mindsimkit.mindcore.config import RoleSpec

    run_dir = write_run(tmp_path / "run", _both_engine_sessions())

    def responder(req):
        if req.role == "judge:picky" and "-pa" in req.messages[1]["content"]:
            return {"severity": "catastrophic"}  # never fits the schema: a failed row
        return fake_judge(req)

    roles = {
        "default": RoleSpec(engine="fake"),
        "judge": RoleSpec(engine="fake", model="gpt-5"),
        "judge:picky": RoleSpec(engine="fake", model="other-1"),
    }
    cfg = JudgeConfig(judges=["judge", "judge:picky"], bootstrap_draws=200, plots=False)
    with Engines.with_backend(FakeBackend(responder), roles) as engines:
        run_judging(run_dir, engines, cfg)
    report = json.loads((run_dir / "judgments" / "report.json").read_text())
    picky = report["judges"]["judge:picky"]
    assert picky["failed"] == 6 and set(picky["scores"]["counsellors"]) == {"mindsim/alpha", "mindsim/beta"}
    (agree,) = report["judge_agreement"]
    assert agree["counsellors"] == 2
    assert {f["patient_engine"] for f in report["failures"]} == {"patientact"}
    md = (run_dir / "judgments" / "report.md").read_text()
    assert "| mindsim/alpha † |" in md and "| patientact/alpha † |" in md
