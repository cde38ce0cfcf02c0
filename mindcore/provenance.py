"""Where an artifact came from: toolkit version, git revision (and whether the tree was dirty),
Python, time. Stages add their own engines, models, prompt hashes and seeds."""

from __future__ import annotations

import datetime as dt
import platform
import subprocess
from pathlib import Path
from typing import Any

from mindsimkit.mindcore import __version__


def git_revision() -> dict[str, Any]:
    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=root,
                capture_output=True,
                text=True,
                timeout=5,
                check=True,
            ).stdout.strip()
        )
        return {"git_revision": rev, "git_dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"git_revision": None, "git_dirty": None}


def base_provenance() -> dict[str, Any]:
    return {
        "toolkit": "mindsim",
        "toolkit_version": __version__,
        **git_revision(),
        "python": platform.python_version(),
        "created_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
