"""`run_patientact`: score every session with PatientAct's conversation rubric (judge/patientact.py) and
write `OUT/patientact_judge/`: `judgments.jsonl` (one row per session, failures included), `cache/` (one
checkpoint per answered session, so a rerun sends no request for it), `report.json` and `report.md` —
means per system and dimension, failures per system, and the paper's significance marks (Tables 2 and 4):
per dimension the best system against the second best, one-sided Mann–Whitney U at p < 0.05 (one-sided is
our reading), on the judge's scores and, given human ratings, on the humans' (per-system human means beside
the judge's); with `baseline` also the older comparison of one system against every other. Given human
ratings: Spearman's ρ judge vs mean human and Krippendorff's α among the raters (Table 3)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Callable

from mindsimkit.mindcore.errors import EngineError, InputError
from mindsimkit.mindcore.io import CheckpointDir, atomic_write_json, atomic_write_jsonl, atomic_write_text, json_safe
from mindsimkit.mindcore.runlog import RubricReport
from mindsimkit.mindcore.layout import PatientActJudgeFolder, RunLayout
from mindsimkit.mindcore.manifest import record_stage
from mindsimkit.mindcore.provenance import base_provenance
from mindsimkit.judge.schemas import PatientActRunSummary
from mindsimkit.judge import rubrics as registry
from mindsimkit.judge.alpha import agreement
from mindsimkit.judge.patientact import (
    SESSION_RUBRIC,
    ConversationItem,
    ConversationJudge,
    HumanRating,
    Judgment,
    best_vs_second,
    comparison_sets,
    failures,
    human_scores,
    judge_items,
    judge_scores,
    mann_whitney,
    mean_human,
    scored_systems,
    spearman,
    system_means,
)
from mindsimkit.judge.rubrics import Rubric

ALPHA = 0.05


def _attempt(fn: Callable[[], Any]) -> Any:
    """A statistic the data cannot support (too few items, one value only) is reported with its reason,
    not allowed to sink a report whose judgments are already paid for."""
    try:
        return fn()
    except (InputError, ValueError, ZeroDivisionError) as exc:
        return {"error": str(exc)}


def human_agreement(rows: list[Judgment], human: list[HumanRating], rubric: Rubric | None = None) -> dict[str, Any]:
    """Krippendorff's α among the raters at the rubric's level, per dimension: on every pairable value
    (`krippendorff_alpha`) and on the items every rater rated (`krippendorff_alpha_all_rater_subset`), plus
    Spearman's ρ of the judge against the mean human score."""
    rubric = rubric or registry.load(SESSION_RUBRIC)
    raters = sorted({r.rater for r in human})
    judged = {r.item_id for r in rows}
    alpha: dict[str, float | dict[str, str | None]] = {}
    subset: dict[str, dict[str, Any]] = {}
    domain = [rubric.rating_scale.position(p) for p in rubric.rating_scale.points]
    for d in rubric.ids:
        cells = [(r.item_id, r.rater, rubric.rating_scale.position(r.scores[d])) for r in human if d in r.scores]
        if not cells:
            continue
        a = agreement(cells, rubric.level, domain)
        if len(raters) < 2:
            alpha[d] = {"error": "one rater only: α needs at least two"}
        else:
            alpha[d] = round(a.pairable, 3) if a.pairable is not None else {"error": a.reason}
        subset[d] = {
            "alpha": None if a.all_rater_subset is None else round(a.all_rater_subset, 3),
            "items": a.subset_units,
        }
    return {
        "raters": raters,
        "items": len({r.item_id for r in human}),
        "items_not_judged": sorted({r.item_id for r in human} - judged),
        "alpha_level": rubric.level,
        "krippendorff_alpha": alpha,
        "krippendorff_alpha_all_rater_subset": subset,
        "spearman_judge_vs_mean_human": _attempt(lambda: spearman(rows, mean_human(human))),
    }


