"""Judge test fixtures. Makes the helper module `judgefakes` importable under pytest's importlib
import mode."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/openai_stub.py

from judgefakes import write_run  # noqa: E402


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run(tmp_path / "run")
