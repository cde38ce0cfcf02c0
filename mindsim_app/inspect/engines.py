"""The recipe side of an inspect run: recipes found by name or path, and their engines started once per process.

The tasks call the recipe's roles for everything but the counsellor under test (patient, scenario writers,
memory compactor, the patient engine's own roles, the judges); the `mindsim` model provider (`provider.py`)
answers as one of the recipe's roles. Both ask for the same recipe's engines here, so one embedded server, one
connection pool per engine and one usage ledger serve the whole eval. Engines stay up until the process ends:
inspect gives a task no end-of-run callback, and an eval set runs several tasks on the same engines.
"""

from __future__ import annotations

import atexit
import hashlib
import threading
from contextvars import ContextVar
from importlib import resources
from pathlib import Path

from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.types import CallRecord, UsageLedger
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.recipe import Recipe, load_recipe

_STARTED: dict[str, Engines] = {}
_LOCK = threading.Lock()
# Set while the `mindsim` model provider answers: inspect counts that call's usage itself, from the provider's output.
IN_PROVIDER: ContextVar[bool] = ContextVar("mindsim_in_provider", default=False)
# The usage key of a recipe role's calls in the log (`mindsim/patient`, …): the name the `mindsim` provider gives a
# role, so a role's tokens are under one name however it was called.
USAGE_PREFIX = "mindsim/"
INSPECT_ENGINE = "inspect"  # `backend.ENGINE`: calls through an inspect model, which inspect counts


class InspectLedger(UsageLedger):
    """The engines' usage ledger, which also adds every recipe-role call (patient, scenario writers, memory,
    judges) to inspect's usage of the sample and of the eval, under `mindsim/ROLE`: inspect sees only the calls made
    through its own models, so without this the log's `stats.model_usage` held the counsellor's tokens alone.
    Calls made through an inspect model are left to inspect, which has counted them already."""

    def add(self, record: CallRecord) -> None:
        super().add(record)
        if record.engine == INSPECT_ENGINE or IN_PROVIDER.get():
            return
        from inspect_ai.model import ModelUsage
        from inspect_ai.model._model import model_usage_context_var, sample_model_usage_context_var, set_model_usage

        cached = record.cached_tokens or 0
        usage = ModelUsage(
            input_tokens=record.prompt_tokens - cached,
            output_tokens=record.completion_tokens,
            total_tokens=record.prompt_tokens + record.completion_tokens,
            input_tokens_cache_read=cached or None,
            reasoning_tokens=record.reasoning_tokens or None,
        )
        name = USAGE_PREFIX + record.role
        # Both are inspect's own accumulators (per sample, per eval): the log's `model_usage` is read from them.
        set_model_usage(name, usage, sample_model_usage_context_var.get(None))
        set_model_usage(name, usage.model_copy(), model_usage_context_var.get(None))


def shipped_recipes() -> list[str]:
    """Names of the recipes shipped in `recipes/` (quickstart, benchmark, patientact, …)."""
    folder = resources.files("mindsimkit.recipes")
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml"))


def recipe_path(name_or_path: str) -> Path:
    """A recipe file: a path, or the name of a shipped recipe. ConfigError naming both kinds otherwise."""
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    if name_or_path in shipped_recipes():
        return Path(str(resources.files("mindsimkit.recipes").joinpath(f"{name_or_path}.yaml")))
    raise ConfigError(
        f"recipe {name_or_path!r}: no such file, nor a shipped recipe ({', '.join(shipped_recipes())}); "
        "give -T recipe=PATH (or -M recipe=PATH for the mindsim model provider)"
    )


def read_recipe(name_or_path: str) -> Recipe:
    return load_recipe(recipe_path(name_or_path))


def recipe_key(recipe: Recipe) -> str:
    """The recipe's engines as a key: two recipes with the same engines and roles share started engines."""
    return hashlib.sha256(recipe.engines_config().model_dump_json().encode()).hexdigest()


def started(recipe: Recipe) -> Engines:
    """The recipe's engines, started on first use (an embedded server is started, or attached to through
    MINDSIM_EMBEDDED_URL) and kept until the process ends."""
    key = recipe_key(recipe)
    with _LOCK:
        engines = _STARTED.get(key)
        if engines is None:
            engines = Engines.from_config(recipe.engines_config())
            engines.ledger = InspectLedger()
            engines.start()
            _STARTED[key] = engines
        return engines


@atexit.register
def _close_all() -> None:
    with _LOCK:
        for engines in _STARTED.values():
            engines.close()
        _STARTED.clear()
