"""Every prompt swappable: a recipe's `prompts:` section points a shipped template at the
user's own Jinja file. Checked at load (unknown name, missing file, bad syntax, a variable the toolkit does not
give → ConfigError, exit 2, before any engine starts); installed so `render` and `template_hash` use it in
this process and in worker processes; its content goes into the recipe hash. docs/prompts.md's table of
templates and variables is generated from the templates, so it cannot drift."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.prompts import (
    prompts_table,
    render,
    shipped_templates,
    shipped_variables,
    snapshot,
    template_hash,
    template_index,
)
from mindsimkit.mindcore.recipe import load_recipe

REPO = Path(__file__).resolve().parents[2]


def _recipe(tmp_path: Path, prompts: dict[str, str], **files: str) -> Path:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    path = tmp_path / "recipe.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "t",
                "engines": {"local": {"kind": "embedded"}},
                "roles": {"default": {"engine": "local"}},
                "prompts": prompts,
            }
        )
    )
    return path


MEMORY = "memory/compact.jinja2"
MINE = "Keep at most {{ max_entries }} lines.\nOld log:\n{{ prior_log }}\nSession:\n{{ transcript }}\n"


def test_an_override_renders_and_is_hashed_in_place_of_the_shipped_template(tmp_path):
    shipped_hash = template_hash(MEMORY)
    r = load_recipe(_recipe(tmp_path, {MEMORY: "mine.jinja2"}, **{"mine.jinja2": MINE}))
    assert render(MEMORY, max_entries=3, prior_log="- a", transcript="t").startswith("Keep at most 3 lines.")
    assert template_hash(MEMORY) == r.prompt_overrides[MEMORY].sha256 != shipped_hash
    assert r.content_dump()["prompts"] == {MEMORY: {"path": "mine.jinja2", "sha256": template_hash(MEMORY)}}
    # A recipe without `prompts:` (the next command) renders the shipped template again.
    load_recipe(REPO / "recipes" / "quickstart.yaml")
    assert (
        template_hash(MEMORY) == shipped_hash
        and "prompts" not in load_recipe(REPO / "recipes" / "quickstart.yaml").content_dump()
    )


def test_the_override_content_is_in_the_recipe_hash(tmp_path):
    a = load_recipe(_recipe(tmp_path, {MEMORY: "mine.jinja2"}, **{"mine.jinja2": MINE})).content_dump()
    b = load_recipe(_recipe(tmp_path, {MEMORY: "mine.jinja2"}, **{"mine.jinja2": MINE + "Be brief.\n"})).content_dump()
    assert a != b  # same path, other text: a run folder made with one is not resumed with the other


@pytest.mark.parametrize(
    "prompts, files, message",
    [
        (
            {"memory/compaction.jinja2": "mine.jinja2"},
            {"mine.jinja2": MINE},
            r"prompts\.memory/compaction\.jinja2: no shipped template of that name \(e\.g\. memory/compact\.jinja2",
        ),
        ({MEMORY: "absent.jinja2"}, {}, r"prompts\.memory/compact\.jinja2: file .*absent\.jinja2 not found"),
        (
            {MEMORY: "mine.jinja2"},
            {"mine.jinja2": "{{ prior_log }} {{ patient_name }} {{ turns }}"},
            r"uses patient_name, turns, which the toolkit does not give this template \(it gives: max_entries, "
            r"prior_log, transcript",
        ),
        (
            {MEMORY: "mine.jinja2"},
            {"mine.jinja2": "line one\n{% if prior_log %}\nno end"},
            r"mine\.jinja2:\d+: not a valid Jinja template",
        ),
    ],
    ids=["unknown-name", "missing-file", "unknown-variable", "syntax"],
)
def test_bad_overrides_are_config_errors_at_load(tmp_path, prompts, files, message):
    with pytest.raises(ConfigError, match=message):
        load_recipe(_recipe(tmp_path, prompts, **files))


def test_bad_override_exits_2_with_one_error_line_before_any_engine(tmp_path, capsys):
    from mindsimkit.mindsim_app.cli import main

    path = _recipe(tmp_path, {MEMORY: "mine.jinja2"}, **{"mine.jinja2": "{{ nope }}"})
    assert main(["engines", "check", str(path)]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].startswith("error:") and "nope" in err[0]


def test_every_prompt_the_issue_names_is_swappable():
    wanted = {
        "patient/system.jinja2",
        MEMORY,
        "scenario/first.jinja2",
        "scenario/next.jinja2",
        "counsellor/system.jinja2",
        "judge/system.jinja2",
        "judge/user.jinja2",
        "labeller/arc_system.jinja2",
        "labeller/arc_turn.jinja2",
        "profilegen/writer_system.jinja2",
        "profilegen/writer_user.jinja2",
        "profilegen/screener_system.jinja2",
        "profilegen/screener_user.jinja2",
        "patientact/appraiser_system.jinja2",
        "patientact/step.jinja2",
        "patientact/signal.jinja2",
        "patientact/decompose.jinja2",
        "patientact/psych_formulation.jinja2",
        "patientact/therapist.jinja2",
        "patientact/patient_system.jinja2",
        "judge/patientact_conversation.jinja2",
        "judge/patientact_profile.jinja2",
    }
    assert wanted <= set(shipped_templates())


def test_index_and_docs_table_match_the_templates():
    assert set(template_index()) == set(shipped_templates())
    docs = (REPO / "docs" / "prompts.md").read_text()
    start, end = "<!-- prompts-table:start -->", "<!-- prompts-table:end -->"
    table = docs.split(start, 1)[1].split(end, 1)[0].strip()
    assert table == prompts_table(), "docs/prompts.md is stale: paste the output of `python -m mindcore.prompts`"
    assert "`max_entries`, `prior_log`, `transcript`" in table
    assert shipped_variables("judge/user.jinja2") == {"counsellor_system_prompt", "reply_number", "transcript"}


def test_a_stage_sends_the_override(tmp_path, fake_engines):
    from mindsimkit.mindsim.memory import compact_memory

    load_recipe(_recipe(tmp_path, {MEMORY: "mine.jinja2"}, **{"mine.jinja2": MINE}))
    engines, fake = fake_engines(lambda _r: "- Sam moved house.")
    with engines:
        engines.run(compact_memory(engines.role("memory_compactor"), [], "P: I moved.", 30, 0))
    assert fake.requests[0].messages[0]["content"].startswith("Keep at most 30 lines.")


def test_workers_in_other_processes_render_the_override(tmp_path):
    """What a Ray worker (`mindcore.shards`) or a distilabel worker (`Engines.wire_spec`) receives is the
    snapshot; a fresh interpreter that installs it renders the override and reports its hash."""
    load_recipe(_recipe(tmp_path, {MEMORY: "mine.jinja2"}, **{"mine.jinja2": MINE}))
    (tmp_path / "mine.jinja2").unlink()  # the worker needs the text, not the file
    blob = tmp_path / "snapshot.pkl"
    blob.write_bytes(pickle.dumps(snapshot()))
    code = (
        "import pickle, sys, json; from mindcore.prompts import install_overrides, render, template_hash; "
        f"install_overrides(pickle.load(open({str(blob)!r}, 'rb'))); "
        f"print(json.dumps([render({MEMORY!r}, max_entries=2, prior_log='', transcript=''), "
        f"template_hash({MEMORY!r})]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    text, digest = json.loads(out.stdout)
    assert text.startswith("Keep at most 2 lines.") and digest == template_hash(MEMORY)


def test_distilabel_worker_llm_installs_the_overrides_it_is_given(tmp_path):
    from mindsimkit.mindcore.config import EnginesConfig, OpenAIEngine, RoleSpec
    from mindsimkit.mindcore.distilabel_llm import MindcoreLLM
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.prompts import install_overrides

    load_recipe(_recipe(tmp_path, {MEMORY: "mine.jinja2"}, **{"mine.jinja2": MINE}))
    cfg = EnginesConfig(
        engines={"e": OpenAIEngine(base_url="http://127.0.0.1:9/v1", model="m")},
        roles={"default": RoleSpec(engine="e")},
    )
    with Engines.from_config(cfg) as engines:
        wire = engines.wire_spec("profile_writer")
    install_overrides({})  # as in a fresh worker process
    MindcoreLLM(wire=wire).load()
    assert render(MEMORY, max_entries=1, prior_log="", transcript="").startswith("Keep at most 1 lines.")
