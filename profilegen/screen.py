"""Stage 4 — screening (MindEval2 Appendix C "Screening and selection": an adversarial judge returns a
verdict with every fault quoted; PatientAct §3.2: rule-based hard-conflict checks, then validate and
revise).

Order: deterministic rules first (`profilegen.conflicts`: label constraints from data/formulation.yaml, text
rules from data/screen_rules.yaml), then the judge (role `screener`) on the rendered writer brief. Every judge
fault must quote the profile verbatim: quotes not found in it (after normalising case, whitespace,
quote marks and dashes) are discarded and counted. The final verdict is the worst kept fault, clean
when none is left. Serious profiles go back to the writer with the faults, a bounded number of times.

With `ProfileShape.causal_checks` (PatientAct App. B and Fig. 6 criteria 3, 6, 7) the judge's prompt adds
the causal criteria, and two deterministic checks of `data/causal_rules.yaml` (ours) run with the rules:
a predisposing history with no time anchor, and a maladaptive coping situation with no cycle marker.

With `ProfileShape.patientact` (PatientAct §3.2, Fig. 4) each round first hands the hard conflicts the
demographics can settle to `profilegen.demographics`, which revises relationship, work or living situation until
none is left (bounded); only what is left (a conflict with the recorded age or sex, or one the revision did not
settle) reaches the writer as a serious fault. The judge's prompt adds the shape's criteria (Fig. 6 criterion 9).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from mindsimkit.mindcore.prompts import render
from mindsimkit.mindcore.quotes import normalise, quote_in  # noqa: F401 - part of this module's API
from mindsimkit.profilegen.conflicts import rule_faults
from mindsimkit.profilegen.demographics import merge, revise_demographics
from mindsimkit.profilegen.formulation import causal_rules, revision_messages, write_formulation
from mindsimkit.profilegen.render import writer_brief
from mindsimkit.profilegen.schemas import AnchoredRow, Fault, Formulation, ProfileShape, Screen, Severity, Verdict

SCREENER_SYSTEM = "profilegen/screener_system.jinja2"
SCREENER_USER = "profilegen/screener_user.jinja2"
TEMPLATES = (SCREENER_SYSTEM, SCREENER_USER)
SCREENER_CAUSAL = "profilegen/screener_causal.jinja2"
SCREENER_PATIENTACT = "profilegen/screener_patientact.jinja2"
_RANK = {"clean": 0, "minor": 1, "serious": 2}


class JudgeFault(BaseModel):
    """One fault as the judge reports it."""

    model_config = ConfigDict(extra="forbid")
    quote: str = Field(min_length=3, max_length=200, description="Exact words copied from the profile.")
    reason: str = Field(min_length=3, max_length=200, description="Why this is wrong.")
    severity: Severity = Field(description="serious if the profile is unusable without a fix, else minor.")


class JudgeVerdict(BaseModel):
    """The judge's answer: faults first, so the verdict is decided after listing them."""

    model_config = ConfigDict(extra="forbid")
    faults: list[JudgeFault] = Field(max_length=6, description="Every fault found, each with a quote.")
    verdict: Verdict = Field(description="serious if any fault is serious, minor if only minor, else clean.")


@lru_cache(maxsize=8)
def verdict_model(max_faults: int = 6) -> type[JudgeVerdict]:
    """The screener's answer schema with at most `max_faults` faults (ProfileShape.screen_max_faults). A small
    model lists as many faults as the schema allows, so the cap is most of what a screen costs."""
    if max_faults == 6:
        return JudgeVerdict
    return create_model(  # same name: the schema name sent to the engine does not change with the cap
        "JudgeVerdict",
        __base__=JudgeVerdict,
        faults=(list[JudgeFault], Field(max_length=max_faults, description="Every fault found, each with a quote.")),
    )


def _clip(text: str, limit: int) -> str:
    """A verbatim prefix of `text` that fits `limit`, cut at a word boundary."""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text[:limit]
    return cut[: cut.rfind(" ")] if " " in cut else cut


