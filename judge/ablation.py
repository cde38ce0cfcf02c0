"""The memory ablation's scores (MindEval2 App. G.1 "Memory Ablation", Figure 11): how much a counsellor's MHQR
changes when its later sessions are rerun without the memory section (as in session 1) while the patient keeps
its memory, judged with the running memory in the counsellor's prompt.

Pure functions of judgment rows, like `judge.scores`: the ablated sessions' rows and their benchmark twins' rows
(the same judge, the same rubric) go in; per counsellor out come
- the paired difference ablated − benchmark over the same patient's same session (same patient engine), with a
  95% interval from the patient bootstrap of `judge.scores` (patients resampled with all their sessions);
- its split by issue category: the same difference on each category's allocated MHQR (`judge.scores.session_table`
  allocates a reply's weight equally among its issues), so the categories add up to the whole difference;
- the counsellor's own change from the first session in the benchmark (later − first), the x axis of Figure 11,
  when the twins' first sessions are among the rows.
Over all counsellors together the same paired difference is the paper's headline number (+0.51 [0.42, 0.60]).
Positive means the ablated sessions scored worse (higher MHQR).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import numpy as np

from mindsimkit.mindcore.runlog import MemoryAblationReport
from mindsimkit.mindcore.io import atomic_write_json, atomic_write_text, json_safe
from mindsimkit.mindcore.plots import pyplot, save_png
from mindsimkit.judge.rubric import Rubric
from mindsimkit.judge.scores import Sessions, cluster_bootstrap, columns_from_rows, session_table

PLOT = "memory_ablation.png"


def _trials(s: Sessions) -> np.ndarray:
    return s.trial if s.trial is not None else np.zeros(len(s.mhqr), dtype=np.int64)


def _keyed(s: Sessions, mask: np.ndarray) -> dict[tuple[str, str, str, int, int], int]:
    """(counsellor, patient, engine, session index, trial) -> session row. With `simulation.trials` > 1 a rerun
    pairs with its own trial's twin; the trials of one patient stay one bootstrap cluster (`pats` below)."""
    tr = _trials(s)
    return {
        (str(s.counsellor[i]), str(s.patient[i]), str(s.patient_engine[i]), int(s.session_index[i]), int(tr[i])): int(i)
        for i in np.flatnonzero(mask)
    }


def _interval(d: np.ndarray, pats: np.ndarray, draws: int, seed: int) -> dict[str, Any]:
    mean, lo, hi = cluster_bootstrap(d, pats, draws, seed)
    return {"mean_diff": mean, "ci95": [lo, hi]}


def paired_ablation(
    ablated: Iterable[Any], benchmark: Iterable[Any], rubric: Rubric, *, draws: int, seed: int
) -> dict[str, Any]:
    """Ablated − benchmark MHQR per counsellor (and over all), on the sessions both sides have. `ablated` and
    `benchmark` are one judge's `JudgmentRow`s (or their dicts); failed rows are left out by `columns_from_rows`.
    Benchmark rows of session indexes the ablation did not rerun (the first session) only feed
    `benchmark_change_from_first`."""
    a = session_table(columns_from_rows(ablated, by_engine=False), rubric)
    b = session_table(columns_from_rows(benchmark, by_engine=False), rubric)
    ka, kb = _keyed(a, np.ones(len(a.mhqr), bool)), _keyed(b, np.ones(len(b.mhqr), bool))
    pairs = sorted(set(ka) & set(kb))
    cats = a.categories
    names = sorted({k[0] for k in pairs})
    unmatched = sorted(set(ka) - set(kb))

    def block(keys: list[tuple[str, str, str, int, int]]) -> dict[str, Any]:
        ia = np.array([ka[k] for k in keys], dtype=np.int64)
        ib = np.array([kb[k] for k in keys], dtype=np.int64)
        pats = np.array([f"{k[1]}|{k[2]}" for k in keys], dtype=object).astype(str)
        d = a.mhqr[ia] - b.mhqr[ib]
        out = {
            **_interval(d, pats, draws, seed),
            "pairs": len(keys),
            "patients": int(len(np.unique(pats))),
            "ablated_mhqr": float(a.mhqr[ia].mean()),
            "benchmark_mhqr": float(b.mhqr[ib].mean()),
        }
        out["by_category"] = {
            cat: _interval(a.by_category[ia, j] - b.by_category[ib, j], pats, draws, seed) for j, cat in enumerate(cats)
        }
        by_index = sorted({k[3] for k in keys})
        if len(by_index) > 1:
            out["by_session"] = {}
            for k in by_index:
                sub = [key for key in keys if key[3] == k]
                out["by_session"][k] = {**block_plain(sub), "pairs": len(sub)}
        return out

    def block_plain(keys: list[tuple[str, str, str, int, int]]) -> dict[str, Any]:
        ia = np.array([ka[k] for k in keys], dtype=np.int64)
        ib = np.array([kb[k] for k in keys], dtype=np.int64)
        pats = np.array([f"{k[1]}|{k[2]}" for k in keys], dtype=object).astype(str)
        return _interval(a.mhqr[ia] - b.mhqr[ib], pats, draws, seed)

    counsellors = {}
    for name in names:
        entry = block([k for k in pairs if k[0] == name])
        entry["benchmark_change_from_first"] = _change_from_first(b, name, draws, seed)
        counsellors[name] = entry
    return {
        "direction": "ablated - benchmark MHQR; positive: worse without the counsellor's memory",
        "categories": cats,
        "counsellors": counsellors,
        "overall": block(pairs) if pairs else None,
        "unmatched_ablated_sessions": len(unmatched),
    }


