"""Post-training exports from a finished run, in the dataset types TRL documents (`export_write` says how they
are typed and written; docs/training.md how to train on them).

- `sft`: counsellor training data, TRL's conversational language-modelling type (`messages`), or with
  `--per-turn` its prompt-completion type (one row per counsellor reply). A row is the counsellor's system prompt
  exactly as it was sent (memory section included; `--no-system` leaves it out) followed by the session with the
  counsellor as `assistant`, ending on the last counsellor reply kept: the patient message after it is never
  trained on. With `--max-severity LEVEL` (MHQR judgments needed) a session is kept only up to, not including,
  its first reply judged above LEVEL.
- `dpo`: preference pairs from counterfactual replies (`export_dpo`).
- `patient`: patient-simulator training data: the patient-side history with its `commit_move` and agenda tool
  calls (arguments as objects, the Hugging Face convention) and results, and the `tools` the patient was offered.

Every export writes its rows (JSONL or parquet, by the output suffix), `FILE.summary.json` (counts, what was cut
or skipped, row lengths in tokens) and `FILE.provenance.jsonl` (per-session or per-pair detail whose shape varies).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Optional

import typer
from pydantic import BaseModel

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.layout import RunLayout
from mindsimkit.mindcore.manifest import verify_run
from mindsimkit.mindcore.runlog import played_by
from mindsimkit.mindsim_app.export_sessions import ExportSession, ExportTurn, load_sessions  # noqa: F401
from mindsimkit.mindsim_app.export_write import check_out, write_export

export_app = typer.Typer(no_args_is_help=True)


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


def _profiles_by_id(run_dir: Path) -> dict[str, ExportProfile]:
    layout = RunLayout(run_dir)
    if not layout.profiles.parquet.is_file():
        return {}
    verify_run(run_dir, needs=["profiles"])
    return {r.profile_id: r for r in layout.profiles.rows(ExportProfile)}


def _provenance(row: ExportSession, run_dir: Path) -> dict[str, Any]:
    """The provenance every row carries: scalars of one type each, never null."""
    return {"run": Path(run_dir).resolve().name, "session_id": row.session_id, "patient_id": row.patient_id,
            "counsellor": row.counsellor, "session_index": row.session_index, "seed": row.seed}


def _session_detail(row: ExportSession) -> dict[str, Any]:
    """A session's line in the provenance side file: engines and models per role, prompt template hashes."""
    return {"session_id": row.session_id, "engines": row.engines or {}, "prompts": row.prompts or {}}


def _keep(row: ExportSession, min_turns: int, finished_only: bool) -> bool:
    if finished_only and row.ended_by != "patient":
        return False
    return len(row.turns) >= min_turns


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
               judge: str = "judge", system: bool = True,
               per_turn: bool = False) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """SFT rows, a summary (sessions read, filtered and written; with `max_severity`, replies cut by reason) and
    the provenance side file's lines (one per session written)."""
    limit = severity_weight(max_severity) if max_severity is not None else None
    verdicts = load_judgments(run_dir, judge) if limit is not None else {}
    rows: list[dict[str, Any]] = []
    details: list[dict[str, Any]] = []
    cut: Counter[str] = Counter()
    summary: dict[str, Any] = {"rows": "turn" if per_turn else "session", "system_prompt": system,
                               "sessions_read": 0, "sessions_filtered": 0, "sessions_without_reply": 0,
                               "sessions_written": 0, "sessions_emptied": 0, "replies_kept": 0, "replies_cut": 0}
    for s in load_sessions(run_dir):
        summary["sessions_read"] += 1
        if not _keep(s, min_turns, finished_only):
            summary["sessions_filtered"] += 1
            continue
        convo = [{"role": m["role"], "content": m["content"]} for m in s.counsellor_messages if m["role"] != "system"]
        positions = [i for i, m in enumerate(convo) if m["role"] == "assistant"]
        if not positions:
            summary["sessions_without_reply"] += 1  # nothing for the counsellor to learn from
            continue
        kept, extra = len(positions), {}
        if limit is not None:
            kept, reason = cut_point(s.session_id, len(positions), verdicts, limit)
            if reason is not None:
                cut[reason] += 1
                cut["after an earlier cut in the session"] += len(positions) - kept - 1
                summary["replies_cut"] += len(positions) - kept
            extra = {"judge": judge, "max_severity": max_severity, "cut_reason": reason or ""}
            if not kept:
                summary["sessions_emptied"] += 1
                continue
        summary["replies_kept"] += kept
        head = [{"role": "system", "content": s.counsellor_system_prompt}] if system else []
        if per_turn:
            rows += [{"prompt": head + convo[: positions[j]], "completion": [convo[positions[j]]],
                      **_provenance(s, run_dir), "reply_index": j, **extra} for j in range(kept)]
        else:
            # Ends on the last reply kept: the patient message after it is not the counsellor's to learn.
            rows.append({"messages": head + convo[: positions[kept - 1] + 1], **_provenance(s, run_dir),
                         "replies": kept, **extra})
        details.append(_session_detail(s))
        summary["sessions_written"] += 1
    if limit is not None:
        summary.update(judge=judge, max_severity=max_severity, cut_by_reason=dict(sorted(cut.items())))
    summary["rows_written"] = len(rows)
    return rows, summary, details


