"""The one shard plan of the Ray runner (`mindcore.shards.plan_shards`), shared by simulation, judging and
arc labelling: a stable split by key, never more shards than items, only non-empty shards handed out."""

from __future__ import annotations

from mindsimkit.mindcore.recipe import RaySettings
from mindsimkit.mindcore.shards import plan_shards, stable_shard


def test_items_sharing_a_key_land_in_one_shard_in_input_order():
    items = [(f"p{i % 5}", i) for i in range(20)]  # 5 patients, 4 items each
    plan = plan_shards(items, lambda it: it[0], RaySettings(workers=2, shards_per_worker=3))
    assert (plan.workers, plan.shards) == (2, 6)
    assert sorted(i for _, part in plan.parts for _, i in part) == list(range(20))
    for shard, part in plan.parts:
        assert part and all(stable_shard(key, 6) == shard for key, _ in part)
        assert [i for _, i in part] == sorted(i for _, i in part)
    assert [s for s, _ in plan.parts] == sorted({stable_shard(f"p{k}", 6) for k in range(5)})
    again = plan_shards(items, lambda it: it[0], RaySettings(workers=2, shards_per_worker=3))
    assert again == plan


def test_never_more_shards_than_items():
    plan = plan_shards(["a", "b"], str, RaySettings(workers=8, shards_per_worker=4))
    assert plan.shards == 2 and sum(len(p) for _, p in plan.parts) == 2
    empty = plan_shards([], str, RaySettings(workers=8))
    assert empty.shards == 1 and empty.parts == []
