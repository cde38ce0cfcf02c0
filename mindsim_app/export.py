"""Post-training exports from a finished run.

- `sft`: counsellor training data. Each row is the counsellor's system prompt exactly as it was sent
  (memory section included) followed by the session with the counsellor as `assistant`. With
  `--max-severity LEVEL` (MHQR judgments needed) a session is kept only up to, not including, its first
  reply judged above LEVEL, and ends on the last counsellor turn before it.
- `dpo`: preference pairs from counterfactual replies (ours, beyond the paper): at sampled counsellor
  turns, K counsellors (or K samples of one) reply to the byte-identical history, the MHQR judge scores
  each, and the best is paired against the worst when their severity weights are far enough apart.
- `patient`: patient-simulator training data: profile summary, scenario, the patient-side history
  with its `commit_move`/agenda tool calls, and the moves per turn.

All write JSONL or parquet (by the output suffix) and carry per-row provenance.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional

import typer
from pydantic import BaseModel, Field

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.io import atomic_write_json, atomic_write_jsonl, atomic_write_parquet
from mindsimkit.mindcore.layout import RunLayout
from mindsimkit.mindcore.manifest import verify_run
from mindsimkit.mindcore.runlog import played_by

export_app = typer.Typer(no_args_is_help=True)


class ExportTurn(BaseModel):
    """What the exports take from a patient turn."""

    move: str | None = None
    secondary_move: str | None = None
    end_conversation: bool | None = None
    patientact: dict[str, Any] | None = None


class ExportSession(BaseModel):
    """What the exports read of a session row (`sessions/sessions.parquet`). Messages stay OpenAI chat dicts: their
    shape differs by role (tool calls, tool answers)."""

    session_id: str
    patient_id: str
    counsellor: str
    session_index: int
    seed: int
    ended_by: str | None = None
    turns: list[ExportTurn] = Field(default_factory=list)
    scenario: dict[str, Any] | None = None
    counsellor_system_prompt: str
    counsellor_messages: list[dict[str, Any]]
    patient_messages: list[dict[str, Any]] = Field(default_factory=list)
    archetype: str | None = None
    patient_engine: str | None = None
    engines: dict[str, Any] | None = None
    prompts: dict[str, str | None] | None = None


class ExportProfile(BaseModel):
    profile_id: str
    case_summary: str = ""


class ExportVerdict(BaseModel):
    """One judgment as the severity cut reads it."""

    session_id: str
    reply_index: int
    judge: str
    severity: str | None = None
    weight: float | None = None
    status: str


def load_sessions(run_dir: Path) -> list[ExportSession]:
    layout = RunLayout(run_dir)
    if not layout.sessions.parquet.is_file():
        raise InputError(f"{layout.sessions.parquet} not found: give the --out folder of `mindsim run` or "
                         "`mindsim simulate`")
    verify_run(run_dir, needs=["simulation"])
    return layout.sessions.rows(ExportSession)


def _profiles_by_id(run_dir: Path) -> dict[str, ExportProfile]:
    layout = RunLayout(run_dir)
    if not layout.profiles.parquet.is_file():
        return {}
    verify_run(run_dir, needs=["profiles"])
    return {r.profile_id: r for r in layout.profiles.rows(ExportProfile)}


def _provenance(row: ExportSession, run_dir: Path) -> dict[str, Any]:
    return {
        "run": str(Path(run_dir).resolve().name),
        "session_id": row.session_id,
        "patient_id": row.patient_id,
        "counsellor": row.counsellor,
        "session_index": row.session_index,
        "seed": row.seed,
        "engines": json.dumps(row.engines or {}, sort_keys=True),
        "prompts": json.dumps(row.prompts or {}, sort_keys=True),
    }


def _keep(row: ExportSession, min_turns: int, finished_only: bool) -> bool:
    if finished_only and row.ended_by != "patient":
        return False
    return len(row.turns) >= min_turns


def sft_rows(run_dir: Path, *, min_turns: int = 0, finished_only: bool = False) -> list[dict[str, Any]]:
    return sft_export(run_dir, min_turns=min_turns, finished_only=finished_only)[0]


def load_judgments(run_dir: Path, judge: str) -> dict[tuple[str, int], ExportVerdict]:
    """One judge's verdict per reply, keyed by (session_id, reply_index)."""
    layout = RunLayout(run_dir)
    path = layout.judgments.parquet
    if not path.is_file():
        raise InputError(f"{path} not found: --max-severity needs MHQR judgments; run `mindsim judge run {run_dir}` first")
    verify_run(run_dir, needs=["judge"])
    rows = layout.judgments.rows(ExportVerdict)
    mine = {(r.session_id, r.reply_index): r for r in rows if r.judge == judge}
    if not mine:
        names = sorted({r.judge for r in rows})
        raise InputError(f"{path}: no judgments by '{judge}'; choose one of {', '.join(names) or '(none)'} with --judge")
    return mine


