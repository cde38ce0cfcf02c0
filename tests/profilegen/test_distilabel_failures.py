"""The distilabel step's failure handling, in process and without a model: an engine that is down must
come back as a retryable failure with its real error, not a checkpointed "see the worker log"."""

from __future__ import annotations

import json
import socket

from mindsimkit.mindcore.config import RoleSpec
from mindsimkit.mindcore.distilabel_llm import MindcoreLLM
from mindsimkit.profilegen.anchors import anchor_personas
from mindsimkit.profilegen.distilabel_steps import SCREENER_OUTPUT, WRITER_OUTPUT, WriteAndScreen, usage_records
from mindsimkit.profilegen.generate import Outcome, prompt_hashes
from mindsimkit.profilegen.personas import load_personas
from mindsimkit.profilegen.rates import load_rates
from mindsimkit.profilegen.schemas import Provenance, RoleModel


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


def _wire(role: str, port: int) -> dict:
    return {
        "role": role,
        "engine": "down",
        "kind": "openai",
        "base_url": f"http://127.0.0.1:{port}/v1",
        "model": "m",
        "api_key_env": None,
        "max_concurrency": 2,
        "timeout_s": 5.0,
        "native_tools": False,
        "structured_mode": "json_schema",
        "strict_schema": False,
        "role_spec": RoleSpec(engine="down").model_dump(),
    }


def test_outage_in_the_worker_is_a_retryable_failure_with_its_cause(tmp_path):
    port = _closed_port()
    rows = anchor_personas(load_personas("synthetic", 2, 7).rows, load_rates(None), 7)
    prov = Provenance(
        seed=7,
        toolkit_version="t",
        prompts=prompt_hashes(),
        roles=[RoleModel(role=r, engine="down", model="m") for r in ("profile_writer", "screener")],
    )
    step = WriteAndScreen(
        writer=MindcoreLLM(wire=_wire("profile_writer", port), output_model=WRITER_OUTPUT),
        screener=MindcoreLLM(wire=_wire("screener", port), output_model=SCREENER_OUTPUT),
        checkpoint_dir=str(tmp_path / "checkpoints"),
        provenance=prov.model_dump_json(),
    )
    step.load()
    (out,) = list(step.process([{"row": r.model_dump_json()} for r in rows]))
    assert len(out) == 2
    for item in out:
        o = Outcome.model_validate_json(item["outcome"])
        assert o.status == "failed" and o.failure.retry_on_rerun
        assert "TransportError" in o.failure.error and f"127.0.0.1:{port}" in o.failure.error
        (rec,) = usage_records(json.loads(item["usage"]))
        assert (rec.role, rec.engine, rec.ok) == ("profile_writer", "down", False)
    assert not list((tmp_path / "checkpoints").glob("*.json"))


def test_worker_sends_the_recipe_shape(worker_step, fakes):
    """The distilabel worker builds the writer's and screener's schemas from the recipe's shape: the requests
    it sends carry the scaled text limits and the fault cap, and the profile records the shape."""
    from mindsimkit.profilegen.schemas import ProfileShape

    def respond(req):
        writing = "summary" in req.response_schema["properties"]
        return fakes.draft_for(req) if writing else {"faults": [], "verdict": "clean"}

    shape = ProfileShape(text_scale=0.5, screen_max_faults=2)
    o, requests = worker_step(respond, shape)
    assert o.status == "ok" and o.profile.provenance.shape == shape
    writer, screener = (b["response_format"]["json_schema"]["schema"] for b in requests)
    assert writer["properties"]["summary"]["maxLength"] == 120
    assert screener["properties"]["faults"]["maxItems"] == 2


def test_worker_asks_for_the_rows_own_label_lists(worker_step, fakes):
    """The writer's schema narrows its label enums per patient (profilegen.formulation.label_choice); the
    distilabel worker must send that schema, and a label outside it is re-asked inside the engine layer — it
    once went out with the vocabulary-wide schema and failed the row at validation instead (quickstart, 4 of 5)."""
    from mindsimkit.profilegen.formulation import label_choice
    from mindsimkit.profilegen.schemas import AnchoredRow, ProfileShape

    seen = {"bad": 0}

    def respond(req):
        schema = req.response_schema
        if "summary" not in schema["properties"]:
            return {"faults": [], "verdict": "clean"}
        draft = fakes.draft_for(req)
        enum = schema["$defs"]["DraftPrecipitating"]["properties"]["label"]["enum"]
        if not seen["bad"]:
            seen["bad"] += 1
            outside = next(
                lab
                for lab in ("child_leaving_home", "retirement", "separation_or_divorce", "job_loss")
                if lab not in enum
            )
            draft["precipitating"]["label"] = outside
        return draft

    o, requests = worker_step(respond, ProfileShape())
    assert o.status == "ok", o.failure
    row = AnchoredRow.model_validate(o.profile.model_dump(include=set(AnchoredRow.model_fields)))
    sent = requests[0]["response_format"]["json_schema"]["schema"]
    assert sent["$defs"]["DraftPrecipitating"]["properties"]["label"]["enum"] == list(
        label_choice(row.demographics).precipitating
    )
    assert len(requests) == 3  # the writer re-asked once, then the screener
