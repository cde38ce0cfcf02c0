"""Typed rows the simulator writes (MindEval2/MindSim §4.2; the released sessions dataset is made of them): one
`SessionRecord` per finished session with both sides' message lists in OpenAI chat format, one
`PatientTurn` per patient turn (move, secondary move, end flag, reasoning, agenda updates, rejected
attempts), the scenario, the schedule entry, memory before and after, prompts as sent, tokens and engines.
Also: the patient messages re-asked because they were not speech (`rejected_messages`), the counsellor's
reply defects (`counsellor_flags`, stored, never corrected), and `ScenarioRecord`, the checkpoint of a
patient's first scenario, written once and shared by every counsellor. Sessions played by the PatientAct
engine (docs/patientact.md) carry its state: `PatientActSession` per session (trust at both ends, switches,
decomposition) and `PatientActTurn` per turn (trust before / after, reaction, behaviour, resistance pattern,
retrieved and blocked items, the signal). Sessions played by the AnnaAgent baseline carry its state:
`AnnaAgentSession` per session (the complaint chain, where it started and ended) and `AnnaAgentTurn` per turn
(inferred and modulated emotion, complaint stage, whether earlier-session memory was asked for and given).
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field

from mindsimkit.mindsim.prompting import CounsellorFlag, RejectedMessage
from mindsimkit.mindsim.scenario import Scenario
from mindsimkit.mindsim.schedule import SessionPlan

__all__ = [
    "AgendaState",
    "AnnaAgentSession",
    "AnnaAgentTurn",
    "BaselineSession",
    "ConsistentMITurn",
    "CounsellorFlags",
    "MemoryUpdate",
    "PatientActSession",
    "PatientActTurn",
    "PatientTurn",
    "RejectedCommit",
    "RejectedMessage",
    "RejectionCounts",
    "ScenarioRecord",
    "SessionRecord",
    "TodoUpdate",
    "Tokens",
    "session_id",
]


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


class StepReasons(_Row):
    """The short reasons the PatientAct steps gave (fixed fields, so the parquet column has one type)."""

    reaction: str | None = None
    behaviour: str | None = None
    resistance: str | None = None
    trust: str | None = None
    matcher: str | None = None


class PatientActTurn(_Row):
    """What the PatientAct engine decided on one patient turn (PatientAct §3.3): kept on the patient side only."""

    trust_before: float = Field(ge=1.0, le=4.0, description="Trust when the counsellor's message arrived")
    trust_after: float = Field(ge=1.0, le=4.0, description="Trust after this exchange (the next turn's trust)")
    trust_change: str | None = Field(None, description="The change the trust step named (before attachment caps)")
    trust_criterion: str | None = Field(None, description="The criterion the trust step named (trust.yaml criteria)")
    rules: list[str] = Field(
        default_factory=list, description="Step decision rules that held this turn (step_rules.yaml)"
    )
    reaction: str | None = Field(None, description="Reaction (App. C.1); None on the opening or without the pipeline")
    intensity: str | None = Field(None, description="Reaction intensity: low, moderate or high")
    behaviour: str | None = Field(None, description="Behaviour (App. C.2); None on the opening or without the pipeline")
    resistance_pattern: str | None = Field(
        None, description="Resistance pattern (App. C.3) when the behaviour is resistance"
    )
    relevant: list[str] = Field(default_factory=list, description="Memory items whose tags matched the message")
    retrieved: list[str] = Field(
        default_factory=list, description="Relevant items trust allowed (content given to the patient)"
    )
    blocked: list[str] = Field(
        default_factory=list, description="Relevant discomfort items above trust (named as pressure only)"
    )
    withheld: list[str] = Field(
        default_factory=list, description="Relevant items above trust without discomfort (not shown)"
    )
    signal: str | None = Field(
        None, description="The private note appended to the counsellor's message on the patient side"
    )
    why: StepReasons = Field(default_factory=lambda: StepReasons(), description="The steps' short reasons")


class AnnaAgentTurn(_Row):
    """What the AnnaAgent baseline decided on one client turn (docs/baselines.md): kept on the client side only."""

    inferred_emotion: str = Field(description="The emotion the modulator model inferred (GoEmotions label)")
    emotion: str = Field(description="The emotion the reply was written in (the inferred one unless perturbed)")
    perturbed: bool = Field(description="Whether the seeded draw replaced the inferred emotion")
    stage: int = Field(ge=1, description="Complaint-chain stage the reply was written at (1-based)")
    stage_moved: bool = Field(description="Whether the switch check moved the chain on this turn")
    complaint: str = Field(description="The chief complaint of that stage (the last stage's once past the end)")
    memory_checked: bool = Field(description="Whether the memory check was asked (only after a first session)")
    memory_used: bool = Field(
        description="Whether the check said the message needs earlier sessions, so recall was given"
    )
    recalled: str | None = Field(None, description="What recall returned from earlier sessions (None when not used)")


class ConsistentMITurn(_Row):
    """What the ConsistentMI engine tracked on one patient turn (docs/baselines.md "ConsistentMI")."""

    stage: str = Field(description="Stage of change the reply was written in (or `motivated`, the one-turn state)")
    stage_after: str = Field(description="Stage the next turn starts from")
    receptivity: float = Field(description="The client's receptivity (1-5)")
    topic: str | None = Field(
        None, description="Topic the counsellor's message was placed on (None: no motivation chain)"
    )
    engagement: int | None = Field(None, description="Engagement with the counsellor's topic, 1-4 (None: not tracked)")
    off_topic: int = Field(0, description="Off-topic turns counted so far")
    motivated: bool | None = Field(None, description="The motivation check's answer (None: not asked this turn)")
    # JSON text: a parquet struct column would give every turn the union of every stage's actions.
    weights: str | None = Field(
        None,
        description="JSON object: the action weights drawn from, after constraints (None when the action was forced)",
    )
    action: str = Field(description="The dialogue action the reply carries out")
    grounding: str | None = Field(None, description="The persona, belief or plan the reply was grounded in")
    instruction: str = Field(description="The private instruction appended to the counsellor's message for this reply")


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
    rejected_messages: list[RejectedMessage] = Field(
        default_factory=list,
        description="Replies re-asked because they were not speech (for turn 0: the scenario's rejected openers)",
    )
    trimmed: bool = Field(
        False, description="The message ran into its token budget and was ended at its last complete sentence"
    )
    # Left out when false, so turns of runs without `message_fallback` read as before.
    fallback: bool = Field(
        False,
        exclude_if=lambda v: not v,
        description="Every ask of the message came back unusable, so `simulation.message_fallback` was said instead "
        "(the rejected replies are in rejected_messages)",
    )
    patientact: PatientActTurn | None = Field(
        None, description="PatientAct engine state for this turn (None for MindSim)"
    )
    # Absent (not null) on other engines' turns, so their checkpoints and rows are unchanged.
    annaagent: AnnaAgentTurn | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="AnnaAgent state for this turn (absent for other engines and for an opening message)",
    )
    # Absent (not null) on other engines' turns, so their checkpoints and rows are unchanged.
    consistentmi: ConsistentMITurn | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="ConsistentMI engine state for this turn (other engines: absent)",
    )

    @classmethod
    def scripted_opening(cls, message: str, rejected: "Sequence[RejectedMessage]" = (), **state: Any) -> "PatientTurn":
        """Turn 0 of any engine: the scenario's opening message as written (already checked as speech, its
        rejected drafts along), before the counsellor has said anything, so no move; `state` is the engine's own
        turn field."""
        return cls(
            index=0,
            opening=True,
            move=None,
            secondary_move=None,
            end_conversation=False,
            reasoning=None,
            cue=None,
            message=message,
            rejected_messages=list(rejected),
            **state,
        )

    @classmethod
    def spoken(
        cls, index: int, said: Any, *, end: bool = False, message: str | None = None, **state: Any
    ) -> "PatientTurn":
        """A reply of an engine that commits no move (the baselines, PatientAct): what `said` (a `SpeechReply`)
        holds, its rejected drafts and whether it was trimmed; `message` when the engine stores other words than
        it said; `state` is the engine's own turn field."""
        return cls(
            index=index,
            opening=False,
            move=None,
            secondary_move=None,
            end_conversation=end,
            reasoning=None,
            cue=None,
            message=said.text if message is None else message,
            rejected_messages=said.rejected,
            trimmed=said.trimmed,
            **state,
        )


