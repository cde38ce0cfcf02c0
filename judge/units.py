"""Annotation units (MindEval2 §3.4): what clinicians rate, turn by turn, as typed rows. The paper's
clinicians rated 19 complete conversations and 48 excerpts of five consecutive counsellor turns; a unit
of agreement is one excerpt × one annotator, with every counsellor turn in it rated.

- `Excerpt`: one line of the file `mindsim judge sample` writes and an annotation page renders: the
  blinded system code, the counsellor's system prompt as sent, the messages shown (context first), the
  counsellor turns to rate (`rate`, each with its own `turn_id`), the choices, and an empty annotation
  to fill in.
- `ExcerptAnnotation` / `TurnAnnotation`: the filled-in annotation of one excerpt by one annotator; a
  filled-in `Excerpt` line reads back in `mindsim judge agreement` as one annotation per rated turn.
- `KeyEntry`: the un-blinding key's entry for an excerpt (kept from the annotators), mapping each rated
  turn back to its session and reply.

Units: `reply` (one counsellor reply with the conversation before it), `window` (five consecutive
counsellor turns with the conversation before them), `conversation` (every counsellor turn of a session).
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

Unit = Literal["reply", "window", "conversation"]
UNITS: tuple[str, ...] = ("reply", "window", "conversation")
WINDOW_TURNS = 5  # §3.4: excerpts of five turns
# §3.4: 19 complete conversations and 48 five-turn excerpts (67 excerpts, 411 counsellor turns).
PAPER_MIX = {"conversation": 19, "window": 48}


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ExcerptMessage(_Row):
    role: Literal["user", "assistant"] = Field(description="user = patient, assistant = counsellor")
    content: str = Field(description="Message text as sent")


class RatedTurn(_Row):
    turn_id: str = Field(description="Id of this rated turn: '<excerpt_id>.<position>'")
    position: int = Field(ge=1, description="1-based position among the excerpt's rated turns")
    message_index: int = Field(ge=0, description="Index into `messages` of the counsellor message to rate")


class TurnAnnotation(BaseModel):
    """One annotator's rating of one counsellor turn."""

    model_config = ConfigDict(extra="ignore")
    turn_id: str = Field(description="The rated turn's id (from `rate`)")
    severity: Optional[str] = Field(None, description="Severity level id (no_concern, minor, major, critical)")
    issues: list[str] = Field(default_factory=list, description="Issue ids present in the turn")
    comment: Optional[str] = Field(None, description="Free text, e.g. the risk behind a Critical rating")


class ExcerptAnnotation(BaseModel):
    """One annotator's ratings of an excerpt: one entry per rated turn."""

    model_config = ConfigDict(extra="ignore")
    annotator: Optional[str] = Field(None, description="Annotator id")
    turns: list[TurnAnnotation] = Field(default_factory=list, description="One per rated turn, in order")


class Choices(_Row):
    severity: list[str] = Field(description="Severity level ids, mildest first")
    issues: list[str] = Field(description="Issue ids of the rubric")


class Excerpt(_Row):
    """One line of the excerpt file: everything an annotation page shows for one excerpt."""

    excerpt_id: str = Field(description="Opaque excerpt id")
    unit: Unit = Field(description="reply, window (five consecutive counsellor turns) or conversation")
    system: str = Field(description="Blinded system code (S1, S2, ...); the key maps it back")
    system_prompt: str = Field(description="The counsellor's system prompt exactly as sent (memory section included)")
    messages: list[ExcerptMessage] = Field(
        description="Shown in order: the conversation before the rated turns, "
        "then the rated turns and the patient messages between them"
    )
    rate: list[RatedTurn] = Field(min_length=1, description="The counsellor turns to rate, every one of them")
    choices: Choices
    annotation: ExcerptAnnotation = Field(description="Empty in the file; the annotator fills one entry per turn")

    @model_validator(mode="after")
    def _rated_turns_are_counsellor_messages(self) -> "Excerpt":
        for t in self.rate:
            if t.message_index >= len(self.messages) or self.messages[t.message_index].role != "assistant":
                raise ValueError(f"rated turn {t.turn_id} is not a counsellor message of the excerpt")
        return self


class KeyEntry(_Row):
    """The key's entry for one excerpt (never shown to annotators)."""

    unit: Unit
    session_id: str
    reply_indices: list[int] = Field(min_length=1, description="0-based counsellor replies rated, in order")
    turn_ids: list[str] = Field(min_length=1, description="The rated turns' ids, aligned with reply_indices")
    reply_index: int = Field(description="The first rated reply (for readers of single-reply keys)")
    counsellor: str
    patient_engine: Optional[str] = None
    system_unit: str = Field(
        description="What was balanced and blinded: counsellor, or engine/counsellor (mindcore.systems)"
    )
    patient_id: str
    session_index: int
    judged_severity: str = Field(
        description="The stratum drawn from: the most severe judged level of the rated turns, failed, or unjudged"
    )
