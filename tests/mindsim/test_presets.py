"""`simulation.preset`: names checked against mindsim/data/presets.yaml, at most one preset per engine, only for
engines the recipe runs, and a preset's settings filled in under the recipe's own values."""

from __future__ import annotations

import pytest

from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindsim import presets
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.presets import Preset


def sim(**section):
    return SimulationConfig.from_section(section)


def test_no_preset_is_ours_for_every_engine_and_stays_out_of_dumps():
    cfg = sim(patient_engine=["mindsim", "patientact:no_tg"])
    assert cfg.presets == {} and cfg.preset_for("mindsim") == cfg.preset_for("patientact:no_tg") == "ours"
    assert "preset" not in cfg.model_dump()


def test_a_reference_preset_applies_to_its_engine_and_every_arm():
    cfg = sim(patient_engine=["mindsim", "patientact", "patientact:no_dm"], preset=["patientact-reference"])
    assert cfg.preset_for("patientact") == cfg.preset_for("patientact:no_dm") == "patientact-reference"
    assert cfg.preset_for("mindsim") == "ours"
    assert cfg.model_dump()["preset"] == ["patientact-reference"]


@pytest.mark.parametrize(
    "section, words",
    [
        ({"preset": "nope"}, "unknown preset 'nope'"),
        ({"preset": ["ours", 3]}, "simulation.preset"),
        ({"preset": "patientact-reference"}, "which patient_engine does not run"),
        ({"preset": ["mindeval2-reference", "mindeval2-reference"]}, "name each preset once"),
    ],
)
def test_bad_presets_are_one_clear_error(section, words):
    with pytest.raises(ConfigError, match="simulation") as err:
        sim(**section)
    assert words in str(err.value)


@pytest.fixture
def two_presets(monkeypatch):
    table = {
        "ours": Preset(description="d", engine=None, source="ours"),
        "a-reference": Preset(
            description="a",
            engine="mindsim",
            source="s",
            settings={"turn_cap": 31, "patientact": {"carry_trust": False}},
        ),
        "b-reference": Preset(
            description="b",
            engine="patientact",
            source="s",
            settings={"turn_cap": 15, "patientact": {"allow_end": False}},
        ),
        "c-reference": Preset(description="c", engine="mindsim", source="s"),
    }
    monkeypatch.setattr(presets, "table", lambda: table)


def test_settings_fill_in_under_the_recipes_own(two_presets):
    cfg = sim(preset="a-reference")
    assert cfg.turn_cap == 31 and cfg.patientact.carry_trust is False and cfg.patientact.allow_end is True
    own = sim(preset="a-reference", turn_cap=4, patientact={"carry_trust": True})
    assert own.turn_cap == 4 and own.patientact.carry_trust is True


def test_two_presets_of_one_engine_or_clashing_settings_are_refused(two_presets):
    both = ["mindsim", "patientact"]
    with pytest.raises(ConfigError, match="both presets of engine 'mindsim'"):
        sim(preset=["a-reference", "c-reference"], patient_engine=both)
    with pytest.raises(ConfigError, match="set turn_cap differently; set it in the recipe"):
        sim(preset=["a-reference", "b-reference"], patient_engine=both)
    cfg = sim(preset=["a-reference", "b-reference"], patient_engine=both, turn_cap=6)
    assert cfg.turn_cap == 6 and cfg.patientact.carry_trust is False and cfg.patientact.allow_end is False


def test_the_shipped_table_reads_and_names_its_sources():
    presets.table.cache_clear()
    shipped = presets.table()
    assert shipped["ours"].engine is None
    for name, p in shipped.items():
        if name != "ours":
            assert name.endswith("-reference") and p.engine and p.paper and p.source
    assert presets.data_file("ours", "moves") is None
