"""`mindsim report RUN_DIR … [--out FILE] [--allow-mixed]`: the CLI of the HTML run report."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from mindsimkit.mindcore.console import out_console


def report_cmd(
    runs: list[Path] = typer.Argument(..., help="Run folder(s) from `mindsim run`; several put them on one page"),
    out: Optional[Path] = typer.Option(
        None,
        "--out",
        help="HTML file to write (default RUN_DIR/report.html; required for several runs); FILE.json beside it",
    ),
    allow_mixed: bool = typer.Option(
        False,
        "--allow-mixed",
        help="Compare runs whose toolkit, rubric, templates, judge or reference differ (marked on the page)",
    ),
    allow_partial: bool = typer.Option(
        False,
        "--allow-partial",
        help="Report a run still in progress, or one with missing or changed files (the page lists them at its top)",
    ),
) -> None:
    """One self-contained HTML report: leaderboard with significance groups, every judge and validation
    table as charts, a drill-down into every session, simulator health and versions. No network needed."""
    from mindsimkit.mindcore.outputs import check_out_file
    from mindsimkit.mindcore.layout import RunLayout
    from mindsimkit.mindsim_app.report.build import build_report, data_path

    if out is not None:
        # A run's own page and its data are this command's to write; any other file of a run is not.
        for path in (out, data_path(out)):
            check_out_file(path, allow=[p for r in runs for p in (RunLayout(r).report_html, RunLayout(r).report_json)])
    path = build_report(runs, out, allow_mixed=allow_mixed, allow_partial=allow_partial)
    out_console().print(
        f"report: {path} ({path.stat().st_size / 1024:.0f} KiB); its figures as data: {data_path(path)}"
    )
