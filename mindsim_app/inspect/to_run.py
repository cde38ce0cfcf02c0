"""An inspect log of `mindsimkit/mindeval2` or `mindsimkit/patientact` as a run folder, so `mindsim report`,
`mindsim validate compare`, `mindsim judge …` and the exports read it like the output of `mindsim simulate` and
`mindsim judge run`.

Nothing is judged or simulated again: the sessions are the records the solver kept in each sample's store, the
judgments the rows the scorers kept in each score's metadata. They are written by the code the commands use
(`mindsim.simulate.ShardWriter` / `finish_simulation`, `judge.run.write_judging`,
`judge.patientact_report.write_patientact`), with `run.json` naming the recipe, the eval and the model. A sample
that failed is a failed arc in `sessions/summary.json`. The folder is built beside `out` and renamed into place
when whole, so an interrupted conversion leaves nothing half-written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mindsimkit.judge.config import JudgeConfig
from mindsimkit.judge.inputs import benchmark_patients, session_input
from mindsimkit.judge.judging import Judge
from mindsimkit.judge.patientact import Judgment, conversation_items, scored_systems, system_label
from mindsimkit.judge.patientact_report import write_patientact
from mindsimkit.judge import rubrics as rubric_registry
from mindsimkit.judge.rubric import load_rubric
from mindsimkit.judge.run import write_judging
from mindsimkit.judge.schemas import JudgmentRow
from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.layout import RunLayout
from mindsimkit.mindcore.manifest import record_stage
from mindsimkit.mindcore.provenance import base_provenance
from mindsimkit.mindcore.runlog import RunHeader, RunRecipe, played_by
from mindsimkit.mindsim.config import CounsellorBinding, SimulationConfig
from mindsimkit.mindsim.records import SessionRecord
from mindsimkit.mindsim.simulate import SessionTally, ShardWriter, check_layout, finish_simulation
from mindsimkit.mindsim.summary import FailedArc, ShardSummary
from mindsimkit.mindsim_app.inspect.backend import ENGINE
from mindsimkit.mindsim_app.inspect.engines import USAGE_PREFIX
from mindsimkit.mindsim_app.inspect.scorers import CONFIG, JUDGES, ROWS, SOURCE
from mindsimkit.mindsim_app.inspect.solver import RUN, SESSIONS, SIMULATION

TASKS = ("mindsimkit/mindeval2", "mindsimkit/patientact")


class RecordedClient:
    """A judge's client as the log recorded it: what the report says of the judge (model, engine, settings); it
    answers nothing, the judgments are already made."""

    def __init__(self, described: dict[str, Any]):
        self.described = dict(described)
        self.model = str(described.get("model"))
        self.engine_name = str(described.get("engine"))

    def describe(self) -> dict[str, Any]:
        return dict(self.described)


def read_log(path: Path) -> Any:
    """The log with its samples; InputError naming the file when it is not a log of one of our tasks."""
    from inspect_ai.log import read_eval_log

    if not path.is_file():
        raise InputError(f"{path}: no such inspect log; give the .eval (or .json) file `inspect eval` wrote")
    try:
        log = read_eval_log(str(path))
    except Exception as exc:  # inspect's own reader says what is wrong with the file
        raise InputError(f"{path}: not an inspect log this inspect_ai reads ({type(exc).__name__}: {exc})") from exc
    # A task run from its Python function (not by its registered name) is logged without the package prefix.
    if log.eval.task.rsplit("/", 1)[-1] not in {t.rsplit("/", 1)[-1] for t in TASKS}:
        raise InputError(f"{path}: a log of task {log.eval.task!r}; only {' and '.join(TASKS)} logs become run folders")
    if not log.samples:
        raise InputError(f"{path}: the log holds no samples (status {log.status}); run the eval to the end first")
    return log


def log_to_run(log_path: str | Path, out: str | Path) -> dict[str, Path]:
    """Write the run folder `out` (new, or an empty folder) from the log; returns what was written."""
    log_path, out = Path(log_path), Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"--out {out}: exists and is not an empty folder; give a new folder")
    log = read_log(log_path)
    finished = [s for s in log.samples if (s.store or {}).get(SESSIONS)]
    if not finished:
        raise InputError(
            f"{log_path}: no sample finished its arc (first error: {_first_error(log)}); nothing to convert"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        outputs = _write(log, log_path, finished, work)
        if out.exists():
            out.rmdir()
        os.replace(work, out)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return {k: out / v.relative_to(work) for k, v in outputs.items()}


def _first_error(log: Any) -> str:
    return next((str(s.error.message)[:200] for s in log.samples if s.error), "none recorded")


def _write(log: Any, log_path: Path, finished: list[Any], out: Path) -> dict[str, Path]:
    store = finished[0].store
    run = store[RUN]
    records = [SessionRecord.model_validate(d) for s in finished for d in s.store[SESSIONS]]
    trials = 1 + max((r.trial or 0) for r in records)
    config = SimulationConfig.model_validate(
        {
            **store[SIMULATION],
            "trials": trials,
            "counsellors": [
                CounsellorBinding(name=run["counsellor"], engine=ENGINE, model=run["model"]).model_dump(
                    exclude_none=True
                )
            ],
        }
    )
    outputs = {"sessions": RunLayout(out).sessions.parquet, **_write_sessions(log, records, config, run, out)}
    inputs = [session_input(r.model_dump(mode="json"), f"{log_path} sample {r.patient_id}") for r in records]
    scores = [s.scores or {} for s in finished]
    if any("mhqr" in sc for sc in scores):
        outputs.update(_write_mhqr([sc["mhqr"] for sc in scores if "mhqr" in sc], inputs, out))
    if any("patientact_rubric" in sc for sc in scores):
        outputs.update(
            _write_patientact(
                [sc["patientact_rubric"] for sc in scores if "patientact_rubric" in sc], records, inputs, out
            )
        )
    _write_header(log, log_path, records, config, run, out)
    return {**outputs, "run.json": RunLayout(out).run_json}


def _write_sessions(
    log: Any, records: list[SessionRecord], config: SimulationConfig, run: dict[str, Any], out: Path
) -> dict[str, Path]:
    check_layout(out)
    writer, tally = ShardWriter(out, 0, 1), SessionTally()
    for r in records:
        writer.add(r)
        tally.add(r)
    writer.close()
    failed = [
        FailedArc(
            patient_id=str(s.id),
            counsellor=run["counsellor"],
            patient_engine=run["patient_engine"],
            error=str(s.error.message) if s.error else "no sessions recorded",
            trial=(s.epoch - 1) if config.trials > 1 else None,
        )
        for s in log.samples
        if not (s.store or {}).get(SESSIONS)
    ]
    patients = list(dict.fromkeys(str(s.id) for s in log.samples))
    part = ShardSummary(
        shard=0,
        patients=len(patients),
        arcs=len(log.samples),
        failed_arcs=failed,
        sessions_written=writer.rows,
        duplicate_checkpoints_discarded=0,
        **tally.counts(),
    )
    finish_simulation(
        out,
        config,
        run["seed"],
        patients,
        [part],
        1,
        _seconds(log.stats),
        {"kind": "inspect"},
        live={0},
        engines=records[0].engines,
        usage=_usage(log),
    )
    layout = RunLayout(out)
    return {"transcripts": layout.transcripts, "simulation summary": layout.sessions.summary}


def _seconds(stats: Any) -> float:
    from datetime import datetime

    if not (stats.started_at and stats.completed_at):
        return 0.0
    return (datetime.fromisoformat(stats.completed_at) - datetime.fromisoformat(stats.started_at)).total_seconds()


def _usage(log: Any) -> dict[str, Any]:
    """The eval's token usage per model, as inspect counted it."""
    return {model: u.model_dump(exclude_none=True) for model, u in (log.stats.model_usage or {}).items()}


