"""A run folder is the run's own: outputs of other commands never replace its files, its manifest never points
outside it, its dataset holds no link, one job at a time writes it, and Ctrl-C stops a job at a safe point with
exit 130 and one `interrupted` line, after which the same command resumes. Every case goes through the installed
console script, as a user runs it; the jobs run on the fake engine over HTTP (`openai_stub`), held back while
the test needs them mid-work."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cli_streams import mindsim_script, without_progress
from fakejob import ROLES, _responder, write_fake_job
from openai_stub import OpenAIStub, Reply, from_responder

MINDSIM = mindsim_script()
ENV = {**os.environ, "COLUMNS": "200"}
ENV.pop("FORCE_COLOR", None)


def mindsim(*args: object, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    assert MINDSIM, "the `mindsim` console script is not on PATH; install the package (make install)"
    return subprocess.run([MINDSIM, *map(str, args)], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)


def one_error(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in without_progress(proc.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def digests(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    return write_fake_job(tmp_path_factory.mktemp("guard"))


@pytest.fixture
def run(finished, tmp_path) -> Path:
    return Path(shutil.copytree(finished, tmp_path / "run"))


# ---------------------------------------------------------------- outputs never land on the run's own files


@pytest.mark.parametrize(
    "argv, option",
    [
        (lambda r: ["export", "sft", r, "--out", r / "sessions" / "sessions.parquet"], "--out"),
        (lambda r: ["export", "patient", r, "--out", r / "judgments" / "judgments.parquet"], "--out"),
        (lambda r: ["judge", "sample", r, "--n", "2", "--out", r / "run.json"], "--out"),
        (
            lambda r: [
                "judge",
                "sample",
                r,
                "--n",
                "2",
                "--out",
                r.parent / "x.jsonl",
                "--key",
                r / "run_manifest.json",
            ],
            "--key",
        ),
        # Into the run's own validation folder is that stage's rerun (test_stage_rerun.py); into another stage's is not.
        (
            lambda r: [
                "validate",
                "compare",
                "--sim",
                f"x={r / 'transcripts' / 'transcripts.jsonl'}",
                "--out",
                r / "judgments",
            ],
            "--out",
        ),
        (lambda r: ["export", "sft", r, "--out", r / "exports" / ".." / "profiles" / "profiles.parquet"], "--out"),
    ],
    ids=[
        "sft-over-sessions",
        "patient-over-judgments",
        "sample-over-run-json",
        "key-over-manifest",
        "validate-over-judgments",
        "dotdot-into-profiles",
    ],
)
def test_an_output_over_a_file_the_run_owns_is_refused_and_the_run_is_unchanged(argv, option, run, tmp_path):
    before = digests(run)
    proc = mindsim(*argv(run), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    line = one_error(proc)
    assert option in line and "which the run" in line and str(run) in line, line
    assert digests(run) == before
    assert not (tmp_path / "x.jsonl").exists()


def test_an_output_beside_the_run_files_is_written(run, tmp_path):
    proc = mindsim("export", "sft", run, "--out", run / "exports" / "sft.jsonl", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (run / "exports" / "sft.jsonl").is_file()
    # The run's own page stays the report command's to write.
    assert mindsim("report", run, "--out", run / "report.html", cwd=tmp_path).returncode == 0


# ---------------------------------------------------------------- the manifest names files of its own run only


@pytest.mark.parametrize("entry", ["../outside.txt", "/etc/passwd", "sessions/../../outside.txt"])
@pytest.mark.parametrize(
    "reader",
    [
        lambda r, t: ["report", r, "--out", t / "r.html"],
        lambda r, t: ["export", "sft", r, "--out", t / "sft.jsonl"],
        lambda r, t: ["publish", r, "--repo-id", "someone/x", "--dry-run"],
    ],
    ids=["report", "export", "publish"],
)
def test_a_manifest_entry_outside_the_run_is_refused_by_its_readers(entry, reader, run, tmp_path):
    (tmp_path / "outside.txt").write_text("not the run's\n")
    manifest = json.loads((run / "run_manifest.json").read_text())
    manifest["stages"]["simulation"]["files"].append({"path": entry, "bytes": 14, "sha256": "0" * 64})
    (run / "run_manifest.json").write_text(json.dumps(manifest))
    proc = mindsim(*reader(run, tmp_path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    line = one_error(proc)
    assert "run_manifest.json" in line and repr(entry) in line and "outside the run folder" in line, line
    assert not (tmp_path / "r.html").exists() and not (tmp_path / "sft.jsonl").exists()


def test_a_stage_file_linked_out_of_the_run_is_refused(run, tmp_path):
    outside = tmp_path / "elsewhere.jsonl"
    shutil.copy(run / "transcripts" / "transcripts.jsonl", outside)
    (run / "transcripts" / "transcripts.jsonl").unlink()
    (run / "transcripts" / "transcripts.jsonl").symlink_to(outside)
    proc = mindsim("report", run, "--out", tmp_path / "r.html", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "outside the run folder" in one_error(proc)


# ---------------------------------------------------------------- no link inside a dataset folder


@pytest.mark.parametrize("what", ["folder", "file"])
def test_a_symlink_inside_the_dataset_folder_is_refused(what, run, tmp_path):
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "notes.txt").write_text("private\n")
    link = run / "dataset" / "data" / "extra"
    link.symlink_to(secret if what == "folder" else secret / "notes.txt")
    for folder in (run / "dataset", run):
        proc = mindsim("publish", folder, "--repo-id", "someone/x", "--dry-run", cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        line = one_error(proc)
        assert str(link) in line and "symbolic link" in line, line
    assert (secret / "notes.txt").read_text() == "private\n"


# ---------------------------------------------------------------- one job at a time, and Ctrl-C


class Held:
    """The fake engine over HTTP answering its first `free` requests (the preflight's probe included), then holding
    every request until `release` is set: a command is certainly mid-work when the test signals it. Every other
    plain counsellor reply carries the fake judge's MAJOR marker, so counterfactual replies differ in severity."""

    def __init__(self, tmp: Path) -> None:
        self.free = 10**6
        self.release = threading.Event()
        self.received = 0
        lock = threading.Lock()
        respond = from_responder(_responder())

        def behave(body: dict[str, Any]) -> Reply:
            with lock:
                self.received += 1
                n = self.received
            if n > self.free:
                self.release.wait(120)
            if body.get("model") == "counsellor" and not body.get("response_format") and not body.get("tools"):
                return Reply(content="MAJOR tell me more about that." if n % 2 else "That sounds hard.")
            return respond(body)

        self.stub = OpenAIStub(behave).__enter__().serve(*ROLES)
        # A small job (one patient, one session): the test runs it twice.
        self.recipe = tmp / "r.yaml"
        self.recipe.write_text(
            f"name: guard\nseed: 3\nengines:\n  stub: {{kind: openai, base_url: '{self.stub.base_url}', model: m, "
            "native_tools: false, max_concurrency: 4}\nroles:\n  default: {engine: stub}\n"
            + "".join(f"  {r!r}: {{engine: stub, model: {r!r}}}\n" for r in ROLES)
            + "profiles: {personas: synthetic, candidates: 2, pool_size: 1, benchmark_size: 1, "
            "pool_verdicts: [clean, minor], causal_checks: false}\n"
            "simulation: {sessions: 1, turn_cap: 2, counsellors: [counsellor], patient_engine: [mindsim]}\n"
            "validation: {bootstrap_draws: 20, floor_splits: 5}\njudge: {bootstrap_draws: 100}\n"
        )

    def close(self) -> None:
        self.stub.__exit__(None, None, None)


@pytest.fixture
def held(tmp_path):
    h = Held(tmp_path)
    yield h
    h.release.set()
    h.close()


def start(*args: object, cwd: Path) -> subprocess.Popen:
    """The command in its own process group, as a terminal starts a foreground job; SIGINT is ignored on the way
    in (as in a pytest-xdist worker, or a background job of a script), which mindsim must not inherit."""
    assert MINDSIM
    return subprocess.Popen(
        [MINDSIM, *map(str, args)],
        cwd=cwd,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )


def wait_mid_work(proc: subprocess.Popen, held: Held, free: int) -> None:
    """Until the command waits on a held request (its first `free` ones answered)."""
    held.free = free
    deadline = time.monotonic() + 120
    while held.received <= free and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1]
    assert held.received > free, "the command never reached its engine calls"


