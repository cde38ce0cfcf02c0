"""Revising a profile's demographics to settle hard conflicts with its formulation (PatientAct §3.2: a rule-based
checker flags incompatibilities between the sampled demographic scaffold and the generated formulation, and the
LLM revises the demographics until no conflicts remain; Fig. 4, the demographics revision prompt). Used under the
PatientAct profile shape (`ProfileShape.patientact`) by `screen.screen_and_revise_all`, before each screen.

Our scaffold is the demographics derived from a persona record (`profilegen.personas`), and the checker is ours
(`conflicts.hard_conflicts`: the labels' `requires` and `data/screen_rules.yaml`). What a revision may change:
relationship, employment and living situation. Age band and gender stay: they are read from the record's age
and sex, which the persona paragraph and the patient's own prompt state ("You are 28"), so a revised band or
gender would contradict what the patient is shown; a conflict with them goes back to the writer as a serious
fault, as in a MindSim-shaped profile.

The answer schema offers, per field, only the values every label of the formulation allows and that no rule
which fired excludes, so a grammar-constrained model cannot answer a value that keeps one of those conflicts;
the conflicts are then checked again, for a bounded number of rounds. What was revised is recorded on the
profile (`Provenance.demographics_revised`: the demographics before, the record's own values, the fields
changed, the conflicts, the reviser's reasons); the persona record itself (`Profile.persona`) is never edited.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from mindsimkit.mindcore.prompts import render
from mindsimkit.profilegen.render import LIVING, writer_brief
from mindsimkit.profilegen.schemas import (
    AnchoredRow,
    Demographics,
    DemographicsRevision,
    Formulation,
    RecordValues,
)
from mindsimkit.profilegen.conflicts import Conflict, hard_conflicts, picked_labels

TEMPLATE = "profilegen/demographics_revise.jinja2"
REVISABLE = ("relationship", "employment", "living_situation")


def field_values(field: str) -> tuple[str, ...]:
    values: tuple[str, ...] = Demographics.model_fields[field].annotation.__args__  # type: ignore[union-attr]
    return values


def settleable(conflicts: list[Conflict]) -> list[Conflict]:
    """The conflicts that involve a field a revision may change."""
    return [c for c in conflicts if c.fields & set(REVISABLE)]


def allowed_values(f: Formulation, conflicts: list[Conflict]) -> dict[str, tuple[str, ...]] | None:
    """Per revisable field, the values that keep every label's constraints and that no fired rule excludes;
    None when some field would have no value left (the conflict is not one the demographics can settle)."""
    allowed = {k: set(field_values(k)) for k in REVISABLE}
    for label in picked_labels(f):
        for attr, ok in label.requires.model_dump(exclude_none=True).items():
            if attr in allowed:
                allowed[attr] &= set(ok)
    for c in conflicts:
        for field, excluded in c.excludes.items():
            if field in allowed:
                allowed[field] -= excluded
    if not all(allowed.values()):
        return None
    # In the Literal's own order, so the schema does not depend on set order.
    return {k: tuple(v for v in field_values(k) if v in allowed[k]) for k in REVISABLE}


class _Draft(BaseModel):
    model_config = ConfigDict(extra="forbid")


@lru_cache(maxsize=64)
def revision_model(allowed: tuple[tuple[str, tuple[str, ...]], ...]) -> type[BaseModel]:
    """The reviser's answer: one sentence of reason first, then every revisable field from its allowed values."""
    fields: dict[str, Any] = {
        "reason": (
            str,
            Field(
                min_length=3,
                max_length=200,
                description="One sentence: which fact of the formulation the new values make fit.",
            ),
        ),
    }
    for name, values in allowed:
        fields[name] = (Literal[values], Field(description=f"The client's {name.replace('_', ' ')}."))  # type: ignore[valid-type]
    return create_model("DemographicsDraft", __base__=_Draft, **fields)


def revision_messages(
    row: AnchoredRow, f: Formulation, conflicts: list[Conflict], allowed: dict[str, tuple[str, ...]]
) -> list[dict[str, str]]:
    d = row.demographics
    return [
        {
            "role": "user",
            "content": render(
                TEMPLATE,
                persona=row.persona,
                demographics=d,
                living=LIVING[d.living_situation],
                profile=writer_brief(row, f),
                conflicts=[c.fault for c in conflicts],
                allowed=allowed,
            ),
        }
    ]


def _record(row: AnchoredRow) -> RecordValues:
    p = row.persona
    return RecordValues(age=p.age, sex=p.sex, marital_status=p.marital_status, occupation=p.occupation)


async def revise_demographics(
    writer: Any, row: AnchoredRow, f: Formulation, max_rounds: int
) -> tuple[AnchoredRow, DemographicsRevision | None]:
    """Revise the row's demographics until no conflict they can settle is left, at most `max_rounds` calls; the
    row (revised or not) and what was done (None when nothing was). Engine errors propagate to the caller, who
    counts them as it counts the writer's."""
    start = row.demographics
    conflicts: list[str] = []
    reasons: list[str] = []
    rounds = 0
    while rounds < max_rounds:
        todo = settleable(hard_conflicts(row, f, writer_brief(row, f)))
        allowed = allowed_values(f, todo) if todo else None
        if allowed is None:
            break
        draft: Any = await writer.structured(
            revision_messages(row, f, todo, allowed), revision_model(tuple(allowed.items())), schema_name="demographics"
        )
        rounds += 1
        conflicts += [c.fault.reason for c in todo if c.fault.reason not in conflicts]
        reasons.append(draft.reason.strip())
        row = row.model_copy(
            update={"demographics": row.demographics.model_copy(update={k: getattr(draft, k) for k in REVISABLE})}
        )
    if not rounds:
        return row, None
    left = settleable(hard_conflicts(row, f, writer_brief(row, f)))
    return row, DemographicsRevision(
        revised_from=start,
        record=_record(row),
        changed=_changed(start, row.demographics),
        conflicts=conflicts,
        reasons=reasons,
        rounds=rounds,
        resolved=not left,
    )


def _changed(before: Demographics, after: Demographics) -> list[str]:
    return [k for k in REVISABLE if getattr(before, k) != getattr(after, k)]


def merge(
    done: DemographicsRevision | None, step: DemographicsRevision | None, now: Demographics
) -> DemographicsRevision | None:
    """One record for every round of a profile: the demographics before the first revision, what differs from
    them now, every conflict and reason, and whether the last revision settled what it could."""
    if done is None or step is None:
        return done or step
    return done.model_copy(
        update={
            "changed": _changed(done.revised_from, now),
            "rounds": done.rounds + step.rounds,
            "conflicts": done.conflicts + [c for c in step.conflicts if c not in done.conflicts],
            "reasons": done.reasons + step.reasons,
            "resolved": step.resolved,
        }
    )