def _change_from_first(b: Sessions, name: str, draws: int, seed: int) -> dict[str, Any] | None:
    """Later − first benchmark MHQR of one counsellor, each later session paired with its patient's first."""
    mine, tr = b.counsellor == name, _trials(b)

    def arc(i: int) -> tuple[str, str, int]:  # a later session pairs with the first session of its own trial
        return str(b.patient[i]), str(b.patient_engine[i]), int(tr[i])

    first = {arc(i): b.mhqr[i] for i in np.flatnonzero(mine & (b.session_index == 0)).tolist()}
    later = [
        (f"{b.patient[i]}|{b.patient_engine[i]}", b.mhqr[i] - first[arc(i)])
        for i in np.flatnonzero(mine & (b.session_index > 0)).tolist()
        if arc(i) in first
    ]
    if not later:
        return None
    pats = np.array([p for p, _ in later], dtype=object).astype(str)
    return {**_interval(np.array([d for _, d in later]), pats, draws, seed), "pairs": len(later)}


# -- output ---------------------------------------------------------------------------------------------------


def _f(x: Any) -> str:
    return "–" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:+.2f}"


def _ci(e: dict[str, Any]) -> str:
    lo, hi = e["ci95"]
    return f"{_f(e['mean_diff'])} [{_f(lo)}, {_f(hi)}]"


def markdown(report: dict[str, Any], rubric: Rubric) -> str:
    names = {c.id: c.name for c in rubric.categories}
    lines = [
        "# Memory ablation (MindEval2 App. G.1, Figure 11)",
        "",
        "Sessions 2+ rerun with the counsellor's memory section as in session 1 (no earlier sessions) while the "
        "patient keeps its memory, each from its benchmark twin's scenario, schedule and running memory; judged "
        "with the running memory in the counsellor's prompt, as the twin was. Differences are ablated − "
        "benchmark MHQR over the same patient's same session (positive: worse without memory), with 95% "
        "patient-bootstrap intervals.",
        "",
    ]
    for judge, r in report["judges"].items():
        lines += [f"## Judge `{judge}`", ""]
        if r["overall"]:
            lines += [
                f"All counsellors: {_ci(r['overall'])} over {r['overall']['pairs']} paired sessions of "
                f"{r['overall']['patients']} patients.",
                "",
            ]
        lines += [
            "| counsellor | benchmark MHQR | ablated MHQR | ablated − benchmark | pairs | benchmark later − first |",
            "|---|---|---|---|---|---|",
        ]
        for name, e in r["counsellors"].items():
            ch = e.get("benchmark_change_from_first")
            lines.append(
                f"| {name} | {e['benchmark_mhqr']:.2f} | {e['ablated_mhqr']:.2f} | {_ci(e)} | {e['pairs']} | "
                f"{_ci(ch) if ch else '–'} |"
            )
        lines += [
            "",
            "By issue category (allocated MHQR, ablated − benchmark; the categories add up to the total):",
            "",
            "| counsellor | " + " | ".join(names.get(c, c) for c in r["categories"]) + " |",
            "|---|" + "---|" * len(r["categories"]),
        ]
        rows = [*r["counsellors"].items(), *([("all", r["overall"])] if r["overall"] else [])]
        for name, e in rows:
            lines.append(f"| {name} | " + " | ".join(_ci(e["by_category"][c]) for c in r["categories"]) + " |")
        if r["unmatched_ablated_sessions"]:
            lines += ["", f"{r['unmatched_ablated_sessions']} ablated session(s) have no judged twin and are left out."]
        lines.append("")
    if report.get("failures"):
        lines += ["## Sessions not rerun", ""] + [f"- {f['session']}: {f['error']}" for f in report["failures"]]
    return "\n".join(lines).rstrip() + "\n"


