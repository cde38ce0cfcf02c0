"""`mindsim judge …` commands. `mindsim/cli.py` mounts `app`; each command lives with the module that
does its work."""

from __future__ import annotations

import typer

app = typer.Typer(help="MHQR: judge counsellor replies, sample excerpts for clinicians, measure agreement.",
                  no_args_is_help=True)