class CounsellorFlags(_Row):
    """Defects of one counsellor reply, which is stored exactly as sent (the counsellor is under test)."""

    reply_index: int = Field(
        ge=0, description="0-based counsellor reply in the session (it answers patient turn reply_index)"
    )
    flags: list[CounsellorFlag] = Field(
        default_factory=list, description="tool_call, json, tool_syntax, cut_off, speaks_as_patient; empty when clean"
    )
    finish_reason: str | None = Field(None, description="The engine's finish reason for the reply")
    blank_retries: int = Field(0, ge=0, description="Blank replies re-asked before this one (the only re-ask)")
    # Left out when the server returned none, so the records of runs without reasoning read as before.
    reasoning: dict[str, Any] | None = Field(
        None,
        exclude_if=lambda v: not v,
        description="What the reply carried besides its words, as the server returned it (reasoning_content, "
        "thinking_blocks, reasoning_items, reasoning_details); kept whether or not it was sent back "
        "(`return_reasoning`, which puts it on the reply in counsellor_messages too)",
    )

    inline_reasoning: str | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="Reasoning the counsellor wrote inside its reply's text, split off before the patient and the "
        "judge saw the reply (`simulation.split_inline_reasoning`); never sent back to the counsellor",
    )


class RejectionCounts(_Row):
    """Rejected patient messages by reason (fixed fields, so the parquet column has one type)."""

    blank: int = 0
    tool_call: int = 0
    json_: int = Field(0, alias="json", serialization_alias="json")
    tool_syntax: int = 0
    cut_off: int = 0

    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True)

    @classmethod
    def of(cls, rejections: list[RejectedMessage]) -> "RejectionCounts":
        counts: dict[str, int] = {}
        for r in rejections:
            counts[r.reason] = counts.get(r.reason, 0) + 1
        return cls.model_validate(counts)


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
    skipped: bool = Field(
        False, description="Not rewritten: the arc's last session with `simulation.final_memory: false`"
    )


