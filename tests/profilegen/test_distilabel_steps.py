"""Stages 1–5 end to end on the real embedded engine, stages 3–4 through distilabel and the mindcore
adapter: checked on the shared quickstart run (the README's job runs its profile stage through distilabel),
so no second embedded profile run is paid for. This proves the wiring, not the quality of a 135M model;
resuming from checkpoints is tested by tests/mindsim_app/test_job_e2e.py on the same run."""

from __future__ import annotations

import json

import pytest
from quick_recipes import first_attempt

from mindsimkit.profilegen.dataset import load_profiles
from mindsimkit.profilegen.render import case_summary
from mindsimkit.profilegen.schemas import AnchoredRow

pytestmark = pytest.mark.embedded


def test_profiles_end_to_end_through_distilabel(study_run):
    folder = study_run / "profiles"
    # The first attempt's files: when the shared run was resumed (an arc left unfinished), the resume wrote
    # the profile summary again without redoing, or counting, any profile call.
    first = first_attempt(study_run)
    s = json.loads((first / "profiles_summary.json").read_text())
    assert s["runner"] == "distilabel"
    assert "distilabel" not in s["failed"]  # the step itself never lost a row
    # The worker processes' calls reach the parent's ledger (and so run.json).
    writer = s["usage"]["profile_writer"]
    assert writer["calls"] >= s["candidates"] and writer["prompt_tokens"] > 0 and writer["attempts"] >= writer["calls"]
    assert s["kept"] + s["dropped_serious"] + sum(s["failed"].values()) == s["candidates"]
    info = json.loads((first / "run.json").read_text())
    # (a first attempt that stopped on a failed arc exits before it writes its usage; its profile summary has it)
    assert info["status"] == "running" or info["usage"]["profile_writer"]["calls"] == writer["calls"]
    profiles = load_profiles(folder, pool_only=False)
    assert len(profiles) == s["kept"]
    for p in profiles:
        assert p.case_summary
        # The core belief is withheld: changing it does not change the patient's case summary. (A substring
        # check is not enough: the 135M model sometimes writes a vocabulary label as the belief.)
        row = AnchoredRow(**{k: getattr(p, k) for k in AnchoredRow.model_fields})
        other = p.formulation.model_copy(
            update={
                "core_belief": p.formulation.core_belief.model_copy(
                    update={"belief": "SENTINEL BELIEF", "history": "SENTINEL HISTORY"}
                )
            }
        )
        assert case_summary(row, other) == case_summary(row, p.formulation) == p.case_summary
        assert "SENTINEL" not in case_summary(row, other)
        assert {r.role for r in p.provenance.roles} >= {"profile_writer", "screener"}
