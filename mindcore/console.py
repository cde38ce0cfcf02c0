"""The one way the toolkit builds rich consoles (issue 9, item 8).

Rich hard-wraps printed text at the console width, and when output is not a terminal that width is
80 columns (or `$COLUMNS`): an error line holding a long path came out broken in two, and a test that
looked for "not found" found "not\\nfound". A line that a user greps for, pastes into an issue or
parses in CI must reach the pipe whole, so when the stream is not a terminal the consoles built here:

- never hard-wrap printed text (`soft_wrap`): one message is one line, however long;
- lay tables and rules out on a wide canvas instead of `$COLUMNS`, so cells holding paths are not
  cut with an ellipsis or folded because a CI runner exported a narrow width;
- emit no colour or style codes, whatever the terminal variables say.

On a terminal rich's own behaviour is kept (its width, colours, wrapping of long text to the window).
"""

from __future__ import annotations

import sys
from typing import TextIO

from rich.console import Console

# Wide enough for any path or table row the toolkit prints; not unbounded, because rules
# (`console.rule`) are drawn across the whole width.
PIPE_WIDTH = 320


def is_tty(stream: TextIO | None) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):  # closed or exotic streams
        return False


def _console(stderr: bool) -> Console:
    if is_tty(sys.stderr if stderr else sys.stdout):
        return Console(stderr=stderr)
    # stderr=True (not file=sys.stderr): rich looks the stream up at print time, so output still goes
    # wherever sys.stderr points then (pytest's capture, typer's CliRunner).
    return Console(
        stderr=stderr,
        soft_wrap=True,
        width=PIPE_WIDTH,
        color_system=None,
        force_terminal=False,
        highlight=False,
        emoji=False,
    )


def one_line(text: object) -> str:
    """A message as one line: lines of a multi-line message (a list of problems, a library's error
    with details) are joined with "; ", a "- " bullet dropped; nothing is cut."""
    out = ""
    for line in (ln.strip().removeprefix("- ").strip() for ln in str(text).splitlines()):
        if line:
            out = line if not out else out + (" " if out.endswith(":") else "; ") + line
    return out


def err_console() -> Console:
    """Console for errors, warnings and hints (stderr)."""
    return _console(stderr=True)


def out_console() -> Console:
    """Console for results: tables, summaries, progress lines (stdout)."""
    return _console(stderr=False)
