"""Patient engines downstream of the simulator: token budgets by patient engine (the MindSim patient's tool
schemas only when the recipe runs MindSim, PatientAct's steps only when it runs PatientAct), and the
dataset card of a run holding PatientAct sessions (fields explained, counts computed from the rows)."""

from __future__ import annotations

import pytest

from mindsimkit.mindcore.budget import worst_case_tokens
from mindsimkit.mindcore.config import EnginesConfig, OpenAIEngine, RoleSpec
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindcore.recipe import Recipe
from mindsimkit.mindcore.budget_fit import fit_budgets
from mindsimkit.mindcore.preflight import preflight
from mindsimkit.mindsim.stage import agenda_tool_schema, commit_tool_schema
from restamp import header

MINDSIM_SCHEMAS = {"tool_choice:commit_move", "tool_choice:agenda"}


def _recipe(engine, roles=None) -> Recipe:
    simulation = {} if engine is None else {"patient_engine": engine}
    return Recipe(
        name="t",
        engines={"local": {"kind": "embedded"}},
        roles=roles or {"default": {"engine": "local"}},
        simulation=simulation,
    )


def _schemas(report) -> set[str]:
    return {ln.schema for ln in report.lines}


@pytest.mark.parametrize(
    "engine, mindsim, patientact",
    [
        (None, True, False),
        ("mindsim", True, False),
        ("patientact", False, True),
        (["mindsim", "patientact"], True, True),
        (["patientact", "mindsim"], True, True),
    ],
)
def test_each_engines_schemas_are_checked_only_when_the_recipe_runs_it(engine, mindsim, patientact):
    r = _recipe(engine)
    names = _schemas(fit_budgets(r, r.engines_config(), {"simulate"}))
    # fit_budgets keeps one line per role and budget setting (its largest schema): commit_move stands for the patient.
    assert ("tool_choice:commit_move" in names) == mindsim
    assert any(n.startswith("patientact:") for n in names) == patientact
    assert "Scenario" in names  # scenarios and memory serve both engines


def test_a_patient_budget_below_commit_move_is_refused_only_when_mindsim_plays_the_patient():
    commit = worst_case_tokens(commit_tool_schema()).tokens
    assert commit > worst_case_tokens(agenda_tool_schema()).tokens
    roles = {"default": {"engine": "local"}, "patient": {"engine": "local", "max_tokens": commit - 1}}
    for engine in ("mindsim", ["patientact", "mindsim"]):
        r = _recipe(engine, roles)
        with pytest.raises(ConfigError, match=rf"roles.patient.max_tokens is {commit - 1}.*'tool_choice:commit_move'"):
            fit_budgets(r, r.engines_config(), {"simulate"})
    r = _recipe("patientact", roles)
    cfg = r.engines_config()
    report = fit_budgets(r, cfg, {"simulate"})
    assert not _schemas(report) & MINDSIM_SCHEMAS and "patient" not in {ln.role for ln in report.lines}
    assert cfg.roles["patient"].max_tokens == commit - 1  # a speaking patient's cap is left alone


def test_patientact_step_budget_is_checked_in_a_patientact_recipe_only():
    small = {"patientact": {"step_max_tokens": 10}}
    for engine, refused in (("mindsim", False), ("patientact", True), (["mindsim", "patientact"], True)):
        r = Recipe(
            name="t",
            engines={"local": {"kind": "embedded"}},
            roles={"default": {"engine": "local"}},
            simulation={"patient_engine": engine, **small},
        )
        if refused:
            with pytest.raises(ConfigError, match=r"simulation.patientact.step_max_tokens is 10"):
                fit_budgets(r, r.engines_config(), {"simulate"})
        else:
            assert not any(
                n.startswith("patientact:") for n in _schemas(fit_budgets(r, r.engines_config(), {"simulate"}))
            )


def _probe_answers(req):
    if req.response_schema is not None:
        return {"mood": "fine", "calm": True}
    return "Hello there."


def _two_engines(recipe_engine):
    """The patient on an engine that only chats, everything else on a structured one."""
    sim, talk = FakeBackend(_probe_answers, name="sim"), FakeBackend(lambda req: "Hello.", name="talk")
    cfg = EnginesConfig.model_construct(
        engines={n: OpenAIEngine(base_url="http://fake.invalid/v1", model=n) for n in ("sim", "talk")},
        roles={"default": RoleSpec(engine="sim"), "patient": RoleSpec(engine="talk", max_tokens=256)},
    )
    return Engines(cfg, backends={"sim": sim, "talk": talk}), talk


