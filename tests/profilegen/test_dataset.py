"""The dataset folder: parquet round trip, pool filter, datasets.load_dataset, clear errors."""

from __future__ import annotations

import pytest

from mindsimkit.mindcore.errors import InputError
from mindsimkit.profilegen.dataset import load_profiles, write_profiles
from mindsimkit.profilegen.testing import make_profiles


def test_roundtrip_pool_filter_and_datasets(tmp_path):
    profiles = make_profiles(6, seed=1)
    profiles[2] = profiles[2].model_copy(update={"in_pool": True, "in_benchmark": True})
    profiles[4] = profiles[4].model_copy(update={"in_pool": True})
    write_profiles(profiles, tmp_path)
    assert load_profiles(tmp_path, pool_only=False) == profiles
    assert [p.profile_id for p in load_profiles(tmp_path)] == [profiles[2].profile_id, profiles[4].profile_id]
    assert load_profiles(tmp_path.parent / tmp_path.name) == load_profiles(tmp_path / "profiles.parquet")
    assert (tmp_path / "case_summaries" / f"{profiles[0].profile_id}.md").read_text().strip() == profiles[0].case_summary

    import datasets

    ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "profiles.parquet"), split="train")
    assert ds.num_rows == 6 and ds[2]["style"]["archetype"] == profiles[2].style.archetype


def test_missing_or_broken_folder(tmp_path):
    with pytest.raises(InputError, match="profiles.parquet"):
        load_profiles(tmp_path)
    (tmp_path / "profiles.parquet").write_text("not parquet")
    with pytest.raises(InputError, match="not a readable parquet"):
        load_profiles(tmp_path)
