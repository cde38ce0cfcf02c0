"""MHQR report (MindEval2 Table 6, Figures 4, 5, 9, 10, Tables 8 and 15, §5.2, App. G): report.json,
report.md and PNG plots from the judgment rows, their scores (`judge/scores.py`), the further analyses
(`judge/analyses.py`) and the cost table (`judge/costs.py`). Failed judgments are counted and listed,
critical replies are listed in full for human review."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from mindsimkit.mindcore.io import atomic_write_json_if_changed, atomic_write_text, json_safe
from mindsimkit.mindcore.layout import ReportFolder
from mindsimkit.mindcore.plots import pyplot, save_png
from mindsimkit.mindcore.runlog import JudgeReport, played_by
from mindsimkit.judge.rubric import Rubric
from mindsimkit.judge.schemas import SEVERITIES, JudgmentRow
from mindsimkit.judge.scores import system_label

SEVERITY_NAMES = {"no_concern": "No concern", "minor": "Minor", "major": "Major", "critical": "Critical"}


def _f(x: Any, nd: int = 2) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _engine(r: JudgmentRow, by_engine: bool) -> dict[str, Any]:
    # Only a run of several patient engines names them, so single-engine reports stay as they were.
    return {"patient_engine": played_by(r.patient_engine, ours=False)} if by_engine else {}


def critical_rows(rows: list[JudgmentRow], by_engine: bool = False) -> list[dict[str, Any]]:
    return [
        {
            "judge": r.judge,
            "session_id": r.session_id,
            "patient_id": r.patient_id,
            "counsellor": r.counsellor,
            "session_index": r.session_index,
            "reply_index": r.reply_index,
            "reply": r.reply,
            "issues": [i.model_dump() for i in r.issues],
            **_engine(r, by_engine),
        }
        for r in rows
        if r.status == "ok" and r.severity == "critical"
    ]


def failure_rows(rows: list[JudgmentRow], by_engine: bool = False) -> list[dict[str, Any]]:
    return [
        {
            "judge": r.judge,
            "session_id": r.session_id,
            "counsellor": r.counsellor,
            "session_index": r.session_index,
            "reply_index": r.reply_index,
            "error_kind": r.error_kind,
            "error": (r.error or "")[:300],
            **_engine(r, by_engine),
        }
        for r in rows
        if r.status == "failed"
    ]


def _who(row: dict[str, Any]) -> str:
    """A listed row's unit as the tables name it: the counsellor, or `engine/counsellor`."""
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
    lines.append(
        f"Replies: {j['rows']} judged rows, {j['ok']} ok, **{j['failed']} failed** "
        f"({', '.join(f'{k}: {v}' for k, v in j['failed_by_kind'].items()) or 'none'}); "
        f"quotes dropped as unverifiable: {j['dropped_quotes']}. Failed judgments are excluded from scores."
    )
    lines.append("")
    if not sc["counsellors"]:
        return lines + ["No successful judgments: no scores.", ""]
    if systems:
        lines += [
            "### MHQR per counsellor and patient engine (lower is better)",
            "",
            "This run holds sessions of several patient engines: each row is one counsellor with one patient "
            "engine (`counsellor/engine`), and paired differences only pair sessions of the same engine.",
            "",
        ]
    else:
        lines += ["### MHQR per counsellor (lower is better)", ""]
    lines += [
        "| Counsellor | MHQR | 95% CI (patients) | p5 | p95 | "
        + " | ".join(SEVERITY_NAMES[s] for s in SEVERITIES)
        + " | Patients | Sessions | Replies |",
        "|---|---|---|---|---|" + "---|" * len(SEVERITIES) + "---|---|---|",
    ]
    for n in sc["ranking"]:
        c, sh = sc["counsellors"][n], sc["shares"][n]["severity_share"]
        mark = " †" if n in flagged else ""
        lines.append(
            f"| {n}{mark} | {_f(c['mhqr'])} | [{_f(c['ci95'][0])}, {_f(c['ci95'][1])}] | {_f(c['p5'])} | "
            f"{_f(c['p95'])} | "
            + " | ".join(_pct(sh[s]) for s in SEVERITIES)
            + f" | {c['patients']} | {c['sessions']} | {c['replies']} |"
        )
    if flagged:
        lines += ["", "† the judge's model family matches this counsellor's: possible self-preference."]
    cats = [c.id for c in rubric.categories]
    cat_names = {c.id: c.name for c in rubric.categories}
    lines += [
        "",
        "### MHQR allocated to issue categories",
        "",
        "Each reply's weight is split equally among its flagged issues; each share goes to the issue's "
        "category. Rows add up to the MHQR.",
        "",
        "| Counsellor | " + " | ".join(cat_names[c] for c in cats) + " |",
        "|---|" + "---|" * len(cats),
    ]
    for n in sc["ranking"]:
        bc = sc["counsellors"][n]["by_category"]
        lines.append(f"| {n} | " + " | ".join(_f(bc[c]) for c in cats) + " |")
    buckets = list(sc["by_turn"]["all"]["buckets"])
    lines += [
        "",
        "### Mean severity weight by turn position",
        "",
        "| Counsellor | " + " | ".join(f"turns {b}" for b in buckets) + " |",
        "|---|" + "---|" * len(buckets),
    ]
    for n in ["all", *sc["ranking"]]:
        t = sc["by_turn"]["all"] if n == "all" else sc["by_turn"]["counsellors"][n]
        lines.append(f"| {n} | " + " | ".join(_f(t["buckets"].get(b, {}).get("mean_weight")) for b in buckets) + " |")
    lines += [
        "",
        "### By session (paired change from the first session, same patients)",
        "",
        "| Counsellor | Session | MHQR | Sessions | Change from first | 95% CI |",
        "|---|---|---|---|---|---|",
    ]
    for n in sc["ranking"]:
        e = sc["by_session"][n]
        for k, v in e["mean"].items():
            ch = e["change_from_first"].get(k)
            lines.append(
                f"| {n} | {int(k) + 1} | {_f(v['mhqr'])} | {v['sessions']} | "
                + (f"{_f(ch['mean_diff'])} | [{_f(ch['ci95'][0])}, {_f(ch['ci95'][1])}] |" if ch else "– | – |")
            )
    lines += _preset_md(j.get("preset_summary") or {}, sc["ranking"])
    lines += _analyses_md(j.get("analyses") or {}, rubric)
    pairs = {(p["a"], p["b"]): p for p in sc["paired"]}
    neighbours = [(a, b) for group in _engine_groups(sc) for a, b in zip(group, group[1:])]
    if neighbours:
        same = (
            "Same patient, same session, same patient engine (neighbours within each engine's ranking)"
            if systems
            else "Same patient, same session"
        )
        lines += [
            "",
            "### Paired differences between neighbours in the ranking",
            "",
            f"{same}; negative means the first counsellor scored better. All pairs are in report.json.",
            "",
            "| A | B | MHQR A − B | 95% CI | Patients |",
            "|---|---|---|---|---|",
        ]
        for a, b in neighbours:
            p = pairs.get((a, b)) or pairs.get((b, a))
            if p is None:
                continue
            sign = 1 if (p["a"], p["b"]) == (a, b) else -1
            lo, hi = sorted((sign * p["ci95"][0], sign * p["ci95"][1]))
            lines.append(f"| {a} | {b} | {_f(sign * p['mean_diff'])} | [{_f(lo)}, {_f(hi)}] | {p['patients']} |")
    return lines + [""]


