"""Application-layer tests reuse the simulator tests' helpers (`simfakes`, `hub_stub`, `killing`): make that
folder importable under pytest's importlib import mode."""

from __future__ import annotations

import sys
from pathlib import Path

SIM_TESTS = Path(__file__).resolve().parent.parent / "mindsim"
if str(SIM_TESTS) not in sys.path:
    sys.path.insert(0, str(SIM_TESTS))
