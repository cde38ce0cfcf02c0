"""The recipe's profiles: section."""

from __future__ import annotations

import pytest

from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.recipe import Recipe
from mindsimkit.profilegen.config import ProfilesConfig


def test_defaults_match_the_paper():
    cfg = ProfilesConfig()
    assert (cfg.candidates, cfg.pool_size, cfg.benchmark_size, cfg.poor_qol_floor) == (1000, 100, 50, 0.10)


def test_typo_and_inconsistent_sizes_name_the_field():
    r = Recipe(
        name="t",
        engines={"local": {"kind": "embedded"}},
        roles={"default": {"engine": "local"}},
        profiles={"pool_sise": 10},
    )
    with pytest.raises(ConfigError, match="profiles.pool_sise"):
        r.section("profiles", ProfilesConfig)
    with pytest.raises(ValueError, match="benchmark_size"):
        ProfilesConfig(pool_size=10, benchmark_size=20)
