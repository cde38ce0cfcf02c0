"""Patient engines behind one interface, and the registry that names them (issue 17, item 3).

A patient engine plays the patient of a session; the session loop, memory, scenarios and the record around it
are the simulator's and the same for every engine (MindEval2/MindSim §4.2; PatientAct §3.3 plugs in here as
a second engine). An engine is a `PatientEngine` subclass, registered once by name (`register`); everything
engine-specific is a method or attribute of it, so no other module asks which engine it is holding:

- `participant(talk_start)`: the per-session patient (`Participant`: `open`, `turn`, `history`, `tokens`),
  built from the same inputs for every engine (profile, plan, scenario, memory, agenda; the counsellor's
  message arrives through `turn`), returning `PatientTurn`s (plus the engine's own turn field);
- `prepare` / `preparation_store` / `stored_preparation`: work done once per patient, shared by every
  counsellor and every variant, and checkpointed once (PatientAct: the profile decomposition);
- `carry`: state taken from one session into the next (PatientAct: starting trust);
- `roles` (recipe role → key in `Roles.extra` and in `SessionRecord.engines`) and `role_schemas()` (its
  structured outputs, `mindcore.budget.RoleSchema` entries the stage registration reads);
- `record_fields(talk)`: its own `SessionRecord` fields; `prompt_names()`: its templates for
  `SessionRecord.prompts`; `card_section(rows)`: its part of the dataset card; `check_profiles`: preflight.

**Variants** are registered arms of an engine (`register_variant`): named `ENGINE:ARM` (e.g.
`patientact:no_tg`), they override settings of the engine's config section (`settings_section`) for their
sessions and flow wherever an engine name does (recipe lists, session ids, checkpoints, records, transcript
rows), while sharing the engine's per-patient preparation: a variant may not change a setting the
preparation reads (`preparation_settings`). The plain engine name is the arm with no overrides.

The built-in engines (`BUILTIN`) are imported on first use of the registry, so importing this module stays
cheap and free of cycles. docs/architecture.md "Adding a patient engine" shows the smallest engine.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Mapping, Protocol, Sequence

from mindcore.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover - typing only
    from mindcore.budget import RoleSchema
    from mindsim.arc import Arc, Roles, SessionInput, Talk
    from mindsim.config import SimulationConfig
    from mindsim.records import PatientTurn, SessionRecord
    from mindsim.schedule import SessionPlan
    from profilegen.schemas import Profile

__all__ = [
    "BUILTIN", "DEFAULT_ENGINE", "VARIANT_SEP", "Participant", "PatientEngine", "PreparationStore", "TalkStart",
    "Variant",
    "engine_roles", "engines_of", "names", "recipe_runs", "recipe_variants", "register", "register_variant",
    "role_schemas", "unregister", "variant",
]

# The engine a recipe runs when it names none, and the one rows written before `patient_engine` existed were
# played by.
DEFAULT_ENGINE = "mindsim"
VARIANT_SEP = ":"
BUILTIN = ("mindsim.patient_engines.mindsim_engine", "mindsim.patientact.engine", "mindsim.baselines.patient_psi",
           "mindsim.baselines.mindeval")
_ARM = re.compile(r"^[a-z0-9_]+$")
_ENGINE = re.compile(r"^[a-z][a-z0-9_\-]*$")


class Participant(Protocol):
    """The patient of one session, as the session loop drives it."""

    history: list[dict[str, Any]]  # patient-side messages; history[0] is the system prompt as sent
    tokens: Any  # `.prompt` / `.completion` counts of its calls

    def open(self, opening_message: str, rejected_openings: list[Any] = ()) -> "PatientTurn": ...

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

    async def prepare(self, profile: "Profile", seed: int, roles: "Roles", config: "SimulationConfig",
                      store: PreparationStore | None = None) -> Any:
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
        section = getattr(config, section_name)
        merged = type(section).model_validate({**section.model_dump(), **self.settings})
        return config.model_copy(update={section_name: merged})


_ENGINES: dict[str, PatientEngine] = {}
_VARIANTS: dict[str, Variant] = {}
_loaded = False


def _ensure() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for module in BUILTIN:
            importlib.import_module(module)


def register(engine: PatientEngine) -> PatientEngine:
    """Register `engine` under `engine.name` (re-registering a name replaces it and drops its arms)."""
    name = engine.name
    if not _ENGINE.match(name):
        raise ValueError(f"patient engine name '{name}' must match {_ENGINE.pattern}")
    unregister(name)
    _ENGINES[name] = engine
    _VARIANTS[name] = Variant(name, engine, description=engine.description)
    return engine


def register_variant(engine: str, arm: str, settings: Mapping[str, Any], description: str = "") -> Variant:
    """Register `ENGINE:ARM`, the engine with `settings` applied to its config section."""
    base = _ENGINES.get(engine)
    if base is None:
        raise ValueError(f"variant '{engine}{VARIANT_SEP}{arm}': engine '{engine}' is not registered")
    if not _ARM.match(arm):
        raise ValueError(f"variant '{engine}{VARIANT_SEP}{arm}': the arm must match {_ARM.pattern}")
    if base.settings_section is None:
        raise ValueError(f"variant '{engine}{VARIANT_SEP}{arm}': engine '{engine}' has no settings to vary")
    shared = sorted(set(settings) & base.preparation_settings)
    if shared:
        raise ValueError(f"variant '{engine}{VARIANT_SEP}{arm}' sets {', '.join(shared)}, which the engine's "
                         "per-patient preparation reads; its arms share one preparation, so they may not differ there")
    from mindsim.config import SimulationConfig

    section = SimulationConfig.model_fields[base.settings_section].annotation
    section.model_validate(dict(settings))  # a misspelt or mistyped switch fails at registration
    v = Variant(f"{engine}{VARIANT_SEP}{arm}", base, arm, MappingProxyType(dict(settings)), description)
    _VARIANTS[v.name] = v
    return v


def unregister(name: str) -> None:
    """Remove an engine and its arms (tests register throwaway engines)."""
    if _ENGINES.pop(name, None) is not None:
        for key in [k for k, v in _VARIANTS.items() if v.engine.name == name]:
            del _VARIANTS[key]


def names() -> list[str]:
    """Every registered engine and variant name, sorted."""
    _ensure()
    return sorted(_VARIANTS)


def variant(name: str) -> Variant:
    """The engine or variant registered as `name`; ConfigError listing the registered names otherwise."""
    _ensure()
    found = _VARIANTS.get(name)
    if found is None:
        raise ConfigError(f"simulation.patient_engine: unknown patient engine '{name}'; registered: "
                          f"{', '.join(names())} (an engine's variants are written ENGINE{VARIANT_SEP}ARM)")
    return found


def engines_of(variant_names: Iterable[str]) -> list[PatientEngine]:
    """The distinct engines behind `variant_names`, in first-seen order (arms share their engine)."""
    out: dict[str, PatientEngine] = {}
    for n in variant_names:
        e = variant(n).engine
        out.setdefault(e.name, e)
    return list(out.values())


def engine_roles(variant_names: Iterable[str]) -> dict[str, str]:
    """Extra recipe roles of the engines behind `variant_names` (recipe role → `Roles.extra` key)."""
    out: dict[str, str] = {}
    for e in engines_of(variant_names):
        out.update(e.roles)
    return out


def recipe_variants(recipe: Any) -> list[Variant]:
    """The variants a recipe's raw `simulation.patient_engine` names (the default when unset). Read before
    the section is validated (budgets are fitted first), so names that are not registered are left out:
    validating the section reports them."""
    raw = (getattr(recipe, "simulation", None) or {}).get("patient_engine", DEFAULT_ENGINE)
    listed = [raw] if isinstance(raw, str) else list(raw or [])
    _ensure()
    return [_VARIANTS[n] for n in listed if isinstance(n, str) and n in _VARIANTS]


def recipe_runs(recipe: Any, engine: str) -> bool:
    """Whether the recipe runs `engine` (itself or any of its arms)."""
    return any(v.engine.name == engine for v in recipe_variants(recipe))


def prompt_estimates() -> dict[str, Any]:
    """Every registered engine's own roles' prompt estimates, for the simulator's registration."""
    _ensure()
    return {role: est for e in _ENGINES.values() for role, est in e.prompt_estimates().items()}


def role_schemas() -> list["RoleSchema"]:
    """The structured outputs of every registered engine, for the simulator's budget registration."""
    _ensure()
    return [entry for e in _ENGINES.values() for entry in e.role_schemas()]