# Where the case study cuts each session (PatientAct App. E, Table 5: an early moment, the middle, the late
# session); the paper picks the moments by reading them, we take them by position (ours).
CASE_MOMENTS = {"early": 0.2, "middle": 0.5, "late": 1.0}


def case_study(items: list[ConversationItem], systems: list[str]) -> dict[str, Any]:
    """Table 5 as data: the first patient (by id) whose first session exists for every one of `systems`, and
    per system the client's message at each of `CASE_MOMENTS` with the counsellor message before it."""
    by: dict[tuple[str, str], ConversationItem] = {}
    for it in sorted(items, key=lambda i: (i.session_index, i.item_id)):
        by.setdefault((it.patient_id, it.system), it)
    patients = sorted({p for p, _ in by if all((p, s) in by for s in systems)})
    if not systems or not patients:
        return {"error": "no patient has a session of every compared system"}
    pid = patients[0]
    first = by[(pid, systems[0])]
    out: dict[str, Any] = {
        "patient_id": pid,
        # Table 5 opens with the clinical situation every system played; a persona patient has its main problem.
        "situation": first.situation,
        "group": first.group,
        "moments": list(CASE_MOMENTS),
        "systems": {},
    }
    for s in systems:
        it = by[(pid, s)]
        client = [i for i, (who, _) in enumerate(it.transcript) if who == "Client"]
        rows = {}
        for moment, at in CASE_MOMENTS.items():
            if not client:
                break
            i = client[max(0, min(len(client) - 1, round(at * len(client)) - 1))]
            before = next((t for who, t in reversed(it.transcript[:i]) if who != "Client"), None)
            rows[moment] = {"turn": client.index(i) + 1, "counsellor": before, "client": it.transcript[i][1]}
        out["systems"][s] = {"session_id": it.session_id, "client_turns": len(client), "excerpts": rows}
    return out


def _marks(scores: dict[str, dict[str, list[float]]], systems: list[str] | None) -> Any:
    return _attempt(lambda: best_vs_second(scores, ALPHA, systems)) if scores else {}


def _human_block(rows: list[Judgment], human: list[HumanRating], sets: dict[str, list[str]]) -> dict[str, Any]:
    system_of = {r.item_id: r.system for r in rows}
    scores = human_scores(human, system_of)
    means = {s: {d: round(sum(v) / len(v), 3) for d, v in per.items() if v} for s, per in sorted(scores.items())}
    first = next(iter(sets.values()), None)
    return {
        "means": means,
        "items_by_system": {s: len(next(iter(per.values()), [])) for s, per in scores.items()},
        "best_vs_second": _marks(scores, first),
        "comparisons": {name: _marks(scores, members) for name, members in sets.items()},
    }


def build_report(
    rows: list[Judgment],
    baseline: str | None = None,
    human: list[HumanRating] | None = None,
    rubric: Rubric | None = None,
    comparisons: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """The report. `comparisons` names the sets of systems the significance marks compare (set name → systems);
    by default the paper's two, drawn from the system names (`comparison_sets`): Table 2's simulators and Table
    4's ablation arms. `best_vs_second` holds the first set's marks (every system compared when there is no set
    of two)."""
    rubric = rubric or registry.load(SESSION_RUBRIC)
    means = system_means(rows)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.system] = counts.get(r.system, 0) + 1
    others = sorted(s for s in counts if s != baseline)
    tests = {s: _attempt(partial(mann_whitney, rows, baseline, s)) for s in others} if baseline in counts else {}
    scores = judge_scores(rows)
    sets = dict(comparisons) if comparisons is not None else comparison_sets(counts)
    first = next(iter(sets.values()), None)
    report: dict[str, Any] = json_safe(
        {
            "provenance": base_provenance(),
            "rubric": {
                "id": rubric.id,
                "name": rubric.name,
                "version": rubric.version,
                "source": rubric.source,
                "dimensions": rubric.ids,
                "scale": rubric.rating_scale.describe(),
                "level": rubric.level,
            },
            "judge": next((r.judge for r in rows), {}),
            "prompt": next((r.prompt for r in rows if r.prompt), {rubric.judge_spec.template: None}),
            "judged": len(rows),
            "sessions_by_system": counts,
            "failed": failures(rows),
            "failed_rows": [
                {"item_id": r.item_id, "system": r.system, "error_kind": r.error_kind, "error": r.error}
                for r in rows
                if not r.ok
            ],
            "means": means,
            "alpha": ALPHA,
            "means_by_group": {
                g: system_means([r for r in rows if r.group == g]) for g in sorted({r.group for r in rows if r.group})
            },
            "comparisons": {
                name: {"systems": members, "best_vs_second": _marks(scores, members)} for name, members in sets.items()
            },
            "best_vs_second": _marks(scores, first),
            "baseline": baseline,
            "baseline_missing": baseline is not None and baseline not in counts,
            "mann_whitney_baseline_greater": tests,
            "human": {**human_agreement(rows, human, rubric), **_human_block(rows, human, sets)} if human else None,
        }
    )
    return report


