"""The one gate every input file passes before it is read: it must be a regular file (a character device such as
/dev/zero, a FIFO or a socket never ends, or blocks, and a folder is not a file), no larger than a bound per
kind of file, and a line of a line-based file no longer than a bound; JSON is nested no deeper than a bound.

A reader asks here (`check_input`, `read_input_bytes`, `read_input_text`, `input_lines`, `loads_json`) instead of
calling `open` or `Path.read_text` itself, so a file that would take all memory or never end is one `error:` line
naming it, whichever command was given it. The bounds are far above any real file of that kind
(docs/commands.md, "Bounds on inputs")."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, Iterator

from mindsimkit.mindcore.errors import InputError, UserError

MIB = 1024 * 1024
# A recipe, a rubric, a prompt template, a taxonomy or marker file: hand-written YAML or text.
MAX_CONFIG_BYTES = 8 * MIB
# A whole-file JSON or CSV document read at once (a release's JSON, a Label Studio export, a ratings CSV).
MAX_DOCUMENT_BYTES = 512 * MIB
# One line of a JSONL file (a conversation with every turn, a profile with its sessions).
MAX_LINE_BYTES = 64 * MIB
# Arrays and objects inside one another in one JSON document: real files use fewer than 20.
MAX_JSON_DEPTH = 100

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
)


def _size(n: int) -> str:
    return f"{n / MIB:g} MiB" if n >= MIB else f"{n} bytes"


def check_input(
    path: str | os.PathLike[str], what: str = "input file", *, error: type[UserError] = InputError, hint: str = ""
) -> Path:
    """`path` if it is a regular file (links followed); else `error` naming it and what it is. Only `stat` is
    called: opening a FIFO would block until something writes to it."""
    path = Path(path)
    hint = f"; {hint}" if hint else ""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise error(f"{what} {path} not found{hint}") from None
    except OSError as exc:
        raise error(f"{what} {path} cannot be read ({exc.strerror or type(exc).__name__}){hint}") from None
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        raise error(f"{what} {path} is {kind}, not a regular file{hint or '; give the path of a file'}")
    return path


def read_input_bytes(
    path: str | os.PathLike[str],
    what: str = "input file",
    max_bytes: int | None = None,
    *,
    error: type[UserError] = InputError,
    hint: str = "",
) -> bytes:
    """The whole file, refused when it is larger than `max_bytes` (default `MAX_DOCUMENT_BYTES`); never more than
    that is read, whatever the file claims or becomes meanwhile."""
    max_bytes = MAX_DOCUMENT_BYTES if max_bytes is None else max_bytes
    path = check_input(path, what, error=error, hint=hint)
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise error(f"{what} {path} cannot be read ({exc.strerror or type(exc).__name__})") from None
    if len(data) > max_bytes:
        raise error(
            f"{what} {path} is larger than {_size(max_bytes)}, more than any such file holds; "
            "check that it is the right file"
        )
    return data


def read_input_text(
    path: str | os.PathLike[str],
    what: str = "input file",
    max_bytes: int | None = None,
    *,
    error: type[UserError] = InputError,
    hint: str = "",
) -> str:
    """`read_input_bytes` decoded as UTF-8 (a byte-order mark dropped); binary data or another encoding is
    `error` naming the line."""
    data = read_input_bytes(path, what, max_bytes, error=error, hint=hint)
    if b"\x00" in data:
        line = data[: data.index(b"\x00")].count(b"\n") + 1
        raise error(f"{what} {path}:{line}: binary data (a NUL byte), not a text file; give a UTF-8 text file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise error(f"{what} {path}:{line}: not UTF-8 text (byte {exc.start + 1}); save the file as UTF-8") from None


def input_lines(
    path: str | os.PathLike[str],
    what: str = "input file",
    max_line_bytes: int | None = None,
    *,
    error: type[UserError] = InputError,
    hint: str = "",
) -> Iterator[tuple[int, bytes]]:
    """(line number, raw bytes) of each line, refusing a line longer than `max_line_bytes` (default
    `MAX_LINE_BYTES`) when it gets there: a file of one endless line is not read into memory whole."""
    max_line_bytes = MAX_LINE_BYTES if max_line_bytes is None else max_line_bytes
    path = check_input(path, what, error=error, hint=hint)
    with open(path, "rb") as fh:
        n = 0
        while raw := fh.readline(max_line_bytes + 1):
            n += 1
            if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
                raise error(
                    f"{what} {path}:{n}: a line longer than {_size(max_line_bytes)}; one record per line "
                    "is far shorter, so this is not a JSONL file of this kind"
                )
            yield n, raw


def json_depth(obj: Any) -> int:
    """How deeply arrays and objects nest in `obj` (0 for a scalar), without recursion."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


class DuplicateKey(ValueError):
    """A JSON object gives one key twice: `json` keeps the last silently, so which value was meant is unknown."""

    def __init__(self, key: str):
        super().__init__(f"the key {key!r} is given twice in one object; keep one")
        self.key = key


def refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`object_pairs_hook` that refuses an object giving one key twice (`DuplicateKey`)."""
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise DuplicateKey(key)
        obj[key] = value
    return obj


def loads_json(
    text: str | bytes, where: str, max_depth: int = MAX_JSON_DEPTH, *, error: type[UserError] = InputError
) -> Any:
    """`json.loads(text)`, with an object that repeats a key and nesting deeper than `max_depth` refused as
    `error` at `where` (Python's parser recurses, so very deep nesting otherwise ends in a RecursionError).
    `json.JSONDecodeError` passes through for the caller to word."""
    try:
        obj = json.loads(text, object_pairs_hook=refuse_duplicates)
    except DuplicateKey as exc:
        raise error(f"{where}: {exc}") from None
    except RecursionError:
        raise error(
            f"{where}: JSON nested deeper than {max_depth} levels; no file of this kind nests so deep"
        ) from None
    if json_depth(obj) > max_depth:
        raise error(f"{where}: JSON nested deeper than {max_depth} levels; no file of this kind nests so deep")
    return obj
