"""Seeded random streams keyed by (seed, ids), so every sampled attribute of a persona is the same
whatever order or batch it is processed in — a resumed or re-batched run reproduces the same profiles."""

from __future__ import annotations

import hashlib

import numpy as np


def rng_for(seed: int, *keys: object) -> np.random.Generator:
    """An independent generator for this seed and key path (e.g. `rng_for(7, uuid, "living")`)."""
    digest = hashlib.sha256("\x1f".join([str(seed), *map(str, keys)]).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:16], "little"))


def choice(rng: np.random.Generator, probs: dict[str, float]) -> str:
    """Draw a key of `probs` with its probability (values need not be normalised)."""
    keys = list(probs)
    p = np.asarray([probs[k] for k in keys], dtype=float)
    return keys[int(rng.choice(len(keys), p=p / p.sum()))]
