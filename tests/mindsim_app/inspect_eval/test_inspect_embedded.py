"""The real model: `inspect eval mindsimkit/mindeval2` with inspect's own `openai-api` provider pointed at the
suite's embedded server as the counsellor under test, the quickstart recipe (at test size) on the same server for
the patient, the scenario writer, the memory compactor and the judge. One patient, one session, two counsellor
replies, judged; `inspect log dump` shows the session and the MHQR score, and the log becomes a run folder whose
report `mindsim report` writes. Everything runs through the installed `inspect` and `mindsim` scripts."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from inspectfakes import write_patients
from quick_recipes import attached_env, quick_recipe, write_recipe

pytestmark = [pytest.mark.embedded, pytest.mark.slow]


def _script(name: str) -> str:
    return shutil.which(name, path=str(Path(sys.executable).parent)) or name


def test_inspect_eval_with_the_embedded_server_as_counsellor(embedded_engines, tmp_path):
    backend = embedded_engines.backend("local")
    recipe = write_recipe(quick_recipe(), tmp_path / "recipe.yaml")
    profiles = write_patients(tmp_path / "profiles")
    # The counsellor is inspect's provider talking to the running server; the recipe's roles attach to it too.
    env = {
        **attached_env(embedded_engines),
        "LOCAL_BASE_URL": backend.base_url,
        "LOCAL_API_KEY": "none",
        "NO_COLOR": "1",
    }
    done = subprocess.run(
        [
            _script("inspect"),
            "eval",
            "mindsimkit/mindeval2",
            "--model",
            f"openai-api/local/{backend.default_model}",
            "-T",
            f"profiles={profiles}",
            "-T",
            f"recipe={recipe}",
            "-T",
            "sessions=1",
            "-T",
            "replies=2",
            "-T",
            "max_patients=1",
            "--temperature",
            "0.3",
            "--max-tokens",
            "96",
            "--seed",
            "0",
            "--retry-on-error",
            "2",
            "--log-dir",
            str(tmp_path / "logs"),
            "--display",
            "plain",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    (log,) = (tmp_path / "logs").glob("*.eval")

    dump = subprocess.run(
        [_script("inspect"), "log", "dump", str(log)], capture_output=True, text=True, env=env, timeout=300
    )
    assert dump.returncode == 0, dump.stderr[-2000:]
    data = json.loads(dump.stdout)
    assert data["status"] == "success" and data["eval"]["task"] == "mindsimkit/mindeval2"
    (sample,) = data["samples"]
    (session,) = sample["store"]["mindsim/sessions"]
    replies = [m["content"] for m in session["counsellor_messages"] if m["role"] == "assistant"]
    assert 1 <= len(replies) <= 2 and all(r.strip() for r in replies)
    assert session["engines"]["counsellor"]["model"] == f"openai-api/local/{backend.default_model}"
    # inspect view's messages: the session's system prompt, then the exchange as it was.
    assert [m["role"] for m in sample["messages"]][:2] == ["system", "user"]
    assert [m["content"] for m in sample["messages"] if m["role"] == "assistant"] == replies
    score = sample["scores"]["mhqr"]
    rows = score["metadata"]["judgments"]
    assert len(rows) == len(replies) and all(r["judge_engine"] == "local" for r in rows)
    ok = [r for r in rows if r["status"] == "ok"]
    assert ok, [r["error"] for r in rows]  # the 135M judge answered at least once in its re-asks
    metrics = {k: m["value"] for s in data["results"]["scores"] for k, m in s["metrics"].items()}
    assert metrics["mhqr"] == pytest.approx(score["value"]) and 0 <= metrics["mhqr"] <= 10
    assert metrics["ci95_low"] <= metrics["mhqr"] <= metrics["ci95_high"]

    run = tmp_path / "run"
    for args in (["inspect", "to-run", str(log), "--out", str(run)], ["report", str(run)]):
        step = subprocess.run([_script("mindsim"), *args], capture_output=True, text=True, env=env, timeout=300)
        assert step.returncode == 0, step.stdout[-2000:] + step.stderr[-2000:]
    assert (run / "report.html").stat().st_size > 10_000
    assert json.loads((run / "judgments" / "report.json").read_text())["sessions"] == 1
