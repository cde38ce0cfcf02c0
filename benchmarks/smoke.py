"""The benchmarks' small mode (`--smoke`): every script runs its measured side at tiny sizes in seconds, so the fast
suite (tests/test_benchmarks.py) catches a script that an API or a file-format change has broken. What a smoke run
prints is not a measurement: sizes are too small and no timing is asserted. Imported as `smoke` (the scripts run
with this folder on `sys.path`)."""

from __future__ import annotations

import argparse
from typing import Any, Callable

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


def session_engines(args: argparse.Namespace, responder: Callable[[], Any]) -> Any:
    """The engines a session benchmark plays on: the fake backend answering with `responder()` under `--fake`, else
    the embedded engine (`--parallel` slots) with the quickstart's patient settings, whose stop, penalty and
    re-asks are what let the 135M model finish its messages."""
    from mindsimkit.mindcore.config import EmbeddedEngine, EnginesConfig, RoleSpec
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.fake import FakeBackend

    if args.fake:
        return Engines.with_backend(FakeBackend(responder()))
    patient = RoleSpec(
        engine="local", temperature=1.0, max_tokens=500, seed=0, stop=["\n"], frequency_penalty=0.6, max_attempts=5
    )
    return Engines.from_config(
        EnginesConfig(
            engines={"local": EmbeddedEngine(parallel=args.parallel, ctx_per_slot=8192)},
            roles={"default": RoleSpec(engine="local", temperature=0.7, max_tokens=256, seed=0), "patient": patient},
        )
    )
