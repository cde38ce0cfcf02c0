"""`mindsim validate …` commands (MindEval2/MindSim paper, §4.3): build a text-free reference artifact
from transcripts, and compare systems' transcripts against one. The lead mounts `app` under
`mindsim validate`; it also runs on its own (`python -m validation.cli`).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional

import typer
from rich.markup import escape

from mindsimkit.mindcore.console import err_console, one_line
from mindsimkit.mindcore.errors import ConfigError, UserError
from mindsimkit.mindcore.layout import ValidationFolder
from mindsimkit.mindcore.outputs import check_out_file
from mindsimkit.validation.config import ValidationConfig

if TYPE_CHECKING:
    from mindsimkit.mindcore.config import EnginesConfig
    from mindsimkit.mindcore.engine import Engines

app = typer.Typer(
    help="Realism validation: surface-feature distances and narrative arcs against a reference.", no_args_is_help=True
)
_err = err_console()


def _config(recipe: Optional[Path], **overrides: Any) -> tuple[ValidationConfig, EnginesConfig]:
    """The recipe's validation section (or defaults) with CLI overrides, and its engines config."""
    from mindsimkit.mindcore.config import EnginesConfig
    from mindsimkit.mindcore.recipe import load_recipe

    if recipe is not None:
        r = load_recipe(recipe)
        base, engines_cfg = r.section("validation", ValidationConfig), r.engines_config()
    else:
        base, engines_cfg = ValidationConfig(), EnginesConfig()  # embedded SmolLM2 for every role
    changes = {k: v for k, v in overrides.items() if v is not None}
    try:
        return ValidationConfig.model_validate({**base.model_dump(), **changes}), engines_cfg
    except Exception as exc:  # pydantic ValidationError -> one clear line
        raise ConfigError(f"validation options: {exc}") from exc


@contextlib.contextmanager
def _engines(config: ValidationConfig, engines_cfg: EnginesConfig) -> Iterator[Engines | None]:
    if not config.arc:
        yield None
        return
    from types import SimpleNamespace

    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.preflight import preflight

    with Engines.from_config(engines_cfg) as engines:
        # The check reads the effective settings (recipe section plus command-line options), not the file.
        preflight(SimpleNamespace(validation=config.model_dump(mode="json")), engines, {"validate"})
        yield engines


def _fail(exc: UserError) -> None:
    # Exit here rather than in `mindsim_app.cli.main` so `python -m validation.cli` keeps the same contract.
    _err.print(f"[red]error:[/red] {escape(one_line(exc))}")
    raise typer.Exit(2)


@app.command("reference")
def reference_cmd(
    transcripts: Path = typer.Argument(..., help="Chat JSONL (one conversation per line) or a saved datasets folder"),
    out: Path = typer.Option(..., "--out", help="Artifact to write (.parquet)"),
    arc: Optional[bool] = typer.Option(None, "--arc/--no-arc", help="Also label patient turns P/T/C/F (needs an LLM)"),
    recipe: Optional[Path] = typer.Option(None, help="Recipe whose engines/roles and validation section to use"),
    patient_role: Optional[str] = typer.Option(None, help="Role of the patient in the transcripts (default user)"),
    min_patient_turns: Optional[int] = typer.Option(None, help="Skip conversations with fewer patient turns"),
    attribution: Optional[str] = typer.Option(None, help="Attribution/licence note stored in the artifact"),
    name: Optional[str] = typer.Option(None, help="Name of the reference in reports (default: file stem)"),
) -> None:
    """Measure transcripts and write a reference artifact with numbers only (no text, no raw ids)."""
    from mindsimkit.validation.compare import build_reference

    if not str(out).endswith(".parquet"):
        _fail(ConfigError(f"--out {out}: the artifact is a parquet file; name it *.parquet"))
    try:
        check_out_file(out)
        config, engines_cfg = _config(recipe, arc=arc, patient_role=patient_role, min_patient_turns=min_patient_turns)
        with _engines(config, engines_cfg) as engines:
            measured = build_reference(transcripts, out, config, engines=engines, attribution=attribution, name=name)
    except UserError as exc:
        _fail(exc)
    c = measured.counts
    typer.echo(
        f"wrote {out}: {c['conversations_used']} conversations, {c['patients']} patients, "
        f"{c['patient_turns']} patient turns ({c['skipped_no_patient_turn']} skipped without a patient turn)"
        + (
            f"; arc labels: {c.get('arc_labelled_turns', 0)} ok, {c.get('arc_failed_turns', 0)} failed"
            if config.arc
            else ""
        )
    )
    _fail_if_no_arc_label({measured.name: c}, out)


def _fail_if_no_arc_label(counts: dict[str, dict[str, Any]], out: Path) -> None:
    """Exit 1 when arc labelling was asked for and not one turn of a source got a label: the labeller
    engine failed at run time (every answer invalid), which a CI gate must see. Some failed turns
    among good ones are counted in the output, exit 0."""
    dead = [name for name, c in counts.items() if c.get("arc_failed_turns") and not c.get("arc_labelled_turns")]
    if dead:
        _err.print(
            f"[red]error:[/red] arc labelling failed for every patient turn of {escape(', '.join(dead))} "
            f"(counts in {escape(str(out))}); check the labeller role's engine with `mindsim engines check`, "
            f"or run without --arc"
        )
        raise typer.Exit(1)


