"""Same seeds, same numbers: `inspect eval mindsimkit/mindeval2` with the recipe's counsellor role as the model
(`--model mindsim/counsellor`) plays the sessions `mindsim simulate` plays and scores them as `mindsim judge run`
does, on the fake engine (`inspectfakes`); its log becomes a run folder whose sessions and judgments are the
commands', whose exports equal theirs and whose `mindsim report` page opens. Every command runs as a user runs it: the
installed scripts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from browser import browser, requests_made  # noqa: F401 - the fixture
from inspectfakes import serve, write_patients, write_recipe

SIMULATION = "{sessions: 2, turn_cap: 3, counsellors: [counsellor]}"


def _script(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert found, f"the `{name}` script is not installed beside {sys.executable}"
    return found


def _run(*args: str, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [_script(args[0]), *args[1:]],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert done.returncode == 0, (
        f"{' '.join(args)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """`mindsim simulate` + `mindsim judge run` (folder `cli`), and `inspect eval` (its log) on the same recipe."""
    tmp = tmp_path_factory.mktemp("parity")
    profiles = write_patients(tmp / "profiles")
    with serve() as stub:
        recipe = write_recipe(tmp / "recipe.yaml", stub, SIMULATION)
        _run(
            "mindsim",
            "simulate",
            "--profiles",
            str(profiles),
            "--recipe",
            str(recipe),
            "--out",
            str(tmp / "cli"),
            cwd=tmp,
        )
        _run("mindsim", "judge", "run", str(tmp / "cli"), "--recipe", str(recipe), cwd=tmp)
        _run(
            "inspect",
            "eval",
            "mindsimkit/mindeval2",
            "--model",
            "mindsim/counsellor",
            "-M",
            f"recipe={recipe}",
            "-T",
            f"profiles={profiles}",
            "-T",
            f"recipe={recipe}",
            "--log-dir",
            str(tmp / "logs"),
            "--display",
            "plain",
            cwd=tmp,
        )
    (log,) = (tmp / "logs").glob("*.eval")
    return tmp, tmp / "cli", log


def _log(path: Path):
    from inspect_ai.log import read_eval_log

    return read_eval_log(str(path))


def _plain(x):
    """A value as both stores give it back: unset fields (None, empty) left out, JSON-text columns decoded."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items() if v is not None and v != [] and v != {}}
    if isinstance(x, list):
        return [_plain(v) for v in x]
    return x


def _session_row(row: dict) -> dict:
    """A session as both paths must write it: all but who served the counsellor (the recipe's role directly, or
    the same role behind inspect), whose `engines` entry names the path."""
    row = {k: json.loads(v) if isinstance(v, str) and v[:1] in "{[" else v for k, v in row.items()}
    return _plain({**row, "engines": {k: v for k, v in row["engines"].items() if k != "counsellor"}})


def _sessions(run: Path) -> dict[str, dict]:
    rows = pq.read_table(run / "sessions" / "sessions.parquet").to_pylist()
    return {r["session_id"]: _session_row(r) for r in rows}


JUDGMENT_FIELDS = (
    "session_id",
    "reply_index",
    "reply",
    "severity",
    "weight",
    "issues",
    "dropped_quotes",
    "status",
    "judge",
    "judge_model",
    "cache_key",
)


def _judgments(rows) -> list[tuple]:
    return sorted(tuple(json.dumps(r[k], sort_keys=True) for k in JUDGMENT_FIELDS) for r in rows)


def test_the_task_plays_the_sessions_mindsim_simulate_plays(runs):
    from mindsimkit.mindsim.records import SessionRecord

    _, cli, log_path = runs
    log = _log(log_path)
    assert log.status == "success" and len(log.samples) == 2
    ours = _sessions(cli)
    stored = [d for s in log.samples for d in s.store["mindsim/sessions"]]
    theirs = {d["session_id"]: SessionRecord.model_validate(d) for d in stored}
    assert set(theirs) == set(ours) and len(ours) == 4  # 2 patients x 2 sessions, same ids
    for d in stored:
        assert _session_row(d) == ours[d["session_id"]]  # transcripts, moves, memory, prompts, tokens, scenario
        counsellor = d["engines"]["counsellor"]
        assert counsellor["engine"] == "inspect" and counsellor["model"] == "mindsim/counsellor"
    # The sessions differ among themselves, so equal transcripts are not equal by construction.
    assert len({json.dumps(r.counsellor_messages[1:]) for r in theirs.values()}) == 4
    assert len({json.dumps(r.memory_after) for r in theirs.values()}) > 1
    # inspect view shows each session's counsellor side, opened by the system prompt that carries the memory.
    sample = log.samples[0]
    assert [m.role for m in sample.messages].count("system") == 2
    assert sample.metadata["sessions"][1]["memory_before"] == sample.metadata["sessions"][0]["memory_after"] != []


