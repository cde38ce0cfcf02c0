"""Templates render in a sandbox (mindcore/sandbox.py): a rubric's judge template or a recipe's `prompts:` override
that reaches for Python internals is refused with one line and exit 2 before any engine starts or any request is
sent; loops and sizes are bounded; and the shipped templates say exactly what they said before the sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.prompts import load_overrides, sandboxed, shipped_templates, variables_of
from mindsimkit.mindcore.sandbox import MAX_OUTPUT, TemplateLimit, check_source, render_bounded

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
for extra in (TESTS, TESTS / "mindsim", TESTS / "judge"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from cli_streams import mindsim_script, without_progress  # noqa: E402
from openai_stub import after_probe, always_text, by_model, from_responder, openai_stub  # noqa: E402,F401

FAKE_KEY = "sk-mindsimtest-Sandbox0fakeKEY123"
ENV = {**os.environ, "COLUMNS": "40", "MINDSIM_TEST_KEY": FAKE_KEY}
ENV.pop("FORCE_COLOR", None)

# What the sweep sent: the environment through a Jinja global, and a shell command through str's subclasses.
ENVIRON = "{{ cycler.__init__.__globals__.os.environ }}"
POPEN = (
    "{% for c in VAR.__class__.__mro__[1].__subclasses__() %}{% if c.__name__ == '_wrap_close' %}"
    "{{ c.__init__.__globals__['popen']('touch MARK').read() }}{% endif %}{% endfor %}"
)


def mindsim(*args: object, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [mindsim_script(), *map(str, args)], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300
    )


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [x for x in without_progress(proc.stderr).splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    return lines[0]


def stub_recipe(path: Path, stub, roles: list[str], extra: str = "") -> Path:
    base_url = stub.serve("m", *roles).base_url
    lines = [f"  {r!r}: {{engine: stub, model: {r!r}}}" for r in roles]
    path.write_text(
        f"name: stub\nseed: 3\nengines:\n  stub: {{kind: openai, base_url: '{base_url}', model: m, "
        "native_tools: false, api_key_env: MINDSIM_TEST_KEY}\nroles:\n  default: {engine: stub}\n"
        + "\n".join(lines)
        + "\n"
        + extra,
        encoding="utf-8",
    )
    return path


def sessions_file(folder: Path) -> Path:
    """A sessions file `judge run --sessions` reads (one session of two counsellor replies)."""
    from judgefakes import session

    path = folder / "sessions.jsonl"
    path.write_text(json.dumps(session("s1", "p1", "alpha", 0, ["How are you?", "Tell me more."])) + "\n", "utf-8")
    return path


RUBRIC = """id: mine
name: Mine
version: '1'
source: ours
unit: conversation
scale: {min: 1, max: 5}
items:
  - {id: warmth, name: Warmth, question: Was the counsellor warm?, anchors: {1: a, 2: b, 3: c, 4: d, 5: e}}
