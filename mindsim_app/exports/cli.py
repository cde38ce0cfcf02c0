"""`mindsim export sft|patient|dpo RUN_DIR --out FILE`: the commands of the post-training exports. Each builds its
rows (`sft`, `dpo`), counts their lengths in tokens where the embedded model's tokenizer is installed, and writes
rows, summary and provenance together (`write`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.layout import RunLayout
from mindsimkit.mindsim_app.exports.sessions import load_sessions
from mindsimkit.mindsim_app.exports.sft import patient_export, severity_weight, sft_export, why_no_sft_rows

export_app = typer.Typer(no_args_is_help=True)


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
    typer.echo(
        lengths_line(lengths) if "max" in lengths else f"row lengths not counted: {lengths.get('skipped', 'no rows')}"
    )


@export_app.command("sft")
def sft_cmd(
    run_dir: Path = typer.Argument(..., help="Output folder of `mindsim run` / `mindsim simulate`"),
    out: Path = typer.Option(..., "--out", help="FILE.jsonl or FILE.parquet"),
    min_turns: int = typer.Option(0, min=0, help="Keep sessions with at least this many patient turns"),
    finished_only: bool = typer.Option(False, help="Keep only sessions the patient ended (not the turn cap)"),
    max_severity: Optional[str] = typer.Option(
        None,
        help="Keep each session only up to its first reply judged above this level (no_concern, minor, "
        "major, critical); needs `mindsim judge run` first",
    ),
    judge: str = typer.Option("judge", help="Whose judgments --max-severity reads, when several judges ran"),
    system: bool = typer.Option(
        True,
        "--system/--no-system",
        help="Start each row with the counsellor's system prompt as it was sent (it is most of a short row's tokens)",
    ),
    per_turn: bool = typer.Option(
        False,
        "--per-turn",
        help="One prompt/completion row per counsellor reply instead of one messages row per session",
    ),
) -> None:
    """Counsellor SFT data: system prompt as sent, then the session with the counsellor as assistant, ending on
    its last reply kept."""
    from mindsimkit.mindsim_app.exports.write import check_out, write_export

    check_out(out)
    rows, summary, details = sft_export(
        run_dir,
        min_turns=min_turns,
        finished_only=finished_only,
        max_severity=max_severity,
        judge=judge,
        system=system,
        per_turn=per_turn,
    )
    summary["lengths"] = _lengths(
        [[(r["prompt"] + r["completion"], None) if per_turn else (r["messages"], None)] for r in rows]
    )
    path = write_export("sft", rows, out, summary=summary, provenance=details, why_empty=why_no_sft_rows(summary))
    what = "counsellor replies" if per_turn else "conversations"
    typer.echo(f"wrote {len(rows)} {what} to {path}")
    _echo_lengths(summary)
    if max_severity is not None:
        why = ", ".join(f"{n} {r}" for r, n in summary["cut_by_reason"].items() if n) or "none"
        typer.echo(
            f"kept {summary['replies_kept']} replies, cut {summary['replies_cut']} ({why}); "
            f"{summary['sessions_emptied']} sessions had no reply left"
        )


@export_app.command("patient")
def patient_cmd(
    run_dir: Path = typer.Argument(..., help="Output folder of `mindsim run` / `mindsim simulate`"),
    out: Path = typer.Option(..., "--out", help="FILE.jsonl or FILE.parquet"),
    min_turns: int = typer.Option(0, min=0, help="Keep sessions with at least this many patient turns"),
    finished_only: bool = typer.Option(False, help="Keep only sessions the patient ended"),
) -> None:
    """Patient-simulator data: the tool-using patient history, the tools it was offered, the profile summary."""
    from mindsimkit.mindsim_app.exports.write import check_out, write_export

    check_out(out)
    rows, summary, details = patient_export(run_dir, min_turns=min_turns, finished_only=finished_only)
    summary["lengths"] = _lengths([[(r["messages"], r["tools"])] for r in rows])
    why = (
        f"export patient: no rows to write: {summary['sessions_read']} sessions read, "
        f"{summary['sessions_filtered']} left out by --min-turns / --finished-only"
    )
    path = write_export("patient", rows, out, summary=summary, provenance=details, why_empty=why)
    typer.echo(f"wrote {len(rows)} sessions to {path}")
    _echo_lengths(summary)
    if summary["sessions_without_tools"]:
        typer.echo(
            f"warning: {summary['sessions_without_tools']} sessions call tools but were simulated before the "
            "toolkit recorded the tools offered: their rows have tools: []",
            err=True,
        )


@export_app.command("dpo")
def dpo_cmd(
    run_dir: Path = typer.Argument(..., help="Output folder of `mindsim run` / `mindsim simulate`"),
    out: Path = typer.Option(..., "--out", help="FILE.jsonl or FILE.parquet"),
    recipe: Optional[Path] = typer.Option(
        None,
        "--recipe",
        help="Recipe naming the counsellors (simulation.counsellors) and the judge role; "
        "default: the recipe run.json records, else the embedded engine for both",
    ),
    k: int = typer.Option(
        4, "--k", min=2, max=16, help="Replies asked per sampled turn, round-robin over the counsellors"
    ),
    turns: int = typer.Option(2, "--turns", min=1, max=100, help="Counsellor turns sampled per session"),
    min_gap: float = typer.Option(
        4.0, "--min-gap", min=0.0, help="Least severity-weight gap between rejected and chosen"
    ),
    chosen_max: str = typer.Option("minor", "--chosen-max", help="Most severe level a chosen reply may have"),
    counsellor: Optional[list[str]] = typer.Option(
        None, "--counsellor", help="Use only these of the recipe's counsellors (repeatable)"
    ),
    judge: str = typer.Option("judge", "--judge", help="Judge role that scores the replies"),
    seed: int = typer.Option(0, "--seed", help="Seed of the turn sampling"),
    tie_break: str = typer.Option(
        "none",
        "--tie-break",
        help="Pair a turn whose judged replies all share one severity on a finer order: "
        "expected-severity (the judge's probabilities of the severity labels; engines with logprobs, else as "
        "issues), issues (fewer flagged issues, then fewer unverified quotes); none: the paper's rule only",
    ),
) -> None:
    """DPO preference pairs: counterfactual replies to the same history, judged, best vs worst."""
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.io import CheckpointDir
    from mindsimkit.judge.config import JudgeConfig, default_engines_config
    from mindsimkit.judge.judging import Judge
    from mindsimkit.judge.rubric import load_rubric
    from mindsimkit.mindsim.config import SimulationConfig, counsellor_name
    from mindsimkit.mindsim.simulate import counsellor_client
    from mindsimkit.mindsim_app.exports.dpo import TIE_BREAKS, distinct_line, dpo_pairs, why_no_pairs
    from mindsimkit.mindsim_app.exports.write import check_out, write_export

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
            raise InputError(
                f"--counsellor {', '.join(sorted(unknown))}: not among the recipe's counsellors "
                f"({', '.join(counsellor_name(b) for b in bindings)})"
            )
        bindings = [b for b in bindings if counsellor_name(b) in counsellor]
    limit = severity_weight(chosen_max, "--chosen-max")
    engines_cfg.check_bound([judge], "--judge")
    engines_cfg.check_bound([b for b in bindings if isinstance(b, str)], "simulation.counsellors")

    with Engines.from_config(engines_cfg) as engines:
        clients = [(counsellor_name(b), counsellor_client(engines, b)) for b in bindings]
        the_judge = Judge(
            judge,
            engines.role(judge),
            load_rubric(jconf.rubric),
            full_rubric=jconf.full_rubric,
            max_issues=jconf.max_issues,
            preset=jconf.preset,
            graded=tie_break == "expected-severity",
        )
        cache = CheckpointDir(RunLayout(run_dir).judgments.cache)  # shared with `mindsim judge run`
        rows, summary, details = engines.run(
            dpo_pairs(
                run_dir,
                clients,
                the_judge,
                cache,
                k=k,
                turns=turns,
                min_gap=min_gap,
                chosen_max=limit,
                seed=seed,
                tie_break=tie_break,
            )
        )
    summary["lengths"] = _lengths(
        [[(r["prompt"] + r["chosen"], None), (r["prompt"] + r["rejected"], None)] for r in rows]
    )
    path = write_export("dpo", rows, out, summary=summary, provenance=details, why_empty=why_no_pairs(summary))
    typer.echo(f"wrote {len(rows)} preference pairs to {path}")
    skipped = ", ".join(f"{n} {why}" for why, n in summary["skipped"].items()) or "none"
    typer.echo(
        f"{summary['turns_sampled']} turns, {summary['replies_asked']} replies asked "
        f"({summary['counsellor_failures']} failed, {summary['judgments_failed']} judgments failed); "
        f"skipped turns: {skipped}"
    )
    typer.echo(distinct_line(summary))
    if tie_break != "none":
        basis = ", ".join(f"{n} by {b}" for b, n in summary["pairs_by_basis"].items()) or "none"
        typer.echo(f"pairs by basis (--tie-break {tie_break}): {basis}")
    _echo_lengths(summary)
