"""The plan against the suite's embedded study run (`study_run`): the expected requests and tokens per role that
`mindsim plan` wrote into run.json at the start, beside what the run's ledger recorded at the end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from quick_recipes import first_attempt

pytestmark = pytest.mark.embedded

# What the plan's expected value gets within ±15% from first principles on this run (measured 2026-12-06: every
# ratio is in docs/plan.md, "How close the plan comes"). Left out, with their measured actual/planned: the profile
# writer's and screener's requests (0.80: the plan assumes a quarter of drafts serious, this run had none), the
# judge's requests (1.22: the 135M judge's answers fail validation and are re-asked inside the call), most prompt
# sizes (0.2-0.8: the registered estimates are each role's largest prompt) and the small structured answers (the
# 135M model pads JSON with whitespace the 4-characters-per-token count does not see).
WITHIN = {
    "requests": (
        "first_scenario_writer",
        "scenario_writer",
        "memory_compactor",
        "patient",
        "patient_appraiser",
        "profile_decomposer",
        "baseline_mapper",
        "counsellor",
        "labeller",
    ),
    "completion_tokens": ("first_scenario_writer", "memory_compactor", "counsellor", "patient_appraiser"),
}
# Prompt tokens are not asserted: the judge's and the decomposer's came within ±15% on one study run (0.96, 1.10)
# and outside on the next (0.52, 1.21): what the 135M model writes moves the prompts that quote it.
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
    # The judge stage's own report.json counts the judge's usage the plan is compared with.
    report = json.loads((study_run / "judgments" / "report.json").read_text())
    assert report["usage"]["judge"]["prompt_tokens"] > 0 and rows["judge"]["planned"]["prompt_tokens"] > 0
