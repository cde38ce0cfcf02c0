"""The scorers: the MHQR judge (MindEval2 §3, App. G) and PatientAct's conversation rubric (PatientAct §4.1, App.
D.1), each over every session of a sample's arc, with the judges `mindsim judge run` uses.

A judge is the recipe's role, or — when the eval binds an inspect model role of the same name (`--model-role
judge=PROVIDER/MODEL`) — that model behind the engine layer (`backend.InspectBackend`), asked the same prompts
with the same schema and re-asks. The per-reply judgments, quotes verified against the reply, go into the score's
metadata as `judge.schemas.JudgmentRow`s; the sample's value is its arc's MHQR (the mean of its sessions').

The metrics are `judge.scores` over the rows of every sample, so they are the numbers `mindsim judge run` reports
for the same rows: MHQR with the 5th/95th percentiles of session scores and the 95% interval that resamples
patients; the share of replies at each severity; the MHQR allocated to each issue category. With several judges
(`judge.judges`) every judge's rows are kept and the metrics are the first judge's. Epochs are pooled by the
`pooled` reducer (every epoch's rows, as repeated trials are in a run folder).
"""

from __future__ import annotations

import math
from statistics import mean
from typing import Any

from inspect_ai.model import model_roles
from pydantic import BaseModel
from inspect_ai.scorer import (
    Metric,
    SampleScore,
    Score,
    Scorer,
    Target,
    Value,
    metric,
    score_reducer,
    scorer,
)
from inspect_ai.scorer import ScoreReducer
from inspect_ai.solver import TaskState

from mindsimkit.judge.config import JudgeConfig
from mindsimkit.judge.inputs import session_input
from mindsimkit.judge.judging import Judge, judge_all
from mindsimkit.judge.patientact import (
    ConversationJudge,
    conversation_items,
    judge_items,
    system_label,
    system_means,
    Judgment,
)
from mindsimkit.judge.rubric import load_rubric
from mindsimkit.judge.schemas import JudgmentRow
from mindsimkit.mindcore.budget import worst_case_tokens
from mindsimkit.judge.scores import columns_from_rows, counsellor_scores, reply_shares, session_table
from mindsimkit.mindcore.runlog import played_by
from mindsimkit.mindsim_app.inspect.backend import inspect_role
from mindsimkit.mindsim_app.inspect.harness import Harness
from mindsimkit.mindsim_app.inspect.solver import SESSIONS, stages

# Keys of a score's metadata (read back by `to_run.py` and by the metrics).
ROWS, JUDGES, CONFIG, PRIMARY = "judgments", "judges", "judge_config", "primary_judge"
SOURCE = "inspect"


class MemoryCache:
    """The judges' per-judgment cache for one sample (`mindcore.io.CheckpointDir`'s `has`/`read`/`write`): the log
    is the record, and identical contexts within the sample are asked once."""

    def __init__(self) -> None:
        self._kept: dict[str, Any] = {}

    def has(self, key: str) -> bool:
        return key in self._kept

    def read(self, key: str) -> Any:
        return self._kept[key]

    def write(self, key: str, value: Any) -> None:
        self._kept[key] = value


def judge_client(engines: Any, role: str, answer: type[BaseModel]) -> Any:
    """The client of judge role `role`: the inspect model bound to that role name, else the recipe's role. A bound
    model without `--max-tokens` of its own is held to the longest answer `answer` admits (counted in bytes, which
    no tokenizer exceeds), as preflight holds the recipe's judge: unbounded, a judge that loops never returns."""
    bound = model_roles().get(role)
    if isinstance(bound, list):
        bound = bound[0]
    if bound is None:
        return engines.role(role)
    return inspect_role(role, bound, engines.ledger, max_tokens=answer_bound(answer))


