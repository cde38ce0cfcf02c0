"""A run folder is the run's own: outputs of other commands never replace its files, its manifest never points
outside it, its dataset holds no link, one job at a time writes it, and Ctrl-C stops a job at a safe point with
exit 130 and one `interrupted` line, after which the same command resumes. Every case goes through the installed
console script, as a user runs it; the jobs run on the fake engine over HTTP (`openai_stub`), slowed down while
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
from fakejob import _recipe, _responder, write_fake_job
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
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    return write_fake_job(tmp_path_factory.mktemp("guard"))


@pytest.fixture
def run(finished, tmp_path) -> Path:
    return Path(shutil.copytree(finished, tmp_path / "run"))


# ---------------------------------------------------------------- outputs never land on the run's own files


@pytest.mark.parametrize("argv, option", [
    (lambda r: ["export", "sft", r, "--out", r / "sessions" / "sessions.parquet"], "--out"),
    (lambda r: ["export", "patient", r, "--out", r / "judgments" / "judgments.parquet"], "--out"),
    (lambda r: ["judge", "sample", r, "--n", "2", "--out", r / "run.json"], "--out"),
    (lambda r: ["judge", "sample", r, "--n", "2", "--out", r.parent / "x.jsonl", "--key", r / "run_manifest.json"],
     "--key"),
    (lambda r: ["validate", "compare", "--sim", f"x={r / 'transcripts' / 'transcripts.jsonl'}", "--out",
                r / "validation"], "--out"),
    (lambda r: ["export", "sft", r, "--out", r / "exports" / ".." / "profiles" / "profiles.parquet"], "--out"),
], ids=["sft-over-sessions", "patient-over-judgments", "sample-over-run-json", "key-over-manifest",
        "validate-over-validation", "dotdot-into-profiles"])
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
@pytest.mark.parametrize("reader", [
    lambda r, t: ["report", r, "--out", t / "r.html"],
    lambda r, t: ["export", "sft", r, "--out", t / "sft.jsonl"],
    lambda r, t: ["publish", r, "--repo-id", "someone/x", "--dry-run"],
], ids=["report", "export", "publish"])
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


class Slow:
    """The fake engine over HTTP, each answer held back while `slow` is set, so a command is mid-work when the
    test signals it. `answered` counts the answers given (the preflight's probe included)."""

    def __init__(self, tmp: Path) -> None:
        self.slow = threading.Event()
        self.slow.set()
        self.answered = 0
        respond = from_responder(_responder())

        def behave(body: dict[str, Any]) -> Reply:
            if self.slow.is_set():
                time.sleep(0.5)
            self.answered += 1
            return respond(body)

        self.stub = OpenAIStub(behave).__enter__()
        self.recipe = _recipe(tmp / "r.yaml", self.stub)

    def close(self) -> None:
        self.stub.__exit__(None, None, None)


@pytest.fixture
def slow(tmp_path):
    s = Slow(tmp_path)
    yield s
    s.close()


def start(*args: object, cwd: Path) -> subprocess.Popen:
    """The command in its own process group, as a terminal starts a foreground job; SIGINT is ignored on the way
    in (as in a pytest-xdist worker, or a background job of a script), which mindsim must not inherit."""
    assert MINDSIM
    return subprocess.Popen([MINDSIM, *map(str, args)], cwd=cwd, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))


def wait_mid_work(proc: subprocess.Popen, slow: Slow, answers: int) -> None:
    deadline = time.monotonic() + 120
    while slow.answered < answers and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1]
    assert slow.answered >= answers, "the command never reached its engine calls"


def ctrl_c(proc: subprocess.Popen, signum: int = signal.SIGINT) -> str:
    try:
        os.killpg(proc.pid, signum)
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


def test_a_second_job_on_a_locked_run_is_refused_and_ctrl_c_then_resume_finishes_the_run(slow, tmp_path):
    out = tmp_path / "o"
    first = start("run", slow.recipe, "--out", out, cwd=tmp_path)
    wait_mid_work(first, slow, answers=6)
    second = mindsim("run", slow.recipe, "--out", out, cwd=tmp_path)
    assert second.returncode == 2, second.stderr
    line = one_error(second)
    assert f"pid {first.pid}" in line and "mindsim run" in line and str(out) in line, line
    # Every other writer of the folder waits its turn too.
    judge = mindsim("judge", "run", out, "--recipe", slow.recipe, cwd=tmp_path)
    assert judge.returncode == 2 and f"pid {first.pid}" in one_error(judge)
    ctrl_c(first)
    slow.slow.clear()
    again = mindsim("run", slow.recipe, "--out", out, cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "run.json").read_text())["status"] == "finished"
    assert not (out / ".mindsim.lock").exists()


def test_sigterm_stops_the_simulator_like_ctrl_c(slow, tmp_path, finished):
    prof = Path(shutil.copytree(finished / "profiles", tmp_path / "p" / "profiles"))
    proc = start("simulate", "--profiles", prof, "--recipe", slow.recipe, "--out", tmp_path / "s", cwd=tmp_path)
    wait_mid_work(proc, slow, answers=4)
    ctrl_c(proc, signal.SIGTERM)


@pytest.mark.parametrize("command", [
    lambda r, t, recipe: ["judge", "run", r, "--recipe", recipe],
    lambda r, t, recipe: ["export", "dpo", r, "--recipe", recipe, "--out", t / "dpo.jsonl", "--k", "2", "--turns", "1",
                          "--min-gap", "0"],
], ids=["judge-run", "export-dpo"])
def test_ctrl_c_stops_a_long_command_with_exit_130_and_a_rerun_finishes(command, slow, run, tmp_path):
    shutil.rmtree(run / "judgments" / "cache")  # so the judge calls its engine again
    argv = command(run, tmp_path, slow.recipe)
    proc = start(*argv, cwd=tmp_path)
    wait_mid_work(proc, slow, answers=4)
    ctrl_c(proc)
    slow.slow.clear()
    again = mindsim(*argv, cwd=tmp_path)
    assert again.returncode in (0, 2), again.stderr  # export dpo: 2 when no pair passes the gap, said in one line
    if again.returncode == 2:
        assert "no" in one_error(again)
