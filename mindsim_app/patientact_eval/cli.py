"""`mindsim patientact profile-eval|profile-card RUN_DIR`: the commands of PatientAct's profile evaluation (the
profile side of PatientAct's Table 1, `run`) and its profile cards (Fig. 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

app = typer.Typer(
    help="PatientAct evaluation (the profile side of Table 1) and profile cards (Fig. 2).", no_args_is_help=True
)


@app.command("profile-eval")
def patientact_profile_eval_cmd(
    run_dir: Path = typer.Argument(
        ..., help="Run folder simulated with the patientact engine (profiles/, sessions/decompositions/)"
    ),
    recipe: Optional[Path] = typer.Option(None, "--recipe", help="Recipe with the judge role (default: the run's)"),
    judge: str = typer.Option("judge", "--judge", help="Judge role"),
    human: Optional[Path] = typer.Option(
        None, "--human", help="patientact_profile_human.jsonl (mindsim annotate export)"
    ),
    diversity: Optional[Path] = typer.Option(
        None, "--diversity", help="patientact_diversity.jsonl (mindsim annotate export)"
    ),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for patientact_profile_eval/ (default RUN_DIR)"),
    max_tokens: Optional[int] = typer.Option(
        None, "--max-tokens", min=1, max=1_000_000, help="Token budget of one judge answer"
    ),
) -> None:
    """PatientAct Table 1: the four profile dimensions (mean ± sd), attachment / core-belief identification
    accuracy against chance, diversity, and with --human / --diversity the raters' means, α and κ."""
    from mindsimkit.judge.cli import resolve_recipe
    from mindsimkit.judge.config import default_engines_config
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.errors import ConfigError
    from mindsimkit.mindcore.recipe import load_recipe
    from mindsimkit.mindsim_app.patientact_eval.run import load_run, profile_eval

    if judge != "judge" and not judge.startswith("judge:"):
        raise ConfigError(f"--judge {judge}: not a judge role; write 'judge' or 'judge:NAME'")
    from mindsimkit.mindcore.outputs import check_out_folder

    check_out_folder(out or run_dir)
    load_run(run_dir)  # bad input stops here, before any engine starts
    recipe_path = resolve_recipe(run_dir, recipe)
    r = load_recipe(recipe_path) if recipe_path is not None else None
    engines_cfg = r.engines_config() if r is not None else default_engines_config()
    engines_cfg.check_bound([judge], "--judge")
    with Engines.from_config(engines_cfg) as engines:
        summary = profile_eval(
            run_dir,
            engines,
            out=out,
            judge=judge,
            human=human,
            diversity=diversity,
            max_tokens=max_tokens,
            seed_priors=situation_seed_priors(r),
        )
    typer.echo(f"judged {summary['profiles']} profiles on the PatientAct profile rubric: {summary['ok']} ok")
    for label, path in summary["outputs"].items():
        typer.echo(f"  {label}: {path}")


def situation_seed_priors(recipe: Any) -> dict[str, dict[str, float]] | None:
    """The seed distributions a situation-seeded run drew from: the imported priors' global ones (a per-disease
    override, where the file has one, is not folded in). None for a persona run or an unreadable folder."""
    from mindsimkit.profilegen.config import profiles_config
    from mindsimkit.profilegen.patientact_inputs import read_inputs

    if recipe is None:
        return None
    profiles = profiles_config(recipe)
    if profiles.source != "patientact-situations" or profiles.situations is None:
        return None
    try:
        priors = read_inputs(profiles.situations).priors
    except Exception:  # the folder moved since the run: the chance stays the sample's, as for persona runs
        return None
    if priors is None:
        return None
    glob = priors.global_
    return {"attachment": dict(glob["attachment_style"]), "theme": dict(glob["core_belief_theme"])}


@app.command("profile-card")
def patientact_profile_card_cmd(
    run_dir: Path = typer.Argument(
        ..., help="Run folder simulated with the patientact engine (profiles/, sessions/decompositions/)"
    ),
    patient: Optional[list[str]] = typer.Option(
        None, "--patient", help="Profile id (repeat for several; default: all)"
    ),
    out: Optional[Path] = typer.Option(None, "--out", help="Markdown file to write (default: print)"),
    blind: bool = typer.Option(False, "--blind", help="As the identification task shows it: no core belief, no seeds"),
) -> None:
    """PatientAct Fig. 2: a profile as one card (demographics, the 5P problem formulation, the psychological
    formulation, the seeds), in Markdown, from a run's profiles and their decompositions."""
    from mindsimkit.mindcore.errors import InputError
    from mindsimkit.mindcore.io import atomic_write_text
    from mindsimkit.mindcore.outputs import check_out_file
    from mindsimkit.mindsim.patientact.card import card_markdown, profile_card
    from mindsimkit.mindsim_app.patientact_eval.run import load_run

    if out is not None:
        check_out_file(out)
    pairs = load_run(run_dir)
    known = {p.profile_id for p, _ in pairs}
    unknown = sorted(set(patient or ()) - known)
    if unknown:
        raise InputError(
            f"--patient {', '.join(unknown)}: not among the decomposed profiles of {run_dir} "
            f"({', '.join(sorted(known))})"
        )
    cards = [
        card_markdown(
            profile_card(
                p,
                d.formulation,
                blind=blind,
                seeds={"attachment style": d.psych.attachment, "core belief theme": d.psych.theme},
            ),
            title=f"Profile {p.profile_id}",
        )
        for p, d in pairs
        if not patient or p.profile_id in patient
    ]
    text = "\n".join(cards)
    if out is None:
        typer.echo(text, nl=False)
        return
    atomic_write_text(out, text)
    typer.echo(f"wrote {len(cards)} profile card(s) to {out}")


@app.command("table")
def patientact_table_cmd(
    table: int = typer.Argument(..., help="2 (simulators), 3 (agreement with raters), 4 (ablation) or 5 (case study)"),
    run_dir: Path = typer.Argument(..., help="Run folder judged with `mindsim judge run --rubric patientact`"),
    out: Optional[Path] = typer.Option(None, "--out", help="Also write the table to this Markdown file"),
) -> None:
    """PatientAct's Tables 2-5, one at a time, from the run's PatientAct judge report (patientact_judge/report.json):
    Table 2 compares PatientAct with the other simulators, Table 4 with its arms (both with the significance
    marks), Table 3 is the judge's agreement with the raters (a run judged with --human), Table 5 the case study."""
    from mindsimkit.judge.patientact_report import table_md
    from mindsimkit.mindcore.errors import InputError
    from mindsimkit.mindcore.io import atomic_write_text
    from mindsimkit.mindcore.layout import RunLayout
    from mindsimkit.mindcore.outputs import check_out_file
    from mindsimkit.mindcore.runlog import RubricReport

    folder = RunLayout(run_dir).patientact_judge
    report = folder.report(RubricReport)
    if report is None:
        raise InputError(
            f"{folder.report_json}: no PatientAct judge report; judge the run first: "
            f"mindsim judge run --rubric patientact {run_dir}"
        )
    if out is not None:
        check_out_file(out)
    text = table_md(report.model_dump(), table)
    typer.echo(text, nl=False)
    if out is not None:
        atomic_write_text(out, text)
