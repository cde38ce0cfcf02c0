"""The linter and the type checker, as configured in pyproject.toml, pass on the tree: `ruff check` on
every file, `ruff format --check` on every file, and mypy on the `mindsimkit` package (every
module held to the strict flags of pyproject's [[tool.mypy.overrides]]). Each is skipped, saying why, only when the
tool is not installed (`make install` installs both: they are in the `test` extra)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
# The folders setup.py maps into the `mindsimkit` namespace.
FOLDERS = ["mindcore", "profilegen", "mindsim", "validation", "judge", "mindsim_app", "prompts", "cards", "recipes"]


def _tool(name: str) -> list[str]:
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} is not installed in this interpreter; `make install` (the `test` extra) installs it")
    return [sys.executable, "-m", name]


def _run(argv: list[str], cwd: Path = REPO) -> None:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (
        f"{' '.join(argv[2:])} failed (exit {proc.returncode}):\n{proc.stdout[-6000:]}{proc.stderr[-2000:]}"
    )


def test_ruff_check_passes_on_the_whole_tree():
    _run([*_tool("ruff"), "check", "--no-cache", "."])


def test_the_whole_tree_is_formatted():
    _run([*_tool("ruff"), "format", "--check", "--no-cache", "."])


def link_tree(root: Path) -> Path:
    """`root/mindsimkit`: the package as an install lays it out, made of links to the checkout's folders, so mypy
    names every module `mindsimkit.…` as the code imports it. Rebuilt when a link is missing or points elsewhere."""
    pkg = root / "mindsimkit"
    pkg.mkdir(parents=True, exist_ok=True)
    targets = {**{f: REPO / f for f in FOLDERS}, **{p.name: p for p in (REPO / "mindsimkit").glob("*.py")}}
    for name, target in targets.items():
        link = pkg / name
        if link.is_symlink() and link.resolve() == target.resolve():
            continue
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
    return root


def test_mypy_passes_on_the_package():
    mypy = _tool("mypy")
    cache = REPO / ".cache" / "mypy"
    root = link_tree(cache / "tree")
    _run(
        [*mypy, "--config-file", str(REPO / "pyproject.toml"), "--cache-dir", str(cache / "cache"), "-p", "mindsimkit"],
        cwd=root,
    )


def _module_names() -> set[str]:
    """Every module of the package, named as mypy names it through the link tree."""
    names = set()
    for folder in FOLDERS:
        for p in (REPO / folder).rglob("*.py"):
            parts = p.relative_to(REPO).with_suffix("").parts
            names.add(".".join(("mindsimkit", *(parts[:-1] if parts[-1] == "__init__" else parts))))
    names |= {f"mindsimkit.{p.stem}" for p in (REPO / "mindsimkit").glob("*.py") if p.stem != "__init__"} | {
        "mindsimkit"
    }
    return names


def _unfollowed(override: dict) -> bool:
    """An override that only keeps the checker out of third-party packages (`follow_imports = "skip"`)."""
    return set(override) == {"module", "follow_imports"} and override["follow_imports"] == "skip"


def test_the_type_checker_tiers_name_real_modules():
    """A module renamed or removed must leave the strict list too, or it silently covers nothing; an override that
    keeps the checker out of third-party packages names none of this package's, whose errors it would hide."""
    names = _module_names()
    for override in PYPROJECT["tool"]["mypy"]["overrides"]:
        if _unfollowed(override):
            ours = sorted(m for m in override["module"] if m.split(".")[0] == "mindsimkit")
            assert not ours, f"pyproject.toml: follow_imports = 'skip' may not name modules of this package: {ours}"
            continue
        unknown = sorted(set(override["module"]) - names)
        assert not unknown, f"pyproject.toml [[tool.mypy.overrides]] names modules that do not exist: {unknown}"


def test_every_module_is_held_to_the_strict_flags():
    """No module has its errors hidden, and none is checked more loosely than the strict flags: a new module that
    is left off the strict list would otherwise go unchecked for untyped defs and returns of Any."""
    overrides = PYPROJECT["tool"]["mypy"]["overrides"]
    hidden = sorted(m for o in overrides if o.get("ignore_errors") for m in o["module"])
    assert not hidden, f"pyproject.toml hides the type errors of {hidden}; fix them instead"
    strict = {m for o in overrides if o.get("disallow_untyped_defs") for m in o["module"]}
    loose = sorted(_module_names() - strict)
    assert not loose, (
        f"pyproject.toml [[tool.mypy.overrides]]: add {loose} to the strict list (the override with "
        "disallow_untyped_defs) once they pass its flags"
    )
