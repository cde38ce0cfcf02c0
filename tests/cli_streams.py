"""What tests read from a `mindsim` subprocess: its console script, and its stderr without the plain progress lines
that every command writes there when stderr is not a terminal (mindcore/runner.py), which is always the case in a
test's pipe."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

PROGRESS_LINE = re.compile(
    r"^\[\d\d:\d\d:\d\d\] progress: .+: \d+(/\d+)? (started|running|done|stopped), "
    r"\d+:\d\d:\d\d elapsed(, waiting on .+)?$"
)


def without_progress(text: str) -> str:
    """`text` with its progress lines taken out."""
    return "".join(ln for ln in text.splitlines(keepends=True) if not PROGRESS_LINE.match(ln.rstrip("\r\n")))


def mindsim_script() -> str | None:
    """The `mindsim` script of the interpreter running the suite (its environment's bin folder, whether or not
    that folder is on PATH), else the one on PATH."""
    return shutil.which("mindsim", path=str(Path(sys.executable).parent)) or shutil.which("mindsim")
