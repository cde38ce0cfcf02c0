"""Stages 1–5 end to end on the real embedded engine, stages 3–4 through distilabel and the mindcore
adapter. One candidate, small budgets: this proves the wiring, not the quality of a 135M model."""

from __future__ import annotations

import json

import pytest

from profilegen.config import ProfilesConfig
from profilegen.dataset import load_profiles
from profilegen.pipeline import run_profiles
from profilegen.schemas import AnchoredRow

pytestmark = pytest.mark.embedded


def test_profiles_end_to_end_through_distilabel(profile_engines, recipe, tmp_path):
    cfg = ProfilesConfig(candidates=1, pool_size=1, benchmark_size=1, max_revisions=0, use_distilabel=True)
    s = run_profiles(recipe, profile_engines, tmp_path, cfg)
    assert s.runner == "distilabel" and s.candidates == 1
    assert "distilabel" not in s.failed  # the step itself never lost a row
    # The worker process's calls reach the parent's ledger (and so run.json).
    writer = s.usage["profile_writer"]
    assert writer["calls"] >= 1 and writer["prompt_tokens"] > 0 and writer["attempts"] >= writer["calls"]
    assert s.kept + s.dropped_serious + sum(s.failed.values()) == 1
    folder = tmp_path / "profiles"
    assert json.loads((folder / "summary.json").read_text())["runner"] == "distilabel"
    if s.kept:
        (p,) = load_profiles(folder, pool_only=False)
        assert p.case_summary
        # The core belief is withheld: changing it does not change the patient's case summary. (A
        # substring check is not enough: the 135M model sometimes writes a vocabulary label as the belief.)
        from profilegen.render import case_summary

        row = AnchoredRow(**{k: getattr(p, k) for k in AnchoredRow.model_fields})
        other = p.formulation.model_copy(update={"core_belief": p.formulation.core_belief.model_copy(
            update={"belief": "SENTINEL BELIEF", "history": "SENTINEL HISTORY"})})
        assert case_summary(row, other) == case_summary(row, p.formulation) == p.case_summary
        assert "SENTINEL" not in case_summary(row, other)
        assert {r.model for r in p.provenance.roles} == {profile_engines.role("profile_writer").model}
    else:
        failures = (folder / "failures.jsonl").read_text()
        assert s.dropped_serious or "StructuredOutputError" in failures
    # A rerun resumes: a finished candidate is read back from its checkpoint.
    if s.kept or s.dropped_serious:
        again = run_profiles(recipe, profile_engines, tmp_path, cfg)
        assert again.kept == s.kept and again.dropped_serious == s.dropped_serious
