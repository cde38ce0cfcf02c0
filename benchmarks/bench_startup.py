"""What a command pays before it does any work, measured side by side in one run (machines here are noisy, so
compare the ratios, not the seconds):

1. every shipped YAML file parsed by PyYAML's pure-Python safe loader and by `mindcore.yamlio.safe_load`
   (libyaml), the presenting-problem rates file on its own line;
2. a fresh interpreter importing the two packages the validation modules now import only where they are used
   (POT for the joint distance, lexicalrichness for MTLD), against one importing nothing;
3. `mindsim` console-script calls that stop at bad input, the way a user who mistyped a path sees them.

    python benchmarks/bench_startup.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from mindsimkit.mindcore import yamlio
from smoke import parse_args

REPO = Path(__file__).resolve().parent.parent
RATES = REPO / "profilegen" / "data" / "rates_default.yaml"


def median_seconds(fn, repeat: int) -> float:
    """Median wall seconds of `repeat` calls."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = parse_args(ap, repeat=1)
    files = sorted(
        p
        for d in ("mindcore", "mindsim", "mindsim_app", "profilegen", "validation", "judge", "prompts", "recipes")
        for p in (REPO / d).rglob("*.y*ml")
    )
    texts = [p.read_text(encoding="utf-8") for p in files]
    rates = RATES.read_text(encoding="utf-8")

    print(f"YAML, median of {args.repeat}:")
    for label, docs in ((f"{len(files)} shipped files", texts), ("rates_default.yaml", [rates])):
        pure = median_seconds(lambda: [yaml.safe_load(t) for t in docs], args.repeat)
        fast = median_seconds(lambda: [yamlio.safe_load(t) for t in docs], args.repeat)
        print(f"  {label:24s} pure {pure:6.3f} s   libyaml {fast:6.3f} s   ratio {pure / fast:5.1f}x")

    print(f"imports in a fresh interpreter, median of {args.repeat}:")
    bare = median_seconds(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), args.repeat)
    for mod in ("ot", "lexicalrichness"):
        t = median_seconds(lambda: subprocess.run([sys.executable, "-c", f"import {mod}"], check=True), args.repeat)
        print(f"  import {mod:16s} {t - bare:6.2f} s over a bare interpreter ({bare:.2f} s)")

    exe = shutil.which("mindsim")
    if not exe:
        sys.exit("the mindsim console script is not on PATH; run `make install` first")
    with tempfile.TemporaryDirectory() as tmp:
        missing = Path(tmp) / "missing"
        calls = {
            "validate reference <missing>": ["validate", "reference", missing, "--out", Path(tmp) / "r.parquet"],
            "validate compare <missing>": [
                "validate",
                "compare",
                missing,
                "--reference",
                missing,
                "--out",
                Path(tmp) / "c",
            ],
            "run <missing recipe>": ["run", missing, "--out", Path(tmp) / "o"],
            "profiles <missing recipe>": ["profiles", missing, "--out", Path(tmp) / "p"],
        }
        print(f"console script on bad input (exit 2 expected), median of {args.repeat}:")
        for label, argv in calls.items():
            codes = set()

            def call():
                codes.add(subprocess.run([exe, *map(str, argv)], capture_output=True).returncode)

            t = median_seconds(call, args.repeat)
            print(f"  mindsim {label:30s} {t:6.2f} s   exit {sorted(codes)}")


if __name__ == "__main__":
    main()
