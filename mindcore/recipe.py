"""Recipe files (YAML): name, seed, engines, roles, and one section per stage. This module validates
the parts every package shares; each package validates its own section with its own config model,
so `validation` can read a recipe without importing the simulator."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, Mapping, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from mindsimkit.mindcore.config import REQUEST_OPTION_DEFAULTS, EnginesConfig, EngineSpec, RoleSpec, Seed
from mindsimkit.mindcore.inputs import MAX_CONFIG_BYTES, check_input, read_input_bytes
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.prompts import install_overrides, load_overrides
from mindsimkit.mindcore import redact, yamlio

C = TypeVar("C", bound=BaseModel)

STAGE_SECTIONS = ("profiles", "simulation", "validation", "judge", "output", "release")
# Read only when a run is published (the realism gate, mindsim_app/release.py): left out of the recipe hash,
# so tightening a gate does not orphan a finished run folder.
PUBLISH_FIELDS = frozenset({"release"})
# Where the work runs, not what it makes: left out of the recipe hash, so a run folder started on one
# runner resumes on the other (see `Recipe.content_dump`).
RUNNER_FIELDS = frozenset({"runner", "ray"})


class RaySettings(BaseModel):
    """The recipe's `ray:` section, read only when the Ray runner runs (docs/scale.md)."""

    model_config = ConfigDict(extra="forbid")
    address: str | None = Field(
        None,
        description="Cluster to join (`auto`, `ray://host:10001`, host:port); default: RAY_ADDRESS, else a "
        "local Ray started for this run",
    )
    workers: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="Simulation workers (Ray actors) at once; default: the cluster's CPUs divided by cpus_per_worker",
    )
    cpus_per_worker: float = Field(1.0, gt=0, le=256, description="CPUs Ray reserves for each worker")
    shards_per_worker: int = Field(
        4,
        ge=1,
        le=1000,
        description="Patient shards per worker: more, smaller shards finish (and reach the "
        "dataset) sooner and lose less to a killed worker",
    )
    max_concurrency_per_worker: int | None = Field(
        None,
        ge=1,
        le=4096,
        description="Most requests one worker keeps in flight on each server, when that is "
        "below its share of the engine's max_concurrency (e.g. to bound a "
        "worker's memory); the engine cap stays global either way",
    )
    max_retries: int = Field(3, ge=0, le=100, description="Times a killed worker's shard is retried")
    profile_replicas: int = Field(
        2, ge=1, le=256, description="Replicas of the profile step in distilabel's RayPipeline"
    )
    connect_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="Seconds to wait for the cluster at `address` to answer before the run "
        "stops with an error (Ray's own client would keep retrying)",
    )

    @field_validator("address")
    @classmethod
    def _address_form(cls, value: str | None) -> str | None:
        if _ray_endpoint(value) is False:
            raise ValueError(f"{value!r}: {_RAY_FORMS}")
        return value


_RAY_ADDRESS = re.compile(r"(?:ray://)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})")
_RAY_FORMS = (
    "not a Ray address; write auto, HOST:PORT (the head's GCS port, usually 6379), ray://HOST:10001 "
    "(Ray Client) or local"
)


def _ray_endpoint(address: str | None) -> tuple[str, int] | None | bool:
    if address in (None, "", "local", "auto"):
        return None
    m = _RAY_ADDRESS.fullmatch(address.strip())
    if not m or not 0 < int(m.group(2)) < 65536:
        return False
    return m.group(1).strip("[]"), int(m.group(2))


def ray_endpoint(address: str | None, where: str = "ray.address") -> tuple[str, int] | None:
    """The host and port a Ray address names (None for a local Ray or `auto`, which Ray resolves itself);
    anything else is refused here, before any work, in one line."""
    found = _ray_endpoint(address)
    if found is False:
        raise ConfigError(f"{where} {address!r}: {_RAY_FORMS}")
    return found  # type: ignore[return-value]


