"""The dataset folder: parquet round trip, pool filter, datasets.load_dataset, clear errors."""

from __future__ import annotations

import pytest

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore import runlog
from mindsimkit.mindcore.io import atomic_write_parquet
from mindsimkit.profilegen.dataset import PackedProfile, iter_profiles, load_profiles, unpacked, write_profiles
from mindsimkit.profilegen.testing import make_profiles


def test_roundtrip_pool_filter_and_datasets(tmp_path):
    profiles = make_profiles(6, seed=1)
    profiles[2] = profiles[2].model_copy(update={"in_pool": True, "in_benchmark": True})
    profiles[4] = profiles[4].model_copy(update={"in_pool": True})
    write_profiles(profiles, tmp_path)
    assert load_profiles(tmp_path, pool_only=False) == profiles
    assert [p.profile_id for p in load_profiles(tmp_path)] == [profiles[2].profile_id, profiles[4].profile_id]
    assert load_profiles(tmp_path.parent / tmp_path.name) == load_profiles(tmp_path / "profiles.parquet")
    assert (tmp_path / "case_summaries" / f"{profiles[0].profile_id}.md").read_text().strip() == profiles[
        0
    ].case_summary

    import datasets

    ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "profiles.parquet"), split="train")
    assert ds.num_rows == 6 and ds[2]["style"]["archetype"] == profiles[2].style.archetype


def test_missing_or_broken_folder(tmp_path):
    with pytest.raises(InputError, match="profiles.parquet"):
        load_profiles(tmp_path)
    (tmp_path / "profiles.parquet").write_text("not parquet")
    with pytest.raises(InputError, match="not a readable parquet"):
        load_profiles(tmp_path)


def test_profiles_read_lazily_in_batches_and_a_bad_row_names_its_place(tmp_path, monkeypatch):
    """`iter_profiles` decodes a few rows at a time: the same profiles as `load_profiles`, the file checked when it
    is called, a row the schema refuses named by its number when the iteration reaches it."""
    monkeypatch.setattr(runlog, "TABLE_BATCH_ROWS", 2)
    profiles = make_profiles(5, seed=2)
    profiles[3] = profiles[3].model_copy(update={"in_pool": True})
    write_profiles(profiles, tmp_path / "ok")
    lazy = iter_profiles(tmp_path / "ok", pool_only=False)
    assert not isinstance(lazy, list) and list(lazy) == profiles
    assert [p.profile_id for p in iter_profiles(tmp_path / "ok")] == [profiles[3].profile_id]
    with pytest.raises(InputError, match="profiles.parquet"):
        iter_profiles(tmp_path / "missing")  # at the call, before anything is iterated
    rows = [p.model_dump(mode="json") for p in profiles]
    rows[3]["style"]["register"] = "shouting"  # a value no Register allows, in the second batch of two
    atomic_write_parquet(tmp_path / "bad" / "profiles.parquet", rows)
    lazy = iter_profiles(tmp_path / "bad", pool_only=False)
    assert [next(lazy).profile_id for _ in range(3)] == [p.profile_id for p in profiles[:3]]
    with pytest.raises(InputError, match=r"row 3: not a profiles table row \(style.register"):
        next(lazy)


def test_a_packed_profile_unpacks_equal_and_is_smaller():
    for profile in make_profiles(20, seed=4):
        packed = PackedProfile.of(profile)
        assert packed.profile_id == profile.profile_id and unpacked(packed) == profile
        assert len(packed.data) < len(profile.model_dump_json()) / 1.5  # compressed, not only serialised
        assert unpacked(profile) is profile