def _marked(value: Any, dim: str, system: str, marks: dict[str, Any]) -> str:
    m = marks.get(dim) if isinstance(marks, dict) else None
    star = " *" if isinstance(m, dict) and m.get("significant") and m.get("best") == system else ""
    return _f(value) + star


def _best_rows(title: str, block: Any, dims: list[str]) -> list[str]:
    if not block:
        return []
    lines = [
        "",
        f"Best vs second best ({title} scores):",
        "",
        "| dimension | best | second | U | p |",
        "|---|---|---|---|---|",
    ]
    if isinstance(block, dict) and isinstance(block.get("error"), str):
        return lines + [f"| — | {block['error']} | | | |"]
    for d in dims:
        t = block.get(d, {})
        lines.append(
            f"| {d} | {t.get('best', '—')} | {t.get('second', '—')} | {_f(t.get('U'), 1)} | "
            f"{_f(t.get('p'), 3) if 'p' in t else t.get('error', '—')} |"
        )
    return lines


def _f(x: Any, digits: int = 2) -> str:
    return "—" if not isinstance(x, (int, float)) else f"{x:.{digits}f}"


def _columns(report: dict[str, Any]) -> tuple[list[str], dict[str, Any] | None, dict[str, Any], str]:
    dims = report["rubric"]["dimensions"]
    h = report.get("human")
    hmeans = h.get("means", {}) if h else {}
    head = " | ".join(f"{d} (judge) | {d} (human)" if h else d for d in dims)
    return dims, h, hmeans, head


def _means_md(report: dict[str, Any]) -> list[str]:
    dims, h, hmeans, head = _columns(report)
    lines = [
        f"## Mean score per system ({report['rubric'].get('scale', '1-5')})",
        "",
        "| system | sessions | failed | " + head + " |",
        "|---|---|---|" + "---|" * (len(dims) * (2 if h else 1)),
    ]
    for s, n in sorted(report["sessions_by_system"].items()):
        m, hm = report["means"].get(s, {}), hmeans.get(s, {})
        cells = [f"{_f(m.get(d))} | {_f(hm.get(d))}" if h else _f(m.get(d)) for d in dims]
        lines.append(f"| {s} | {n} | {report['failed'].get(s, 0)} | " + " | ".join(cells) + " |")
    return lines


def _sets(report: dict[str, Any]) -> dict[str, Any]:
    sets = report.get("comparisons") or {}
    if not sets:  # no set of two systems: every system compared (older reports have only this)
        sets = {
            "all systems": {
                "systems": sorted(report["sessions_by_system"]),
                "best_vs_second": report.get("best_vs_second", {}),
            }
        }
    return dict(sets)


