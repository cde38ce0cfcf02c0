"""`SimulationConfig`: the recipe's `simulation:` section (MindEval2/MindSim §4.2 and Appendix D — sessions per
patient, turn cap, gap range, counsellors under test, memory cap, retry bounds).

Every field is defaulted and unknown keys are rejected, so a typo in a recipe names the field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from mindsimkit.mindcore.config import RequestOptions, RoleSpec
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.recipe import format_validation_error
from mindsimkit.mindsim.engine_names import DEFAULT_ENGINE


class CounsellorBinding(RequestOptions):
    """A counsellor under test given directly as engine + model (instead of a `counsellor:NAME` role), with
    the same request options a role has (reasoning_effort, thinking, token_param, omit, extra_body, …)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="Label used in session ids and outputs, e.g. 'gpt-4o'", pattern=r"^[\w.\-:]+$")
    engine: str = Field(description="Name of an entry in the recipe's `engines:`")
    model: str | None = Field(None, description="Model id; default: the engine's model")
    temperature: float | None = Field(None, ge=0, le=2, description="Sampling temperature")
    max_tokens: int | None = Field(None, ge=1, description="Cap on each counsellor reply")

    def role_spec(self) -> RoleSpec:
        """The binding as a role's settings (what its client sends)."""
        return RoleSpec(
            engine=self.engine,
            model=self.model,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            **self.model_dump(include=set(RequestOptions.model_fields)),
        )


class PatientActConfig(BaseModel):
    """Settings of the PatientAct patient engine (PatientAct §3.3; docs/patientact.md). The three switches
    are the paper's ablations (Table 4): each turns off exactly one mechanism."""

    model_config = ConfigDict(extra="forbid")
    trust_gating: bool = Field(
        True, description="Gate memory items by trust (off = 'w/o TG': relevant items always retrieved)"
    )
    dynamic_memory: bool = Field(
        True, description="Dynamic memory layer (off = 'w/o DM': every item in the system prompt, no retrieval)"
    )
    pipeline: bool = Field(
        True, description="Reaction → behaviour → resistance steps (off = 'w/o Pipe': the signal carries content only)"
    )
    psych_formulation: bool = Field(
        True, description="Write PatientAct's psychological formulation (beliefs, triggers, CCRT) before decomposing"
    )
    formulation_max_tokens: int | None = Field(
        4300, ge=256, description="Token budget of the psychological formulation"
    )
    psych_screen: bool = Field(
        False,
        description="Screen the psychological formulation against the paper's validation criteria (Fig. 6) and "
        "revise it once when it fails (off: not screened, as before; on in the patientact-reference preset)",
    )
    psych_screen_max_tokens: int | None = Field(900, ge=64, description="Token budget of the formulation's screen")
    trust_drift_per_day: float = Field(
        0.0, ge=0, le=4, description="Ours: trust drifts toward the session baseline by this much per day of gap"
    )
    concealment_offset: bool = Field(
        True,
        description="Ours: the schedule's concealment shifts a session's starting trust (off: every baseline is 2.5)",
    )
    carry_trust: bool = Field(
        True, description="Ours: a session starts from the previous session's final trust (off: from its baseline)"
    )
    retrieval: Literal["lexical", "llm"] = Field(
        "lexical", description="How a counsellor message is matched to item tags: lexical stems, or the matcher role"
    )
    matcher_max_tokens: int | None = Field(600, ge=32, description="Token budget of one LLM tag-matching answer")
    allow_end: bool = Field(
        True, description="The behaviour step may end the session (off: sessions run to the turn cap, as in the paper)"
    )
    context_turns: int = Field(4, ge=1, le=30, description="Recent exchanges shown to the appraisal steps")
    step_max_tokens: int | None = Field(
        320, ge=32, description="Token budget of one reaction/behaviour/resistance/trust answer"
    )
    decomposition_max_tokens: int | None = Field(7000, ge=256, description="Token budget of the profile decomposition")
    # 18: the most pieces a MindSim-shaped profile holds (`decompose.max_pieces`), so those stay one call as before;
    # a PatientAct-shaped profile (impact list, split predisposing factors) holds up to 26 and takes two.
    decomposition_chunk: int = Field(
        18,
        ge=1,
        le=64,
        description="Most profile pieces one decomposition call answers for; a profile with more is decomposed in "
        "several calls of near-equal size, each shown the whole profile (bounds the decomposition's answer)",
    )
    step_attempts: int | None = Field(
        None, ge=1, le=10, description="Attempts per structured step (default: the role's)"
    )
    # How the authors' public code differs from ours (docs/patientact.md; the `patientact-reference` preset sets them).
    frame: Literal["chat", "session"] = Field(
        "chat",
        description="The patient prompt's setting: 'chat' = typing to an AI counsellor on a phone (ours, as "
        "the MindSim patient); 'session' = attending a therapy session, 1-3 sentences unless activated (the paper's)",
    )
    step_context: Literal["recent", "whole"] = Field(
        "recent", description="What the steps see: the last `context_turns` exchanges (ours) or the whole conversation"
    )
    matcher_context: Literal["recent", "message"] = Field(
        "recent", description="What the LLM matcher sees: recent exchanges and the message (ours) or the message only"
    )
    trust_update: Literal["criterion", "direction"] = Field(
        "criterion",
        description="'criterion': the step names a criterion and code enforces its direction and the "
        "attachment rules (ours); 'direction': the step picks one of five directions, applied as named, bounded",
    )
    trust_sees_reply: bool = Field(
        True,
        description="The trust step sees the client's reply (ours) or only the exchange up to the counsellor's message",
    )
    no_dm_profile: Literal["whole", "reference"] = Field(
        "whole",
        description="What the w/o DM arm's patient prompt holds: 'whole' = the full profile (the paper's "
        "ablation); 'reference' = what the authors' code renders: the full arm's sections without the counsellor "
        "pattern, and the other sections' headings with nothing under them",
    )


