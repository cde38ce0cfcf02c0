"""Rendering a formulated patient into the two texts the simulator uses (MindEval2 §4.1: "This profile
is rendered into the patient's system prompt as a case summary"; Table 21 caption: the core belief is
withheld from the patient's own prompt, Appendix D). The writer brief is the full formulation for the
scenario writer and the screen; the case summary is what the patient sees, with no core belief and no
clinical labels. Both are Jinja templates under prompts/profilegen/.
"""

from __future__ import annotations

from typing import Any

from mindsimkit.mindcore.prompts import render
from mindsimkit.profilegen.schemas import AnchoredRow, Formulation
from mindsimkit.profilegen.vocab import load_vocabularies

WRITER_BRIEF = "profilegen/writer_brief.jinja2"
CASE_SUMMARY = "profilegen/case_summary.jinja2"
TEMPLATES = (WRITER_BRIEF, CASE_SUMMARY)
LIVING = {
    "alone": "alone",
    "with_partner_or_family": "with partner or family",
    "with_others": "with others",
    "unstable": "without a stable home",
}


def _common(row: AnchoredRow, f: Formulation) -> dict[str, Any]:
    return {
        "persona": row.persona,
        "demographics": row.demographics,
        "f": f,
        "living": LIVING[row.demographics.living_situation],
    }


def writer_brief(row: AnchoredRow, f: Formulation) -> str:
    """The whole profile, core belief included (scenario writer and screener only)."""
    voc = load_vocabularies()
    sec = row.anchor.secondary_problem
    return render(
        WRITER_BRIEF,
        **_common(row, f),
        main_name=voc.main[row.anchor.main_problem].name,
        secondary_name=voc.problem(sec).name if sec else None,
        impact_name=voc.impact_domains[row.anchor.impact_domain].name,
    )


def case_summary(row: AnchoredRow, f: Formulation) -> str:
    """What the patient prompt shows: no core belief, no clinical labels."""
    return render(CASE_SUMMARY, **_common(row, f), qol_text=load_vocabularies().quality_of_life[f.quality_of_life])
