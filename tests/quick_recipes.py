"""The recipes the embedded tests run: the README's quickstart (recipes/quickstart.yaml) at test size, and the one
study recipe built on it that every embedded test shares (`study_recipe`).

The test size keeps every quickstart setting and changes only how many patients there are: two candidate profiles
for a pool of one. On 2 cores an embedded run's time is its tokens, and the quickstart's three candidates and two
pool patients are half of what the whole embedded suite spends; the tests need one patient with a two-session arc
(memory and trust carry from one session into the next). Every run that resumes the shared run's profiles builds
its recipe from `quick_recipe()`, so their profile settings, and so their checkpoint keys, are the same."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import yaml

from mindsimkit.mindcore.config import EmbeddedEngine

REPO = Path(__file__).resolve().parent.parent
QUICKSTART = REPO / "recipes" / "quickstart.yaml"
TEST_SIZE = {"candidates": 2, "pool_size": 1, "benchmark_size": 1}
# The shared run's counsellor and the one `two_counsellor_run` adds.
TWO_COUNSELLORS = ["counsellor", "counsellor:b"]
# Every patient engine and arm the embedded tests check, in the study run; the first two play two sessions (memory
# and trust carry from one session into the next, and the memory ablation reruns the second), the others one.
STUDY_ENGINES = [
    "mindsim",
    "patientact",
    "patientact:no_tg",
    "patientact:no_dm",
    "patientact:no_pipe",
    "patient_psi",
    "mindeval",
    "annaagent",
    "consistentmi",
]
TWO_SESSION_ENGINES = ["mindsim", "patientact"]
# The preset run (`preset_run`, tests/mindsim_app/conftest.py): each part of the run and the reference preset it runs.
PRESETS = {"mindsim": "mindeval2-reference", "patientact": "patientact-reference", "judge": "mhqr-reference"}


# The embedded server every embedded test uses: the quickstart recipe's (same slots and context, so a job of a
# quickstart-based recipe run in this process shares it; mindcore.embedded keys servers on these).
SUITE_ENGINE = EmbeddedEngine(parallel=4, ctx_per_slot=8192)


def quick_recipe() -> dict[str, Any]:
    """recipes/quickstart.yaml with the test size's profile counts."""
    raw = yaml.safe_load(QUICKSTART.read_text())
    raw["name"] = "quickstart-test"
    raw["profiles"] = {**raw["profiles"], **TEST_SIZE}
    return raw


def study_recipe() -> dict[str, Any]:
    """The one study the embedded suite runs on the real engine: the quickstart at test size (one pool patient, one
    patient turn per session, the MHQR judge) with every patient engine and PatientAct arm on the same profile and
    first scenario, two sessions for MindSim and PatientAct and one for the others (`engine_sessions`), and the
    validation's narrative-arc labels (the realism study's path).

    Without the profile stage's causal checks (PatientAct would switch them on; they are checked on their own by
    tests/profilegen/test_causal_checks.py) and without PatientAct's psychological formulation: with it the
    profile has about twice the pieces and the 135M decomposer must give every piece three distinct tags in one
    answer, which it did in none of four runs (2026-12-01); its own call is pinned by the fake-engine tests."""
    raw = quick_recipe()
    raw["name"] = "study-test"
    raw["description"] = "The embedded test suite's shared study: every patient engine on one quickstart patient."
    raw["profiles"]["causal_checks"] = False
    sim = raw["simulation"]
    sim.update(
        patient_engine=STUDY_ENGINES,
        sessions=2,
        max_patients=1,
        engine_sessions={e: 1 for e in STUDY_ENGINES if e not in TWO_SESSION_ENGINES},
        patientact={**sim.get("patientact", {}), "psych_formulation": False},
    )
    raw["validation"] = {**raw["validation"], "arc": True, "bootstrap_draws": 200, "floor_splits": 20}
    return raw


def write_recipe(recipe: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


# The 135M model sinks an arc now and then (NOTES §6) and batched llama.cpp output is not deterministic, so a
# rerun of the same command (which resumes: finished sessions are kept, a failed arc's unfinished ones are
# retried) usually completes it. Bounded, so a model that never gets there fails the tests instead of hanging.
RUNS = 3


def resume_profiles(source: Path, out: Path, *, scenarios: bool = True, decompositions: bool = False) -> None:
    """Seed a new run folder with a finished run's profile checkpoints (so the profile stage resumes them), its
    first scenarios (one per patient, written before any arc and shared by every engine and counsellor) and,
    with `decompositions`, its PatientAct decompositions (keyed by patient and seed like the scenarios: the same
    inner material for the same profile). Each is made once and not paid for again by every run that plays
    that patient."""
    shutil.copytree(source / "profiles" / "checkpoints", out / "profiles" / "checkpoints")
    if scenarios:
        shutil.copytree(source / "sessions" / "scenarios", out / "sessions" / "scenarios")
    if decompositions:
        shutil.copytree(source / "sessions" / "decompositions", out / "sessions" / "decompositions")


def first_attempt(run: Path) -> Path:
    """Where `study_run` keeps the profile summary and `run.json` of the job's first attempt in `run`: a
    resumed attempt redoes no profile work, so its files count no profile calls."""
    return run.parent / f"{run.name}.first"


def keep_first_attempt(run: Path) -> None:
    keep = first_attempt(run)
    keep.mkdir(exist_ok=True)
    for name, src in (("profiles_summary.json", run / "profiles" / "summary.json"), ("run.json", run / "run.json")):
        if src.is_file():
            shutil.copy2(src, keep / name)


def pool_ids(run: Path) -> list[str]:
    """The run's pool patients, sorted; none when the profile stage wrote no table."""
    import pyarrow.parquet as pq

    table = run / "profiles" / "profiles.parquet"
    if not table.is_file():
        return []
    rows = pq.read_table(table, columns=["profile_id", "in_pool"]).to_pylist()
    return sorted(r["profile_id"] for r in rows if r["in_pool"])


def stamps(folder: Path) -> dict[str, int]:
    """Modification times of a checkpoint folder's files: a resume that rewrote one changes its stamp."""
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*.json")}


def engines_for(recipe: Path, shared: Any) -> Any:
    """The recipe's roles on the suite's running server (`run_job(..., engines=)`): a new ledger per job, the
    same backend."""
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.recipe import load_recipe

    cfg = load_recipe(recipe).engines_config()
    assert set(cfg.engines) == {"local"} and cfg.engines["local"] == SUITE_ENGINE, cfg.engines
    return Engines(cfg, backends={"local": shared.backend("local")}).start()


def attached_env(shared: Any) -> dict[str, str]:
    """The environment for a `mindsim` subprocess that uses the suite's running server (MINDSIM_EMBEDDED_URL)
    instead of starting a second one."""
    from mindsimkit.mindcore.embedded import ATTACH_ENV

    return {**os.environ, ATTACH_ENV: shared.backend("local").base_url}
