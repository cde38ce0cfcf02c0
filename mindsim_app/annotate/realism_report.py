"""`mindsim realism report`: the human realism ratings as MindEval2 reports them (§4.3, App. E).

Table 4, per system: mean rating per turn and per conversation, share of turns rated 3 or lower, share of
turns with no reason ticked, and each reason's share. Table 13: ordinal Krippendorff's α among the raters
(judge/alpha.py) overall and per pair, and the share of turns on which all ratings fall within one point. The
paper's α is over the turns every rater rated (`alpha`, labelled the all-rater subset); beside it is α on every
pairable rating (`alpha_pairable`: every turn rated by two or more raters), which drops nothing α can use. Intervals resample patients with replacement (within
each system for Table 4; the patients of the shared turns for Table 13), so turns and conversations of one
patient move together.

Units (also in the report's `definitions`): one rating is one rater's answer on one patient reply; Table 4
counts ratings (a turn rated by three raters counts three times), a conversation's mean is the mean of its
ratings, and a system's per-conversation mean is the mean over its conversations.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.io import atomic_write_json, atomic_write_jsonl, atomic_write_text, read_jsonl
from mindsimkit.judge.alpha import alpha
from mindsimkit.judge.rubrics import strict_point
from mindsimkit.mindsim_app.annotate.protocol import protocol_data, realism_reasons

DRAWS = 2000
DEFINITIONS = {
    "rating": "one rater's answer (1-5) on one patient reply",
    "mean_turn": "mean over a system's ratings",
    "mean_conversation": "per conversation the mean of its ratings, then the mean over the system's conversations",
    "share_at_most_3": "share of a system's ratings at 3 or below",
    "share_no_reason": "share of ratings with no reason ticked: only 'form_none' and 'content_none'",
    "reason_shares": "per reason, the share of ratings that tick it",
    "alpha": "ordinal Krippendorff's alpha over the turns rated by every rater (the all-rater subset, as the paper)",
    "alpha_pairable": "ordinal Krippendorff's alpha on every pairable rating: each turn rated by two or more raters "
    "counts, whoever rated it; turns with one rating drop out",
    "within_one": "share of those turns whose highest and lowest rating differ by at most one point",
    "interval": "2.5th-97.5th percentile over bootstrap resamples of patients",
}


def _alpha(matrix: np.ndarray) -> Optional[float]:
    if matrix.shape[1] < 2 or np.all(np.isnan(matrix)):
        return None
    return alpha(matrix, "ordinal", [1, 2, 3, 4, 5])  # None when undefined (one value only)


def read_ratings(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """Lines of `realism_ratings.jsonl` written with the key (system, conversation_id, patient_id present)."""
    out, seen = [], set()
    for path in paths:
        for line, r in read_jsonl(path):
            where = f"{path}:{line}"
            missing = [
                f
                for f in ("item_id", "unit", "rater", "rating", "reasons", "system", "conversation_id", "patient_id")
                if f not in r
            ]
            if missing:
                hint = " (export with --key TASK.key.json)" if "system" in missing else ""
                raise InputError(f"{where}: missing {', '.join(missing)}{hint}")
            if strict_point(r["rating"]) not in (1, 2, 3, 4, 5) or isinstance(r["rating"], str):
                raise InputError(f"{where}: rating {r['rating']!r} is not 1-5")
            k = (r["item_id"], str(r["unit"]), r["rater"])
            if k in seen:
                raise InputError(f"{where}: rater {r['rater']!r} rated this turn twice")
            seen.add(k)
            out.append(r)
    if not out:
        raise InputError("no realism ratings in " + ", ".join(map(str, paths)))
    return out


def table4(rows: list[dict[str, Any]]) -> dict[str, Any]:
    reasons = [r for rs in realism_reasons().values() for r in rs]
    if not rows:
        return {}
    ratings = np.array([r["rating"] for r in rows], dtype=float)
    by_conv: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in rows:
        by_conv[(r["system"], r["conversation_id"])].append(r["rating"])
    none_only = [set(r["reasons"]) <= {g + "_none" for g in realism_reasons()} for r in rows]
    return {
        "ratings": len(rows),
        "turns": len({(r["item_id"], str(r["unit"])) for r in rows}),
        "conversations": len(by_conv),
        "patients": len({r["patient_id"] for r in rows}),
        "mean_turn": float(ratings.mean()),
        "mean_conversation": float(np.mean([np.mean(v) for v in by_conv.values()])),
        "share_at_most_3": float(np.mean(ratings <= 3)),
        "share_no_reason": float(np.mean(none_only)),
        "reason_shares": {x: float(np.mean([x in r["reasons"] for r in rows])) for x in reasons},
    }


def table13(rows: list[dict[str, Any]]) -> dict[str, Any]:
    raters = sorted({r["rater"] for r in rows})
    by_turn: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for r in rows:
        by_turn[(r["item_id"], str(r["unit"]))][r["rater"]] = r["rating"]
    full = sorted(t for t, d in by_turn.items() if len(d) == len(raters))
    pairable = sorted(t for t, d in by_turn.items() if len(d) >= 2)
    out: dict[str, Any] = {
        "raters": raters,
        "turns": len(full),
        "items": len({t[0] for t in full}),
        "alpha": None,
        "pairwise": [],
        "within_one": None,
        "exact": None,
        "alpha_pairable": None,
        "turns_pairable": len(pairable),
    }
    if len(raters) < 2:
        out["alpha_missing"] = f"one rater only ({', '.join(raters)}): α compares raters, it needs two or more"
        return out
    if len(pairable) >= 2:
        pm = np.array([[by_turn[t].get(a, np.nan) for t in pairable] for a in raters], dtype=float)
        out["alpha_pairable"] = _alpha(pm)
    if len(full) < 2:
        out["alpha_missing"] = f"{len(full)} turns rated by all {len(raters)} raters: the all-rater subset needs two"
        return out
    m = np.array([[by_turn[t][a] for t in full] for a in raters], dtype=float)
    out["alpha"] = _alpha(m)
    spread = m.max(axis=0) - m.min(axis=0)
    out["within_one"] = float(np.mean(spread <= 1))
    out["exact"] = float(np.mean(spread == 0))
    for a, b in combinations(range(len(raters)), 2):
        shared = sorted(t for t, d in by_turn.items() if raters[a] in d and raters[b] in d)
        pm = np.array([[by_turn[t][raters[a]] for t in shared], [by_turn[t][raters[b]] for t in shared]], dtype=float)
        out["pairwise"].append({"raters": [raters[a], raters[b]], "turns": len(shared), "alpha": _alpha(pm)})
    vals = [p["alpha"] for p in out["pairwise"] if p["alpha"] is not None]
    out["pairwise_range"] = [min(vals), max(vals)] if vals else None
    return out


def _interval(values: Iterable[Optional[float]]) -> Optional[list[float]]:
    v = [x for x in values if x is not None and not np.isnan(x)]
    return [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))] if len(v) >= 10 else None


def _resample(rows: list[dict[str, Any]], rng: np.random.Generator) -> list[dict[str, Any]]:
    """Patients drawn with replacement; a patient drawn twice brings its ratings twice, as separate copies
    (so Table 13's turn key and Table 4's conversation key keep the copies apart)."""
    by_p: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_p[r["patient_id"]].append(r)
    pats = sorted(by_p)
    out = []
    for n, i in enumerate(rng.integers(0, len(pats), len(pats))):
        for r in by_p[pats[i]]:
            out.append({**r, "item_id": f"{r['item_id']}#{n}", "conversation_id": f"{r['conversation_id']}#{n}"})
    return out


def report(rows: list[dict[str, Any]], draws: int = DRAWS, seed: int = 0) -> dict[str, Any]:
    systems = sorted({r["system"] for r in rows})
    rng = np.random.default_rng(seed)
    t4: dict[str, Any] = {}
    for s in systems:
        sub = [r for r in rows if r["system"] == s]
        point = table4(sub)
        boot = [table4(_resample(sub, rng)) for _ in range(draws)]
        point["intervals"] = {
            k: _interval(b[k] for b in boot)
            for k in ("mean_turn", "mean_conversation", "share_at_most_3", "share_no_reason")
        }
        t4[s] = point
    t13 = table13(rows)
    raters = t13["raters"]
    by_turn: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in rows:
        by_turn[(r["item_id"], str(r["unit"]))].add(r["rater"])
    full_rows = [r for r in rows if len(by_turn[(r["item_id"], str(r["unit"]))]) == len(raters)]
    if t13["alpha"] is not None:
        boot13 = [table13(_resample(full_rows, rng)) for _ in range(draws)]
        t13["intervals"] = {
            "alpha": _interval(b["alpha"] for b in boot13),
            "within_one": _interval(b["within_one"] for b in boot13),
        }
    return {
        "definitions": DEFINITIONS,
        "bootstrap": {"draws": draws, "seed": seed, "unit": "patient"},
        "scale": protocol_data()["realism"]["scale"],
        "table4": t4,
        "table13": t13,
    }


def _f(x: Any, pct: bool = False) -> str:
    if x is None:
        return "—"
    return f"{100 * x:.0f}%" if pct else f"{x:.2f}"


def _ci(iv: Optional[list[float]], pct: bool = False) -> str:
    return "" if not iv else f" [{_f(iv[0], pct)}, {_f(iv[1], pct)}]"


def render(rep: dict[str, Any]) -> str:
    lines = [
        "# Human realism ratings (cf. MindEval2 Tables 4 and 13)",
        "",
        f"Intervals: {rep['bootstrap']['draws']} bootstrap resamples of patients (seed {rep['bootstrap']['seed']}). "
        "Definitions: docs/human-evaluation.md.",
        "",
        "## Table 4: ratings per system",
        "",
        "| system | ratings | conversations | mean per turn | mean per conversation | ≤ 3 | no reason |",
        "|---|---|---|---|---|---|---|",
    ]
    for s, t in rep["table4"].items():
        iv = t["intervals"]
        lines.append(
            f"| {s} | {t['ratings']} | {t['conversations']} | {_f(t['mean_turn'])}{_ci(iv['mean_turn'])} | "
            f"{_f(t['mean_conversation'])}{_ci(iv['mean_conversation'])} | "
            f"{_f(t['share_at_most_3'], True)}{_ci(iv['share_at_most_3'], True)} | "
            f"{_f(t['share_no_reason'], True)}{_ci(iv['share_no_reason'], True)} |"
        )
    reasons = [r for rs in realism_reasons().values() for r in rs]
    lines += [
        "",
        "Reason shares (share of ratings ticking each reason):",
        "",
        "| system | " + " | ".join(reasons) + " |",
        "|---|" + "---|" * len(reasons),
    ]
    for s, t in rep["table4"].items():
        lines.append(f"| {s} | " + " | ".join(_f(t["reason_shares"][r], True) for r in reasons) + " |")
    t = rep["table13"]
    lines += [
        "",
        "## Table 13: agreement on the rating",
        "",
        f"{t['turns']} turns ({t['items']} items) rated by all {len(t['raters'])} raters ({', '.join(t['raters'])}).",
        "",
        *([f"α is missing: {t['alpha_missing']}.", ""] if t.get("alpha_missing") else []),
        "| measure | value |",
        "|---|---|",
        f"| ordinal Krippendorff's α, all-rater subset (the paper's) | {_f(t['alpha'])}{_ci((t.get('intervals') or {}).get('alpha'))} |",
        f"| ordinal Krippendorff's α, every pairable rating ({t.get('turns_pairable', 0)} turns) | {_f(t.get('alpha_pairable'))} |",
        f"| all ratings within one point | {_f(t['within_one'], True)}{_ci((t.get('intervals') or {}).get('within_one'), True)} |",
        f"| all ratings equal | {_f(t['exact'], True)} |",
    ]
    for p in t["pairwise"]:
        lines.append(f"| α {p['raters'][0]} / {p['raters'][1]} ({p['turns']} turns) | {_f(p['alpha'])} |")
    if rep.get("plot"):
        lines += ["", f"![Table 4 as a chart]({rep['plot']})"]
    return "\n".join(lines) + "\n"


PLOT = "realism_report.png"


def plot(rep: dict[str, Any], path: Path) -> Path:
    """Table 4 as a chart: per system the mean rating per turn and per conversation with their intervals, and
    each reason's share of the ratings."""
    from mindsimkit.mindcore.plots import pyplot, save_png

    plt = pyplot()
    systems = list(rep["table4"])
    reasons = [r for rs in realism_reasons().values() for r in rs if not r.endswith("_none")]
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(13, 0.6 * max(len(systems), 3) + 2.2), gridspec_kw={"width_ratios": [1, 1.6]}
    )
    y = np.arange(len(systems))
    for k, (key, label) in enumerate((("mean_turn", "per turn"), ("mean_conversation", "per conversation"))):
        vals = [rep["table4"][s][key] for s in systems]
        ivs = [rep["table4"][s]["intervals"][key] or [v, v] for s, v in zip(systems, vals)]
        err = np.array([[v - iv[0] for v, iv in zip(vals, ivs)], [iv[1] - v for v, iv in zip(vals, ivs)]])
        left.errorbar(vals, y + (k - 0.5) * 0.3, xerr=err, fmt="o", capsize=3, label=label)
    left.set_yticks(y, systems)
    left.invert_yaxis()
    points = sorted(int(k) for k in rep.get("scale") or {1: "", 5: ""})
    left.set_xlim(points[0] - 0.2, points[-1] + 0.2)
    left.set_xlabel("mean realism rating (interval: bootstrap over patients)")
    left.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize=8, frameon=False)
    width = 0.8 / max(len(systems), 1)
    x = np.arange(len(reasons))
    for i, s in enumerate(systems):
        right.bar(x + i * width, [100 * rep["table4"][s]["reason_shares"][r] for r in reasons], width, label=s)
    right.set_xticks(x + width * (len(systems) - 1) / 2, reasons, rotation=40, ha="right", fontsize=8)
    right.set_ylabel("% of ratings ticking the reason")
    right.legend(fontsize=8)
    fig.suptitle("Human realism ratings per system (cf. MindEval2 Table 4)")
    return save_png(fig, path)


