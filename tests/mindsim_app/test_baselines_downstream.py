"""The baseline engines' sessions downstream of the simulator (docs/baselines.md): a fake run with all four
patient engines validates as four systems per counsellor on the realism study's sample, and the dataset card
explains the baselines' fields with counts from the rows."""

from __future__ import annotations


import pytest

from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend
from restamp import header

ALL = ("mindsim", "patientact", "patient_psi", "mindeval")


@pytest.fixture(scope="module")
def four_run(tmp_path_factory):
    from mindsimkit.mindsim import simulate
    from mindsimkit.mindsim.config import SimulationConfig
    from simfakes import make_profile
    from test_baselines import responder

    out = tmp_path_factory.mktemp("run")
    config = SimulationConfig(
        sessions=2, turn_cap=4, patient_engine=list(ALL), counsellors=["counsellor", "counsellor:b"]
    )
    with Engines.with_backend(FakeBackend(responder)) as eng:
        summary = simulate.run_simulation(
            [make_profile("p1"), make_profile("p2", "joker", "formal")], eng, config, out, seed=5
        )
    assert summary.sessions_written == 32 and not summary.failed_arcs, summary.model_dump_json()[:500]
    return out


def test_validation_compares_four_systems_on_the_realism_sample(four_run, tmp_path):
    from mindsimkit.mindcore.layout import RunLayout
    from mindsimkit.mindsim_app.job import _sims_by_counsellor
    from mindsimkit.validation.compare import compare
    from mindsimkit.validation.config import ValidationConfig

    sims = _sims_by_counsellor(RunLayout(four_run))
    assert set(sims) == {f"{e}/{c}" for e in ALL for c in ("counsellor", "counsellor:b")}
    config = ValidationConfig(
        bootstrap_draws=20,
        floor_splits=4,
        joint=False,
        plots=False,
        first_sessions_only=True,
        max_patient_turns=3,
        counsellors=["counsellor"],
    )
    report = compare(None, sims, tmp_path / "validation", config)
    assert set(report["systems"]) == {f"{e}/counsellor" for e in ALL}


def test_the_card_explains_the_baselines_with_counts_from_the_rows(four_run):
    import pyarrow.parquet as pq

    from mindsimkit.mindcore.provenance import base_provenance
    from mindsimkit.mindsim_app.cards import build_dataset_folder

    rows = pq.read_table(four_run / "sessions" / "sessions.parquet").to_pylist()
    info = {"run_id": "b01", "recipe": {"name": "t", "seed": 5}, "provenance": base_provenance()}
    card = (build_dataset_folder(four_run, header(info), four_run / "dataset") / "README.md").read_text()
    section = card.split("### Patient engines")[1].split("### Screening verdicts")[0]
    styles = {r["patient_id"]: r["baseline"]["style"] for r in rows if r["patient_engine"] == "patient_psi"}
    for style in set(styles.values()):
        n = sum(s == style for s in styles.values())
        assert f"| {style} | {n} | {100 * n / len(styles):.1f}% |" in section
    assert "| moderate depressive symptoms | mild anxious symptoms | 2 |" in section
    fields = card.split("### Patient engine fields")[1].split("## How it was made")[0]
    assert "`baseline`" in fields and "`filled`" in fields and "`turns[].patientact`" in fields
    assert "Patient-Ψ baseline patient" in card and "MindEval baseline patient" in card
    assert "follow the Patient-Psi design" in card and "follow the MindEval patient design" in card