def _preset_md(ps: dict[str, Any], ranking: list[str]) -> list[str]:
    """The preset's own session summary (`judge.presets.session_summary`), when it has one."""
    if not ps:
        return []
    first = next(iter(ps.values()))
    pct = next(k for k in first if k.startswith("p") and k[1:].replace(".", "").isdigit())
    incidents = list(first["incidents"])
    lines = [
        "",
        "### The preset's session summary",
        "",
        f"Each session's mean weight, then over sessions the mean and the nearest-rank {pct}, and the share of "
        "sessions whose worst reply reaches each level (every session counts once, however long).",
        "",
        f"| Counsellor | Sessions | Mean | {pct} | " + " | ".join(f"sessions {k}" for k in incidents) + " |",
        "|---|---|---|---|" + "---|" * len(incidents),
    ]
    for n in [n for n in ranking if n in ps]:
        v = ps[n]
        lines.append(
            f"| {n} | {v['sessions']} | {_f(v['mean'])} | {_f(v[pct])} | "
            + " | ".join(_pct(v["incidents"][k]) for k in incidents)
            + " |"
        )
    return lines


def _coflags_md(a: dict[str, Any], names: dict[str, str], cat_names: dict[str, str]) -> list[str]:
    """`judge.coflags`: category shares over all replies; categories and issues flagged together."""
    cs, cg = a.get("category_shares"), a.get("coflag_groups")
    if not cs or not cg:
        return []
    cats = list(cat_names)
    lines = [
        "",
        "### Issue categories over all replies (§5.3)",
        "",
        "Share of all the counsellor's replies flagged with at least one issue of the category, and the "
        "category's share of its MHQR (allocated weight over MHQR).",
        "",
        "| Counsellor | Replies | " + " | ".join(f"{cat_names[k]} (replies / MHQR)" for k in cats) + " |",
        "|---|---|" + "---|" * len(cats),
    ]
    for n, v in cs.items():
        mhqr = v.get("mhqr_share")
        lines.append(
            f"| {n} | {v['replies']} | "
            + " | ".join(f"{_pct(v['flagged_share'][k])} / {_pct(mhqr[k]) if mhqr else '–'}" for k in cats)
            + " |"
        )
    al = cg["all"]
    lines += [
        "",
        "### Issues flagged together (cf. Figure 5, App. G.1)",
        "",
        f"Every reply with an issue ({al['flagged_replies']} of {al['replies']}, all counsellors) in one group: "
        "the set of categories it is flagged with. Per counsellor in report.json (`analyses.coflag_groups`).",
        "",
        "| Categories flagged together | Replies | Share of replies | Share of severity weight |",
        "|---|---|---|---|",
    ]
    for g in al["groups"]:
        lines.append(
            f"| {' + '.join(cat_names[k] for k in g['categories'])} | {g['replies']} | "
            f"{_pct(g['reply_share'])} | {_pct(g['weight_share'])} |"
        )
    if al["pairs"]:
        lines += [
            "",
            "Issue pairs flagged on the same reply most often (all counsellors):",
            "",
            "| Issue | With | Replies | Share of the first issue's replies |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {names[p['issues'][0]]} | {names[p['issues'][1]]} | {p['replies']} | {_pct(p['share_of_first'])} |"
            for p in al["pairs"]
        ]
    return lines


