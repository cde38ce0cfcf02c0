"""The run layout (`mindcore.layout.RunLayout`) against a real run: the main job on a fake engine served
over HTTP (every stage: profiles, both patient engines, arc labelling, the MHQR judge, the dataset
card), then the PatientAct-rubric judge into the same folder. Every file the run wrote must sit at a
path the layout names, and every path the layout names for these stages must have been written."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from mindcore.engine import Engines
from mindcore.fake import FakeBackend
from mindcore.layout import RunLayout

TESTS = Path(__file__).resolve().parents[1]
for extra in (TESTS, TESTS / "judge"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from judgefakes import fake_judge  # noqa: E402
from openai_stub import OpenAIStub, from_responder  # noqa: E402
from simfakes import SimResponder  # noqa: E402
from test_patientact import PAResponder  # noqa: E402

ROLES = ["profile_writer", "screener", "labeller", "patient", "first_scenario_writer", "scenario_writer",
         "memory_compactor", "counsellor", "patient_appraiser", "profile_decomposer", "patient_matcher", "judge"]
PA_STEPS = {"DecompositionDraft", "PsychFormulation", "Reaction", "Behaviour", "Resistance", "TrustChange"}


def _responder():
    spec = importlib.util.spec_from_file_location("profilegen_fakes_layout", TESTS / "profilegen" / "conftest.py")
    pg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pg)
    sim, pa = SimResponder(end_after=99), PAResponder()

    def respond(req):
        if req.role == "profile_writer":
            return pg.draft_for(req)
        if req.role == "screener":
            return pg.clean_verdict(req)
        if req.role == "labeller":
            return {"label": "F"}
        if req.role == "judge":
            return fake_judge(req)
        return pa(req) if req.schema_name in PA_STEPS else sim(req)

    return respond


def _recipe(path: Path, stub: OpenAIStub) -> Path:
    stub.serve(*ROLES)
    path.write_text(
        f"name: layouttest\nseed: 3\nengines:\n  stub: {{kind: openai, base_url: '{stub.base_url}', model: m, "
        "native_tools: false, max_concurrency: 8}\nroles:\n  default: {engine: stub}\n"
        + "".join(f"  {r!r}: {{engine: stub, model: {r!r}}}\n" for r in ROLES)
        + "profiles: {personas: synthetic, candidates: 4, pool_size: 2, benchmark_size: 1, pool_verdicts: [clean, minor], causal_checks: false}\n"
        "simulation: {sessions: 2, turn_cap: 3, counsellors: [counsellor], patient_engine: [mindsim, patientact]}\n"
        "validation: {bootstrap_draws: 20, floor_splits: 5, arc: true}\n"
        "judge: {bootstrap_draws: 100}\n"
    )
    return path


def _patientact_answer(req):
    from judge.patientact import rubrics

    return {k: v for d in rubrics().conversation.ids for k, v in ((f"{d}_reason", "holds back"), (d, 3))}


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    from judge.patientact import load_items
    from judge.patientact_report import run_patientact
    from mindsim_app.job import run_job

    tmp = tmp_path_factory.mktemp("layout")
    out = tmp / "run"
    with OpenAIStub(from_responder(_responder())) as stub:
        run_job(_recipe(tmp / "r.yaml", stub), out)
    with Engines.with_backend(FakeBackend(_patientact_answer)) as engines:
        run_patientact(out, engines, load_items([out]))
    return out


def _written(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def test_every_file_of_a_run_is_a_path_of_the_layout(run):
    layout = RunLayout(run)
    p, s, v, j, pa = layout.profiles, layout.sessions, layout.validation, layout.judgments, layout.patientact_judge
    files = {
        layout.run_json, p.parquet, p.pool_table, p.summary, p.failures, p.provenance,
        s.layout_marker, s.parquet, s.summary, *s.shard(0, 1), layout.transcripts,
        v.report_json, v.report_md, v.arc_cache, j.parquet, j.report_json, j.report_md,
        pa.judgments, pa.report_json, pa.report_md, layout.report_html,
    }
    item_folders = {  # one file per item, named by its key
        p.checkpoints: ".json", p.case_summaries: ".md", s.checkpoints: ".json", s.scenarios: ".json",
        s.decompositions: ".json", j.cache: ".json", pa.cache: ".json",
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
    unnamed = sorted(str(f.relative_to(run)) for f in written - files - plots
                     if f.parent not in item_folders and not any(w in f.parents for w in whole))
    assert not unnamed, f"the run wrote files the layout does not name: {unnamed}"
    assert (layout.dataset / "README.md").is_file()


def _pool_ids(parquet: Path) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_table(parquet, columns=["profile_id"]).column("profile_id").to_pylist()


def test_the_layout_spells_todays_folder(tmp_path):
    """Old run folders keep reading: the layout's names are the ones runs have always written."""
    layout = RunLayout(tmp_path)
    rel = lambda path: path.relative_to(tmp_path).as_posix()  # noqa: E731
    assert [rel(x) for x in (layout.run_json, layout.logs, layout.profiles.parquet, layout.sessions.parquet,
                             layout.sessions.summary, layout.sessions.layout_marker, layout.transcripts,
                             layout.validation.report_json, layout.judgments.parquet, layout.judgments.cache,
                             layout.patientact_judge.judgments, layout.dataset)] == [
        "run.json", "logs", "profiles/profiles.parquet", "sessions/sessions.parquet", "sessions/summary.json",
        "sessions/layout.json", "transcripts/transcripts.jsonl", "validation/report.json",
        "judgments/judgments.parquet", "judgments/cache", "patientact_judge/judgments.jsonl", "dataset"]
    assert [rel(x) for x in layout.sessions.shard(2, 8)] == ["sessions/shards/00002-of-00008.parquet",
                                                             "sessions/shards/00002-of-00008.jsonl"]
    assert not any(tmp_path.iterdir())  # describing the folder creates nothing