PSI_STYLES = ("plain", "upset", "verbose", "reserved", "tangent", "pleasing")


class BaselinesConfig(BaseModel):
    """Settings of the baseline patient engines (Patient-Psi, MindEval, AnnaAgent; docs/baselines.md)."""

    model_config = ConfigDict(extra="forbid")
    psi_styles: list[Literal[PSI_STYLES]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: list(PSI_STYLES),
        min_length=1,
        description="Patient-Psi conversational styles drawn from, uniformly and seeded per patient (default: all six)",
    )
    mapper_max_tokens: int | None = Field(
        1500, ge=128, description="Token budget of the baseline_mapper's one structured call per patient and baseline"
    )
    mapper_attempts: int | None = Field(None, ge=1, le=10, description="Attempts of that call (default: the role's)")
    anna_map_max_tokens: int | None = Field(
        4096,
        ge=128,
        description="AnnaAgent: token budget of its one baseline_mapper call per patient (the seeker "
        "profile with its complaint chain is longer than the other baselines' mappings)",
    )
    anna_attempts: int = Field(
        3,
        ge=1,
        le=10,
        description="AnnaAgent: attempts of each per-turn modulator call (emotion, complaint switch, memory check, "
        "recall) while its answer is invalid; when they run out the turn fails and the arc is counted as failed",
    )
    anna_max_tokens: int | None = Field(
        256, ge=32, description="AnnaAgent: token budget of each structured modulator call (emotion, switch, check)"
    )
    anna_recall_max_tokens: int | None = Field(
        400, ge=32, description="AnnaAgent: token budget of the recall call (earlier-session memory, plain text)"
    )

    @field_validator("psi_styles")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"name each style once, got {v}")
        return v