def answer_bound(answer: type[BaseModel]) -> int:
    """The token bound of a judge's answer: its schema's longest instance."""
    worst = worst_case_tokens(answer.model_json_schema(), name=answer.__name__)
    if worst.tokens is None:  # every judge schema bounds its strings and lists; a new one must too
        raise ValueError(f"judge answer {answer.__name__} has unbounded parts: {', '.join(worst.unbounded)}")
    return worst.tokens


def judge_record(j: Judge) -> dict[str, Any]:
    """What the run folder's report says of a judge (`judge.run.summarise` reads these off a live `Judge`)."""
    return {
        "model": j.model,
        "engine": j.client.engine_name,
        "role": j.client.describe(),
        "rubric_version": j.rubric_version,
    }


def sessions_of(state: TaskState) -> list[dict[str, Any]]:
    return list(state.store.get(SESSIONS, []))


def arc_mhqr(rows: list[JudgmentRow], rubric: Any) -> float:
    """The mean of the arc's session MHQRs (failed judgments left out; NaN when none is ok: unscored)."""
    cols = columns_from_rows([r for r in rows if r.status == "ok"])
    return float(session_table(cols, rubric).mhqr.mean()) if len(cols) else float("nan")


def primary_rows(scores: list[SampleScore]) -> list[JudgmentRow]:
    """The first judge's rows of every scored sample."""
    out: list[JudgmentRow] = []
    for s in scores:
        meta = s.score.metadata or {}
        out += [JudgmentRow.model_validate(r) for r in meta.get(ROWS, []) if r.get("judge") == meta.get(PRIMARY)]
    return out


def _judged(scores: list[SampleScore]) -> tuple[Any, Any, JudgeConfig] | None:
    """The first judge's ok rows of every sample as `judge.scores` columns, with the rubric and the judge section
    they were judged on; None when no reply was judged."""
    cols = columns_from_rows(primary_rows(scores), by_engine=False)
    if not len(cols):
        return None
    config = _config_of(scores)
    return cols, load_rubric(config.rubric), config


@metric
def mhqr_scores() -> Metric:
    """MindEval2 Table 6 for the counsellor under test: MHQR over every patient × session score with its 95%
    patient-bootstrap interval (the judge section's `bootstrap_draws` and `seed`, as `mindsim judge run` draws
    them) and the 5th/95th percentiles of the session scores; the share of replies at each severity; the MHQR
    allocated to each issue category (a reply's weight split over its issues; they add up to MHQR)."""

    def compute(scores: list[SampleScore]) -> Value:
        if (judged := _judged(scores)) is None:
            return {}
        cols, rubric, config = judged
        sessions = session_table(cols, rubric)
        s = next(iter(counsellor_scores(sessions, draws=config.bootstrap_draws, seed=config.seed).values()))
        shares = next(iter(reply_shares(cols, rubric).values()))["severity_share"]
        return {
            "mhqr": s["mhqr"],
            "ci95_low": s["ci95"][0],
            "ci95_high": s["ci95"][1],
            "p5": s["p5"],
            "p95": s["p95"],
            **shares,
            **{f"category_{c}": v for c, v in s["by_category"].items()},
        }

    return compute


def _config_of(scores: list[SampleScore]) -> JudgeConfig:
    """The judge section the scorer ran with (kept in every score's metadata)."""
    return JudgeConfig.model_validate(next((s.score.metadata or {}).get(CONFIG, {}) for s in scores))


