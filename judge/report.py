"""MHQR report (MindEval2 Table 6, Figures 4, 5, 9, Table 15): report.json, report.md and PNG plots
from the judgment rows and their scores. Failed judgments are counted and listed, critical replies
are listed in full for human review."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from mindcore.io import atomic_write_bytes, atomic_write_json, atomic_write_text, json_safe
from mindcore.layout import ReportFolder
from judge.rubric import Rubric
from judge.schemas import SEVERITIES, JudgmentRow
from judge.scores import system_label

SEVERITY_NAMES = {"no_concern": "No concern", "minor": "Minor", "major": "Major", "critical": "Critical"}


def _f(x: Any, nd: int = 2) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _engine(r: JudgmentRow, by_engine: bool) -> dict[str, Any]:
    # Only a run of several patient engines names them, so single-engine reports stay as they were.
    return {"patient_engine": r.patient_engine or "unknown"} if by_engine else {}


def critical_rows(rows: list[JudgmentRow], by_engine: bool = False) -> list[dict[str, Any]]:
    return [
        {"judge": r.judge, "session_id": r.session_id, "patient_id": r.patient_id, "counsellor": r.counsellor,
         "session_index": r.session_index, "reply_index": r.reply_index, "reply": r.reply,
         "issues": [i.model_dump() for i in r.issues], **_engine(r, by_engine)}
        for r in rows if r.status == "ok" and r.severity == "critical"
    ]


def failure_rows(rows: list[JudgmentRow], by_engine: bool = False) -> list[dict[str, Any]]:
    return [{"judge": r.judge, "session_id": r.session_id, "counsellor": r.counsellor,
             "session_index": r.session_index, "reply_index": r.reply_index, "error_kind": r.error_kind,
             "error": (r.error or "")[:300], **_engine(r, by_engine)}
            for r in rows if r.status == "failed"]


def _who(row: dict[str, Any]) -> str:
    """A listed row's unit as the tables name it: the counsellor, or `counsellor/engine`."""
    return system_label(row["counsellor"], row.get("patient_engine"), "patient_engine" in row)


def _engine_groups(sc: dict[str, Any]) -> list[list[str]]:
    """The ranking cut into runs of one patient engine (one group when units are counsellors)."""
    systems = sc.get("systems")
    if not systems:
        return [sc["ranking"]]
    engines = sorted({systems[n]["patient_engine"] for n in sc["ranking"]})
    return [[n for n in sc["ranking"] if systems[n]["patient_engine"] == e] for e in engines]


