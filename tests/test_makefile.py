"""What the Makefile's commands (the README's `make quickstart` and `make test`) hand every Python process they
start: compiled modules are kept, wherever the machine's environment says otherwise."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_every_make_command_keeps_compiled_modules_under_the_checkouts_cache():
    """With PYTHONDONTWRITEBYTECODE set (as on this machine's images) each of the suite's hundreds of processes
    compiled every module it imported again (a fake-engine job: 33 s against 15). A probe target added on the
    command line runs under the Makefile's settings as `test` and `quickstart` do."""
    probe = f'probe: ; @{sys.executable} -c "import sys; print(sys.dont_write_bytecode, sys.pycache_prefix)"'
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "--eval", probe, "probe"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    writes, prefix = done.stdout.split()
    assert writes == "False" and Path(prefix) == ROOT / ".cache" / "pycache"
    assert subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", prefix]).returncode == 0


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_test_leaves_out_the_slow_tier_and_ci_runs_every_test():
    """`make test` (the README's command, 20 minutes on 2 cores) runs every test not marked `slow`; `make test-all`
    runs every test, and CI runs it, so no claim goes unchecked."""

    def commands(target: str) -> list[str]:
        dry = subprocess.run(["make", "-n", "-C", str(ROOT), target], capture_output=True, text=True, timeout=60)
        assert dry.returncode == 0, dry.stderr
        return [line for line in dry.stdout.splitlines() if " -m pytest " in line]

    assert [c.split(" -m pytest ", 1)[1] for c in commands("test")] == [
        '-q -n 2 --dist loadfile -m "not embedded and not slow"',
        '-q -m "embedded and not slow"',
    ]
    assert [c.split(" -m pytest ", 1)[1] for c in commands("test-all")] == [
        '-q -n 2 --dist loadfile -m "not embedded"',
        "-q -m embedded",
    ]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert [line for line in ci if line.startswith("make ")] == ["make test-all"]
