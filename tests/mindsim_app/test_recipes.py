"""Every shipped recipe validates section by section, and an unreachable engine is explained."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mindsimkit.judge.config import JudgeConfig
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.recipe import STAGE_SECTIONS, load_recipe
from mindsimkit.mindsim_app.job import OutputConfig
from mindsimkit.mindsim_app.release import ReleaseConfig
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.profilegen.config import ProfilesConfig
from mindsimkit.validation.config import ValidationConfig

RECIPES = sorted((Path(__file__).resolve().parents[2] / "recipes").glob("*.yaml"))
BENCHMARK = Path(__file__).resolve().parents[2] / "recipes" / "benchmark.yaml"


# Each stage section's config model, as the job validates it before any engine starts.
SECTION_MODELS = {
    "profiles": ProfilesConfig,
    "simulation": SimulationConfig,
    "validation": ValidationConfig,
    "judge": JudgeConfig,
    "output": OutputConfig,
    "release": ReleaseConfig,
}


def test_every_stage_section_has_its_model():
    assert set(SECTION_MODELS) == set(STAGE_SECTIONS)


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.name)
def test_recipe_sections_validate(path):
    r = load_recipe(path)
    raw = yaml.safe_load(path.read_text())
    # Every shipped recipe has every stage section (the job runs the judge only when `judge:` is there).
    assert set(STAGE_SECTIONS) <= set(raw), sorted(set(STAGE_SECTIONS) - set(raw))
    for name, model in SECTION_MODELS.items():
        cfg = r.section(name, model)
        assert isinstance(cfg, model)
        # Every key the recipe sets is read into its field, with the recipe's value where it is a plain one.
        assert set(raw[name]) <= cfg.model_fields_set, (name, set(raw[name]) - cfg.model_fields_set)
        for key, value in raw[name].items():
            if isinstance(value, (str, int, float, bool)):
                got = getattr(cfg, key)
                assert got == value or str(got) == str(value), (name, key, got, value)


@pytest.mark.parametrize("name", STAGE_SECTIONS)
def test_a_bad_value_in_any_stage_section_is_refused_by_name(name, tmp_path):
    raw = yaml.safe_load(RECIPES[0].read_text())
    raw[name]["not_a_setting"] = 1
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(ConfigError, match=rf"{name}\.not_a_setting"):
        load_recipe(path).section(name, SECTION_MODELS[name])


def test_realism_recipe_runs_the_papers_comparison():
    r = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "realism.yaml")
    p, s = r.section("profiles", ProfilesConfig), r.section("simulation", SimulationConfig)
    assert p.pool_size == 100 and (s.sessions, s.turn_cap) == (1, 15)
    assert s.patient_engines == ["mindsim", "patientact", "patient_psi", "mindeval"] and len(s.counsellors) >= 2
    assert s.patientact.allow_end is False  # only MindSim may leave early (docs/baselines.md)
    v = r.validation
    assert (v["first_sessions_only"], v["max_patient_turns"], v["counsellors"], v["arc"]) == (
        True,
        15,
        ["counsellor"],
        True,
    )
    assert v["counsellors"][0] == s.counsellors[0]


def test_benchmark_recipe_has_paper_settings():
    r = load_recipe(Path(__file__).resolve().parents[2] / "recipes" / "benchmark.yaml")
    p, s = r.section("profiles", ProfilesConfig), r.section("simulation", SimulationConfig)
    assert (p.candidates, p.pool_size, p.benchmark_size, p.poor_qol_floor) == (1000, 100, 50, 0.10)
    # App. C screens each candidate once and draws the pool from the clean ones: no profile is sent back.
    assert p.max_revisions == 0
    assert (s.sessions, s.replies_per_session, s.turn_cap) == (3, 30, 31) and len(s.counsellors) >= 2
    # "The paper's full settings" run MindSim as the authors' code does, and no preset setting is replaced.
    assert s.preset_for("mindsim") == "mindeval2-reference" and s.preset_notes() == []
    assert s.agenda_tools == "with_message" and s.return_reasoning and s.message_fallback
    # The patient's engine calls tools natively, so commit_move and the agenda tools travel as real tool calls (the
    # agenda tools beside the words need them), and its serve line turns vLLM's tool calling on.
    from mindsimkit.mindcore.vllm_serve import serve_command

    patient = r.engines_config().engines[r.engines_config().role_spec("patient").engine]
    assert patient.native_tools
    cmd = serve_command(patient)
    assert "--enable-auto-tool-choice" in cmd and cmd[cmd.index("--tool-call-parser") + 1]


def test_engines_check_explains_unreachable_benchmark_engines(monkeypatch):
    from mindsimkit.mindcore.engine_health import check_engines

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    r = load_recipe(BENCHMARK)
    cfg = r.engines_config()
    cfg.engines["glm"] = cfg.engines["glm"].model_copy(update={"port": 9})  # nothing listens there
    results = {h.engine: h for h in check_engines(cfg)}
    assert not results["glm"].ok and any("vllm serve zai-org/GLM-5.2-FP8" in h for h in results["glm"].hints)
    assert not results["openai"].ok and any("OPENAI_API_KEY is not set" in h for h in results["openai"].hints)


def test_benchmark_recipe_states_the_papers_reasoning_settings():
    roles = load_recipe(BENCHMARK).roles
    assert roles["judge"].reasoning_effort == "high" and "temperature" in roles["judge"].omit
    for role in ("patient", "memory_compactor", "scenario_writer"):  # the patient model, thinking on, at 1.0
        assert roles[role].thinking is True and roles[role].temperature == 1.0 and roles[role].engine == "patient"
    assert all(roles[c].temperature == 1.0 for c in roles if c.startswith("counsellor"))
    # First scenarios written in advance by Claude Sonnet 4.6, later ones by the patient model (App. D).
    first = roles["first_scenario_writer"]
    assert first.engine == "anthropic" and first.model == "claude-sonnet-4.6"


def test_benchmark_recipe_passes_preflight_against_reasoning_and_thinking_stubs(monkeypatch):
    """Every engine of the paper's recipe pointed at a stub: OpenAI-hosted ones at a server that enforces a
    reasoning model's rules (400 for max_tokens and a non-default temperature), vLLM ones at a chat-template
    server that reads `thinking`. The preflight of the whole job passes, and the probes carried the
    recipe's reasoning effort and thinking switch in the fields those servers read."""
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.preflight import preflight
    from openai_stub import OpenAIStub, hosted_reasoning, probe_answers, template_thinking, tool_calling

    monkeypatch.setenv("OPENAI_API_KEY", "test-key-not-secret")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key-not-secret")
    r = load_recipe(BENCHMARK)
    models = [getattr(e, "model", "") for e in r.engines.values()] + [s.model for s in r.roles.values() if s.model]
    hosted = OpenAIStub(hosted_reasoning(probe_answers)).serve(*models)
    # vLLM served as the recipe's comments say: thinking read by the chat template, tool calls parsed.
    served = OpenAIStub(tool_calling(template_thinking(probe_answers, variables=("thinking",)))).serve(*models)
    plain = OpenAIStub(probe_answers).serve(*models)  # Anthropic's endpoint takes max_tokens and a temperature
    with hosted, served, plain:
        port = int(served.base_url.rsplit(":", 1)[1].split("/")[0])
        for name, e in r.engines.items():
            if e.kind == "vllm":
                r.engines[name] = e.model_copy(update={"host": "127.0.0.1", "port": port})
            else:  # the hosted auto rule reads the model name here, not api.openai.com
                url = hosted.base_url if name == "openai" else plain.base_url
                r.engines[name] = e.model_copy(update={"base_url": url})
        with Engines.from_config(r.engines_config()) as engines:
            report = preflight(r, engines, {"run", "judge", "validate"})
        judge = [b for b in hosted.requests if b.get("reasoning_effort") == "high"]
        thinking = [b for b in served.requests if (b.get("chat_template_kwargs") or {}).get("thinking") is True]
    assert judge and all("max_completion_tokens" in b and "temperature" not in b for b in judge)
    assert thinking and all(b["max_tokens"] >= 4096 for b in thinking)  # the reasoning budget on top
    # The judge's fitted budget goes out as max_completion_tokens: the same number, another field name.
    line = next(b for b in report.budgets.lines if b.role == "judge")
    assert line.action == "ok" and line.budget == 8192
    assert {h.engine for h in report.engines if h.accepted} >= {"openai", "patient"}
    assert report.tool_calls() == {"patient": "native"}  # commit_move goes out as a real tool call
    assert all(a.ok for h in report.engines for a in h.accepted)
    assert any(
        ln.startswith("request judge on openai (gpt-6.1-sol): ")
        and "reasoning_effort=high" in ln
        and ln.endswith("accepted")
        for ln in report.lines()
    )