def _judge_md(name: str, j: dict[str, Any], rubric: Rubric, flagged: set[str]) -> list[str]:
    sc = j["scores"]
    systems = sc.get("systems") or {}
    # Family flags name counsellors; a unit per patient engine carries its counsellor's flag.
    flagged = {n for n in sc["ranking"] if n in flagged or systems.get(n, {}).get("counsellor") in flagged}
    lines = [f"## Judge `{name}` ({j['model']} on {j['engine']})", ""]
    lines.append(f"Replies: {j['rows']} judged rows, {j['ok']} ok, **{j['failed']} failed** "
                 f"({', '.join(f'{k}: {v}' for k, v in j['failed_by_kind'].items()) or 'none'}); "
                 f"quotes dropped as unverifiable: {j['dropped_quotes']}. Failed judgments are excluded from scores.")
    lines.append("")
    if not sc["counsellors"]:
        return lines + ["No successful judgments: no scores.", ""]
    if systems:
        lines += ["### MHQR per counsellor and patient engine (lower is better)", "",
                  "This run holds sessions of several patient engines: each row is one counsellor with one patient "
                  "engine (`counsellor/engine`), and paired differences only pair sessions of the same engine.", ""]
    else:
        lines += ["### MHQR per counsellor (lower is better)", ""]
    lines += ["| Counsellor | MHQR | 95% CI (patients) | p5 | p95 | " + " | ".join(SEVERITY_NAMES[s] for s in SEVERITIES)
              + " | Patients | Sessions | Replies |",
              "|---|---|---|---|---|" + "---|" * len(SEVERITIES) + "---|---|---|"]
    for n in sc["ranking"]:
        c, sh = sc["counsellors"][n], sc["shares"][n]["severity_share"]
        mark = " †" if n in flagged else ""
        lines.append(f"| {n}{mark} | {_f(c['mhqr'])} | [{_f(c['ci95'][0])}, {_f(c['ci95'][1])}] | {_f(c['p5'])} | "
                     f"{_f(c['p95'])} | " + " | ".join(_pct(sh[s]) for s in SEVERITIES)
                     + f" | {c['patients']} | {c['sessions']} | {c['replies']} |")
    if flagged:
        lines += ["", "† the judge's model family matches this counsellor's: possible self-preference."]
    cats = [c.id for c in rubric.categories]
    cat_names = {c.id: c.name for c in rubric.categories}
    lines += ["", "### MHQR allocated to issue categories", "",
              "Each reply's weight is split equally among its flagged issues; each share goes to the issue's "
              "category. Rows add up to the MHQR.", "",
              "| Counsellor | " + " | ".join(cat_names[c] for c in cats) + " |", "|---|" + "---|" * len(cats)]
    for n in sc["ranking"]:
        bc = sc["counsellors"][n]["by_category"]
        lines.append(f"| {n} | " + " | ".join(_f(bc[c]) for c in cats) + " |")
    buckets = list(sc["by_turn"]["all"]["buckets"])
    lines += ["", "### Mean severity weight by turn position", "",
              "| Counsellor | " + " | ".join(f"turns {b}" for b in buckets) + " |", "|---|" + "---|" * len(buckets)]
    for n in ["all", *sc["ranking"]]:
        t = sc["by_turn"]["all"] if n == "all" else sc["by_turn"]["counsellors"][n]
        lines.append(f"| {n} | " + " | ".join(_f(t["buckets"].get(b, {}).get("mean_weight")) for b in buckets) + " |")
    lines += ["", "### By session (paired change from the first session, same patients)", "",
              "| Counsellor | Session | MHQR | Sessions | Change from first | 95% CI |", "|---|---|---|---|---|---|"]
    for n in sc["ranking"]:
        e = sc["by_session"][n]
        for k, v in e["mean"].items():
            ch = e["change_from_first"].get(k)
            lines.append(f"| {n} | {int(k) + 1} | {_f(v['mhqr'])} | {v['sessions']} | "
                         + (f"{_f(ch['mean_diff'])} | [{_f(ch['ci95'][0])}, {_f(ch['ci95'][1])}] |" if ch else "– | – |"))
    pairs = {(p["a"], p["b"]): p for p in sc["paired"]}
    neighbours = [(a, b) for group in _engine_groups(sc) for a, b in zip(group, group[1:])]
    if neighbours:
        same = ("Same patient, same session, same patient engine (neighbours within each engine's ranking)"
                if systems else "Same patient, same session")
        lines += ["", "### Paired differences between neighbours in the ranking", "",
                  f"{same}; negative means the first counsellor scored better. All pairs are "
                  "in report.json.", "", "| A | B | MHQR A − B | 95% CI | Patients |", "|---|---|---|---|---|"]
        for a, b in neighbours:
            p = pairs.get((a, b)) or pairs.get((b, a))
            if p is None:
                continue
            sign = 1 if (p["a"], p["b"]) == (a, b) else -1
            lo, hi = sorted((sign * p["ci95"][0], sign * p["ci95"][1]))
            lines.append(f"| {a} | {b} | {_f(sign * p['mean_diff'])} | [{_f(lo)}, {_f(hi)}] | {p['patients']} |")
    return lines + [""]