class Recipe(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., min_length=1, max_length=200, description="Short name recorded in provenance")
    description: str = Field("", max_length=20_000)
    seed: Seed = Field(0, description="Master seed (0 to 2**32-1); every stage derives its own from it")
    engines: dict[str, EngineSpec] = Field(..., description="Engines by name")
    roles: dict[str, RoleSpec] = Field(..., description="Role → engine binding and sampling")
    profiles: dict[str, Any] = Field(default_factory=dict)
    simulation: dict[str, Any] = Field(default_factory=dict)
    validation: dict[str, Any] = Field(default_factory=dict)
    judge: dict[str, Any] | None = Field(
        None, description="MHQR judge settings; when present, `mindsim run` judges every counsellor reply"
    )
    output: dict[str, Any] = Field(default_factory=dict)
    release: dict[str, Any] = Field(
        default_factory=dict, description="Realism gate `mindsim publish` checks (validated by mindsim_app.release)"
    )
    runner: Literal["local", "ray"] = Field(
        "local",
        description="Where the work runs: this process, or a Ray cluster (`--ray ADDRESS` and "
        "RAY_ADDRESS also choose ray). The outputs are the same either way",
    )
    ray: RaySettings = Field(default_factory=RaySettings, description="Ray runner settings")
    prompts: dict[str, str] = Field(
        default_factory=dict,
        description="Shipped prompt template → your own Jinja file (relative to the recipe's "
        "folder) with the same variables; see docs/prompts.md",
    )
    path: str | None = Field(None, exclude=True)
    # The files behind `prompts:`, read and checked at load (`mindcore.prompts.load_overrides`).
    _overrides: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def prompt_overrides(self) -> dict[str, Any]:
        """Template name → `PromptOverride` (path, text, hash) for each entry of `prompts:`."""
        return dict(self._overrides)

    def content_dump(self) -> dict[str, Any]:
        """The recipe without where it runs: what the run's hash and its provenance describe. Fields
        added after run folders already existed are left out while at their defaults, so those folders
        keep their hash and resume (request options of roles and engines)."""
        data = self.model_dump(mode="json", exclude=set(RUNNER_FIELDS))
        for role in data["roles"].values():
            for key, default in REQUEST_OPTION_DEFAULTS.items():
                if key in role and role[key] == default:
                    del role[key]
        for engine in data["engines"].values():
            if engine.get("token_param") == "auto":
                del engine["token_param"]
        # A swapped prompt is part of what the run makes: its content, not just its path, goes in the hash.
        if data.get("prompts"):
            data["prompts"] = {
                name: {"path": file, "sha256": o.sha256 if (o := self._overrides.get(name)) else None}
                for name, file in data["prompts"].items()
            }
        else:
            data.pop("prompts", None)
        return data

    def with_runner(self, ray_address: str | None = None, env: Mapping[str, str] | None = None) -> "Recipe":
        """The runner this run uses: `--ray ADDRESS` first, then a RAY_ADDRESS in the environment (both
        choose Ray at that address), else the recipe's own `runner:`."""
        import os

        environ: Mapping[str, str] = os.environ if env is None else env
        address = ray_address or environ.get("RAY_ADDRESS") or None
        if address is None:
            return self
        ray_endpoint(address, "--ray" if ray_address else "RAY_ADDRESS")
        copy = self.model_copy(update={"runner": "ray", "ray": self.ray.model_copy(update={"address": address})})
        copy.path = self.path
        copy._overrides = dict(self._overrides)
        return copy

    def engines_config(self) -> EnginesConfig:
        try:
            return EnginesConfig(engines=self.engines, roles=self.roles)
        except ValidationError as exc:
            # Only the cross-checks can fail here (the fields were checked with the recipe); they name their field.
            raise ConfigError(format_validation_error(exc, self.path or "recipe", line="{where}: {msg}")) from exc

    def section(self, name: str, model: type[C]) -> C:
        """Validate one stage section with that stage's config model; errors name `section.field`."""
        try:
            return model.model_validate(getattr(self, name) or {})
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, self.path or "recipe", prefix=name)) from exc