def sft_rows(run_dir: Path, **options: Any) -> list[dict[str, Any]]:
    return sft_export(run_dir, **options)[0]


def why_no_sft_rows(summary: dict[str, Any]) -> str:
    parts = [f"{summary['sessions_read']} sessions read"]
    if summary["sessions_filtered"]:
        parts.append(f"{summary['sessions_filtered']} left out by --min-turns / --finished-only")
    if summary["sessions_without_reply"]:
        parts.append(f"{summary['sessions_without_reply']} without a counsellor reply")
    if summary["sessions_emptied"]:
        # A session's first cut and why (a reply after it is cut for that alone, so not a reason of its own).
        why = ", ".join(f"{n} {r}" for r, n in summary.get("cut_by_reason", {}).items()
                        if n and r != "after an earlier cut in the session")
        parts.append(f"{summary['sessions_emptied']} with no reply left under --max-severity "
                     f"{summary.get('max_severity')} (sessions cut: {why})")
    return f"export sft: no rows to write: {'; '.join(parts)}"


def patient_export(run_dir: Path, *, min_turns: int = 0,
                   finished_only: bool = False) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """Patient rows, a summary and the provenance side file's lines (scenario, moves and PatientAct state per
    session: their fields are null for some engines and turns, so they stay out of the rows)."""
    profiles = _profiles_by_id(run_dir)
    rows, details = [], []
    summary: dict[str, Any] = {"sessions_read": 0, "sessions_filtered": 0, "sessions_written": 0,
                               "sessions_without_tools": 0}
    for s in load_sessions(run_dir):
        summary["sessions_read"] += 1
        if not _keep(s, min_turns, finished_only):
            summary["sessions_filtered"] += 1
            continue
        messages = [_patient_message(m, s.session_id) for m in s.patient_messages]
        tools = json.loads(s.patient_tools) if s.patient_tools else []
        if not tools and any(m["tool_calls"] for m in messages):
            summary["sessions_without_tools"] += 1  # simulated before the toolkit recorded them
        profile = profiles.get(s.patient_id)
        rows.append({"messages": messages, "tools": tools,
                     "profile_summary": profile.case_summary if profile else "",
                     "archetype": s.archetype or "", "patient_engine": played_by(s.patient_engine),
                     **_provenance(s, run_dir)})
        details.append({**_session_detail(s), "scenario": s.scenario,
                        "moves": [{"move": t.move, "secondary_move": t.secondary_move,
                                   "end_conversation": t.end_conversation} for t in s.turns],
                        # PatientAct's per-turn state (trust before/after, reaction, behaviour, resistance, retrieved
                        # and blocked items); null for other engines.
                        "patientact_turns": [t.patientact for t in s.turns]})
        summary["sessions_written"] += 1
    return rows, summary, details


def patient_rows(run_dir: Path, **options: Any) -> list[dict[str, Any]]:
    return patient_export(run_dir, **options)[0]


