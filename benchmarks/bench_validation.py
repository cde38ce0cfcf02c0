"""Benchmark of the validation package at the paper's scale (MindEval2/MindSim, §4.3 / Appendix E):
1,584 reference conversations from 886 patients and 400 simulated ones (100 patients), about 32,000
reference patient turns, 1,000 bootstrap draws and 100 floor splits; features and distances only
(no arc labelling). Prints seconds per part, the end-to-end `compare()` time, and the batched W1
bootstrap against a per-draw scipy loop measured side by side.

    python benchmarks/bench_validation.py [--draws 1000] [--splits 100]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.stats import wasserstein_distance

from mindsimkit.validation.compare import compare
from mindsimkit.validation.config import ValidationConfig
from mindsimkit.validation.distances import (
    compare_samples,
    joint_distance,
    joint_floor,
    noise_floor,
    patient_draws,
    system_seed,
)
from mindsimkit.validation.features import FEATURES
from mindsimkit.validation.reference import measure, write_reference
from mindsimkit.validation.transcripts import load_transcripts
from smoke import parse_args

MARKERS = ["always", "never", "nothing", "tired", "sad", "stress", "um", "you know", "i mean", "bad"]


def synth_rows(n_conv: int, n_patients: int, mean_turns: float, mean_words: float, seed: int) -> list[dict]:
    """Chat rows with varied turn lengths, sentences, a 3,000-word vocabulary and some markers."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(3000)]
    zipf = 1.0 / np.arange(1, len(vocab) + 1)
    zipf /= zipf.sum()
    rows = []
    for c in range(n_conv):
        messages = []
        for _ in range(max(4, int(rng.poisson(mean_turns)))):
            messages.append({"role": "assistant", "content": "How have things been since we last spoke about it?"})
            k = max(1, int(rng.lognormal(np.log(mean_words), 0.8)))
            words = list(rng.choice(vocab, size=k, p=zipf))
            for pos in rng.integers(0, k, size=int(rng.poisson(0.05 * k))):
                words[pos] = MARKERS[int(rng.integers(len(MARKERS)))]
            text = " ".join(words)
            messages.append({"role": "user", "content": text[0].upper() + text[1:] + "."})
        rows.append({"id": f"s{seed}-{c}", "patient_id": f"p{c % n_patients}", "messages": messages})
    return rows


def timed(label: str, fn, results: dict):
    t0 = time.perf_counter()
    out = fn()
    results[label] = time.perf_counter() - t0
    print(f"{label:<42s} {results[label]:7.3f} s")
    return out


def scipy_bootstrap_seconds(ref, sim, draws: int, seed: int) -> float:
    """The same bootstrap as a per-draw scipy loop (conversations repeated by patient counts)."""
    rng = np.random.default_rng(seed)
    w_ref, w_sim = patient_draws(rng, ref.n_patients, draws), patient_draws(rng, sim.n_patients, draws)
    t0 = time.perf_counter()
    for b in range(draws):
        for f in range(len(FEATURES)):
            a_ok, b_ok = ~np.isnan(ref.values[:, f]), ~np.isnan(sim.values[:, f])
            wa, wb = w_ref[b, ref.patients[a_ok]], w_sim[b, sim.patients[b_ok]]
            a = ref.values[a_ok, f]
            d = wasserstein_distance(a, sim.values[b_ok, f], wa, wb)
            mean = np.average(a, weights=wa)
            _ = d / np.sqrt(np.average((a - mean) ** 2, weights=wa))
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--splits", type=int, default=100)
    parser.add_argument("--scipy-draws", type=int, default=100, help="draws timed for the scipy loop (extrapolated)")
    parser.add_argument("--scale", type=float, default=1.0, help="share of the paper's conversation counts to make")
    args = parse_args(parser, draws=20, splits=5, scipy_draws=2, scale=0.03)
    cfg = ValidationConfig(bootstrap_draws=args.draws, floor_splits=args.splits, plots=False)

    print("generating synthetic transcripts (not timed) ...")

    def n(count: int) -> int:
        return max(8, round(count * args.scale))

    ref_rows = synth_rows(n(1584), n(886), mean_turns=20, mean_words=12, seed=1)
    sim_rows = synth_rows(n(400), n(100), mean_turns=15, mean_words=25, seed=2)
    tmp = Path(tempfile.mkdtemp(prefix="bench_validation_"))
    for name, rows in (("ref", ref_rows), ("sim", sim_rows)):
        (tmp / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")

    t: dict[str, float] = {}
    ref_ts = timed("load reference JSONL", lambda: load_transcripts(tmp / "ref.jsonl"), t)
    print(f"  reference: {ref_ts.counts('user')}")
    ref = timed("features: reference", lambda: measure(ref_ts, cfg), t)
    sim_ts = timed("load simulated JSONL", lambda: load_transcripts(tmp / "sim.jsonl"), t)
    sim = timed("features: simulated", lambda: measure(sim_ts, cfg), t)
    timed(
        f"noise floor ({args.splits} splits, 7 features)",
        lambda: noise_floor(ref.sample, FEATURES, splits=args.splits, quantile=0.95, seed=0),
        t,
    )
    timed(
        f"bootstrap ({args.draws} draws, 7 features)",
        lambda: compare_samples(
            ref.sample, sim.sample, FEATURES, draws=args.draws, level=0.95, seed=system_seed(0, "sim")
        ),
        t,
    )
    timed("joint OT distance (POT, exact)", lambda: joint_distance(ref.values, sim.values), t)
    timed(
        f"joint floor ({cfg.joint_floor_splits} splits)",
        lambda: joint_floor(ref.sample, splits=cfg.joint_floor_splits, quantile=0.95, seed=0),
        t,
    )
    parts = sum(t.values())
    print(f"{'sum of parts':<42s} {parts:7.3f} s")

    write_reference(ref, tmp / "ref.parquet")
    e2e = {}
    timed(
        "compare() from artifact + sim JSONL, no plots",
        lambda: compare(tmp / "ref.parquet", {"sim": tmp / "sim.jsonl"}, tmp / "out", cfg),
        e2e,
    )
    timed(
        "compare() same, with PNG plots",
        lambda: compare(
            tmp / "ref.parquet", {"sim": tmp / "sim.jsonl"}, tmp / "out2", cfg.model_copy(update={"plots": True})
        ),
        e2e,
    )

    per_draw = scipy_bootstrap_seconds(ref.sample, sim.sample, args.scipy_draws, 0) / args.scipy_draws
    fast = t[f"bootstrap ({args.draws} draws, 7 features)"]
    print(
        f"\nbootstrap, scipy per-draw loop: {per_draw * args.draws:.2f} s for {args.draws} draws "
        f"(timed {args.scipy_draws}, extrapolated) vs batched {fast:.2f} s -> {per_draw * args.draws / fast:.1f}x"
    )
    print(
        f"goal: whole comparison < 5 s; end-to-end compare() without plots took {e2e['compare() from artifact + sim JSONL, no plots']:.2f} s"
    )


if __name__ == "__main__":
    main()
