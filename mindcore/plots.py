"""The one way reports draw PNGs: matplotlib imported only when a plot is drawn (it costs about a second of
start-up, and most commands draw none), its file-only backend (no display is ever needed), and every image
written atomically like the other outputs."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from mindsimkit.mindcore.io import atomic_write_bytes


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Any, path: Path) -> Path:
    """Write `fig` to `path` (120 dpi, tight) in one atomic step and release it."""
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    finally:
        pyplot().close(fig)
    atomic_write_bytes(Path(path), buf.getvalue())
    return Path(path)