def plot(path: Path, report: dict[str, Any], rubric: Rubric) -> bool:
    """Figure 11's content: per counsellor the ablation's MHQR change split by category (stacked, with its
    interval), and against the counsellor's own benchmark change from the first session."""
    judge, r = next(iter(report["judges"].items()), (None, None))
    if not r or not r["counsellors"]:
        return False
    plt = pyplot()
    names = list(r["counsellors"])
    cats = r["categories"]
    cat_names = {c.id: c.name for c in rubric.categories}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.5 * len(names) + 3))
    y = np.arange(len(names))
    pos, neg = np.zeros(len(names)), np.zeros(len(names))
    for j, cat in enumerate(cats):
        v = np.array([r["counsellors"][n]["by_category"][cat]["mean_diff"] for n in names], dtype=float)
        v = np.nan_to_num(v)
        base = np.where(v >= 0, pos, neg)
        left.barh(y, v, left=base, color=plt.cm.tab10(j % 10), label=cat_names.get(cat, cat))
        pos, neg = pos + np.clip(v, 0, None), neg + np.clip(v, None, 0)
    tot = np.array([r["counsellors"][n]["mean_diff"] for n in names], dtype=float)
    lo = np.array([r["counsellors"][n]["ci95"][0] for n in names], dtype=float)
    hi = np.array([r["counsellors"][n]["ci95"][1] for n in names], dtype=float)
    left.errorbar(tot, y, xerr=[tot - lo, hi - tot], fmt="o", color="black", capsize=3)
    left.axvline(0, color="grey", lw=0.8)
    left.set_yticks(y, names)
    left.set_xlabel("MHQR without counsellor memory − benchmark")
    left.margins(x=0.08)
    left.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=3, frameon=False)
    xs = [r["counsellors"][n].get("benchmark_change_from_first") for n in names]
    for n, ch, d in zip(names, xs, tot):
        if ch is not None:
            right.scatter(ch["mean_diff"], d)
            right.annotate(n, (ch["mean_diff"], d), fontsize=7)
    right.margins(0.15)
    right.axhline(0, color="grey", lw=0.8)
    right.axvline(0, color="grey", lw=0.8)
    right.set_xlabel("benchmark MHQR, later − first session")
    right.set_ylabel("ablation change")
    fig.suptitle(f"Memory ablation, judged by {judge}")
    save_png(fig, path)
    return True


def write(out: Path, report: dict[str, Any], rubric: Rubric, plots: bool = True) -> dict[str, Path]:
    """`report.json`, `report.md` and the PNG under `out`."""
    report = json_safe(report)
    files = {"report.json": out / "report.json", "report.md": out / "report.md"}
    if plots and plot(out / PLOT, report, rubric):
        report["plots"] = [PLOT]
        files[PLOT] = out / PLOT
    MemoryAblationReport.model_validate(report)  # what the run log's readers expect, or fail here
    atomic_write_json(files["report.json"], report)
    atomic_write_text(files["report.md"], markdown(report, rubric))
    return files