def _comparison_md(report: dict[str, Any], name: str, block: dict[str, Any]) -> list[str]:
    dims, h, hmeans, head = _columns(report)
    hsets = (h.get("comparisons") or {"all systems": h.get("best_vs_second", {})}) if h else {}
    marks, hmarks = block.get("best_vs_second", {}), hsets.get(name, {})
    members = block.get("systems", [])
    lines = [
        f"## Comparison `{name}`: {', '.join(members)}",
        "",
        f"`*`: rated significantly higher than the second-best system of this set on that column (one-sided "
        f"Mann–Whitney U, p < {report.get('alpha', 0.05)}; one-sided is our reading of the paper's marks).",
        "",
        "| system | " + head + " |",
        "|---|" + "---|" * (len(dims) * (2 if h else 1)),
    ]
    for s in members:
        m, hm = report["means"].get(s, {}), hmeans.get(s, {})
        cells = [
            f"{_marked(m.get(d), d, s, marks)} | {_marked(hm.get(d), d, s, hmarks)}"
            if h
            else _marked(m.get(d), d, s, marks)
            for d in dims
        ]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    return lines + _best_rows("judge", marks, dims) + (_best_rows("human", hmarks, dims) if h else [])


def _agreement_md(report: dict[str, Any]) -> list[str]:
    dims, h, _, _ = _columns(report)
    if not h:
        return []
    rho = h["spearman_judge_vs_mean_human"]
    lines = [
        f"## Agreement with human ratings ({len(h['raters'])} raters, {h['items']} items)",
        "",
        f"α: Krippendorff's α among the raters, {h.get('alpha_level', 'ordinal')}, on every pairable rating; "
        "the all-rater subset keeps only the items every rater rated.",
        "",
        "| dimension | α (pairable) | α (all-rater subset, items) | Spearman's ρ (judge vs mean human) | n |",
        "|---|---|---|---|---|",
    ]
    for d in dims:
        a = h["krippendorff_alpha"].get(d)
        sub = (h.get("krippendorff_alpha_all_rater_subset") or {}).get(d) or {}
        r = rho.get(d, {}) if "error" not in rho else {}
        lines.append(
            f"| {d} | {_f(a, 3) if not isinstance(a, dict) else a['error']} | "
            f"{_f(sub.get('alpha'), 3)} ({sub.get('items', 0)}) | {_f(r.get('rho'), 3)} | {r.get('n', '—')} |"
        )
    if "error" in rho:
        lines.append(f"\nSpearman's ρ not computed: {rho['error']}")
    if h["items_not_judged"]:
        lines.append(f"\n{len(h['items_not_judged'])} rated items are not among the judged sessions.")
    return lines


def _case_md(report: dict[str, Any]) -> list[str]:
    case = report.get("case_study") or {}
    if not case.get("systems"):
        return []
    lines = [
        f"## Case study (Table 5): patient {case['patient_id']}, first session",
        "",
    ]
    if case.get("situation"):
        lines += [f"Clinical situation: {case['situation']}", ""]
    elif case.get("group"):
        lines += [f"Main presenting problem: {case['group']}", ""]
    lines += [
        "Moments by position in the session (early, middle, late; ours): the counsellor's message and the "
        "client's answer.",
        "",
    ]
    for s, c in case["systems"].items():
        lines.append(f"### {s} ({c['client_turns']} client turns)")
        for moment, e in c["excerpts"].items():
            lines += [f'- {moment}, turn {e["turn"]}: counsellor: "{e["counsellor"] or "—"}" — client: "{e["client"]}"']
        lines.append("")
    return lines


