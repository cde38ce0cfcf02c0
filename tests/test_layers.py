"""The import layers (docs/architecture.md): each package may import only the packages below it, so the
audit packages (`validation`, `judge`) read any simulator's transcripts and no arrow climbs back up."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# The one import namespace every folder below is installed under (setup.py); the layers are its packages.
NS = "mindsimkit"
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


def local(name: str) -> str:
    """A module's name inside the namespace: `mindsimkit.judge.run` → `judge.run`."""
    return name.removeprefix(NS + ".")


def imported_roots(path: Path) -> set[str]:
    """Top-level packages a file imports, at module level or inside functions (absolute imports only)."""
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            roots |= {local(alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == NS:  # `from mindsimkit import judge`
                roots |= {alias.name for alias in node.names}
            else:
                roots.add(local(node.module).split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_each_package_imports_only_the_layers_below(package):
    modules = sorted(p for p in (REPO / package).rglob("*.py") if p not in ENTRY_POINTS)
    assert len(modules) >= 5  # the scan really sees the package
    offenders = {
        str(p.relative_to(REPO)): sorted((imported_roots(p) & OURS) - ALLOWED[package] - {package}) for p in modules
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_scanner_catches_a_forbidden_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def f():\n    from mindsimkit.mindsim_app.cli import main\n    import mindsimkit.profilegen.schemas\n"
    )
    assert imported_roots(bad) & OURS == {"mindsim_app", "profilegen"}


def _package_modules():
    for package in ALLOWED:
        yield from ((package, p) for p in sorted((REPO / package).rglob("*.py")))


def test_other_packages_import_only_what_a_package_exports():
    """A package states the modules others may import (`PUBLIC_MODULES` in its `__init__`); code in another
    package imports no other module of it."""
    import importlib

    public = {p: set(importlib.import_module(f"{NS}.{p}").PUBLIC_MODULES) for p in ALLOWED}
    offenders = []
    for package, path in _package_modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [node.module]
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            for name in map(local, names):
                top, _, rest = name.partition(".")
                if top in public and top != package and rest and rest.split(".")[0] not in public[top]:
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno} imports {name}")
    assert offenders == []


def test_no_private_name_crosses_a_module_boundary():
    offenders = []
    for _, path in _package_modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.level == 0
                and local(node.module).split(".")[0] in OURS
            ):
                offenders += [
                    f"{path.relative_to(REPO)}:{node.lineno} imports {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
            # `module._name` on an imported module (attributes of self/cls and of a module's own classes aside).
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and node.value.id in _imported_modules(path)
            ):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert offenders == []


def _imported_modules(path: Path) -> set[str]:
    """Local names bound to one of our modules by an import in `path`."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and (node.module == NS or local(node.module).split(".")[0] in OURS)
        ):
            names |= {a.asname or a.name for a in node.names if a.name[:1].islower()}
        elif isinstance(node, ast.Import):
            names |= {
                a.asname or local(a.name).split(".")[0] for a in node.names if local(a.name).split(".")[0] in OURS
            }
    return names


def module_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Which modules of `package` each of its modules imports: every import in the file counts, inside functions
    too (a function-level import still runs in a circle), except under `if TYPE_CHECKING:`. Importing `a.b.c`
    also runs `a.b`'s `__init__`, so that counts as importing it, unless the importer lives inside `a.b`."""
    modules = {}
    for f in (root / package).rglob("*.py"):
        rel = f.relative_to(root).with_suffix("")
        modules[".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)] = f

    def resolve(name: str, target: str) -> set[str]:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if not target or target == name:
            return set()
        found, parent = {target}, target.rpartition(".")[0]
        while parent:
            if parent in modules and not (name == parent or name.startswith(parent + ".")):
                found.add(parent)
            parent = parent.rpartition(".")[0]
        return found

    def imports(name: str, path: Path) -> set[str]:
        targets: set[str] = set()

        def visit(node: ast.AST) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    for other in child.orelse:
                        visit(other)
                    continue
                if isinstance(child, ast.Import):
                    targets.update(local(a.name) for a in child.names)
                elif isinstance(child, ast.ImportFrom):
                    if child.level:
                        base = name.split(".")[: None if path.name == "__init__.py" else -1]
                        base = base[: len(base) - child.level + 1]
                        module = ".".join(base + ([child.module] if child.module else []))
                    else:
                        module = local(child.module or "")
                    targets.add(module)
                    targets.update(f"{module}.{a.name}" for a in child.names)
                visit(child)

        visit(ast.parse(path.read_text(encoding="utf-8")))
        return set().union(*(resolve(name, t) for t in targets)) if targets else set()

    return {name: imports(name, path) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each a circle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def walk(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                walk(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            walk(v)
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_no_package_imports_in_a_circle(package):
    graph = module_graph(REPO, package)
    assert len(graph) >= 5 and any(graph.values())  # the scan really sees the package's imports
    assert cycles(graph) == []


def test_cycle_scan_catches_a_function_level_circle(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from pkg.sub.b import g\n")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub.c import h\n")
    (pkg / "sub" / "b.py").write_text("g = 1\n")
    (pkg / "sub" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.a\ndef h():\n    from .. import a\n"
    )
    graph = module_graph(tmp_path, "pkg")
    assert graph["pkg.a"] == {"pkg.sub.b", "pkg.sub"}  # importing pkg.sub.b runs pkg.sub's __init__ too
    assert cycles(graph) == [["pkg.a", "pkg.sub", "pkg.sub.c"]]


# Where our packages may be named in an import: everywhere the toolkit's code, tests and benchmarks live.
SCANNED = [*OURS, "tests", "benchmarks", "mindsimkit"]
TOP_LEVEL = OURS | {"prompts", "cards", "recipes"}


def bare_imports(path: Path) -> list[str]:
    """Imports in `path` that name one of our folders at the top level instead of through the namespace."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module]
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
            else []
        )
        found += [f"{path.relative_to(REPO)}:{node.lineno} {n}" for n in names if n.split(".")[0] in TOP_LEVEL]
    return found


def test_every_import_goes_through_the_one_namespace():
    """Installed, the toolkit is `mindsimkit` and nothing else: an import of `judge` or `mindcore` at the top level
    would work in a checkout (the folder is on the path) and break in a wheel."""
    files = [p for d in SCANNED for p in (REPO / d).rglob("*.py") if ".cache" not in p.parts]
    assert len(files) > 300
    assert [hit for f in files for hit in bare_imports(f)] == []


def test_the_namespace_scan_catches_a_bare_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import judge.run\nfrom mindsimkit.judge import run\ndef f():\n    from mindcore import engine\n")
    bad = bad.rename(REPO / "tests" / f".scan-{tmp_path.name}.py")
    try:
        assert [h.split(" ", 1)[1].split(".")[0] for h in bare_imports(bad)] == ["judge", "mindcore"]
    finally:
        bad.unlink()
