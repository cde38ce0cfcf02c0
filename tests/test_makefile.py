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


class _Item:
    """What the collection hook reads of a collected test."""

    def __init__(self, nodeid: str, fixtures: set[str], marks: set[str]):
        self.nodeid, self.fixturenames, self._marks = nodeid, sorted(fixtures), marks

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self._marks else None


def test_a_test_of_a_real_model_run_beside_the_study_must_be_marked_slow():
    """The slow tier stays whole as tests are added: an embedded test reading `two_counsellor_run` or `preset_run`
    without `slow` stops the collection (else `make test` would pay minutes for that run)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("suite_conftest", ROOT / "tests" / "conftest.py")
    assert spec and spec.loader
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    hook = conftest.pytest_collection_modifyitems
    marked = _Item("t::marked", {"embedded_engines", "study_run", "two_counsellor_run"}, {"embedded", "slow"})
    study_only = _Item("t::study", {"embedded_engines", "study_run"}, {"embedded"})
    fake_preset = _Item("t::fake", {"preset_run"}, set())  # tests/mindsim's fake-engine fixture of the same name
    hook(None, [marked, study_only, fake_preset])
    unmarked = _Item("t::unmarked", {"embedded_engines", "study_run", "preset_run"}, {"embedded"})
    with pytest.raises(pytest.UsageError, match="t::unmarked"):
        hook(None, [marked, unmarked])
