"""Application-layer tests reuse the simulator tests' helpers (`simfakes`, `hub_stub`, `killing`) and the judge
tests' `judgefakes`: make those folders, and this one (`reportfix`, run fixtures), importable under pytest's
importlib import mode. Two of the runs the embedded tests share are here: the PatientAct run (the PatientAct
tests; the study runs reuse its scenario and decomposition) and the two-counsellor run (the kill-and-resume
and ablation smoke tests)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

SIM_TESTS = Path(__file__).resolve().parent.parent / "mindsim"
JUDGE_TESTS = Path(__file__).resolve().parent.parent / "judge"  # `judgefakes` (the memory ablation's judge)
APP_TESTS = Path(__file__).resolve().parent  # so a test here can reuse another one's run fixtures
for folder in (SIM_TESTS, JUDGE_TESTS, APP_TESTS):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


# -- the PatientAct run on the real embedded engine, shared by the PatientAct and the study tests ---------------


@pytest.fixture(scope="session")
def patientact_run(quickstart_run, tmp_path_factory) -> tuple[Path, dict]:
    """`mindsim run` of the quickstart recipe (test size) with `patient_engine: patientact`: one patient, one arc
    of two sessions (trust carries from one into the next), on the shared run's profiles (the recipe keeps every
    profile setting, so the profile stage resumes them; causal checks off, as they would change the keys)."""
    from quick_recipes import RUNS, quick_recipe, resume_profiles, write_recipe

    from mindcore.errors import EngineError
    from mindsim_app.job import run_job

    base = tmp_path_factory.mktemp("patientact")
    recipe = quick_recipe()
    recipe["name"] = "quickstart-patientact"
    recipe["profiles"]["causal_checks"] = False
    # The MHQR stage is left out: it is engine-agnostic and the quickstart run already pays for it on this engine.
    # Without the psychological formulation: with it the profile has about twice the pieces, and the 135M
    # decomposer must give every piece three distinct tags in one answer, which it did in none of four runs with
    # it here (2026-12-01, three to five tries each); the formulation's own call is pinned by the fake-engine tests.
    recipe["simulation"].update(patient_engine="patientact", max_patients=1,
                                patientact={**recipe["simulation"].get("patientact", {}), "psych_formulation": False})
    del recipe["judge"]
    path = write_recipe(recipe, base / "recipe.yaml")
    out = base / "run"
    resume_profiles(quickstart_run, out)
    kept = {p.name: p.read_bytes() for p in (out / "profiles" / "checkpoints").glob("*.json")}
    summary, errors = None, []
    for _ in range(RUNS):
        try:
            summary = run_job(path, out)
        except EngineError as exc:  # the arc failed before any session finished: exit 1, nothing to check yet
            errors.append(str(exc))
            continue
        assert summary.info["status"] == "finished"
        if json.loads((out / "sessions" / "summary.json").read_text())["sessions_written"] == 2:
            break
    if summary is None:
        pytest.fail(f"the PatientAct arc finished no session in {RUNS} runs: {errors}")
    # The profiles were resumed, not rewritten.
    assert {p.name: p.read_bytes() for p in (out / "profiles" / "checkpoints").glob("*.json") if p.name in kept} == kept
    return out, summary.info


@pytest.fixture(scope="session")
def two_counsellor_run(quickstart_run, tmp_path_factory) -> dict:
    """The shared run given a second counsellor on the same profiles and first scenarios, through the job as a
    user runs it: `mindsim run` SIGKILLed (with its llama.cpp server and distilabel workers) as soon as the new
    counsellor's first session is back, so its second is unfinished, then the same job rerun, which resumes. The
    first counsellor's arc and judgments are the shared run's (copied, resumed), so the new arc is the only
    simulation paid for. Returns what the kill-and-resume test and the ablation smoke test check."""
    from killing import kill_when
    from quick_recipes import TWO_COUNSELLORS as COUNSELLORS
    from quick_recipes import quick_recipe, resume_profiles, stamps, write_recipe

    from mindsim.records import session_id
    from mindsim_app.job import run_job

    base = tmp_path_factory.mktemp("two-counsellors")
    raw = quick_recipe()
    raw["name"] = "quickstart-two-counsellors"
    raw["roles"]["counsellor:b"] = {**raw["roles"]["counsellor"], "temperature": 0.7}
    raw["simulation"]["counsellors"] = COUNSELLORS
    raw["judge"]["prices"] = {"judge": {"input": 1.0, "output": 4.0}}
    recipe = write_recipe(raw, base / "recipe.yaml")
    out = base / "run"
    resume_profiles(quickstart_run, out)
    for part in ("sessions/checkpoints", "judgments/cache"):
        shutil.copytree(quickstart_run / part, out / part)
    # Session checkpoints resume only beside the layout stamp they were written under.
    shutil.copy2(quickstart_run / "sessions" / "layout.json", out / "sessions" / "layout.json")
    ck = out / "sessions" / "checkpoints"
    copied = {p.name: p.read_bytes() for p in ck.glob("*.json")}
    records = [json.loads(b) for b in copied.values()]
    assert max(r["session_index"] for r in records) > 0, "the shared run has no two-session arc"
    new = {f"{session_id(r['patient_id'], COUNSELLORS[1], r['session_index'], r['seed'])}.json": r["session_index"]
           for r in records}
    first = [ck / name for name, index in new.items() if index == 0]
    profile_marks = stamps(out / "profiles" / "checkpoints")

    kill_when([sys.executable, "-m", "mindsim", "run", str(recipe), "--out", str(out)],
              lambda: any(p.exists() for p in first), timeout_s=900)
    kept = {p.name: p.read_bytes() for p in ck.glob("*.json")}
    summary = run_job(recipe, out)
    return {"out": out, "copied": copied, "new": sorted(new), "kept": kept, "profile_marks": profile_marks,
            "summary": summary}
