"""Typed rows the simulator writes (MindEval2/MindSim §4.2; the sessions dataset of issue 4): one
`SessionRecord` per finished session with both sides' message lists in OpenAI chat format, one
`PatientTurn` per patient turn (move, secondary move, end flag, reasoning, agenda updates, rejected
attempts), the scenario, the schedule entry, memory before and after, prompts as sent, tokens and engines.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mindsim.scenario import Scenario
from mindsim.schedule import SessionPlan


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RejectedCommit(_Row):
    """A `commit_move` call the guard sent back."""

    arguments: dict[str, Any] = Field(description="The call's arguments as the model sent them")
    reason: str = Field(description="Why it was rejected, as told to the patient")


class TodoUpdate(_Row):
    """One agenda tool call and its answer."""

    tool: Literal["complete_todo", "add_todo"] = Field(description="Which agenda tool was called")
    item: str = Field(description="The item argument as given")
    result: str = Field(description="The harness's answer, including what is still open")


class PatientTurn(_Row):
    """One patient turn: the committed move and the words that realise it."""

    index: int = Field(ge=0, description="0-based patient turn in the session; 0 is the opening message")
    opening: bool = Field(description="True for the scenario's opening message (no move committed)")
    move: str | None = Field(description="Accepted primary move")
    secondary_move: str | None = Field(description="Accepted secondary move, if any")
    end_conversation: bool = Field(description="Whether the patient left after this turn")
    reasoning: str | None = Field(description="The patient's first-person reasoning for the move")
    cue: str | None = Field(description="Writing cue sent with the accepted move")
    rejected: list[RejectedCommit] = Field(default_factory=list, description="Rejected commit attempts, in order")
    todo_updates: list[TodoUpdate] = Field(default_factory=list, description="Agenda tool calls this turn")
    message: str = Field(description="What the patient wrote")


class AgendaState(_Row):
    """The agenda at the end of the session."""

    done: list[str] = Field(description="Items marked done")
    open: list[str] = Field(description="Items never reached (fed to the next scenario)")
    added: list[str] = Field(description="Items the patient added mid-session")


class MemoryUpdate(_Row):
    """How the running memory was rewritten after this session."""

    attempts: int = Field(description="Compactor calls made")
    repaired: bool = Field(description="True if the carry rules had to be enforced in code")
    problems: list[str] = Field(description="Rule breaks in the last attempt (empty when clean)")


class Tokens(_Row):
    """Token counts of this session's patient and counsellor calls (scenario/memory calls excluded)."""

    patient_prompt: int = 0
    patient_completion: int = 0
    counsellor_prompt: int = 0
    counsellor_completion: int = 0


class SessionRecord(_Row):
    """One finished session: a row of `sessions/sessions.parquet`."""

    session_id: str = Field(description="Content-derived id: patient, counsellor, session index, seed")
    patient_id: str = Field(description="Profile id")
    counsellor: str = Field(description="Counsellor label (role name or binding name)")
    session_index: int = Field(ge=0, description="0-based index in the patient's arc")
    seed: int = Field(description="Run seed")
    ended_by: Literal["patient", "turn_cap"] = Field(description="Why the session stopped")
    schedule: SessionPlan = Field(description="This session's schedule entry")
    scenario: Scenario = Field(description="The situation the patient brought")
    patient_messages: list[dict[str, Any]] = Field(
        description="Patient-side history, OpenAI chat format, tool calls and results included"
    )
    counsellor_messages: list[dict[str, Any]] = Field(description="Counsellor-side history, OpenAI chat format")
    turns: list[PatientTurn] = Field(description="Per patient turn: move, flags, reasoning, agenda, rejects")
    agenda: AgendaState = Field(description="Agenda at the end")
    memory_before: list[str] = Field(description="Running memory shown to both sides this session")
    memory_after: list[str] = Field(description="Running memory after this session")
    memory_update: MemoryUpdate = Field(description="How memory_after was produced")
    patient_system_prompt: str = Field(description="Patient system prompt as sent")
    counsellor_system_prompt: str = Field(description="Counsellor system prompt as sent")
    tokens: Tokens = Field(description="Token counts")
    engines: dict[str, dict[str, Any]] = Field(description="Engine, model and sampling per role used")
    prompts: dict[str, str] = Field(description="Prompt template → hash")
    archetype: str = Field(description="Patient's coping archetype")
    vocabulary_version: str = Field(description="Move/archetype vocabulary version")

    def transcript(self) -> list[dict[str, str]]:
        """The plain exchange (patient = user), as validation reads it."""
        return [{"role": m["role"], "content": m["content"]} for m in self.counsellor_messages if m["role"] != "system"]


def session_id(patient_id: str, counsellor: str, index: int, seed: int) -> str:
    key = f"{patient_id}|{counsellor}|{index}|{seed}"
    return f"s_{hashlib.sha256(key.encode()).hexdigest()[:16]}"
