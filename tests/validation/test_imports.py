"""`validation` audits any simulator's transcripts, so it must not import the simulator or profilegen."""

import ast
from pathlib import Path

import validation

FORBIDDEN = {"mindsim", "profilegen"}


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_validation_imports_neither_mindsim_nor_profilegen():
    modules = sorted(Path(validation.__file__).parent.rglob("*.py"))
    assert len(modules) >= 8  # the scan really sees the package
    offenders = {str(p.name): sorted(_imported_roots(p) & FORBIDDEN) for p in modules}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_scanner_catches_a_forbidden_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from mindsim.cli import main\n    import profilegen.schemas\n")
    assert _imported_roots(bad) & FORBIDDEN == {"mindsim", "profilegen"}