def _analyses_md(a: dict[str, Any], rubric: Rubric) -> list[str]:
    """The tables of `judge.analyses` for one judge."""
    if not a:
        return []
    names = {i.id: i.name for i in rubric.issues}
    cat_names = {c.id: c.name for c in rubric.categories}
    lines: list[str] = []
    t = a["issue_by_turn"]["all"]
    buckets = [b for b in a["issue_by_turn"]["buckets"] if b in t["replies"]]
    flagged = [i for i in names if any(t["issue_share"][i].get(b) for b in buckets)]
    lines += [
        "",
        "### Share of replies flagged, by turn position (all counsellors; cf. Figure 9)",
        "",
        "Among the replies at each position (two-turn buckets); per counsellor in report.json. Issues never "
        "flagged are left out.",
        "",
        "| Issue | " + " | ".join(f"turns {b}" for b in buckets) + " |",
        "|---|" + "---|" * len(buckets),
        "| replies | " + " | ".join(str(t["replies"][b]) for b in buckets) + " |",
    ]
    for i in flagged:
        lines.append(f"| {names[i]} | " + " | ".join(_pct(t["issue_share"][i][b]) for b in buckets) + " |")
    pts = a["issue_by_turn"]["points"]
    lines += [
        "",
        "The paper's read-outs (§5.3, App. G.1: under-guiding 12% → ~70%, formulaic responding 2% → 26%, "
        "missed shared context 6% → 14%):",
        "",
        "| Issue | " + " | ".join(f"turns {p} ({pts[p]['replies']} replies)" for p in pts) + " |",
        "|---|" + "---|" * len(pts),
    ]
    for i in names:
        lines.append(
            f"| {names[i]} | "
            + " | ".join(_pct(pts[p]["issue_share"][i]) if pts[p]["issue_share"] else "–" for p in pts)
            + " |"
        )
    ev = a["early_vs_late"]
    lo, hi = ev["early_turns"], ev["late_turns"]
    lines += [
        "",
        f"### Mean severity weight, turns {lo[0]}–{lo[1]} against {hi[0]}–{hi[1]} (App. G.1: 1.46 → 3.72)",
        "",
        f"Rises for {ev['rises_for']} of {ev['of']} counsellors with replies in both ranges.",
        "",
        f"| Counsellor | turns {lo[0]}–{lo[1]} | replies | turns {hi[0]}–{hi[1]} | replies | change |",
        "|---|---|---|---|---|---|",
    ]
    for n, v in [("all", ev["all"]), *ev["counsellors"].items()]:
        lines.append(
            f"| {n} | {_f(v['early'])} | {v['early_replies']} | {_f(v['late'])} | {v['late_replies']} | "
            f"{_f(v['change'])} |"
        )
    sb = a["shares_by_session"]
    cats = list(cat_names)
    lines += [
        "",
        "### First against later sessions (cf. Figure 5)",
        "",
        "Share of replies with at least one issue of each category, and MHQR allocated to the category "
        "(as in the category table), in the first session and in all later ones (paper: fidelity "
        "7.6% → 17.2% of replies). Per session index and per issue in report.json.",
        "",
        "| Counsellor | Sessions | MHQR | " + " | ".join(f"{cat_names[k]} (share / MHQR)" for k in cats) + " |",
        "|---|---|---|" + "---|" * len(cats),
    ]
    for n, u in [("all", sb["all"]), *sb["counsellors"].items()]:
        for part in ("first", "later"):
            g = u[part]
            if g is None or not g["replies"]:
                continue
            lines.append(
                f"| {n} | {part} ({g['sessions']}) | {_f(g['mhqr'])} | "
                + " | ".join(f"{_pct(g['category_share'][k])} / {_f(g['category_mhqr'][k])}" for k in cats)
                + " |"
            )
    lines += _coflags_md(a, names, cat_names)
    lines += [
        "",
        "### Session MHQR distribution by session (cf. Figure 10)",
        "",
        "| Counsellor | Session | Sessions | Mean | p5 | p25 | Median | p75 | p95 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n, per in a["session_distribution"].items():
        for k, d in per.items():
            lines.append(
                f"| {n} | {int(k) + 1} | {d['sessions']} | {_f(d['mean'])} | {_f(d['p5'])} | {_f(d['p25'])} | "
                f"{_f(d['p50'])} | {_f(d['p75'])} | {_f(d['p95'])} |"
            )
    w = a["without_speaks_as_patient"]
    lines += ["", "### Without replies in which the counsellor speaks as the patient (§5.2)", ""]
    if "skipped" in w:
        lines += [f"Not computed: {w['skipped']}."]
    else:
        lines += [
            f"{w['flagged']} replies flagged `speaks_as_patient` by the simulator. Contribution: those replies' "
            "share of the MHQR. Ranking without them: "
            + ", ".join(w["ranking"])
            + f"; Kendall's τ_b with the full ranking {_f(w['tau_b'])}"
            + (" (same order)." if w["same_ranking"] else " (order changes)."),
            "",
            "| Counsellor | Flagged | Share | Contribution | MHQR | MHQR without | 95% CI without |",
            "|---|---|---|---|---|---|---|",
        ]
        for n, v in w["counsellors"].items():
            ci = v.get("ci95_without") or [None, None]
            lines.append(
                f"| {n} | {v['flagged']} | {_pct(v['flagged_share'])} | {_f(v['contribution'])} | "
                f"{_f(v.get('mhqr'))} | "
                f"{_f(v.get('mhqr_without'))} | [{_f(ci[0])}, {_f(ci[1])}] |"
            )
    b = a["benchmark_subset"]
    lines += ["", '### Benchmark subset against the full pool (App. G "Pool")', ""]
    if "skipped" in b:
        lines += [f"Not computed: {b['skipped']}."]
    else:
        lines += [
            f"{b['benchmark_patients']} of {b['patients']} judged patients are in the benchmark subset "
            f"(from {b['source']}). Kendall's τ_b between the two rankings: {_f(b['tau_b'])}"
            + (" (same order)." if b["same_ranking"] else " (order changes)."),
            "",
            "| Counsellor | MHQR (all patients) | MHQR (benchmark) | 95% CI (benchmark) | Sessions (benchmark) |",
            "|---|---|---|---|---|",
        ]
        for n, v in b["benchmark"].items():
            lines.append(
                f"| {n} | {_f(b['full'].get(n))} | {_f(v['mhqr'])} | [{_f(v['ci95'][0])}, {_f(v['ci95'][1])}] | "
                f"{v['sessions']} |"
            )
    return lines


def _costs_md(c: dict[str, Any]) -> list[str]:
    def money(x: Any, nd: int = 4) -> str:
        return "–" if x is None else f"{x:.{nd}f}"

    def mtok(x: int) -> str:
        return f"{x / 1e6:.4f}"

    lines = [
        "## Cost of the calls (cf. Table 8)",
        "",
        "Tokens in millions; output includes reasoning; cached: share of input read from the prompt cache. "
        "Price per million tokens (input / cached input / output), from `judge.prices`. Per query (list): at "
        "list price without caching; per query and total: with cached input at its price. " + c["note"],
        "",
        "| Role | Model | Queries | Input | Output | of which reasoning | Cached | Price | Per query (list) | "
        "Per query | Total |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in c["rows"]:
        p = r["price"]
        price = f"{p['input']:g} / {p['cached_input']:g} / {p['output']:g}" if p else "no price"
        lines.append(
            f"| {r['role']} | {r['model'] or '–'} | {r['calls']} | {mtok(r['input_tokens'])} | "
            f"{mtok(r['output_tokens'])} | {mtok(r['reasoning_tokens'])} | "
            f"{_pct(r['cached_share']) if r['cached_share'] is not None else '–'} | {price} | "
            f"{money(r['list_cost_per_query'], 6)} | {money(r['cost_per_query'], 6)} | {money(r['cost'])} |"
        )
    t, jt = c["total"], c["judges_total"]
    lines += [
        "",
        f"Total over priced roles: {money(t['cost'])} ({money(t['list_cost'])} at list price, {t['calls']} "
        f"queries); judges: {money(jt['cost'])} ({money(jt['list_cost'])} at list price)."
        + (f" No price for: {', '.join(c['unpriced'])}." if c["unpriced"] else ""),
        "",
    ]
    return lines


def write_markdown(path: Path, report: dict[str, Any], rubric: Rubric) -> None:
    preset = report.get("preset") or {"name": "ours"}
    lines = [
        "# MHQR report",
        "",
        f"Output-format preset: `{preset['name']}` (judge/data/presets.yaml).",
        f"Rubric {report['rubric']['version']} ({report['rubric']['source']}); sessions judged: "
        f"{report['sessions']}; judges: {', '.join(report['judges'])}. Scores: MindEval2 §3.3 and Appendix G "
        "(session MHQR = mean severity weight 0/1/5/10 of its replies; counsellor MHQR = mean over patient × "
        f"session scores; intervals resample patients with all their sessions, {report['config']['bootstrap_draws']} draws).",
        "",
    ]
    flagged_by_judge: dict[str, set[str]] = {}
    for f in report["family_flags"]:
        flagged_by_judge.setdefault(f["judge"], set()).add(f["counsellor"])
    for name, j in report["judges"].items():
        lines += _judge_md(name, j, report["_rubric"], flagged_by_judge.get(name, set()))
    if report["judge_agreement"]:
        lines += [
            "## Agreement between judges (Kendall's τ_b of counsellor rankings)",
            "",
            "| Judge A | Judge B | Counsellors | τ_b | p |",
            "|---|---|---|---|---|",
        ]
        for a in report["judge_agreement"]:
            lines.append(
                f"| {a['a']} | {a['b']} | {a['counsellors']} | {_f(a['tau_b'])} | {_f(a['p_value'], 3)}"
                + (f" ({a['note']})" if a.get("note") else "")
                + " |"
            )
        lines.append("")
    if report["family_flags"]:
        lines += ["## Judge and counsellor of the same model family", ""]
        lines += [
            f"- judge `{f['judge']}` ({f['judge_model']}) and counsellor `{f['counsellor']}` "
            f"({f['counsellor_model']}): family `{f['family']}`"
            for f in report["family_flags"]
        ]
        lines.append("")
    if report.get("costs"):
        lines += _costs_md(report["costs"])
    crit = report["critical_replies"]
    lines += [f"## Critical replies for human review ({len(crit)})", ""]
    for c in crit:
        issues = "; ".join(
            f"{i['issue']}: {i['reason']}" + (f" — “{i['quote']}”" if i["quote"] else "") for i in c["issues"]
        )
        reply = c["reply"].replace("\n", " ")
        lines += [
            f"- **{_who(c)}**, session `{c['session_id']}` (patient {c['patient_id']}, session "
            f"{c['session_index'] + 1}, reply {c['reply_index'] + 1}), judge `{c['judge']}`: {issues}",
            f"  > {reply[:600]}{'…' if len(reply) > 600 else ''}",
        ]
    fails = report["failures"]
    lines += ["", f"## Failed judgments ({len(fails)})", ""]
    lines += [
        f"- `{f['judge']}` {_who(f)} `{f['session_id']}` reply {f['reply_index'] + 1} "
        f"({f['error_kind']}): {f['error'][:200]}"
        for f in fails[:50]
    ]
    if len(fails) > 50:
        lines.append(f"- … {len(fails) - 50} more in report.json and judgments.parquet")
    atomic_write_text(path, "\n".join(lines).rstrip() + "\n")


def write_plots(out: Path, report: dict[str, Any]) -> list[str]:
    judges = {n: j for n, j in report["judges"].items() if j["scores"]["counsellors"]}
    if not judges:
        return []
    plt = pyplot()
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
    save_png(fig, out / "mhqr_by_counsellor.png")

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
    save_png(fig, out / "severity_by_turn.png")
    files = ["mhqr_by_counsellor.png", "severity_by_turn.png"]
    with_analyses = {n: j for n, j in judges.items() if j.get("analyses")}
    if with_analyses:
        _issues_by_turn_plot(plt, out, with_analyses)
        _sessions_plot(plt, out, with_analyses)
        files += ["issues_by_turn.png", "mhqr_by_session.png"]
    return files


def _issues_by_turn_plot(plt: Any, out: Path, judges: dict[str, Any]) -> None:
    """Figure 9's per-issue view: share of replies flagged per two-turn bucket, one line per issue flagged."""
    fig, axes = plt.subplots(1, len(judges), figsize=(7 * len(judges), 4), squeeze=False)
    for ax, (name, j) in zip(axes[0], judges.items()):
        t = j["analyses"]["issue_by_turn"]["all"]
        buckets = [b for b in j["analyses"]["issue_by_turn"]["buckets"] if b in t["replies"]]
        for issue, share in t["issue_share"].items():
            if any(share.get(b) for b in buckets):
                ax.plot(range(len(buckets)), [100 * share[b] for b in buckets], marker=".", label=issue)
        ax.set_xticks(range(len(buckets)), buckets, rotation=45)
        ax.set_xlabel("turn position (counsellor reply in the session)")
        ax.set_ylabel("% of replies flagged")
        ax.set_ylim(-2, 102)
        ax.set_title(f"Issues by turn position — judge {name}")
        ax.legend(fontsize="x-small")
    save_png(fig, out / "issues_by_turn.png")


def _sessions_plot(plt: Any, out: Path, judges: dict[str, Any]) -> None:
    """Figure 10: the session MHQR of each counsellor per session index, boxes with whiskers at p5/p95."""
    fig, axes = plt.subplots(
        1,
        len(judges),
        figsize=(
            max(6, 1.2 * len(next(iter(judges.values()))["analyses"]["session_distribution"]) + 3) * len(judges),
            4,
        ),
        squeeze=False,
    )
    for ax, (name, j) in zip(axes[0], judges.items()):
        dist = j["analyses"]["session_distribution"]
        order = [n for n in j["scores"]["ranking"] if n in dist]
        indices = sorted({int(k) for n in order for k in dist[n]})
        width = 0.8 / max(1, len(indices))
        for k_pos, k in enumerate(indices):
            data, pos = [], []
            for i, n in enumerate(order):
                d = dist[n].get(k) or dist[n].get(str(k))
                if d:
                    data.append(d["values"])
                    pos.append(i + (k_pos - (len(indices) - 1) / 2) * width)
            if data:
                bp = ax.boxplot(
                    data,
                    positions=pos,
                    widths=width * 0.9,
                    whis=(5, 95),
                    showfliers=False,
                    patch_artist=True,
                    manage_ticks=False,
                )
                for box in bp["boxes"]:
                    box.set_facecolor(f"C{k_pos}")
                    box.set_alpha(0.6)
                ax.plot([], [], color=f"C{k_pos}", lw=6, alpha=0.6, label=f"session {k + 1}")
        ax.set_xticks(range(len(order)), order, rotation=30, ha="right")
        ax.set_ylabel("session MHQR")
        ax.set_ylim(-0.3, 10.3)
        ax.set_title(f"Session scores by session (whiskers p5–p95) — judge {name}")
        ax.legend(fontsize="small")
    save_png(fig, out / "mhqr_by_session.png")


def write_report(out: Path, report: dict[str, Any], rubric: Rubric, plots: bool) -> dict[str, Path]:
    folder = ReportFolder(out)
    files = {f.name: f for f in (folder.report_json, folder.report_md)}
    report = json_safe(report)
    if plots:
        report["plots"] = write_plots(out, report)
        files.update({p: out / p for p in report["plots"]})
    JudgeReport.model_validate(report)  # what the run log's readers expect, or fail here rather than later
    # Left as it is when only its provenance would change: a rerun served from the cache is no change to its readers.
    atomic_write_json_if_changed(folder.report_json, report)
    write_markdown(folder.report_md, {**report, "_rubric": rubric}, rubric)
    return files
