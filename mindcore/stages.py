"""The stage registry: how each stage declares to the toolkit what it will ask of the engines.

A stage package (`profilegen`, `mindsim`, `validation`, `judge`) owns a `stage.py` whose `register()` declares,
in `mindcore`'s registries and nowhere else:
- `Stage`: a stage name (`profiles`, `simulate`, `validate`, `judge`, …) and the roles it calls for a recipe;
- `mindcore.budget.RoleSchema`: each structured output of its roles (the token-budget check);
- `mindcore.budget.register_prompt_estimate`: its roles' largest prompt (the context check);
- `register_output_bound`: a role whose reply bound is a stage setting rather than the role's `max_tokens`;
- `register_sample`: a worst-case artefact another stage's estimate may read (the simulator's longest session,
  which the judge's prompt holds), so that stage need not import this one.

Preflight (`mindcore.preflight`) and the budget fit read only these registries. The stages are found through
the `mindsim.stages` entry-point group of the installed distribution (`pyproject.toml`), never by importing a
stage package by name here: a new stage is one `stage.py` and one entry-point line.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Callable

from mindsimkit.mindcore.errors import ConfigError

ENTRY_POINT_GROUP = "mindsim.stages"
# The main job (`mindsim run`) runs these three; `expand_stages` spells it out wherever "run" is asked for.
RUN_STAGES = frozenset({"profiles", "simulate", "validate"})
# Roles are listed (and engines probed) in the order data flows; other stages follow by name.
_PIPELINE_ORDER = ("profiles", "simulate", "validate")


@dataclass
class RoleUse:
    """One role (or counsellor under test) a stage calls, and where."""

    label: str
    role: str
    engine: str
    model: str | None
    max_tokens: int | None
    binding: bool = False  # a counsellor given as engine + model in `simulation.counsellors`
    spec: Any = None  # its RoleSpec: what its requests carry (preflight probes it when it sets request options)
    # How the role asks for tool calls: "" none; "any" native where the engine declares it, else through a JSON
    # schema; "native" only as real tool calls (a preset that reproduces a paper's tool-call protocol).
    tools: str = ""

    @property
    def reasoning_budget(self) -> int:
        """Tokens added to every output budget of this role for its thinking (`RoleSpec.reasoning_budget`)."""
        return getattr(self.spec, "reasoning_budget", None) or 0


RolesOf = Callable[[Any, Any], list[RoleUse]]


@dataclass(frozen=True)
class Stage:
    """A stage and the roles it will call for a recipe (`roles(recipe, engines) -> [RoleUse]`)."""

    name: str
    roles: RolesOf


_STAGES: dict[str, Stage] = {}
_BOUNDS: dict[str, Callable[[Any], int]] = {}
_SAMPLES: dict[str, Callable[..., Any]] = {}
_loaded = False


def register_stage(stage: Stage) -> Stage:
    _STAGES[stage.name] = stage
    return stage


def register_output_bound(role: str, bound: Callable[[Any], int]) -> None:
    """`bound(inputs)` is the longest reply `role` may write, for the context check (`mindcore.preflight`)."""
    _BOUNDS[role] = bound


def register_sample(name: str, make: Callable[..., Any]) -> None:
    _SAMPLES[name] = make


def load_stages() -> None:
    """Import every registered stage's `register()` once (the entry points of the installed distribution)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        ep.load()()


def expand_stages(stages: set[str] | frozenset[str]) -> set[str]:
    """`run` is every stage of the main job."""
    out = set(stages)
    if "run" in out:
        out |= RUN_STAGES
    return out


def stage(name: str) -> Stage:
    load_stages()
    try:
        return _STAGES[name]
    except KeyError:
        raise ConfigError(
            f"no stage named '{name}' is registered (found: {', '.join(sorted(_STAGES)) or 'none'}); the "
            f"'{ENTRY_POINT_GROUP}' entry points come from the installed package: reinstall it (`make install`)"
        ) from None


def stage_roles(recipe: Any, engines: Any, stages: set[str]) -> list[RoleUse]:
    """The roles `stages` call for this recipe, in stage order, each stage's as it declares them."""
    wanted = expand_stages(stages) - {"run"}
    order = sorted(
        wanted, key=lambda n: (_PIPELINE_ORDER.index(n) if n in _PIPELINE_ORDER else len(_PIPELINE_ORDER), n)
    )
    return [use for name in order for use in stage(name).roles(recipe, engines)]


def output_bound(role: str) -> Callable[[Any], int] | None:
    load_stages()
    return _BOUNDS.get(role)


def sample(name: str) -> Callable[..., Any] | None:
    """A registered worst-case artefact maker, or None when the stage that provides it is not installed."""
    load_stages()
    return _SAMPLES.get(name)


def role_use(engines: Any, role: str, label: str | None = None) -> RoleUse:
    """A plain role as the recipe's roles section binds it."""
    spec = engines.role_spec(role)
    return RoleUse(label or role, role, spec.engine, spec.model, spec.max_tokens, spec=spec)
