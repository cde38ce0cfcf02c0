"""Render Jinja templates kept as package resources: prompts in the top-level `prompts/` folder,
dataset cards in `cards/`. Undefined variables are errors, not blanks.

Every prompt can be swapped for the user's own file, so a study can change what a role is told without forking the
package: a recipe's `prompts:` section maps a shipped template name to a Jinja file, checked here at recipe load
(`load_overrides`: the name must be shipped, the file must exist and parse, and it may use only variables the
shipped template uses) and installed process-wide (`install_overrides`). From then on `render(name)` and
`template_hash(name)` read the override, so every stage and every recorded hash follow it without per-call-site
changes. Workers in other processes get the installed set with their engines (`mindcore.shards`,
`Engines.wire_spec`). `prompts/index.yaml` says which role each template serves; docs/prompts.md lists their
variables (`prompts_table`, kept equal to the templates by a test).
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from jinja2 import meta

from mindsimkit.mindcore import NAMESPACE
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore import yamlio
from mindsimkit.mindcore.sandbox import PromptSandbox, check_source, render_bounded

ENV_OPTIONS: dict[str, Any] = dict(
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=False,
    autoescape=False,
)


@dataclass(frozen=True)
class PromptOverride:
    """A user's file standing in for one shipped prompt template."""

    name: str  # the shipped template it replaces, e.g. "patient/system.jinja2"
    path: str  # where it was read from (as the recipe resolved it)
    source: str  # its text: workers on other machines get this, not the path
    sha256: str  # first 16 hex digits, as `template_hash` reports it


_OVERRIDES: dict[str, PromptOverride] = {}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _shipped_source(package: str, name: str) -> str:
    root = resources.files(f"{NAMESPACE}.{package}")
    parts = name.split("/")
    # A template name is a path inside the package folder: a shared rubric naming `judge/../../../etc/passwd`
    # would otherwise have any readable file rendered and sent to a model as its prompt.
    if name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts):
        raise ConfigError(
            f"template '{name}': not a name under {package}/ (no '..', no absolute path); give a "
            f"shipped template such as judge/scales.jinja2, or a file beside your rubric as ./NAME"
        )
    node = root
    for part in parts:
        node = node / part
    if not node.is_file():
        raise ConfigError(f"template '{name}' not found under {package}/")
    if not Path(str(node)).resolve().is_relative_to(Path(str(root)).resolve()):
        raise ConfigError(f"template '{name}': a link out of {package}/; templates are read from inside it only")
    return read_text_file(Path(str(node)), f"template {package}/{name}")


def read_text_file(path: Path, what: str) -> str:
    """A template or rubric file as text: unreadable, binary or non-UTF-8 is one ConfigError naming it."""
    from mindsimkit.mindcore.inputs import MAX_CONFIG_BYTES, read_input_bytes

    try:
        data = read_input_bytes(path, f"{what}:", MAX_CONFIG_BYTES, error=ConfigError)
    except OSError as exc:
        raise ConfigError(f"{what}: {path} cannot be read ({exc.strerror or type(exc).__name__})") from None
    if b"\x00" in data:
        raise ConfigError(f"{what}: {path} holds binary data, not text; give a UTF-8 text file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what}: {path} is not UTF-8 text (byte {exc.start + 1}); save it as UTF-8") from None


def file_inside(name: str, folder: str | Path, what: str) -> Path:
    """`name` (relative to `folder`, or absolute) as a path inside `folder` once `..` and links are resolved.
    A recipe or rubric is a file people share, and the files it names are read and sent to a model as prompts:
    none may reach outside the folder the recipe or rubric sits in."""
    raw = Path(name).expanduser()
    root = Path(folder).resolve()
    real = (raw if raw.is_absolute() else root / raw).resolve()
    if not real.is_relative_to(root):
        raise ConfigError(
            f"{what}: {name} resolves to {real}, outside {root}; the files it names must sit in "
            "that folder (no '..' out of it, no absolute path elsewhere, no link pointing out): "
            "copy the file there"
        )
    return real


