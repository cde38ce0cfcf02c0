"""Rerunning one stage on a finished run breaks nothing: `mindsim judge run` served from its
cache changes no byte any reader sees, a second judge adds to the first (and its usage to the first run's), and
what a changed stage makes stale is refused only by the readers of the stale part, naming the one command that
rebuilds it. The run is the fake-engine job of `fakejob.py` with a second judge role bound, its server kept up so
each command's preflight can reach it."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
for extra in (HERE, HERE.parent):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from fakejob import ROLES, _recipe, _responder, fake_judge  # noqa: E402
from openai_stub import OpenAIStub, from_responder  # noqa: E402
from test_exit_codes import error_line, mindsim_here  # noqa: E402

SECOND = "judge:second"


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """(run folder, recipe, stub): the finished job, and the server its recipe names, up for the whole module."""
    from mindsimkit.mindsim_app.job import run_job

    base = tmp_path_factory.mktemp("rerun")
    respond = _responder()
    stub = OpenAIStub(from_responder(lambda req: fake_judge(req) if req.role == SECOND else respond(req)))
    with stub:
        recipe = _recipe(base / "r.yaml", stub)
        stub.serve(SECOND)
        recipe.write_text(
            recipe.read_text().replace("roles:\n", f"roles:\n  '{SECOND}': {{engine: stub, model: '{SECOND}'}}\n")
        )
        run_job(recipe, base / "run")
        yield base / "run", recipe, stub


def _copy(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "run"))


def _digests(run: Path) -> dict[str, str]:
    """What a reader can see: every file but working state (caches, checkpoints, logs) and the manifest itself."""
    skip = {"cache", "checkpoints", "logs"}
    return {
        p.relative_to(run).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run.rglob("*"))
        if p.is_file() and not skip & set(p.relative_to(run).parts) and p.name != "run_manifest.json"
    }


def _judge_calls(run: Path) -> dict[str, int]:
    report = json.loads((run / "judgments" / "report.json").read_text())
    return {role: u["calls"] for role, u in report["usage"].items() if role.startswith("judge")}


def _readers_exit_0(run: Path, tmp_path: Path) -> None:
    for argv in (
        ["export", "sft", run, "--out", tmp_path / "sft.jsonl"],
        ["report", run, "--out", tmp_path / "r.html"],
        ["publish", run, "--repo-id", "someone/x", "--dry-run"],
    ):
        proc = mindsim_here(*argv, cwd=tmp_path)
        assert proc.returncode == 0, (argv, proc.stderr[-2000:])


def test_a_judge_run_served_from_the_cache_changes_nothing_and_keeps_the_usage(job, tmp_path):
    finished, recipe, stub = job
    run = _copy(finished, tmp_path)
    before, calls = _digests(run), _judge_calls(run)
    assert calls["judge"] > 0
    asked = len(stub.requests)
    proc = mindsim_here("judge", "run", run, "--recipe", recipe, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    judged_again = [
        r
        for r in stub.requests[asked:]
        if (r.get("response_format") or {}).get("json_schema", {}).get("name") == "mhqr_judgment"
    ]
    assert not judged_again, "a cached judgment was asked again"
    assert _digests(run) == before  # same bytes: report.json kept, with the first run's usage in it
    assert _judge_calls(run) == calls
    _readers_exit_0(run, tmp_path)
    proc = mindsim_here("publish", run / "dataset", "--repo-id", "someone/x", "--dry-run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr  # the dataset folder is not stale: nothing it was built from changed


def test_a_second_judge_adds_to_the_first_and_only_the_dataset_folder_is_stale(job, tmp_path):
    finished, recipe, _ = job
    run = _copy(finished, tmp_path)
    calls = _judge_calls(run)
    proc = mindsim_here("judge", "run", run, "--recipe", recipe, "--judge", SECOND, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((run / "judgments" / "report.json").read_text())
    assert set(report["judges"]) == {"judge", SECOND}
    assert report["judges"]["judge"]["rows"] == report["judges"][SECOND]["rows"] > 0
    after = _judge_calls(run)
    assert after["judge"] == calls["judge"] and after[SECOND] > 0  # the first run's spend is still counted
    assert {r["role"] for r in report["costs"]["rows"] if r["judge"]} == {"judge", SECOND}
    for argv in (
        ["export", "sft", run, "--out", tmp_path / "sft.jsonl"],
        ["report", run, "--out", tmp_path / "r.html"],
    ):
        assert mindsim_here(*argv, cwd=tmp_path).returncode == 0, argv
    page = (tmp_path / "r.html").read_text()
    assert SECOND in page and "judge" in page
    # The dataset folder copied the first judge's judgments: publishing it as it is would publish stale data, so
    # that (and only that) is refused, naming the one command that rebuilds it.
    dataset = mindsim_here("publish", run / "dataset", "--repo-id", "someone/x", "--dry-run", cwd=tmp_path)
    assert dataset.returncode == 2
    line = error_line(dataset)
    assert "judgments" in line and "rewritten after the dataset stage read it" in line
    assert f"mindsim publish {run} --repo-id OWNER/NAME --dry-run" in line
    assert mindsim_here("publish", run, "--repo-id", "someone/x", "--dry-run", cwd=tmp_path).returncode == 0
    assert mindsim_here("publish", run / "dataset", "--repo-id", "someone/x", "--dry-run", cwd=tmp_path).returncode == 0


def test_validation_rerun_into_the_run_is_recorded_and_readers_go_on(job, tmp_path):
    finished, _, _ = job
    run = _copy(finished, tmp_path)
    proc = mindsim_here(
        "validate",
        "compare",
        "--sim",
        f"x={run / 'transcripts' / 'transcripts.jsonl'}",
        "--out",
        run / "validation",
        "--draws",
        "20",
        "--splits",
        "5",
        "--no-arc",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    _readers_exit_0(run, tmp_path)


def test_a_rerun_of_the_simulation_makes_the_judgments_stale_for_their_readers_only(job, tmp_path):
    """A stage made from files rewritten since is named by the readers of that stage, with its own command."""
    from mindsimkit.mindcore.manifest import record_stage

    finished, _, _ = job
    run = _copy(finished, tmp_path)
    sessions = run / "sessions" / "sessions.parquet"
    sessions.write_bytes(sessions.read_bytes() + b"\n")  # stands in for a rerun that wrote other sessions
    record_stage(
        run,
        "simulation",
        [sessions, run / "transcripts" / "transcripts.jsonl", run / "sessions" / "summary.json"],
        reads=[run / "profiles" / "profiles.parquet"],
    )
    proc = mindsim_here("judge", "sample", run, "--n", "1", "--out", tmp_path / "s.jsonl", cwd=tmp_path)
    assert proc.returncode == 2
    assert f"{sessions}: rewritten after the judge stage read it" in error_line(proc)
    assert f"mindsim judge run {run}" in error_line(proc)
    assert str(ROLES)  # (the fake job's roles are the recipe's)
