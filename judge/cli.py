"""`mindsim judge …` commands. `mindsim/cli.py` mounts `app`; each command lives with the module that
does its work."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer

app = typer.Typer(help="MHQR: judge counsellor replies, sample excerpts for clinicians, measure agreement.",
                  no_args_is_help=True)


def judge_section(recipe: Any) -> Any:
    """The recipe's `judge:` section, or defaults while the shared Recipe model has no such section."""
    from judge.config import JudgeConfig

    if "judge" in type(recipe).model_fields:
        return recipe.section("judge", JudgeConfig)
    return JudgeConfig()


def resolve_recipe(run_dir: Path, recipe: Optional[Path]) -> Optional[Path]:
    """--recipe, else the recipe path run.json records, else None (embedded defaults)."""
    from mindcore.errors import ConfigError, InputError

    if recipe is not None:
        return recipe
    run_json = run_dir / "run.json"
    if not run_json.is_file():
        return None
    try:
        recorded = (json.loads(run_json.read_text(encoding="utf-8")).get("recipe") or {}).get("path")
    except json.JSONDecodeError as exc:
        raise InputError(f"{run_json}: not valid JSON ({exc.msg}); pass --recipe to name the recipe") from exc
    if not recorded:
        return None
    if not Path(recorded).is_file():
        raise ConfigError(f"{run_json} names recipe {recorded}, which is not there from here; pass --recipe PATH")
    return Path(recorded)


@app.command("run")
def run_cmd(
    run_dir: Path = typer.Argument(..., help="Run folder (holds sessions/sessions.parquet); judgments/ is written here"),
    recipe: Optional[Path] = typer.Option(None, help="Recipe with engines, roles and a judge: section "
                                                     "(default: the one run.json names, else the embedded engine)"),
    sessions: Optional[Path] = typer.Option(None, help="Sessions from another simulator: JSONL (or parquet) "
                                                       "with the fields in docs/judge.md"),
    judge: Optional[list[str]] = typer.Option(None, "--judge", help="Judge role to use (repeat); overrides judge.judges"),
    max_replies: Optional[int] = typer.Option(None, help="Judge only the first N replies of each session"),
    draws: Optional[int] = typer.Option(None, help="Bootstrap draws (default 2000)"),
    seed: Optional[int] = typer.Option(None, help="Bootstrap seed"),
    no_plots: bool = typer.Option(False, "--no-plots", help="Skip the PNG plots"),
) -> None:
    """Judge every counsellor reply against the MHQR rubric; write judgments, scores and a report."""
    from mindcore.errors import ConfigError

    if not run_dir.is_dir() and sessions is None:
        raise ConfigError(f"{run_dir}: no such run folder; give a folder made by 'mindsim run', or --sessions FILE")
    from pydantic import ValidationError

    from mindcore import preflight_hook
    from mindcore.engine import Engines
    from mindcore.recipe import format_validation_error, load_recipe
    from judge.config import JudgeConfig, default_engines_config
    from judge.inputs import load_sessions
    from judge.run import run_judging

    recipe_path = resolve_recipe(run_dir, recipe)
    r = None
    if recipe_path is not None:
        r = load_recipe(recipe_path)
        base, engines_cfg = judge_section(r), r.engines_config()
    else:
        base, engines_cfg = JudgeConfig(), default_engines_config()
    changes = {k: v for k, v in {"judges": judge or None, "max_replies": max_replies, "bootstrap_draws": draws,
                                 "seed": seed, "plots": False if no_plots else None}.items() if v is not None}
    try:
        config = JudgeConfig.model_validate({**base.model_dump(), **changes})
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, "mindsim judge run options")) from exc
    inputs = load_sessions(run_dir, sessions)  # bad input stops here, before any engine starts
    with Engines.from_config(engines_cfg) as engines:
        preflight_hook.run(r, engines, {"judge"})
        summary = run_judging(run_dir, engines, config, inputs=inputs)
    typer.echo(f"judged {summary['judgments']} replies of {summary['sessions']} sessions: {summary['ok']} ok, "
               f"{summary['failed']} failed, {summary['critical']} critical, "
               f"{summary['dropped_quotes']} unverifiable quotes dropped")
    for name, j in summary["judges"].items():
        typer.echo(f"  {name} ({j['model']}): ranking {', '.join(j['ranking']) or '(no scores)'}")
    for label, path in summary["outputs"].items():
        typer.echo(f"  {label}: {path}")


# -- clinicians: blinded sample and agreement (judge/sample.py, judge/agreement.py) -----------------


@app.command("sample")
def sample_cmd(
    run_dir: Path = typer.Argument(..., help="Run folder (sessions/sessions.parquet; judgments/ used for strata if present)"),
    n: int = typer.Option(..., "--n", help="Number of excerpts (one counsellor reply each) to draw"),
    out: Path = typer.Option(..., "--out", help="Excerpt file (JSONL) to give to the annotators"),
    seed: int = typer.Option(0, "--seed", help="Seed of the draw, the shuffle and the system codes"),
    key: Optional[Path] = typer.Option(None, "--key", help="Where the un-blinding key goes (default FILE.key.json)"),
    judge: Optional[str] = typer.Option(None, "--judge", help="Whose severities stratify the draw, when several judges ran"),
) -> None:
    """Blinded, stratified excerpts for clinicians, with the key kept in a separate file."""
    from judge.sample import sample_excerpts

    s = sample_excerpts(run_dir, n, out, seed=seed, key=key, judge=judge)
    typer.echo(f"wrote {s['drawn']} excerpts ({len(s['systems'])} systems, strata by "
               f"{s['judge'] or 'counsellor only'}) to {s['out']}; key (keep it from the annotators): {s['key']}")


@app.command("agreement")
def agreement_cmd(
    annotations: list[Path] = typer.Option(..., "--annotations", help="Annotation JSONL (repeat for several files)"),
    judgments: Optional[Path] = typer.Option(None, "--judgments", help="RUN_DIR/judgments (or its parquet file)"),
    key: Optional[Path] = typer.Option(None, "--key", help="Key file of the sample, when annotations name excerpt ids"),
    out: Path = typer.Option(Path("agreement"), "--out", help="Folder for agreement.json and agreement.md"),
    draws: int = typer.Option(2000, "--draws", help="Bootstrap resamples for ranking stability"),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed"),
) -> None:
    """Agreement of annotators with each other and with the judge (MindEval2 Tables 2, 3, 7, 9, 10)."""
    from judge.agreement import run_agreement

    report = run_agreement(annotations, judgments=judgments, key=key, out=out, draws=draws, seed=seed)
    ia = report["inter_annotator"]["severity"]
    typer.echo(f"{report['counts']['annotations']} annotations, {len(report['counts']['annotators'])} annotators; "
               f"mean pairwise κ_w {_r(ia['mean_pairwise_kappa_w'])}")
    for name, j in report["judges"].items():
        s = j["severity"]
        r = report["ranking"].get("judges", {}).get(name, {})
        typer.echo(f"  {name}: accuracy {_r(s['accuracy'])}, macro F1 {_r(s['macro_f1'])}, κ_w {_r(s['kappa_w'])}, "
                   f"ranking τ_b {_r(r.get('tau_b'))}")
    typer.echo(f"wrote {out / 'agreement.json'} and {out / 'agreement.md'}")


def _r(x: Any) -> str:
    return "—" if x is None else f"{x:.3f}"