def _patient_message(m: dict[str, Any], sid: str) -> dict[str, Any]:
    """One patient-side message with every key a patient message can have (null where this one has none), and
    tool-call arguments as objects: OpenAI's wire format sends them as JSON text, Hugging Face chat templates
    write them with `tojson` and would encode that text a second time."""
    calls = None
    if m.get("tool_calls"):
        calls = []
        for c in m["tool_calls"]:
            fn = c.get("function") or {}
            args = fn.get("arguments")
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except json.JSONDecodeError as exc:
                    raise InputError(f"session {sid}: tool call {c.get('id')} has arguments that are not JSON "
                                     f"({exc}); the sessions table is damaged") from None
            calls.append({"id": c.get("id"), "type": c.get("type") or "function",
                          "function": {"name": fn.get("name"), "arguments": args}})
    return {"role": m["role"], "content": m.get("content"), "tool_calls": calls,
            "tool_call_id": m.get("tool_call_id") if m["role"] == "tool" else None,
            "name": (m.get("name") or None) if m["role"] == "tool" else None}


Conversation = tuple[list[dict[str, Any]], Optional[list[dict[str, Any]]]]  # messages, tools


def _lengths(rows: list[list[Conversation]]) -> dict[str, Any]:
    """Row lengths in tokens with the embedded model's tokenizer (a row's longest conversation: a preference
    pair is its prompt with either reply), or why they could not be counted."""
    from mindsimkit.mindcore.errors import EngineUnavailable
    from mindsimkit.mindsim_app.chat_tokens import count, lengths_summary

    try:
        return lengths_summary(max(count(messages, tools) for messages, tools in row) for row in rows)
    except EngineUnavailable as exc:  # the shipped model is not installed: the export itself does not need it
        return {"skipped": str(exc)}


def _echo_lengths(summary: dict[str, Any]) -> None:
    from mindsimkit.mindsim_app.chat_tokens import lengths_line

    lengths = summary.get("lengths", {})
    typer.echo(lengths_line(lengths) if "max" in lengths else
               f"row lengths not counted: {lengths.get('skipped', 'no rows')}")


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
    system: bool = typer.Option(True, "--system/--no-system", help="Start each row with the counsellor's system "
                                "prompt as it was sent (it is most of a short row's tokens)"),
    per_turn: bool = typer.Option(False, "--per-turn", help="One prompt/completion row per counsellor reply instead "
                                  "of one messages row per session"),
) -> None:
    """Counsellor SFT data: system prompt as sent, then the session with the counsellor as assistant, ending on
    its last reply kept."""
    check_out(out)
    rows, summary, details = sft_export(run_dir, min_turns=min_turns, finished_only=finished_only,
                                        max_severity=max_severity, judge=judge, system=system, per_turn=per_turn)
    summary["lengths"] = _lengths([[(r["prompt"] + r["completion"], None) if per_turn else (r["messages"], None)]
                                   for r in rows])
    path = write_export("sft", rows, out, summary=summary, provenance=details, why_empty=why_no_sft_rows(summary))
    what = "counsellor replies" if per_turn else "conversations"
    typer.echo(f"wrote {len(rows)} {what} to {path}")
    _echo_lengths(summary)
    if max_severity is not None:
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
    """Patient-simulator data: the tool-using patient history, the tools it was offered, the profile summary."""
    check_out(out)
    rows, summary, details = patient_export(run_dir, min_turns=min_turns, finished_only=finished_only)
    summary["lengths"] = _lengths([[(r["messages"], r["tools"])] for r in rows])
    why = (f"export patient: no rows to write: {summary['sessions_read']} sessions read, "
           f"{summary['sessions_filtered']} left out by --min-turns / --finished-only")
    path = write_export("patient", rows, out, summary=summary, provenance=details, why_empty=why)
    typer.echo(f"wrote {len(rows)} sessions to {path}")
    _echo_lengths(summary)
    if summary["sessions_without_tools"]:
        typer.echo(f"warning: {summary['sessions_without_tools']} sessions call tools but were simulated before the "
                   "toolkit recorded the tools offered: their rows have tools: []", err=True)


