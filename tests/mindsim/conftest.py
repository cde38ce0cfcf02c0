"""Simulator tests: make the helper module `simfakes` (fake engine responder, hand-built profiles)
importable under pytest's importlib import mode, and from the kill-and-resume driver subprocess."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