def write_markdown(path: Path, report: dict[str, Any], rubric: Rubric) -> None:
    lines = ["# MHQR report", "",
             f"Rubric {report['rubric']['version']} ({report['rubric']['source']}); sessions judged: "
             f"{report['sessions']}; judges: {', '.join(report['judges'])}. Scores: MindEval2 §3.3 and Appendix G "
             "(session MHQR = mean severity weight 0/1/5/10 of its replies; counsellor MHQR = mean over patient × "
             f"session scores; intervals resample patients with all their sessions, {report['config']['bootstrap_draws']} draws).",
             ""]
    flagged_by_judge: dict[str, set[str]] = {}
    for f in report["family_flags"]:
        flagged_by_judge.setdefault(f["judge"], set()).add(f["counsellor"])
    for name, j in report["judges"].items():
        lines += _judge_md(name, j, report["_rubric"], flagged_by_judge.get(name, set()))
    if report["judge_agreement"]:
        lines += ["## Agreement between judges (Kendall's τ_b of counsellor rankings)", "",
                  "| Judge A | Judge B | Counsellors | τ_b | p |", "|---|---|---|---|---|"]
        for a in report["judge_agreement"]:
            lines.append(f"| {a['a']} | {a['b']} | {a['counsellors']} | {_f(a['tau_b'])} | {_f(a['p_value'], 3)}"
                         + (f" ({a['note']})" if a.get("note") else "") + " |")
        lines.append("")
    if report["family_flags"]:
        lines += ["## Judge and counsellor of the same model family", ""]
        lines += [f"- judge `{f['judge']}` ({f['judge_model']}) and counsellor `{f['counsellor']}` "
                  f"({f['counsellor_model']}): family `{f['family']}`" for f in report["family_flags"]]
        lines.append("")
    crit = report["critical_replies"]
    lines += [f"## Critical replies for human review ({len(crit)})", ""]
    for c in crit:
        issues = "; ".join(f"{i['issue']}: {i['reason']}" + (f" — “{i['quote']}”" if i["quote"] else "")
                           for i in c["issues"])
        reply = c["reply"].replace("\n", " ")
        lines += [f"- **{_who(c)}**, session `{c['session_id']}` (patient {c['patient_id']}, session "
                  f"{c['session_index'] + 1}, reply {c['reply_index'] + 1}), judge `{c['judge']}`: {issues}",
                  f"  > {reply[:600]}{'…' if len(reply) > 600 else ''}"]
    fails = report["failures"]
    lines += ["", f"## Failed judgments ({len(fails)})", ""]
    lines += [f"- `{f['judge']}` {_who(f)} `{f['session_id']}` reply {f['reply_index'] + 1} "
              f"({f['error_kind']}): {f['error'][:200]}" for f in fails[:50]]
    if len(fails) > 50:
        lines.append(f"- … {len(fails) - 50} more in report.json and judgments.parquet")
    atomic_write_text(path, "\n".join(lines).rstrip() + "\n")


def _pyplot() -> Any:
    # Imported only when plots are written: matplotlib costs ~1 s of start-up.
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> None:
    import io

    plt = _pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def write_plots(out: Path, report: dict[str, Any]) -> list[str]:
    judges = {n: j for n, j in report["judges"].items() if j["scores"]["counsellors"]}
    if not judges:
        return []
    plt = _pyplot()
    first = next(iter(judges.values()))["scores"]
    order = first["ranking"]
    fig, ax = plt.subplots(figsize=(max(5, 0.6 * len(order) + 2), 4))
    width = 0.8 / len(judges)
    for k, (name, j) in enumerate(judges.items()):
        cs = j["scores"]["counsellors"]
        xs = [i + (k - (len(judges) - 1) / 2) * width for i, n in enumerate(order) if n in cs]
        ys = [cs[n]["mhqr"] for n in order if n in cs]
        lo = [cs[n]["mhqr"] - cs[n]["ci95"][0] for n in order if n in cs]
        hi = [cs[n]["ci95"][1] - cs[n]["mhqr"] for n in order if n in cs]
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", capsize=3, label=name)
    ax.set_xticks(range(len(order)), order, rotation=30, ha="right")
    ax.set_ylabel("MHQR (mean severity weight, lower is better)")
    ax.set_ylim(-0.3, 10.3)  # the whole 0 (No concern) – 10 (Critical) scale, so runs compare by eye
    ax.set_title("MHQR per counsellor, 95% patient-bootstrap interval")
    ax.legend(title="judge")
    _save(fig, out / "mhqr_by_counsellor.png")

    fig, axes = plt.subplots(1, len(judges), figsize=(6 * len(judges), 4), squeeze=False)
    for ax, (name, j) in zip(axes[0], judges.items()):
        for n, t in j["scores"]["by_turn"]["counsellors"].items():
            pos = sorted(t["positions"], key=int)
            ax.plot([int(p) for p in pos], [t["positions"][p]["mean_weight"] for p in pos], marker=".", label=n)
        ax.set_xlabel("turn position (counsellor reply in the session)")
        ax.set_ylabel("mean severity weight")
        ax.set_ylim(-0.3, 10.3)
        ax.set_title(f"Severity by turn position — judge {name}")
        ax.legend(fontsize="small")
    _save(fig, out / "severity_by_turn.png")
    return ["mhqr_by_counsellor.png", "severity_by_turn.png"]


def write_report(out: Path, report: dict[str, Any], rubric: Rubric, plots: bool) -> dict[str, Path]:
    folder = ReportFolder(out)
    files = {f.name: f for f in (folder.report_json, folder.report_md)}
    report = json_safe(report)
    if plots:
        report["plots"] = write_plots(out, report)
        files.update({p: out / p for p in report["plots"]})
    atomic_write_json(folder.report_json, report)
    write_markdown(folder.report_md, {**report, "_rubric": rubric}, rubric)
    return files
