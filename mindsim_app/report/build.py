"""`mindsim report RUN_DIR … [--out FILE]`: one self-contained HTML file per run, or one page comparing
several runs. Nothing on the page comes from the network: charts are inline SVG
drawn by `charts.py`, the page's script and style are inlined from `templates/`, the data the drill-down
renders is one JSON blob in the page, and a Content-Security-Policy forbids every fetch.

Runs whose versions differ (`versions.KEYS`) are refused unless `allow_mixed`, and then marked.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Sequence

import jinja2

from mindsimkit.mindcore.errors import UserError
from mindsimkit.mindcore.io import atomic_write_text
from mindsimkit.mindcore.redact import scrub_data
from mindsimkit.mindsim_app.report import charts
from mindsimkit.mindsim_app.report.drilldown import drilldown
from mindsimkit.mindsim_app.report.health import health
from mindsimkit.mindcore.runlog import JudgeReport, ValidationReport
from mindsimkit.mindsim_app.report.load import RunData, default_output, load_run
from mindsimkit.mindsim_app.report.ranking import ALPHA, leaderboard
from mindsimkit.mindsim_app.report.versions import differences, versions

TEMPLATES = Path(__file__).with_name("templates")
SEVERITIES = ("no_concern", "minor", "major", "critical")
SEVERITY_NAMES = {"no_concern": "No concern", "minor": "Minor", "major": "Major", "critical": "Critical"}


class MixedVersions(UserError):
    """Runs measured by different toolkit, rubric, templates, judge or reference: not one leaderboard."""


def _judge_charts(board: dict[str, Any], category_names: dict[str, str]) -> dict[str, str]:
    rows = board["rows"]
    out = {
        "mhqr": charts.intervals(
            [{"label": r["system"], "value": r["mhqr"], "ci": r["ci95"], "group": r["group"]} for r in rows],
            title=f"MHQR per system, judge {board['judge']}",
            xlabel="MHQR (0 no concern – 10 critical; lower is better), 95% patient bootstrap",
            tag_key="group",
        ),
        # MindEval2 Table 6 as one figure: MHQR, its patient-bootstrap interval and the p5-p95 of session scores.
        "table6": charts.spread(
            [
                {
                    "label": r["system"],
                    "value": r["mhqr"],
                    "ci": r["ci95"],
                    "whiskers": (r.get("p5"), r.get("p95")),
                    "box": (r.get("p25"), r.get("p75")),
                }
                for r in rows
            ],
            title=f"Table 6: MHQR, 95% interval and session scores, judge {board['judge']}",
            xlabel="dot MHQR · thick bar 95% patient bootstrap · box p25–p75 and whiskers p5–p95 of session MHQR",
        ),
        "severity": charts.stacked(
            [{"label": r["system"], "parts": r["severity_share"]} for r in rows],
            SEVERITIES,
            title="Share of replies at each severity",
            names=SEVERITY_NAMES,
            colours=charts.SEVERITY_COLOURS,
        ),
    }
    cats = list(rows[0]["by_category"]) if rows else []
    out["categories"] = charts.stacked(
        [{"label": r["system"], "parts": r["by_category"]} for r in rows],
        cats,
        title="MHQR allocated to issue categories (bars add up to the MHQR)",
        names=category_names,
        total=None,
        pct=False,
    )
    if first_later := _first_later_rows(board.get("first_later"), [r["system"] for r in rows]):
        # MindEval2 Figure 5: where each counsellor's MHQR sits, first session against the later ones.
        out["first_later"] = charts.stacked(
            first_later,
            cats,
            title="MHQR allocated to issue categories, first session against later sessions",
            names=category_names,
            total=None,
            pct=False,
        )
    turn = (board["by_turn"] or {}).get("counsellors") or {}
    out["by_turn"] = charts.lines(
        {
            n: [(int(p), v["mean_weight"]) for p, v in sorted(t["positions"].items(), key=lambda kv: int(kv[0]))]
            for n, t in turn.items()
        },
        title="Mean severity weight by turn position",
        lo=0,
        hi=10,
        xlabel="counsellor reply in the session",
        ylabel="severity weight",
    )
    if board.get("trials"):
        out["trials"] = charts.intervals(
            [
                {"label": r["system"], "value": r["mean"], "ci": [r["min"], r["max"]]}
                for r in board["trials"]["spread"]
                if r["mean"] is not None
            ],
            title=f"MHQR across {board['trials']['count']} trials (dot: mean of the trials' MHQR; bar: min–max)",
            xlabel="MHQR of one trial (lower is better)",
        )
    sess = board["by_session"] or {}
    out["by_session"] = charts.lines(
        {
            n: [(int(k) + 1, v["mhqr"]) for k, v in sorted(e["mean"].items(), key=lambda kv: int(kv[0]))]
            for n, e in sess.items()
        },
        title="MHQR by session of the arc",
        lo=0,
        hi=10,
        xlabel="session",
        ylabel="MHQR",
    )
    return out


def _first_later_rows(shares: dict[str, Any] | None, systems: list[str]) -> list[dict[str, Any]]:
    """Two bars per counsellor (first session, later sessions) of `judge.analyses.shares_by_session`, in
    leaderboard order; none when the run has one session per arc."""
    per = (shares or {}).get("counsellors") or {}
    rows = []
    for n in [s for s in systems if s in per] + sorted(set(per) - set(systems)):
        if not per[n].get("later"):
            continue
        rows += [
            {"label": f"{n} · {when}", "parts": per[n][when].get("category_mhqr") or {}} for when in ("first", "later")
        ]
    return rows


def _validation_charts(v: ValidationReport | None) -> dict[str, str]:
    if not v or not v.systems:
        return {}
    systems = list(v.systems)
    groups = []
    for f in [*v.features, "index"]:
        vals = {}
        for s in systems:
            e = v.estimate(s, f)
            lo, hi = (e.ci or (None, None)) if e else (None, None)
            vals[s] = {"value": e.distance if e else None, "lo": lo, "hi": hi}
        groups.append({"label": v.feature_labels.get(f, "Index (mean of 7)"), "values": vals, "floor": v.floor.get(f)})
    out = {
        "distances": charts.grouped(
            groups, systems, title="Distance to the reference per feature (reference SDs; dashed: noise floor)"
        )
    }
    arc = v.arc
    if arc:
        rows = [
            {"label": f"{name} · {int(k) + 1}/{len(shares)}", "parts": row}
            for name, shares in arc.items()
            for k, row in shares.items()
        ]
        out["arc"] = charts.stacked(
            rows,
            ["P", "T", "C", "F"],
            title="Narrative-arc label shares by fifth of the conversation",
            names={k: f"{k} {n}" for k, n in v.arc_labels.items()},
        )
    return out


def _health_charts(h: dict[str, Any]) -> dict[str, str]:
    bt = h["by_turn"]
    out = {
        "depth": charts.lines(
            {s: [(k, t["depth"]) for k, t in turns.items()] for s, turns in bt.items()},
            title="Disclosure depth by patient turn (depth move 1–3, 0 none)",
            lo=0,
            hi=3,
            xlabel="patient turn",
            ylabel="mean depth",
        ),
        "concealing": charts.lines(
            {s: [(k, t["concealing"]) for k, t in turns.items()] for s, turns in bt.items()},
            title="Share of concealing moves by patient turn",
            lo=0,
            hi=1,
            xlabel="patient turn",
            ylabel="share",
        ),
    }
    lengths = h.get("session_lengths") or {}
    if lengths:
        out["lengths"] = charts.spread(
            [
                {"label": n, "value": x["mean"], "box": (x["p25"], x["p75"]), "whiskers": (x["p5"], x["p95"])}
                for n, x in lengths.items()
            ],
            lo=0,
            hi=max(x["longest"] for x in lengths.values()) or 1,
            title="Session length in counsellor replies (MindEval2 Figure 8)",
            xlabel="dot mean · box p25–p75 · whiskers p5–p95 of the sessions' counsellor replies",
        )
    if any(t.get("resistance") is not None for turns in bt.values() for t in turns.values()):
        pa = {s: turns for s, turns in bt.items() if any(t.get("resistance") is not None for t in turns.values())}
        out["resistance"] = charts.lines(
            {s: [(k, t.get("resistance")) for k, t in turns.items()] for s, turns in pa.items()},
            title="PatientAct: share of resistance by patient turn",
            lo=0,
            hi=1,
            xlabel="patient turn",
            ylabel="share",
        )
        out["trust"] = charts.lines(
            {s: [(k, t.get("trust")) for k, t in turns.items()] for s, turns in pa.items()},
            title="PatientAct: mean trust after each patient turn",
            lo=1,
            hi=4,
            xlabel="patient turn",
            ylabel="trust",
        )
    return out


def _category_names(judge_report: JudgeReport | None) -> dict[str, str]:
    try:
        from mindsimkit.judge.rubric import load_rubric

        rubric = load_rubric(judge_report.config.get("rubric") if judge_report else None)
        return {c.id: c.name for c in rubric.categories}
    except Exception:  # an older or custom rubric: the ids are still readable
        return {}


def run_context(run: RunData, draws: int = 20000) -> dict[str, Any]:
    boards = leaderboard(run.judge_report, run.judgments, draws=draws)
    names = _category_names(run.judge_report)
    by_engine = (run.judge_report.by_engine if run.judge_report else False) or len(
        {s.patient_engine for s in run.sessions}
    ) > 1
    h = health(run, by_engine)
    for b in boards:
        b["charts"] = _judge_charts(b, names)
    return {
        "label": run.label,
        "path": str(run.path),
        "boards": boards,
        "category_names": names,
        # The template reads the report as the JSON it is (`e is mapping` for an estimate).
        "judge_report": run.judge_report,
        "validation": run.validation.model_dump() if run.validation else None,
        "validation_charts": _validation_charts(run.validation),
        "health": h,
        "health_charts": _health_charts(h),
        "versions": versions(run),
        "patientact": run.patientact,
        "drill": drilldown(run, boards),
        "gate": (run.info.release_gate if run.info else None) or None,
        "partial": run.partial,
        "plan": run.info.plan_vs_actual if run.info else None,
    }


def _compare_rows(contexts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for k, c in enumerate(contexts):
        b = c["boards"][0] if c["boards"] else None
        for r in b["rows"] if b else []:
            rows.append({"run": k, "run_label": c["label"], **r})
    return sorted(rows, key=lambda r: r["mhqr"])


# Characters that, left raw inside <script type="application/json">, change how the page parses: "</script" ends
# the element, "<!--" followed by "<script" makes the parser skip the real closing tag, and U+2028/U+2029 end a
# line for older script parsers. As JSON escapes they are the same text to JSON.parse and nothing to the HTML
# parser (none of them can occur outside a JSON string).
_SCRIPT_SAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _blob(data: Any) -> str:
    # Scrubbed as data before it becomes JSON text, so masking never cuts one of its escapes in half.
    return json.dumps(
        scrub_data(data), ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str
    ).translate(_SCRIPT_SAFE)


def _clean(x: Any) -> Any:
    if isinstance(x, float) and x != x:
        return None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def render(runs: Sequence[RunData], *, mixed: list[str] | None = None, draws: int = 20000) -> str:
    return _render_contexts([run_context(r, draws) for r in runs], mixed)


# What report.json keeps of a run's page: the figures a script compares across runs. The per-session drill-down
# stays in the run's own session and judgment files; charts are drawings of figures kept here.
_DATA_KEYS = ("label", "path", "boards", "health", "versions", "plan", "gate", "partial")


def _without_charts(x: Any) -> Any:
    if isinstance(x, dict):
        return {
            k: _without_charts(v)
            for k, v in x.items()
            if not (isinstance(k, str) and (k == "charts" or k.endswith("_charts")))
        }
    if isinstance(x, list):
        return [_without_charts(v) for v in x]
    return x


def report_data(contexts: list[dict[str, Any]], mixed: list[str] | None = None) -> dict[str, Any]:
    """The page's figures as data (report.json beside report.html): per run the leaderboards, simulator health,
    versions, the plan beside the actual usage (`mindsim plan`), the release gate and whether the run was partial."""
    return {
        "runs": [_clean(_without_charts({k: c[k] for k in _DATA_KEYS})) for c in contexts],
        "mixed": mixed or [],
        "generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def _render_contexts(contexts: list[dict[str, Any]], mixed: list[str] | None) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["f"] = lambda x, nd=2: "–" if x is None or (isinstance(x, float) and x != x) else f"{x:.{nd}f}"
    env.filters["pct"] = lambda x: "–" if x is None else f"{100 * x:.1f}%"
    blob = {"runs": [c["drill"] for c in contexts], "severity_names": SEVERITY_NAMES}
    try:
        text = _blob(blob)
    except ValueError:  # a NaN somewhere: walk the blob once to make it null (rare, so not done up front)
        text = _blob(_clean(blob))
    return env.get_template("report.html.jinja2").render(
        runs=contexts,
        compare=_compare_rows(contexts) if len(contexts) > 1 else None,
        mixed=mixed or [],
        severities=SEVERITIES,
        severity_names=SEVERITY_NAMES,
        alpha=ALPHA,
        blob=text,
        script=(TEMPLATES / "report.js").read_text(encoding="utf-8"),
        style=(TEMPLATES / "report.css").read_text(encoding="utf-8"),
        generated=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    )


def build_report(
    run_dirs: Sequence[str | Path],
    out: str | Path | None = None,
    *,
    allow_mixed: bool = False,
    allow_partial: bool = False,
    draws: int = 20000,
) -> Path:
    """Write the report of one run (default `RUN_DIR/report.html`) or the comparison of several (`--out`
    required). Raises MixedVersions (exit 2) naming the first differing pair unless `allow_mixed`; a run folder
    that is incomplete or altered (its manifest) is refused unless `allow_partial` (the page then says so)."""
    if not run_dirs:
        raise UserError("give at least one run folder")
    if len(run_dirs) > 1 and out is None:
        raise UserError("comparing several runs: say where the page goes with --out FILE.html")
    runs = [load_run(p, allow_partial=allow_partial) for p in run_dirs]
    mixed: list[str] = []
    for i, a in enumerate(runs):
        for b in runs[i + 1 :]:
            diff = differences(a, b)
            if diff:
                mixed.append(f"{a.path} vs {b.path}: " + "; ".join(diff))
    if mixed and not allow_mixed:
        raise MixedVersions(
            f"runs measured differently, not compared — {mixed[0]}"
            + (f" (and {len(mixed) - 1} more pairs)" if len(mixed) > 1 else "")
            + "; pass --allow-mixed to put them on one page anyway (then marked)"
        )
    target = Path(out) if out is not None else default_output(runs[0].path)
    if target.suffix == ".json":
        raise UserError(f"--out {target}: names the HTML page, and its figures go beside it as .json; give FILE.html")
    contexts = [run_context(r, draws) for r in runs]
    page = _render_contexts(contexts, mixed)
    data = json.dumps(scrub_data(report_data(contexts, mixed)), ensure_ascii=False, indent=1, default=str)
    atomic_write_text(data_path(target), data + "\n")
    atomic_write_text(target, page)
    return target


def data_path(page: Path) -> Path:
    """report.json for report.html: the page's figures as data, always beside the page."""
    return page.with_suffix(".json")
