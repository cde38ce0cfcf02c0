"""Validation report (MindEval2/MindSim paper, Table 5 and Figure 3): report.json, report.md and the
PNG plots. Only aggregates go in: distances, intervals, floors, arc shares, counts, provenance.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mindsimkit.mindcore.io import atomic_write_json_if_changed, atomic_write_text, json_safe
from mindsimkit.mindcore.layout import ValidationFolder
from mindsimkit.mindcore.runlog import ValidationReport
from mindsimkit.validation.arc import LABEL_NAMES, LABELS
from mindsimkit.validation.config import ValidationConfig
from mindsimkit.validation.features import FEATURE_LABELS, FEATURES
from mindsimkit.validation.reference import Measured

# Settings that change feature values: a reference measured differently is not comparable.
_COMPARABLE = ("mtld_threshold", "markers_version", "min_patient_turns")


def _warnings(ref: Measured, systems: dict[str, Measured], config: ValidationConfig) -> list[str]:
    out: list[str] = []
    ref_settings = ref.meta.get("settings", {})
    for name, sim in systems.items():
        sim_settings = sim.meta.get("settings", {})
        for key in _COMPARABLE:
            if key in ref_settings and key in sim_settings and ref_settings[key] != sim_settings[key]:
                out.append(f"{name}: {key} is {sim_settings[key]!r} but the reference used {ref_settings[key]!r}")
        if config.arc and sim.arc_counts is None:
            out.append(f"{name}: no arc labels (an artifact built without --arc)")
    if config.arc and ref.arc_counts is None:
        out.append("reference: artifact has no arc labels; rebuild it with --arc to compare arcs against it")
    return out


def build_report(
    ref: Measured,
    systems: dict[str, Measured],
    distances: dict[str, Any],
    arc: dict[str, dict[str, dict[str, float]]],
    config: ValidationConfig,
) -> dict[str, Any]:
    """The report.json structure (see docs/validation.md)."""
    sys_out = {}
    extra_warnings: list[str] = []
    for name, res in distances["systems"].items():
        entry: dict[str, Any] = {f: res.features[f].model_dump() for f in FEATURES}
        entry["index"] = res.index.model_dump()
        entry["joint"] = res.joint
        sys_out[name] = entry
        if res.undefined:
            extra_warnings.append(
                f"{name}: {', '.join(res.undefined)} undefined (reference SD 0 or no values); left out of the index"
            )
    report = {
        "features": list(FEATURES),
        "feature_labels": FEATURE_LABELS,
        "floor": distances["floor"],
        "systems": sys_out,
        "arc": arc,
        "arc_labels": LABEL_NAMES,
        "counts": {"reference": ref.counts, **{n: s.counts for n, s in systems.items()}},
        "reference": {
            "name": ref.name,
            "settings": ref.meta.get("settings", {}),
            "provenance": ref.meta.get("provenance", {}),
        },
        "settings": config.model_dump(exclude={"arc_cache"}),
        "warnings": _warnings(ref, systems, config) + extra_warnings,
    }
    safe: dict[str, Any] = json_safe(report)
    return safe


def _fmt(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _cell(est: dict[str, Any] | float | None, best: bool) -> str:
    if isinstance(est, dict):
        lo, hi = est["ci"]
        text = f"{_fmt(est['distance'])} [{_fmt(lo)}, {_fmt(hi)}]"
    else:
        text = _fmt(est)
    return f"**{text}**" if best and text != "–" else text


def distance_table(report: dict[str, Any]) -> list[str]:
    """Markdown table like the paper's Table 5: rows features, columns systems, then the floor."""
    names = list(report["systems"])
    rows = [(report["feature_labels"][f], f) for f in report["features"]]
    rows += [("Index (mean of 7)", "index"), ("Joint OT (7-D)", "joint")]
    lines = ["| Feature | " + " | ".join(names) + " | Floor |", "|---" * (len(names) + 2) + "|"]
    for label, key in rows:
        ests = [report["systems"][n][key] for n in names]
        points = [e["distance"] if isinstance(e, dict) else e for e in ests]
        finite = [p for p in points if p is not None]
        lowest = min(finite) if finite else None
        # Bold marks the lowest of several systems; with one system there is nothing to rank.
        cells = [_cell(e, len(names) > 1 and p is not None and p == lowest) for e, p in zip(ests, points)]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {_fmt(report['floor'].get(key))} |")
    return lines


