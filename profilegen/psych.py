"""PatientAct's psychological formulation as a profile extension (PatientAct §3.2, App. B):
intermediate beliefs, automatic thoughts, triggers, coping patterns, emotional range, and interpersonal
patterns written as Core Conflictual Relationship Themes (Luborsky & Crits-Christoph 1998: the wish, how the
other responds, how the self responds), one of them always with the therapist as the other person.

A separate structured step after the 5P formulation, made only when a recipe uses the PatientAct patient
engine (`mindsim.patientact.decompose` calls it before decomposing), so MindSim-only runs keep their prompts,
hashes and cost. The attachment style and core-belief theme it is conditioned on come from the caller.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from mindsimkit.mindcore.prompts import render
from mindsimkit.profilegen.schemas import Profile

if TYPE_CHECKING:
    from mindsimkit.mindcore.client import RoleClient

PSYCH_TEMPLATE = "patientact/psych_formulation.jinja2"
THERAPIST = "therapist"
Line = Annotated[str, Field(min_length=3, max_length=160)]


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TherapistCCRT(_Row):
    """The relationship theme with a therapist as the other person."""

    wish: str = Field(min_length=3, max_length=160, description="What the client wants from a counsellor")
    response_of_other: str = Field(
        min_length=3, max_length=160, description="How the client expects a counsellor to respond"
    )
    response_of_self: str = Field(min_length=3, max_length=160, description="What the client then feels and does")


class CCRT(_Row):
    """One interpersonal pattern as a Core Conflictual Relationship Theme."""

    domain: str = Field(
        min_length=3, max_length=40, description="Who the other person is: partner, parent, boss, friends ..."
    )
    wish: str = Field(min_length=3, max_length=160, description="What the client wants from them")
    response_of_other: str = Field(
        min_length=3, max_length=160, description="How the client expects or experiences them responding"
    )
    response_of_self: str = Field(min_length=3, max_length=160, description="What the client then feels and does")


class PsychFormulation(_Row):
    """The psychological formulation PatientAct adds to the 5P profile."""

    intermediate_beliefs: list[Line] = Field(
        min_length=1, max_length=3, description="Rules and assumptions ('If I ..., then ...')"
    )
    automatic_thoughts: list[Line] = Field(
        min_length=1, max_length=3, description="Thoughts that pop up in hard moments, in the client's words"
    )
    triggers: list[Line] = Field(min_length=1, max_length=3, description="Situations that set the problem off")
    coping_patterns: list[Line] = Field(
        min_length=1, max_length=3, description="What the client does to cope, helpful or not"
    )
    emotional_range: str = Field(
        min_length=3, max_length=240, description="Feelings that come easily and feelings held down"
    )
    # The therapist theme is its own required field, not a rule over a list: a grammar-constrained engine then
    # cannot leave it out (as with profilegen.formulation's `unhelpful_coping`).
    therapist_pattern: TherapistCCRT = Field(description="How the client is likely to relate to a counsellor")
    interpersonal_patterns: list[CCRT] = Field(
        min_length=1, max_length=2, description="1-2 relationship themes with people in the client's life"
    )

    @property
    def all_patterns(self) -> list[CCRT]:
        """Every relationship theme, the therapist's included, as CCRTs."""
        return [*self.interpersonal_patterns, CCRT(domain=THERAPIST, **self.therapist_pattern.model_dump())]


def psych_messages(
    profile: Profile, attachment: str, attachment_text: str, theme: str, theme_text: str
) -> list[dict[str, str]]:
    return [
        {
            "role": "user",
            "content": render(
                PSYCH_TEMPLATE,
                persona=profile.written().persona.persona,
                writer_brief=profile.writer_brief,
                attachment=attachment,
                attachment_text=attachment_text,
                theme=theme,
                theme_text=theme_text,
            ),
        }
    ]


async def formulate_psych(
    client: RoleClient,
    profile: Profile,
    attachment: str,
    attachment_text: str,
    theme: str,
    theme_text: str,
    *,
    max_tokens: int | None = None,
    max_attempts: int | None = None,
) -> PsychFormulation:
    sampling: dict[str, Any] = {"max_tokens": max_tokens} if max_tokens else {}
    return await client.structured(
        psych_messages(profile, attachment, attachment_text, theme, theme_text),
        PsychFormulation,
        max_attempts=max_attempts,
        **sampling,
    )
