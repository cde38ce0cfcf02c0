"""The run layout (`mindcore.layout.RunLayout`) against a real run: the main job on a fake engine served
over HTTP (every stage: profiles, both patient engines, arc labelling, the MHQR judge, the dataset
card), then the PatientAct-rubric judge into the same folder. Every file the run wrote must sit at a
path the layout names, and every path the layout names for these stages must have been written."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakejob import write_fake_job

from mindsimkit.mindcore.layout import RunLayout


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return write_fake_job(tmp_path_factory.mktemp("layout"))


def _written(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def test_every_file_of_a_run_is_a_path_of_the_layout(run):
    layout = RunLayout(run)
    p, s, v, j, pa = layout.profiles, layout.sessions, layout.validation, layout.judgments, layout.patientact_judge
    files = {
        layout.run_json,
        layout.manifest,
        p.parquet,
        p.pool_table,
        p.summary,
        p.failures,
        p.provenance,
        s.layout_marker,
        s.parquet,
        s.summary,
        *s.shard(0, 1),
        layout.transcripts,
        v.report_json,
        v.report_md,
        v.arc_cache,
        j.parquet,
        j.report_json,
        j.report_md,
        pa.judgments,
        pa.report_json,
        pa.report_md,
        layout.report_html,
        layout.report_json,
    }
    item_folders = {  # one file per item, named by its key
        p.checkpoints: ".json",
        p.case_summaries: ".md",
        s.checkpoints: ".json",
        s.scenarios: ".json",
        s.decompositions: ".json",
        j.cache: ".json",
        pa.cache: ".json",
    }
    plots = set(v.plots()) | set(j.plots())
    written = _written(run)
    missing = sorted(str(f.relative_to(run)) for f in files if f not in written)
    assert not missing, f"the layout names files the run did not write: {missing}"
    for folder, suffix in item_folders.items():
        inside = {f for f in written if f.parent == folder}
        assert inside and all(f.suffix == suffix for f in inside), folder
    assert v.plots() and j.plots()
    assert {p.case_summary(r) for r in _pool_ids(p.parquet)} <= written
    # The card's folder, library logs and distilabel's own cache: the layout names the folder, its tools the rest.
    whole = [layout.dataset, layout.logs, p.distilabel_cache]
    unnamed = sorted(
        str(f.relative_to(run))
        for f in written - files - plots
        if f.parent not in item_folders and not any(w in f.parents for w in whole)
    )
    assert not unnamed, f"the run wrote files the layout does not name: {unnamed}"
    assert (layout.dataset / "README.md").is_file()


def _pool_ids(parquet: Path) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_table(parquet, columns=["profile_id"]).column("profile_id").to_pylist()


def test_the_layout_spells_todays_folder(tmp_path):
    """Old run folders keep reading: the layout's names are the ones runs have always written."""
    layout = RunLayout(tmp_path)
    rel = lambda path: path.relative_to(tmp_path).as_posix()  # noqa: E731
    assert [
        rel(x)
        for x in (
            layout.run_json,
            layout.logs,
            layout.profiles.parquet,
            layout.sessions.parquet,
            layout.sessions.summary,
            layout.sessions.layout_marker,
            layout.transcripts,
            layout.validation.report_json,
            layout.judgments.parquet,
            layout.judgments.cache,
            layout.patientact_judge.judgments,
            layout.dataset,
        )
    ] == [
        "run.json",
        "logs",
        "profiles/profiles.parquet",
        "sessions/sessions.parquet",
        "sessions/summary.json",
        "sessions/layout.json",
        "transcripts/transcripts.jsonl",
        "validation/report.json",
        "judgments/judgments.parquet",
        "judgments/cache",
        "patientact_judge/judgments.jsonl",
        "dataset",
    ]
    assert [rel(x) for x in layout.sessions.shard(2, 8)] == [
        "sessions/shards/00002-of-00008.parquet",
        "sessions/shards/00002-of-00008.jsonl",
    ]
    assert not any(tmp_path.iterdir())  # describing the folder creates nothing


def test_the_header_card_and_report_name_each_engines_preset(run):
    """A run without `simulation.preset` records 'ours' for each engine it ran; the card and the report say so."""
    layout = RunLayout(run)
    assert layout.header().presets == {"mindsim": "ours", "patientact": "ours", "judge": "ours"}
    card = (layout.dataset / "README.md").read_text()
    assert "mindsim ran under `ours`" in card and "patientact ran under `ours`" in card
    page = layout.report_html.read_text()
    assert "<th>presets</th><td>mindsim: ours, patientact: ours</td>" in page