@export_app.command("dpo")
def dpo_cmd(
    run_dir: Path = typer.Argument(..., help="Output folder of `mindsim run` / `mindsim simulate`"),
    out: Path = typer.Option(..., "--out", help="FILE.jsonl or FILE.parquet"),
    recipe: Optional[Path] = typer.Option(
        None, "--recipe", help="Recipe naming the counsellors (simulation.counsellors) and the judge role; "
        "default: the recipe run.json records, else the embedded engine for both"),
    k: int = typer.Option(4, "--k", min=2, max=16, help="Replies asked per sampled turn, round-robin over the counsellors"),
    turns: int = typer.Option(2, "--turns", min=1, max=100, help="Counsellor turns sampled per session"),
    min_gap: float = typer.Option(4.0, "--min-gap", min=0.0, help="Least severity-weight gap between rejected and chosen"),
    chosen_max: str = typer.Option("minor", "--chosen-max", help="Most severe level a chosen reply may have"),
    counsellor: Optional[list[str]] = typer.Option(
        None, "--counsellor", help="Use only these of the recipe's counsellors (repeatable)"),
    judge: str = typer.Option("judge", "--judge", help="Judge role that scores the replies"),
    seed: int = typer.Option(0, "--seed", help="Seed of the turn sampling"),
    tie_break: str = typer.Option(
        "none", "--tie-break", help="Pair a turn whose judged replies all share one severity on a finer order: "
        "expected-severity (the judge's probabilities of the severity labels; engines with logprobs, else as "
        "issues), issues (fewer flagged issues, then fewer unverified quotes); none: the paper's rule only"),
) -> None:
    """DPO preference pairs: counterfactual replies to the same history, judged, best vs worst."""
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.io import CheckpointDir
    from mindsimkit.judge.config import JudgeConfig, default_engines_config
    from mindsimkit.judge.judging import Judge
    from mindsimkit.judge.rubric import load_rubric
    from mindsimkit.mindsim.config import SimulationConfig, counsellor_name
    from mindsimkit.mindsim.simulate import counsellor_client
    from mindsimkit.mindsim_app.export_dpo import TIE_BREAKS, distinct_line, dpo_pairs, why_no_pairs

    from mindsimkit.judge.cli import judge_section, resolve_recipe

    check_out(out)
    if tie_break not in TIE_BREAKS:
        raise InputError(f"--tie-break {tie_break}: choose one of {', '.join(TIE_BREAKS)}")
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
    engines_cfg.check_bound([judge], "--judge")
    engines_cfg.check_bound([b for b in bindings if isinstance(b, str)], "simulation.counsellors")

    with Engines.from_config(engines_cfg) as engines:
        clients = [(counsellor_name(b), counsellor_client(engines, b)) for b in bindings]
        the_judge = Judge(judge, engines.role(judge), load_rubric(jconf.rubric), full_rubric=jconf.full_rubric,
                          max_issues=jconf.max_issues, preset=jconf.preset,
                          graded=tie_break == "expected-severity")
        cache = CheckpointDir(RunLayout(run_dir).judgments.cache)  # shared with `mindsim judge run`
        rows, summary, details = engines.run(dpo_pairs(run_dir, clients, the_judge, cache, k=k, turns=turns,
                                                       min_gap=min_gap, chosen_max=limit, seed=seed,
                                                       tie_break=tie_break))
    summary["lengths"] = _lengths([[(r["prompt"] + r["chosen"], None), (r["prompt"] + r["rejected"], None)] for r in rows])
    path = write_export("dpo", rows, out, summary=summary, provenance=details, why_empty=why_no_pairs(summary))
    typer.echo(f"wrote {len(rows)} preference pairs to {path}")
    skipped = ", ".join(f"{n} {why}" for why, n in summary["skipped"].items()) or "none"
    typer.echo(f"{summary['turns_sampled']} turns, {summary['replies_asked']} replies asked "
               f"({summary['counsellor_failures']} failed, {summary['judgments_failed']} judgments failed); "
               f"skipped turns: {skipped}")
    typer.echo(distinct_line(summary))
    if tie_break != "none":
        basis = ", ".join(f"{n} by {b}" for b, n in summary["pairs_by_basis"].items()) or "none"
        typer.echo(f"pairs by basis (--tie-break {tie_break}): {basis}")
    _echo_lengths(summary)
