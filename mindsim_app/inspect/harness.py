"""What one inspect task runs on (MindEval2 §4.2 / App. D, PatientAct §4.2): the recipe with the task's
parameters applied, the patients of a profiles folder as samples, and the recipe's engines, started and checked
the first time a sample needs them.

A sample is one patient: its arc of sessions with the counsellor under test. Everything about the arc comes from
the recipe's `simulation:` section as `mindsim simulate` reads it, with the task's parameters in its place:
`patient_engine` (an engine or ENGINE:ARM), `sessions`, `replies` (counsellor replies per session, which sets
`turn_cap`), `preset`, `seed`. The counsellor under test is the eval's model, so the section's own counsellors
are not played (the recipe's `counsellor` role is still probed by preflight, as `mindsim simulate` probes it).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inspect_ai._util.error import PrerequisiteError
from inspect_ai.dataset import Sample
from inspect_ai.model import model_roles
from inspect_ai.model._model import active_model

from mindsimkit.judge.config import JudgeConfig
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.config import SEED_MAX
from mindsimkit.mindcore.errors import ConfigError, EngineError, UserError
from mindsimkit.mindcore.preflight import preflight
from mindsimkit.mindcore.recipe import Recipe
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.patient_engines import variant
from mindsimkit.mindsim.presets import OURS, table
from mindsimkit.mindsim.simulate import chosen_profiles
from mindsimkit.mindsim_app.inspect.engines import read_recipe, started
from mindsimkit.profilegen.dataset import iter_profiles
from mindsimkit.profilegen.schemas import Profile


@dataclass(frozen=True)
class TaskSettings:
    """The task's `-T` parameters."""

    profiles: str
    recipe: str = "quickstart"
    patient_engine: str = "mindsim"
    sessions: int | None = None
    replies: int | None = None
    preset: str | list[str] | None = None
    seed: int | None = None
    max_patients: int | None = None
    counsellor: str | None = None


class TaskArgumentError(ConfigError, PrerequisiteError):
    """A task argument (`-T`) the task cannot run with: a toolkit error whose one line inspect's command line
    prints as it is, since inspect prints a PrerequisiteError's message without a traceback (any other
    exception from a task function is printed with its whole traceback)."""

    def __init__(self, message: str) -> None:
        from rich.markup import escape

        ConfigError.__init__(self, message)
        # inspect prints it with rich's print: brackets in a path or value must not read as markup.
        self.message = escape(f"error: {self}")


# Counts a task argument may hold: (least, most); None for no bound beyond the recipe section's own.
_COUNTS: dict[str, tuple[int, int | None]] = {
    "sessions": (1, None),
    "replies": (1, None),
    "max_patients": (1, None),
    "seed": (0, SEED_MAX),
}


def _check_type(name: str, value: Any, kinds: tuple[type, ...], what: str) -> None:
    # inspect reads `-T` values as YAML: `-T sessions=two` arrives as text, `-T seed=true` as a boolean.
    if value is None or (isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)):
        return
    raise TaskArgumentError(f"-T {name}={value!r}: {type(value).__name__}, not {what}")


def check_settings(s: "TaskSettings") -> None:
    """Every `-T` argument checked before any file is read or engine started; TaskArgumentError names the first
    one at fault and how to write it."""
    for name in ("profiles", "recipe", "patient_engine", "counsellor"):
        _check_type(name, getattr(s, name), (str,), "text")
    for name, (least, most) in _COUNTS.items():
        value = getattr(s, name)
        _check_type(name, value, (int,), "a whole number")
        if value is not None and (value < least or (most is not None and value > most)):
            span = f"from {least} to {most}" if most is not None else f"{least} or more"
            raise TaskArgumentError(f"-T {name}={value}: out of range; give a whole number {span}")
    preset = s.preset
    if preset is not None and not (
        isinstance(preset, str) or (isinstance(preset, list) and all(isinstance(p, str) for p in preset))
    ):
        raise TaskArgumentError(f"-T preset={preset!r}: give a preset name or a list of names")
    if not s.profiles.strip() or not Path(s.profiles).expanduser().is_dir():
        raise TaskArgumentError(
            f"-T profiles={s.profiles!r}: not a folder; give the folder `mindsim profiles` wrote "
            "(it holds profiles.parquet)"
        )
    try:
        variant(s.patient_engine)
    except UserError as exc:
        raise TaskArgumentError(
            f"-T patient_engine={s.patient_engine!r}: {str(exc).removeprefix('simulation.patient_engine: ')}"
        ) from None
    counsellor_label("", s.counsellor)


def _presets_of(value: Any, engine: str) -> list[str]:
    """The recipe's presets that are about `engine` (a recipe's list may name presets of engines this task does
    not run, which the section would then refuse)."""
    names = [value] if isinstance(value, str) else list(value or [])
    return [n for n in names if n == OURS or (n in table() and table()[n].engine in (None, engine))]


