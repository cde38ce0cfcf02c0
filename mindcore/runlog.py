"""The run folder as a typed log: models of what the stages write, read back only through `RunLayout`.

This module is the bottom of every reading path (judge/ and validation/ import it too).
"""

from __future__ import annotations

# Who played the patient of a row that names no engine is decided here (`played_by`), nowhere else. Rows of our
# own run folders written before `patient_engine` existed were played by MindSim's patient; rows from another
# simulator that does not say are unnamed.
DEFAULT_ENGINE = "mindsim"
UNNAMED_ENGINE = "unknown"


def played_by(engine: str | None, *, ours: bool = True) -> str:
    """The patient engine of a row that says `engine` (None or "" when it says none). `ours`: the row comes from a
    run folder of this toolkit (then a missing engine is MindSim's), not from another simulator's transcripts."""
    if engine:
        return engine
    return DEFAULT_ENGINE if ours else UNNAMED_ENGINE
