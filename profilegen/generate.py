"""Stages 3–4 for one patient, shared by the plain async runner and the distilabel step (MindEval2
§4.1 "Case formulation", Appendix C "Screening and selection"; PatientAct §3.2 validate-and-revise).

`make_profile` writes the formulation, screens and revises it, and returns an `Outcome`: a finished
`Profile` (clean or minor), a profile dropped as still serious after the revisions, or a failure
(engine error or output that never fit the schema) — each counted, never a blank row. Finished
outcomes are checkpointed under a key derived from the row, prompts, models and settings, so a rerun
skips them and a changed prompt or model does not reuse stale work. Output that never fit the schema is
checkpointed too: the bounded re-asks were its retries, and redrawing it on a rerun would change the
pool under sessions already simulated from it. Infrastructure failures (transport errors) are not
checkpointed, so a rerun after an outage retries them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mindsimkit.mindcore.errors import EngineError, StructuredOutputError
from mindsimkit.mindcore.io import CheckpointDir, off_loop
from mindsimkit.mindcore.prompts import template_hash
from mindsimkit.profilegen import formulation as formulation_mod
from mindsimkit.profilegen import render as render_mod
from mindsimkit.profilegen import screen as screen_mod
from mindsimkit.profilegen.demographics import TEMPLATE as DEMOGRAPHICS_TEMPLATE
from mindsimkit.profilegen.formulation import (
    ADD_ENTRY,
    CAUSAL_DATA,
    WRITER_CAUSAL,
    WRITER_PATIENTACT,
    write_formulation,
)
from mindsimkit.profilegen.render import case_summary, writer_brief
from mindsimkit.profilegen.schemas import (
    AnchoredRow,
    DemographicsRevision,
    Failure,
    Formulation,
    Profile,
    ProfileShape,
    Provenance,
    Screen,
    TemplateHash,
)
from mindsimkit.profilegen.screen import screen_and_revise_all

TEMPLATES = (*formulation_mod.TEMPLATES, *screen_mod.TEMPLATES, *render_mod.TEMPLATES)
CAUSAL_TEMPLATES = (WRITER_CAUSAL, screen_mod.SCREENER_CAUSAL)
PATIENTACT_TEMPLATES = (WRITER_PATIENTACT, ADD_ENTRY, screen_mod.SCREENER_PATIENTACT, DEMOGRAPHICS_TEMPLATE)
ROLES = ("profile_writer", "screener")


class Outcome(BaseModel):
    """What happened to one candidate in stages 3–4."""

    model_config = ConfigDict(extra="forbid")
    profile_id: str = Field(description="Candidate id.")
    status: Literal["ok", "dropped", "failed"] = Field(description="Kept, dropped as serious, or failed.")
    profile: Profile | None = Field(None, description="The profile when kept.")
    screen: Screen | None = Field(None, description="Last screen (kept or dropped).")
    failure: Failure | None = Field(None, description="The failure when failed.")


def prompt_hashes(causal: bool = False, patientact: bool = False) -> list[TemplateHash]:
    """Hashes of the prompts a profile is written with. The causal rules' templates and their data file, and the
    PatientAct shape's templates, count only when they are used, so runs without them keep their hashes and
    checkpoint keys."""
    hashes = [TemplateHash(template=t, sha256=template_hash(t)) for t in TEMPLATES]
    if patientact:
        hashes += [TemplateHash(template=t, sha256=template_hash(t)) for t in PATIENTACT_TEMPLATES]
    if causal:
        hashes += [TemplateHash(template=t, sha256=template_hash(t)) for t in CAUSAL_TEMPLATES]
        hashes.append(
            TemplateHash(
                template=f"profilegen:data/{CAUSAL_DATA}",
                sha256=template_hash(f"data/{CAUSAL_DATA}", package="profilegen"),
            )
        )
    return hashes


def build_profile(
    row: AnchoredRow,
    f: Formulation,
    screen: Screen,
    provenance: Provenance,
    revised: DemographicsRevision | None = None,
) -> Profile:
    if revised is not None:
        provenance = provenance.model_copy(update={"demographics_revised": revised})
    return Profile(
        **row.model_dump(exclude={"profile_id", "anchor", "style"}),
        profile_id=row.profile_id,
        anchor=row.anchor,
        style=row.style,
        formulation=f,
        goal=f.presenting.goal,
        case_summary=case_summary(row, f),
        writer_brief=writer_brief(row, f),
        screen=screen,
        provenance=provenance,
    )


async def make_profile(
    writer: Any, screener: Any, row: AnchoredRow, max_revisions: int, provenance: Provenance
) -> Outcome:
    """Stages 3–4 for one candidate. `writer`/`screener` need `structured(messages, Model, schema_name=)`."""
    stage = "formulation"
    try:
        shape = provenance.shape
        f = await write_formulation(
            writer,
            row,
            scale=shape.text_scale,
            causal=shape.causal_checks,
            patientact=shape.patientact,
            when_forms=shape.when_forms,
        )
        stage = "screen"
        row, f, screen, revised = await screen_and_revise_all(writer, screener, row, f, max_revisions, shape)
    except EngineError as exc:
        return Outcome(
            profile_id=row.profile_id,
            status="failed",
            failure=Failure(
                profile_id=row.profile_id,
                stage=stage,
                error=f"{type(exc).__name__}: {exc}",
                retry_on_rerun=not isinstance(exc, StructuredOutputError),
            ),
        )
    if screen.verdict == "serious":
        return Outcome(profile_id=row.profile_id, status="dropped", screen=screen)
    return Outcome(
        profile_id=row.profile_id,
        status="ok",
        screen=screen,
        profile=build_profile(row, f, screen, provenance, revised),
    )


def checkpoint_key(row: AnchoredRow, max_revisions: int, provenance: Provenance) -> str:
    """Content-derived: the row, the prompts, the models per role, the revision budget and, when it is not
    the full one, the shape (so checkpoints written before shapes existed still match)."""
    include = {"roles", "prompts"} | ({"shape"} if provenance.shape != ProfileShape() else set())
    payload = json.dumps(
        [row.model_dump(mode="json"), max_revisions, provenance.model_dump(mode="json", include=include)],
        sort_keys=True,
    )
    return f"{row.profile_id}-{hashlib.sha256(payload.encode()).hexdigest()[:10]}"


async def make_profile_checkpointed(
    writer: Any,
    screener: Any,
    row: AnchoredRow,
    max_revisions: int,
    provenance: Provenance,
    checkpoints: CheckpointDir | None,
) -> Outcome:
    key = checkpoint_key(row, max_revisions, provenance)
    if checkpoints is not None and checkpoints.has(key):
        return Outcome.model_validate(checkpoints.read(key))
    outcome = await make_profile(writer, screener, row, max_revisions, provenance)
    if checkpoints is not None and not (outcome.failure and outcome.failure.retry_on_rerun):
        # Create-if-absent: a retried worker racing its original keeps the copy that landed first.
        stored, _ = await off_loop(checkpoints.first_copy, key, outcome.model_dump(mode="json"))
        return Outcome.model_validate(stored)
    return outcome
