"""`run_judging`: judge every counsellor reply of a run with every configured judge, then score and
report (MindEval2 §3 and Appendix G). Writes `RUN_DIR/judgments/`:

- `judgments.parquet`: one row per reply per judge (failed judgments included, status `failed`);
- `cache/`: one checkpoint per finished judgment, keyed by content, so a rerun sends no request
  for a reply already judged and an interrupted run resumes where it stopped;
- `report.json`, `report.md`, PNG plots.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mindsimkit.mindcore.errors import EngineError, InputError
from mindsimkit.mindcore.layout import RunLayout
from mindsimkit.mindcore.runlog import played_by
from mindsimkit.mindcore.runners import Runner
from mindsimkit.mindcore.manifest import record_stage
from mindsimkit.mindcore.provenance import base_provenance
from mindsimkit.judge.analyses import analyses
from mindsimkit.judge.coflags import coflag_analyses
from mindsimkit.judge.config import JudgeConfig
from mindsimkit.judge.costs import add_usage, cost_table, stage_usage, usage_from_costs
from mindsimkit.judge.inputs import benchmark_patients, load_sessions
from mindsimkit.judge.judging import Judge, judges_from_config
from mindsimkit.judge.rankings import family_flags, judge_agreement
from mindsimkit.judge.report import critical_rows, failure_rows, write_report
from mindsimkit.judge.presets import get_preset, session_summary
from mindsimkit.judge.rubric import load_rubric
from mindsimkit.judge.schemas import (
    JudgeRanking,
    JudgeRunSummary,
    JudgmentRow,
    SessionInput,
    read_judgments,
    write_judgments,
)
from mindsimkit.judge.sharded import judge_rows
from mindsimkit.judge.scores import Columns, columns_from_rows, score_all, session_table


def preset_summary(cols: Columns, rubric: Any, spec: Any) -> dict[str, Any]:
    """The preset's own summary per counsellor (e.g. the reference's mean, p99 and incident shares over sessions)."""
    if len(cols) == 0:
        return {}
    s = session_table(cols, rubric)
    if s.worst is None:  # session_table always fills it; the field is optional for tables built elsewhere
        raise ValueError("the session table has no worst reply weight per session")
    return session_summary(s.mhqr, s.worst, s.counsellor, rubric, spec)


def summarise(
    rows: list[JudgmentRow],
    judges: list[Judge],
    sessions: list[SessionInput],
    config: JudgeConfig,
    *,
    benchmark: tuple[set[str] | None, str | None] = (None, None),
    usage: dict[str, dict[str, Any]] | None = None,
    kept: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """report.json's content. `benchmark`: the benchmark patients and where they came from
    (`judge.inputs.benchmark_patients`); `usage`: the engine ledger's summary per role, for the cost table (summed
    over the stage's runs, `add_usage`); `kept`: judges an earlier run of this folder judged with and this one did
    not run again, name → what that report said of them (model, engine, rubric_version, role)."""
    rubric = judges[0].rubric if judges else load_rubric(config.rubric)
    preset = get_preset(config.preset)
    # Decided once from the sessions, so every judge ranks the same units whatever its failures.
    engines = sorted({played_by(s.patient_engine, ours=False) for s in sessions})
    by_engine = len(engines) > 1
    about = {
        j.name: {
            "model": j.model,
            "engine": j.client.engine_name,
            "rubric_version": j.rubric_version,
            "role": j.client.describe(),
        }
        for j in judges
    }
    about.update({n: meta for n, meta in (kept or {}).items() if n not in about})
    by_judge: dict[str, dict[str, Any]] = {}
    for name, meta in about.items():
        mine = [r for r in rows if r.judge == name]
        failed = [r for r in mine if r.status == "failed"]
        by_judge[name] = {
            **meta,
            "rows": len(mine),
            "ok": len(mine) - len(failed),
            "failed": len(failed),
            "failed_by_kind": dict(Counter(r.error_kind or "unknown" for r in failed)),
            "dropped_quotes": sum(r.dropped_quotes for r in mine),
        }
        cols = columns_from_rows(mine, by_engine=by_engine)
        scores = score_all(cols, rubric, draws=config.bootstrap_draws, seed=config.seed)
        by_judge[name]["scores"] = scores
        if preset.session_summary is not None:
            by_judge[name]["preset_summary"] = preset_summary(cols, rubric, preset.session_summary)
        by_judge[name]["analyses"] = {
            **analyses(
                cols,
                rubric,
                scores["counsellors"],
                draws=config.bootstrap_draws,
                seed=config.seed,
                benchmark=benchmark[0],
                benchmark_source=benchmark[1],
            ),
            **coflag_analyses(cols, rubric, scores["counsellors"]),
        }
    counsellor_models: dict[str, str | None] = {}
    for s in sessions:
        counsellor_models[s.counsellor] = counsellor_models.get(s.counsellor) or s.counsellor_model
    return {
        "provenance": base_provenance(),
        "rubric": {"version": rubric.version, "source": rubric.source},
        "preset": {"name": config.preset, "source": preset.source},
        "prompt_hashes": judges[0].prompt_hashes if judges else {},
        "config": config.model_dump(mode="json"),
        "sessions": len(sessions),
        "counsellor_models": counsellor_models,
        "judges": by_judge,
        "judge_agreement": judge_agreement({n: j["scores"] for n, j in by_judge.items()}),
        "family_flags": family_flags({n: j["model"] for n, j in by_judge.items()}, counsellor_models),
        "critical_replies": critical_rows(rows, by_engine=by_engine),
        "failures": failure_rows(rows, by_engine=by_engine),
        "usage": usage or {},
        "costs": cost_table(usage or {}, config.prices, list(by_judge)),
        **({"patient_engines": engines} if by_engine else {}),
    }


@dataclass
class Earlier:
    """What an earlier judge run of this folder left that this run keeps: the rows of judges it does not run
    again (on these sessions, with this rubric version), what its report said of those judges, and the usage
    every earlier run recorded (a rerun adds to it; it never replaces what was spent)."""

    rows: list[JudgmentRow]
    judges: dict[str, dict[str, Any]]
    usage: dict[str, dict[str, Any]]


def earlier_run(folder: Any, judges: list[Judge], inputs: list[SessionInput]) -> Earlier:
    """The earlier run's `Earlier` (empty when there is none, or its files cannot be read: then its judgments
    are simply made again)."""
    report = _read_json(folder.report_json)
    stored = report.get("usage")
    usage: dict[str, dict[str, Any]] = stored if isinstance(stored, dict) else usage_from_costs(report.get("costs"))
    names = {j.name for j in judges}
    version = judges[0].rubric_version if judges else None
    sessions = {s.session_id for s in inputs}
    recorded = report.get("judges")
    said: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    others = {
        n: {k: m.get(k) for k in ("model", "engine", "rubric_version", "role")}
        for n, m in said.items()
        if n not in names and isinstance(m, dict) and m.get("rubric_version") == version
    }
    rows: list[JudgmentRow] = []
    if others and folder.parquet.is_file():
        try:
            rows = [r for r in read_judgments(folder.parquet) if r.judge in others]
        except InputError:
            rows = []
        if any(r.session_id not in sessions or r.rubric_version != version for r in rows):
            rows = []  # judged other sessions (the simulation was rerun): those judges must judge again
    kept = {n: others[n] for n in dict.fromkeys(r.judge for r in rows)}
    return Earlier(rows, kept, usage)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def run_judging(
    run_dir: str | Path,
    engines: Any,
    config: JudgeConfig | None = None,
    *,
    sessions: str | Path | None = None,
    inputs: list[SessionInput] | None = None,
    runner: Runner | None = None,
) -> JudgeRunSummary:
    """Judge, score and report one run. `engines` must be started. Returns a summary: counts and
    output paths. Raises EngineError (after writing every output) when every judgment failed:
    unreachable engine or output that never fit the schema, both engine-side. `inputs`: sessions
    already loaded (the CLI checks them before starting any engine); else read from `sessions` or
    the run folder. `runner`: the job's (`mindcore.runners`; default this process), entered by the caller;
    on Ray the replies are judged by the cluster's workers (same rows, same cache)."""
    config = config or JudgeConfig()
    run_dir = Path(run_dir)
    if inputs is None:
        inputs = load_sessions(run_dir, Path(sessions) if sessions else None)
    # Read before any judgment, so a bad profiles path stops the run before it spends anything.
    bench = benchmark_patients(inputs, run_dir, Path(config.profiles) if config.profiles else None)
    judges = judges_from_config(engines, config)
    rows = judge_rows(engines, config, inputs, RunLayout(run_dir).judgments.cache, runner)
    summary = write_judging(
        run_dir,
        rows,
        judges,
        inputs,
        config,
        benchmark=bench,
        usage=engines.ledger.summary(),
        from_run=sessions is None,
    )
    failed = [r for r in rows if r.status == "failed"]
    if rows and len(failed) == len(rows):
        raise EngineError(
            f"every judgment failed ({len(failed)}; first: {failed[0].error}); "
            f"rows and report written to {RunLayout(run_dir).judgments.path}"
        )
    return summary


