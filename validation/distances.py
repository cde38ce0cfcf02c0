"""Distances to the reference and their uncertainty (MindEval2/MindSim paper, §4.3 Table 5 and
Appendix E "Distances and uncertainty").

For each feature: Wasserstein-1 between the per-conversation values of a system and of the
reference, divided by the reference's standard deviation. Intervals are 95% percentile bootstraps
that resample patients (with all their conversations) on both sides. The noise floor is the same
distance between two random halves of the reference patients, 95th percentile over the splits.
The index is the mean of the normalised feature distances, with its interval taken from the same
draws. Beyond the paper, `joint_distance` is the optimal-transport distance between the
standardised 7-feature vectors (POT), one number for the whole surface profile.

Speed: resampling patients with replacement is the same as weighting every conversation by how
often its patient was drawn, so all draws of a feature are one batched weighted-CDF computation
over the merged sorted support (W1 = ∫|F_a − F_b|). No per-draw Python loop, no scipy call per draw.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, Field

# Draws handled at once: small enough that a chunk of (draws x conversations) stays in CPU cache
# (64 was 3x faster than 256 at the paper scale; see docs/validation.md).
_CHUNK = 64
# Array libraries POT would load as backends (POT_BACKEND_DISABLE_<NAME>); the distances here are NumPy's.
_POT_BACKENDS_NOT_USED = ("PYTORCH", "JAX", "CUPY", "TENSORFLOW")


@dataclass(frozen=True)
class FeatureSample:
    """One side of a comparison: per-conversation feature values (NaN = undefined) and patient codes."""

    values: np.ndarray  # (n_conversations, n_features)
    patients: np.ndarray  # (n_conversations,), ints 0..n_patients-1

    def __post_init__(self) -> None:
        if self.values.ndim != 2 or self.values.shape[0] != self.patients.shape[0]:
            raise ValueError("values must be (n, F) and patients (n,)")

    @property
    def n_patients(self) -> int:
        return int(self.patients.max()) + 1 if self.patients.size else 0


class Estimate(BaseModel):
    """A distance with its percentile-bootstrap interval."""

    distance: float = Field(description="Point estimate on the full samples.")
    ci: tuple[float, float] = Field(description="Percentile bootstrap interval [low, high].")


class SystemDistances(BaseModel):
    """All distances of one system to the reference."""

    features: dict[str, Estimate] = Field(description="Normalised W1 per feature.")
    index: Estimate = Field(description="Mean of the normalised feature distances that are defined.")
    undefined: list[str] = Field(default_factory=list, description="Features left out: reference SD 0 or no values.")
    joint: float | None = Field(None, description="OT distance between standardised feature vectors.")


def w1(u: np.ndarray, v: np.ndarray, u_weights: np.ndarray | None = None, v_weights: np.ndarray | None = None) -> float:
    """Wasserstein-1 between two weighted 1-D samples (same value as scipy's wasserstein_distance)."""
    u = np.asarray(u, dtype=float)
    v = np.asarray(v, dtype=float)
    wu = np.ones_like(u) if u_weights is None else np.asarray(u_weights, dtype=float)
    wv = np.ones_like(v) if v_weights is None else np.asarray(v_weights, dtype=float)
    return float(w1_batch(u, v, wu[None, :], wv[None, :])[0])


def w1_batch(a: np.ndarray, b: np.ndarray, wa: np.ndarray, wb: np.ndarray) -> np.ndarray:
    """W1 between a and b under many weightings at once: wa (B, len(a)), wb (B, len(b)) -> (B,).
    A row whose weights sum to zero on either side gives NaN."""
    z = np.concatenate([a, b])
    order = np.argsort(z, kind="stable")
    gaps = np.diff(z[order])
    n_a = a.shape[0]
    # Position of each merged point in the sorted order, split by side.
    pos = np.empty_like(order)
    pos[order] = np.arange(order.size)
    pos_a, pos_b = pos[:n_a], pos[n_a:]
    out = np.empty(wa.shape[0])
    for start in range(0, wa.shape[0], _CHUNK):
        stop = start + _CHUNK
        # One signed cumulative sum gives F_a - F_b directly (half the work of two CDFs).
        with np.errstate(invalid="ignore", divide="ignore"):
            da = wa[start:stop] / wa[start:stop].sum(axis=1, keepdims=True)
            db = wb[start:stop] / wb[start:stop].sum(axis=1, keepdims=True)
        placed = np.empty((da.shape[0], z.size))
        placed[:, pos_a] = da
        placed[:, pos_b] = -db
        np.cumsum(placed, axis=1, out=placed)
        out[start:stop] = np.abs(placed[:, :-1]) @ gaps
    return out


def weighted_std(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Population SD of x under each row of weights w (B, n) -> (B,)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        total = w.sum(axis=1)
        mean = (w @ x) / total
        var = (w @ (x * x)) / total - mean * mean
    sd: np.ndarray = np.sqrt(np.maximum(var, 0.0))
    return sd


def patient_draws(rng: np.random.Generator, n_patients: int, n_draws: int) -> np.ndarray:
    """How often each patient is drawn in each bootstrap replicate: (n_draws, n_patients) counts."""
    idx = rng.integers(0, n_patients, size=(n_draws, n_patients))
    flat = (idx + (np.arange(n_draws) * n_patients)[:, None]).ravel()
    return np.bincount(flat, minlength=n_draws * n_patients).reshape(n_draws, n_patients).astype(float)


def _feature_distances(ref: FeatureSample, sim: FeatureSample, w_ref: np.ndarray, w_sim: np.ndarray) -> np.ndarray:
    """Normalised W1 per feature under patient-level weights: returns (B, F). w_* are (B, n_patients)."""
    n_feat = ref.values.shape[1]
    out = np.empty((w_ref.shape[0], n_feat))
    for f in range(n_feat):
        a_ok = ~np.isnan(ref.values[:, f])
        b_ok = ~np.isnan(sim.values[:, f])
        a = ref.values[a_ok, f]
        wa = w_ref[:, ref.patients[a_ok]]
        wb = w_sim[:, sim.patients[b_ok]]
        sd = weighted_std(a, wa)
        with np.errstate(invalid="ignore", divide="ignore"):
            # A constant reference (SD 0) leaves the normalised distance undefined: NaN, not inf.
            out[:, f] = np.where(sd > 0, w1_batch(a, sim.values[b_ok, f], wa, wb) / sd, np.nan)
    return out


def _quantile(values: np.ndarray, q: float) -> float:
    """Percentile ignoring undefined (NaN) entries; NaN when nothing is defined."""
    finite = values[np.isfinite(values)]
    return float(np.percentile(finite, q)) if finite.size else float("nan")


def _interval(draws: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1.0 - level) / 2.0 * 100.0
    return _quantile(draws, tail), _quantile(draws, 100.0 - tail)


def system_seed(seed: int, name: str) -> int:
    """Per-system seed: adding or renaming another system does not move this one's intervals."""
    return (seed * 1_000_003 + zlib.crc32(name.encode("utf-8"))) % 2**32


def compare_samples(
    ref: FeatureSample, sim: FeatureSample, features: tuple[str, ...], *, draws: int, level: float, seed: int
) -> SystemDistances:
    """Point distances and patient-bootstrap intervals of one system against the reference."""
    ones_ref = np.ones((1, ref.n_patients))
    ones_sim = np.ones((1, sim.n_patients))
    point = _feature_distances(ref, sim, ones_ref, ones_sim)[0]
    rng = np.random.default_rng(seed)
    boot = _feature_distances(
        ref, sim, patient_draws(rng, ref.n_patients, draws), patient_draws(rng, sim.n_patients, draws)
    )
    # The index averages the features defined on the full samples; a draw in which one of them is
    # undefined is left out of the index interval rather than averaged over fewer features.
    defined = ~np.isnan(point)
    index_draws = boot[:, defined].mean(axis=1)
    return SystemDistances(
        features={
            name: Estimate(distance=float(point[f]), ci=_interval(boot[:, f], level)) for f, name in enumerate(features)
        },
        index=Estimate(
            distance=float(point[defined].mean()) if defined.any() else float("nan"), ci=_interval(index_draws, level)
        ),
        undefined=[name for f, name in enumerate(features) if not defined[f]],
    )


def _split_masks(rng: np.random.Generator, n_patients: int, splits: int) -> tuple[np.ndarray, np.ndarray]:
    perm = np.argsort(rng.random((splits, n_patients)), axis=1)
    first = np.zeros((splits, n_patients))
    np.put_along_axis(first, perm[:, : n_patients // 2], 1.0, axis=1)
    second = np.zeros((splits, n_patients))
    np.put_along_axis(second, perm[:, n_patients // 2 :], 1.0, axis=1)
    return first, second


def noise_floor(
    ref: FeatureSample, features: tuple[str, ...], *, splits: int, quantile: float, seed: int
) -> dict[str, float]:
    """Distance between two random halves of the reference patients, `quantile` over the splits;
    the first half plays the reference (its SD normalises). Includes the index under "index"."""
    if ref.n_patients < 2:
        raise ValueError("the noise floor needs at least two reference patients")
    first, second = _split_masks(np.random.default_rng(seed), ref.n_patients, splits)
    dist = _feature_distances(ref, ref, first, second)
    q = quantile * 100.0
    floor = {name: _quantile(dist[:, f], q) for f, name in enumerate(features)}
    floor["index"] = _quantile(dist[:, np.isfinite(dist).any(axis=0)].mean(axis=1), q)
    return floor


def _standardise(values: np.ndarray, mean: np.ndarray, sd: np.ndarray) -> np.ndarray:
    complete = values[~np.isnan(values).any(axis=1)]
    standardised: np.ndarray = (complete - mean) / np.where(sd > 0, sd, 1.0)
    return standardised


def joint_distance(ref_values: np.ndarray, sim_values: np.ndarray, *, scale_from: np.ndarray | None = None) -> float:
    """Exact OT (earth mover's) distance between the two clouds of feature vectors, each feature
    standardised by the reference's mean and SD, Euclidean ground cost, uniform weights.
    Conversations with any undefined feature are left out here."""
    basis = ref_values if scale_from is None else scale_from
    mean = np.nanmean(basis, axis=0)
    sd = np.nanstd(basis, axis=0)
    xa = _standardise(ref_values, mean, sd)
    xb = _standardise(sim_values, mean, sd)
    if not len(xa) or not len(xb):
        return float("nan")
    # POT's package import pulls in scikit-learn (~2.4 s here); only this function needs it, so a command that
    # stops at bad input or computes no joint distance does not pay for it. POT also imports every array library
    # it finds installed (torch, with the train extra: about half of its import time) to offer it as a backend;
    # these are NumPy arrays, so the others are declined (an explicit setting of the user's stands).
    for backend in _POT_BACKENDS_NOT_USED:
        os.environ.setdefault(f"POT_BACKEND_DISABLE_{backend}", "1")
    import ot

    cost = ot.dist(xa, xb, metric="euclidean")
    return float(ot.emd2(np.full(len(xa), 1.0 / len(xa)), np.full(len(xb), 1.0 / len(xb)), cost, numItermax=10_000_000))


def joint_floor(ref: FeatureSample, *, splits: int, quantile: float, seed: int) -> float:
    """Joint distance between two random halves of the reference patients, `quantile` over splits."""
    first, second = _split_masks(np.random.default_rng(seed), ref.n_patients, splits)
    values = [
        joint_distance(ref.values[first[s, ref.patients] > 0], ref.values[second[s, ref.patients] > 0])
        for s in range(splits)
    ]
    return _quantile(np.asarray(values), quantile * 100.0)
