"""Recall and precision of PatientAct's tag matching (§3.3.2). Two sets:

- `recall_cases.yaml`: our first hand-written cases, the lexical matcher's development set (kept, with its
  0.8 recall goal, as a regression check);
- `retrieval_heldout.yaml`: the held-out set both matchers are reported on (104 paraphrased counsellor
  messages for two patients; its provenance is in the file): `measure_heldout(match)` scores any matcher,
  `lexical_matcher()` and `llm_matcher(client)` are the two `retrieval` settings.

`benchmarks/bench_retrieval.py` prints both on the held-out set; docs/patientact.md records the numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any, Awaitable, Callable

from mindsimkit.mindcore import yamlio
from pydantic import BaseModel, ConfigDict, Field

from mindsimkit.mindsim.patientact.retrieval import relevant


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


class HeldoutItem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    content: str = Field(min_length=1)
    tags: list[str] = Field(min_length=3, max_length=5)


class HeldoutPatient(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    items: dict[str, HeldoutItem] = Field(min_length=1)
    cases: list[RecallCase] = Field(min_length=1)


class Heldout(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    source: str
    version: str
    patients: dict[str, HeldoutPatient] = Field(min_length=1)

    @property
    def size(self) -> int:
        return sum(len(p.cases) for p in self.patients.values())


@dataclass
class _Item:
    id: str
    tags: list[str]
    level: float = 1.0
    discomfort: bool = False


def _data(name: str) -> Any:
    return yamlio.safe_load(
        resources.files("mindsimkit.mindsim").joinpath(f"data/patientact/{name}").read_text(encoding="utf-8")
    )


def load_cases() -> RecallCases:
    return RecallCases.model_validate(_data("recall_cases.yaml"))


def load_heldout() -> Heldout:
    return Heldout.model_validate(_data("retrieval_heldout.yaml"))


def _score(pairs: list[tuple[str, set[str], set[str]]]) -> dict[str, Any]:
    hits = sum(len(got & want) for _, want, got in pairs)
    expected = sum(len(want) for _, want, _ in pairs)
    found = sum(len(got) for _, _, got in pairs)
    return {
        "cases": len(pairs),
        "expected_items": expected,
        "found_items": found,
        "recall": round(hits / expected, 3) if expected else 1.0,
        "precision": round(hits / found, 3) if found else 1.0,
        "mismatches": [{"message": m, "expected": sorted(w), "got": sorted(g)} for m, w, g in pairs if w != g],
    }


def measure(cases: RecallCases | None = None) -> dict[str, Any]:
    """The lexical matcher on the development cases."""
    cases = cases or load_cases()
    items = [_Item(id=i, tags=t) for i, t in cases.items.items()]
    return _score([(c.message, set(c.expected), set(relevant(items, c.message))) for c in cases.cases])


Matcher = Callable[[list[Any], str], Awaitable[list[str]]]


def lexical_matcher() -> Matcher:
    async def match(items: list[Any], message: str) -> list[str]:
        return relevant(items, message)

    return match


def llm_matcher(client: Any, **kw: Any) -> Matcher:
    """The `retrieval: llm` matcher on one message (no earlier conversation: the set's messages stand alone)."""
    from mindsimkit.mindsim.patientact.matcher import match as ask

    async def match(items: list[Any], message: str) -> list[str]:
        ids, _ = await ask(client, items, [], message, **kw)
        return ids

    return match


async def measure_heldout(match: Matcher, heldout: Heldout | None = None, limit: int | None = None) -> dict[str, Any]:
    """`match` on the held-out set (the first `limit` cases of each patient when given)."""
    heldout = heldout or load_heldout()
    pairs = []
    for p in heldout.patients.values():
        items = [_Item(id=i, tags=list(it.tags)) for i, it in p.items.items()]
        for c in p.cases[:limit]:
            pairs.append((c.message, set(c.expected), set(await match(items, c.message))))
    return _score(pairs)


if __name__ == "__main__":
    import asyncio

    print(
        json.dumps(
            {"development": measure(), "heldout_lexical": asyncio.run(measure_heldout(lexical_matcher()))}, indent=2
        )
    )
