"""Application-layer tests reuse the simulator tests' helpers (`simfakes`, `hub_stub`, `killing`): make that
folder, and this one (`reportfix`, run fixtures), importable under pytest's importlib import mode."""

from __future__ import annotations

import sys
from pathlib import Path

SIM_TESTS = Path(__file__).resolve().parent.parent / "mindsim"
APP_TESTS = Path(__file__).resolve().parent  # so a test here can reuse another one's run fixtures
for folder in (SIM_TESTS, APP_TESTS):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
