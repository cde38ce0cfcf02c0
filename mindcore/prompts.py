"""Render the Jinja prompt templates kept in the top-level `prompts/` folder, loaded as package
resources so an installed toolkit finds them. Undefined variables are errors, not blanks."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from importlib import resources

import jinja2

from mindcore.errors import ConfigError


def _prompt_root():
    return resources.files("prompts")


@lru_cache(maxsize=None)
def _source(name: str) -> str:
    node = _prompt_root()
    for part in name.split("/"):
        node = node / part
    if not node.is_file():
        raise ConfigError(f"prompt template '{name}' not found under prompts/")
    return node.read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda n: _source(n)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
        autoescape=False,
    )


def render(name: str, **variables) -> str:
    try:
        return _env().get_template(name).render(**variables).strip()
    except jinja2.UndefinedError as exc:
        raise ConfigError(f"prompt '{name}': {exc}") from exc


def template_hash(name: str) -> str:
    """Short sha256 of the template source: recorded in provenance so outputs name their prompts."""
    return hashlib.sha256(_source(name).encode("utf-8")).hexdigest()[:16]
