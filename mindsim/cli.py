"""The `mindsim` command line. Every command exits 0 on success, 2 on bad input or configuration
(one readable message naming what and where), 1 when an engine fails at run time, 130 on Ctrl-C."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mindcore.errors import EngineError, MindsimError, UserError

app = typer.Typer(
    name="mindsim",
    help="Clinically grounded synthetic patients, multi-session simulation and realism validation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
engines_app = typer.Typer(help="Inspect and test the engines a recipe names.", no_args_is_help=True)
app.add_typer(engines_app, name="engines")

err = Console(stderr=True)
out = Console()


@app.command("run")
def run_cmd(
    recipe: Path = typer.Argument(..., help="Recipe YAML, e.g. recipes/quickstart.yaml"),
    out_dir: Path = typer.Option(..., "--out", help="Output folder; rerunning with the same folder resumes"),
) -> None:
    """Run the main job: profiles → screening → pool → multi-session simulation → validation → dataset + card."""
    from mindsim.job import run_job

    summary = run_job(recipe, out_dir)
    table = Table(title="Outputs", show_header=True)
    table.add_column("what")
    table.add_column("where")
    for what, where in summary.outputs.items():
        table.add_row(what, str(where))
    out.print(table)


@engines_app.command("check")
def engines_check_cmd(
    recipe: Optional[Path] = typer.Argument(None, help="Recipe YAML; default: the embedded engine only"),
) -> None:
    """Ping every engine the recipe names: model, latency and a structured-output round trip."""
    from mindcore.config import EnginesConfig
    from mindcore.recipe import load_recipe
    from mindsim.engines_check import check_engines

    config = load_recipe(recipe).engines_config() if recipe else EnginesConfig()
    results = check_engines(config)
    table = Table(title=f"Engines in {recipe or 'default config'}")
    for col in ("engine", "kind", "endpoint", "model", "reply", "latency", "structured"):
        table.add_column(col, overflow="fold")
    for h in results:
        table.add_row(
            h.engine,
            h.kind,
            h.base_url,
            h.model,
            "[green]ok[/]" if h.ok else "[red]unreachable[/]",
            f"{h.latency_s:.2f}s" if h.latency_s is not None else "-",
            (f"[green]ok[/] {h.structured_latency_s:.2f}s" if h.structured_ok else "[red]failed[/]"),
        )
    out.print(table)
    bad = [h for h in results if not (h.ok and h.structured_ok)]
    for h in bad:
        err.print(f"[red]engine '{h.engine}':[/] {escape(h.problem)}")
        for hint in h.hints:
            err.print(f"  → {escape(hint)}")
    if bad:
        raise typer.Exit(1)


def _mount_stage_commands() -> None:
    """Stage packages own their command functions; the CLI only mounts them."""
    from mindsim.export import export_app
    from mindsim.publish import publish_cmd
    from mindsim.simulate_cli import simulate_cmd
    from profilegen.cli import app as profiles_app
    from judge.cli import app as judge_app
    from validation.cli import app as validate_app

    app.add_typer(profiles_app, name="profiles", help="Generate, screen and select patient profiles.")
    app.command("simulate")(simulate_cmd)
    app.add_typer(validate_app, name="validate", help="Realism validation against reference statistics.")
    app.command("publish")(publish_cmd)
    app.add_typer(judge_app, name="judge", help="MHQR: judge counsellor replies, sample for clinicians, agreement.")
    app.add_typer(export_app, name="export", help="Post-training exports (counsellor SFT, patient data).")


def main(argv: list[str] | None = None) -> int:
    # distilabel 1.5.3's own pydantic models warn on import with current pydantic; not actionable here.
    warnings.filterwarnings("ignore", message=".*'default' attribute with value None.*")
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="distilabel")
    _mount_stage_commands()
    try:
        app(args=argv, standalone_mode=False)
    except UserError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        return 2
    except EngineError as exc:
        err.print(f"[red]engine error:[/] {escape(str(exc))}")
        return 1
    except MindsimError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}")
        return 1
    except KeyboardInterrupt:
        err.print("interrupted; finished work is checkpointed — rerun the same command to resume")
        return 130
    except typer.Exit as exc:
        return exc.exit_code
    except SystemExit as exc:
        return int(exc.code or 0)
    except Exception as exc:
        # Usage errors from typer's bundled click: shown the usual way, exit code 2.
        if callable(getattr(exc, "show", None)) and hasattr(exc, "exit_code"):
            exc.show()
            return 2
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