def report_md(report: dict[str, Any]) -> str:
    dims = report["rubric"]["dimensions"]
    title = report["rubric"].get("name", "PatientAct rubric")
    lines = [
        f"# {title} (v{report['rubric']['version']})",
        "",
        f"Judge: {report['judge'].get('model', '?')} on {report['judge'].get('engine', '?')}; "
        f"{report['judged']} sessions judged.",
        "",
    ] + _means_md(report)
    for name, block in _sets(report).items():
        lines += [""] + _comparison_md(report, name, block)
    by_group = report.get("means_by_group") or {}
    if by_group:
        lines += [
            "",
            "## Mean score per main presenting problem (judge; the paper groups by disorder)",
            "",
            "| main problem | system | " + " | ".join(dims) + " |",
            "|---|---|" + "---|" * len(dims),
        ]
        for g, per in by_group.items():
            for s_, m in per.items():
                lines.append(f"| {g} | {s_} | " + " | ".join(_f(m.get(d)) for d in dims) + " |")
    base = report["baseline"]
    tests = report["mann_whitney_baseline_greater"]
    if base is not None:
        lines += ["", f"## Is {base} rated higher? (one-sided Mann–Whitney U, p per dimension)", ""]
    if base is None:
        pass
    elif report["baseline_missing"]:
        lines.append(f"No sessions of the baseline system '{base}'; pass --baseline SYSTEM.")
    elif not tests:
        lines.append("No other system to compare with.")
    else:
        lines += ["| vs | " + " | ".join(dims) + " |", "|---|" + "---|" * len(dims)]
        for s, t in tests.items():
            cells = (
                [t["error"]] + [""] * (len(dims) - 1)
                if "error" in t
                else [f"U={_f(t[d]['U'], 1)}, p={_f(t[d]['p'], 3)}" for d in dims]
            )
            lines.append(f"| {s} | " + " | ".join(cells) + " |")
    agreement = _agreement_md(report)
    lines += ([""] + agreement) if agreement else []
    case = _case_md(report)
    lines += ([""] + case) if case else []
    if report["failed_rows"]:
        lines += ["", f"## Failed judgments ({len(report['failed_rows'])})", ""]
        lines += [
            f"- {f['item_id']} ({f['system']}, {f['error_kind']}): {(f['error'] or '')[:200]}"
            for f in report["failed_rows"]
        ]
    return "\n".join(lines) + "\n"


# The paper's tables, each from the report one judge run writes: the comparison sets `comparison_sets` names
# (Table 2: PatientAct beside the other simulators; Table 4: the full framework beside its arms), the agreement
# with the raters (Table 3; needs the run judged with --human), and the case study (Table 5).
PAPER_TABLES = {2: "simulators", 3: "agreement", 4: "ablation", 5: "case study"}


def table_md(report: dict[str, Any], table: int) -> str:
    """One of the paper's Tables 2-5 from a PatientAct judge report, as Markdown. Raises InputError naming what the
    run lacks when the report has no such table."""
    if table not in PAPER_TABLES:
        raise InputError(f"table {table}: PatientAct's judge report has Tables {', '.join(map(str, PAPER_TABLES))}")
    if table in (2, 4):
        prefix = PAPER_TABLES[table]
        found = {n: b for n, b in _sets(report).items() if n == prefix or n.startswith(prefix + "/")}
        if not found:
            need = (
                "the full patientact engine and at least one other simulator (patient_psi, annaagent, "
                "consistentmi, mindeval or mindsim)"
                if table == 2
                else "the full patientact engine and at least one of its arms (patientact:no_tg, :no_dm, :no_pipe)"
            )
            raise InputError(
                f"no Table {table} in this report: its sessions need {need} in "
                "simulation.patient_engine; simulate and judge them again"
            )
        lines = [f"# PatientAct Table {table}", ""]
        for name, block in found.items():
            lines += _comparison_md(report, name, block) + [""]
        return "\n".join(lines)
    body = _agreement_md(report) if table == 3 else _case_md(report)
    if not body:
        why = (
            "the run was judged without human ratings: judge it again with --human FILE (the `mindsim annotate "
            "export` of the PatientAct session ratings)"
            if table == 3
            else "no patient was played by two systems of a comparison set"
        )
        raise InputError(f"no Table {table} in this report: {why}")
    return "\n".join([f"# PatientAct Table {table}", "", *body]) + "\n"