def format_validation_error(
    exc: ValidationError,
    where: str | None = None,
    prefix: str | None = None,
    *,
    limit: int | None = None,
    sep: str = "\n",
    top: str = "(top level)",
    plain: bool = False,
    line: str | None = None,
) -> str:
    """A pydantic error as readable text, one problem per line (the one formatter of the toolkit).

    Each problem is `line` filled with `where`, `field` (the dotted field path, `prefix` first; `top`
    when the problem is the whole object) and `msg`; by default `where: field: msg`, or `field: msg`
    without a `where`. `limit` keeps the first problems only (a row of input names its first fault);
    `sep` joins them. Messages are reworded for recipe readers unless `plain` keeps pydantic's own."""
    template = line or ("{field}: {msg}" if where is None else "{where}: {field}: {msg}")
    lines = []
    for err in exc.errors()[:limit]:
        loc = [str(p) for p in err["loc"]]
        # Drop discriminator tags pydantic inserts ("embedded", "openai", …) between path parts.
        loc = [p for p in loc if p not in ("embedded", "openai", "vllm")] or loc
        if prefix:
            loc.insert(0, prefix)
        field = ".".join(loc) or top
        # pydantic prefixes a validator's own message with "Value error, ": noise to every reader.
        msg = err["msg"].removeprefix("Value error, ")
        if plain:
            pass
        elif err["type"] == "missing":
            msg = "required field is missing"
        elif err["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; docs/engines.md and each stage's page in docs/ list the fields)"
        elif (
            err["type"] == "int_type"
            and isinstance(err.get("input"), str)
            and err["input"].strip().lstrip("+-").isdigit()
        ):
            msg = f"{err['input']!r} is text; write the number without quotes"
        elif err["type"] == "union_tag_invalid":
            msg = f"unknown engine kind {err.get('input')!r}; use embedded, openai or vllm"
        lines.append(template.format(where=where, field=field, msg=msg))
    return sep.join(lines)


def load_recipe(path: str | Path) -> Recipe:
    path = Path(path)
    check_input(path, "recipe", error=ConfigError, hint="give a path such as recipes/quickstart.yaml")
    data_bytes = read_input_bytes(path, "recipe", MAX_CONFIG_BYTES, error=ConfigError)
    try:
        text = data_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a UTF-8 text file (byte {exc.start + 1}); a recipe is YAML text") from exc
    if "\x00" in text:
        raise ConfigError(f"{path}: binary data, not a YAML recipe")
    try:
        data = yamlio.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: not valid YAML ({getattr(exc, 'problem', exc)})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a recipe is a YAML mapping with name, engines and roles")
    # The key variables are watched from here on, before anything could print or write their values.
    engines = data.get("engines")
    redact.watch(
        e.get("api_key_env")
        for e in (engines.values() if isinstance(engines, dict) else ())
        if isinstance(e, dict) and isinstance(e.get("api_key_env"), str)
    )
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, str(path))) from exc
    recipe.path = str(path)
    engines = recipe.engines_config()  # cross-checks roles against engines now, before any stage runs
    for section, key in (("simulation", "counsellors"), ("judge", "judges")):
        named = (getattr(recipe, section) or {}).get(key)
        if isinstance(named, list):  # (a section's own model checks the list's shape when its stage runs)
            engines.check_bound([n for n in named if isinstance(n, str)], f"{path}: {section}.{key}")
    # Checked now (exit 2 before any engine starts) and installed for this process: one recipe per command,
    # so the recipe loaded last is the one whose prompts render. A recipe without `prompts:` restores the shipped set.
    recipe._overrides = load_overrides(recipe.prompts, path.parent, str(path))
    _rubric_inside(recipe, path)
    install_overrides(recipe._overrides)
    return recipe


def _rubric_inside(recipe: Recipe, path: Path) -> None:
    """`judge.rubric` names a file whose text is sent to the judge: like `prompts:`, it must sit in the recipe's
    folder. It is read from where the command runs (as it always was), so that is the path checked."""
    rubric = (recipe.judge or {}).get("rubric")
    if not isinstance(rubric, str) or not rubric:
        return
    real = Path(rubric).expanduser().resolve()
    folder = path.parent.resolve()
    if not real.is_relative_to(folder):
        raise ConfigError(
            f"{path}: judge.rubric: {rubric} resolves to {real}, outside the recipe's folder {folder}; "
            "a file sent to a model must sit beside the recipe (no '..' out of it, no absolute path "
            "elsewhere, no link pointing out): copy it there"
        )
