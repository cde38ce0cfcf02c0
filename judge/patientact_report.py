"""`run_patientact`: score every session with PatientAct's conversation rubric (judge/patientact.py) and
write `OUT/patientact_judge/`: `judgments.jsonl` (one row per session, failures included), `cache/` (one
checkpoint per answered session, so a rerun sends no request for it), `report.json` and `report.md` —
means per system and dimension, failures per system, one-sided Mann–Whitney U of the baseline against
every other system (PatientAct Tables 2 and 4) and, given human ratings, Spearman's ρ judge vs mean human
and Krippendorff's α among the raters (Table 3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from mindcore.errors import EngineError, InputError
from mindcore.io import CheckpointDir, atomic_write_json, atomic_write_jsonl, atomic_write_text, json_safe
from mindcore.layout import RunLayout
from mindcore.provenance import base_provenance
from judge.patientact import (
    CONVERSATION_TEMPLATE, ConversationItem, ConversationJudge, HumanRating, Judgment, failures,
    judge_items, krippendorff_alpha, mann_whitney, mean_human, rating_matrix, rubrics, spearman, system_means,
)


def _attempt(fn: Callable[[], Any]) -> Any:
    """A statistic the data cannot support (too few items, one value only) is reported with its reason,
    not allowed to sink a report whose judgments are already paid for."""
    try:
        return fn()
    except (InputError, ValueError, ZeroDivisionError) as exc:
        return {"error": str(exc)}


def human_agreement(rows: list[Judgment], human: list[HumanRating]) -> dict[str, Any]:
    dims = rubrics().conversation.ids
    raters = sorted({r.rater for r in human})
    judged = {r.item_id for r in rows}
    alpha = {}
    for d in dims:
        m = rating_matrix(human, d)
        if not m:
            continue
        alpha[d] = (_attempt(lambda m=m: round(krippendorff_alpha(m), 3)) if len(m) > 1
                    else {"error": "one rater only: α needs at least two"})
    return {
        "raters": raters, "items": len({r.item_id for r in human}),
        "items_not_judged": sorted({r.item_id for r in human} - judged),
        "krippendorff_alpha": alpha,
        "spearman_judge_vs_mean_human": _attempt(lambda: spearman(rows, mean_human(human))),
    }


def build_report(rows: list[Judgment], baseline: str, human: list[HumanRating] | None = None) -> dict[str, Any]:
    means = system_means(rows)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.system] = counts.get(r.system, 0) + 1
    others = sorted(s for s in counts if s != baseline)
    tests = ({s: _attempt(lambda s=s: mann_whitney(rows, baseline, s)) for s in others}
             if baseline in counts else {})
    return json_safe({
        "provenance": base_provenance(),
        "rubric": {"version": rubrics().version, "source": rubrics().source,
                   "dimensions": rubrics().conversation.ids},
        "judge": next((r.judge for r in rows), {}),
        "prompt": next((r.prompt for r in rows if r.prompt), {CONVERSATION_TEMPLATE: None}),
        "judged": len(rows), "sessions_by_system": counts, "failed": failures(rows),
        "failed_rows": [{"item_id": r.item_id, "system": r.system, "error_kind": r.error_kind, "error": r.error}
                        for r in rows if not r.ok],
        "means": means, "baseline": baseline,
        "baseline_missing": baseline not in counts,
        f"mann_whitney_{baseline}_greater": tests,
        "human": human_agreement(rows, human) if human else None,
    })


def _f(x: Any, digits: int = 2) -> str:
    return "—" if not isinstance(x, (int, float)) else f"{x:.{digits}f}"


def report_md(report: dict[str, Any]) -> str:
    dims = report["rubric"]["dimensions"]
    lines = [f"# PatientAct rubric (v{report['rubric']['version']})", "",
             f"Judge: {report['judge'].get('model', '?')} on {report['judge'].get('engine', '?')}; "
             f"{report['judged']} sessions judged.", "",
             "## Mean score per system (1–5)", "",
             "| system | sessions | failed | " + " | ".join(dims) + " |",
             "|---|---|---|" + "---|" * len(dims)]
    for s, n in sorted(report["sessions_by_system"].items()):
        m = report["means"].get(s, {})
        lines.append(f"| {s} | {n} | {report['failed'].get(s, 0)} | " + " | ".join(_f(m.get(d)) for d in dims) + " |")
    base = report["baseline"]
    lines += ["", f"## Is {base} rated higher? (one-sided Mann–Whitney U, p per dimension)", ""]
    tests = report[f"mann_whitney_{base}_greater"]
    if report["baseline_missing"]:
        lines.append(f"No sessions of the baseline system '{base}'; pass --baseline SYSTEM.")
    elif not tests:
        lines.append("No other system to compare with.")
    else:
        lines += ["| vs | " + " | ".join(dims) + " |", "|---|" + "---|" * len(dims)]
        for s, t in tests.items():
            cells = [t["error"]] + [""] * (len(dims) - 1) if "error" in t else [
                f"U={_f(t[d]['U'], 1)}, p={_f(t[d]['p'], 3)}" for d in dims]
            lines.append(f"| {s} | " + " | ".join(cells) + " |")
    h = report.get("human")
    if h:
        rho = h["spearman_judge_vs_mean_human"]
        lines += ["", f"## Agreement with human ratings ({len(h['raters'])} raters, {h['items']} items)", "",
                  "| dimension | Krippendorff's α (humans) | Spearman's ρ (judge vs mean human) | n |", "|---|---|---|---|"]
        for d in dims:
            a = h["krippendorff_alpha"].get(d)
            r = rho.get(d, {}) if "error" not in rho else {}
            lines.append(f"| {d} | {_f(a, 3) if not isinstance(a, dict) else a['error']} | "
                         f"{_f(r.get('rho'), 3)} | {r.get('n', '—')} |")
        if "error" in rho:
            lines.append(f"\nSpearman's ρ not computed: {rho['error']}")
        if h["items_not_judged"]:
            lines.append(f"\n{len(h['items_not_judged'])} rated items are not among the judged sessions.")
    if report["failed_rows"]:
        lines += ["", f"## Failed judgments ({len(report['failed_rows'])})", ""]
        lines += [f"- {f['item_id']} ({f['system']}, {f['error_kind']}): {(f['error'] or '')[:200]}"
                  for f in report["failed_rows"]]
    return "\n".join(lines) + "\n"


def run_patientact(out: str | Path, engines: Any, items: list[ConversationItem], *, judge: str = "judge",
                   baseline: str = "patientact", human: list[HumanRating] | None = None,
                   max_tokens: int | None = None) -> dict[str, Any]:
    """Judge `items` with the `judge` role of the started `engines`; write everything under
    `out/patientact_judge/`. Raises EngineError (after writing) when every judgment failed, as the MHQR
    path does: the engine was down or its output never fit the schema."""
    folder = RunLayout(out).patientact_judge
    j = ConversationJudge(judge, engines.role(judge), max_tokens=max_tokens)
    rows = engines.run(judge_items(j, items, CheckpointDir(folder.cache)))
    atomic_write_jsonl(folder.judgments, [r.model_dump(mode="json") for r in rows])
    report = build_report(rows, baseline, human)
    atomic_write_json(folder.report_json, report)
    atomic_write_text(folder.report_md, report_md(report))
    failed = [r for r in rows if not r.ok]
    if rows and len(failed) == len(rows):
        raise EngineError(f"every judgment failed ({len(failed)}; first: {failed[0].error}); "
                          f"rows and report written to {folder.path}")
    return {"judged": len(rows), "ok": len(rows) - len(failed), "failed": len(failed), "means": report["means"],
            "outputs": {p.name: p for p in (folder.judgments, folder.report_json, folder.report_md)}}
