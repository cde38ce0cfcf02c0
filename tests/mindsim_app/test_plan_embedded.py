"""The plan against the suite's embedded study run (`study_run`): the expected requests and tokens per role that
`mindsim plan` wrote into run.json at the start, beside what the run's ledger recorded at the end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from quick_recipes import first_attempt

pytestmark = pytest.mark.embedded

# Where the plan's expected value is the recipe's arithmetic alone, it gets within ±15% on this run (measured
# 2026-12-06, every ratio in docs/plan.md, "How close the plan comes"). Left out, with their measured actual/planned:
# the roles whose count is the 135M model's re-asks on a one-patient run, where one re-ask moves a count by half or
# all of it (the first-scenario writer 1.80: openings drafted again; the judge 1.36: answers re-asked inside
# the call; the profile writer and screener 0.80: no draft serious where a quarter is assumed; the labeller 0.86: a
# session ended early and identical messages share a label), prompt sizes (0.2-2.2: the registered estimates are
# each role's largest prompt, and the writers' re-draft prompts quote the rejected draft), and the answers whose
# length is the model's choice.
WITHIN = {
    "requests": (
        "memory_compactor",
        "patient",
        "patient_appraiser",
        "profile_decomposer",
        "baseline_mapper",
        "counsellor",
    ),
    # Not the baseline mapper's: with ConsistentMI's mapping beside Patient-Psi's and MindEval's it came to 0.59 (the
    # 135M model fills ConsistentMI's free-text fields far below their limits; 2026-12-06).
    "completion_tokens": ("memory_compactor", "patient_appraiser"),
}
# Prompt tokens are not asserted: the judge's came within ±15% on one study run (0.96) and outside on the next (0.52):
# what the 135M model writes moves the prompts that quote it.
TOLERANCE = 0.15


def _header(run: Path) -> dict[str, Any]:
    """The fresh attempt's run.json when the study was resumed (a resumed attempt's ledger counts only its own
    calls), else the run's."""
    first = first_attempt(run) / "run.json"
    for path in (first, run / "run.json"):
        if path.is_file():
            info = json.loads(path.read_text())
            if info.get("plan_vs_actual"):
                return info
    pytest.fail("no run.json of the study run holds plan_vs_actual")


def test_planned_requests_and_tokens_are_near_the_actuals(study_run):
    info = _header(study_run)
    rows = {r["role"]: r for r in info["plan_vs_actual"]["roles"]}
    off = [
        f"{role} {key}: actual/planned {rows[role]['ratio'][key]}"
        for key, roles in WITHIN.items()
        for role in roles
        if rows[role]["ratio"][key] is None or abs(rows[role]["ratio"][key] - 1) > TOLERANCE
    ]
    assert not off, off
    # Whatever the model does, the worst case bounds it: every re-ask, revision and re-draft taken in full.
    worst: dict[str, float] = {}
    for row in info["plan"]["rows"]:
        worst[row["role"]] = worst.get(row["role"], 0.0) + row["requests_worst"]
    over = [
        f"{r['role']}: {r['actual']['requests']} requests, worst case {worst.get(r['role'])}"
        for r in info["plan_vs_actual"]["roles"]
        if r["actual"] and r["actual"]["requests"] > worst.get(r["role"], 0.0)
    ]
    assert not over, over
    # The judge stage's own report.json counts the judge's usage the plan is compared with.
    report = json.loads((study_run / "judgments" / "report.json").read_text())
    assert report["usage"]["judge"]["prompt_tokens"] > 0 and rows["judge"]["planned"]["prompt_tokens"] > 0
