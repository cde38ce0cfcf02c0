"""Rendering: the core belief reaches the writer brief, never the patient's case summary."""

from __future__ import annotations

from mindsimkit.profilegen.anchors import anchor_personas
from mindsimkit.profilegen.formulation import draft_model, to_formulation
from mindsimkit.profilegen.personas import load_personas
from mindsimkit.profilegen.rates import load_rates
from mindsimkit.profilegen.render import case_summary, writer_brief


def test_core_belief_withheld_from_case_summary(fakes):
    row = anchor_personas(load_personas("synthetic", 1, seed=4).rows, load_rates(), seed=4)[0]
    f = to_formulation(draft_model().model_validate(fakes.GOOD_DRAFT))
    brief, summary = writer_brief(row, f), case_summary(row, f)
    belief = fakes.GOOD_DRAFT["core_belief"]
    assert belief["belief"] in brief and belief["history"] in brief and "worthless" in brief
    assert belief["belief"] not in summary and belief["history"] not in summary
    assert "worthless" not in summary.lower() and "core belief" not in summary.lower()
    # The patient sees the substance of every other section.
    for text in (
        f.presenting.summary,
        f.presenting.goal,
        f.precipitating.what_changed,
        f.predisposing[0].history,
        f.protective[0].detail,
        f.perpetuating[0].situation,
    ):
        assert text in summary
    assert row.persona.persona in summary and "{{" not in summary
