"""`run_judging` and `mindsim judge run` end to end on a small run folder: rows and the rubric rule on
every stored row, reports and plots, resume with zero requests, several judges, failures counted,
other simulators' JSONL, and the console script's exit codes (0 done, 2 bad input, 1 engine down)."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest
from cli_streams import mindsim_script
from judgefakes import SESSIONS, fake_judge, judge_stub, judged, recipe_for, verdict_for, write_run

from mindsimkit.judge.config import JudgeConfig
from mindsimkit.judge.run import run_judging
from mindsimkit.judge.schemas import read_judgments
from mindsimkit.mindcore.config import RoleSpec
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import EngineError, InputError, TransportError
from mindsimkit.mindcore.fake import FakeBackend

CFG = JudgeConfig(bootstrap_draws=200, plots=False)
N_REPLIES = sum(len([m for m in s["counsellor_messages"] if m["role"] == "assistant"]) for s in SESSIONS)


def _engines(responder, roles=None):
    backend = FakeBackend(responder)
    return Engines.with_backend(backend, roles), backend


def _run(run_dir, responder, config=CFG, roles=None, **kw):
    engines, backend = _engines(responder, roles)
    with engines:
        summary = run_judging(run_dir, engines, config, **kw)
    return summary, backend


def test_rows_follow_the_rubric_rule_and_outputs_exist(run_dir):
    summary, backend = _run(run_dir, fake_judge, JudgeConfig(bootstrap_draws=200))
    out = run_dir / "judgments"
    rows = read_judgments(out / "judgments.parquet")
    assert len(rows) == N_REPLIES == len(backend.requests) == summary.ok
    for r in rows:
        assert (r.severity == "no_concern") == (not r.issues)
        assert r.weight == {"no_concern": 0, "minor": 1, "major": 5, "critical": 10}[r.severity]
        assert r.rubric_version == "mhqr-1.1" and set(r.prompt_hashes) == {"judge/system.jinja2", "judge/user.jinja2"}
        assert r.severity == verdict_for(r.reply)["severity"]
    assert {p.name for p in out.iterdir()} >= {
        "judgments.parquet",
        "report.json",
        "report.md",
        "mhqr_by_counsellor.png",
        "severity_by_turn.png",
        "cache",
    }
    report = json.loads((out / "report.json").read_text())
    alpha = report["judges"]["judge"]["scores"]["counsellors"]["alpha"]
    assert alpha["mhqr"] == pytest.approx((2.5 + 1 / 3 + 10) / 3)
    assert [c["session_id"] for c in report["critical_replies"]] == ["s3"]
    assert "Critical replies for human review (1)" in (out / "report.md").read_text()


def test_rerun_sends_zero_requests_and_resumes(run_dir):
    _, first = _run(run_dir, fake_judge, JudgeConfig(bootstrap_draws=200, plots=False, max_replies=1))
    assert len(first.requests) == len(SESSIONS)
    _, second = _run(run_dir, fake_judge)  # picks up where the partial run stopped
    assert len(second.requests) == N_REPLIES - len(SESSIONS)
    before = (run_dir / "judgments" / "judgments.parquet").read_bytes()
    _, third = _run(run_dir, fake_judge)
    assert third.requests == []
    assert read_judgments(run_dir / "judgments" / "judgments.parquet") == read_judgments_bytes(before, run_dir)


def read_judgments_bytes(data: bytes, tmp: Path):
    p = tmp / "before.parquet"
    p.write_bytes(data)
    return read_judgments(p)


def test_failures_are_rows_counted_and_excluded(run_dir):
    def flaky(req):
        return (
            "not json at all"
            if "MINOR" in req.messages[1]["content"].rsplit("[Counsellor]", 1)[-1]
            else fake_judge(req)
        )

    summary, _ = _run(run_dir, flaky)
    rows = read_judgments(run_dir / "judgments" / "judgments.parquet")
    failed = [r for r in rows if r.status == "failed"]
    assert len(rows) == N_REPLIES and len(failed) == 2 == summary.failed
    assert all(r.error and r.error_kind == "invalid_output" and r.severity is None for r in failed)
    report = json.loads((run_dir / "judgments" / "report.json").read_text())
    j = report["judges"]["judge"]
    assert j["failed"] == 2 and j["failed_by_kind"] == {"invalid_output": 2} and len(report["failures"]) == 2
    assert j["scores"]["counsellors"]["beta"]["replies"] == 5
    assert "Failed judgments (2)" in (run_dir / "judgments" / "report.md").read_text()


def test_all_failed_raises_engine_error_after_writing(run_dir):
    def down(req):
        raise TransportError("engine 'fake': could not connect")

    with pytest.raises(EngineError, match="every judgment failed"):
        _run(run_dir, down)
    rows = read_judgments(run_dir / "judgments" / "judgments.parquet")
    assert len(rows) == N_REPLIES and {r.error_kind for r in rows} == {"engine"}


def test_two_judges_each_write_rows_and_are_compared(run_dir):
    def responder(req):
        if req.role == "judge:strict":  # calls every reply a major concern except the critical one
            text = req.messages[1]["content"].rsplit("[Counsellor]\n", 1)[-1]
            return (
                fake_judge(req)
                if "CRIT" in text
                else {
                    "issues": [{"issue": "under_guiding", "reason": "no next step", "quote": None}],
                    "severity": "major",
                }
            )
        return fake_judge(req)

    roles = {
        "default": RoleSpec(engine="fake"),
        "judge": RoleSpec(engine="fake", model="gpt-5"),
        "judge:strict": RoleSpec(engine="fake", model="deepseek-v4"),
    }
    cfg = JudgeConfig(judges=["judge", "judge:strict"], bootstrap_draws=200, plots=False)
    summary, backend = _run(run_dir, responder, cfg, roles)
    assert len(backend.requests) == 2 * N_REPLIES
    rows = read_judgments(run_dir / "judgments" / "judgments.parquet")
    assert {r.judge: r.judge_model for r in rows} == {"judge": "gpt-5", "judge:strict": "deepseek-v4"}
    report = json.loads((run_dir / "judgments" / "report.json").read_text())
    (agree,) = report["judge_agreement"]
    assert agree["counsellors"] == 2 and agree["tau_b"] == pytest.approx(1.0)
    assert [(f["judge"], f["counsellor"]) for f in report["family_flags"]] == [("judge", "alpha")]
    assert "alpha †" in (run_dir / "judgments" / "report.md").read_text()


def test_jsonl_sessions_from_another_simulator(tmp_path):
    path = tmp_path / "other.jsonl"
    lines = [
        {k: v for k, v in s.items() if k not in ("engines", "seed", "counsellor_messages")}
        | {"messages": s["counsellor_messages"], "counsellor_model": "x-1"}
        for s in SESSIONS[:2]
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    summary, _ = _run(tmp_path / "out", fake_judge, sessions=path)
    assert summary.sessions == 2 and summary.judgments == 5
    path.write_text(json.dumps(lines[0]) + "\n" + json.dumps({"session_id": "z"}) + "\n")
    with pytest.raises(InputError, match=r"other.jsonl:2: patient_id"):
        _run(tmp_path / "out", fake_judge, sessions=path)


def test_missing_sessions_is_a_user_error(tmp_path):
    with pytest.raises(InputError, match="sessions.parquet: missing; rerun the simulation"):
        _run(tmp_path, fake_judge)
    write_run(tmp_path / "dup", [SESSIONS[0], SESSIONS[0]])
    with pytest.raises(InputError, match="appears twice"):
        _run(tmp_path / "dup", fake_judge)


def _mindsim(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [mindsim_script() or "mindsim", "judge", "run", *args], capture_output=True, text=True, timeout=120
    )


def test_console_script_runs_and_exit_codes(run_dir, tmp_path):
    with judge_stub() as stub:
        recipe = recipe_for(tmp_path / "recipe.yaml", int(stub.base_url.rsplit(":", 1)[1].split("/")[0]))
        done = _mindsim(str(run_dir), "--recipe", str(recipe), "--draws", "200", "--no-plots")
        assert done.returncode == 0, done.stderr
        assert f"judged {N_REPLIES} replies of {len(SESSIONS)} sessions" in done.stdout
        assert judged(stub) == N_REPLIES
        assert (run_dir / "judgments" / "report.md").is_file()
    missing = _mindsim(str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "no such run folder" in missing.stderr
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    fresh = write_run(tmp_path / "fresh")
    down = _mindsim(str(fresh), "--recipe", str(recipe_for(tmp_path / "down.yaml", port)), "--no-plots")
    # The preflight finds the dead engine before any judgment is attempted.
    assert down.returncode == 1 and "preflight" in down.stderr and "could not connect" in down.stderr


@pytest.mark.parametrize("concurrency, most", [(None, N_REPLIES), (1, 1), (2, 2)])
def test_concurrency_bounds_the_replies_judged_at_once(run_dir, monkeypatch, concurrency, most):
    """`judge.concurrency` caps how many judgments are in flight (so a per-slot prompt cache can be reused);
    unset, every reply may be in flight at once. The rows are the same either way."""
    import asyncio

    import mindsimkit.judge.judging as judging_mod

    real, state = judging_mod.judge_reply, {"now": 0, "peak": 0}

    async def tracked(*args, **kw):
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        await asyncio.sleep(0.01)  # let every task that may start, start
        try:
            return await real(*args, **kw)
        finally:
            state["now"] -= 1

    monkeypatch.setattr(judging_mod, "judge_reply", tracked)
    summary, _ = _run(run_dir, fake_judge, JudgeConfig(bootstrap_draws=200, plots=False, concurrency=concurrency))
    assert state["peak"] == min(most, N_REPLIES) and summary.ok == N_REPLIES


def test_judgments_cached_under_another_rubric_version_are_not_reused(run_dir, tmp_path):
    import yaml

    from mindsimkit.judge.rubric import load_rubric

    old = load_rubric().model_dump(mode="json")
    old["version"] = "mhqr-1.0"
    path = tmp_path / "old_rubric.yaml"
    path.write_text(yaml.safe_dump(old), encoding="utf-8")
    _, first = _run(run_dir, fake_judge, JudgeConfig(bootstrap_draws=200, plots=False, rubric=str(path)))
    assert len(first.requests) == N_REPLIES
    _, second = _run(run_dir, fake_judge)  # the shipped version: every reply is judged again
    assert len(second.requests) == N_REPLIES
    rows = read_judgments(run_dir / "judgments" / "judgments.parquet")
    assert {r.rubric_version for r in rows} == {load_rubric().version}
    _, third = _run(run_dir, fake_judge)
    assert third.requests == []