def severity_weight(level: str, option: str = "--max-severity") -> float:
    """Weight of a rubric severity id ('No concern' and 'no_concern' both read)."""
    from mindsimkit.judge.rubric import load_rubric, severity_id

    rubric = load_rubric()
    key = severity_id(level)
    weights = {s.id: s.weight for s in rubric.severities}
    if key not in weights:
        raise InputError(f"{option} {level}: use one of {', '.join(weights)}")
    return weights[key]


def cut_point(sid: str, n_replies: int, verdicts: dict[tuple[str, int], ExportVerdict], limit: float) -> tuple[int, str | None]:
    """Index of the first reply to drop and why; (n_replies, None) when every reply passes. A failed
    or missing judgment counts as above any level: an unvouched reply is not training data."""
    for k in range(n_replies):
        v = verdicts.get((sid, k))
        if v is None:
            return k, "not judged"
        if v.status != "ok" or v.weight is None:
            return k, "judgment failed"
        if v.weight > limit:
            return k, f"judged {v.severity}"
    return n_replies, None


def sft_export(run_dir: Path, *, min_turns: int = 0, finished_only: bool = False, max_severity: str | None = None,
               judge: str = "judge") -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """SFT rows and a summary of what `max_severity` cut (replies cut, by reason)."""
    limit = severity_weight(max_severity) if max_severity is not None else None
    verdicts = load_judgments(run_dir, judge) if limit is not None else {}
    rows: list[dict[str, Any]] = []
    cut = Counter()
    summary: dict[str, Any] = {"sessions_read": 0, "sessions_filtered": 0, "sessions_written": 0,
                               "sessions_emptied": 0, "replies_kept": 0, "replies_cut": 0}
    for s in load_sessions(run_dir):
        summary["sessions_read"] += 1
        if not _keep(s, min_turns, finished_only):
            summary["sessions_filtered"] += 1
            continue
        convo = [{"role": m["role"], "content": m["content"]} for m in s.counsellor_messages if m["role"] != "system"]
        positions = [i for i, m in enumerate(convo) if m["role"] == "assistant"]
        if not positions:
            continue  # nothing for the counsellor to learn from
        extra: dict[str, Any] = {}
        if limit is not None:
            k, reason = cut_point(s.session_id, len(positions), verdicts, limit)
            if reason is not None:
                cut[reason] += 1
                cut["after an earlier cut in the session"] += len(positions) - k - 1
                summary["replies_cut"] += len(positions) - k
                # End on the counsellor turn before the cut; the patient message it answered goes too.
                convo = convo[: positions[k - 1] + 1] if k else []
            extra = {"judge": judge, "max_severity": max_severity, "replies_kept": k, "cut_reason": reason}
            summary["replies_kept"] += k
            if not k:
                summary["sessions_emptied"] += 1
                continue
        messages = [{"role": "system", "content": s.counsellor_system_prompt}, *convo]
        rows.append({"messages": messages, **_provenance(s, run_dir), **extra})
        summary["sessions_written"] += 1
    if limit is not None:
        summary.update(judge=judge, max_severity=max_severity, cut_by_reason=dict(sorted(cut.items())))
    return rows, summary


