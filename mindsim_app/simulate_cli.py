"""`mindsim simulate --profiles DIR --recipe RECIPE --out DIR`: the multi-session simulator as a command
(MindEval2/MindSim §4.2). The lead's `mindsim_app/cli.py` mounts `simulate_cmd`; rerunning with the same
`--out` resumes after the last finished session of every arc."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from mindsimkit.mindcore.console import err_console, out_console
from mindsimkit.mindcore.layout import RunLayout

out = out_console()
err = err_console()


def simulate_cmd(
    profiles: Path = typer.Option(
        ..., "--profiles", help="Folder written by `mindsim profiles` (holds profiles.parquet)"
    ),
    recipe: Path = typer.Option(..., "--recipe", help="Recipe YAML naming engines, roles and the simulation section"),
    out_dir: Path = typer.Option(..., "--out", help="Output folder; rerunning with the same folder resumes"),
) -> None:
    """Simulate every pool patient's arc of sessions against each counsellor in the recipe."""
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.recipe import load_recipe
    from mindsimkit.mindsim.config import SimulationConfig
    from mindsimkit.mindcore.preflight import preflight
    from mindsimkit.mindsim.simulate import run_simulation
    from mindsimkit.profilegen.dataset import iter_profiles
    from mindsimkit.mindcore.outputs import check_out_folder
    from mindsimkit.mindcore.runfolder import run_lock

    check_out_folder(out_dir)
    rec = load_recipe(recipe)
    config = rec.section("simulation", SimulationConfig)
    # Every row is checked before any engine starts (a model can take a minute to load); the run then reads the
    # file again as it packs it, so the pool is never whole in memory as objects.
    for _ in iter_profiles(profiles, pool_only=config.pool_only):
        pass
    with run_lock(out_dir), Engines.from_config(rec.engines_config()) as engines:
        report = preflight(rec, engines, {"simulate"})
        for note in [*report.notes, *config.preset_notes()]:  # a preset setting the recipe replaced is said
            out.print(f"preflight: {escape(note)}")
        if report.budgets is not None:  # preflight always fits them
            config = report.budgets.apply("simulation", config)
        summary = run_simulation(
            iter_profiles(profiles, pool_only=config.pool_only), engines, config, out_dir, rec.seed
        )
    table = Table(title=f"Simulation → {out_dir}")
    table.add_column("what")
    table.add_column("value", justify="right")
    for key in (
        "patients",
        "arcs",
        "sessions_expected",
        "sessions_written",
        "ended_by_patient",
        "rejected_commits",
        "memory_repaired",
        "elapsed_s",
    ):
        table.add_row(key, str(getattr(summary, key)))
    if summary.trials > 1:
        table.add_row("trials", str(summary.trials))
    table.add_row("failed arcs", str(len(summary.failed_arcs)))
    out.print(table)
    failed = summary.failed_arcs
    for f in failed:
        # Details are part of the report (stdout, one line each); the verdict is the one stderr line.
        first = f.error.strip().splitlines()[0] if f.error.strip() else ""
        trial = "" if f.trial is None else f" (trial {f.trial})"
        out.print(f"failed: {escape(f.patient_id)} × {escape(f.counsellor)}{trial}: {escape(first)}")
    if failed:
        err.print(
            f"[red]error:[/] {len(failed)} of {summary.arcs} session arcs failed "
            f"(see {escape(str(RunLayout(out_dir).sessions.summary))}); rerun the same command to retry "
            f"them, finished sessions are kept"
        )
        raise typer.Exit(1)