def arc_tables(report: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for name, shares in report["arc"].items():
        lines += [f"**{name}** (share of labelled patient turns, %)", "", "| Stretch | " + " | ".join(LABELS) + " |"]
        lines.append("|---" * (len(LABELS) + 1) + "|")
        for k, row in shares.items():
            lines.append(
                f"| {int(k) + 1} | "
                + " | ".join(_fmt(None if row[l] is None else 100 * row[l], 0) for l in LABELS)
                + " |"
            )
        lines.append("")
    return lines


def to_markdown(report: dict[str, Any]) -> str:
    ref_counts = report["counts"]["reference"]
    s = report["settings"]
    attribution = report["reference"].get("provenance", {}).get("attribution")
    lines = [
        "# Patient realism: distances to the reference",
        "",
        f"Reference: **{report['reference']['name']}** — {ref_counts.get('conversations_used')} conversations, "
        f"{ref_counts.get('patients')} patients, {ref_counts.get('patient_turns')} patient turns.",
    ]
    if attribution:
        lines += ["", f"Reference attribution: {attribution}"]
    filters = report.get("filters") or {}
    if filters:
        said = {
            "first_sessions_only": "first sessions only",
            "max_patient_turns": f"each conversation cut after patient turn {filters.get('max_patient_turns')}",
            "counsellors": "counsellors " + ", ".join(filters.get("counsellors") or []),
        }
        lines += ["", "Systems' sample (the reference is never filtered): " + "; ".join(said[k] for k in filters) + "."]
    lines += [
        "",
        "## Surface-feature distances",
        "",
        "Wasserstein-1 between per-conversation feature values, in reference standard deviations. "
        f"Brackets: {round(100 * s['ci_level'])}% percentile bootstrap over patients on both sides "
        f"({s['bootstrap_draws']} draws). Floor: {round(100 * s['floor_quantile'])}th percentile of the distance between two "
        f"random halves of the reference patients ({s['floor_splits']} splits). Bold: lowest point estimate in the row. "
        "A distance near or below the floor is indistinguishable from sampling noise in the reference.",
        "",
        *distance_table(report),
        "",
    ]
    if report["arc"]:
        lines += [
            "## Narrative arc",
            "",
            "P problem, T transition, C change talk, F filler; stretches are equal fifths of each conversation's patient turns.",
            "",
            *arc_tables(report),
        ]
    lines += [
        "## Counts",
        "",
        "| Source | Conversations | Patients | Patient turns | Skipped (no patient turn) | "
        "Skipped (later session) | Skipped (other counsellor) | Cut at max turns |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, c in report["counts"].items():
        lines.append(
            f"| {name} | {c.get('conversations_used')} | {c.get('patients')} | {c.get('patient_turns')} | {c.get('skipped_no_patient_turn', 0)} | "
            f"{c.get('skipped_later_session', 0)} | {c.get('skipped_other_counsellor', 0)} | {c.get('truncated_at_max_patient_turns', 0)} |"
        )
    if report["warnings"]:
        lines += ["", "## Warnings", "", *[f"- {w}" for w in report["warnings"]]]
    return "\n".join(lines) + "\n"


def write_report(
    report: dict[str, Any], ref: Measured, systems: dict[str, Measured], out_dir: str | Path, *, plots: bool = True
) -> Path:
    out_dir = Path(out_dir)
    folder = ValidationFolder(out_dir)
    ValidationReport.model_validate(report)  # what the run log's readers expect, or fail here rather than later
    atomic_write_json_if_changed(folder.report_json, report)  # a rerun with the same result changes nothing
    atomic_write_text(folder.report_md, to_markdown(report))
    if plots:
        from mindsimkit.validation.plots import plot_all  # matplotlib only when plots are wanted

        plot_all(report, ref, systems, out_dir)
    return out_dir
