"""Which judge to use: agreement with the clinicians against what a judgment costs (MindEval2 §3.4 "Performance vs.
Cost", Figure 2: each judge's severity macro F1 and its ranking stability against its cost per query at list
price without prompt caching).

The agreement numbers come from `judge agreement` (`judges.*.severity.macro_f1` and the Table 3 bootstrap
`ranking.judges.*.bootstrap`); the cost from the judge run's cost table (`judge run` writes it into
`judgments/report.json` under `costs.rows`, one row per role, `list_cost_per_query` filled when `judge.prices`
prices the role). A judge is matched to its cost row by its role name (`judge`, `judge:NAME`). Pure: reads two
reports, calls no model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from mindsimkit.mindcore.errors import InputError

PLOT = "judge_cost_tradeoff.png"


def read_costs(path: Path) -> dict[str, Optional[float]]:
    """Role → list cost per query from a judge run's report.json (or any JSON with `costs.rows`)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        rows = data["costs"]["rows"]
        return {str(r["role"]): r.get("list_cost_per_query") for r in rows}
    except FileNotFoundError:
        raise InputError(
            f"--costs {path}: not found; give RUN_DIR/judgments/report.json written by `mindsim judge run`"
        ) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(
            f"--costs {path}: no cost table (`costs.rows` with `role` and `list_cost_per_query`), "
            f"{type(exc).__name__}; give RUN_DIR/judgments/report.json written by `mindsim judge run`"
        ) from None


def points(report: dict[str, Any], costs: dict[str, Optional[float]]) -> dict[str, Any]:
    """Per judge: model, list cost per query, severity macro F1 and ranking stability; the annotators' own
    stability beside them (the paper's reference line)."""
    ranking = report.get("ranking") or {}
    judges = []
    for name, j in report["judges"].items():
        judges.append(
            {
                "judge": name,
                "model": j.get("model"),
                "list_cost_per_query": costs.get(name),
                "severity_macro_f1": j["severity"].get("macro_f1"),
                "ranking_stability": (ranking.get("judges") or {}).get(name, {}).get("bootstrap"),
            }
        )
    drawable = [p for p in judges if p["list_cost_per_query"] is not None and p["severity_macro_f1"] is not None]
    why = None
    if not judges:
        why = "no judge: give --judgments"
    elif not drawable:
        why = (
            "no judge has a list cost per query: price the judge roles under judge.prices and give that run's "
            "judgments/report.json (--costs)"
        )
    return {
        "judges": judges,
        "annotators_stability": (ranking.get("bootstrap") or {}).get("annotators"),
        "drawn": bool(drawable),
        "not_drawn": why,
    }


def plot(tradeoff: dict[str, Any], path: Path) -> Path:
    """Two panels, as Figure 2: severity macro F1 and ranking stability against cost per query (log scale)."""
    from mindsimkit.mindcore.plots import pyplot, save_png

    plt = pyplot()
    pts = [p for p in tradeoff["judges"] if p["list_cost_per_query"] is not None]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key, label in (
        (axes[0], "severity_macro_f1", "severity macro F1"),
        (axes[1], "ranking_stability", "ranking stability (share of bootstrap draws)"),
    ):
        shown = [p for p in pts if p[key] is not None]
        for k, p in enumerate(shown):
            ax.scatter(p["list_cost_per_query"], p[key], color=f"C{k}", s=40, zorder=3)
            ax.annotate(
                p["judge"], (p["list_cost_per_query"], p[key]), textcoords="offset points", xytext=(6, 4), fontsize=8
            )
        if key == "ranking_stability" and tradeoff.get("annotators_stability") is not None:
            ax.axhline(
                tradeoff["annotators_stability"],
                color="grey",
                linestyle="--",
                linewidth=1,
                label="annotators' own stability",
            )
            ax.legend(fontsize=8, loc="lower right")
        if shown:
            ax.set_xscale("log")
            ax.margins(x=0.25)  # room for the labels at both ends
            low = min(p[key] for p in shown)
            ax.set_ylim(max(0.0, low - 0.1), 1.02)
        ax.set_xlabel("cost per query at list price, no caching (log scale)")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        if not shown:
            ax.text(0.5, 0.5, "not available", transform=ax.transAxes, ha="center", color="grey")
    fig.suptitle("Judge agreement with clinicians against cost per query (cf. MindEval2 Figure 2)")
    return save_png(fig, path)


def markdown(tradeoff: dict[str, Any]) -> list[str]:
    lines = ["## Agreement against cost per query (cf. Figure 2)", ""]
    if not tradeoff["drawn"]:
        return lines + [f"Not drawn: {tradeoff['not_drawn']}.", ""]

    def f(x: float | None, nd: int = 3) -> str:
        return "—" if x is None else f"{x:.{nd}f}"

    lines += [
        "| judge | model | cost per query (list) | severity macro F1 | ranking stability |",
        "|---|---|---|---|---|",
    ]
    for p in tradeoff["judges"]:
        lines.append(
            f"| {p['judge']} | {p['model'] or '—'} | {f(p['list_cost_per_query'], 5)} | "
            f"{f(p['severity_macro_f1'])} | {f(p['ranking_stability'])} |"
        )
    if tradeoff.get("annotators_stability") is not None:
        lines += ["", f"Annotators' own ranking stability: {f(tradeoff['annotators_stability'])} (dashed line)."]
    return lines + ["", f"![Figure 2: agreement against cost]({PLOT})", ""]
