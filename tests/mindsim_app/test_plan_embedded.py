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
# session ended early and identical messages share a label).
WITHIN = (
    "memory_compactor",
    "profile_decomposer",
    "baseline_mapper",
    "counsellor",
)
# Tokens per role are held to the worst case only (and their sum to a band, below). How long the 135M model writes
# is its choice and moves from run to run:
# the memory rewrite's completion tokens came to 1.00 of the plan here and 0.72 on CI's clean clone of the same
# commit, the appraiser's 0.89 and 0.84 (2026-12-06); prompts quote what the model wrote (the judge's prompt tokens:
# 0.96 on one run, 0.52 on the next).
TOLERANCE = 0.15
# Two roles' requests are the recipe's arithmetic plus calls the model decides, which the session records list:
# the patient's re-asks of messages that were not speech and of moves the guard turned back (up to five per
# message: actual/planned 0.91 here, 1.16 on CI's clean clone of the same commit, 2026-12-06), and PatientAct's
# resistance step, asked only on a turn whose behaviour step chose resistance (a quarter assumed; from none to
# every turn is 0.93 to 1.21 of the plan on this study). For these the check takes the recorded calls out of the
# actual and compares the rest with the plan at a zero share for them.
MODEL_DECIDED = {
    "patient": {"message_reask_share": 0.0, "commit_reject_share": 0.0},
    "patient_appraiser": {"resistance_share": 0.0},
}


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


def _planned_without_model_decided(run: Path) -> dict[str, float]:
    """Per role, the expected requests `mindsim plan` counts with every share in MODEL_DECIDED at zero (one plan:
    each share moves only its own role's count)."""
    from mindsimkit.mindcore.recipe import load_recipe
    from mindsimkit.mindsim_app.plan import load_assumptions, role_loads

    shares = {name: value for role_shares in MODEL_DECIDED.values() for name, value in role_shares.items()}
    loads = role_loads(
        load_recipe(run.parent / "recipe.yaml"), assumptions=load_assumptions().model_copy(update=shares)
    )
    planned: dict[str, float] = {}
    for load in loads:
        planned[load.role] = planned.get(load.role, 0.0) + load.requests
    return planned


def _model_decided(run: Path) -> dict[str, int]:
    """Per role, the requests the session records say the model's own output called for: the patient's rejected
    messages and move commits on its own turns (an opening's rejections are the scenario writer's re-drafts), and
    the appraiser's resistance steps."""
    import pyarrow.parquet as pq

    rows = pq.read_table(run / "sessions" / "sessions.parquet", columns=["turns"]).to_pylist()
    turns = [t for r in rows for t in r["turns"] if not t["opening"]]
    return {
        "patient": sum(len(t["rejected_messages"]) + len(t["rejected"]) for t in turns),
        "patient_appraiser": sum(1 for t in turns if (t.get("patientact") or {}).get("behaviour") == "resistance"),
    }


def test_planned_requests_and_tokens_are_near_the_actuals(study_run):
    info = _header(study_run)
    rows = {r["role"]: r for r in info["plan_vs_actual"]["roles"]}
    decided, without = _model_decided(study_run), _planned_without_model_decided(study_run)
    off = []
    for role in (*WITHIN, *MODEL_DECIDED):
        # A structured answer that fails validation is asked again inside its call (the ledger's attempts beyond
        # its calls): the model's doing, like a re-ask, and assumed at none by the plan's expected value.
        usage = info["usage"][role]
        extra = decided.get(role, 0) + usage["attempts"] - usage["calls"]
        planned = without[role] if role in MODEL_DECIDED else rows[role]["planned"]["requests"]
        rest = rows[role]["actual"]["requests"] - extra
        if not planned or abs(rest / planned - 1) > TOLERANCE:
            off.append(f"{role}: {rest} requests besides {extra} the model called for, {planned} planned")
    assert not off, off
    # Whatever the model does, the worst case bounds it: every re-ask, revision and re-draft taken in full, every
    # answer at its token bound.
    worst: dict[str, dict[str, float]] = {}
    for row in info["plan"]["rows"]:
        for key in ("requests", "completion_tokens"):
            per_role = worst.setdefault(row["role"], {})
            per_role[key] = per_role.get(key, 0.0) + row[f"{key}_worst"]
    over = [
        f"{r['role']}: {r['actual'][key]} {key}, worst case {worst.get(r['role'], {}).get(key)}"
        for r in info["plan_vs_actual"]["roles"]
        if r["actual"]
        for key in ("requests", "completion_tokens")
        if r["actual"][key] > worst.get(r["role"], {}).get(key, 0.0)
    ]
    assert not over, over
    # Summed over roles, the expected prompt tokens are those of likely prompts, not the largest ones: 0.62 and 0.67
    # of the plan on two study runs (docs/plan.md, "How close the plan comes"), 0.41 and 0.45 when every estimate was
    # its role's largest prompt. The rest is the texts prompts quote, taken at their bounds, which the 135M model
    # writes shorter; above the plan would mean the expected value undercounts.
    sent = sum(r["actual"]["prompt_tokens"] for r in info["plan_vs_actual"]["roles"] if r["actual"])
    planned_prompts = sum(r["prompt_tokens"] for r in info["plan"]["rows"])
    assert 0.5 <= sent / planned_prompts <= 1.15, (sent, planned_prompts)
    # The report's data file sets the same plan beside the same actuals as the final run.json.
    final = json.loads((study_run / "run.json").read_text())
    assert json.loads((study_run / "report.json").read_text())["runs"][0]["plan"] == final["plan_vs_actual"]
    # The judge stage's own report.json counts the judge's usage the plan is compared with.
    report = json.loads((study_run / "judgments" / "report.json").read_text())
    assert report["usage"]["judge"]["prompt_tokens"] > 0 and rows["judge"]["planned"]["prompt_tokens"] > 0
