"""The benchmarks' small mode (`--smoke`): every script runs its measured side at tiny sizes in seconds, so the fast
suite (tests/test_benchmarks.py) catches a script that an API or a file-format change has broken. What a smoke run
prints is not a measurement: sizes are too small and no timing is asserted. Imported as `smoke` (the scripts run
with this folder on `sys.path`)."""

from __future__ import annotations

import argparse

HELP = "tiny sizes, seconds: checks that the script still runs (its numbers mean nothing)"


def parse_args(ap: argparse.ArgumentParser, **tiny: object) -> argparse.Namespace:
    """`ap`'s arguments with `--smoke` added; under `--smoke` the options named in `tiny` take those values."""
    ap.add_argument("--smoke", action="store_true", help=HELP)
    args = ap.parse_args()
    if args.smoke:
        for name, value in tiny.items():
            if not hasattr(args, name):
                raise AttributeError(f"--smoke sets {name!r}, which {ap.prog} has no option for")
            setattr(args, name, value)
    return args
