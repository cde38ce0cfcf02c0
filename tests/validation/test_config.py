import pytest
from pydantic import ValidationError

from mindsimkit.mindcore.recipe import Recipe
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.validation.config import ValidationConfig, shipped_reference_path
from mindsimkit.validation.reference import load_reference


def test_defaults_follow_the_paper():
    cfg = ValidationConfig()
    assert (cfg.bootstrap_draws, cfg.floor_splits, cfg.ci_level, cfg.floor_quantile) == (1000, 100, 0.95, 0.95)
    assert (cfg.patient_role, cfg.mtld_threshold, cfg.arc_context_messages, cfg.arc_stretches) == ("user", 0.72, 4, 5)
    assert cfg.reference_path() == shipped_reference_path()
    assert load_reference(cfg.reference_path()).counts["conversations_used"] == 106


def test_typos_name_the_field():
    with pytest.raises(ValidationError, match="bootstrap_drawz"):
        ValidationConfig(bootstrap_drawz=10)
    recipe = Recipe(
        name="t",
        engines={"local": {"kind": "embedded"}},
        roles={"default": {"engine": "local"}},
        validation={"floor_split": 3},
    )
    with pytest.raises(ConfigError, match="validation.floor_split"):
        recipe.section("validation", ValidationConfig)
