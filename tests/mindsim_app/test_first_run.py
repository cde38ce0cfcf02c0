"""What a fresh machine's first run shows: the main job through the installed command, with an empty matplotlib
config folder (so matplotlib builds its font cache and logs that at INFO, as on a machine that never plotted), and
its output not a terminal (a CI log). No traceback may reach the user, and long work must leave plain progress
lines on stderr.

The run talks to the HTTP fake engine of `fakejob` (every stage, both patient engines, the judge); the DPO export
after it draws its counterfactual counsellor replies from the same fake server."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fakejob import _recipe, _responder
from openai_stub import OpenAIStub, from_responder

from mindsimkit.mindcore.logs import root_logger_kept

PROGRESS = re.compile(
    r"^\[\d\d:\d\d:\d\d\] progress: (?P<what>.+): (?P<done>\d+)/(?P<total>\d+) "
    r"(?P<event>started|running|done|stopped), \d+:\d\d:\d\d elapsed$"
)


def _mindsim(*args: object, env: dict[str, str], cwd: Path, stderr=subprocess.PIPE) -> subprocess.CompletedProcess:
    # `python -m mindsimkit` is the installed `mindsim` script's entry point, run by the interpreter under test.
    return subprocess.run(
        [sys.executable, "-m", "mindsimkit", *map(str, args)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("first")
    mpl = tmp / "mplconfig"
    mpl.mkdir()
    env = {**os.environ, "MPLCONFIGDIR": str(mpl), "MINDSIM_PROGRESS_INTERVAL_S": "1"}
    env.pop("MINDSIM_EMBEDDED_URL", None)
    with OpenAIStub(from_responder(_responder())) as stub:
        recipe = _recipe(tmp / "r.yaml", stub)
        run = _mindsim("run", recipe, "--out", tmp / "run", env=env, cwd=tmp)
        with open(tmp / "err.log", "w") as err:
            dpo = _mindsim(
                "export",
                "dpo",
                tmp / "run",
                "--recipe",
                recipe,
                "--out",
                tmp / "pairs.jsonl",
                env=env,
                cwd=tmp,
                stderr=err,
            )
    return run, dpo, (tmp / "err.log").read_text(), mpl


def test_the_first_run_prints_no_traceback(first_run):
    run, _, _, mpl = first_run
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert any(mpl.iterdir()), "matplotlib wrote no font cache: the case under test did not happen"
    both = run.stdout + run.stderr
    assert "Traceback" not in both and "Logging error" not in both, both[-5000:]


def test_a_logged_run_shows_progress_lines_on_stderr(first_run):
    run, _, _, _ = first_run
    lines = [m for m in map(PROGRESS.match, run.stderr.splitlines()) if m]
    events = {(m["what"].split(" [")[0], m["event"]) for m in lines}
    for stage in ("profiles: write → screen",):
        assert (stage, "started") in events and (stage, "done") in events, run.stderr[-3000:]
    # Every task that started also ended, and every count is within its total.
    started = {w for w, e in events if e == "started"}
    assert started and started == {w for w, e in events if e in ("done", "stopped")}
    assert all(int(m["done"]) <= int(m["total"]) for m in lines)
    assert not any(PROGRESS.match(line) for line in run.stdout.splitlines())


def test_export_dpo_writes_progress_to_a_redirected_stderr(first_run):
    _, dpo, err_log, _ = first_run
    assert "Traceback" not in err_log, err_log[-3000:]
    events = [m["event"] for m in map(PROGRESS.match, err_log.splitlines()) if m]
    assert events[:1] == ["started"] and events[-1] in ("done", "stopped"), err_log[-3000:]


def test_the_root_logger_is_given_back_after_a_block_that_replaced_it(tmp_path):
    """What distilabel's pipeline does to the root logger, and what must be undone afterwards."""
    import queue
    from logging.handlers import QueueHandler

    root = logging.getLogger()
    before, level = root.handlers[:], root.level
    closed: queue.Queue = queue.Queue()
    with root_logger_kept():
        root.handlers.clear()
        root.addHandler(QueueHandler(closed))
        root.setLevel(logging.INFO)
    assert root.handlers == before and root.level == level
