"""Per-role request options for real models: what each option puts on the wire, the
automatic choice of the output-budget field, config errors for contradictory settings, and the round
trip against stub servers that enforce a hosted reasoning model's rules and a chat-template server's
`chat_template_kwargs`. Reasoning and cached tokens are counted apart in the ledger."""

from __future__ import annotations

import time

import pytest
from pydantic import BaseModel, Field

from mindsimkit.mindcore.backends import OpenAIBackend, token_field
from mindsimkit.mindcore.client import RoleClient
from mindsimkit.mindcore.config import EnginesConfig, RoleSpec
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import ConfigError, TransportError
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindcore.recipe import Recipe, load_recipe
from mindsimkit.mindcore.types import ChatRequest, UsageLedger
from openai_stub import OpenAIStub, Reply, hosted_reasoning, probe_answers, template_thinking


class Verdict(BaseModel):
    severity: str = Field(max_length=10)


def _backend(
    kind: str = "openai",
    structured_mode: str = "json_schema",
    url: str = "http://127.0.0.1:9/v1",
    model: str = "m",
    **kw,
) -> OpenAIBackend:
    return OpenAIBackend("e", base_url=url, default_model=model, kind=kind, structured_mode=structured_mode, **kw)


def _request(spec: RoleSpec, backend, **kw) -> ChatRequest:
    return RoleClient("judge", backend, spec, spec.model or backend.default_model, UsageLedger()).build_request(
        [{"role": "user", "content": "hi"}], **kw
    )


# -- on the wire ----------------------------------------------------------------------------------
def test_options_render_as_openai_fields_and_merge_into_one_body():
    spec = RoleSpec(
        engine="e",
        temperature=0.6,
        top_p=0.9,
        max_tokens=300,
        reasoning_effort="high",
        thinking=True,
        token_param="max_completion_tokens",
        extra_body={
            "priority": 3,
            "chat_template_kwargs": {"custom_flag": 1},
            "structured_outputs": {"disable_any_whitespace": True},
        },
        timeout_s=7.5,
    )
    b = _backend(kind="vllm", structured_mode="vllm")
    req = _request(spec, b, response_schema={"type": "object"}, schema_name="v")
    kw = b.body(req)
    assert kw["max_completion_tokens"] == 300 and "max_tokens" not in kw
    assert kw["reasoning_effort"] == "high" and kw["temperature"] == 0.6 and kw["top_p"] == 0.9
    assert req.timeout_s == 7.5 and "timeout" not in kw  # a transport setting, never a body field
    # The role's extra_body, the thinking switch and the schema end up in one body, merged key by key, at the
    # top level where the server reads them.
    assert {k: kw[k] for k in ("priority", "chat_template_kwargs", "structured_outputs")} == {
        "priority": 3,
        "chat_template_kwargs": {"custom_flag": 1, "enable_thinking": True},
        "structured_outputs": {"disable_any_whitespace": True, "json": {"type": "object"}},
    }
    assert "extra_body" not in kw


def test_omit_leaves_fields_out_even_when_a_stage_passes_them():
    spec = RoleSpec(engine="e", max_tokens=100, omit=["temperature", "top_p", "seed"])
    b = _backend()
    kw = b.body(_request(spec, b, temperature=0.0, seed=4))  # e.g. a probe asks for 0, a re-ask for seed + 1
    assert not {"temperature", "top_p", "seed"} & set(kw) and kw["max_tokens"] == 100


def test_thinking_key_names_the_template_variable_and_off_is_sent_too():
    b = _backend(kind="vllm", structured_mode="vllm")
    on = b.body(_request(RoleSpec(engine="e", thinking=True, thinking_key="thinking"), b))
    off = b.body(_request(RoleSpec(engine="e", thinking=False), b))
    assert on["chat_template_kwargs"] == {"thinking": True}
    assert off["chat_template_kwargs"] == {"enable_thinking": False}
    assert "chat_template_kwargs" not in b.body(_request(RoleSpec(engine="e"), b))  # nothing set, nothing sent


@pytest.mark.parametrize(
    "kind, url, model, expected",
    [
        ("openai", "https://api.openai.com/v1", "gpt-4.1-mini", "max_completion_tokens"),  # OpenAI's own API
        ("openai", "https://myres.openai.azure.com/openai/v1", "anything", "max_completion_tokens"),
        ("openai", "http://127.0.0.1:8000/v1", "o3-mini", "max_completion_tokens"),  # a reasoning model, any host
        ("openai", "https://router.example/v1", "openai/gpt-5.1", "max_completion_tokens"),
        ("openai", "https://router.example/v1", "gpt-6.1-sol", "max_completion_tokens"),
        ("openai", "http://127.0.0.1:8000/v1", "gpt-4o", "max_tokens"),
        ("openai", "http://127.0.0.1:8000/v1", "Qwen/Qwen3-32B", "max_tokens"),
        ("openai", "http://127.0.0.1:8000/v1", "gpt-oss-120b", "max_tokens"),  # open weights, served by vLLM
        ("vllm", "http://127.0.0.1:8000/v1", "gpt-5-lookalike", "max_tokens"),  # vLLM reads max_tokens
        ("embedded", "http://127.0.0.1:8000/v1", "o3", "max_tokens"),
    ],
)
def test_auto_token_field(kind, url, model, expected):
    assert token_field("auto", kind, url, model) == expected