def role_usage(log: Any) -> dict[str, dict[str, Any]]:
    """The eval's tokens per role, in run.json's shape (`usage`: role → model, engine and token counts): the eval's
    model is the counsellor, a model bound with `--model-role` is its role, and the recipe's roles are logged as
    `mindsim/ROLE` (`engines.InspectLedger`)."""
    bound = {str(m.model): role for role, m in (log.eval.model_roles or {}).items()}
    out: dict[str, dict[str, Any]] = {}
    for model, u in (log.stats.model_usage or {}).items():
        if model == log.eval.model:
            role = "counsellor"
        elif model in bound:
            role = bound[model]
        else:
            role = model.removeprefix(USAGE_PREFIX)
        cached = u.input_tokens_cache_read or 0
        row = out.setdefault(
            role,
            {
                "model": model,
                "engine": ENGINE if role in {"counsellor", *bound.values()} else "recipe",
                "prompt_tokens": 0,
                "completion_tokens": 0,
                "cached_tokens": 0,
                "reasoning_tokens": 0,
            },
        )
        row["prompt_tokens"] += u.input_tokens + cached
        row["completion_tokens"] += u.output_tokens
        row["cached_tokens"] += cached
        row["reasoning_tokens"] += u.reasoning_tokens or 0
    return out


