"""Simulation presets (`simulation.preset`): named settings and data files that make an engine run as a paper's
authors ran it, beside the toolkit's own defaults (`ours`).

The table is data (`mindsim/data/presets.yaml`); this module checks names, fills a recipe section with a preset's
settings (the recipe's own values win) and tells an engine which of its data files a preset replaces. Like
`mindsim.engine_names`, it imports no simulator module, so the config can use it without a cycle.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mindsimkit.mindcore import yamlio
from mindsimkit.mindcore.config import deep_merge
from mindsimkit.mindcore.errors import ConfigError

__all__ = ["OURS", "Override", "Preset", "apply_settings", "check_names", "data_file", "names", "overrides", "table"]

OURS = "ours"
TABLE = "presets.yaml"


class Preset(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str = Field(min_length=1)
    engine: str | None = Field(description="The patient engine the preset is about (None: `ours`, every engine)")
    paper: str | None = None
    source: str = Field(min_length=1)
    settings: dict[str, Any] = Field(default_factory=dict, description="`simulation:` settings the preset fills in")
    data: dict[str, str] = Field(default_factory=dict, description="data key → file below mindsim/data/presets/")


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str
    version: str
    presets: dict[str, Preset] = Field(min_length=1)


@lru_cache(maxsize=1)
def table() -> dict[str, Preset]:
    path = resources.files("mindsimkit.mindsim").joinpath("data", TABLE)
    try:
        presets = _Table.model_validate(yamlio.safe_load(path.read_text(encoding="utf-8"))).presets
    except Exception as exc:
        raise ConfigError(f"mindsim/data/{TABLE} is invalid: {exc}") from exc
    if OURS not in presets:
        raise ConfigError(f"mindsim/data/{TABLE} is invalid: it must define the default preset '{OURS}'")
    return dict(presets)


def names(value: str | list[str] | None) -> list[str]:
    """A recipe's `simulation.preset` as a list of names, `ours` dropped (it changes nothing)."""
    given = [value] if isinstance(value, str) else list(value or [])
    return [n for n in given if n != OURS]


def check_names(value: str | list[str] | None) -> list[str]:
    """The chosen presets, checked: each known, named once, at most one per engine. ValueError says which."""
    chosen = names(value)
    known = table()
    for name in chosen:
        if name not in known:
            raise ValueError(f"unknown preset '{name}'; known: {', '.join(sorted(known))}")
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"name each preset once, got {chosen}")
    by_engine: dict[str, str] = {}
    for name in chosen:
        engine = known[name].engine
        if engine in by_engine:
            raise ValueError(f"'{by_engine[engine]}' and '{name}' are both presets of engine '{engine}'; pick one")
        by_engine[str(engine)] = name
    return chosen


# Fields that set one thing in different units: a recipe that sets any of them sets that thing, so a preset's value
# of another one in the group is not filled in (and is reported as overridden), and two presets that fill the group
# differently clash. Session length: `counsellor_replies` (the papers' unit) or `turn_cap` (patient turns, the
# patient's opening message included).
SAME_SETTING: tuple[frozenset[str], ...] = (frozenset({"turn_cap", "counsellor_replies"}),)


def _group(key: str) -> frozenset[str]:
    return next((g for g in SAME_SETTING if key in g), frozenset({key}))


def _clashes(a: dict[str, Any], b: dict[str, Any], where: str = "") -> list[str]:
    found = []
    for key in a.keys() & b.keys():
        if isinstance(a[key], dict) and isinstance(b[key], dict):
            found += _clashes(a[key], b[key], f"{where}{key}.")
        elif a[key] != b[key]:
            found.append(f"{where}{key}")
    if not where:  # one setting written in two units by two presets
        for group in SAME_SETTING:
            ka, kb = sorted(group & a.keys()), sorted(group & b.keys())
            if ka and kb and ka != kb:
                found.append("/".join(sorted(group)))
    return found


def _fields(section: dict[str, Any], where: str = "") -> set[str]:
    out = set()
    for key, value in section.items():
        out |= {f"{where}{k}" for k in _group(key)}
        if isinstance(value, dict):
            out |= _fields(value, f"{where}{key}.")
    return out


def _without(settings: dict[str, Any], own: set[str], where: str = "") -> dict[str, Any]:
    """A preset's settings less every field the recipe sets itself (a group member counts for the group)."""
    out = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            out[key] = _without(value, own, f"{where}{key}.")
        elif f"{where}{key}" not in own:
            out[key] = value
    return out


class Override(BaseModel):
    """A setting a preset fills that the recipe sets itself (to another value): the recipe's value runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    preset: str
    field: str = Field(description="The preset's field, dotted for nested sections")
    preset_value: Any
    recipe_field: str = Field(description="The field the recipe set (another unit of the same setting, or the same)")
    recipe_value: Any

    def note(self) -> str:
        ours = (
            f"{self.recipe_field} {self.recipe_value}"
            if self.recipe_field == self.field
            else f"{self.recipe_field} {self.recipe_value} (in place of {self.field})"
        )
        return (
            f"simulation.preset {self.preset}: the recipe's {ours} is used, not the preset's {self.field} "
            f"{self.preset_value}"
        )


def _lookup(section: dict[str, Any], dotted: str) -> tuple[bool, Any]:
    node: Any = section
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def overrides(section: dict[str, Any]) -> list[Override]:
    """The settings of the section's presets that its own values replace, each with both values. A run reports
    them (`SimulationConfig.preset_notes`), so a shortened smoke run under a preset says it is one."""
    raw = section.get("preset")
    if not (isinstance(raw, str) or (isinstance(raw, list) and all(isinstance(n, str) for n in raw))):
        return []
    known = table()
    found = []
    for name in check_names(raw):
        for field in sorted(_fields(known[name].settings)):
            has, value = _lookup(known[name].settings, field)
            if not has or isinstance(value, dict):
                continue
            head, _, leaf = field.rpartition(".")
            for other in sorted(_group(leaf)):
                given, mine = _lookup(section, f"{head}.{other}" if head else other)
                if given and (other != leaf or mine != value):
                    found.append(
                        Override(
                            preset=name,
                            field=field,
                            preset_value=value,
                            recipe_field=f"{head}.{other}" if head else other,
                            recipe_value=mine,
                        )
                    )
    return found


def apply_settings(section: dict[str, Any]) -> dict[str, Any]:
    """A raw `simulation:` section with its presets' settings filled in under the recipe's own values (a recipe
    that sets a setting in another unit — `turn_cap` for `counsellor_replies` — sets it too).

    Two presets that fill one field differently are refused unless the recipe sets that field itself (then the
    recipe's value is the one that runs, for both)."""
    raw = section.get("preset")
    if not (isinstance(raw, str) or (isinstance(raw, list) and all(isinstance(n, str) for n in raw))):
        return section  # the field's own type check reports it
    chosen = check_names(raw)
    if not chosen:
        return section
    known = table()
    own = _fields(section)
    filled: dict[str, Any] = {}
    for name in chosen:
        clash = [f for f in _clashes(filled, known[name].settings) if not set(f.split("/")) & own]
        if clash:
            raise ValueError(f"presets {chosen} set {', '.join(sorted(clash))} differently; set it in the recipe")
        filled = deep_merge(filled, known[name].settings)
    return deep_merge(_without(filled, own), section)


def data_file(preset: str | None, key: str) -> str | None:
    """The file (below mindsim/data/presets/) that `preset` puts in place of the engine's data `key`; None when
    the preset keeps the engine's own."""
    if not preset or preset == OURS:
        return None
    return table()[preset].data.get(key)
