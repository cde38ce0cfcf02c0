"""Patient engines behind one interface, and the registry that names them, so no other module asks
which engine it holds.

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

Three modules, so that nothing imports in a circle: the names (`mindsim.engine_names`: the table of built-in
engines in `mindsim/data/patient_engines.yaml` and their arms' data files, read without loading any engine), the
interface (`mindsim.patient_engines.base`, which engine modules import) and this registry, which loads the
engine objects the table names on first use and registers the arms the table lists. An engine module never
registers itself; a user's own engine is registered with `register(MyEngine())`. docs/architecture.md "Adding a
patient engine" shows the smallest engine.
"""

from __future__ import annotations

import importlib
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindsim import engine_names
from mindsimkit.mindsim.engine_names import ARM_NAME, DEFAULT_ENGINE, ENGINE_NAME, VARIANT_SEP, recipe_runs
from mindsimkit.mindsim.patient_engines.base import Participant, PatientEngine, PreparationStore, TalkStart, Variant

if TYPE_CHECKING:  # pragma: no cover - typing only
    from mindsimkit.mindcore.budget import RoleSchema

__all__ = [
    "DEFAULT_ENGINE",
    "VARIANT_SEP",
    "Participant",
    "PatientEngine",
    "PreparationStore",
    "TalkStart",
    "Variant",
    "engine_roles",
    "engines_of",
    "names",
    "recipe_runs",
    "recipe_variants",
    "register",
    "register_variant",
    "scenario_frame",
    "role_schemas",
    "unregister",
    "variant",
]

_ENGINES: dict[str, PatientEngine] = {}
_VARIANTS: dict[str, Variant] = {}
_loaded = False


def _ensure() -> None:
    """Load the table's engines and register their arms (once per process)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for name, entry in engine_names.builtin().items():
        module, _, attr = entry.impl.partition(":")
        engine = getattr(importlib.import_module(module), attr)
        if engine.name != name:
            raise ConfigError(
                f"mindsim/data/{engine_names.TABLE}: '{name}' names {entry.impl}, whose engine is "
                f"called '{engine.name}'"
            )
        _add(engine)
        for arm, spec in engine_names.arms_of(name).items():
            register_variant(name, arm, spec.settings, spec.description)


def _add(engine: PatientEngine) -> PatientEngine:
    name = engine.name
    if not ENGINE_NAME.match(name):
        raise ValueError(f"patient engine name '{name}' must match {ENGINE_NAME.pattern}")
    unregister(name)
    _ENGINES[name] = engine
    _VARIANTS[name] = Variant(name, engine, description=engine.description)
    if name not in engine_names.builtin():
        engine_names.add(name)
    return engine


def register(engine: PatientEngine) -> PatientEngine:
    """Register `engine` under `engine.name` (re-registering a name replaces it and drops its arms)."""
    _ensure()
    return _add(engine)


def register_variant(engine: str, arm: str, settings: Mapping[str, Any], description: str = "") -> Variant:
    """Register `ENGINE:ARM`, the engine with `settings` applied to its config section."""
    base = _ENGINES.get(engine)
    if base is None:
        raise ValueError(f"variant '{engine}{VARIANT_SEP}{arm}': engine '{engine}' is not registered")
    if not ARM_NAME.match(arm):
        raise ValueError(f"variant '{engine}{VARIANT_SEP}{arm}': the arm must match {ARM_NAME.pattern}")
    if base.settings_section is None:
        raise ValueError(f"variant '{engine}{VARIANT_SEP}{arm}': engine '{engine}' has no settings to vary")
    shared = sorted(set(settings) & base.preparation_settings)
    if shared:
        raise ValueError(
            f"variant '{engine}{VARIANT_SEP}{arm}' sets {', '.join(shared)}, which the engine's "
            "per-patient preparation reads; its arms share one preparation, so they may not differ there"
        )
    from pydantic import BaseModel

    from mindsimkit.mindsim.config import SimulationConfig

    section = SimulationConfig.model_fields[base.settings_section].annotation
    if not (isinstance(section, type) and issubclass(section, BaseModel)):
        raise ValueError(f"engine '{engine}': simulation.{base.settings_section} is not a settings section")
    section.model_validate(dict(settings))  # a misspelt or mistyped switch fails at registration
    v = Variant(f"{engine}{VARIANT_SEP}{arm}", base, arm, MappingProxyType(dict(settings)), description)
    _VARIANTS[v.name] = v
    if engine not in engine_names.builtin() or arm not in engine_names.arms_of(engine):
        engine_names.add(engine, arm)
    return v


def unregister(name: str) -> None:
    """Remove an engine and its arms (tests register throwaway engines)."""
    if _ENGINES.pop(name, None) is not None:
        for key in [k for k, v in _VARIANTS.items() if v.engine.name == name]:
            del _VARIANTS[key]
        engine_names.remove(name)


def names() -> list[str]:
    """Every registered engine and variant name, sorted."""
    _ensure()
    return sorted(_VARIANTS)


def variant(name: str) -> Variant:
    """The engine or variant registered as `name`; ConfigError listing the registered names otherwise."""
    _ensure()
    found = _VARIANTS.get(name)
    if found is None:
        raise ConfigError(
            f"simulation.patient_engine: unknown patient engine '{name}'; registered: "
            f"{', '.join(names())} (an engine's variants are written ENGINE{VARIANT_SEP}ARM)"
        )
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


def scenario_frame(config: Any) -> str:
    """How the first-scenario writer frames the first meeting: "session" (a counselling session, spoken) when
    PatientAct's `frame: session` is set and every engine of the run plays a client in a session
    (`PatientEngine.session_client`), else "chat" (a first conversation in an app, typed). The first scenario is
    shared by every engine of a run, so one engine in the app frame keeps it."""
    in_session = all(e.session_client for e in engines_of(config.patient_engines))
    return "session" if config.patientact.frame == "session" and in_session else "chat"


def recipe_variants(recipe: Any) -> list[Variant]:
    """The variants a recipe's raw `simulation.patient_engine` names (the default when unset). Read before
    the section is validated (budgets are fitted first), so names that are not registered are left out:
    validating the section reports them."""
    _ensure()
    return [_VARIANTS[n] for n in engine_names.raw_names(recipe) if n in _VARIANTS]


def prompt_estimates() -> dict[str, Any]:
    """Every registered engine's own roles' prompt estimates, for the simulator's registration."""
    _ensure()
    return {role: est for e in _ENGINES.values() for role, est in e.prompt_estimates().items()}


def role_schemas() -> list["RoleSchema"]:
    """The structured outputs of every registered engine, for the simulator's budget registration."""
    _ensure()
    return [entry for e in _ENGINES.values() for entry in e.role_schemas()]