def test_preflight_asks_a_patientact_patient_engine_for_chat_only_and_probes_the_appraiser():
    engines, talk = _two_engines("patientact")
    with engines:
        report = preflight(_recipe("patientact", {"default": {"engine": "local"}}), engines, {"simulate"})
    health = {h.engine: h for h in report.engines}
    assert health["talk"].ok and not health["talk"].structured_ok and health["sim"].structured_ok
    assert talk.requests and all(req.response_schema is None for req in talk.requests)
    assert {"patient_appraiser", "profile_decomposer"} <= {u.role for u in report.roles}
    assert not _schemas(report.budgets) & MINDSIM_SCHEMAS


def test_preflight_still_asks_a_mindsim_patient_engine_for_json():
    engines, talk = _two_engines("mindsim")
    with engines:
        with pytest.raises(Exception) as info:
            preflight(_recipe(["mindsim", "patientact"], {"default": {"engine": "local"}}), engines, {"simulate"})
    assert "talk" in str(info.value)
    assert any(req.response_schema is not None for req in talk.requests)


# -- a run with both engines: validation systems and the dataset card ------------------------------------
BEHAVIOURS = ("resistance", "recounting", "insight")


def _both_engines_run(tmp_path_factory, engines=("mindsim", "patientact")):
    """A real simulator run (fake engine) whose PatientAct behaviour cycles, so shares are not all one."""

    from mindsimkit.mindsim import simulate
    from mindsimkit.mindsim.config import SimulationConfig
    from simfakes import SimResponder, make_profile
    from test_patientact import PAResponder

    steps = {"DecompositionDraft", "PsychFormulation", "Reaction", "Behaviour", "Resistance", "TrustChange"}
    sim, pa = SimResponder(end_after=99), PAResponder(trust=["rise_slight", "unchanged", "fall_significant"])

    def respond(req):
        if req.schema_name == "Behaviour":
            n = sum(q.schema_name == "Behaviour" for q in backend.requests)
            return {"why": "as it comes", "behaviour": BEHAVIOURS[n % 3], "end_conversation": False}
        return pa(req) if req.schema_name in steps else sim(req)

    out = tmp_path_factory.mktemp("run")
    backend = FakeBackend(respond)
    config = SimulationConfig(sessions=2, turn_cap=4, patient_engine=list(engines))
    with Engines.with_backend(backend) as eng:
        summary = simulate.run_simulation(
            [make_profile("p1"), make_profile("p2", "joker", "formal")], eng, config, out, seed=5
        )
    assert summary.sessions_written == 4 * len(engines) and not summary.failed_arcs, summary.model_dump_json()[:500]
    return out


@pytest.fixture(scope="module")
def both_run(tmp_path_factory):
    return _both_engines_run(tmp_path_factory)


def _sessions(run):
    import pyarrow.parquet as pq

    return pq.read_table(run / "sessions" / "sessions.parquet").to_pylist()


def test_validation_names_one_system_per_engine_and_counsellor(both_run, tmp_path):
    import json

    from mindsimkit.mindcore.layout import RunLayout
    from mindsimkit.mindsim_app.job import _sims_by_counsellor
    from mindsimkit.validation.compare import compare
    from mindsimkit.validation.config import ValidationConfig

    sims = _sims_by_counsellor(RunLayout(both_run))
    assert {k: len(v) for k, v in sims.items()} == {"mindsim/counsellor": 4, "patientact/counsellor": 4}
    assert all(r["patient_engine"] == name.split("/")[0] for name, rows in sims.items() for r in rows)
    report = compare(
        None,
        sims,
        tmp_path / "validation",
        ValidationConfig(bootstrap_draws=20, floor_splits=4, joint=False, plots=False),
    )
    assert set(report["systems"]) == {"mindsim/counsellor", "patientact/counsellor"}
    # Transcripts written before the engine field existed were MindSim's: today's names exactly.
    old = RunLayout(tmp_path / "old")
    old.transcripts.parent.mkdir(parents=True)
    rows = [json.loads(line) for line in (both_run / "transcripts" / "transcripts.jsonl").read_text().splitlines()]
    old.transcripts.write_text(
        "".join(
            json.dumps({k: v for k, v in r.items() if k != "patient_engine"}) + "\n"
            for r in rows
            if r["patient_engine"] == "mindsim"
        )
    )
    assert {k: len(v) for k, v in _sims_by_counsellor(old).items()} == {"mindsim/counsellor": 4}


