"""Output paths a command may write: checked before any work, so nothing is spent on a run that cannot be written.

`check_out_folder` and `check_out_file` are the one check every output option goes through (`--out`, `--key`,
`--links`, …): a path below a file, a folder given for a file, a kernel filesystem (/proc, /sys), or a path on what
a run folder owns (`mindcore.runfolder.refuse_run_file`) is one `InputError` line naming the option. They live
apart from `mindcore.io` because the run-folder rule reads the run layout, which reads through `mindcore.io`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.runfolder import refuse_run_file


# Kernel views, not storage: a file cannot be created in them, and the OS says only "no such file".
PSEUDO_FILESYSTEMS = (Path("/proc"), Path("/sys"))


def pseudo_filesystem(path: str | os.PathLike[str]) -> Path | None:
    """The kernel filesystem (/proc, /sys) `path` lies in, or None for an ordinary path."""
    real = Path(os.path.abspath(path))
    return next((root for root in PSEUDO_FILESYSTEMS if real.is_relative_to(root)), None)


def _refuse_pseudo(path: Path, option: str) -> None:
    root = pseudo_filesystem(path)
    if root is not None:
        raise InputError(
            f"{option} {path}: inside {root}, a kernel filesystem where no file can be written; give a path on a disk"
        )


def check_out_folder(
    path: str | os.PathLike[str],
    option: str = "--out",
    *,
    allow: Iterable[str | os.PathLike[str]] = (),
    stage: str | None = None,
) -> Path:
    """An output folder the command may create or resume: refused (InputError) when it, or a folder above
    it, is a file, or when it lies inside what a run folder owns (`mindcore.runfolder.refuse_run_file`; `allow`:
    the paths there the command itself writes); checked before any work, so nothing is spent on a run that
    cannot be written."""
    path = Path(path)
    _refuse_pseudo(path, option)
    refuse_run_file(path, option, allow=allow, stage=stage)
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                what = "is a file" if p == path else f"sits below the file {p}"
                raise InputError(f"{option} {path}: {what}, not a folder; give a new folder (or one to resume)")
            break
    return path


def check_out_file(
    path: str | os.PathLike[str], option: str = "--out", *, allow: Iterable[str | os.PathLike[str]] = ()
) -> Path:
    """An output file (of any output option: `--out`, `--key`, …): refused when it names a folder, sits below a
    file, or would replace a file a run folder owns (`mindcore.runfolder.refuse_run_file`)."""
    path = Path(path)
    _refuse_pseudo(path, option)
    refuse_run_file(path, option, allow=allow)
    if path.is_dir():
        raise InputError(f"{option} {path}: a folder, not a file; give the file to write (e.g. {path / 'report.html'})")
    for p in path.parents:
        if p.exists():
            if not p.is_dir():
                raise InputError(f"{option} {path}: sits below the file {p}, not in a folder; give another path")
            break
    return path
