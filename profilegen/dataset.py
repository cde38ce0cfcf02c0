"""Reading and writing the profile dataset folder (MindEval2 §4.1 output; the profiles → simulator
contract in docs/architecture.md).

Layout of `<out>/profiles/` (paths: `mindcore.layout.ProfilesFolder`):
- `profiles.parquet`  one `Profile` per row, nested parts as struct columns (loads with
  `datasets.load_dataset("parquet", data_files=...)`).
- `case_summaries/<profile_id>.md`  the rendered case summary the patient prompt shows.
- `pool_table.md` (pool vs population), `summary.json`, `failures.jsonl`, `provenance.json`  written by the pipeline.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Iterator, NamedTuple

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.io import atomic_write_parquet, atomic_write_text
from mindsimkit.mindcore.layout import ProfilesFolder, RunLayout
from mindsimkit.profilegen.schemas import Profile


def resolve_parquet(folder: str | Path) -> Path:
    """The parquet file of a dataset folder; accepts the run folder or its `profiles/` child."""
    folder = Path(folder)
    for candidate in (ProfilesFolder(folder).parquet, RunLayout(folder).profiles.parquet, folder):
        if candidate.is_file() and candidate.suffix == ".parquet":
            return candidate
    name = ProfilesFolder(folder).parquet.name
    raise InputError(f"No {name} under {folder}: pass the folder written by `mindsim profiles` (it contains {name}).")


def write_profiles(profiles: list[Profile], folder: str | Path) -> Path:
    """Write profiles and their rendered case summaries into `folder`; returns the parquet path."""
    layout = ProfilesFolder(Path(folder))
    summaries = [layout.case_summary(p.profile_id) for p in profiles]  # every id checked before anything is written
    out = atomic_write_parquet(layout.parquet, [p.model_dump(mode="json") for p in profiles])
    for p, path in zip(profiles, summaries):
        atomic_write_text(path, p.case_summary + "\n")
    return out


def iter_profiles(folder: str | Path, pool_only: bool = True) -> Iterator[Profile]:
    """The profiles of a dataset folder one at a time (the table is decoded a batch of rows at a time); only the
    validation pool unless `pool_only=False`. A missing or unreadable file fails here, a bad row when reached."""
    from mindsimkit.mindcore.runlog import iter_table

    rows = iter_table(
        resolve_parquet(folder),
        Profile,
        what="profiles table",
        remake="write it again with `mindsim profiles` or `mindsim run` (a file of another toolkit "
        "version cannot be read)",
    )
    return (p for p in rows if p.in_pool) if pool_only else rows


def load_profiles(folder: str | Path, pool_only: bool = True) -> list[Profile]:
    """Load the profiles of a dataset folder; only the validation pool unless `pool_only=False`."""
    return list(iter_profiles(folder, pool_only))


class PackedProfile(NamedTuple):
    """A profile held as compressed JSON, for a run that keeps thousands while it works on a few at a time (the
    simulator's patients): 1.9 KiB for a model-written profile of ~5 KB of JSON whose objects take ~23
    KiB (zlib's fastest level: ~25 µs to pack, ~10 µs to unpack). `unpack()` gives back an equal `Profile`."""

    profile_id: str
    data: bytes

    @classmethod
    def of(cls, profile: Profile) -> "PackedProfile":
        return cls(profile.profile_id, zlib.compress(profile.model_dump_json().encode(), 1))

    def unpack(self) -> Profile:
        return Profile.model_validate_json(zlib.decompress(self.data))


def unpacked(patient: Profile | PackedProfile) -> Profile:
    """The profile of a run's patient, whichever way the run holds it."""
    return patient.unpack() if isinstance(patient, PackedProfile) else patient