def _write_mhqr(scores: list[Any], inputs: list[Any], out: Path) -> dict[str, Path]:
    meta = scores[0].metadata or {}
    config = JudgeConfig.model_validate(meta[CONFIG])
    rubric = load_rubric(config.rubric)
    judges = [
        Judge(
            name,
            RecordedClient({**d.get("role", {}), "model": d["model"], "engine": d["engine"]}),
            rubric,
            full_rubric=config.full_rubric,
            max_issues=config.max_issues,
            preset=config.preset,
        )
        for name, d in meta[JUDGES].items()
    ]
    rows = [JudgmentRow.model_validate(r) for s in scores for r in (s.metadata or {}).get(ROWS, [])]
    rank = {j.name: i for i, j in enumerate(judges)}
    order = {s.session_id: i for i, s in enumerate(inputs)}
    rows.sort(key=lambda r: (rank[r.judge], order[r.session_id], r.reply_index))
    summary = write_judging(out, rows, judges, inputs, config, benchmark=benchmark_patients(inputs, None))
    outputs = {"judgments": summary.outputs["judgments"]}
    return outputs | {f"judge {k}": v for k, v in summary.outputs.items() if k != "judgments"}


def _write_patientact(scores: list[Any], records: list[SessionRecord], inputs: list[Any], out: Path) -> dict[str, Path]:
    meta = scores[0].metadata or {}
    rubric = rubric_registry.load(meta.get("rubric") or "patientact_session")
    labels = {
        r.session_id: system_label(
            played_by(r.patient_engine), r.patientact.model_dump(mode="json") if r.patientact else None
        )
        for r in records
    }
    items = scored_systems(conversation_items(SOURCE, inputs, labels))
    rows = [Judgment.model_validate(r) for s in scores for r in (s.metadata or {}).get(ROWS, [])]
    summary = write_patientact(out, rows, items, rubric=rubric)
    return {f"patientact {k}": v for k, v in summary.outputs.items()}


def _write_header(
    log: Any, log_path: Path, records: list[SessionRecord], config: SimulationConfig, run: dict[str, Any], out: Path
) -> None:
    recipe = {
        "name": run["recipe"],
        "path": run.get("recipe_path") or "",
        "seed": run["seed"],
        "simulation": config.model_dump(mode="json"),
    }
    content = json.dumps(
        {"task": log.eval.task, "args": log.eval.task_args, "recipe": recipe}, sort_keys=True, default=str
    )
    provenance = {
        **base_provenance(),
        "inspect": {
            "log": str(log_path.resolve()),
            "eval_id": log.eval.eval_id,
            "run_id": log.eval.run_id,
            "task": log.eval.task,
            "task_args": log.eval.task_args,
            "model": log.eval.model,
            "inspect_ai_version": log.eval.packages.get("inspect_ai"),
            "status": log.status,
        },
    }
    header = RunHeader(
        run_id=log.eval.eval_id[:16],
        recipe_hash=hashlib.sha256(content.encode()).hexdigest()[:16],
        status="finished",
        recipe=RunRecipe(**recipe),
        runner={"kind": "inspect"},
        provenance=provenance,
        engines=records[0].engines,
        presets=config.engine_presets(),
        prompt_hashes=dict(records[0].prompts),
        usage=role_usage(log),
    )
    layout = RunLayout(out)
    layout.write_header(header)
    record_stage(out, "run", [layout.run_json], reads=["simulation"])
