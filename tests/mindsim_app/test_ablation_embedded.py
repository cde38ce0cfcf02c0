"""The ablation smoke runs on the real embedded engine (SmolLM2-135M): the judge's report with two counsellors (the
kill-and-resume run, `two_counsellor_run`: the study's MindSim arc given a second counsellor) with every report table
of the judge stage and the cost table with a price; and the memory ablation on the study run (`study_run`), started
as `mindsim ablate memory` starts it, from the run's own recipe, on the suite's server: the second sessions of
MindSim and PatientAct rerun without the counsellor's memory and judged. The per-counsellor pairing over several
counsellors is pinned on the fake engine (`test_ablation.py`). A 135M model's verdicts mean nothing; the tests prove
the pieces run together on real output without error."""

from __future__ import annotations

import json

import pytest
from quick_recipes import TWO_COUNSELLORS as COUNSELLORS
from quick_recipes import TWO_SESSION_ENGINES, engines_for

from mindsimkit.mindsim_app.ablation import ablate_memory

pytestmark = [pytest.mark.embedded, pytest.mark.slow]


def test_two_counsellors_report_every_table(two_counsellor_run):
    run = two_counsellor_run["out"]
    assert sorted(json.loads((run / "sessions" / "summary.json").read_text())["counsellors"]) == COUNSELLORS
    report = json.loads((run / "judgments" / "report.json").read_text())
    assert sorted(report["counsellor_models"]) == COUNSELLORS
    analyses = report["judges"]["judge"]["analyses"]
    for table in (
        "issue_by_turn",
        "early_vs_late",
        "shares_by_session",
        "session_distribution",
        "without_speaks_as_patient",
        "benchmark_subset",
    ):
        assert table in analyses
    assert report["costs"]["rows"] and report["costs"]["judges_total"]["cost"] > 0


def test_memory_ablation_on_the_study(study_run, embedded_engines, tmp_path):
    recipe = study_run.parent / "recipe.yaml"
    out = tmp_path / "memory"
    abl = ablate_memory(
        study_run, ["counsellor"], recipe=recipe, out_dir=out, engines=engines_for(recipe, embedded_engines)
    )
    # One rerun per second session the study wrote (MindSim's and PatientAct's): rerun or counted as failed.
    assert abl["to_rerun"] == len(TWO_SESSION_ENGINES)
    assert abl["rerun"] + len(abl["failures"]) == abl["to_rerun"]
    ablation = json.loads((out / "report.json").read_text())
    assert set(ablation["judges"]["judge"]["counsellors"]) <= {"counsellor"}
    assert (out / "report.md").is_file() and (out / "judge_inputs.jsonl").is_file()
    inputs = [json.loads(x) for x in (out / "judge_inputs.jsonl").read_text().splitlines()]
    assert inputs and all(i["session_index"] == 1 for i in inputs)