@scorer(metrics=[mhqr_scores()])
def mhqr(harness: Harness) -> Scorer:
    """Judge every counsellor reply of the arc on the MHQR rubric; the value is the arc's MHQR."""
    config = harness.judge

    async def score(state: TaskState, target: Target) -> Score:
        engines, _ = await harness.ready(stages(harness, {"judge"}))
        records = sessions_of(state)
        inputs = [session_input(r, f"sample {state.sample_id}") for r in records]
        rubric = load_rubric(config.rubric)
        judges = [
            Judge(
                name, None, rubric, full_rubric=config.full_rubric, max_issues=config.max_issues, preset=config.preset
            )
            for name in config.judges
        ]
        for j in judges:  # the client's bound follows from the answer the judge's preset and cap make
            j.client = judge_client(engines, j.name, j.output)
        rows = await judge_all(judges, inputs, MemoryCache(), config.max_replies, config.concurrency, progress=False)
        primary = [r for r in rows if r.judge == judges[0].name]
        value = arc_mhqr(primary, rubric)
        failed = sum(r.status == "failed" for r in primary)
        return Score(
            value=value,
            explanation=(f"MHQR {value:.2f}" if not math.isnan(value) else "no reply judged")
            + f" over {len(inputs)} sessions; {len(primary) - failed} replies judged, {failed} failed"
            f" ({judges[0].name}, {judges[0].model})",
            metadata={
                ROWS: [r.model_dump(mode="json") for r in rows],
                PRIMARY: judges[0].name,
                JUDGES: {j.name: judge_record(j) for j in judges},
                CONFIG: config.model_dump(mode="json"),
            },
        )

    return score


@metric
def patientact_means() -> Metric:
    """Each dimension's mean over every judged session (PatientAct Tables 2 and 4: a mean per system)."""

    def compute(scores: list[SampleScore]) -> Value:
        rows = [Judgment.model_validate(r) for s in scores for r in (s.score.metadata or {}).get(ROWS, [])]
        means = system_means(rows)
        return next(iter(means.values()), {})

    return compute


@scorer(metrics=[patientact_means()])
def patientact_rubric(harness: Harness) -> Scorer:
    """Score every session of the arc on PatientAct's conversation rubric (the patient's five dimensions, 1-5);
    the value is each dimension's mean over the arc's sessions."""

    async def score(state: TaskState, target: Target) -> Score:
        engines, _ = await harness.ready(stages(harness, {"judge_patientact"}))
        records = sessions_of(state)
        inputs = [session_input(r, f"sample {state.sample_id}") for r in records]
        labels = {
            r["session_id"]: system_label(played_by(r.get("patient_engine")), r.get("patientact")) for r in records
        }
        group = (state.metadata or {}).get("main_problem")
        items = conversation_items(SOURCE, inputs, labels, {str(state.sample_id): group} if group else {})
        judge = ConversationJudge("judge", None)
        judge.client = judge_client(engines, "judge", judge.output)
        rows = await judge_items(judge, items, MemoryCache(), progress=False)
        ok = [r for r in rows if r.ok]
        value = {d: mean(r.scores[d] for r in ok) for d in judge.rubric.ids} if ok else float("nan")
        return Score(
            value=value,
            explanation=f"{len(ok)} of {len(rows)} sessions scored on {judge.rubric.id} ({judge.client.model})",
            metadata={
                ROWS: [r.model_dump(mode="json") for r in rows],
                JUDGES: {"judge": judge.describe()},
                "rubric": judge.rubric.id,
            },
        )

    return score


@score_reducer(name="pooled")
def pooled() -> ScoreReducer:
    """Epochs of one sample as repeated trials: the mean value, and every epoch's judged rows kept in the
    metadata so the metrics see all of them (inspect's own reducers keep only the first epoch's metadata)."""

    def reduce(scores: list[Score]) -> Score:
        dicts = [s.value for s in scores if isinstance(s.value, dict)]
        floats = [float(s.value) for s in scores if isinstance(s.value, (int, float)) and not math.isnan(s.value)]
        value: Value = (
            {k: mean(float(v[k]) for v in dicts) for k in dicts[0]}
            if dicts
            else mean(floats)
            if floats
            else float("nan")
        )
        meta = dict(scores[0].metadata or {})
        meta[ROWS] = [r for s in scores for r in (s.metadata or {}).get(ROWS, [])]
        return Score(value=value, explanation=f"{len(scores)} epochs pooled", metadata=meta)

    return reduce
