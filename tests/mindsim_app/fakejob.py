"""A whole run on the fake engine, served over HTTP (`openai_stub`): the main job with every stage (profiles,
both patient engines, arc labelling, the MHQR judge, the dataset card), then the PatientAct-rubric judge into the
same folder. The layout test checks where its files are; the damaged-folder tests break copies of it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend

TESTS = Path(__file__).resolve().parents[1]
for extra in (TESTS, TESTS / "judge", TESTS / "mindsim"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from judgefakes import fake_judge  # noqa: E402
from openai_stub import OpenAIStub, from_responder  # noqa: E402
from simfakes import SimResponder  # noqa: E402
from test_patientact import PAResponder  # noqa: E402

ROLES = [
    "profile_writer",
    "screener",
    "labeller",
    "patient",
    "first_scenario_writer",
    "scenario_writer",
    "memory_compactor",
    "counsellor",
    "patient_appraiser",
    "profile_decomposer",
    "patient_matcher",
    "judge",
]
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


def _recipe(path: Path, stub: OpenAIStub, simulation: str = "") -> Path:
    stub.serve(*ROLES)
    path.write_text(
        f"name: layouttest\nseed: 3\nengines:\n  stub: {{kind: openai, base_url: '{stub.base_url}', model: m, "
        "native_tools: false, max_concurrency: 8}\nroles:\n  default: {engine: stub}\n"
        + "".join(f"  {r!r}: {{engine: stub, model: {r!r}}}\n" for r in ROLES)
        + "profiles: {personas: synthetic, candidates: 4, pool_size: 2, benchmark_size: 1, pool_verdicts: [clean, minor], causal_checks: false}\n"
        "simulation: {sessions: 2, turn_cap: 3, counsellors: [counsellor], patient_engine: [mindsim, patientact]"
        + simulation
        + "}\n"
        "validation: {bootstrap_draws: 20, floor_splits: 5, arc: true}\n"
        "judge: {bootstrap_draws: 100}\n"
    )
    return path


def _patientact_answer(req):
    from mindsimkit.judge.patientact import rubrics

    return {k: v for d in rubrics().conversation.ids for k, v in ((f"{d}_reason", "holds back"), (d, 3))}


def run_fake_job(tmp: Path, simulation: str = "", plan_from: Path | None = None) -> Path:
    """The main job alone into `tmp/run` (`simulation`: more settings for its simulation section, e.g.
    ", max_patients: 1"; `plan_from`: the pilot its plan is made from)."""
    from mindsimkit.mindsim_app.job import run_job

    out = tmp / "run"
    with OpenAIStub(from_responder(_responder())) as stub:
        run_job(_recipe(tmp / "r.yaml", stub, simulation), out, plan_from=plan_from)
    return out


def write_fake_job(tmp: Path) -> Path:
    """The run folder `tmp/run`, finished (run.json, manifest, dataset, report.html, PatientAct rubric)."""
    from mindsimkit.judge.patientact import load_items
    from mindsimkit.judge.patientact_report import run_patientact
    from mindsimkit.mindsim_app.job import run_job

    out = tmp / "run"
    with OpenAIStub(from_responder(_responder())) as stub:
        run_job(_recipe(tmp / "r.yaml", stub), out)
    with Engines.with_backend(FakeBackend(_patientact_answer)) as engines:
        run_patientact(out, engines, load_items([out]))
    return out
