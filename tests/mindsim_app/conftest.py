"""Application-layer tests reuse the simulator tests' helpers (`simfakes`, `hub_stub`, `killing`): make that
folder, and this one (`reportfix`), importable under pytest's importlib import mode."""

from __future__ import annotations

import sys
from pathlib import Path

SIM_TESTS = Path(__file__).resolve().parent.parent / "mindsim"
HERE = Path(__file__).resolve().parent  # this folder's own helpers (reportfix)
for _p in (SIM_TESTS, HERE):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))
