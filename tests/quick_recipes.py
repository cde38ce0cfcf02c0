"""The recipes the embedded tests run: the README's quickstart (recipes/quickstart.yaml) at test size, and the
study recipes cut down to it.

The test size keeps every quickstart setting and changes only how many patients there are: two candidate profiles
for a pool of one. On 2 cores an embedded run's time is its tokens, and the quickstart's four candidates and two
pool patients are half of what the whole embedded suite spends; the tests need one patient with a two-session arc
(memory and trust carry from one session into the next). Every run that resumes the shared run's profiles builds
its recipe from `quick_recipe()`, so their profile settings, and so their checkpoint keys, are the same."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
QUICKSTART = REPO / "recipes" / "quickstart.yaml"
TEST_SIZE = {"candidates": 2, "pool_size": 1, "benchmark_size": 1}
# The shared run's counsellor and the one `two_counsellor_run` adds.
TWO_COUNSELLORS = ["counsellor", "counsellor:b"]


def quick_recipe() -> dict[str, Any]:
    """recipes/quickstart.yaml with the test size's profile counts."""
    raw = yaml.safe_load(QUICKSTART.read_text())
    raw["name"] = "quickstart-test"
    raw["profiles"] = {**raw["profiles"], **TEST_SIZE}
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
    """Where `quickstart_run` keeps the profile summary and `run.json` of the job's first attempt in `run`: a
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
