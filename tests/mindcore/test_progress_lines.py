"""Progress that a log can show: when stderr is not a terminal, each progress task writes plain lines (start,
a line every interval while it runs, end), so a job whose output goes to a file or a CI log is never silent for
minutes."""

from __future__ import annotations

import asyncio
import io
import re
import time

from mindsimkit.mindcore import runner
from mindsimkit.mindcore.runner import LoggedProgress, gather_progress, progress_bar

LINE = re.compile(
    r"^\[\d\d:\d\d:\d\d\] progress: (.+): (\d+)/(\d+) (started|running|done|stopped), "
    r"(\d+):(\d\d):(\d\d) elapsed$"
)


def _parsed(text: str) -> list[tuple[str, int, int, str]]:
    out = []
    for line in text.splitlines():
        m = LINE.match(line)
        assert m, f"not a progress line: {line!r}"
        out.append((m[1], int(m[2]), int(m[3]), m[4]))
    return out


def test_a_task_reports_its_start_its_ticks_and_its_end():
    stream = io.StringIO()
    with LoggedProgress(interval_s=0.05, stream=stream, disable=True) as bar:
        task = bar.add_task("sessions", total=3)
        for _ in range(3):
            time.sleep(0.12)
            bar.advance(task)
    lines = _parsed(stream.getvalue())
    assert lines[0] == ("sessions", 0, 3, "started")
    assert lines[-1] == ("sessions", 3, 3, "done")
    ticks = [n for what, n, _, event in lines if event == "running"]
    assert len(ticks) >= 3 and ticks == sorted(ticks)
    assert [e for *_, e in lines].count("done") == 1  # stop() after the end adds nothing


def test_an_unfinished_task_is_reported_as_stopped():
    stream = io.StringIO()
    with LoggedProgress(interval_s=60, stream=stream, disable=True) as bar:
        task = bar.add_task("judge", total=5)
        bar.update(task, advance=2)
    assert _parsed(stream.getvalue()) == [("judge", 0, 5, "started"), ("judge", 2, 5, "stopped")]


def test_progress_lines_go_to_stderr_only_when_it_is_not_a_terminal(monkeypatch, capsys):
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("MINDSIM_PROGRESS_INTERVAL_S", "0.05")
    assert isinstance(progress_bar(), LoggedProgress)  # pytest's captured stderr is not a terminal

    async def slow(i: int) -> int:
        await asyncio.sleep(0.03 * i)
        return i

    assert asyncio.run(gather_progress([slow(i) for i in range(4)], "dpo turns")) == [0, 1, 2, 3]
    err = capsys.readouterr().err
    events = [e for *_, e in _parsed(err)]
    assert events[0] == "started" and events[-1] == "done"

    monkeypatch.setattr(runner.sys, "stderr", Tty())
    assert not isinstance(progress_bar(), LoggedProgress)