class ConsistentMIConfig(BaseModel):
    """Settings of the ConsistentMI patient engine (Yang et al. 2025 as PatientHub runs it; docs/baselines.md)."""

    model_config = ConfigDict(extra="forbid")
    tracker_max_tokens: int | None = Field(
        512,
        ge=64,
        description="Token budget of one structured answer of the consistentmi_tracker role (topic, "
        "motivation check, action weights, grounding item)",
    )
    tracker_attempts: int | None = Field(
        None,
        ge=1,
        le=10,
        description="Attempts per tracker call (default: the role's); "
        "a turn whose call never fits fails, counted with the arc",
    )
    end_on_terminate: bool = Field(
        False,
        description="End the session when the client takes the terminate action (false: the client says it "
        "would rather stop and the session runs on, as in PatientHub)",
    )
    carry_state: bool = Field(
        True,
        description="Start a session at the stage, beliefs and plans the previous one ended with (ours: "
        "ConsistentMI plays single sessions; false: every session starts afresh)",
    )


def _default_counsellors() -> list[str | CounsellorBinding]:
    return ["counsellor"]


class SimulationConfig(BaseModel):
    """Settings of the multi-session simulator."""

    model_config = ConfigDict(extra="forbid")

    sessions: int = Field(3, ge=1, le=20, description="Sessions per patient (the paper: 3)")
    # Left out of dumps when empty, so summaries of runs without it read as before.
    engine_sessions: dict[str, int] = Field(
        default_factory=dict,
        exclude_if=lambda d: not d,
        description="Ours: fewer sessions for some of `patient_engine` (ENGINE or ENGINE:ARM -> 1..sessions), e.g. "
        "the single-session baselines (Patient-Psi, MindEval v1) and PatientAct's one-session arms beside "
        "multi-session MindSim arcs in one run",
    )
    opening: Literal["patient", "counsellor"] = Field(
        "patient",
        description="Who speaks first: the patient's scenario opening message (MindSim), or a counsellor "
        "greeting the patient answers (PatientAct §4.2); every engine",
    )
    # Left out of dumps at 1, so the summaries of one-trial runs read as before trials existed.
    trials: int = Field(
        1,
        ge=1,
        le=50,
        exclude_if=lambda n: n == 1,
        description="Ours: run each arc this many times with the patient's and counsellor's sampling "
        "seeds moved on per trial, schedule and first scenario shared, so the spread measures sampling noise "
        "(1 = one run, ids and files as before trials existed)",
    )
    turn_cap: int = Field(
        30,
        ge=1,
        le=200,
        description="Max patient turns per session, opening message included (at least 2 when the "
        "patient opens: the scripted opening is not a simulated turn). `counsellor_replies` says the same in the "
        "papers' unit; set one of the two",
    )
    # Left out of dumps when unset, so the summaries of runs that set turn_cap read as before.
    counsellor_replies: int | None = Field(
        None,
        ge=1,
        le=200,
        exclude_if=lambda n: n is None,
        description="Max counsellor replies per session, each answered by the patient (the unit MindEval2's "
        "reference code counts in: 30 replies follow the patient's opening message). Sets turn_cap (replies + 1 "
        "when the patient opens, = replies when the counsellor does); set it or turn_cap, or both if they agree",
    )
    min_gap_hours: float = Field(6, ge=0, description="Shortest gap before a follow-up session")
    max_gap_hours: float = Field(336, gt=0, description="Longest gap before a follow-up session (14 days)")
    counsellors: list[str | CounsellorBinding] = Field(
        default_factory=_default_counsellors,
        description="Counsellors under test: role names ('counsellor', 'counsellor:NAME') or engine+model bindings",
    )
    max_commit_retries: int = Field(3, ge=0, le=10, description="Re-commits allowed after a rejected move")
    # Left out of dumps while off, so the summaries and hashes of runs that do not set it read as before.
    acceptable_moves_only: bool = Field(
        False,
        exclude_if=lambda v: v is False,
        description="On engines that answer through a JSON grammar (no native tool calls), each turn's commit_move "
        "schema lists only the moves the guard would accept that turn (none deeper than the patient's limit, not a "
        "move that would run too long), so a small model cannot spend its re-commits on a move that is turned back. "
        "Off under the mindeval2-reference preset, which keeps the paper's veto and re-commit",
    )
    max_todo_calls: int = Field(2, ge=0, le=5, description="Agenda tool calls per patient turn (0 turns them off)")
    agenda_tools: Literal["separate", "with_message"] = Field(
        "separate",
        description="How the MindSim patient is offered complete_todo / add_todo after its move: "
        "'separate' = a request of their own before the message is asked for (ours); 'with_message' = offered "
        "beside the words, the model calls one or speaks (MindEval2's reference code; native tool calling only, "
        "an engine without it keeps 'separate')",
    )
    max_message_retries: int = Field(2, ge=0, le=5, description="Re-asks when a patient/counsellor message is empty")
    max_same_move_run: int = Field(
        3, ge=0, description="Reject a primary move used this many turns running (0 = off); ours, for variety"
    )
    memory_max_entries: int = Field(30, ge=1, le=200, description="Cap on running-memory entries")
    memory_retries: int = Field(2, ge=0, le=5, description="Re-asks when the rewritten memory breaks a carry rule")
    message_max_tokens: int | None = Field(
        120, ge=8, description="Token cap on each patient message (small models loop otherwise)"
    )
    scenario_max_tokens: int | None = Field(
        900, ge=64, description="Token budget of one scenario JSON (the role's own max_tokens may be too small)"
    )
    memory_max_tokens: int | None = Field(1200, ge=64, description="Token budget of one memory rewrite")
    scenario_scale: float = Field(
        1.0,
        ge=0.25,
        le=1.0,
        description="Scale on the scenario writer's text limits (1 = full; ours: small models write every field "
        "to its limit, so this is what a scenario costs)",
    )
    agenda_plain: bool = Field(
        False,
        description="The agenda as MindEval2's reference code keeps it: the list shown without ids, the patient "
        "names items in its own words (the template's agenda_plain switch), each agenda call answered in a word "
        "without the open list, an unmatched completion kept as a done item of its own. Off (ours): items shown "
        "as [id] and every answer repeats what is still open",
    )
    message_fallback: str | None = Field(
        None,
        min_length=1,
        max_length=80,
        description="What the MindSim patient says when every re-ask of its message still came back unusable (not "
        "blank): None = the turn fails and with it the arc (ours); the mindeval2-reference preset says what its "
        "authors' code says",
    )
    return_reasoning: bool = Field(
        False,
        description="Counsellors get their own earlier reasoning back with their earlier replies "
        "(reasoning_content, thinking_blocks, reasoning_items, reasoning_details, as their server returned it), "
        "unless a counsellor's role or binding sets `return_reasoning` itself. Off (ours): earlier replies go back "
        "as words only",
    )
    wrap_up_reminder: int = Field(
        0,
        ge=0,
        le=10,
        description="The last N counsellor replies of a session are asked with a note of how many replies are left "
        "and to start wrapping up, on that request only (never stored, never seen by the patient or the judge); "
        "0 = no note (ours). The patientact-reference preset sets 2, as its authors' therapy session does",
    )
    split_inline_reasoning: bool = Field(
        True,
        description="Reasoning a counsellor writes into its reply's text (<think>…</think> and the other tag "
        "pairs in mindsim/data/harness_text.yaml) is split off before the patient and the judge see the reply and "
        "kept apart in the session row (counsellor_flags[].inline_reasoning), as MindEval2's reference code splits "
        "it; a reply that is only reasoning is re-asked like a blank one. Off: the reply goes on exactly as written",
    )
    message_context: Literal["full", "speech"] = Field(
        "full",
        description="What the MindSim patient sees when it writes its message: 'full' = the whole turn with its "
        "tool calls (the paper's protocol); 'speech' = the spoken exchange plus a note with the accepted move and "
        "cue (ours: for engines without native tool calls, whose small models copy the JSON tool turns in front of "
        "them instead of speaking)",
    )
    trim_cut_off: bool = Field(
        False,
        description="A patient message that ran into its token budget is ended at its last complete sentence "
        "(marked `trimmed` on the turn and counted) instead of re-asked; without a complete sentence it is still "
        "re-asked. Ours: saves re-asks with small models that run on",
    )
    final_memory: bool = Field(
        True,
        description="Rewrite the running memory after an arc's last session too (false: that rewrite, which no "
        "later session reads, is skipped and marked `skipped` in the record; ours, to save calls)",
    )
    patient_engine: str | list[str] = Field(
        DEFAULT_ENGINE,
        description="Patient engine(s) or variants (ENGINE:ARM, e.g. 'patientact:no_tg'), as registered in "
        "mindsim.patient_engines: 'mindsim', 'patientact', its arms, the baselines 'patient_psi', 'mindeval' and "
        "'annaagent', 'consistentmi', or a list to compare them",
    )
    counsellor_template: str = Field(
        "counsellor/system.jinja2",
        pattern=r"^[\w\-/]+\.jinja2$",
        description="Which shipped counsellor system prompt under prompts/ (variables: time_context, memory); the "
        "recipe's top-level `prompts:` replaces a template's content with your own file (docs/prompts.md)",
    )
    # Left out of dumps when it is the default, so the summaries and hashes of runs without presets read as before.
    preset: str | list[str] = Field(
        "ours",
        exclude_if=lambda v: v in ("ours", ["ours"], []),
        description="A named preset per engine (mindsim/data/presets.yaml): 'ours' (default), "
        "'mindeval2-reference' (MindSim as the MindEval2 authors' code runs it), 'patientact-reference', or a list; "
        "a preset fills in settings the recipe leaves unset and replaces the engine's data files (docs/simulator.md)",
    )
    patientact: PatientActConfig = Field(default_factory=PatientActConfig, description="PatientAct engine settings")
    baselines: BaselinesConfig = Field(
        default_factory=BaselinesConfig, description="Patient-Psi, MindEval and AnnaAgent engine settings"
    )
    # Left out of dumps at its defaults, so the summaries and hashes of runs without ConsistentMI read as before.
    consistentmi: ConsistentMIConfig = Field(
        default_factory=ConsistentMIConfig,
        exclude_if=lambda v: v == ConsistentMIConfig(),
        description="ConsistentMI engine settings",
    )
    pool_only: bool = Field(True, description="Simulate only profiles marked in_pool")
    benchmark_only: bool = Field(False, description="Simulate only profiles marked in_benchmark")
    max_patients: int | None = Field(None, ge=1, le=1_000_000, description="Use only the first N profiles (smoke runs)")

    # The preset settings the recipe replaced with its own (`preset_notes`); set while validating.
    _preset_overrides: list[Any] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _preset_settings(cls, data: Any, handler: Any) -> Any:
        from mindsimkit.mindsim.presets import apply_settings, overrides

        if not isinstance(data, dict):
            return handler(data)
        try:
            filled, replaced = apply_settings(data), overrides(data)
        except ValueError as exc:
            raise ValueError(f"preset: {exc}") from None
        config = handler(filled)
        config._preset_overrides = replaced
        return config

    @field_validator("patient_engine")
    @classmethod
    def _registered(cls, value: str | list[str]) -> str | list[str]:
        from mindsimkit.mindsim.engine_names import check

        for name in [value] if isinstance(value, str) else value:
            try:
                check(name)
            except ConfigError as exc:
                raise ValueError(str(exc).removeprefix("simulation.patient_engine: ")) from None
        return value

    @model_validator(mode="after")
    def _check(self) -> "SimulationConfig":
        if self.min_gap_hours > self.max_gap_hours:
            raise ValueError("min_gap_hours must not exceed max_gap_hours")
        if self.counsellor_replies is not None:
            # The loop counts patient turns: each counsellor reply is answered, plus the patient's opening message.
            turns = self.counsellor_replies + (self.opening == "patient")
            if "turn_cap" in self.model_fields_set and self.turn_cap != turns:
                raise ValueError(
                    f"turn_cap {self.turn_cap} and counsellor_replies {self.counsellor_replies} disagree "
                    f"(with opening: {self.opening}, {self.counsellor_replies} replies are turn_cap "
                    f"{turns}); set one of them"
                )
            self.turn_cap = turns
        if self.turn_cap < 2 and self.opening == "patient":
            raise ValueError(
                "turn_cap: 1 leaves only the scenario's scripted opening message when the patient opens; "
                "set turn_cap to 2 or more, or opening: counsellor (one greeting and one patient reply)"
            )
        names = [counsellor_name(c) for c in self.counsellors]
        if not names:
            raise ValueError("counsellors: name at least one counsellor")
        if len(set(names)) != len(names):
            raise ValueError(f"counsellors: names must be unique, got {names}")
        engines = self.patient_engines
        if not engines or len(set(engines)) != len(engines):
            raise ValueError(f"patient_engine: name each engine once, got {engines}")
        for kind, n in self.engine_sessions.items():
            if kind not in engines:
                raise ValueError(f"engine_sessions: '{kind}' is not one of patient_engine ({', '.join(engines)})")
            if not 1 <= n <= self.sessions:
                raise ValueError(f"engine_sessions.{kind}: {n} is not between 1 and sessions ({self.sessions})")
        from mindsimkit.mindsim.engine_names import split

        run = {split(e)[0] for e in engines}
        for name, engine in self.presets.items():
            if engine not in run:
                raise ValueError(
                    f"preset: '{name}' is a preset of engine '{engine}', which patient_engine does not "
                    f"run ({', '.join(engines)}); add the engine or drop the preset"
                )
        for c in self.counsellors:
            if isinstance(c, str) and c.split(":", 1)[0] != "counsellor":
                raise ValueError(
                    f"counsellors: '{c}' is not a counsellor role (write 'counsellor' or 'counsellor:NAME')"
                )
        return self

    def preset_notes(self) -> list[str]:
        """One line per preset setting this recipe replaced with its own value, for the run to print and record
        (a preset's value is never replaced silently)."""
        return [o.note() for o in self._preset_overrides]

    @property
    def replies_per_session(self) -> int:
        """Counsellor replies a session allows (the papers' unit): the turn cap less the patient's opening."""
        return self.turn_cap - (self.opening == "patient")

    def sessions_for(self, kind: str) -> int:
        """Sessions in each arc of patient engine `kind`."""
        return self.engine_sessions.get(kind, self.sessions)

    def sessions_per_patient(self) -> int:
        """Sessions one patient gets over every engine, counsellor and trial."""
        return len(self.counsellors) * self.trials * sum(self.sessions_for(k) for k in self.patient_engines)

    @property
    def offers_acceptable_moves_only(self) -> bool:
        """`acceptable_moves_only`, except under the MindSim reference preset (the paper's veto and re-commit)."""
        return self.acceptable_moves_only and "mindeval2-reference" not in self.presets

    @property
    def presets(self) -> dict[str, str]:
        """The chosen presets (`ours` left out), name → the engine each is about."""
        from mindsimkit.mindsim.presets import names, table

        return {n: str(table()[n].engine) for n in names(self.preset)}

    def preset_for(self, engine: str) -> str:
        """The preset engine `engine` (or any of its arms, ENGINE:ARM) runs under: a reference preset or 'ours'."""
        from mindsimkit.mindsim.engine_names import split
        from mindsimkit.mindsim.presets import OURS

        base = split(engine)[0]
        return next((n for n, e in self.presets.items() if e == base), OURS)

    def engine_presets(self) -> dict[str, str]:
        """Each engine the recipe runs (arms under their engine) → the preset it runs under, as run.json records it."""
        from mindsimkit.mindsim.engine_names import split

        return {base: self.preset_for(base) for base in dict.fromkeys(split(e)[0] for e in self.patient_engines)}

    @property
    def patient_engines(self) -> list[str]:
        """The patient engines this recipe runs, in the order given."""
        return [self.patient_engine] if isinstance(self.patient_engine, str) else list(self.patient_engine)

    @classmethod
    def from_section(cls, section: dict[str, Any] | None) -> "SimulationConfig":
        """Validate a recipe's `simulation:` dict; ConfigError names the offending field."""
        try:
            return cls.model_validate(section or {})
        except ValidationError as exc:
            details = format_validation_error(exc, prefix="simulation", sep="; ", plain=True)
            raise ConfigError(f"recipe simulation section invalid: {details}") from exc


def counsellor_name(c: str | CounsellorBinding) -> str:
    """Stable label of a counsellor: the role name, or the binding's name."""
    return c if isinstance(c, str) else c.name