@lru_cache(maxsize=None)
def _source(package: str, name: str) -> str:
    if package == "prompts" and name in _OVERRIDES:
        return _OVERRIDES[name].source
    return _shipped_source(package, name)


@lru_cache(maxsize=None)
def _env(package: str) -> jinja2.Environment:
    return sandboxed(jinja2.FunctionLoader(lambda n: _source(package, n)))


def sandboxed(loader: jinja2.BaseLoader | None = None) -> jinja2.Environment:
    """The environment every template of the toolkit renders in, shipped or the user's (`mindcore.sandbox`)."""
    return PromptSandbox(loader=loader, **ENV_OPTIONS)


def render_resource(package: str, name: str, **variables: Any) -> str:
    try:
        return render_bounded(_env(package).get_template(name), variables).strip()
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever a template raises while rendering, it is the template's
        where = (
            f"{_OVERRIDES[name].path} (standing in for {package}/{name})"
            if (package == "prompts" and name in _OVERRIDES)
            else f"{package}/{name}"
        )
        raise ConfigError(f"template '{where}': {render_problem(exc)}") from exc


def render_problem(exc: BaseException) -> str:
    """What went wrong inside a template, in one phrase (its line when Jinja knows it)."""
    line = getattr(exc, "lineno", None)
    return (f"line {line}: " if line else "") + (
        f"{exc.message}"
        if isinstance(exc, jinja2.TemplateSyntaxError) and exc.message
        else f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, jinja2.TemplateError)
        else str(exc) or type(exc).__name__
    )


def template_source(name: str) -> str:
    """The source of a prompt template as `render` reads it (the recipe's override, when one is installed)."""
    return _source("prompts", name)


def render(name: str, **variables: Any) -> str:
    """Render a prompt from `prompts/` (or the recipe's override of it), e.g. `render("patient/system.jinja2", ...)`."""
    return render_resource("prompts", name, **variables)


def template_hash(name: str, package: str = "prompts") -> str:
    """Short sha256 of the template source (the override's, when one is installed): recorded in
    provenance so outputs name their prompts."""
    return _digest(_source(package, name))


# -- the shipped set ------------------------------------------------------------------------------
def shipped_templates() -> list[str]:
    """Every prompt template shipped under `prompts/`, as `render` names them."""
    root = resources.files("mindsimkit.prompts")
    found: list[str] = []

    def walk(node: Any, prefix: str) -> None:
        for child in node.iterdir():
            if child.is_dir():
                walk(child, f"{prefix}{child.name}/")
            elif child.name.endswith(".jinja2"):
                found.append(prefix + child.name)

    walk(root, "")
    return sorted(found)


def variables_of(source: str, where: str = "template") -> set[str]:
    """The variables a template reads from its caller (Jinja's undeclared names). A template that reaches for
    Python internals is refused here, at load, whether or not that line would ever render (`check_source`)."""
    try:
        return set(meta.find_undeclared_variables(check_source(sandboxed(), source, where)))
    except jinja2.TemplateSyntaxError as exc:
        raise ConfigError(f"{where}:{exc.lineno}: not a valid Jinja template ({exc.message})") from exc


def shipped_variables(name: str) -> set[str]:
    """What the caller gives a shipped template: the variables it reads, plus those its index entry lists under
    `also_given` (given so a published prompt that reads them can replace it verbatim)."""
    also: list[str] = template_index().get(name, {}).get("also_given", []) if name.endswith(".jinja2") else []
    return variables_of(_shipped_source("prompts", name), f"prompts/{name}") | set(also)