def run_report(
    inputs: Sequence[Path], out: Path, key: Optional[Path] = None, draws: int = DRAWS, seed: int = 0
) -> dict[str, Any]:
    """Inputs are realism task folders (exported here with `key`), realism_ratings.jsonl files, or the MindEval2
    authors' released `member_realism_annotations.json` (a `.json` file: converted here first, as `mindsim import
    mindeval2-realism` converts it)."""
    from mindsimkit.mindsim_app.annotate.export import export_task

    files = []
    for p in map(Path, inputs):
        if p.suffix.lower() == ".json":
            from mindsimkit.mindsim_app.imports.realism import read_release, realism_lines

            lines = realism_lines(read_release(p)["items"])
            files.append(atomic_write_jsonl(Path(out) / "import" / f"{p.stem}.realism_ratings.jsonl", lines))
        elif p.is_dir():
            if key is None:
                raise InputError(f"{p}: a task folder needs --key TASK.key.json to know systems and patients")
            files.append(Path(export_task(p, Path(out) / "export" / p.name, key)["files"]["realism_ratings"]))
        else:
            files.append(p)
    rep = report(read_ratings(files), draws, seed)
    rep["inputs"] = [str(f) for f in files]
    if rep["table4"]:
        plot(rep, Path(out) / PLOT)
        rep["plot"] = PLOT
    atomic_write_json(Path(out) / "realism_report.json", rep)
    atomic_write_text(Path(out) / "realism_report.md", render(rep))
    return rep
