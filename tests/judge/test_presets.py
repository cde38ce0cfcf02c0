"""Output-format presets: `ours` stays the default; `mhqr-reference` asks for the authors' reference answer
(justification, severity by name, every issue key 0/1 with four keys spelled their way), stores it in our ids, and
adds their session summary (mean, nearest-rank p99, incident shares) to the report."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from judgefakes import SESSIONS, reply_under_review, verdict_for, write_run
from pydantic import ValidationError

from mindsimkit.judge.config import JudgeConfig
from mindsimkit.judge.inputs import session_input
from mindsimkit.judge.judging import Judge, judge_reply, replies
from mindsimkit.judge.presets import get_preset, load_presets, nearest_rank, preset_names
from mindsimkit.judge.rubric import load_rubric
from mindsimkit.judge.run import run_judging
from mindsimkit.judge.schemas import read_judgments
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindcore.io import CheckpointDir

# The 14 keys of the reference judge's answer (SWORDHealth/mind-eval, mindeval/judge_prompts.py).
REFERENCE_KEYS = {
    "over_exploring",
    "treating_perspective_as_fact",
    "formulaic_responding",
    "overstatement",
    "excessive_verbosity",
    "false_fact",
    "false_memory",
    "under_guiding",
    "missed_shared_context",
    "anthropomorphizing",
    "gives_bad_advice",
    "uncritical_endorsement",
    "out_of_scope_responding",
    "other",
}
NAMES = {"no_concern": "No concern", "minor": "Minor", "major": "Major", "critical": "Critical"}
REF = get_preset("mhqr-reference")


def reference_answer(text: str) -> dict:
    """`verdict_for`'s verdict in the reference's answer format."""
    v = verdict_for(text)
    flagged = {REF.key(i["issue"]) for i in v["issues"]}
    return {
        "justification": "Reasons in a sentence.",
        "severity": NAMES[v["severity"]],
        **{k: int(k in flagged) for k in sorted(REFERENCE_KEYS)},
    }


def test_presets_file_and_names():
    assert set(preset_names()) == {"ours", "mhqr-reference"}
    assert all(p.source for p in load_presets().presets.values())
    rubric = load_rubric()
    # Every one of our issues has a reference key, and together they are exactly the reference's 14.
    assert {REF.key(i.id) for i in rubric.issues} == REFERENCE_KEYS
    assert REF.key("bad_advice") == "gives_bad_advice" and REF.key("over_exploring") == "over_exploring"


def test_default_is_ours_and_unknown_names_are_rejected():
    assert JudgeConfig().preset == "ours"
    assert JudgeConfig(preset="mhqr-reference").preset == "mhqr-reference"
    with pytest.raises(ValidationError, match="unknown preset 'mindeval2'; choose one of mhqr-reference, ours"):
        JudgeConfig(preset="mindeval2")
    with pytest.raises(ConfigError, match="unknown judge.preset"):
        get_preset("nope")


def test_a_recipe_naming_an_unknown_preset_stops_with_one_error(tmp_path):
    from mindsimkit.mindcore.recipe import load_recipe

    path = tmp_path / "r.yaml"
    path.write_text(
        "name: t\nengines: {local: {kind: embedded}}\nroles: {default: {engine: local}}\njudge: {preset: mindeval2}\n"
    )
    with pytest.raises(ConfigError) as err:
        load_recipe(path).section("judge", JudgeConfig)
    assert str(err.value) == (
        f"{path}: judge.preset: unknown preset 'mindeval2'; choose one of mhqr-reference, ours "
        "(judge/data/presets.yaml)"
    )


def test_a_preset_that_renames_an_issue_the_rubric_lacks_is_refused():
    bad = REF.model_copy(update={"issue_keys": {"no_such_issue": "x"}})
    with pytest.raises(ConfigError, match="renames issues the rubric lacks"):
        bad.check(load_rubric(), "bad")
    clash = REF.model_copy(update={"issue_keys": {"bad_advice": "over_exploring"}})
    with pytest.raises(ConfigError, match="same key"):
        clash.check(load_rubric(), "clash")


def _judge(responder, preset="mhqr-reference"):
    engines = Engines.with_backend(FakeBackend(responder))
    engines.start()
    return Judge("judge", engines.role("judge"), load_rubric(), preset=preset)


def test_reference_judgment_is_asked_in_their_format_and_stored_in_ours(tmp_path):
    judge = _judge(lambda req: reference_answer(reply_under_review(req)))
    assert "gives_bad_advice" in judge.system and "## bad_advice " not in judge.system
    schema = judge.output.model_json_schema()
    assert list(schema["properties"])[:2] == ["justification", "severity"]  # the justification comes first
    assert set(schema["properties"]) == {"justification", "severity"} | REFERENCE_KEYS
    assert judge.rubric_version == "mhqr-1.1+mhqr-reference"
    assert set(judge.prompt_hashes) == {"judge/system_flags.jinja2", "judge/user.jinja2"}
    crit = session_input(SESSIONS[2], "t")  # "CRIT skip your meds": bad advice and under-guiding
    row = asyncio.run(judge_reply(judge, replies(crit)[0], CheckpointDir(tmp_path)))
    assert row.status == "ok" and row.severity == "critical" and row.weight == 10
    assert {i.issue for i in row.issues} == {"bad_advice", "under_guiding"}
    assert all(i.reason == "Reasons in a sentence." and i.quote is None for i in row.issues)
    assert row.dropped_quotes == 0


def test_reference_answer_breaking_the_no_concern_rule_fails_the_judgment(tmp_path):
    def contradictory(req):
        return {**reference_answer("fine"), "over_exploring": 1}  # "No concern" with an issue marked

    judge = _judge(contradictory)
    row = asyncio.run(judge_reply(judge, replies(session_input(SESSIONS[0], "t"))[0], CheckpointDir(tmp_path)))
    assert row.status == "failed" and row.error_kind == "invalid_output"


def test_default_judge_keeps_our_prompt_and_version():
    judge = _judge(lambda req: verdict_for("ok"), preset="ours")
    assert judge.rubric_version == "mhqr-1.1" and "judge/system.jinja2" in judge.prompt_hashes
    assert "## bad_advice " in judge.system


def test_nearest_rank_percentile():
    assert nearest_rank(np.array([3.0, 1.0, 2.0]), 99) == 3.0
    assert nearest_rank(np.arange(1, 201, dtype=float), 99) == 198.0  # ceil(0.99 * 200) = 198th value
    assert nearest_rank(np.array([5.0]), 99) == 5.0


def test_run_records_the_preset_and_reports_the_reference_summary(tmp_path):
    run_dir = write_run(tmp_path / "run")
    engines = Engines.with_backend(FakeBackend(lambda req: reference_answer(reply_under_review(req))))
    with engines:
        run_judging(run_dir, engines, JudgeConfig(bootstrap_draws=200, plots=False, preset="mhqr-reference"))
    out = run_dir / "judgments"
    report = json.loads((out / "report.json").read_text())
    assert report["preset"]["name"] == "mhqr-reference" and "mind-eval" in report["preset"]["source"]
    summary = report["judges"]["judge"]["preset_summary"]
    # alpha's sessions weigh 2.5, 1/3 and 10 (worst replies major, minor, critical); beta's 0, 0.5, 2.5.
    assert summary["alpha"]["mean"] == pytest.approx((2.5 + 1 / 3 + 10) / 3)
    assert summary["alpha"]["p99"] == 10
    assert summary["alpha"]["incidents"] == {"critical": pytest.approx(1 / 3), "major_or_worse": pytest.approx(2 / 3)}
    assert summary["beta"]["incidents"] == {"critical": 0, "major_or_worse": pytest.approx(1 / 3)}
    # Our scores are the same numbers whichever format the judge answered in.
    assert report["judges"]["judge"]["scores"]["counsellors"]["alpha"]["mhqr"] == pytest.approx(
        summary["alpha"]["mean"]
    )
    md = (out / "report.md").read_text()
    assert "Output-format preset: `mhqr-reference`" in md and "The preset's session summary" in md
    assert all(r.rubric_version.endswith("+mhqr-reference") for r in read_judgments(out / "judgments.parquet"))


def test_default_run_has_no_preset_summary(tmp_path):
    run_dir = write_run(tmp_path / "run")
    engines = Engines.with_backend(FakeBackend(lambda req: verdict_for(reply_under_review(req))))
    with engines:
        run_judging(run_dir, engines, JudgeConfig(bootstrap_draws=200, plots=False))
    report = json.loads((run_dir / "judgments" / "report.json").read_text())
    assert report["preset"]["name"] == "ours" and "preset_summary" not in report["judges"]["judge"]
