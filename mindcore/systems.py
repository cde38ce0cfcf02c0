"""One name for every system a report compares: the patient engine, or engine variant,
that played the patient × the counsellor under test, written `ENGINE/COUNSELLOR` — e.g. `mindsim/counsellor`,
`patientact:no_tg/counsellor:gpt`. Validation, both judges' reports, rankings, the HTML report and the card
all build names here, so one system has one name across a run's outputs.

One abbreviation, the same everywhere: a report whose rows name a single patient engine compares
counsellors, and names each by its counsellor alone (the engine part would be the same on every line; MHQR
reports have always read so). Rows from a simulator that does not name its patient side carry
`mindcore.runlog.UNNAMED_ENGINE` (`played_by`). Both parts are kept apart by the first `/` (engine and variant names never hold one; a
counsellor name may).
"""

from __future__ import annotations

from typing import Iterable

from mindsimkit.mindcore.runlog import played_by

SEPARATOR = "/"


def system_name(engine: str | None, counsellor: str) -> str:
    return f"{played_by(engine, ours=False)}{SEPARATOR}{counsellor}"


def split_system(name: str) -> tuple[str, str]:
    """(engine, counsellor) of a full name."""
    engine, sep, counsellor = name.partition(SEPARATOR)
    if not sep or not engine or not counsellor:
        raise ValueError(f"'{name}' is not a system name (ENGINE{SEPARATOR}COUNSELLOR)")
    return engine, counsellor


def report_label(engine: str | None, counsellor: str, several_engines: bool) -> str:
    """The name a report shows: the full name when its rows name several patient engines, else the counsellor."""
    return system_name(engine, counsellor) if several_engines else counsellor


def several(engines: Iterable[str | None]) -> bool:
    """True when rows name more than one patient engine (a row naming none counts as unnamed, `played_by`)."""
    return len({played_by(e, ours=False) for e in engines}) > 1
