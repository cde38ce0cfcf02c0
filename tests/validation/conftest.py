"""Helpers for the validation tests: synthetic chat transcripts with controllable turn lengths."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

WORDS = "i feel tired and stressed about work my sister says i should rest but i never have time to sleep".split()


def make_conversations(n: int, *, seed: int, mean_words: float, patients: int | None = None, turns: int = 6):
    """n conversations; the patient's turn lengths are Poisson around `mean_words`."""
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(n):
        messages = []
        for t in range(turns):
            messages.append({"role": "assistant", "content": f"Counsellor line {t}. How are things going?"})
            k = max(1, int(rng.poisson(mean_words)))
            words = [WORDS[int(i)] for i in rng.integers(0, len(WORDS), size=k)]
            messages.append({"role": "user", "content": " ".join(words) + "."})
        row = {"id": f"c{seed}-{c}", "messages": messages}
        if patients:
            row["patient_id"] = f"p{c % patients}"
        rows.append(row)
    return rows


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def synth():
    return make_conversations


@pytest.fixture
def jsonl():
    return write_jsonl
