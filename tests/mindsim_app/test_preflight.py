"""Budgets fitted to schemas (mindcore.budget_fit) and the preflight before any stage (mindcore.preflight):
refusal and raise-when-unset, exit classes for an unset key, an unreachable server, an unlisted model
and a prompt larger than the context, and the all-failed helper."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mindsimkit.mindcore.budget import RoleSchema, register_role_schema, worst_case_tokens
from mindsimkit.mindcore.config import EnginesConfig
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import ConfigError, EngineError, UserError
from mindsimkit.mindcore.recipe import Recipe
from mindsimkit.mindcore.budget_fit import fit_budgets
from mindsimkit.mindcore.engine_health import check_engines
from mindsimkit.mindsim.stage import commit_tool_schema
from mindsimkit.mindcore.preflight import EngineUnreachable, InfrastructureFailure, preflight, raise_if_all_failed

UNSET_KEY = "MINDSIM_PREFLIGHT_TEST_KEY_NEVER_SET"


def _recipe(roles, engines=None, **sections) -> Recipe:
    return Recipe(name="t", engines=engines or {"local": {"kind": "embedded"}}, roles=roles, **sections)


def _worst(schema_fn) -> int:
    return worst_case_tokens(schema_fn()).tokens


def _formulation() -> dict:
    from mindsimkit.profilegen.formulation import draft_model

    return draft_model().model_json_schema()


def _screen() -> dict:
    from mindsimkit.profilegen.screen import JudgeVerdict

    return JudgeVerdict.model_json_schema()


# -- budgets --------------------------------------------------------------------------------------
def test_small_budget_is_refused_naming_role_schema_setting_and_minimum():
    r = _recipe(
        {"default": {"engine": "local", "max_tokens": 4000}, "screener": {"engine": "local", "max_tokens": 900}}
    )
    with pytest.raises(ConfigError) as info:
        fit_budgets(r, r.engines_config(), {"profiles"})
    msg = str(info.value)
    assert "roles.screener.max_tokens is 900" in msg and "'screen'" in msg
    assert f"at least {_worst(_screen)}" in msg and "profile_writer" not in msg


def test_inherited_default_budget_is_refused_with_its_origin():
    r = _recipe({"default": {"engine": "local", "max_tokens": 384}})
    with pytest.raises(ConfigError, match=r"roles.default.max_tokens \(inherited by profile_writer\) is 384"):
        fit_budgets(r, r.engines_config(), {"profiles"})


def test_unset_budgets_are_raised_and_said():
    r = _recipe({"default": {"engine": "local", "temperature": 0.3}})
    cfg = r.engines_config()
    report = fit_budgets(r, cfg, {"run"})
    assert cfg.roles["profile_writer"].max_tokens == _worst(_formulation)
    assert cfg.roles["profile_writer"].temperature == 0.3  # the rest of the inherited spec is kept
    assert cfg.roles["patient"].max_tokens == _worst(commit_tool_schema)  # the larger of its two tools
    assert "max_tokens" not in cfg.roles["default"].model_dump(exclude_none=True)
    assert any("roles.profile_writer.max_tokens was unset; raised to" in n for n in report.notes)
    # scenario_max_tokens is not in the recipe: its default (900) is below the worst case, so raised
    assert report.section_overrides["simulation"]["scenario_max_tokens"] > 900
    from mindsimkit.mindsim.config import SimulationConfig

    scfg = report.apply("simulation", r.section("simulation", SimulationConfig))
    assert scfg.scenario_max_tokens == report.section_overrides["simulation"]["scenario_max_tokens"]
    assert {ln.action for ln in report.lines} == {"raised"}
    # the labeller only counts when validation.arc is on
    assert "labeller" not in {ln.role for ln in report.lines}


def test_explicit_stage_setting_below_worst_case_is_refused():
    r = _recipe({"default": {"engine": "local"}}, simulation={"scenario_max_tokens": 900})
    with pytest.raises(ConfigError, match=r"simulation.scenario_max_tokens is 900.*'Scenario'"):
        fit_budgets(r, r.engines_config(), {"simulate"})


def test_engine_tokenizer_lowers_the_minimum():
    r = _recipe({"default": {"engine": "local"}})
    report = fit_budgets(r, r.engines_config(), {"profiles"}, counters={"local": lambda text: 1})
    line = next(ln for ln in report.lines if ln.role == "profile_writer")
    assert line.worst_case < _worst(_formulation) and line.counted_with == "local tokenizer"


def test_unbounded_schema_is_named_not_guessed():
    from mindsimkit.mindcore import budget

    register_role_schema(
        RoleSchema(
            "critic",
            "open-judgment",
            lambda: {"type": "object", "properties": {"evidence": {"type": "string"}}},
            frozenset({"critique"}),
        )
    )
    try:
        r = _recipe({"default": {"engine": "local", "max_tokens": 100}})
        report = fit_budgets(r, r.engines_config(), {"critique"})
    finally:
        budget._REGISTRY.pop(("critic", "open-judgment"))
    assert report.lines[0].action == "unbounded"
    assert "evidence: string without maxLength" in report.notes[0]


def test_patientact_rubric_gets_its_own_judge_budget():
    """`judge run --rubric patientact` checks the judge role against PatientAct's answer schema, not MHQR's."""
    r = _recipe({"default": {"engine": "local"}})
    mhqr = fit_budgets(r, r.engines_config(), {"judge"})
    pa = fit_budgets(r, r.engines_config(), {"judge_patientact"})
    assert [line.schema for line in pa.lines] == ["patientact_conversation"]
    assert pa.worst("judge") > 0 and pa.worst("judge") != mhqr.worst("judge")
    small = _recipe({"default": {"engine": "local"}, "judge": {"engine": "local", "max_tokens": 100}})
    with pytest.raises(ConfigError, match="roles.judge.max_tokens is 100.*patientact_conversation"):
        fit_budgets(small, small.engines_config(), {"judge_patientact"})


def test_judge_budget_follows_the_recipe_issue_cap():
    r = _recipe({"default": {"engine": "local"}})
    full = fit_budgets(r, r.engines_config(), {"judge"})
    r.judge = {"max_issues": 3}
    capped = fit_budgets(r, r.engines_config(), {"judge"})
    assert full.worst("judge") > 4 * capped.worst("judge") > 0
    r.judge = {"max_issues": 3}
    small = _recipe({"default": {"engine": "local"}, "judge": {"engine": "local", "max_tokens": 100}})
    small.judge = {"max_issues": 3}
    with pytest.raises(ConfigError, match="roles.judge.max_tokens is 100.*mhqr_judgment"):
        fit_budgets(small, small.engines_config(), {"judge"})


# -- preflight ------------------------------------------------------------------------------------
def _probe_answers(req):
    if req.response_schema is not None:
        return {"mood": "fine", "calm": True}
    return "Hello there."


def test_preflight_on_fake_engine_passes_and_says_what_it_skipped(fake_engines):
    engines, backend = fake_engines(_probe_answers)
    r = _recipe({"default": {"engine": "local"}})
    with engines:
        report = preflight(r, engines, {"profiles"})
    assert [h.engine for h in report.engines] == ["fake"] and report.engines[0].structured_ok
    assert engines.config.roles["screener"].max_tokens == _worst(_screen)
    assert any("not checked" in n for n in report.notes)  # the fake engine reports no context size
    assert report.lines()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_engine_is_an_engine_error_naming_it():
    r = _recipe(
        {"default": {"engine": "gone"}},
        engines={"gone": {"kind": "openai", "base_url": f"http://127.0.0.1:{_closed_port()}/v1", "model": "m"}},
    )
    with Engines.from_config(r.engines_config()) as engines:
        with pytest.raises(EngineUnreachable, match="engine 'gone'") as info:
            preflight(r, engines, {"profiles"})
    assert isinstance(info.value, EngineError) and not isinstance(info.value, UserError)


def test_unset_key_variable_is_a_config_error_before_any_request(monkeypatch):
    monkeypatch.delenv(UNSET_KEY, raising=False)
    engines_section = {
        "api": {
            "kind": "openai",
            "base_url": f"http://127.0.0.1:{_closed_port()}/v1",
            "model": "m",
            "api_key_env": UNSET_KEY,
        }
    }
    r = _recipe({"default": {"engine": "api"}}, engines=engines_section)
    with Engines.from_config(r.engines_config()) as engines:
        with pytest.raises(ConfigError, match=f"environment variable {UNSET_KEY} is not set"):
            preflight(r, engines, {"profiles"})
    health = check_engines(r.engines_config())  # the same probe behind `mindsim engines check`
    assert health[0].problem_kind == "config" and UNSET_KEY in health[0].problem


class _VLLMLike:
    """A loopback server shaped like `vllm serve`: /v1/models with max_model_len, /tokenize, and chat
    completions that answer the probe."""

    def __init__(self, model: str, max_model_len: int):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, obj, status=200):
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/v1/models":
                    self._send({"object": "list", "data": [{"id": model, "max_model_len": max_model_len}]})
                else:
                    self._send({"error": "no route"}, 404)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/tokenize":
                    outer.tokenized += 1
                    self._send({"count": max(1, len(body["prompt"]) // 4), "max_model_len": max_model_len})
                    return
                content = json.dumps({"mood": "fine", "calm": True}) if body.get("response_format") else "Hi."
                self._send(
                    {
                        "id": "x",
                        "object": "chat.completion",
                        "created": 0,
                        "model": body["model"],
                        "choices": [
                            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
                        ],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                )

        self.tokenized = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def _served_recipe(url: str, model: str, **sections) -> Recipe:
    return _recipe(
        {"default": {"engine": "gpu"}}, engines={"gpu": {"kind": "openai", "base_url": url, "model": model}}, **sections
    )


def test_model_not_listed_is_a_config_error_naming_the_fix():
    with _VLLMLike("served-model", 32768) as srv:
        r = _served_recipe(srv.base_url, "wanted-model")
        with Engines.from_config(r.engines_config()) as engines:
            with pytest.raises(ConfigError, match="does not list model.*wanted-model.*served-model.*engines.gpu.model"):
                preflight(r, engines, {"profiles"})


def test_prompt_larger_than_context_is_refused_and_fitting_one_passes():
    small = {"turn_cap": 30, "message_max_tokens": 200}
    with _VLLMLike("m", 4096) as srv:
        r = _served_recipe(srv.base_url, "m", simulation=small)
        with Engines.from_config(r.engines_config()) as engines:
            with pytest.raises(ConfigError, match=r"role 'patient' on engine 'gpu'.*> 4096 \(max_model_len"):
                preflight(r, engines, {"simulate"})
    with _VLLMLike("m", 1_000_000) as srv:
        r = _served_recipe(srv.base_url, "m", simulation=small)
        with Engines.from_config(r.engines_config()) as engines:
            report = preflight(r, engines, {"simulate"})
        assert srv.tokenized > 0  # budgets and prompts were counted with the server's tokenizer
    checked = {c.role: c for c in report.contexts}
    assert {"patient", "counsellor", "scenario_writer", "memory_compactor"} <= set(checked)
    assert all(c.fits for c in checked.values()) and checked["patient"].context_tokens == 1_000_000
    assert all(ln.counted_with == "gpu tokenizer" for ln in report.budgets.lines)
    # the default role sets no max_tokens, so counsellor replies are unbounded: assumed, and said
    assert "no max_tokens" in checked["counsellor"].note and "assumed 512" in checked["patient"].note


def test_a_recipe_with_the_baselines_checks_the_mappers_budget_and_prompt():
    sim = {"turn_cap": 4, "message_max_tokens": 200, "patient_engine": ["mindsim", "patient_psi", "mindeval"]}
    with _VLLMLike("m", 1_000_000) as srv:
        r = _served_recipe(srv.base_url, "m", simulation=sim)
        with Engines.from_config(r.engines_config()) as engines:
            report = preflight(r, engines, {"simulate"})
    # Both baselines' calls share one setting, so the fit reports the larger of the two worst cases.
    mapper = [ln for ln in report.budgets.lines if ln.role == "baseline_mapper"]
    assert mapper and all(ln.budget >= ln.worst_case for ln in mapper)
    assert {ln.schema for ln in mapper} <= {"patient_psi:PatientPsiMap", "mindeval:MindEvalMap"}
    checked = {c.role: c for c in report.contexts}
    assert checked["baseline_mapper"].fits and set(checked["baseline_mapper"].prompt.parts) == {
        "patient_psi",
        "mindeval",
    }


def test_a_recipe_with_annaagent_checks_its_mapping_and_its_modulator_prompt():
    sim = {"turn_cap": 4, "message_max_tokens": 200, "patient_engine": ["mindsim", "annaagent"]}
    with _VLLMLike("m", 1_000_000) as srv:
        r = _served_recipe(srv.base_url, "m", simulation=sim)
        with Engines.from_config(r.engines_config()) as engines:
            report = preflight(r, engines, {"simulate"})
    lines = {ln.schema: ln for ln in report.budgets.lines if ln.schema.startswith("annaagent:")}
    # The three modulator answers share one setting, so the fit reports the largest of them.
    assert "annaagent:AnnaAgentMap" in lines and {ln.role for ln in lines.values()} == {
        "baseline_mapper",
        "annaagent_modulator",
    }
    assert all(ln.budget >= ln.worst_case for ln in lines.values())
    checked = {c.role: c for c in report.contexts}
    assert "annaagent" in checked["baseline_mapper"].prompt.parts
    modulator = checked["annaagent_modulator"]
    assert modulator.fits and set(modulator.prompt.parts) == {
        "emotion inference",
        "complaint switch",
        "memory check",
        "recall",
    }


def test_a_recipe_with_consistentmi_checks_its_trackers_budgets_and_prompt():
    sim = {"turn_cap": 4, "message_max_tokens": 200, "patient_engine": ["mindsim", "consistentmi"]}
    with _VLLMLike("m", 1_000_000) as srv:
        r = _served_recipe(srv.base_url, "m", simulation=sim)
        with Engines.from_config(r.engines_config()) as engines:
            report = preflight(r, engines, {"simulate"})
    tracker = [ln for ln in report.budgets.lines if ln.role == "consistentmi_tracker"]
    assert tracker and all(ln.budget >= ln.worst_case for ln in tracker)
    assert all(ln.schema.startswith("consistentmi:") for ln in tracker)
    checked = {c.role: c for c in report.contexts}
    assert checked["consistentmi_tracker"].fits
    assert set(checked["consistentmi_tracker"].prompt.parts) == {"topic", "motivation", "weights", "grounding"}
    assert set(checked["baseline_mapper"].prompt.parts) == {"consistentmi"}


def _patientact_contexts(engines_listed: list[str], context: int = 1_000_000, **patientact) -> dict:
    sim = {
        "turn_cap": 4,
        "message_max_tokens": 200,
        "patient_engine": engines_listed,
        "patientact": {"retrieval": "llm", **patientact},
    }
    with _VLLMLike("m", context) as srv:
        r = _served_recipe(srv.base_url, "m", simulation=sim)
        with Engines.from_config(r.engines_config()) as engines:
            report = preflight(r, engines, {"simulate"})
    return {c.role: c for c in report.contexts}


def test_a_recipe_with_patientact_checks_its_own_roles_prompts():
    checked = _patientact_contexts(["patientact"])
    for role in ("patient_appraiser", "profile_decomposer", "patient_matcher"):
        c = checked[role]
        assert c.fits and c.prompt is not None and c.prompt.tokens > 0, role
    parts = checked["patient_appraiser"].prompt.parts
    assert "system prompt" in parts and any(k.endswith("step (largest)") for k in parts)
    assert checked["patient_appraiser"].prompt.tokens == sum(parts.values())
    # The steps' prompt holds no profile in any arm (w/o DM changes the patient's prompt only).
    with_dm = _patientact_contexts(["patientact", "patientact:no_dm"])["patient_appraiser"].prompt.parts[
        "system prompt"
    ]
    assert with_dm == parts["system prompt"]
    # More recent turns in the steps' context make the step (and the matcher's prompt) longer.
    longer = _patientact_contexts(["patientact"], context_turns=12)
    assert longer["patient_appraiser"].prompt.tokens > checked["patient_appraiser"].prompt.tokens
    assert longer["patient_matcher"].prompt.tokens > checked["patient_matcher"].prompt.tokens
    # An 8k context cannot hold the decomposition prompt plus the default 7,000-token budget; the refusal
    # names the budget that sits above its schema's longest answer as the other way out.
    with pytest.raises(
        ConfigError,
        match=r"role 'profile_decomposer'.*lower simulation\.patientact\."
        r"decomposition_max_tokens from 7000 to its schema's longest answer",
    ):
        _patientact_contexts(["patientact"], context=8192)


def test_counsellor_binding_on_an_unknown_engine_is_refused(fake_engines):
    engines, _ = fake_engines(_probe_answers)
    r = _recipe(
        {"default": {"engine": "local"}},
        simulation={"counsellors": [{"name": "gpt", "engine": "nowhere", "model": "x"}]},
    )
    with engines:
        with pytest.raises(ConfigError, match="'gpt' names engine 'nowhere'"):
            preflight(r, engines, {"simulate"})


# -- after a stage --------------------------------------------------------------------------------
def test_all_failed_for_infrastructure_raises_with_classes_and_counts():
    rows = [
        {
            "profile_id": str(i),
            "stage": "formulation",
            "error": "TransportError: engine 'x': could not connect",
            "retry_on_rerun": True,
        }
        for i in range(3)
    ]
    rows.append(
        {"profile_id": "9", "stage": "screen", "error": "EngineUnavailable: refused key", "retry_on_rerun": True}
    )
    with pytest.raises(
        InfrastructureFailure, match=r"all 4 candidates.*3 × TransportError, 1 × EngineUnavailable"
    ) as info:
        raise_if_all_failed("profiles", rows)
    assert isinstance(info.value, EngineError)
    # not all failed, or a failure that is the model's answer: nothing to say
    raise_if_all_failed("profiles", rows, attempted=8)
    bad_json = {
        "profile_id": "5",
        "stage": "formulation",
        "error": "StructuredOutputError: EOF",
        "retry_on_rerun": False,
    }
    raise_if_all_failed("profiles", [*rows, bad_json])
    raise_if_all_failed("profiles", [])
    # rows without retry_on_rerun (the simulator's failed arcs) are judged by their class
    with pytest.raises(InfrastructureFailure, match="2 × TransportError"):
        raise_if_all_failed("simulate", [{"error": "TransportError: down"}] * 2)


def test_preflight_for_a_stage_without_a_recipe(fake_engines):
    """The judge has no recipe sections to read: preflight takes None and checks its engine and roles."""
    engines, _ = fake_engines(_probe_answers)
    with engines:
        report = preflight(None, engines, {"judge"})
    assert [u.role for u in report.roles] == ["judge"] and report.engines[0].ok


def test_counsellor_only_engine_is_not_asked_for_json():
    from mindsimkit.mindcore.config import OpenAIEngine, RoleSpec
    from mindsimkit.mindcore.fake import FakeBackend

    sim, chat_only = FakeBackend(_probe_answers, name="sim"), FakeBackend(lambda req: "Hello.", name="api")
    cfg = EnginesConfig.model_construct(
        engines={n: OpenAIEngine(base_url="http://fake.invalid/v1", model=n) for n in ("sim", "api")},
        roles={"default": RoleSpec(engine="sim"), "counsellor": RoleSpec(engine="api", max_tokens=64)},
    )
    with Engines(cfg, backends={"sim": sim, "api": chat_only}) as engines:
        report = preflight(_recipe({"default": {"engine": "local"}}), engines, {"simulate"})
    health = {h.engine: h for h in report.engines}
    assert health["api"].ok and not health["api"].structured_ok and health["sim"].structured_ok
    assert chat_only.requests and all(req.response_schema is None for req in chat_only.requests)


def test_a_raised_budget_goes_out_as_max_completion_tokens_with_the_reasoning_budget_on_top():
    """Budgets are fitted as numbers; which field carries them is the engine's business. A judge on a hosted
    reasoning model with no max_tokens is raised to its schema's worst case, and its judgments then send that
    number (plus the role's reasoning budget) as max_completion_tokens, which the stub requires."""
    from mindsimkit.judge.config import JudgeConfig
    from mindsimkit.judge.rubric import answer_model, load_rubric
    from openai_stub import OpenAIStub, hosted_reasoning, probe_answers

    worst = worst_case_tokens(
        answer_model(load_rubric(JudgeConfig().rubric), JudgeConfig().max_issues).model_json_schema()
    ).tokens
    with OpenAIStub(hosted_reasoning(probe_answers)).serve("o3") as stub:
        r = _recipe(
            {
                "default": {"engine": "api"},
                "judge": {"engine": "api", "reasoning_effort": "high", "reasoning_budget": 1000},
            },
            engines={"api": {"kind": "openai", "base_url": stub.base_url, "model": "o3"}},
        )
        with Engines.from_config(r.engines_config()) as engines:
            report = preflight(r, engines, {"judge"})
            assert engines.config.roles["judge"].max_tokens == worst  # raised in place, as before
            engines.run(engines.role("judge").chat([{"role": "user", "content": "hi"}]))
        body = stub.requests[-1]
    line = next(b for b in report.budgets.lines if b.role == "judge")
    assert line.action == "raised" and line.budget == worst
    assert body["max_completion_tokens"] == worst + 1000 and "max_tokens" not in body
    assert body["reasoning_effort"] == "high"


def test_a_counsellor_opening_sizes_the_patient_for_every_turn_it_writes():
    """With the patient opening, the scripted opening is no model turn (turn_cap - 1 are written); with the
    counsellor greeting first every one of the turn_cap turns is written, so the prompt grows by one more."""

    def parts(**sim):
        with _VLLMLike("m", 1_000_000) as srv:
            r = _served_recipe(srv.base_url, "m", simulation={"turn_cap": 4, "message_max_tokens": 200, **sim})
            with Engines.from_config(r.engines_config()) as engines:
                return {c.role: c for c in preflight(r, engines, {"simulate"}).contexts}["patient"].prompt.parts

    patient_first, counsellor_first = parts(), parts(opening="counsellor")
    assert "growth over 3 turns" in patient_first and "growth over 4 turns" in counsellor_first
    assert counsellor_first["growth over 4 turns"] == 4 * counsellor_first["first turn"]
    assert counsellor_first["growth over 4 turns"] > patient_first["growth over 3 turns"]
    one = parts(opening="counsellor", turn_cap=1)
    assert one["growth over 1 turns"] == one["first turn"]


def test_patientact_sizes_the_whole_conversation_and_the_message_only_matcher_of_the_reference_settings():
    """`step_context: whole` sizes the steps for every exchange the turn cap allows; `matcher_context: message`
    leaves the conversation out of the matcher's prompt (the patientact-reference preset's settings)."""
    recent = _patientact_contexts(["patientact"], context_turns=1)
    whole = _patientact_contexts(["patientact"], context_turns=1, step_context="whole", matcher_context="message")
    assert whole["patient_appraiser"].prompt.tokens > recent["patient_appraiser"].prompt.tokens
    assert whole["patient_matcher"].prompt.tokens < recent["patient_matcher"].prompt.tokens
