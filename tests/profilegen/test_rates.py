"""Rates files: the shipped default is valid and rebuilds from its spec; fitting; the sampler
reproduces a rates file per cell."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import yaml

from mindsimkit.mindcore.errors import ConfigError, InputError
from mindsimkit.profilegen.anchors import sample_anchor
from mindsimkit.profilegen.default_rates import build_default_rates
from mindsimkit.profilegen.personas import load_personas
from mindsimkit.profilegen.rates import NONE, Rates, dump_rates, fit_rates, load_rates, read_table
from mindsimkit.profilegen.schemas import AGE_BANDS
from mindsimkit.profilegen.vocab import load_vocabularies


def test_default_rates_rebuild_from_spec():
    shipped = load_rates()
    rebuilt = Rates.model_validate(yaml.safe_load(dump_rates(build_default_rates())))
    assert shipped.model_dump() == rebuilt.model_dump()
    # The paper's 20.7% empty secondary slot holds in every cell of the default prior.
    assert all(abs(c.probs[NONE] - 0.207) < 1e-6 for c in shipped.secondary)


def test_broken_rates_file_is_config_error(tmp_path):
    data = yaml.safe_load(dump_rates(load_rates()))
    data["main"] = data["main"][:-1]
    data["secondary"][0]["probs"]["low_mood"] = 0.5
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        load_rates(path)
    assert "main needs exactly one cell" in str(err.value)


def _synthetic_table(rates: Rates, n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        band, gender = AGE_BANDS[rng.integers(6)], ("man", "woman")[rng.integers(2)]
        mp = rates.main_probs(band, gender)
        main = list(mp)[rng.choice(len(mp), p=np.array(list(mp.values())) / sum(mp.values()))]
        sp = rates.secondary_probs(main, band, gender)
        sec = list(sp)[rng.choice(len(sp), p=np.array(list(sp.values())) / sum(sp.values()))]
        rows.append({"age_band": band, "gender": gender, "main": main, "secondary": "" if sec == NONE else sec})
    return rows


def test_fit_recovers_rates_and_smooths_empty_cells():
    truth = load_rates()
    fitted = fit_rates(_synthetic_table(truth, 30_000, seed=1), strength=20)
    for band in AGE_BANDS:
        for gender in ("man", "woman"):
            t, f = truth.main_probs(band, gender), fitted.main_probs(band, gender)
            assert max(abs(t[k] - f.get(k, 0)) for k in t) < 0.03
    # An unseen cell falls back to its margin, never to zeros.
    few = fit_rates([{"age_band": "18-24", "gender": "man", "main": "low_mood", "secondary": ""}] * 5)
    cell = few.main_probs("65+", "woman")
    assert min(cell.values()) > 0 and cell["low_mood"] == max(cell.values())
    assert few.secondary_probs("grief_and_loss", "65+", "woman").get("grief_and_loss", 0) == 0


def test_fit_rejects_bad_rows(tmp_path):
    with pytest.raises(InputError, match="row 2"):
        fit_rates(
            [
                {"age_band": "18-24", "gender": "man", "main": "low_mood", "secondary": ""},
                {"age_band": "18-24", "gender": "man", "main": "sadness", "secondary": ""},
            ]
        )
    (tmp_path / "t.csv").write_text("age_band,gender\n18-24,man\n")
    with pytest.raises(InputError, match="main"):
        read_table(tmp_path / "t.csv")


def test_sampler_reproduces_rates_per_cell():
    rates = load_rates()
    persona = load_personas("synthetic", 1, seed=0).rows[0]
    band, gender = persona.demographics.age_band, persona.demographics.gender
    n = 12_000
    anchors = []
    for i in range(n):
        row = persona.model_copy(update={"persona": persona.persona.model_copy(update={"persona_id": f"x{i}"})})
        anchors.append(sample_anchor(row, rates, seed=0))
    main = Counter(a.main_problem for a in anchors)
    for label, p in rates.main_probs(band, gender).items():
        tol = 4 * np.sqrt(p * (1 - p) / n) + 1e-3
        assert abs(main[label] / n - p) < tol, label
    # Secondary given the most frequent main problem, including the empty slot.
    top = main.most_common(1)[0][0]
    sub = [a for a in anchors if a.main_problem == top]
    sec = Counter(a.secondary_problem or NONE for a in sub)
    for label, p in rates.secondary_probs(top, band, gender).items():
        tol = 4 * np.sqrt(p * (1 - p) / len(sub)) + 1e-3
        assert abs(sec[label] / len(sub) - p) < tol, label
    assert all(a.secondary_problem != a.main_problem for a in anchors)
    assert {a.impact_domain for a in anchors} <= set(load_vocabularies().impact_domains)