def output_folder(out: str | Path, rubric: Rubric) -> PatientActJudgeFolder:
    """`OUT/patientact_judge/` for PatientAct's rubric (the run layout's stage folder); `OUT/rubric_judge/<id>/`,
    the same files, for any other scales rubric."""
    if rubric.id == SESSION_RUBRIC:
        return RunLayout(Path(out)).patientact_judge
    return PatientActJudgeFolder(Path(out) / "rubric_judge" / rubric.id)


def run_patientact(
    out: str | Path,
    engines: Any,
    items: list[ConversationItem],
    *,
    judge: str = "judge",
    baseline: str | None = None,
    human: list[HumanRating] | None = None,
    max_tokens: int | None = None,
    rubric: Rubric | None = None,
    comparisons: dict[str, list[str]] | None = None,
) -> PatientActRunSummary:
    """Judge `items` with the `judge` role of the started `engines` on a conversation-unit scales rubric
    (PatientAct's by default); write everything under `output_folder(out, rubric)`. Raises EngineError (after
    writing) when every judgment failed, as the MHQR path does: the engine was down or its output never fit."""
    rubric = rubric or registry.load(SESSION_RUBRIC)
    folder = output_folder(out, rubric)
    items = scored_systems(items)
    named = {s for members in (comparisons or {}).values() for s in members}
    unknown = sorted(named - {it.system for it in items})
    if unknown:  # said before any judgment is paid for
        raise InputError(
            f"comparison names systems the sessions do not have: {', '.join(unknown)} (systems: "
            f"{', '.join(sorted({it.system for it in items}))})"
        )
    j = ConversationJudge(judge, engines.role(judge), max_tokens=max_tokens, rubric=rubric)
    rows = engines.run(judge_items(j, items, CheckpointDir(folder.cache)))
    summary = write_patientact(out, rows, items, rubric=rubric, baseline=baseline, human=human, comparisons=comparisons)
    failed = [r for r in rows if not r.ok]
    if rows and len(failed) == len(rows):
        raise EngineError(
            f"every judgment failed ({len(failed)}; first: {failed[0].error}); rows and report written to {folder.path}"
        )
    return summary


def write_patientact(
    out: str | Path,
    rows: list[Judgment],
    items: list[ConversationItem],
    *,
    rubric: Rubric,
    baseline: str | None = None,
    human: list[HumanRating] | None = None,
    comparisons: dict[str, list[str]] | None = None,
) -> PatientActRunSummary:
    """Write judged sessions (`items` as `scored_systems` names them) under `output_folder(out, rubric)`: the rows,
    report.json and report.md; PatientAct's own rubric is recorded in the run manifest."""
    folder = output_folder(out, rubric)
    atomic_write_jsonl(folder.judgments, [r.model_dump(mode="json") for r in rows])
    report = build_report(rows, baseline, human, rubric, comparisons)
    sets = report.get("comparisons") or {}
    report["case_study"] = case_study(
        items, next(iter(sets.values()))["systems"] if sets else sorted({it.system for it in items})
    )
    RubricReport.model_validate(json_safe(report))  # what the run log's readers expect, or fail here
    atomic_write_json(folder.report_json, report)
    atomic_write_text(folder.report_md, report_md(report))
    failed = [r for r in rows if not r.ok]
    if rubric.id == SESSION_RUBRIC:  # the run manifest knows this stage; other rubrics' folders are extra outputs
        record_stage(
            out,
            "patientact_judge",
            [folder.judgments, folder.report_json, folder.report_md],
            reads=[RunLayout(Path(out)).sessions.parquet],
            counts={"judged": len(rows), "failed": len(failed)},
        )
    return PatientActRunSummary(
        judged=len(rows),
        ok=len(rows) - len(failed),
        failed=len(failed),
        means=report["means"],
        outputs={p.name: p for p in (folder.judgments, folder.report_json, folder.report_md)},
    )
