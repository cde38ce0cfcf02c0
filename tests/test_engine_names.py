"""No module asks which patient engine it holds, so a new engine needs no change elsewhere: outside the registry
(`mindsim/patient_engines/`), no Python code in the simulator, the app or `mindcore` compares a value with an engine or
variant name, and no card template does. Engine-specific behaviour is a method of the engine instead."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from mindsimkit.mindsim.patient_engines import VARIANT_SEP, names

REPO = Path(__file__).resolve().parent.parent
SCANNED = ("mindsim", "mindsim_app", "mindcore")
REGISTRY = REPO / "mindsim" / "patient_engines"
TEMPLATES = ("cards", "prompts")
# Reviewed exceptions: (file, source text of the line) → why it is not an engine-name comparison. A stored
# record field can share its engine's name (`SessionRecord.patientact`); testing for that column is allowed.
ALLOWED: dict[tuple[str, str], str] = {}


def engine_names() -> set[str]:
    found = set(names())
    return found | {n.split(VARIANT_SEP, 1)[0] for n in found}


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for elt in node.elts for s in _strings(elt)]
    return []


def comparisons(source: str, known: set[str]) -> list[tuple[int, str]]:
    """(line, name) of every comparison, membership test or match case against an engine name."""
    hits = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            hits += [(node.lineno, s) for op in operands for s in _strings(op) if s in known]
        elif isinstance(node, ast.MatchValue):
            hits += [(node.lineno, s) for s in _strings(node.value) if s in known]
    return hits


def template_comparisons(text: str, known: set[str]) -> list[str]:
    alt = "|".join(re.escape(n) for n in sorted(known, key=len, reverse=True))
    pattern = re.compile(rf"""(["'](?:{alt})["']\s*(?:==|!=|not\s+in\b|in\b))|((?:==|!=)\s*["'](?:{alt})["'])""")
    return [m.group(0) for line in text.splitlines() if "{%" in line or "{{" in line for m in pattern.finditer(line)]


def _offending(path: Path, known: set[str]) -> list[tuple[int, str]]:
    rel = str(path.relative_to(REPO))
    lines = path.read_text(encoding="utf-8").splitlines()
    return [(n, name) for n, name in comparisons("\n".join(lines), known) if (rel, lines[n - 1].strip()) not in ALLOWED]


@pytest.mark.parametrize("package", SCANNED)
def test_no_engine_name_comparison_outside_the_registry(package):
    known = engine_names()
    modules = sorted(p for p in (REPO / package).rglob("*.py") if REGISTRY not in p.parents)
    assert len(modules) >= 5
    offenders = {str(p.relative_to(REPO)): hits for p in modules if (hits := _offending(p, known))}
    assert offenders == {}


def test_every_allowed_exception_is_still_there():
    for rel, line in ALLOWED:
        assert line in [x.strip() for x in (REPO / rel).read_text(encoding="utf-8").splitlines()], (rel, line)


@pytest.mark.parametrize("folder", TEMPLATES)
def test_no_engine_name_comparison_in_templates(folder):
    known = engine_names()
    offenders = {
        str(p.relative_to(REPO)): hits
        for p in sorted((REPO / folder).rglob("*.jinja2"))
        if (hits := template_comparisons(p.read_text(encoding="utf-8"), known))
    }
    assert offenders == {}


def test_the_scanners_catch_each_form():
    known = engine_names()
    code = (
        'if kind == "patientact": pass\n'
        'if "mindsim" in kinds: pass\n'
        'if e not in ("mindsim", "patientact:no_tg"): pass\n'
        'match e:\n    case "patientact":\n        pass\n'
        'x = {"patientact": 1}["patientact"]\n'
    )
    assert comparisons(code, known) == [
        (1, "patientact"),
        (2, "mindsim"),
        (3, "mindsim"),
        (3, "patientact:no_tg"),
        (5, "patientact"),
    ]
    assert template_comparisons(
        '{% if "mindsim" in engines %}\n"mindsim" in prose\n{{ a if e == "patientact" }}', known
    ) == ['"mindsim" in', '== "patientact"']