def test_token_param_stated_on_the_role_wins_over_the_engine():
    b = _backend(url="https://api.openai.com/v1", token_param="auto")
    assert "max_tokens" in b.body(_request(RoleSpec(engine="e", max_tokens=9, token_param="max_tokens"), b))
    b2 = _backend(token_param="max_completion_tokens")
    assert b2.body(_request(RoleSpec(engine="e", max_tokens=9), b2))["max_completion_tokens"] == 9


def test_reasoning_budget_goes_on_top_of_every_budget_and_uncapped_stays_uncapped():
    fake = FakeBackend(lambda _r: "ok")
    spec = RoleSpec(engine="fake", max_tokens=200, reasoning_budget=1000)
    assert _request(spec, fake).max_tokens == 1200
    assert _request(spec, fake, max_tokens=50).max_tokens == 1050  # a stage's own budget (e.g. scenario_max_tokens)
    assert _request(RoleSpec(engine="fake", reasoning_budget=1000), fake).max_tokens is None


def test_describe_names_the_options_only_when_set():
    b = _backend(url="https://api.openai.com/v1")
    plain = RoleClient("judge", b, RoleSpec(engine="e"), "m", UsageLedger()).describe()
    assert "reasoning_effort" not in plain and plain["token_field"] == "max_completion_tokens"
    rich = RoleClient(
        "judge", b, RoleSpec(engine="e", reasoning_effort="high", omit=["temperature"]), "m", UsageLedger()
    ).describe()
    assert rich["reasoning_effort"] == "high" and rich["omit"] == ["temperature"]
    assert "token_field" not in RoleClient("p", _backend(), RoleSpec(engine="e"), "m", UsageLedger()).describe()


# -- config errors --------------------------------------------------------------------------------
def load_recipe_text(data: dict) -> Recipe:
    """The recipe as `load_recipe` reads it from a file (so errors come out as the CLI shows them)."""
    import tempfile

    import yaml

    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/r.yaml"
        with open(path, "w") as f:
            yaml.safe_dump(data, f)
        return load_recipe(path)


