"""Recipe files (YAML): name, seed, engines, roles, and one section per stage. This module validates
the parts every package shares; each package validates its own section with its own config model,
so `validation` can read a recipe without importing the simulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mindcore.config import EnginesConfig, EngineSpec, RoleSpec
from mindcore.errors import ConfigError

C = TypeVar("C", bound=BaseModel)

STAGE_SECTIONS = ("profiles", "simulation", "validation", "judge", "output")


class Recipe(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., description="Short name recorded in provenance")
    description: str = ""
    seed: int = Field(0, description="Master seed; every stage derives its own from it")
    engines: dict[str, EngineSpec] = Field(..., description="Engines by name")
    roles: dict[str, RoleSpec] = Field(..., description="Role → engine binding and sampling")
    profiles: dict[str, Any] = Field(default_factory=dict)
    simulation: dict[str, Any] = Field(default_factory=dict)
    validation: dict[str, Any] = Field(default_factory=dict)
    judge: dict[str, Any] | None = Field(
        None, description="MHQR judge settings; when present, `mindsim run` judges every counsellor reply"
    )
    output: dict[str, Any] = Field(default_factory=dict)
    path: str | None = Field(None, exclude=True)

    def engines_config(self) -> EnginesConfig:
        try:
            return EnginesConfig(engines=self.engines, roles=self.roles)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, self.path or "recipe")) from exc

    def section(self, name: str, model: type[C]) -> C:
        """Validate one stage section with that stage's config model; errors name `section.field`."""
        try:
            return model.model_validate(getattr(self, name) or {})
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, self.path or "recipe", prefix=name)) from exc


def format_validation_error(exc: ValidationError, where: str, prefix: str | None = None) -> str:
    """One readable line per problem, each naming the field path."""
    lines = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"]]
        # Drop discriminator tags pydantic inserts ("embedded", "openai", …) between path parts.
        loc = [p for p in loc if p not in ("embedded", "openai", "vllm")] or loc
        if prefix:
            loc.insert(0, prefix)
        field = ".".join(loc) or "(top level)"
        msg = err["msg"]
        if err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; see the recipe reference in the README)"
        elif err["type"] == "union_tag_invalid":
            msg = f"unknown engine kind {err.get('input')!r}; use embedded, openai or vllm"
        lines.append(f"{where}: {field}: {msg}")
    return "\n".join(lines)


def load_recipe(path: str | Path) -> Recipe:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"recipe {path} not found; give a path such as recipes/quickstart.yaml")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a UTF-8 text file (byte {exc.start + 1}); a recipe is YAML text") from exc
    if "\x00" in text:
        raise ConfigError(f"{path}: binary data, not a YAML recipe")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a recipe is a YAML mapping with name, engines and roles")
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, str(path))) from exc
    recipe.path = str(path)
    recipe.engines_config()  # cross-checks roles against engines now, before any stage runs
    return recipe
