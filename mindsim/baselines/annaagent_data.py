"""AnnaAgent's dynamic mechanisms without any model call (docs/baselines.md "AnnaAgent"): the emotion taxonomy
and its weighted perturbation, and the complaint chain's stage rule. The facts (labels, distances, weights, the
draw) are `mindsim/data/baselines/annaagent.yaml`; this module only checks and applies them.

- Emotion modulation: the modulator model infers the next emotion; then one integer is drawn from the
  session's seeded generator and, above the data's threshold, that emotion is replaced by a draw over the
  whole taxonomy, each emotion weighted by how far its group lies from the inferred emotion's group.
- Complaint chain: stages numbered from 1; each turn the model is asked whether the current stage has been
  recognised and talked through, and a yes moves one stage on. Past the last stage the last one stays current.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindsim.baselines import common

DATA = "annaagent"


@dataclass(frozen=True)
class Taxonomy:
    """The emotion groups, their distances and weights, and the perturbation draw."""

    groups: dict[str, list[str]]
    distances: dict[str, dict[str, int]]
    weights: dict[int, int]
    low: int
    high: int
    above: int
    keep_current: bool

    @property
    def emotions(self) -> list[str]:
        return [e for members in self.groups.values() for e in members]

    def group_of(self, emotion: str) -> str:
        for group, members in self.groups.items():
            if emotion in members:
                return group
        raise ConfigError(f"emotion '{emotion}' is in no group of mindsim/data/baselines/{DATA}.yaml")

    def transition_weights(self, emotion: str) -> dict[str, int]:
        """Each possible outcome of a perturbation of `emotion`, with its weight."""
        row = self.distances[self.group_of(emotion)]
        return {
            e: self.weights[row[group]]
            for group, members in self.groups.items()
            for e in members
            if self.keep_current or e != emotion
        }

    def perturbs(self, rng: random.Random) -> bool:
        return rng.randint(self.low, self.high) > self.above

    def perturb(self, emotion: str, rng: random.Random) -> str:
        weights = self.transition_weights(emotion)
        return rng.choices(list(weights), weights=list(weights.values()), k=1)[0]


def _fail(what: str) -> ConfigError:
    return ConfigError(f"mindsim/data/baselines/{DATA}.yaml: {what}; restore the shipped file")


@lru_cache(maxsize=None)
def data() -> dict[str, Any]:
    """The data file, checked: every emotion in one group, a distance for every pair of groups with a weight."""
    d = common.load_data(DATA)
    groups = d["emotions"]
    seen = [e for members in groups.values() for e in members]
    if len(seen) != len(set(seen)):
        raise _fail("an emotion is listed in two groups")
    for g in groups:
        row = d["distances"].get(g) or {}
        if set(row) != set(groups):
            raise _fail(f"`distances.{g}` must give a distance to each of {', '.join(groups)}")
        missing = {v for v in row.values()} - set(d["distance_weights"])
        if missing:
            raise _fail(f"distance(s) {sorted(missing)} have no `distance_weights` entry")
    chain = d["complaint_chain"]
    if not 1 <= chain["min_stages"] <= chain["max_stages"]:
        raise _fail("`complaint_chain` needs 1 <= min_stages <= max_stages")
    return d


@lru_cache(maxsize=None)
def taxonomy() -> Taxonomy:
    d = data()
    p = d["perturbation"]
    return Taxonomy(
        groups={g: list(m) for g, m in d["emotions"].items()},
        distances={g: dict(r) for g, r in d["distances"].items()},
        weights={int(k): int(v) for k, v in d["distance_weights"].items()},
        low=int(p["low"]),
        high=int(p["high"]),
        above=int(p["above"]),
        keep_current=bool(d["keep_current"]),
    )


def session_rng(session_id: str) -> random.Random:
    """The session's own generator: the same session (patient, counsellor, index, seed, engine, trial) always
    draws the same perturbations, whatever else the run holds or in which order arcs finish."""
    digest = hashlib.sha256(f"annaagent|{session_id}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


@dataclass(frozen=True)
class Modulated:
    inferred: str
    emotion: str
    perturbed: bool


def modulate(inferred: str, rng: random.Random) -> Modulated:
    """The emotion the reply is written in: the inferred one, or on a perturbation draw a weighted neighbour."""
    tax = taxonomy()
    if tax.perturbs(rng):
        return Modulated(inferred, tax.perturb(inferred, rng), True)
    return Modulated(inferred, inferred, False)


def stage_after(stage: int, moved: bool) -> int:
    """The chain's stage after the switch check: one on when the check says the stage is done."""
    return stage + 1 if moved else stage


def complaint_at(chain: list[str], stage: int) -> str:
    """The chief complaint of `stage` (1-based); past the last stage, the last one."""
    return chain[min(stage, len(chain)) - 1]
