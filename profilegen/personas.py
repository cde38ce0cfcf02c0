"""Stage 1 — personas (MindEval2 §4.1 "Persona").

Reads records in the Nemotron-Personas-USA schema (NOTES §3) from the Hub through `datasets`
(streaming, seeded shuffle) or from a local parquet / JSONL file or folder, or the synthetic sample
shipped in `profilegen/data/`. Derives the paper's attributes with the rules and tables of
`data/derivation.yaml`: age band (under-18 rows skipped and counted), gender, relationship status,
employment (occupation and age), living situation (sampled given relationship and age band) and a
low/mid/high Big Five level per trait. Every random draw comes from a stream keyed by (seed, uuid), so
a persona derives the same whatever else is in the batch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
from pydantic import BaseModel, ConfigDict

from mindsimkit.mindcore.errors import ConfigError, InputError
from mindsimkit.profilegen.rng import choice, rng_for
from mindsimkit.profilegen.schemas import BigFive, Demographics, Persona, PersonaRow
from mindsimkit.profilegen.vocab import read_data

NEMOTRON_ID = "nvidia/Nemotron-Personas-USA"
SYNTHETIC = "synthetic"
SYNTHETIC_FILE = "synthetic_personas.jsonl"
# The columns this stage reads; the other Nemotron columns are allowed and ignored.
REQUIRED_COLUMNS = (
    "uuid",
    "persona",
    "professional_persona",
    "cultural_background",
    "hobbies_and_interests",
    "career_goals_and_ambitions",
    "sex",
    "age",
    "marital_status",
    "education_level",
    "occupation",
    "city",
    "state",
)
STREAM_BUFFER = 10_000


class _Derivation(BaseModel):
    model_config = ConfigDict(extra="ignore")
    age_bands: list[tuple[str, int, int | None]]
    gender: dict[str, str]
    relationship: dict[str, str]
    employment: dict[str, Any]
    living_situation: dict[str, dict[str, dict[str, float]]]
    big_five: dict[str, Any]


@lru_cache(maxsize=1)
def derivation() -> _Derivation:
    """The derivation rules and tables (data/derivation.yaml)."""
    try:
        return _Derivation.model_validate(read_data("derivation.yaml"))
    except ValueError as exc:
        raise ConfigError(f"profilegen/data/derivation.yaml is malformed: {exc}") from exc


@dataclass
class PersonaStage:
    """Stage 1 result: the derived rows and what was skipped."""

    rows: list[PersonaRow]
    source: str
    read: int = 0
    skipped_under_18: int = 0
    skipped_reasons: dict[str, int] = field(default_factory=dict)


def age_band(age: int) -> str | None:
    """The age band of an age, or None under 18."""
    for band, lo, hi in derivation().age_bands:
        if age >= lo and (hi is None or age <= hi):
            return band
    return None


def employment_status(occupation: str, band: str, education: str, rng: np.random.Generator) -> str:
    """Employment from occupation and age (rules in data/derivation.yaml)."""
    rules = derivation().employment
    occ = occupation.lower()
    if any(m in occ for m in rules["student_markers"]):
        return "student"
    if any(m in occ for m in rules["unemployed_markers"]):
        return "unemployed_seeking_work"
    if any(m in occ for m in rules["retired_markers"]):
        return "not_in_labour_force"
    if occ != rules["not_working_code"]:
        return "employed"
    # Draw both numbers up front so the stream position never depends on the branch taken.
    u_student, u_seek = rng.random(), rng.random()
    if (
        band in rules["student_age_bands"]
        and education in rules["student_education"]
        and u_student < rules["student_share"].get(band, 0.0)
    ):
        return "student"
    if u_seek < rules["seeking_work_share"][band]:
        return "unemployed_seeking_work"
    return "not_in_labour_force"


def _lookup(table: dict[str, str], value: Any, column: str, row_id: str) -> str:
    try:
        return table[str(value)]
    except KeyError:
        raise InputError(
            f"persona {row_id}: column '{column}' has value {value!r}, expected one of "
            f"{sorted(table)} (Nemotron-Personas-USA codes)"
        ) from None


def derive(record: dict[str, Any], seed: int, source: str) -> PersonaRow | None:
    """Derive one persona row; None when the person is under 18."""
    d = derivation()
    uid = str(record["uuid"])
    try:
        age = int(record["age"])
    except (TypeError, ValueError):
        raise InputError(f"persona {uid}: column 'age' is {record['age']!r}, expected an integer") from None
    band = age_band(age)
    if band is None:
        return None
    relationship = _lookup(d.relationship, record["marital_status"], "marital_status", uid)
    employment = employment_status(
        str(record["occupation"]), band, str(record["education_level"]), rng_for(seed, uid, "employment")
    )
    living = choice(rng_for(seed, uid, "living"), d.living_situation[relationship][band])
    trait_rng = rng_for(seed, uid, "big_five")
    big_five = BigFive(**{t: choice(trait_rng, d.big_five["levels"]) for t in d.big_five["traits"]})
    persona = Persona(
        persona_id=uid,
        age=age,
        source=source,
        **{c: "" if record.get(c) is None else str(record[c]) for c in REQUIRED_COLUMNS if c not in ("uuid", "age")},
    )
    demographics = Demographics(
        age_band=band,
        gender=_lookup(d.gender, record["sex"], "sex", uid),
        relationship=relationship,
        employment=employment,
        living_situation=living,
        big_five=big_five,
    )
    return PersonaRow(persona=persona, demographics=demographics)


def check_columns(columns: Iterable[str], where: str) -> None:
    """One error naming every missing column."""
    missing = [c for c in REQUIRED_COLUMNS if c not in set(columns)]
    if missing:
        raise InputError(
            f"{where} lacks persona column(s) {', '.join(missing)}; it must follow the "
            f"Nemotron-Personas-USA schema (see docs/profilegen.md)."
        )


def _local_records(path: Path) -> list[dict[str, Any]]:
    files = sorted(path.glob("*.parquet")) + sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    if not files:
        raise InputError(f"{path} holds no .parquet or .jsonl persona files")
    records: list[dict[str, Any]] = []
    for f in files:
        if f.suffix == ".parquet":
            import pyarrow.parquet as pq

            table = pq.read_table(f)
            check_columns(table.column_names, str(f))
            records.extend(table.to_pylist())
        elif f.suffix in (".jsonl", ".json"):
            with f.open(encoding="utf-8") as fh:
                for i, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise InputError(f"{f} line {i} is not JSON: {exc}") from exc
                    if i == 1:
                        check_columns(rec, str(f))
                    records.append(rec)
        else:
            raise InputError(f"{f}: persona files must be .parquet or .jsonl")
    return records


def _hub_records(dataset_id: str, seed: int) -> Iterator[dict[str, Any]]:
    import datasets

    try:
        stream = datasets.load_dataset(dataset_id, split="train", streaming=True)
    except Exception as exc:  # the Hub client raises many types for no network / no access
        raise InputError(
            f"cannot open persona dataset '{dataset_id}' from the Hub ({exc.__class__.__name__}: {exc}); "
            f"check network access or pass a local parquet/JSONL path, or '{SYNTHETIC}'."
        ) from exc
    if stream.column_names is not None:
        check_columns(stream.column_names, dataset_id)
    yield from stream.shuffle(seed=seed, buffer_size=STREAM_BUFFER)


def synthetic_path() -> Path:
    return Path(str(resources.files("mindsimkit.profilegen") / "data" / SYNTHETIC_FILE))


def record_stream(source: str, seed: int) -> tuple[Iterator[dict[str, Any]], str]:
    """Records in seeded random order, and the source label stored in each row."""
    if source in ("", SYNTHETIC):
        path = synthetic_path()
    else:
        path = Path(source).expanduser()
    if path.exists():
        records = _local_records(path)
        order = np.random.default_rng(seed).permutation(len(records))
        return (records[i] for i in order), path.name if source != SYNTHETIC else SYNTHETIC
    if "/" in source and not source.startswith((".", "/", "~")):
        return _hub_records(source, seed), source
    raise InputError(f"persona source '{source}' is neither an existing file/folder nor a Hub dataset id")


def load_personas(source: str, n: int, seed: int) -> PersonaStage:
    """Stage 1: up to `n` adult personas from `source`, derived, in seeded order."""
    stream, label = record_stream(source, seed)
    stage = PersonaStage(rows=[], source=label)
    for record in stream:
        if len(stage.rows) >= n:
            break
        if stage.read == 0:  # streams without declared features are checked on their first record
            check_columns(record, label)
        stage.read += 1
        row = derive(record, seed, label)
        if row is None:
            stage.skipped_under_18 += 1
            continue
        stage.rows.append(row)
    return stage
