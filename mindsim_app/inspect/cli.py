"""`mindsim inspect to-run LOG --out RUN`: an inspect log of the toolkit's tasks as a run folder (`to_run.py`).
Mounted by `mindsim_app/cli.py`; inspect_ai is imported only when the command runs."""

from __future__ import annotations

from pathlib import Path

import typer

from mindsimkit.mindcore.console import out_console

app = typer.Typer(
    help="inspect_ai logs of mindsimkit/mindeval2 and mindsimkit/patientact (docs/inspect.md).", no_args_is_help=True
)


@app.command("to-run")
def to_run_cmd(
    log: Path = typer.Argument(..., help="The .eval (or .json) log `inspect eval mindsimkit/…` wrote"),
    out: Path = typer.Option(..., "--out", help="New run folder (or an empty one) to write"),
) -> None:
    """Write the log's sessions, judgments and run.json as a run folder that `mindsim report`, `validate compare`
    and the exports read. Nothing is simulated or judged again."""
    from mindsimkit.mindcore.errors import ConfigError
    from mindsimkit.mindcore.outputs import check_out_folder

    check_out_folder(out)
    try:
        import inspect_ai  # noqa: F401
    except ImportError:
        raise ConfigError("inspect_ai is not installed: pip install 'mindsimkit[inspect]'") from None
    from mindsimkit.mindsim_app.inspect.to_run import log_to_run

    written = log_to_run(log, out)
    console = out_console()
    for what, where in written.items():
        console.print(f"{what}: {where}")
