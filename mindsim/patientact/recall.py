"""Recall (and precision) of the lexical retrieval on our hand-written cases
(`mindsim/data/patientact/recall_cases.yaml`). Run `python3 -m mindsim.patientact.recall` to print the numbers
recorded in docs/patientact.md; tests/mindsim/test_patientact.py holds the 0.8 recall goal."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict, Field

from mindsim.patientact.retrieval import relevant


class RecallCase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    message: str = Field(min_length=1)
    expected: list[str]


class RecallCases(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    source: str
    version: str
    items: dict[str, list[str]] = Field(min_length=1)
    cases: list[RecallCase] = Field(min_length=40)


@dataclass
class _Item:
    id: str
    tags: list[str]
    level: float = 1.0
    discomfort: bool = False


def load_cases() -> RecallCases:
    path = resources.files("mindsim").joinpath("data/patientact/recall_cases.yaml")
    return RecallCases.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))


def measure(cases: RecallCases | None = None) -> dict:
    cases = cases or load_cases()
    items = [_Item(id=i, tags=t) for i, t in cases.items.items()]
    hits = expected = found = 0
    misses = []
    for c in cases.cases:
        got = set(relevant(items, c.message))
        want = set(c.expected)
        hits += len(got & want)
        expected += len(want)
        found += len(got)
        if got != want:
            misses.append({"message": c.message, "expected": sorted(want), "got": sorted(got)})
    return {
        "cases": len(cases.cases), "expected_items": expected,
        "recall": round(hits / expected, 3) if expected else 1.0,
        "precision": round(hits / found, 3) if found else 1.0,
        "mismatches": misses,
    }


if __name__ == "__main__":
    print(json.dumps(measure(), indent=2))
