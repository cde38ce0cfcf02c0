"""`mindsim profiles …` commands. The lead mounts `app` as
`mindsim profiles`; `mindsim_app.cli.main` maps UserError to exit code 2 and EngineError to 1.

    mindsim profiles RECIPE --out DIR            stages 1–5, writes DIR/profiles/ (resumes)
    mindsim profiles fit-rates TABLE --out RATES fit a rates file from annotated patients

`RECIPE` without a sub-command name runs `generate` (a small click group that defaults to it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from typer.core import TyperGroup

from mindsimkit.mindcore.console import err_console, out_console
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.layout import ProfilesFolder


class _DefaultGenerate(TyperGroup):
    """`profiles RECIPE …` means `profiles generate RECIPE …`; named sub-commands still work."""

    def parse_args(self, ctx, args):  # type: ignore[no-untyped-def]
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["generate", *args]
        return super().parse_args(ctx, args)


app = typer.Typer(
    cls=_DefaultGenerate,
    no_args_is_help=True,
    add_completion=False,
    help="Generate, screen and select patient profiles.",
)
console = out_console()


@app.command("generate")
def generate_cmd(
    recipe: Path = typer.Argument(..., help="Recipe YAML with engines, roles and a profiles: section."),
    out: Path = typer.Option(..., "--out", help="Run folder; profiles go to OUT/profiles/ (rerun resumes)."),
    candidates: Optional[int] = typer.Option(None, min=1, max=100_000, help="Override profiles.candidates."),
    pool_size: Optional[int] = typer.Option(None, min=1, max=100_000, help="Override profiles.pool_size."),
    benchmark_size: Optional[int] = typer.Option(None, min=0, max=100_000, help="Override profiles.benchmark_size."),
    personas: Optional[str] = typer.Option(None, help="Override profiles.personas (path, Hub id or 'synthetic')."),
    distilabel: Optional[bool] = typer.Option(
        None, "--distilabel/--no-distilabel", help="Override profiles.use_distilabel."
    ),
    causal_checks: Optional[bool] = typer.Option(
        None,
        "--causal-checks/--no-causal-checks",
        help="Override profiles.causal_checks (default: on when simulation.patient_engine includes patientact).",
    ),
    patientact_shape: Optional[bool] = typer.Option(
        None,
        "--patientact-shape/--no-patientact-shape",
        help="Override profiles.patientact_shape (PatientAct's impact list, predisposing split and demographics "
        "revision).",
    ),
) -> None:
    """Personas → anchors → 5P formulation → screen → pool and benchmark; writes a parquet dataset."""
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.recipe import load_recipe
    from mindsimkit.profilegen.config import ProfilesConfig, profiles_config
    from mindsimkit.profilegen.pipeline import run_profiles
    from mindsimkit.mindcore.outputs import check_out_folder
    from mindsimkit.mindcore.runfolder import run_lock

    check_out_folder(out)
    rec = load_recipe(recipe)
    overrides = {
        "candidates": candidates,
        "pool_size": pool_size,
        "benchmark_size": benchmark_size,
        "personas": personas,
        "use_distilabel": distilabel,
        "causal_checks": causal_checks,
        "patientact_shape": patientact_shape,
    }
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        # Only the fields the recipe or an option set are given again, so a cross-check that applies to set fields
        # only (a pool larger than its candidates) sees the same fields the recipe's own load saw.
        base = profiles_config(rec)
        cfg = ProfilesConfig.model_validate({**base.model_dump(include=base.model_fields_set), **given})
    except ValueError as exc:
        raise ConfigError(f"profiles options: {exc}") from exc
    if cfg.source == "patientact-situations":
        from mindsimkit.profilegen.situation_stage import plan

        # A bad imported folder is its one error line before any engine is started or checked.
        plan(cfg, cfg.seed if cfg.seed is not None else rec.seed)
    # The preflight reads the recipe: it must check the schemas these options ask for, not the file's.
    rec = rec.model_copy(update={"profiles": {**rec.profiles, **given}})
    with run_lock(out), Engines.from_config(rec.engines_config()) as engines:
        from mindsimkit.mindcore.preflight import preflight

        for note in preflight(rec, engines, {"profiles"}).notes:
            out_console().print(f"preflight: {escape(note)}")
        summary = run_profiles(rec, engines, out, cfg, console)
    failed = sum(summary.failed.values())
    # Some invalid drafts are a counted, expected loss (exit 0); a stage that produced nothing because
    # every candidate failed is an engine failure at run time, and a CI gate must see it.
    if summary.candidates and failed and not summary.kept:
        by_stage = ", ".join(f"{k} {v}" for k, v in sorted(summary.failed.items()))
        err_console().print(
            f"[red]error:[/] all {summary.candidates} candidate profiles failed ({escape(by_stage)}; see "
            f"{escape(str(ProfilesFolder(Path(summary.folder)).summary))}); check the engines with "
            f"`mindsim engines check {escape(str(recipe))}`, then rerun the same command to retry them"
        )
        raise typer.Exit(1)


@app.command("fit-rates")
def fit_rates_cmd(
    table: Path = typer.Argument(
        ..., help="Annotated patients: CSV/TSV/JSONL/parquet with age_band, gender, main, secondary (empty = none)."
    ),
    out: Path = typer.Option(..., "--out", help="Rates YAML to write (use it as profiles.rates)."),
    strength: float = typer.Option(20.0, min=0.0, help="Pseudo-count pulling sparse cells toward their margins."),
) -> None:
    """Fit P(main | age band, gender) and P(secondary | main, age band, gender) from annotated patients."""
    from mindsimkit.mindcore.io import atomic_write_text
    from mindsimkit.mindcore.outputs import check_out_file
    from mindsimkit.profilegen.rates import dump_rates, fit_rates, read_table

    check_out_file(out)
    rows = read_table(table)
    rates = fit_rates(rows, strength=strength, where=str(table))
    atomic_write_text(out, dump_rates(rates))
    empty = sum(1 for r in rows if not r.get("secondary"))
    console.print(
        f"fitted rates from {len(rows)} patients ({100 * empty / len(rows):.1f}% with no secondary problem) → {out}"
    )