def test_the_scorer_gives_the_judgments_and_mhqr_mindsim_judge_run_gives(runs):
    _, cli, log_path = runs
    log = _log(log_path)
    rows = [r for s in log.samples for r in s.scores["mhqr"].metadata["judgments"]]
    mine = pq.read_table(cli / "judgments" / "judgments.parquet").to_pylist()
    assert len(rows) == len(mine) == 8
    assert _judgments(rows) == _judgments(mine)
    assert {r["severity"] for r in rows} >= {"no_concern", "major"}  # scores that can differ, not all zero
    report = json.loads((cli / "judgments" / "report.json").read_text())
    expected = report["judges"]["judge"]["scores"]["counsellors"]["counsellor"]
    metrics = {k: m.value for score in log.results.scores for k, m in score.metrics.items()}
    assert metrics["mhqr"] == pytest.approx(expected["mhqr"])
    assert [metrics["ci95_low"], metrics["ci95_high"]] == pytest.approx(expected["ci95"])
    assert [metrics["p5"], metrics["p95"]] == pytest.approx([expected["p5"], expected["p95"]])
    shares = report["judges"]["judge"]["scores"]["shares"]["counsellor"]["severity_share"]
    assert {k: metrics[k] for k in shares} == pytest.approx(shares)
    assert sum(v for k, v in metrics.items() if k.startswith("category_")) == pytest.approx(expected["mhqr"])


def test_the_log_becomes_a_run_folder_the_report_compare_and_exports_read(runs, browser):  # noqa: F811
    tmp, cli, log_path = runs
    out = tmp / "from-log"
    _run("mindsim", "inspect", "to-run", str(log_path), "--out", str(out), cwd=tmp)
    assert _sessions(out) == _sessions(cli)
    mine = pq.read_table(cli / "judgments" / "judgments.parquet").to_pylist()
    assert _judgments(pq.read_table(out / "judgments" / "judgments.parquet").to_pylist()) == _judgments(mine)
    info = json.loads((out / "run.json").read_text())
    assert info["status"] == "finished" and info["provenance"]["inspect"]["task"] == "mindsimkit/mindeval2"
    report = json.loads((out / "judgments" / "report.json").read_text())
    theirs = json.loads((cli / "judgments" / "report.json").read_text())
    assert report["judges"]["judge"]["scores"]["counsellors"] == theirs["judges"]["judge"]["scores"]["counsellors"]
    _run(
        "mindsim",
        "validate",
        "compare",
        "--sim",
        f"inspect={out / 'transcripts' / 'transcripts.jsonl'}",
        "--sim",
        f"cli={cli / 'transcripts' / 'transcripts.jsonl'}",
        "--out",
        str(tmp / "compare"),
        "--draws",
        "100",
        "--splits",
        "5",
        "--no-plots",
        cwd=tmp,
    )
    exported = {}
    for name, run in (("inspect", out), ("cli", cli)):
        _run(
            "mindsim",
            "export",
            "sft",
            str(run),
            "--out",
            str(tmp / f"sft-{name}.jsonl"),
            "--max-severity",
            "major",
            cwd=tmp,
        )
        exported[name] = [json.loads(line)["messages"] for line in (tmp / f"sft-{name}.jsonl").read_text().splitlines()]
    assert exported["inspect"] == exported["cli"] and exported["cli"]
    _run("mindsim", "report", str(out), cwd=tmp)
    page = out / "report.html"
    from selenium.webdriver.common.by import By

    browser.get(page.as_uri())
    rows = browser.find_elements(By.CSS_SELECTOR, "#session-list tbody tr")
    assert len(rows) == 4
    assert all(u.startswith(("file://", "data:")) for u in requests_made(browser, page.as_uri()))
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []
