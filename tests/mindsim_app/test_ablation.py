"""The memory ablation (MindEval2 App. G.1 "Memory Ablation", Figure 11): `mindsim ablate
memory` reruns sessions 2+ with the counsellor's memory section as in session 1 while the patient keeps its
memory, each from its benchmark twin's schedule, scenario and memory; judges them with the twin's system prompt
(running memory in it) and reports ablated − benchmark MHQR per counsellor, with a patient bootstrap and a split
by issue category (judge/ablation.py, mindsim_app/ablation.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mindsimkit.judge.ablation import paired_ablation
from mindsimkit.judge.rubric import load_rubric
from mindsimkit.judge.schemas import read_judgments
from mindsimkit.mindcore.config import RoleSpec
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindcore.recipe import load_recipe
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.simulate import SessionStore, run_simulation
from mindsimkit.mindsim_app.ablation import ABLATION, ablate_memory
from mindsimkit.mindsim_app.cli import main
from mindsimkit.profilegen.dataset import write_profiles
from judgefakes import fake_judge
from simfakes import SimResponder, make_profile

NO_MEMORY = "There have been no earlier sessions with this patient."
RECIPE = """
name: ablation-test
engines: {local: {kind: embedded}}
roles: {default: {engine: local}, "counsellor:b": {engine: local}}
simulation: {sessions: SESSIONS, turn_cap: 3, counsellors: [counsellor, "counsellor:b"], trials: TRIALS}
judge: {bootstrap_draws: 200, plots: true}
"""


class Play(SimResponder):
    """The simulator's fake roles, a counsellor whose reply shows whether its prompt held a memory (without one
    it over-explores: MAJOR, weight 5; with one: no concern) and the marker-word judge."""

    def __call__(self, req):
        if "__check_" in req.role:  # preflight's probe of each engine
            return {"mood": "steady", "calm": True} if req.response_schema else "Hello."
        if req.role.startswith("judge"):
            return fake_judge(req)
        if req.role.startswith("counsellor"):
            return "MAJOR tell me more" if NO_MEMORY in req.messages[0]["content"] else "ok, go on"
        return super().__call__(req)


def _engines(backend: FakeBackend) -> Engines:
    return Engines.with_backend(
        backend, roles={"default": RoleSpec(engine="fake"), "counsellor:b": RoleSpec(engine="fake")}
    )


def make_run(root: Path, sessions: int = 3, trials: int = 1) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    run = root / "run"
    recipe = root / "recipe.yaml"
    recipe.write_text(RECIPE.replace("SESSIONS", str(sessions)).replace("TRIALS", str(trials)))
    profiles = [make_profile("p1"), make_profile("p2")]
    write_profiles(profiles, run / "profiles")
    backend = FakeBackend(Play(end_after=99))
    config = load_recipe(recipe).section("simulation", SimulationConfig)
    with _engines(backend) as engines:
        summary = run_simulation(profiles, engines, config, run, seed=0)
        assert not summary.failed_arcs
        from mindsimkit.judge.config import JudgeConfig
        from mindsimkit.judge.run import run_judging

        run_judging(run, engines, JudgeConfig(bootstrap_draws=200, plots=False))
    (run / "run.json").write_text(
        json.dumps(
            {
                "run_id": "r",
                "recipe_hash": "h",
                "status": "finished",
                "recipe": {"name": "r", "path": str(recipe), "seed": 1},
            }
        )
    )
    return run


@pytest.fixture(scope="module")
def ablated(tmp_path_factory):
    root = tmp_path_factory.mktemp("abl")
    run = make_run(root)
    backend = FakeBackend(Play(end_after=99))
    with _engines(backend) as engines:
        summary = ablate_memory(run, ["counsellor", "counsellor:b"], engines=engines)
    return run, summary, backend


def test_counsellor_prompt_has_no_memory_while_the_patient_keeps_it(ablated):
    run, summary, backend = ablated
    folder = run / "ablations" / "memory"
    reruns = SessionStore(folder).all()
    twins = {(r.counsellor, r.patient_id, r.session_index): r for r in SessionStore(run).all()}
    assert len(reruns) == summary["rerun"] == 8 and not summary["failures"]  # 2 counsellors x 2 patients x 2
    inputs = {
        json.loads(line)["session_id"]: json.loads(line)
        for line in (folder / "judge_inputs.jsonl").read_text().splitlines()
    }
    for r in reruns:
        twin = twins[(r.counsellor, r.patient_id, r.session_index)]
        assert r.session_index >= 1 and r.rerun == ABLATION and r.counsellor_memory == []
        assert r.session_id != twin.session_id
        assert twin.memory_before and r.memory_before == twin.memory_before  # the patient keeps its memory
        assert all(line in r.patient_system_prompt for line in twin.memory_before)
        assert NO_MEMORY in r.counsellor_system_prompt  # the counsellor's as sent: session 1's memory section
        assert not any(line in r.counsellor_system_prompt for line in twin.memory_before)
        assert r.counsellor_messages[0]["content"] == r.counsellor_system_prompt
        # Same schedule entry and scenario as the twin; only the counsellor's prompt differs.
        assert r.schedule == twin.schedule and r.scenario == twin.scenario
        assert r.patient_messages[1]["content"] == twin.patient_messages[1]["content"]  # the same opening
        # The judge is shown the twin's prompt, running memory included.
        assert inputs[r.session_id]["counsellor_system_prompt"] == twin.counsellor_system_prompt
        assert r.memory_update.skipped  # nothing reads a rerun's memory
    # No scenario or memory was written for the reruns: they reuse the benchmark's.
    asked = {q.role for q in backend.requests}
    assert "scenario_writer" not in asked and "memory_compactor" not in asked


def test_report_pairs_each_rerun_with_its_twin(ablated):
    run, summary, backend = ablated
    folder = run / "ablations" / "memory"
    report = json.loads((folder / "report.json").read_text())["judges"]["judge"]
    # Without memory every reply is MAJOR (5), with it none is: +5 on every pair, all of it over-exploring.
    for name in ("counsellor", "counsellor:b"):
        e = report["counsellors"][name]
        assert e["pairs"] == 4 and e["mean_diff"] == pytest.approx(5.0) and e["ci95"] == pytest.approx([5.0, 5.0])
        assert e["by_category"]["guidance_calibration"]["mean_diff"] == pytest.approx(5.0)
        assert e["benchmark_change_from_first"]["mean_diff"] == pytest.approx(-5.0)
    assert report["overall"]["pairs"] == 8
    assert (folder / "memory_ablation.png").stat().st_size > 0 and "Memory ablation" in (
        folder / "report.md"
    ).read_text()
    # The twins came from the run's own judgment cache: the only judge requests were for the reruns' replies
    # (one per distinct judged context: the judge's cache is keyed by content).
    judged = [q for q in backend.requests if q.role == "judge" and q.schema_name == "mhqr_judgment"]
    bench = read_judgments(folder / "judgments" / "benchmark.parquet")
    ablated_keys = {r.cache_key for r in read_judgments(folder / "judgments" / "ablated.parquet")}
    assert judged and len(judged) == len(ablated_keys) and not ablated_keys & {r.cache_key for r in bench}
    assert {r.session_index for r in bench} == {0, 1, 2} and all(r.status == "ok" for r in bench)


def test_rerun_resumes_without_a_request(ablated, tmp_path):
    run, summary, _ = ablated
    backend = FakeBackend(Play(end_after=99))
    with _engines(backend) as engines:
        again = ablate_memory(run, ["counsellor", "counsellor:b"], engines=engines)
    work = [q for q in backend.requests if "__check_" not in q.role]
    assert again["rerun"] == 8 and not work
    assert (
        json.loads((run / "ablations" / "memory" / "report.json").read_text())["judges"]["judge"]["overall"]["pairs"]
        == 8
    )


def test_repeated_trials_each_rerun_and_pair_with_their_own_twin(tmp_path):
    run = make_run(tmp_path, sessions=2, trials=2)
    backend = FakeBackend(Play(end_after=99))
    with _engines(backend) as engines:
        summary = ablate_memory(run, ["counsellor"], engines=engines)
    reruns = SessionStore(run / "ablations" / "memory").all()
    # 2 patients x 2 trials of session 2: four reruns, not two trials collapsed into one.
    assert summary["rerun"] == len(reruns) == 4 and not summary["failures"]
    assert sorted((r.patient_id, r.trial) for r in reruns) == [("p1", 0), ("p1", 1), ("p2", 0), ("p2", 1)]
    twins = {
        (r.patient_id, r.trial, r.session_index): r for r in SessionStore(run).all() if r.counsellor == "counsellor"
    }
    for r in reruns:
        twin = twins[(r.patient_id, r.trial, r.session_index)]
        assert r.session_id != twin.session_id and r.scenario == twin.scenario and r.memory_before == twin.memory_before
    report = json.loads((run / "ablations" / "memory" / "report.json").read_text())["judges"]["judge"]
    e = report["counsellors"]["counsellor"]
    assert e["pairs"] == 4 and e["patients"] == 2 and e["mean_diff"] == pytest.approx(5.0)
    assert e["benchmark_change_from_first"]["pairs"] == 4


def test_paired_difference_pairs_trials_with_their_own_twin():
    rubric = load_rubric(None)

    def row(index, trial, weight):
        sev = {0: "no_concern", 5: "major", 10: "critical"}[weight]
        issues = [] if weight == 0 else [{"issue": "over_exploring"}]
        return {
            "status": "ok",
            "counsellor": "alpha",
            "patient_id": "p1",
            "patient_engine": "mindsim",
            "trial": trial,
            "session_index": index,
            "reply_index": 0,
            "weight": float(weight),
            "severity": sev,
            "issues": issues,
            "counsellor_flags": [],
        }

    bench = [row(0, 0, 5), row(1, 0, 0), row(0, 1, 10), row(1, 1, 5)]
    abl = [row(1, 0, 5), row(1, 1, 10)]
    e = paired_ablation(abl, bench, rubric, draws=200, seed=0)["counsellors"]["alpha"]
    # Trial 0: 5 - 0; trial 1: 10 - 5. Pooling the trials would pair both reruns with one averaged twin.
    assert e["pairs"] == 2 and e["mean_diff"] == pytest.approx(5.0) and e["patients"] == 1
    # Later - first within each trial: 0 - 5 and 5 - 10.
    assert e["benchmark_change_from_first"]["mean_diff"] == pytest.approx(-5.0)


def test_paired_difference_arithmetic_on_constructed_judgments():
    rubric = load_rubric(None)

    def row(pid, index, k, weight, issues=()):
        sev = {0: "no_concern", 1: "minor", 5: "major", 10: "critical"}[weight]
        return {
            "status": "ok",
            "counsellor": "alpha",
            "patient_id": pid,
            "patient_engine": "mindsim",
            "session_index": index,
            "reply_index": k,
            "weight": float(weight),
            "severity": sev,
            "issues": [{"issue": i} for i in issues],
            "counsellor_flags": [],
        }

    bench = [
        row("p1", 0, 0, 5, ["over_exploring"]),
        row("p1", 1, 0, 0),
        row("p1", 1, 1, 1, ["formulaic_responding"]),
        row("p2", 0, 0, 0),
        row("p2", 1, 0, 5, ["bad_advice"]),
    ]
    abl = [
        row("p1", 1, 0, 5, ["over_exploring"]),
        row("p1", 1, 1, 5, ["over_exploring"]),
        row("p2", 1, 0, 10, ["bad_advice", "false_memory"]),
        row("p3", 1, 0, 10, ["bad_advice"]),
    ]
    r = paired_ablation(abl, bench, rubric, draws=500, seed=0)
    e = r["counsellors"]["alpha"]
    # p1: 5 - 0.5 = 4.5; p2: 10 - 5 = 5; p3 has no twin and is left out.
    assert e["pairs"] == 2 and e["mean_diff"] == pytest.approx(4.75) and r["unmatched_ablated_sessions"] == 1
    assert 4.5 <= e["ci95"][0] <= e["ci95"][1] <= 5.0
    assert e["ablated_mhqr"] == pytest.approx(7.5) and e["benchmark_mhqr"] == pytest.approx(2.75)
    cats = {c: v["mean_diff"] for c, v in e["by_category"].items()}
    assert cats["guidance_calibration"] == pytest.approx(2.5) and cats["fidelity"] == pytest.approx(2.5)
    assert cats["delivery"] == pytest.approx(-0.25) and sum(cats.values()) == pytest.approx(e["mean_diff"])
    # Benchmark later - first: p1 0.5 - 5, p2 5 - 0.
    assert e["benchmark_change_from_first"]["mean_diff"] == pytest.approx(0.25)


def test_bad_input_is_exit_2_with_one_line(tmp_path, capsys):
    run = make_run(tmp_path)
    capsys.readouterr()  # the fake run's own progress lines
    assert main(["ablate", "memory", str(run), "--counsellor", "nobody"]) == 2
    msg = capsys.readouterr().err.strip()
    assert "nobody" in msg and "counsellor:b" in msg and len(msg.splitlines()) == 1
    assert not (run / "ablations").exists()
    one = make_run(tmp_path / "one", sessions=1)
    capsys.readouterr()
    assert main(["ablate", "memory", str(one), "--counsellor", "counsellor"]) == 2
    msg = capsys.readouterr().err.strip()
    assert "sessions 2+" in msg and len(msg.splitlines()) == 1
    assert main(["ablate", "memory", str(tmp_path / "missing"), "--counsellor", "counsellor"]) == 2
    assert "no finished sessions" in capsys.readouterr().err