def causal_faults(f: Formulation) -> list[Fault]:
    """The deterministic causal checks: each undated predisposing history and each maladaptive coping
    situation without a cycle marker is one fault quoting that text."""
    rules = causal_rules().checks
    limit = next(m.max_length for m in Fault.model_fields["quote"].metadata if hasattr(m, "max_length"))
    # A social condition (PatientAct shape) may hold for years without a date: only histories are checked.
    texts = [("undated_predisposing", p.history) for p in f.predisposing if p.kind != "social"]
    texts += [("coping_without_cycle", p.situation) for p in f.perpetuating if p.maladaptive]
    faults = []
    for check_id, text in texts:
        check = rules[check_id]
        if not check.passes(text):
            faults.append(
                Fault(
                    quote=_clip(text, limit),
                    reason=f"{check.reason} (rule {check_id})",
                    severity=check.severity,
                    source="rule",
                )
            )
    return faults


def verify(faults: list[JudgeFault], text: str) -> tuple[list[Fault], int]:
    """Judge faults whose quote is really in the profile, and how many were discarded."""
    kept = [
        Fault(quote=x.quote, reason=x.reason, severity=x.severity, source="judge")
        for x in faults
        if quote_in(x.quote, text)
    ]
    return kept, len(faults) - len(kept)


def worst(faults: list[Fault]) -> Verdict:
    return max((x.severity for x in faults), key=_RANK.__getitem__, default="clean")  # type: ignore[return-value]


def judge_messages(text: str, causal: bool = False, patientact: bool = False) -> list[dict[str, str]]:
    system = render(SCREENER_SYSTEM)
    # Separate templates, so the plain prompt and its hash stay what they were.
    if patientact:
        system += "\n\n" + render(SCREENER_PATIENTACT)
    if causal:
        system += "\n\n" + render(SCREENER_CAUSAL, rules=causal_rules().screener_rules)
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": render(SCREENER_USER, profile_text=text)},
    ]


async def screen_once(
    screener: Any,
    row: AnchoredRow,
    f: Formulation,
    revisions: int = 0,
    max_faults: int = 6,
    causal: bool = False,
    patientact: bool = False,
) -> Screen:
    """Rules (and, with `causal`, the causal checks), then the judge, on one formulation."""
    text = writer_brief(row, f)
    rules = rule_faults(row, f, text) + (causal_faults(f) if causal else [])
    answer: JudgeVerdict = await screener.structured(
        judge_messages(text, causal, patientact), verdict_model(max_faults), schema_name="screen"
    )
    kept, discarded = verify(answer.faults, text)
    faults = rules + kept
    return Screen(
        verdict=worst(faults),
        judge_verdict=answer.verdict,
        faults=faults,
        discarded_faults=discarded,
        revisions=revisions,
    )


async def screen_and_revise(
    writer: Any,
    screener: Any,
    row: AnchoredRow,
    f: Formulation,
    max_revisions: int,
    shape: ProfileShape | None = None,
) -> tuple[Formulation, Screen]:
    """Screen; while serious and revisions remain, rewrite with the faults as guidance and screen again.
    Discarded-quote counts add up over rounds; faults and verdicts are those of the last round."""
    _, f, screen, _ = await screen_and_revise_all(writer, screener, row, f, max_revisions, shape)
    return f, screen


async def screen_and_revise_all(
    writer: Any,
    screener: Any,
    row: AnchoredRow,
    f: Formulation,
    max_revisions: int,
    shape: ProfileShape | None = None,
) -> tuple[AnchoredRow, Formulation, Screen, Any]:
    """`screen_and_revise`, and under the PatientAct shape the demographics revision before each screen: returns
    the row with its (possibly revised) demographics and the `DemographicsRevision` record (None when none)."""
    shape = shape or ProfileShape()
    discarded = 0
    record = None
    for revisions in range(max_revisions + 1):
        if shape.patientact:
            row, step = await revise_demographics(writer, row, f, max_rounds=max_revisions + 1)
            record = merge(record, step, row.demographics)
        screen = await screen_once(
            screener, row, f, revisions, shape.screen_max_faults, shape.causal_checks, shape.patientact
        )
        discarded += screen.discarded_faults
        if screen.verdict != "serious" or revisions == max_revisions:
            break
        f = await write_formulation(
            writer,
            row,
            revision_messages(row, f, screen.faults, shape.causal_checks, shape.patientact),
            shape.text_scale,
            causal=shape.causal_checks,
            patientact=shape.patientact,
            when_forms=shape.when_forms,
        )
    return row, f, screen.model_copy(update={"discarded_faults": discarded}), record
