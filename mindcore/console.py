"""The one way the toolkit builds rich consoles, so a line a user greps for reaches a pipe whole.

Rich hard-wraps printed text at the console width, and when output is not a terminal that width is
80 columns (or `$COLUMNS`): an error line holding a long path came out broken in two, and a test that
looked for "not found" found "not\\nfound". A line that a user greps for, pastes into an issue or
parses in CI must reach the pipe whole, so when the stream is not a terminal the consoles built here:

- never hard-wrap printed text (`soft_wrap`): one message is one line, however long;
- lay tables and rules out on a wide canvas instead of `$COLUMNS`, so cells holding paths are not
  cut with an ellipsis or folded because a CI runner exported a narrow width;
- emit no colour or style codes, whatever the terminal variables say.

On a terminal rich's own behaviour is kept (its width, colours, wrapping of long text to the window).

Every console built here passes what it writes through `mindcore.redact.scrub` (keys, URL user parts,
Authorization values), tables and progress lines included: nothing printed can carry a secret.
"""

from __future__ import annotations

import sys
from typing import TextIO

from rich.console import Console

from mindsimkit.mindcore.redact import scrub

# Wide enough for any path or table row the toolkit prints; not unbounded, because rules
# (`console.rule`) are drawn across the whole width.
PIPE_WIDTH = 320


def is_tty(stream: TextIO | None) -> bool:
    try:
        return bool(stream is not None and stream.isatty())
    except (AttributeError, ValueError):  # closed or exotic streams
        return False


class _ScrubbingConsole(Console):
    """A rich console whose rendered text is scrubbed of secrets just before it reaches the stream."""

    def _render_buffer(self, buffer):  # type: ignore[no-untyped-def]
        return scrub(super()._render_buffer(buffer))


def _console(stderr: bool) -> Console:
    if is_tty(sys.stderr if stderr else sys.stdout):
        return _ScrubbingConsole(stderr=stderr)
    # stderr=True (not file=sys.stderr): rich looks the stream up at print time, so output still goes
    # wherever sys.stderr points then (pytest's capture, typer's CliRunner).
    return _ScrubbingConsole(
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


def plain_tracebacks() -> None:
    """Undo a rich traceback hook a library installed for the whole process: distilabel's import runs
    `rich.traceback.install(show_locals=True)`, after which any uncaught exception prints every frame's local
    variables (an API key among them). Called where distilabel is imported and by the command line."""
    hook = sys.excepthook
    if (getattr(hook, "__module__", "") or "").startswith("rich"):
        sys.excepthook = sys.__excepthook__
