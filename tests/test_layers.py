"""The import layers (docs/architecture.md): each package may import only the packages below it, so the
audit packages (`validation`, `judge`) read any simulator's transcripts and no arrow climbs back up."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
OURS = {"mindcore", "profilegen", "mindsim", "validation", "judge", "mindsim_app"}
ALLOWED = {
    "mindcore": set(),
    "profilegen": {"mindcore"},
    "validation": {"mindcore"},
    "judge": {"mindcore"},
    "mindsim": {"mindcore", "profilegen"},
    "mindsim_app": OURS - {"mindsim_app"},
}
# `python -m mindsim` must keep working, and the command line lives in the app: this executable entry point is
# never imported by a module, so it is the one file allowed to name the layer above its package.
ENTRY_POINTS = {REPO / "mindsim" / "__main__.py"}


def imported_roots(path: Path) -> set[str]:
    """Top-level packages a file imports, at module level or inside functions (absolute imports only)."""
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_each_package_imports_only_the_layers_below(package):
    modules = sorted(p for p in (REPO / package).rglob("*.py") if p not in ENTRY_POINTS)
    assert len(modules) >= 5  # the scan really sees the package
    offenders = {str(p.relative_to(REPO)): sorted((imported_roots(p) & OURS) - ALLOWED[package] - {package})
                 for p in modules}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_scanner_catches_a_forbidden_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from mindsim_app.cli import main\n    import profilegen.schemas\n")
    assert imported_roots(bad) & OURS == {"mindsim_app", "profilegen"}
