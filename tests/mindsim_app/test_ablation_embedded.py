"""Issue 18's smoke run on the real embedded engine (SmolLM2-135M): the shared quickstart run (one counsellor)
given a second counsellor on the same profiles and first scenarios (`two_counsellor_run`: the job resumes the
first counsellor's arc, so only the new arc is simulated, and its kill-and-resume is what `test_job_e2e` checks),
judged by the job (every report table of the judge stage, the cost table with a price), and the new counsellor's
second session through the memory ablation, started as `mindsim ablate memory` starts it: from the run's own
recipe. One counsellor ablated: the per-counsellor pairing over several is pinned on the fake engine
(`test_ablation.py`), and each rerun costs a session and a judgment here. A 135M model's verdicts mean nothing;
the test proves the pieces run together on real output without error."""

from __future__ import annotations

import json

import pytest
from quick_recipes import TWO_COUNSELLORS as COUNSELLORS

from mindsim_app.ablation import ablate_memory

pytestmark = pytest.mark.embedded


def test_two_counsellors_report_every_table_and_the_memory_ablation(two_counsellor_run):
    run = two_counsellor_run["out"]
    assert sorted(json.loads((run / "sessions" / "summary.json").read_text())["counsellors"]) == COUNSELLORS
    report = json.loads((run / "judgments" / "report.json").read_text())
    assert sorted(report["counsellor_models"]) == COUNSELLORS
    analyses = report["judges"]["judge"]["analyses"]
    for table in ("issue_by_turn", "early_vs_late", "shares_by_session", "session_distribution",
                  "without_speaks_as_patient", "benchmark_subset"):
        assert table in analyses
    assert report["costs"]["rows"] and report["costs"]["judges_total"]["cost"] > 0

    abl = ablate_memory(run, COUNSELLORS[1:])
    memory = run / "ablations" / "memory"
    ablation = json.loads((memory / "report.json").read_text())
    assert abl["rerun"] + len(abl["failures"]) == abl["to_rerun"] > 0
    assert set(ablation["judges"]["judge"]["counsellors"]) <= set(COUNSELLORS[1:])
    assert (memory / "report.md").is_file() and (memory / "judge_inputs.jsonl").is_file()