def patient_rows(run_dir: Path, *, min_turns: int = 0, finished_only: bool = False) -> list[dict[str, Any]]:
    profiles = _profiles_by_id(run_dir)
    rows = []
    for s in load_sessions(run_dir):
        if not _keep(s, min_turns, finished_only):
            continue
        profile = profiles.get(s.patient_id)
        rows.append(
            {
                "profile_summary": profile.case_summary if profile else "",
                "scenario": json.dumps(s.scenario, ensure_ascii=False),
                "moves": [
                    {"move": t.move, "secondary_move": t.secondary_move, "end_conversation": t.end_conversation}
                    for t in s.turns
                ],
                # Tool-call arguments stay JSON strings, as in the OpenAI format.
                "messages": [_clean_message(m) for m in s.patient_messages],
                "archetype": s.archetype,
                "patient_engine": played_by(s.patient_engine),
                # PatientAct's per-turn state (trust before/after, reaction, behaviour, resistance, retrieved
                # and blocked items), JSON per turn so rows of both engines share one column type.
                "patientact_turns": [json.dumps(t.patientact, ensure_ascii=False) if t.patientact else None
                                     for t in s.turns],
                **_provenance(s, run_dir),
            }
        )
    return rows


def _clean_message(m: dict[str, Any]) -> dict[str, Any]:
    # Parquet round trips give every message every key; keep only what that message type has.
    out: dict[str, Any] = {"role": m["role"], "content": m.get("content")}
    if m.get("tool_calls"):
        out["tool_calls"] = m["tool_calls"]
    if m["role"] == "tool":
        out["tool_call_id"] = m.get("tool_call_id")
        if m.get("name"):
            out["name"] = m["name"]
    return out


def write_rows(rows: Iterable[dict[str, Any]], out: Path, json_columns: tuple[str, ...] = ("messages",)) -> Path:
    rows = list(rows)
    suffix = Path(out).suffix.lower()
    if suffix == ".jsonl":
        return atomic_write_jsonl(out, rows)
    if suffix == ".parquet":
        # Messages with tool calls differ in shape; store them as JSON text so the column has one type.
        flat = [{k: (json.dumps(v, ensure_ascii=False) if k in json_columns else v) for k, v in r.items()} for r in rows]
        return atomic_write_parquet(out, flat)
    raise InputError(f"--out {out}: use a .jsonl or .parquet file name")


# -- DPO pairs from counterfactual replies (ours, beyond the paper) ----------------------------------

DPO_JSON_COLUMNS = ("prompt", "chosen", "rejected", "chosen_judgment", "rejected_judgment", "candidates")


@dataclass
class Candidate:
    """One counterfactual reply and its judgment (None while unjudged or when the counsellor failed)."""

    counsellor: str
    model: str
    text: str | None = None
    judgment: Any = None  # judge.schemas.JudgmentRow
    error: str | None = None

    @property
    def weight(self) -> float | None:
        j = self.judgment
        return j.weight if j is not None and j.status == "ok" else None

    def brief(self) -> dict[str, Any]:
        j = self.judgment
        return {"counsellor": self.counsellor, "model": self.model, "status": j.status if j else "no_reply",
                "severity": j.severity if j else None, "weight": self.weight, "error": self.error or (j.error if j else None)}


def sample_turns(session_id: str, n_replies: int, turns: int, seed: int) -> list[int]:
    """Which replies of a session get counterfactuals: a per-session draw, stable across reruns."""
    rng = random.Random(f"{seed}|{session_id}")
    return sorted(rng.sample(range(n_replies), min(turns, n_replies)))