def write_judging(
    run_dir: str | Path,
    rows: list[JudgmentRow],
    judges: list[Judge],
    inputs: list[SessionInput],
    config: JudgeConfig,
    *,
    benchmark: tuple[set[str] | None, str | None] = (None, None),
    usage: dict[str, dict[str, Any]] | None = None,
    from_run: bool = True,
) -> JudgeRunSummary:
    """Write judged rows into `RUN_DIR/judgments/` (the table, report.json, report.md, plots) and record the stage.
    `judges`: the judges the rows came from (their names, models and rubric); `from_run`: the sessions are the run
    folder's own (else a file given by hand, which the manifest does not tie the judgments to)."""
    folder = RunLayout(Path(run_dir)).judgments
    out = folder.path
    # What an earlier run left here: a second judge adds to the first one's rows, and a rerun's spend adds to what
    # the earlier runs spent (judged from a sessions file given by hand, nothing of the folder's is kept).
    earlier = earlier_run(folder, judges, inputs) if from_run else Earlier([], {}, {})
    rows = rows + earlier.rows
    write_judgments(folder.parquet, rows)
    usage = add_usage(earlier.usage, stage_usage(usage or {}))
    report = summarise(rows, judges, inputs, config, benchmark=benchmark, usage=usage, kept=earlier.judges)
    files = write_report(out, report, judges[0].rubric, config.plots)
    failed = [r for r in rows if r.status == "failed"]
    record_stage(
        run_dir,
        "judge",
        [folder.parquet, *files.values()],
        reads=[RunLayout(Path(run_dir)).sessions.parquet] if from_run else [],
        counts={"judgments": len(rows), "failed": len(failed)},
    )
    summary = JudgeRunSummary(
        sessions=len(inputs),
        judgments=len(rows),
        ok=len(rows) - len(failed),
        failed=len(failed),
        critical=len(report["critical_replies"]),
        dropped_quotes=sum(r.dropped_quotes for r in rows),
        judges={n: JudgeRanking(model=j["model"], ranking=j["scores"]["ranking"]) for n, j in report["judges"].items()},
        outputs={"judgments": folder.parquet, **files},
        prompt_hashes=dict(judges[0].prompt_hashes),
    )
    return summary
