"""Fixtures of the profile-stage tests: a minimal recipe, and fake writer / screener replies
(deterministic, schema-valid unless a test asks otherwise) exposed as the `fakes` fixture."""

from __future__ import annotations

import hashlib
import json
import re
from types import SimpleNamespace

import pytest

from mindsimkit.mindcore.recipe import Recipe


GOOD_DRAFT = {
    "summary": "Low and tired for months, losing interest in evenings with friends.",
    "goal": "Get back to feeling like myself.",
    "predisposing": [{"label": "harsh_criticism", "history": "A father who picked apart every school report."}],
    "precipitating": {
        "label": "financial_shock",
        "when": "two months ago",
        "what_changed": "A large repair bill emptied savings; since then sleep is broken.",
    },
    "protective": [{"label": "someone_checks_in", "detail": "A sister phones every Sunday."}],
    "unhelpful_coping": {"label": "avoidance", "situation": "Leaves bank letters unopened on the table."},
    "other_coping": [{"label": "talking_it_through", "situation": "Sometimes tells the sister how bad it got."}],
    "core_belief": {
        "cluster": "worthless",
        "history": "Never good enough at home.",
        "belief": "Whatever I do, it is never enough.",
    },
    "quality_of_life": "moderate",
}

# The same client in PatientAct's profile shape (`profiles.patientact_shape`): an impact list, and the predisposing
# factors as dated histories and one social condition.
GOOD_PA_DRAFT = {
    **{k: v for k, v in GOOD_DRAFT.items() if k not in ("predisposing", "unhelpful_coping", "other_coping")},
    "summary": "Referred by her GP after weeks of poor sleep and missed shifts.",
    "impact": ["sleeps four hours most nights", "has missed two shifts", "stopped answering texts"],
    "psychological": [
        {"label": "harsh_criticism", "history": "At 9 a father who picked apart every school report."},
        {"label": "early_loss", "history": "At 14 lost her grandmother, who had raised her."},
    ],
    "social": [
        {"label": "feelings_kept_private", "history": "A family where nobody spoke about worries at the table."}
    ],
    # Three maintenance cycles (maladaptive labels only: a helpful habit is a protective factor in this shape).
    "perpetuating": [
        {"label": "avoidance", "situation": "Leaves bank letters unopened on the table, then the arrears grow."},
        {"label": "withdrawal", "situation": "Stops answering her sister's texts, so nobody sees how bad it is."},
        {"label": "going_over_things", "situation": "Replays the bill at 3am, which leaves her too tired to plan."},
    ],
}


def draft_for(request, **over):
    """A valid draft; quality of life spread by a hash of the prompt so some patients are poor."""
    d = json.loads(json.dumps(GOOD_DRAFT))
    h = int(hashlib.sha256(request.messages[1]["content"].encode()).hexdigest(), 16)
    d["quality_of_life"] = ["poor", "moderate", "good", "moderate"][h % 4]
    d.update(over)
    return d


def profile_text(request) -> str:
    m = re.search(r"# Profile to review\n\n(.*)\n\nReturn your verdict", request.messages[-1]["content"], re.S)
    return m.group(1) if m else ""


def clean_verdict(request):
    return {"faults": [], "verdict": "clean"}


def make_responder(writer=draft_for, screener=clean_verdict):
    def respond(request):
        return writer(request) if request.schema_name == "formulation" else screener(request)

    return respond


@pytest.fixture
def fakes():
    return SimpleNamespace(
        GOOD_DRAFT=GOOD_DRAFT,
        GOOD_PA_DRAFT=GOOD_PA_DRAFT,
        draft_for=draft_for,
        profile_text=profile_text,
        clean_verdict=clean_verdict,
        make_responder=make_responder,
    )


@pytest.fixture
def recipe():
    """A minimal recipe (seed 7); tests bind engines themselves."""
    return Recipe(name="test", seed=7, engines={"local": {"kind": "embedded"}}, roles={"default": {"engine": "local"}})


@pytest.fixture
def profile_engines(embedded_engines):
    """The session's embedded server with the quickstart's profile budgets: at least the longest answer of the
    writer's schema at text scale 0.5 and of the screener's with 2 faults (a smaller budget cuts answers); the
    causal-rules test writes at the quickstart's 0.4."""
    from mindsimkit.mindcore.config import RoleSpec
    from mindsimkit.mindcore.engine import Engines

    roles = {
        "default": RoleSpec(engine="local", temperature=0.3, max_tokens=256, seed=0),
        "profile_writer": RoleSpec(engine="local", temperature=0.3, max_tokens=2100, seed=0, max_attempts=2),
        "screener": RoleSpec(engine="local", temperature=0.2, max_tokens=1050, seed=0, max_attempts=2),
    }
    with Engines.with_backend(embedded_engines.backend("local"), roles=roles) as engines:
        yield engines


@pytest.fixture
def worker_step(tmp_path):
    """Runs the distilabel step `WriteAndScreen` in process against an OpenAI-compatible stub answering with
    `respond(request)`: `worker_step(respond, shape) -> (Outcome, stub requests)` for one synthetic persona."""
    from openai_stub import OpenAIStub, from_responder

    from mindsimkit.mindcore.config import RoleSpec
    from mindsimkit.mindcore.distilabel_llm import MindcoreLLM
    from mindsimkit.profilegen.anchors import anchor_personas
    from mindsimkit.profilegen.distilabel_steps import SCREENER_OUTPUT, WRITER_OUTPUT, WriteAndScreen
    from mindsimkit.profilegen.generate import Outcome, prompt_hashes
    from mindsimkit.profilegen.personas import load_personas
    from mindsimkit.profilegen.rates import load_rates
    from mindsimkit.profilegen.schemas import Provenance, RoleModel

    def run(respond, shape):
        rows = anchor_personas(load_personas("synthetic", 1, 7).rows, load_rates(None), 7)
        prov = Provenance(
            seed=7,
            toolkit_version="t",
            prompts=prompt_hashes(shape.causal_checks, shape.patientact),
            shape=shape,
            roles=[RoleModel(role=r, engine="stub", model="m") for r in ("profile_writer", "screener")],
        )
        with OpenAIStub(from_responder(respond)) as stub:

            def wire(role):
                return {
                    "role": role,
                    "engine": "stub",
                    "kind": "openai",
                    "base_url": stub.base_url,
                    "model": "m",
                    "api_key_env": None,
                    "max_concurrency": 2,
                    "timeout_s": 5.0,
                    "native_tools": False,
                    "structured_mode": "json_schema",
                    "strict_schema": False,
                    "role_spec": RoleSpec(engine="stub").model_dump(),
                }

            step = WriteAndScreen(
                writer=MindcoreLLM(
                    wire=wire("profile_writer"), output_model=WRITER_OUTPUT, output_args={"scale": shape.text_scale}
                ),
                screener=MindcoreLLM(
                    wire=wire("screener"),
                    output_model=SCREENER_OUTPUT,
                    output_args={"max_faults": shape.screen_max_faults},
                ),
                checkpoint_dir=str(tmp_path / "checkpoints"),
                provenance=prov.model_dump_json(),
            )
            step.load()
            (out,) = list(step.process([{"row": r.model_dump_json()} for r in rows]))
        return Outcome.model_validate_json(out[0]["outcome"]), stub.requests

    return run
