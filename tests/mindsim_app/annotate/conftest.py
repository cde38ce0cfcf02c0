"""Annotation test fixtures; makes `annotfakes` importable under pytest's importlib import mode."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/ (browser.py)

from annotfakes import write_real, write_run  # noqa: E402


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run(tmp_path / "run")


@pytest.fixture
def real_file(tmp_path: Path) -> Path:
    return write_real(tmp_path / "real.jsonl")


from browser import browser  # noqa: E402,F401  (the shared headless chromium)


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    """Every task type's page on one local server, for the browser tests (pages.py says which tasks)."""
    from pages import build_site

    yield from build_site(tmp_path_factory.mktemp("pages"))