def _card(run, name="dataset"):
    from mindsimkit.mindcore.provenance import base_provenance
    from mindsimkit.mindsim_app.cards import build_dataset_folder

    info = {"run_id": "pa01", "recipe": {"name": "t", "seed": 5}, "provenance": base_provenance()}
    folder = build_dataset_folder(run, header(info), run / name)
    return folder, (folder / "README.md").read_text()


def test_card_explains_patientact_fields_with_counts_from_the_rows(both_run):
    from collections import Counter

    from mindsimkit.mindsim_app.publish import check_folder, check_loads

    rows = _sessions(both_run)
    pa_rows = [r for r in rows if r["patient_engine"] == "patientact"]
    behaviours = Counter(
        t["patientact"]["behaviour"]
        for r in pa_rows
        for t in r["turns"]
        if t["patientact"] and t["patientact"]["behaviour"]
    )
    assert len(behaviours) == 3  # the fixture's cycle reached the data
    folder, card = _card(both_run)
    section = card.split("### Patient engines")[1].split("### Screening verdicts")[0]
    for engine, n in Counter(r["patient_engine"] for r in rows).items():
        assert f"| {engine} | {n} |" in section
    total = sum(behaviours.values())
    for b, n in behaviours.items():
        assert f"| {b} | {n} | {100 * n / total:.1f}% |" in section
    start = sum(r["patientact"]["trust_start"] for r in pa_rows) / len(pa_rows)
    end = sum(r["patientact"]["trust_end"] for r in pa_rows) / len(pa_rows)
    assert f"{start:.2f} at the start → {end:.2f} at the end" in section
    fields = card.split("### Patient engine fields")[1].split("## How it was made")[0]
    for f in (
        "trust_before",
        "trust_after",
        "trust_change",
        "reaction",
        "intensity",
        "behaviour",
        "resistance_pattern",
        "relevant",
        "retrieved",
        "blocked",
        "withheld",
        "signal",
        "patientact_turns",
        "attachment",
        "theme",
        "trust_start",
        "trust_end",
        "switches",
        "decomposition",
        "patient_engine",
    ):
        assert f"`{f}`" in fields
    assert "`turns[].patientact`" in card.split("## What is in it")[1].split("Load a config")[0]
    # The PatientAct columns survive into the published parquet and load with `datasets`.
    manifest = check_folder(folder)
    assert check_loads(folder, manifest)["sessions"] == len(rows)
    from datasets import load_dataset

    ds = load_dataset(str(folder), "sessions", split="train")
    loaded = [r for r in ds if r["patient_engine"] == "patientact"]
    assert len(loaded) == len(pa_rows) and all(r["patientact"]["trust_end"] is not None for r in loaded)
    assert [t["patientact"]["behaviour"] for r in loaded for t in r["turns"]] == [
        t["patientact"]["behaviour"] for r in pa_rows for t in r["turns"]
    ]


def test_a_mindsim_only_card_has_no_patient_engine_sections(tmp_path_factory):
    from mindsimkit.mindsim_app.cards import CONFIG_DESCRIPTIONS

    run = _both_engines_run(tmp_path_factory, engines=("mindsim",))
    _, card = _card(run)
    assert "Patient engine" not in card and "PatientAct patient" not in card and "patientact" not in card
    assert "Before every reply the patient\n   committed a move from a 39-move vocabulary" in card
    assert f"| `sessions` | 4 | {CONFIG_DESCRIPTIONS['sessions']} |" in card


def test_a_patientact_only_card_does_not_describe_commit_move(tmp_path_factory):
    run = _both_engines_run(tmp_path_factory, engines=("patientact",))
    _, card = _card(run)
    assert "| patientact | 4 |" in card and "| mindsim |" not in card
    assert "commit_move" not in card.split("## How it was made")[1].split("## Statistics")[0]