def simulation_section(recipe: Recipe, s: TaskSettings) -> dict[str, Any]:
    """The recipe's `simulation:` section with the task's parameters applied, as a raw section (for preflight)."""
    section = dict(recipe.simulation)
    engine = variant(s.patient_engine).engine.name
    section["patient_engine"] = s.patient_engine
    section["counsellors"] = ["counsellor"]
    section["engine_sessions"] = {
        k: v for k, v in (section.get("engine_sessions") or {}).items() if k == s.patient_engine
    }
    section["preset"] = _presets_of(s.preset if s.preset is not None else section.get("preset"), engine) or OURS
    section["trials"] = 1  # inspect's epochs repeat an arc (`solver.epoch_trial`)
    if s.sessions is not None:
        section["sessions"] = s.sessions
    if s.replies is not None:
        # `turn_cap` counts patient turns: when the patient opens, its scripted opening is one of them.
        opening = SimulationConfig.from_section(section).opening
        section["turn_cap"] = s.replies + (1 if opening == "patient" else 0)
    if s.max_patients is not None:
        section["max_patients"] = s.max_patients
    return section


def counsellor_label(model_name: str, given: str | None = None) -> str:
    """The counsellor's name in session ids and reports: `given`, else the eval model's name without its provider,
    with characters a system name may not hold (`/`, spaces) as `_` (`mindsim/counsellor` → `counsellor`)."""
    if given:
        if not re.fullmatch(r"[\w.\-:]+", given):
            raise TaskArgumentError(f"-T counsellor={given!r}: use letters, digits and . _ - : only")
        return given
    name = model_name.split("/", 1)[1] if "/" in model_name else model_name
    return re.sub(r"[^\w.\-:]+", "_", name).strip("_") or "counsellor"


@dataclass
class Harness:
    """One task's recipe, settings and patients; its engines start (and pass preflight) at the first sample."""

    settings: TaskSettings
    recipe: Recipe = field(init=False)
    config: SimulationConfig = field(init=False)
    judge: JudgeConfig = field(init=False)
    seed: int = field(init=False)
    patients: list[Profile] = field(init=False)
    roles: set[str] = field(default_factory=set, init=False)  # the model roles the task's scorers bind
    _ready: tuple[Engines, SimulationConfig] | None = field(default=None, init=False)
    _lock: asyncio.Lock | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        check_settings(self.settings)
        try:
            self._load()
        except TaskArgumentError:
            raise
        except UserError as exc:
            # The recipe, its section with the task's arguments, or the profiles: the same line `mindsim` prints.
            raise TaskArgumentError(str(exc)) from None

    def _load(self) -> None:
        from mindsimkit.judge.cli import judge_section

        s = self.settings
        base = read_recipe(s.recipe)
        self.seed = base.seed if s.seed is None else s.seed
        section = simulation_section(base, s)
        self.config = SimulationConfig.from_section(section)
        self.recipe = base.model_copy(update={"simulation": section, "seed": self.seed})
        self.judge = judge_section(base)
        profiles = Path(s.profiles).expanduser()
        self.patients = chosen_profiles(iter_profiles(profiles, pool_only=self.config.pool_only), self.config)

    def samples(self) -> list[Sample]:
        """One sample per patient; its metadata holds the profile the arc is played from."""
        return [
            Sample(
                id=p.profile_id,
                input=f"Counselling sessions with patient {p.profile_id} ({self.config.sessions_for(self.kind)} "
                f"sessions, patient engine {self.kind})",
                metadata={
                    "profile_id": p.profile_id,
                    "archetype": p.style.archetype,
                    "main_problem": p.anchor.main_problem if p.anchor else None,
                    "profile": p.model_dump(mode="json"),
                },
            )
            for p in self.patients
        ]

    @property
    def kind(self) -> str:
        return self.settings.patient_engine

    async def ready(self, stages: set[str]) -> tuple[Engines, SimulationConfig]:
        """The started engines and the section with preflight's raised budgets, made once (in a worker thread:
        starting a server and probing engines are blocking calls)."""
        self.check_roles()
        if self._ready is None:
            if self._lock is None:
                self._lock = asyncio.Lock()
            async with self._lock:
                if self._ready is None:
                    self._ready = await asyncio.to_thread(self._start, stages)
        return self._ready

    def check_roles(self) -> None:
        """Refuse model roles this task has no use for (`--model-role patient=…` would otherwise be ignored
        without a word): one ConfigError line naming the roles it takes."""
        unknown = sorted(set(model_roles()) - self.roles)
        if unknown:
            raise ConfigError(
                f"--model-role {', '.join(unknown)}: not a role this task binds to an inspect model; it "
                f"takes {', '.join(sorted(self.roles)) or 'none'} (the judges of the recipe's judge "
                "section); the patient and the other simulator roles are the recipe's (-T recipe=…)"
            )

    def start_now(self, stages: set[str]) -> None:
        """Start the engines and run preflight now, while inspect builds the task, so that a recipe or engine
        problem stops `inspect eval` before any sample with one line and exit 1 (inspect prints a
        `PrerequisiteError` that way; an error inside a sample only marks the log's status). Done only inside an
        eval (a task built in Python before `eval()` starts its engines at its first sample, when the model roles
        are known)."""
        if active_model() is None:
            return
        try:
            self.check_roles()
            # inspect builds tasks inside its event loop; starting and probing the engines runs a loop of its own.
            with ThreadPoolExecutor(1) as pool:
                self._ready = pool.submit(self._start, stages).result()
        except (UserError, EngineError) as exc:
            raise PrerequisiteError(f"error: {exc}") from exc

    def _start(self, stages: set[str]) -> tuple[Engines, SimulationConfig]:
        engines = started(self.recipe)
        budgets = preflight(self.recipe, engines, stages).budgets
        return engines, budgets.apply("simulation", self.config) if budgets is not None else self.config
