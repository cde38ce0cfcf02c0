"""How `validation` and `judge` run the toolkit's preflight without importing `mindsim`.

The preflight (engines answer, models listed, token budgets fit their schemas, prompts fit the context)
lives in `mindsim_app.preflight`, because it needs every stage's schemas and prompt estimates; the audit
packages may import only `mindcore`. The `mindsim` command line installs the real check here when it
mounts their commands, so `mindsim judge run` and `mindsim validate … --arc` check their engines before
any work; used as libraries on their own, they skip it.
"""

from __future__ import annotations

from typing import Any, Callable

Preflight = Callable[[Any, Any, set[str]], Any]
_installed: Preflight | None = None


def install(check: Preflight | None) -> None:
    global _installed
    _installed = check


def run(recipe: Any, engines: Any, stages: set[str]) -> Any:
    """The installed check's report, or None when none is installed."""
    return _installed(recipe, engines, stages) if _installed is not None else None