class Tokens(_Row):
    """Token counts of this session's patient and counsellor calls (scenario/memory calls excluded)."""

    patient_prompt: int = 0
    patient_completion: int = 0
    counsellor_prompt: int = 0
    counsellor_completion: int = 0


class PatientActSession(_Row):
    """The PatientAct engine's per-session state: seed, trust at both ends, switches, and the decomposition
    (so a resumed arc reuses it instead of decomposing again)."""

    attachment: str = Field(description="Attachment style of the psychological seed")
    theme: str = Field(description="Core-belief theme of the psychological seed")
    trust_start: float = Field(ge=1.0, le=4.0, description="Trust at the start of this session")
    trust_end: float = Field(ge=1.0, le=4.0, description="Trust at the end (carried into the next session)")
    switches: dict[str, Any] = Field(description="The engine's settings (ablation switches included)")
    appraiser_system_prompt: str = Field(description="System prompt of the reaction/behaviour/resistance/trust steps")
    decomposition: dict[str, Any] = Field(description="The profile decomposition used (static layer and items)")


class BaselineSession(_Row):
    """A baseline engine's per-session state (Patient-Psi, MindEval; docs/baselines.md): the baseline profile
    its prompt was filled from, which of its fields the mapper wrote, and Patient-Psi's drawn style. The
    preparation is kept whole so a resumed arc reuses it instead of mapping again."""

    engine: str = Field(description="The baseline engine: patient_psi, mindeval, annaagent or consistentmi")
    style: str | None = Field(
        None, description="Patient-Psi's conversational style drawn for this patient (None for MindEval)"
    )
    filled: list[str] = Field(
        description="Baseline profile fields the baseline_mapper wrote (the rest come from our profile)"
    )
    preparation: dict[str, Any] = Field(
        description="The per-patient preparation used (the baseline profile and its provenance)"
    )
    # ConsistentMI only; absent for the other baselines, so their rows are unchanged.
    stage_start: str | None = Field(
        None, exclude_if=lambda v: v is None, description="ConsistentMI: the stage of change the session started in"
    )
    stage_end: str | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="ConsistentMI: the stage the session ended in (the next one's start)",
    )
    left: dict[str, list[str]] | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="ConsistentMI: the beliefs and plans not yet used up at the session's end (carried to the next)",
    )


