"""Report plots (MindEval2/MindSim paper, Table 5 as a chart and Figure 3): per-feature distributions
of the reference and each system, distances with intervals against the floor, and the narrative arc
over the five stretches. Only aggregate shapes are drawn; no text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from mindsimkit.mindcore.plots import pyplot, save_png
from mindsimkit.validation.arc import LABEL_NAMES, LABELS
from mindsimkit.validation.features import FEATURE_LABELS, FEATURES
from mindsimkit.validation.reference import Measured

plt = pyplot()  # this module is imported only to draw
_COLORS = plt.get_cmap("tab10").colors


def plot_distributions(ref: Measured, systems: dict[str, Measured], path: Path) -> Path:
    """One panel per feature: density histograms over common bins (1st–99th percentile of all data)."""
    sides = {"reference": ref, **systems}
    fig, axes = plt.subplots(2, 4, figsize=(16, 7))
    for j, (feature, ax) in enumerate(zip(FEATURES, axes.flat)):
        columns = {n: m.values[:, j][~np.isnan(m.values[:, j])] for n, m in sides.items()}
        pooled = np.concatenate([c for c in columns.values() if c.size] or [np.zeros(1)])
        lo, hi = np.percentile(pooled, [1, 99])
        bins = np.linspace(lo, hi if hi > lo else lo + 1.0, 30)
        for i, (name, col) in enumerate(columns.items()):
            if col.size:
                ax.hist(
                    np.clip(col, lo, hi),
                    bins=bins,
                    density=True,
                    histtype="step",
                    linewidth=2 if i == 0 else 1.4,
                    color="black" if i == 0 else _COLORS[(i - 1) % 10],
                    label=name,
                )
        ax.set_title(FEATURE_LABELS[feature])
        ax.set_yticks([])
    axes.flat[-1].axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    axes.flat[-1].legend(handles, labels, loc="center", frameon=False)
    fig.suptitle("Per-conversation feature distributions (patient turns)")
    return save_png(fig, path)


def plot_distances(report: dict[str, Any], path: Path) -> Path:
    """Point estimates with bootstrap intervals per feature and system; the floor as a grey bar."""
    names = list(report["systems"])
    rows = [*report["features"], "index"]
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(rows) * max(1, len(names)) + 1.5))
    step = 0.8 / max(1, len(names))
    for r, key in enumerate(rows):
        floor = report["floor"].get(key)
        if floor is not None:
            ax.barh(r, floor, height=0.85, color="0.88", zorder=0)
        for i, name in enumerate(names):
            est = report["systems"][name][key]
            if est["distance"] is None:
                continue
            y = r - 0.4 + step * (i + 0.5)
            lo, hi = est["ci"]
            color = _COLORS[i % 10]
            # A W1 bootstrap is biased upward, so the interval need not straddle the point: draw it as
            # a segment rather than as symmetric-style error bars.
            if lo is not None:
                ax.hlines(y, lo, hi, color=color, linewidth=2)
            ax.plot(est["distance"], y, "o", color=color, label=name if r == 0 else None)
    ax.set_yticks(range(len(rows)), [FEATURE_LABELS.get(k, "Index (mean)") for k in rows])
    ax.invert_yaxis()
    ax.set_xlabel("W1 / reference SD (grey: noise floor)")
    ax.legend(loc="lower right")
    return save_png(fig, path)


def plot_arc(report: dict[str, Any], path: Path) -> Path:
    """Share of each label over the stretches, one panel per source (the paper's Figure 3)."""
    arc = report["arc"]
    fig, axes = plt.subplots(1, len(arc), figsize=(4 * len(arc), 3.4), sharey=True, squeeze=False)
    for ax, (name, shares) in zip(axes[0], arc.items()):
        x = [int(k) + 1 for k in shares]
        for j, lab in enumerate(LABELS):
            y = [np.nan if shares[k][lab] is None else 100 * shares[k][lab] for k in shares]
            ax.plot(x, y, marker="o", color=_COLORS[j], label=LABEL_NAMES[lab])
        ax.set_title(name)
        ax.set_xticks(x)
        ax.set_xlabel("stretch of the conversation")
    axes[0][0].set_ylabel("% of patient turns")
    axes[0][0].set_ylim(bottom=0)
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize="small", frameon=False)
    return save_png(fig, path)


def plot_all(report: dict[str, Any], ref: Measured, systems: dict[str, Measured], out_dir: Path) -> list[Path]:
    paths = [
        plot_distributions(ref, systems, out_dir / "features.png"),
        plot_distances(report, out_dir / "distances.png"),
    ]
    if report["arc"]:
        paths.append(plot_arc(report, out_dir / "arc.png"))
    return paths
