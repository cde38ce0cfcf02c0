"""Application-layer tests reuse the simulator tests' helpers (`simfakes`, `hub_stub`, `killing`) and the judge
tests' `judgefakes`: make those folders, and this one (`reportfix`, run fixtures), importable under pytest's
importlib import mode."""

from __future__ import annotations

import sys
from pathlib import Path

SIM_TESTS = Path(__file__).resolve().parent.parent / "mindsim"
JUDGE_TESTS = Path(__file__).resolve().parent.parent / "judge"  # `judgefakes` (the memory ablation's judge)
APP_TESTS = Path(__file__).resolve().parent  # so a test here can reuse another one's run fixtures
for folder in (SIM_TESTS, JUDGE_TESTS, APP_TESTS):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
