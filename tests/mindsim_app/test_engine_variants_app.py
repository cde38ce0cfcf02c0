"""The app reads patient engines through the registry: a recipe naming a variant gets its
engine's budgets and roles in preflight, and the dataset card counts the variant and shows its engine's section."""

from __future__ import annotations

import pytest

from mindsimkit.mindcore.budget_fit import fit_budgets
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.preflight import preflight
from mindsimkit.mindcore.recipe import Recipe
from test_patientact_downstream import MINDSIM_SCHEMAS, _both_engines_run, _card, _sessions, _two_engines


def _recipe(engine, simulation=None):
    return Recipe(
        name="t",
        engines={"local": {"kind": "embedded"}},
        roles={"default": {"engine": "local"}},
        simulation={"patient_engine": engine, **(simulation or {})},
    )


@pytest.mark.parametrize("engine", ["patientact:no_tg", ["patientact:no_dm", "patientact:no_pipe"]])
def test_a_variant_recipe_checks_its_engines_budgets_only(engine):
    r = _recipe(engine)
    names = {ln.schema for ln in fit_budgets(r, r.engines_config(), {"simulate"}).lines}
    assert any(n.startswith("patientact:") for n in names) and not names & MINDSIM_SCHEMAS
    small = _recipe(engine, {"patientact": {"step_max_tokens": 10}})
    with pytest.raises(ConfigError, match=r"simulation.patientact.step_max_tokens is 10"):
        fit_budgets(small, small.engines_config(), {"simulate"})


def test_preflight_of_a_variant_probes_its_engines_roles():
    engines, talk = _two_engines("patientact:no_tg")
    with engines:
        report = preflight(_recipe("patientact:no_tg"), engines, {"simulate"})
    assert {"patient_appraiser", "profile_decomposer"} <= {u.role for u in report.roles}
    assert talk.requests and all(req.response_schema is None for req in talk.requests)


def test_the_card_counts_the_variant_and_shows_its_engines_section(tmp_path_factory):
    run = _both_engines_run(tmp_path_factory, engines=("mindsim", "patientact:no_pipe"))
    rows = _sessions(run)
    _, card = _card(run)
    section = card.split("### Patient engines")[1].split("### Screening verdicts")[0]
    assert "| mindsim | 4 |" in section and "| patientact:no_pipe | 4 |" in section
    pa = [r for r in rows if r["patient_engine"] == "patientact:no_pipe"]
    start = sum(r["patientact"]["trust_start"] for r in pa) / len(pa)
    assert f"PatientAct trust (1–4 scale) averaged over its 4 sessions:\n{start:.2f} at the start" in section
    how = card.split("## How it was made")[1].split("## Statistics")[0]
    assert "once per patient engine\n   (mindsim, patientact:no_pipe)" in how
    assert "The MindSim patient committed a move" in how and "The PatientAct patient worked" in how
    assert "`turns[].patientact`" in card.split("## What is in it")[1].split("Load a config")[0]
