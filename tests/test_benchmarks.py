"""Every script in benchmarks/ runs its small mode (`--smoke`, benchmarks/smoke.py) through the interpreter as a
user runs it: a change in a file format or an API breaks this test, not the benchmark a month later. A
new script without a small mode fails here too (argparse refuses `--smoke`). Nothing is timed: the small sizes
make the printed numbers meaningless. The scripts that measure llama.cpp itself (bench_engine, bench_prefix_gate,
bench_quant, bench_rerun, bench_server_options, bench_threads, bench_tool_calls) start the embedded model at tiny
sizes in their own process; the others run on the fake engine or the instant stub server. Twenty-odd script starts
are minutes of the suite, so they are in the slow tier: `make test-all` (CI) runs them, `make test` does not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The hostile-input probes (probe_*.py) keep the same contract: a small mode that passes in seconds.
SCRIPTS = sorted([*(ROOT / "benchmarks").glob("bench_*.py"), *(ROOT / "benchmarks").glob("probe_*.py")])


def test_the_benchmarks_are_found():
    assert len(SCRIPTS) >= 18, [p.name for p in SCRIPTS]


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_the_benchmark_runs_its_small_mode(script):
    # The console script a benchmark calls (bench_startup) is the one installed beside this interpreter.
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "MPLBACKEND": "Agg",
        "TERM": "dumb",
    }
    proc = subprocess.run(
        [sys.executable, str(script), "--smoke"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=580
    )
    assert proc.returncode == 0, (
        f"{script.name} --smoke exit {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    )
    assert proc.stdout.strip(), f"{script.name} --smoke printed nothing"
