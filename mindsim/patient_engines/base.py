"""The patient engine interface: what every engine implements and what the session loop
holds. Kept apart from the registry (`mindsim.patient_engines`) and the name table (`mindsim.engine_names`), so
an engine module imports only this and the registry can load engines without any module importing it back.
The full contract is documented in the package's docstring.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Mapping, Protocol, Sequence
from types import MappingProxyType

if TYPE_CHECKING:  # pragma: no cover - typing only
    from mindsimkit.mindcore.budget import RoleSchema
    from mindsimkit.mindsim.arc import Arc, Roles, SessionInput, Talk
    from mindsimkit.mindsim.config import SimulationConfig
    from mindsimkit.mindsim.records import PatientTurn, SessionRecord
    from mindsimkit.mindsim.schedule import SessionPlan
    from mindsimkit.profilegen.schemas import Profile

__all__ = ["Participant", "PatientEngine", "PreparationStore", "TalkStart", "Variant"]


class Participant(Protocol):
    """The patient of one session, as the session loop drives it."""

    history: list[dict[str, Any]]  # patient-side messages; history[0] is the system prompt as sent
    tokens: Any  # `.prompt` / `.completion` counts of its calls

    def open(self, opening_message: str, rejected_openings: Sequence[Any] = ()) -> "PatientTurn": ...

    async def turn(self, index: int, counsellor_text: str) -> "PatientTurn": ...


class PreparationStore(Protocol):
    """Checkpoints of an engine's per-patient preparation: the first finished copy of a key wins."""

    def load(self, key: str) -> Any: ...

    def save(self, record: Any) -> Any: ...

    @property
    def duplicates(self) -> int: ...


class PatientEngine:
    """One way of playing the patient. Subclass, set `name`, implement `participant`, call `register`."""

    name: ClassVar[str]
    description: ClassVar[str] = ""
    # Extra recipe roles the engine calls (recipe role → key in `Roles.extra` and `SessionRecord.engines`).
    roles: ClassVar[Mapping[str, str]] = MappingProxyType({})
    # The `SimulationConfig` field holding the engine's settings, which variants override (None: no variants).
    settings_section: ClassVar[str | None] = None
    # Keys of that section the per-patient preparation reads: variants share one preparation, so may not set them.
    preparation_settings: ClassVar[frozenset[str]] = frozenset()
    # True when the engine makes a per-patient preparation (`prepare`), checkpointed once per patient.
    prepares: ClassVar[bool] = False
    # Session ids without the engine in their key: the engine's run folders predate patient engines.
    legacy_session_ids: ClassVar[bool] = False
    # True when the engine reads a profile's persona, demographics, anchor or structured formulation, which an
    # imported profile lacks (`Profile.layered`): such profiles are refused before any model call.
    reads_layers: ClassVar[bool] = True
    # True when the engine also plays a situation-seeded PatientAct profile (`Profile.situation_profile`), which has
    # none of those parts but its own record of them.
    reads_situations: ClassVar[bool] = False
    # True when the engine's `patient` role calls tools every turn (MindSim's commit_move): preflight checks how
    # those calls travel on its engine (`mindsim.stage.tool_roles`).
    calls_tools: ClassVar[bool] = False
    # True when the engine plays a client in a counselling session rather than someone typing into an app, so a
    # run of such engines only can have its first scenarios written for a session (`scenario_frame`).
    session_client: ClassVar[bool] = False

    # -- one session -------------------------------------------------------------------------------------
    def participant(self, talk: "TalkStart") -> Participant:
        raise NotImplementedError

    def record_fields(self, talk: "Talk") -> dict[str, Any]:
        """The engine's own `SessionRecord` fields (stored names, e.g. `patientact`); none by default."""
        return {}

    def prompt_names(self) -> list[str]:
        """Templates this engine renders, hashed into `SessionRecord.prompts`."""
        return []

    # -- across sessions and per patient -----------------------------------------------------------------
    def carry(self, plan: "SessionPlan", previous: "SessionRecord | None", config: "SimulationConfig") -> Any:
        """State the session `plan` starts from, given the arc's previous session (None for the first)."""
        return None

    def preparation_store(self, out: Any) -> PreparationStore | None:
        """Where a run folder keeps this engine's per-patient preparation (None: nothing to checkpoint)."""
        return None

    async def prepare(
        self,
        profile: "Profile",
        seed: int,
        roles: "Roles",
        config: "SimulationConfig",
        store: PreparationStore | None = None,
    ) -> Any:
        """The patient's preparation, from `store` when it holds it, else made (and saved there)."""
        return None

    def stored_preparation(self, record: "SessionRecord") -> Any:
        """The preparation a checkpointed session of this engine was played with (for a resumed arc)."""
        return None

    # -- preflight, budgets, cards -----------------------------------------------------------------------
    def check_profiles(self, profiles: Sequence["Profile"]) -> None:
        """Raise `InputError` before any LLM call if a profile cannot be played by this engine."""

    def role_schemas(self) -> list["RoleSchema"]:
        """Structured outputs of this engine's roles, active only when a recipe runs the engine."""
        return []

    def prompt_estimates(self) -> dict[str, Any]:
        """Its own roles' largest-prompt estimates (role → `estimate(inp, sizer) -> PromptSize`) for preflight's
        context check; preflight asks only for the roles a recipe uses."""
        return {}

    def message_prompt(self, inp: Any, sz: Any, settings: Mapping[str, Any] | None = None) -> Any:
        """Its patient's message request at a session's last turn (a `PromptSize`; `inp` and `sz` as a prompt
        estimate takes them, `settings` a variant's) for `mindsim plan`; None: sized as the registered `patient`
        estimate, MindSim's, the largest."""
        return None

    def card_section(self, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
        """This engine's part of the dataset card, from its session rows (dicts of the sessions table).
        `record_fields: True` in it means the rows carry engine fields the card must explain."""
        return None


@dataclass(frozen=True)
class TalkStart:
    """What an engine builds a session's participant from: the arc, the session's input, its id, the
    session's agenda and its config (the variant's settings applied)."""

    arc: "Arc"
    inp: "SessionInput"
    sid: str
    agenda: Any
    config: "SimulationConfig"


@dataclass(frozen=True)
class Variant:
    """A registered name: an engine, and for an arm, the settings it overrides."""

    name: str
    engine: PatientEngine
    arm: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""

    @property
    def session_key(self) -> str:
        """What the variant adds to a session id's key ("" for an engine whose ids predate engines)."""
        return "" if self.engine.legacy_session_ids and self.arm is None else f"|{self.name}"

    def session_config(self, config: "SimulationConfig") -> "SimulationConfig":
        """`config` with this arm's settings applied to the engine's section (unchanged for a plain engine)."""
        if not self.settings:
            return config
        section_name = self.engine.settings_section
        if section_name is None:  # `variant` refuses settings for an engine without a section
            raise ValueError(f"variant '{self.name}': engine '{self.engine.name}' has no settings to vary")
        section = getattr(config, section_name)
        merged = type(section).model_validate({**section.model_dump(), **self.settings})
        return config.model_copy(update={section_name: merged})
