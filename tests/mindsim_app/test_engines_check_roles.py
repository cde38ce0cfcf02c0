"""`mindsim engines check` reports, per role and counsellor binding, the fields its requests carry and whether the
model took them — or the server's refusal with the recipe change that fixes it; a counsellor binding carries the
same request options as a role."""

from __future__ import annotations

import yaml

from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindsim_app.cli import main
from mindsimkit.mindsim.config import CounsellorBinding, SimulationConfig
from mindsimkit.mindcore.engine_health import check_engines
from mindsimkit.mindsim_app.cli import _counsellor_bindings as recipe_bindings
from mindsimkit.mindsim.simulate import counsellor_client
from openai_stub import OpenAIStub, hosted_reasoning, probe_answers


def _recipe(tmp_path, url: str) -> str:
    data = {
        "name": "t",
        "engines": {"api": {"kind": "openai", "base_url": url, "model": "o4-mini"}},
        "roles": {
            "default": {"engine": "api", "omit": ["temperature"], "max_tokens": 64},
            "judge": {"engine": "api", "reasoning_effort": "high", "max_tokens": 64},
            "screener": {"engine": "api", "temperature": 0.2, "max_tokens": 64},  # refused: not the default of 1
        },
        "simulation": {
            "counsellors": [
                {"name": "luna", "engine": "api", "model": "o4-mini", "reasoning_effort": "low", "temperature": 1.0}
            ]
        },
    }
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_each_role_is_reported_with_what_it_sent_and_whether_it_was_accepted(tmp_path):
    from mindsimkit.mindcore.recipe import load_recipe

    with OpenAIStub(hosted_reasoning(probe_answers)).serve("o4-mini") as stub:
        r = load_recipe(_recipe(tmp_path, stub.base_url))
        (h,) = check_engines(r.engines_config(), recipe_bindings(r))
    rows = {a.role: a for a in h.accepted}
    assert set(rows) == {"default", "judge", "screener", "counsellor:luna"}
    assert rows["judge"].ok and rows["judge"].sent["reasoning_effort"] == "high"
    assert rows["judge"].sent["max_completion_tokens"] == 16 and "max_tokens" not in rows["judge"].sent
    assert rows["counsellor:luna"].ok and rows["counsellor:luna"].sent["reasoning_effort"] == "low"
    assert not rows["screener"].ok and "temperature" in rows["screener"].problem
    assert rows["screener"].hint == "add omit: [temperature] to the role (the model takes only its default)"
    # The basic probe used the options of a role that sets them (no temperature 0 to a reasoning model).
    assert h.ok and h.structured_ok
    assert h.problem_kind == "config" and "role 'screener'" in h.problem


def test_engines_check_command_prints_the_requests_per_role_and_exits_2_on_a_refusal(tmp_path, capsys):
    with OpenAIStub(hosted_reasoning(probe_answers)).serve("o4-mini") as stub:
        code = main(["engines", "check", _recipe(tmp_path, stub.base_url)])
    captured = capsys.readouterr()
    assert code == 2
    assert "Requests per role" in captured.out and "reasoning_effort=high" in captured.out
    err = " ".join(captured.err.split())
    assert "role 'screener'" in err and "omit: [temperature]" in err


def test_counsellor_binding_sends_the_same_request_options_as_a_role():
    fake = FakeBackend(lambda _r: "hello")
    engines = Engines.with_backend(fake).start()
    cfg = SimulationConfig.from_section(
        {
            "counsellors": [
                {
                    "name": "luna",
                    "engine": "fake",
                    "model": "m",
                    "reasoning_effort": "medium",
                    "thinking": False,
                    "omit": ["top_p"],
                    "extra_body": {"provider": {"order": ["x"]}},
                    "reasoning_budget": 100,
                    "max_tokens": 50,
                    "timeout_s": 9,
                }
            ]
        }
    )
    binding = cfg.counsellors[0]
    assert isinstance(binding, CounsellorBinding)
    client = counsellor_client(engines, binding)
    engines.run(client.chat([{"role": "user", "content": "hi"}]))
    req = fake.requests[-1]
    assert (req.reasoning_effort, req.thinking, req.omit, req.timeout_s) == ("medium", False, ("top_p",), 9)
    assert req.extra_body == {"provider": {"order": ["x"]}} and req.max_tokens == 150


def test_a_reasoning_model_whose_roles_send_no_temperature_passes_the_probe():
    """The probe's own temperature 0 goes out only where the recipe's roles send temperatures at all."""
    from mindsimkit.mindcore.config import EnginesConfig

    with OpenAIStub(hosted_reasoning(probe_answers)).serve("o3") as stub:
        cfg = EnginesConfig.model_validate(
            {
                "engines": {"api": {"kind": "openai", "base_url": stub.base_url, "model": "o3"}},
                "roles": {"default": {"engine": "api", "max_tokens": 64}},
            }
        )
        (h,) = check_engines(cfg)
        assert h.ok and h.structured_ok and not h.problem
        assert not any("temperature" in b for b in stub.requests)
