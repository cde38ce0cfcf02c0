"""Reading and writing the profile dataset folder (MindEval2 §4.1 output; the profiles → simulator
contract in docs/architecture.md).

Layout of `<out>/profiles/` (paths: `mindcore.layout.ProfilesFolder`):
- `profiles.parquet`  one `Profile` per row, nested parts as struct columns (loads with
  `datasets.load_dataset("parquet", data_files=...)`).
- `case_summaries/<profile_id>.md`  the rendered case summary the patient prompt shows.
- `pool_table.md` (pool vs population), `summary.json`, `failures.jsonl`, `provenance.json`  written by the pipeline.
"""

from __future__ import annotations

from pathlib import Path

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
    raise InputError(
        f"No {name} under {folder}: pass the folder written by `mindsim profiles` "
        f"(it contains {name})."
    )


def write_profiles(profiles: list[Profile], folder: str | Path) -> Path:
    """Write profiles and their rendered case summaries into `folder`; returns the parquet path."""
    layout = ProfilesFolder(Path(folder))
    out = atomic_write_parquet(layout.parquet, [p.model_dump(mode="json") for p in profiles])
    for p in profiles:
        atomic_write_text(layout.case_summary(p.profile_id), p.case_summary + "\n")
    return out


def load_profiles(folder: str | Path, pool_only: bool = True) -> list[Profile]:
    """Load the profiles of a dataset folder; only the validation pool unless `pool_only=False`."""
    from mindsimkit.mindcore.runlog import read_table

    path = resolve_parquet(folder)
    profiles = read_table(path, Profile, what="profiles table",
                          remake="write it again with `mindsim profiles` or `mindsim run` (a file of another toolkit version cannot be read)")
    return [p for p in profiles if p.in_pool] if pool_only else profiles