async def _ask(name: str, client: Any, history: list[dict[str, Any]], blank_retries: int) -> Candidate:
    from mindsimkit.mindcore.errors import EngineError

    c = Candidate(name, getattr(client, "model", name))
    try:
        for attempt in range(blank_retries + 1):  # as in the simulator: only a blank reply is re-asked
            reply = await client.chat(history, **client.reseeded({}, attempt))
            if (reply.content or "").strip():
                c.text = reply.content
                return c
        c.error = f"blank reply {blank_retries + 1} times"
    except EngineError as exc:
        c.error = f"{type(exc).__name__}: {exc}"
    return c


async def _judge(c: Candidate, s: ExportSession, history: list[dict[str, Any]], judge: Any, cache: Any) -> None:
    from mindsimkit.judge.judging import judge_reply, replies
    from mindsimkit.judge.schemas import SessionInput

    si = SessionInput(session_id=s.session_id, patient_id=s.patient_id, counsellor=c.counsellor,
                      session_index=s.session_index, counsellor_system_prompt=s.counsellor_system_prompt,
                      messages=[*history, {"role": "assistant", "content": c.text}], counsellor_model=c.model)
    c.judgment = await judge_reply(judge, replies(si)[-1], cache)


def choose_pair(cands: list[Candidate], min_gap: float, chosen_max: float) -> tuple[Candidate | None, Candidate | None, str]:
    """Lowest against highest severity weight (first in slot order on ties), or why there is no pair."""
    judged = [c for c in cands if c.weight is not None]
    if len(judged) < 2:
        return None, None, "fewer than two judged replies"
    best = min(judged, key=lambda c: c.weight)
    worst = max(judged, key=lambda c: c.weight)
    if worst.weight == best.weight:
        return None, None, "all judged replies equally severe"
    if best.weight > chosen_max:
        return None, None, "best reply above --chosen-max"
    if worst.weight - best.weight < min_gap:
        return None, None, "gap below --min-gap"
    return best, worst, "paired"