def ctrl_c(proc: subprocess.Popen, held: Held, signum: int = signal.SIGINT) -> str:
    """Signal the process group as a terminal does; the engine answers again from then on (a step that finishes
    its batch before stopping gets its replies)."""
    try:
        os.killpg(proc.pid, signum)
        held.release.set()
        _, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    lines = [ln for ln in without_progress(stderr).splitlines() if "interrupted" in ln]
    assert len(lines) == 1 and lines[0].startswith("interrupted"), stderr
    return stderr


def test_a_second_job_on_a_locked_run_is_refused_and_ctrl_c_then_resume_finishes_the_run(held, tmp_path):
    out = tmp_path / "o"
    first = start("run", held.recipe, "--out", out, cwd=tmp_path)
    wait_mid_work(first, held, free=6)
    second = mindsim("run", held.recipe, "--out", out, cwd=tmp_path)
    assert second.returncode == 2, second.stderr
    line = one_error(second)
    assert f"pid {first.pid}" in line and "mindsim run" in line and str(out) in line, line
    # Every other writer of the folder waits its turn too.
    profiles = mindsim("profiles", held.recipe, "--out", out, cwd=tmp_path)
    assert profiles.returncode == 2 and f"pid {first.pid}" in one_error(profiles)
    ctrl_c(first, held)
    again = mindsim("run", held.recipe, "--out", out, cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "run.json").read_text())["status"] == "finished"
    assert not (out / ".mindsim.lock").exists()


def test_sigterm_stops_the_simulator_like_ctrl_c(held, tmp_path, finished):
    prof = Path(shutil.copytree(finished / "profiles", tmp_path / "p" / "profiles"))
    proc = start("simulate", "--profiles", prof, "--recipe", held.recipe, "--out", tmp_path / "s", cwd=tmp_path)
    wait_mid_work(proc, held, free=4)
    ctrl_c(proc, held, signal.SIGTERM)


@pytest.mark.parametrize(
    "command",
    [
        lambda r, t, recipe: ["judge", "run", r, "--recipe", recipe],
        lambda r, t, recipe: [
            "export",
            "dpo",
            r,
            "--recipe",
            recipe,
            "--out",
            t / "dpo.jsonl",
            "--k",
            "2",
            "--turns",
            "1",
            "--min-gap",
            "0",
        ],
    ],
    ids=["judge-run", "export-dpo"],
)
def test_ctrl_c_stops_a_long_command_with_exit_130_and_a_rerun_finishes(command, held, run, tmp_path):
    cache = run / "judgments" / "cache"
    shutil.rmtree(cache)  # so the judge calls its engine again
    argv = command(run, tmp_path, held.recipe)
    proc = start(*argv, cwd=tmp_path)
    wait_mid_work(proc, held, free=8)
    ctrl_c(proc, held)
    if argv[0] == "judge":
        assert list(cache.rglob("*.json")), "nothing finished before Ctrl-C was checkpointed"
    again = mindsim(*argv, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "wrote 0 " not in again.stdout
