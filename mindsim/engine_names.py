"""Which patient engines and arms exist, by name: the bottom of the simulator's engine layer.

Checking a recipe's `simulation.patient_engine`, splitting `ENGINE:ARM` and asking whether a raw recipe runs
an engine need names only, so they read the table (`mindsim/data/patient_engines.yaml`, the arms' data files)
and never load an engine's code. The registry (`mindsim.patient_engines`) loads the engine objects the table
names and adds the names of engines registered at run time. Nothing here imports another simulator module,
which is what keeps the simulator free of import cycles (tests/test_layers.py).
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mindsimkit.mindcore import yamlio
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.runlog import DEFAULT_ENGINE

__all__ = [
    "DEFAULT_ENGINE",
    "VARIANT_SEP",
    "Arm",
    "EngineEntry",
    "add",
    "builtin",
    "check",
    "known",
    "raw_names",
    "recipe_runs",
    "remove",
    "split",
]

VARIANT_SEP = ":"
ENGINE_NAME = re.compile(r"^[a-z][a-z0-9_\-]*$")
ARM_NAME = re.compile(r"^[a-z0-9_]+$")
TABLE = "patient_engines.yaml"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Arm(_Frozen):
    description: str = Field(min_length=1)
    settings: dict[str, bool | int | float | str] = Field(
        min_length=1, description="Overrides of the engine's settings section"
    )


class _ArmsFile(_Frozen):
    source: str
    version: str
    arms: dict[str, Arm] = Field(min_length=1)


class EngineEntry(_Frozen):
    impl: str = Field(pattern=r"^[\w.]+:\w+$", description="module:attribute of the engine object")
    arms: str | None = Field(None, description="Data file of the engine's arms, below mindsim/data/")


class _Table(_Frozen):
    source: str
    version: str
    engines: dict[str, EngineEntry] = Field(min_length=1)


def _read(name: str, model: type[BaseModel]) -> Any:
    path = resources.files("mindsimkit.mindsim").joinpath("data", name)
    try:
        return model.model_validate(yamlio.safe_load(path.read_text(encoding="utf-8")))
    except Exception as exc:
        raise ConfigError(f"mindsim/data/{name} is invalid: {exc}") from exc


@lru_cache(maxsize=1)
def builtin() -> dict[str, EngineEntry]:
    """The shipped engines by name."""
    return dict(_read(TABLE, _Table).engines)


@lru_cache(maxsize=None)
def arms_of(engine: str) -> dict[str, Arm]:
    """A built-in engine's arms (arm → settings and description); none for an engine without an arms file."""
    entry = builtin().get(engine)
    return dict(_read(entry.arms, _ArmsFile).arms) if entry and entry.arms else {}


# Engines registered at run time (a user's own engine), with their arm names: the registry keeps these current.
_ADDED: dict[str, set[str]] = {}


def add(engine: str, arm: str | None = None) -> None:
    _ADDED.setdefault(engine, set())
    if arm is not None:
        _ADDED[engine].add(arm)


def remove(engine: str) -> None:
    _ADDED.pop(engine, None)


def known() -> list[str]:
    """Every engine and `ENGINE:ARM` name a recipe may use, sorted."""
    out = set()
    for engine in builtin():
        out.add(engine)
        out.update(f"{engine}{VARIANT_SEP}{arm}" for arm in arms_of(engine))
    for engine, arms in _ADDED.items():
        out.add(engine)
        out.update(f"{engine}{VARIANT_SEP}{arm}" for arm in arms)
    return sorted(out)


def check(name: str) -> str:
    """`name` if it is a known engine or arm; ConfigError listing the known names otherwise."""
    if name not in known():
        raise ConfigError(
            f"simulation.patient_engine: unknown patient engine '{name}'; registered: "
            f"{', '.join(known())} (an engine's variants are written ENGINE{VARIANT_SEP}ARM)"
        )
    return name


def split(name: str) -> tuple[str, str | None]:
    """`ENGINE:ARM` → (ENGINE, ARM); a plain engine name → (name, None)."""
    engine, _, arm = name.partition(VARIANT_SEP)
    return engine, arm or None


def raw_names(recipe: Any) -> list[str]:
    """The names a recipe's raw (not yet validated) `simulation.patient_engine` lists; the default when unset."""
    raw = (getattr(recipe, "simulation", None) or {}).get("patient_engine", DEFAULT_ENGINE)
    listed = [raw] if isinstance(raw, str) else list(raw or [])
    return [n for n in listed if isinstance(n, str)]


def recipe_runs(recipe: Any, engine: str) -> bool:
    """Whether the recipe runs `engine` (itself or any of its arms)."""
    return any(split(n)[0] == engine for n in raw_names(recipe))