def _parse_sims(sims: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in sims:
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ConfigError(
                f"--sim {item!r}: write it as NAME=PATH, e.g. --sim mindsim=out/transcripts/transcripts.jsonl"
            )
        if name in out:
            raise ConfigError(f"--sim: the name {name!r} is given twice; names label report columns and must differ")
        out[name.strip()] = path.strip()
    return out


@app.command("compare")
def compare_cmd(
    sim: list[str] = typer.Option(
        ..., "--sim", help="NAME=PATH of transcripts (JSONL, dataset folder) or an artifact; repeat"
    ),
    out: Path = typer.Option(..., "--out", help="Folder for report.json, report.md and PNGs"),
    reference: Optional[Path] = typer.Option(None, help="Reference artifact (default: the shipped MIBot one)"),
    arc: Optional[bool] = typer.Option(None, "--arc/--no-arc", help="Label systems' patient turns and compare arcs"),
    recipe: Optional[Path] = typer.Option(None, help="Recipe whose engines/roles and validation section to use"),
    patient_role: Optional[str] = typer.Option(None, help="Role of the patient in the transcripts (default user)"),
    draws: Optional[int] = typer.Option(None, min=1, max=100_000, help="Bootstrap draws (default 1000)"),
    splits: Optional[int] = typer.Option(
        None, min=1, max=10_000, help="Reference halvings for the noise floor (default 100)"
    ),
    seed: Optional[int] = typer.Option(None, help="Seed of draws and splits"),
    no_plots: bool = typer.Option(False, "--no-plots", help="Skip the PNG plots"),
    first_sessions: Optional[bool] = typer.Option(
        None, "--first-sessions/--all-sessions", help="Compare only each patient's first session (the paper's sample)"
    ),
    max_patient_turns: Optional[int] = typer.Option(
        None, "--max-patient-turns", help="Cut each conversation after its N-th patient turn (paper: 15)"
    ),
    counsellor: Optional[list[str]] = typer.Option(
        None, "--counsellor", help="Compare only conversations with this counsellor (repeat)"
    ),
) -> None:
    """Distances of each system to the reference, with intervals, the noise floor and arc shares."""
    from mindsimkit.mindcore.outputs import check_out_folder
    from mindsimkit.mindcore.manifest import verify_file
    from mindsimkit.validation.compare import compare

    try:
        sims = _parse_sims(sim)
        # Into a run's own validation folder is a rerun of that run's validation stage (docs/commands.md).
        check_out_folder(out, stage="validation")
        for path in sims.values():
            verify_file(path)
        config, engines_cfg = _config(
            recipe,
            reference=str(reference) if reference else None,
            arc=arc,
            patient_role=patient_role,
            bootstrap_draws=draws,
            floor_splits=splits,
            seed=seed,
            plots=False if no_plots else None,
            first_sessions_only=first_sessions,
            max_patient_turns=max_patient_turns,
            counsellors=counsellor or None,
        )
        with _engines(config, engines_cfg) as engines:
            report = compare(None, sims, out, config, engines=engines)
    except UserError as exc:
        _fail(exc)

    def num(x: float | None) -> str:  # undefined values are null
        return "n/a" if x is None else f"{x:.3f}"

    for name, res in report["systems"].items():
        idx = res["index"]
        typer.echo(
            f"{name}: index {num(idx['distance'])} [{num(idx['ci'][0])}, {num(idx['ci'][1])}] (floor {num(report['floor'].get('index'))})"
        )
    for warning in report["warnings"]:
        _err.print(f"[yellow]warning:[/yellow] {escape(one_line(warning))}")
    folder = ValidationFolder(out)
    _record_in_run(out, folder, len(report["systems"]))
    typer.echo(f"wrote {folder.report_md} and {folder.report_json}")
    _fail_if_no_arc_label(report["counts"], folder.report_json)


def _record_in_run(out: Path, folder: ValidationFolder, systems: int) -> None:
    """Validation written into a run folder's own `validation/` (a rerun of that stage) is recorded in the run's
    manifest, as the job records it: its readers then read it as the stage's files, not as files changed behind the
    stage's back, and what was built from the earlier validation (the dataset folder) is the only thing stale."""
    from mindsimkit.mindcore.layout import RunLayout
    from mindsimkit.mindcore.manifest import record_stage

    run = RunLayout(Path(out).parent)
    if run.manifest.is_file() and run.validation.path.resolve() == Path(out).resolve():
        record_stage(
            run.path,
            "validation",
            [folder.report_json, folder.report_md, *folder.plots()],
            reads=[run.transcripts],
            counts={"systems": systems},
        )


if __name__ == "__main__":
    app()  # standalone: typer exits with the code of typer.Exit