@lru_cache(maxsize=1)
def template_index() -> dict[str, dict[str, Any]]:
    """`prompts/index.yaml`: per shipped template, the role that sends it and what it asks for."""
    text = resources.files("mindsimkit.prompts").joinpath("index.yaml").read_text(encoding="utf-8")
    templates: dict[str, dict[str, Any]] = yamlio.safe_load(text)["templates"]
    return templates


def prompts_table() -> str:
    """The Markdown table of docs/prompts.md: template, role, purpose and the variables it is given."""
    index = template_index()
    rows = ["| template | role | what it asks for | variables |", "|---|---|---|---|"]
    for name in shipped_templates():
        entry = index.get(name, {})
        names = ", ".join(f"`{v}`" for v in sorted(shipped_variables(name))) or "(none)"
        rows.append(f"| `{name}` | {entry.get('role', '?')} | {entry.get('purpose', '?')} | {names} |")
    return "\n".join(rows)


# -- overrides ------------------------------------------------------------------------------------
def load_overrides(mapping: dict[str, str], base_dir: str | Path, where: str = "recipe") -> dict[str, PromptOverride]:
    """Check a recipe's `prompts:` section (shipped name → file, relative to `base_dir`) and read the
    files. Raises ConfigError with one line per problem: an unknown name, a missing or unreadable file,
    a Jinja syntax error, a variable the shipped template does not provide."""
    shipped = set(shipped_templates())
    problems: list[str] = []
    out: dict[str, PromptOverride] = {}
    for name, file in mapping.items():
        key = f"{where}: prompts.{name}"
        if name not in shipped:
            close = [
                s
                for s in sorted(shipped)
                if s.split("/")[-1] == name.split("/")[-1] or s.startswith(name.split("/")[0] + "/")
            ][:6]
            problems.append(
                f"{key}: no shipped template of that name (e.g. {', '.join(close or sorted(shipped)[:4])};"
                " docs/prompts.md lists them all)"
            )
            continue
        try:
            path = file_inside(file, base_dir, key)
        except ConfigError as exc:
            problems.append(str(exc))
            continue
        if not path.is_file():
            problems.append(f"{key}: file {path} not found (paths are relative to the recipe's folder)")
            continue
        try:
            text = read_text_file(path, key)
        except ConfigError as exc:
            problems.append(str(exc))
            continue
        if not text.strip():
            problems.append(f"{key}: {path} is empty; a prompt template needs text")
            continue
        try:
            used = variables_of(text, str(path))
        except ConfigError as exc:
            problems.append(f"{key}: {exc}")
            continue
        given = shipped_variables(name)
        unknown = sorted(used - given)
        if unknown:
            problems.append(
                f"{key}: {path} uses {', '.join(unknown)}, which the toolkit does not give this template "
                f"(it gives: {', '.join(sorted(given)) or 'nothing'}; see docs/prompts.md)"
            )
            continue
        out[name] = PromptOverride(name, str(path), text, _digest(text))
    if problems:
        raise ConfigError("\n".join(problems))
    return out


def install_overrides(overrides: dict[str, PromptOverride] | dict[str, dict[str, str]]) -> None:
    """Make `overrides` the process's prompt overrides (replacing any earlier set; `{}` restores the
    shipped prompts). Accepts `active_overrides()` as well as its `snapshot()` (plain dicts, for pickling)."""
    fresh = {name: o if isinstance(o, PromptOverride) else PromptOverride(**o) for name, o in overrides.items()}
    if fresh == _OVERRIDES:
        return
    _OVERRIDES.clear()
    _OVERRIDES.update(fresh)
    _source.cache_clear()
    _env.cache_clear()


def active_overrides() -> dict[str, PromptOverride]:
    return dict(_OVERRIDES)


def snapshot() -> dict[str, dict[str, str]]:
    """The installed overrides as plain data, for another process to `install_overrides`."""
    return {name: asdict(o) for name, o in _OVERRIDES.items()}


if __name__ == "__main__":  # `python -m mindcore.prompts` prints the table of docs/prompts.md
    print(prompts_table())
