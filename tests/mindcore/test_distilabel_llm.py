"""The distilabel adapter drives the same engine layer, inside a real distilabel pipeline, against the
real embedded server (distilabel runs the step in a worker process that reaches it over HTTP)."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, Field

from mindsimkit.mindcore.distilabel_llm import MindcoreLLM


class Colour(BaseModel):
    colour: str = Field(..., max_length=20)
    warm: bool


@pytest.mark.embedded
def test_pipeline_with_structured_output(embedded_engines, tmp_path, monkeypatch):
    from distilabel.pipeline import Pipeline
    from distilabel.steps import LoadDataFromDicts
    from distilabel.steps.tasks import TextGeneration

    monkeypatch.setenv("DISTILABEL_CACHE_DIR", str(tmp_path / "cache"))
    llm = MindcoreLLM(wire=embedded_engines.wire_spec("profile_writer"), output_model=f"{__name__}:Colour")
    with Pipeline(name="mindcore-adapter-test", cache_dir=str(tmp_path / "cache")) as pipeline:
        load = LoadDataFromDicts(data=[{"instruction": f"Name colour number {i} as JSON."} for i in range(3)])
        gen = TextGeneration(llm=llm, input_batch_size=3)
        load >> gen
    distiset = pipeline.run(
        use_cache=False, parameters={gen.name: {"llm": {"generation_kwargs": {"max_new_tokens": 60}}}}
    )
    rows = distiset["default"]["train"]
    assert len(rows) == 3
    for row in rows:
        Colour.model_validate(json.loads(row["generation"]))
        assert row["model_name"] == embedded_engines.role("profile_writer").model


def test_distilabel_workers_get_every_server_of_an_engine():
    from mindsimkit.mindcore.config import EnginesConfig, OpenAIEngine, RoleSpec
    from mindsimkit.mindcore.distilabel_llm import MindcoreLLM
    from mindsimkit.mindcore.engine import Engines

    urls = ["http://127.0.0.1:9/v1", "http://127.0.0.1:10/v1"]
    cfg = EnginesConfig(
        engines={"pool": OpenAIEngine(base_urls=urls, model="m", cooldown_s=7)},
        roles={"default": RoleSpec(engine="pool")},
    )
    with Engines.from_config(cfg) as engines:
        wire = engines.wire_spec("profile_writer")
    llm = MindcoreLLM(wire=wire)
    llm.load()
    assert llm._backend.base_urls == urls and llm._backend.cooldown_s == 7