class AnnaAgentSession(_Row):
    """The AnnaAgent baseline's per-session state: its complaint chain, the stages it started and ended at, and
    which earlier session its memory held (the per-patient preparation is in `baseline`)."""

    complaint_chain: list[str] = Field(description="The complaint chain, stage 1 first")
    stage_start: int = Field(ge=1, description="Stage the session started at")
    stage_end: int = Field(ge=1, description="Stage after the last turn's switch check")
    earlier_session: int | None = Field(
        None, description="0-based index of the previous session its memory held (None in a first session)"
    )
    perturbed: int = Field(0, ge=0, description="Turns whose emotion the seeded draw replaced")
    memory_used: int = Field(0, ge=0, description="Turns given earlier-session memory")


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
    rejected_messages: RejectionCounts = Field(
        default_factory=RejectionCounts, description="Patient messages re-asked because they were not speech, by reason"
    )
    counsellor_flags: list[CounsellorFlags] = Field(
        default_factory=list, description="Per counsellor reply: its defects (stored as sent, never corrected)"
    )
    scenario_shared: bool = Field(
        False, description="True when the scenario is the patient's first, written once and met by every counsellor"
    )
    patient_engine: str = Field(
        "mindsim", description="Patient engine (or variant, ENGINE:ARM) that played the patient: a registered name"
    )
    patientact: PatientActSession | None = Field(None, description="PatientAct engine state (None for MindSim)")
    # Absent (not null) for engines whose patient calls no tools, so their checkpoints and rows are unchanged.
    patient_tools: str | None = Field(
        None,
        exclude_if=lambda t: t is None,
        description="JSON list of the tool definitions (OpenAI format) the patient was offered; absent when it had none",
    )
    baseline: BaselineSession | None = Field(
        None, description="Baseline engine state (Patient-Psi, MindEval, AnnaAgent; None otherwise)"
    )
    annaagent: AnnaAgentSession | None = Field(
        None, exclude_if=lambda v: v is None, description="AnnaAgent state (absent for other engines)"
    )
    scenario_drafts: int = Field(
        1, ge=1, description="Drafts the scenario writer needed for this session's scenario (1 = the first was kept)"
    )
    # Absent (not null) on one-trial runs, so their checkpoints and rows are those of runs before trials existed.
    trial: int | None = Field(
        None,
        ge=0,
        exclude_if=lambda t: t is None,
        description="0-based repeated trial of the arc (`simulation.trials` > 1); absent on one-trial runs",
    )
    # Absent (not null) unless an ablation reran the session, as `trial`.
    counsellor_memory: list[str] | None = Field(
        None,
        exclude_if=lambda m: m is None,
        description="The memory the counsellor's system prompt showed when it was not memory_before (the "
        "memory ablation: []); None: both sides saw memory_before",
    )
    rerun: str | None = Field(
        None,
        exclude_if=lambda r: r is None,
        description="The ablation that reran this session (e.g. no_counsellor_memory)",
    )

    def transcript(self) -> list[dict[str, str]]:
        """The plain exchange (patient = user), as validation reads it."""
        return plain_exchange(self.counsellor_messages)


def plain_exchange(counsellor_messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The counsellor's side of a session without its system prompt, as role/content pairs (patient = user)."""
    return [{"role": m["role"], "content": m["content"]} for m in counsellor_messages if m["role"] != "system"]


class ScenarioRecord(_Row):
    """A patient's first scenario, checkpointed once before any counsellor arc starts so every counsellor meets
    the same opening situation (`sessions/scenarios/<patient>-<seed>.json`)."""

    patient_id: str = Field(description="Profile id")
    seed: int = Field(description="Run seed")
    scenario: Scenario = Field(description="The first session's situation, agenda and opening message")
    rejected_openings: list[RejectedMessage] = Field(
        default_factory=list, description="Drafts re-asked because their opening message was not speech"
    )
    engine: dict[str, Any] = Field(description="The scenario writer's engine, model and sampling")
    prompt: dict[str, str] = Field(description="Prompt template → hash")
    scenario_drafts: int = Field(1, ge=1, description="Drafts the scenario writer needed (1 = the first was kept)")


def scenario_key(patient_id: str, seed: int) -> str:
    return f"{patient_id}-{seed}"


def session_id(
    patient_id: str,
    counsellor: str,
    index: int,
    seed: int,
    engine: str | None = None,
    trial: int = 0,
    rerun: str | None = None,
) -> str:
    """Content-derived id of a session; `engine` is a registered patient engine or variant name (default: the
    default engine). An engine whose run folders predate patient engines (MindSim) keeps the old key, so they
    resume; any other engine or variant is part of the key (`Variant.session_key`). A repeated trial after the
    first adds `|trial=N`; trial 0 keeps the one-trial id, so raising `simulation.trials` on a finished run
    reuses its sessions as trial 0. `rerun`: the ablation that reran this session (its twin keeps the plain id)."""
    from mindsimkit.mindcore.runlog import played_by
    from mindsimkit.mindsim.patient_engines import variant

    key = f"{patient_id}|{counsellor}|{index}|{seed}" + variant(played_by(engine)).session_key
    if trial:
        key += f"|trial={trial}"
    key += f"|rerun:{rerun}" if rerun else ""
    return f"s_{hashlib.sha256(key.encode()).hexdigest()[:16]}"