judge: {template: ./judge.jinja2, instructions: Rate the counsellor.}
page: {title: T}
"""


# -- a rubric's judge template -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "body",
    [
        ENVIRON,
        POPEN.replace("VAR", "instructions"),
        "{% if false %}{{ self.__init__.__globals__ }}{% endif %}{{ transcript }}",
        "{% include './part.jinja2' %}",
    ],
    ids=["environ", "popen", "unrendered-branch", "included-file"],
)
def test_a_rubric_template_reaching_python_internals_is_refused_before_any_request(body, openai_stub, tmp_path):
    stub = openai_stub(after_probe(always_text('{"warmth_reason": "ok", "warmth": 3}')))
    recipe = stub_recipe(tmp_path / "r.yaml", stub, [])
    sessions = sessions_file(tmp_path)
    (tmp_path / "judge.jinja2").write_text(body, encoding="utf-8")
    (tmp_path / "part.jinja2").write_text("{{ lipsum.__globals__['os'].popen('touch MARK').read() }}", "utf-8")
    rubric = tmp_path / "rubric.yaml"
    rubric.write_text(RUBRIC, encoding="utf-8")
    out = tmp_path / "judged"
    proc = mindsim(
        "judge", "run", "--sessions", sessions, "--rubric", rubric, "--recipe", recipe, "--out", out, cwd=tmp_path
    )
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc)
    assert "judge.jinja2" in line or "part.jinja2" in line
    assert "sandbox" in line and "docs/prompts.md" in line
    assert stub.requests == [] and not (tmp_path / "MARK").exists() and not out.exists()
    assert FAKE_KEY not in proc.stderr + proc.stdout


# -- a recipe's prompts: override ----------------------------------------------------------------------------------
def test_a_prompts_override_running_a_shell_command_is_refused_before_any_request(openai_stub, tmp_path):
    from mindsimkit.profilegen.dataset import write_profiles
    from simfakes import SimResponder, make_profile

    write_profiles([make_profile("p1")], tmp_path / "profiles")
    stub = openai_stub(by_model({}, from_responder(SimResponder(end_after=2))))
    (tmp_path / "patient.jinja2").write_text(POPEN.replace("VAR", "situation") + "\n{{ formulation }}", "utf-8")
    recipe = stub_recipe(
        tmp_path / "r.yaml",
        stub,
        ["patient", "scenario_writer", "memory_compactor", "counsellor"],
        "simulation: {sessions: 1, turn_cap: 3}\nprompts: {patient/system.jinja2: ./patient.jinja2}\n",
    )
    for command in (
        ["simulate", "--profiles", tmp_path / "profiles", "--recipe", recipe, "--out", tmp_path / "sim"],
        ["engines", "check", recipe],
    ):
        proc = mindsim(*command, cwd=tmp_path)
        assert proc.returncode == 2, (command, proc.stderr)
        line = one_error_line(proc)
        assert "prompts.patient/system.jinja2" in line and "patient.jinja2:1" in line and "'_'" in line
    assert stub.requests == [] and not (tmp_path / "MARK").exists() and not (tmp_path / "sim").exists()


def test_the_environment_never_reaches_a_prompt_even_through_a_computed_name(tmp_path):
    # Refused statically (|attr with a computed name) and, were it not, at render time by the sandbox.
    (tmp_path / "mine.jinja2").write_text("{{ prior_log|attr(transcript) }}", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"mine\.jinja2:1: picks an attribute by a name computed at render time"):
        load_overrides({"memory/compact.jinja2": "mine.jinja2"}, tmp_path)
    env = sandboxed()
    for source in ("{{ x|attr(n) }}", "{{ x[n] }}", "{{ ('{0.' ~ n ~ '}').format(x) }}"):
        with pytest.raises(Exception, match="unsafe|not safely|is undefined"):
            render_bounded(env.from_string(source), {"x": "text", "n": "__class__"})


def test_objects_the_toolkit_passes_show_their_fields_not_their_methods():
    from mindsimkit.mindcore.config import RoleSpec

    role = RoleSpec(engine="local", temperature=0.3)
    env = sandboxed()
    assert render_bounded(env.from_string("{{ role.engine }} {{ role.temperature }}"), {"role": role}) == "local 0.3"
    with pytest.raises(Exception, match="unsafe"):  # a pydantic model's parse_file would read any file
        render_bounded(env.from_string("{{ role.parse_file('/etc/hostname') }}"), {"role": role})


# -- bounds --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "source, said",
    [
        ("{% for i in range(10**9) %}x{% endfor %}", "more than 100,000 numbers"),
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "loop steps and calls"),
        ("{{ 'x' * 10**9 }}", "1,000,000,000 characters"),
        ("{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}", "rendered text passed"),
        ("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}", "over the"),
        (
            "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set b %}{{ ns.s }}{{ ns.s }}{% endset %}"
            "{% set ns.s = b %}{% endfor %}",
            "over the",
        ),
        ("{% set ns = namespace(s=[1]) %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "over the"),
        ("{{ ('x' * 100000).replace('', 'x' * 100000) }}", "over the"),
        ("{{ 'x'|center(10**9) }}", "filter 'center'"),
        ("{{ 'x'.ljust(10**9) }}", "str.ljust"),
        ("{{ '%999999999s' % 'x' }}", "'%' format"),
        ("{{ '{:>999999999}'.format(1) }}", "'{}' format"),
        ("{{ 7 ** 99999999 }}", "too large a number"),
        (
            "{% set ns = namespace(n=3) %}{% for i in range(40) %}{% set ns.n = ns.n * ns.n %}{% endfor %}",
            "too large a number",
        ),
    ],
    ids=[
        "range",
        "nested-loops",
        "repeat",
        "output",
        "doubling-join",
        "doubling-block",
        "doubling-list",
        "replace",
        "center-filter",
        "ljust-method",
        "percent-width",
        "format-width",
        "power",
        "squaring",
    ],
)
def test_a_template_that_would_run_long_or_build_a_huge_value_stops_with_one_line(source, said):
    with pytest.raises(TemplateLimit, match=said):
        render_bounded(sandboxed().from_string(source), {})


def test_a_huge_loop_in_a_rubric_template_is_one_error_line_not_a_hang(openai_stub, tmp_path):
    stub = openai_stub(after_probe(always_text('{"warmth_reason": "ok", "warmth": 3}')))
    recipe = stub_recipe(tmp_path / "r.yaml", stub, [])
    sessions = sessions_file(tmp_path)
    (tmp_path / "judge.jinja2").write_text(
        "{% for i in range(99999) %}{% for j in range(99999) %}{{ '' }}{% endfor %}{% endfor %}{{ transcript }}",
        encoding="utf-8",
    )
    (tmp_path / "rubric.yaml").write_text(RUBRIC, encoding="utf-8")
    proc = mindsim(
        "judge",
        "run",
        "--sessions",
        sessions,
        "--rubric",
        tmp_path / "rubric.yaml",
        "--recipe",
        recipe,
        "--out",
        tmp_path / "judged",
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    line = one_error_line(proc)
    assert "judge.jinja2" in line and "loop steps and calls" in line
    assert stub.requests == []


# -- the shipped templates -----------------------------------------------------------------------------------------
def test_every_shipped_template_passes_the_static_check():
    for name in shipped_templates():
        variables_of((REPO / "prompts" / name).read_text(encoding="utf-8"), name)
    for card in (REPO / "cards").glob("*.jinja2"):
        check_source(sandboxed(), card.read_text(encoding="utf-8"), card.name)
    assert MAX_OUTPUT >= 1_000_000  # a long transcript's prompt fits


# One test of the suite per shipped template (the fewest that reach all of them), each rendering on its own real
# context; tests/conftest.py renders every template a test renders both in the sandbox and in plain Jinja and fails
# the test on any difference, and records which templates it compared.
RENDERING_TESTS = [
    "tests/mindsim/test_baselines.py::test_four_engines_side_by_side_write_four_systems_and_resume",
    "tests/mindsim/test_patientact.py::test_without_dynamic_memory_the_whole_profile_is_in_the_system_prompt_and_"
    "nothing_is_retrieved",
    "tests/mindsim/test_patientact.py::test_reproduction_recipe_and_its_counsellor_prompt",
    "tests/mindsim/test_patientact_reference.py::test_the_formulation_is_screened_and_revised_once_when_it_fails",
    "tests/mindsim/test_patientact_reference.py::test_the_behaviour_step_avoids_a_third_same_behaviour_and_sees_the_"
    "last_three",
    "tests/profilegen/test_patientact_shape.py::test_a_profile_job_in_the_shape_writes_the_lists_the_split_and_the_"
    "revisions",
    "tests/profilegen/test_patientact_shape.py::test_a_draft_left_short_by_repeats_gets_each_missing_cycle_under_a_"
    "label_it_has_not_used",
    "tests/profilegen/test_patientact_shape.py::test_a_conflict_with_the_recorded_age_is_not_the_demographics_to_"
    "settle",
    "tests/profilegen/test_formulation.py::test_off_vocabulary_reply_is_reasked_then_accepted",
    "tests/profilegen/test_causal_checks.py::test_on_profile_is_revised_until_the_causal_rules_hold",
    "tests/profilegen/test_causal_checks.py::test_a_causal_draft_at_its_limits_goes_back_whole_to_its_revision",
    "tests/judge/test_judging.py::test_cache_key_depends_on_content_and_judge",
    "tests/judge/test_presets.py::test_reference_judgment_is_asked_in_their_format_and_stored_in_ours",
    "tests/judge/test_patientact_rubric.py::test_run_writes_rows_report_and_resumes",
    "tests/mindsim_app/test_patientact_rubric.py::test_profile_eval_writes_table_one_with_chance_rates_diversity_and_"
    "human_agreement",
    "tests/validation/test_arc.py::test_invalid_labels_are_counted_as_failures_and_retried_next_time",
    "tests/mindsim_app/test_cards.py::test_a_corrupt_manifest_is_refused_with_one_clear_error",
    "tests/mindsim/test_annaagent.py::test_a_two_session_arc_records_emotion_stage_and_memory_per_turn",
    "tests/mindsim/test_consistentmi.py::test_a_two_session_arc_carries_the_stage_and_records_every_turns_state",
    "tests/profilegen/test_situation_chain.py::test_a_passing_profile_stops_the_loop_and_the_guidance_falls_back_to_"
    "the_issues",
    "tests/profilegen/test_situation_chain.py::test_the_stage_writes_every_situation_counts_failures_and_resumes",
    "tests/mindsim/test_patientact_situations.py::test_patientact_plays_a_situation_profile_from_its_own_formulation",
    "tests/mindcore/test_template_sandbox.py::test_the_scales_template_renders_a_shipped_rubric",
    "tests/mindcore/test_template_sandbox.py::test_the_reference_preset_renders_its_own_templates",
]


def test_the_reference_preset_renders_its_own_templates(tmp_path):
    from test_reference_preset import run  # the preset's run on the fake engine (its untimed counsellor, next writer)

    summary, _ = run(tmp_path / "run")
    assert not summary.failed_arcs


def test_the_scales_template_renders_a_shipped_rubric():
    from mindsimkit.judge import rubrics, scales

    prompt = scales.prompt(rubrics.load("mindeval_v1"), transcript=(("patient", "hi"), ("counsellor", "hello")))
    assert "hello" in prompt


def test_every_shipped_template_renders_byte_identically_in_the_sandbox(tmp_path):
    record = tmp_path / "rendered.txt"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "not embedded", *RENDERING_TESTS],
        cwd=REPO,
        env={**os.environ, "MINDSIM_RENDERED_BOTH_WAYS": str(record)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:]
    compared = set(record.read_text(encoding="utf-8").split())
    wanted = set(shipped_templates()) | {p.name for p in (REPO / "cards").glob("*.jinja2")}
    assert wanted <= compared, sorted(wanted - compared)