@pytest.mark.parametrize(
    "role, message",
    [
        ({"temperature": 0.2, "omit": ["temperature"]}, "temperature is set and also listed in omit"),
        ({"extra_body": {"max_tokens": 5}}, "extra_body must not set max_tokens"),
        ({"extra_body": {"temperature": 0}}, "extra_body must not set temperature"),
        (
            {"thinking": True, "extra_body": {"chat_template_kwargs": {"enable_thinking": False}}},
            "both set the thinking switch",
        ),
        ({"thinking_key": "thinking"}, "thinking_key names the template variable"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort"),
        ({"omit": ["max_tokens"]}, "omit"),
        ({"token_param": "max_output_tokens"}, "token_param"),
        ({"timeout_s": 0}, "timeout_s"),
    ],
)
def test_contradictory_or_unknown_options_are_config_errors_naming_the_field(role, message):
    data = {
        "name": "t",
        "engines": {"api": {"kind": "openai", "base_url": "http://x/v1", "model": "m"}},
        "roles": {"judge": {"engine": "api", **role}},
    }
    with pytest.raises(ConfigError, match=message) as info:
        load_recipe_text(data)
    assert "roles.judge" in str(info.value)


def test_new_options_at_their_defaults_leave_the_recipe_hash_alone():
    base = {
        "name": "t",
        "engines": {"api": {"kind": "openai", "base_url": "http://x/v1", "model": "m"}},
        "roles": {"default": {"engine": "api", "temperature": 0.5}},
    }
    dumped = Recipe.model_validate(base).content_dump()
    assert set(dumped["roles"]["default"]) == {
        "engine",
        "model",
        "temperature",
        "top_p",
        "max_tokens",
        "seed",
        "frequency_penalty",
        "presence_penalty",
        "stop",
        "max_attempts",
    }
    assert "token_param" not in dumped["engines"]["api"]
    withopt = {**base, "roles": {"default": {"engine": "api", "temperature": 0.5, "reasoning_effort": "low"}}}
    assert Recipe.model_validate(withopt).content_dump()["roles"]["default"]["reasoning_effort"] == "low"


# -- against stub servers -------------------------------------------------------------------------
def _engines(url: str, roles: dict, kind: str = "openai", model: str = "gpt-6.1-sol", **engine) -> Engines:
    spec = {"kind": kind, "model": model, **engine}
    if kind == "openai":
        spec["base_url"] = url
    else:
        host, port = url.split("//")[1].split("/")[0].split(":")
        spec.update(host=host, port=int(port))
    cfg = EnginesConfig.model_validate({"engines": {"e": spec}, "roles": roles})
    return Engines.from_config(cfg)


def _answer(body):
    if body.get("response_format") or body.get("structured_outputs"):
        return Reply(content='{"severity": "minor"}')
    return Reply(content="fine")


def test_hosted_reasoning_model_takes_the_role_as_configured_and_usage_counts_reasoning_and_cache():
    with OpenAIStub(hosted_reasoning(_answer)) as stub:
        roles = {
            "judge": {
                "engine": "e",
                "reasoning_effort": "high",
                "max_tokens": 500,
                "omit": ["temperature"],
                "temperature": None,
            }
        }
        with _engines(stub.base_url, roles) as engines:
            judge = engines.role("judge")
            got = engines.run(
                judge.structured([{"role": "user", "content": "rate this reply please"}], Verdict, temperature=0.0)
            )
        body = stub.requests[-1]
    assert got.severity == "minor"
    assert body["max_completion_tokens"] == 500 and body["reasoning_effort"] == "high"
    assert "max_tokens" not in body and "temperature" not in body
    usage = engines.ledger.summary()["judge"]
    assert usage["reasoning_tokens"] == 40 and usage["cached_tokens"] > 0
    assert usage["completion_tokens"] >= 40  # reasoning is part of the completion, counted apart as well
    assert usage["servers"][stub.base_url]["reasoning_tokens"] == 40


def test_hosted_reasoning_model_refusals_come_back_with_the_recipe_fix():
    with OpenAIStub(hosted_reasoning(_answer)) as stub:
        roles = {"judge": {"engine": "e", "temperature": 0.0, "max_tokens": 50, "token_param": "max_tokens"}}
        with _engines(stub.base_url, roles) as engines:
            with pytest.raises(TransportError, match=r"HTTP 400.*token_param: max_completion_tokens"):
                engines.run(engines.role("judge").chat([{"role": "user", "content": "hi"}]))
        roles["judge"]["token_param"] = "auto"  # auto picks max_completion_tokens for gpt-6.1-sol
        with _engines(stub.base_url, roles) as engines:
            with pytest.raises(TransportError, match=r"omit: \[temperature\]"):
                engines.run(engines.role("judge").chat([{"role": "user", "content": "hi"}]))


def test_vllm_like_server_reads_the_thinking_switch_next_to_structured_outputs():
    with OpenAIStub(template_thinking(_answer)) as stub:
        url = stub.base_url
        roles = {
            "patient": {
                "engine": "e",
                "thinking": True,
                "temperature": 1.0,
                "max_tokens": 64,
                "reasoning_budget": 400,
                "extra_body": {"priority": 2},
            }
        }
        with _engines(url, roles, kind="vllm", model="deepseek-v4.1-flash") as engines:
            got = engines.run(engines.role("patient").structured([{"role": "user", "content": "go"}], Verdict))
        body = stub.requests[-1]
        assert got.severity == "minor"
        assert body["chat_template_kwargs"] == {"enable_thinking": True}
        assert body["structured_outputs"]["json"]["properties"]["severity"]["maxLength"] == 10
        assert body["priority"] == 2 and body["max_tokens"] == 464
        assert engines.ledger.summary()["patient"]["reasoning_tokens"] == 25
        # A template variable the server's template does not read is refused, with the fix.
        roles["patient"]["thinking_key"] = "thinking"
        with _engines(url, roles, kind="vllm", model="deepseek-v4.1-flash") as engines:
            with pytest.raises(TransportError, match="fix thinking_key"):
                engines.run(engines.role("patient").chat([{"role": "user", "content": "go"}]))


def test_role_timeout_applies_beside_the_engine_timeout():
    def slow(body):
        time.sleep(1.0)
        return probe_answers(body)

    with OpenAIStub(slow) as stub:
        backend = OpenAIBackend("e", base_url=stub.base_url, default_model="m", timeout_s=30.0, max_retries=0)
        fast = RoleClient("judge", backend, RoleSpec(engine="e", timeout_s=0.2), "m", UsageLedger())
        t0 = time.monotonic()

        async def go():
            try:
                return await fast.chat([{"role": "user", "content": "hi"}])
            finally:
                await backend.aclose_loop()

        import asyncio

        with pytest.raises(TransportError, match=r"did not answer within 0.2 s \(the role's timeout_s\)"):
            asyncio.run(go())
        assert time.monotonic() - t0 < 0.9  # the role's 0.2 s, not the engine's 30 s
