"""Render Jinja templates kept as package resources: prompts in the top-level `prompts/` folder,
dataset cards in `cards/`. Undefined variables are errors, not blanks."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from importlib import resources

import jinja2

from mindcore.errors import ConfigError


@lru_cache(maxsize=None)
def _source(package: str, name: str) -> str:
    node = resources.files(package)
    for part in name.split("/"):
        node = node / part
    if not node.is_file():
        raise ConfigError(f"template '{name}' not found under {package}/")
    return node.read_text(encoding="utf-8")


@lru_cache(maxsize=None)
def _env(package: str) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda n: _source(package, n)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        autoescape=False,
    )


def render_resource(package: str, name: str, **variables) -> str:
    try:
        return _env(package).get_template(name).render(**variables).strip()
    except jinja2.UndefinedError as exc:
        raise ConfigError(f"template '{package}/{name}': {exc}") from exc


def render(name: str, **variables) -> str:
    """Render a prompt from `prompts/`, e.g. `render("patient/system.jinja2", ...)`."""
    return render_resource("prompts", name, **variables)


def template_hash(name: str, package: str = "prompts") -> str:
    """Short sha256 of the template source: recorded in provenance so outputs name their prompts."""
    return hashlib.sha256(_source(package, name).encode("utf-8")).hexdigest()[:16]
