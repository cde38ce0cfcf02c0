"""PatientAct's profile evaluation (PatientAct §4.1, App. D.1): the 4 profile dimensions and the
identification task (predict the attachment style and core-belief theme, scored against the psychological
seed), for one of our profiles and its decomposition.

The rubric data, the answer schema, the `Judgment` row and the statistics live in the judge package
(`judge/patientact.py`), which audits any simulator's sessions and so must not import this one; what is
mindsim's here is the input (Profile, decomposition) and the identification options (this package's
attachment prior and theme map). Sessions are scored by `mindsim judge run --rubric patientact`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from mindsimkit.judge.patientact import (  # noqa: F401 - re-exported: the statistics' public names stay here too
    PROFILE_TEMPLATE,
    Judgment,
    ask,
    failures,
    identification_accuracy,
    krippendorff_alpha,
    mann_whitney,
    rubrics,
    spearman,
    split,
    system_means,
)
from mindsimkit.judge.patientact import answer_model as _answer_model
from mindsimkit.judge.patientact import system_label as _system_label
from mindsimkit.mindcore.prompts import render, template_hash
from mindsimkit.mindsim.patientact.data import identification
from mindsimkit.mindsim.records import SessionRecord
from mindsimkit.profilegen.schemas import Profile


def answer_model(part: str) -> type[BaseModel]:
    """The judge's answer schema for `part`, with this package's identification options for the profile."""
    if part == "profile":
        ident = identification()
        return _answer_model("profile", list(ident.attachment), list(ident.theme))
    return _answer_model(part)


def profile_view(profile: Profile, formulation: Any = None) -> str:
    """The profile as the identification task shows it, to the judge and to the raters alike
    (`mindsim.patientact.card`, blind): no core belief, whose cluster maps one to one onto the theme the judge
    identifies, and the paper's profiles have no core-belief field; no seed named."""
    from mindsimkit.mindsim.patientact.card import card_markdown, profile_card

    return card_markdown(profile_card(profile, formulation, blind=True))


def system_label(record: SessionRecord) -> str:
    """'mindsim', 'patientact', or 'patientact-no_<switch>...' (the judge reads the same from the parquet)."""
    return _system_label(record.patient_engine, record.patientact.model_dump() if record.patientact else None)


async def judge_profile(
    client: Any, profile: Profile, decomposition: Any, *, system: str = "patientact", max_tokens: int | None = None
) -> Judgment:
    """Score a profile (with its PatientAct formulation when there is one) and ask for the identification
    task over the annotators' options (`identification.yaml`, not the texts the formulation was written from);
    the judge reads the profile exactly as the raters do (`profile_view`)."""
    part = rubrics().profile
    ident = identification()
    content = render(
        PROFILE_TEMPLATE,
        instructions=part.instructions,
        dimensions=part.dimensions,
        profile_text=profile_view(profile, decomposition.formulation),
        attachments=ident.attachment,
        themes=ident.theme,
    )
    answer, error, kind = await ask(
        client, content, answer_model("profile"), schema_name="patientact_profile", max_tokens=max_tokens
    )
    scores, reasons = split("profile", answer)
    predicted = {"attachment": answer["attachment"], "theme": answer["theme"]} if answer else {}
    return Judgment(
        kind="profile",
        item_id=profile.profile_id,
        patient_id=profile.profile_id,
        system=system,
        ok=answer is not None,
        error=error,
        error_kind=kind,
        scores=scores,
        reasons=reasons,
        predicted=predicted,
        truth={"attachment": decomposition.psych.attachment, "theme": decomposition.psych.theme},
        judge=client.describe(),
        prompt={PROFILE_TEMPLATE: template_hash(PROFILE_TEMPLATE)},
        rubric_version=rubrics().version,
    )
