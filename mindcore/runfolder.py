"""What a run folder owns, and who is writing it.

`refuse_run_file`: an output option (`--out`, `--key`, …) of a command that is not the stage writing that path
must not land on a file the run owns — its header, its manifest, its page, or anything inside a stage folder. A
table replaced there would be taken for the stage's own work by every later reader (or refused by the manifest
check with a misleading "changed after the stage wrote it"). `mindcore.outputs.check_out_file` and
`check_out_folder` call it, so every command's output options are checked by the same rule.

`run_lock`: one job at a time writes a run folder. The lock is an advisory `flock` on `RUN/.mindsim.lock`, which
the kernel drops when the holding process ends however it ends, so a killed job never leaves a stale lock; the
file holds who took it (pid, command, start time) for the refusal line of the next job.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterable, Iterator

from mindsimkit.mindcore.errors import InputError, UserError
from mindsimkit.mindcore.layout import RunLayout, run_file_names

LOCK_NAME = ".mindsim.lock"


def _owned_names() -> frozenset[str]:
    """The first path component of every path the layout names (run.json, sessions, judgments, …)."""
    names = set(run_file_names())
    # Written by `judge run --rubric FILE` and `patientact profile-eval` beside the layout's own stage folders.
    return frozenset(names | {"rubric_judge", "patientact_profile_eval", LOCK_NAME})


OWNED = _owned_names()


def is_run_folder(path: Path) -> bool:
    layout = RunLayout(path)
    try:
        return bool(layout.run_json.is_file() or layout.manifest.is_file())
    except OSError:  # a folder above the output the user may not list (e.g. another user's home) holds no run of theirs
        return False


def owning_run(path: str | os.PathLike[str]) -> Path | None:
    """The nearest run folder strictly above `path` (symlinks and `..` resolved), or None."""
    resolved = Path(path).resolve()
    for parent in resolved.parents:
        if is_run_folder(parent):
            return parent
    return None


def refuse_run_file(
    path: str | os.PathLike[str], option: str, *, allow: Iterable[str | os.PathLike[str]] = (), stage: str | None = None
) -> None:
    """InputError when `path` (a file, or a folder the command fills) lies on what a run folder owns: its
    run.json, run_manifest.json, report.html, or anything inside one of its stage folders. `allow`: paths the
    calling command itself writes there (`report --out RUN/report.html`); `stage`: the run's top-level folder the
    calling command is the stage of (`validate compare --out RUN/validation` reruns the run's validation, which the
    manifest then records)."""
    resolved = Path(path).resolve()
    if any(resolved == Path(a).resolve() for a in allow):
        return
    run = owning_run(resolved)
    if run is None:
        return
    top = resolved.relative_to(run).parts[0]
    if top not in OWNED or top == stage:
        return
    where = "is" if resolved == run / top else "inside"
    raise InputError(
        f"{option} {path}: {where} {run / top}, which the run {run} owns (its stages write and check it); "
        f"write it outside the run's own files, e.g. {run / 'exports' / resolved.name}"
    )


# Locks this process holds, by resolved folder: a command that calls another stage's code inside the same job
# takes the lock again without refusing itself (two flocks of one process on one file conflict).
_held: dict[Path, tuple[IO[str], int]] = {}
_held_lock = threading.Lock()


def _holder(lock_file: Path) -> str:
    try:
        info = json.loads(lock_file.read_text(encoding="utf-8"))
        return f"pid {info['pid']} (`{info['command']}`, since {info['started_utc']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


@contextmanager
def run_lock(folder: str | os.PathLike[str], command: str | None = None) -> Iterator[None]:
    """Hold the run folder's write lock for the block, or refuse (UserError, exit 2) at once when another
    process holds it, naming the holder. The lock file is removed when the block ends, and a folder made only to
    hold it too, so a command refused before its work leaves nothing behind."""
    root = Path(folder).resolve()
    with _held_lock:
        if root in _held:
            f, depth = _held[root]
            _held[root] = (f, depth + 1)
            nested = True
        else:
            nested = False
    made = not root.exists()
    if not nested:
        f = _take(root, folder, command)
        with _held_lock:
            _held[root] = (f, 1)
    try:
        yield
    finally:
        with _held_lock:
            f, depth = _held[root]
            if depth > 1:
                _held[root] = (f, depth - 1)
            else:
                del _held[root]
                _release(root, f, made)


def _take(root: Path, folder: str | os.PathLike[str], command: str | None) -> IO[str]:
    root.mkdir(parents=True, exist_ok=True)
    lock_file = root / LOCK_NAME
    while True:
        f = open(lock_file, "a+", encoding="utf-8")
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            raise UserError(
                f"{folder}: another mindsim job is writing this run folder: {_holder(lock_file)}; wait for it to "
                "finish (or stop it), then rerun — or give another --out"
            ) from None
        # The holder removes the file as it lets go: a lock taken on a file already removed guards nothing,
        # so take it again on the file that is there now.
        try:
            same = os.fstat(f.fileno()).st_ino == os.stat(lock_file).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        f.close()
    f.seek(0)
    f.truncate()
    f.write(
        json.dumps(
            {
                "pid": os.getpid(),
                "command": command or _this_command(),
                "started_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            }
        )
    )
    f.flush()
    return f


def _release(root: Path, f: IO[str], made: bool) -> None:
    # Removed while still locked, so no other job can hold a lock on this file once it is gone; unlocked before
    # closing, because a forked child (distilabel's pool) shares the open file and would keep the lock.
    (root / LOCK_NAME).unlink(missing_ok=True)
    fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    f.close()
    if made:
        try:
            root.rmdir()  # only when the command wrote nothing else
        except OSError:
            pass


def _this_command() -> str:
    from mindsimkit.mindcore.redact import scrub

    args = " ".join(sys.argv[1:4])
    return scrub(f"mindsim {args}" + (" …" if len(sys.argv) > 4 else ""))