HOSTED = [p for p in RECIPES if "kind: embedded" not in p.read_text()]


@pytest.mark.parametrize("path", HOSTED, ids=lambda p: p.name)
def test_every_hosted_recipe_passes_the_whole_jobs_preflight_against_a_stub(path, tmp_path, monkeypatch):
    """What `mindsim run RECIPE` checks before its first stage, with every engine at a stub that answers each
    probe: a budget below its schema's longest answer (the PatientAct recipes' judge once was) or a refused
    request fails here instead of on a user's first run."""
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.preflight import preflight
    from openai_stub import OpenAIStub, probe_answers, tool_calling

    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.setenv(name, "test-key-not-secret")
    monkeypatch.chdir(tmp_path)  # a situations folder the recipe names is read when its stage starts, not here
    r = load_recipe(path)
    models = [getattr(e, "model", "") for e in r.engines.values()] + [s.model for s in r.roles.values() if s.model]
    with OpenAIStub(tool_calling(probe_answers)).serve(*models) as stub:
        port = int(stub.base_url.rsplit(":", 1)[1].split("/")[0])
        for name, e in r.engines.items():
            update = {"host": "127.0.0.1", "port": port} if e.kind == "vllm" else {"base_url": stub.base_url}
            r.engines[name] = e.model_copy(update=update)
        with Engines.from_config(r.engines_config()) as engines:
            report = preflight(r, engines, {"run", "judge", "validate"})
    assert report.budgets.lines and all(ln.action != "refuse" for ln in report.budgets.lines)