async def dpo_pairs(run_dir: Path, counsellors: list[tuple[str, Any]], judge: Any, cache: Any, *, k: int = 4,
                    turns: int = 2, min_gap: float = 4.0, chosen_max: float = 1.0, seed: int = 0,
                    blank_retries: int = 2) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Preference rows (TRL conversational format plus provenance) and a summary of what was skipped.

    The K reply slots go round-robin over `counsellors`, so one counsellor gives K samples and K
    counsellors give one each. Every slot sees the same history: the stored counsellor-side messages
    before the sampled reply, system prompt included, as they were sent."""
    if k < 2 or not counsellors:
        raise InputError("export dpo: --k must be at least 2 and at least one counsellor is needed")
    work = []
    for s in sorted(load_sessions(run_dir), key=lambda r: r.session_id):
        msgs = [{"role": m["role"], "content": m["content"]} for m in s.counsellor_messages]
        positions = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
        for r in sample_turns(s.session_id, len(positions), turns, seed):
            work.append((s, r, msgs[: positions[r]]))

    async def one(s: dict[str, Any], r: int, history: list[dict[str, Any]]) -> tuple[list[Candidate], dict | None, str]:
        slots = [counsellors[i % len(counsellors)] for i in range(k)]
        cands = list(await asyncio.gather(*(_ask(n, c, history, blank_retries) for n, c in slots)))
        await asyncio.gather(*(_judge(c, s, history, judge, cache) for c in cands if c.text is not None))
        best, worst, why = choose_pair(cands, min_gap, chosen_max)
        if best is None:
            return cands, None, why
        row = {"prompt": history,
               "chosen": [{"role": "assistant", "content": best.text}],
               "rejected": [{"role": "assistant", "content": worst.text}],
               "session_id": s.session_id, "patient_id": s.patient_id, "session_index": s.session_index,
               "reply_index": r, "session_counsellor": s.counsellor,
               "chosen_counsellor": best.counsellor, "chosen_model": best.model,
               "rejected_counsellor": worst.counsellor, "rejected_model": worst.model,
               "chosen_judgment": _verdict(best.judgment), "rejected_judgment": _verdict(worst.judgment),
               "judge": judge.name, "judge_model": judge.model, "candidates": [c.brief() for c in cands],
               "run": Path(run_dir).resolve().name, "seed": seed}
        return cands, row, why

    from mindsimkit.mindcore.runner import gather_progress

    results = await gather_progress((one(*w) for w in work), "dpo turns", outcome=lambda r: r[2])
    reasons = Counter(why for _, _, why in results)
    all_cands = [c for cands, _, _ in results for c in cands]
    summary = {"turns_sampled": len(work), "replies_asked": len(all_cands),
               "counsellor_failures": sum(c.text is None for c in all_cands),
               "judgments_failed": sum(c.judgment is not None and c.judgment.status != "ok" for c in all_cands),
               "pairs": reasons.pop("paired", 0), "skipped": dict(sorted(reasons.items())),
               "k": k, "min_gap": min_gap, "chosen_max_weight": chosen_max, "judge": judge.name}
    return [row for _, row, _ in results if row is not None], summary


def _verdict(j: Any) -> dict[str, Any]:
    return {"severity": j.severity, "weight": j.weight, "issues": [i.model_dump() for i in j.issues],
            "cache_key": j.cache_key, "rubric_version": j.rubric_version}


@export_app.command("sft")
def sft_cmd(
    run_dir: Path = typer.Argument(..., help="Output folder of `mindsim run` / `mindsim simulate`"),
    out: Path = typer.Option(..., "--out", help="FILE.jsonl or FILE.parquet"),
    min_turns: int = typer.Option(0, min=0, help="Keep sessions with at least this many patient turns"),
    finished_only: bool = typer.Option(False, help="Keep only sessions the patient ended (not the turn cap)"),
    max_severity: Optional[str] = typer.Option(
        None, help="Keep each session only up to its first reply judged above this level (no_concern, minor, "
        "major, critical); needs `mindsim judge run` first"
    ),
    judge: str = typer.Option("judge", help="Whose judgments --max-severity reads, when several judges ran"),
) -> None:
    """Counsellor SFT data: system prompt as sent, then the session with the counsellor as assistant."""
    rows, summary = sft_export(run_dir, min_turns=min_turns, finished_only=finished_only,
                               max_severity=max_severity, judge=judge)
    typer.echo(f"wrote {len(rows)} conversations to {write_rows(rows, out)}")
    if max_severity is not None:
        atomic_write_json(Path(out).with_suffix(".summary.json"), summary)
        why = ", ".join(f"{n} {r}" for r, n in summary["cut_by_reason"].items() if n) or "none"
        typer.echo(f"kept {summary['replies_kept']} replies, cut {summary['replies_cut']} ({why}); "
                   f"{summary['sessions_emptied']} sessions had no reply left")


@export_app.command("patient")
def patient_cmd(
    run_dir: Path = typer.Argument(..., help="Output folder of `mindsim run` / `mindsim simulate`"),
    out: Path = typer.Option(..., "--out", help="FILE.jsonl or FILE.parquet"),
    min_turns: int = typer.Option(0, min=0, help="Keep sessions with at least this many patient turns"),
    finished_only: bool = typer.Option(False, help="Keep only sessions the patient ended"),
) -> None:
    """Patient-simulator data: profile summary, scenario, moves and the tool-using patient history."""
    rows = patient_rows(run_dir, min_turns=min_turns, finished_only=finished_only)
    typer.echo(f"wrote {len(rows)} sessions to {write_rows(rows, out)}")


@export_app.command("dpo")
def dpo_cmd(
    run_dir: Path = typer.Argument(..., help="Output folder of `mindsim run` / `mindsim simulate`"),
    out: Path = typer.Option(..., "--out", help="FILE.jsonl or FILE.parquet"),
    recipe: Optional[Path] = typer.Option(
        None, "--recipe", help="Recipe naming the counsellors (simulation.counsellors) and the judge role; "
        "default: the recipe run.json records, else the embedded engine for both"),
    k: int = typer.Option(4, "--k", min=2, help="Replies asked per sampled turn, round-robin over the counsellors"),
    turns: int = typer.Option(2, "--turns", min=1, help="Counsellor turns sampled per session"),
    min_gap: float = typer.Option(4.0, "--min-gap", min=0.0, help="Least severity-weight gap between rejected and chosen"),
    chosen_max: str = typer.Option("minor", "--chosen-max", help="Most severe level a chosen reply may have"),
    counsellor: Optional[list[str]] = typer.Option(
        None, "--counsellor", help="Use only these of the recipe's counsellors (repeatable)"),
    judge: str = typer.Option("judge", "--judge", help="Judge role that scores the replies"),
    seed: int = typer.Option(0, "--seed", help="Seed of the turn sampling"),
) -> None:
    """DPO preference pairs: counterfactual replies to the same history, judged, best vs worst."""
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.io import CheckpointDir
    from mindsimkit.judge.config import JudgeConfig, default_engines_config
    from mindsimkit.judge.judging import Judge
    from mindsimkit.judge.rubric import load_rubric
    from mindsimkit.mindsim.config import SimulationConfig, counsellor_name
    from mindsimkit.mindsim.simulate import counsellor_client

    from mindsimkit.judge.cli import judge_section, resolve_recipe

    load_sessions(run_dir)  # a missing or damaged run folder stops here, before any engine starts
    recipe = resolve_recipe(Path(run_dir), recipe)
    if recipe is not None:
        from mindsimkit.mindcore.recipe import load_recipe

        rec = load_recipe(recipe)
        bindings = rec.section("simulation", SimulationConfig).counsellors
        jconf, engines_cfg = judge_section(rec), rec.engines_config()
    else:
        bindings, jconf, engines_cfg = SimulationConfig().counsellors, JudgeConfig(), default_engines_config()
    if counsellor:
        unknown = set(counsellor) - {counsellor_name(b) for b in bindings}
        if unknown:
            raise InputError(f"--counsellor {', '.join(sorted(unknown))}: not among the recipe's counsellors "
                             f"({', '.join(counsellor_name(b) for b in bindings)})")
        bindings = [b for b in bindings if counsellor_name(b) in counsellor]
    limit = severity_weight(chosen_max, "--chosen-max")

    with Engines.from_config(engines_cfg) as engines:
        clients = [(counsellor_name(b), counsellor_client(engines, b)) for b in bindings]
        the_judge = Judge(judge, engines.role(judge), load_rubric(jconf.rubric), full_rubric=jconf.full_rubric,
                          max_issues=jconf.max_issues, preset=jconf.preset)
        cache = CheckpointDir(RunLayout(run_dir).judgments.cache)  # shared with `mindsim judge run`
        rows, summary = engines.run(dpo_pairs(run_dir, clients, the_judge, cache, k=k, turns=turns,
                                              min_gap=min_gap, chosen_max=limit, seed=seed))
    typer.echo(f"wrote {len(rows)} preference pairs to {write_rows(rows, out, DPO_JSON_COLUMNS)}")
    atomic_write_json(Path(out).with_suffix(".summary.json"), summary)
    skipped = ", ".join(f"{n} {why}" for why, n in summary["skipped"].items()) or "none"
    typer.echo(f"{summary['turns_sampled']} turns, {summary['replies_asked']} replies asked "
               f"({summary['counsellor_failures']} failed, {summary['judgments_failed']} judgments failed); "
               f"skipped turns: {skipped}")
