"""Situation-seeded PatientAct profiles: the test situations (tests/data/patientact_situations, written in the
authors' file shapes) imported through the real command, then every step of the chain on a fake engine (the
scaffold, the conflict rules, the bounded demographics and validation loops, the outline's contraindications and
red flags), the stage end to end with its checkpoints, the decomposition of a profile it wrote, the command's one
error line for a bad folder, and once the whole chain on the embedded engine."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from mindsimkit.mindcore.errors import InputError, StructuredOutputError
from mindsimkit.profilegen import situation_chain as chain
from mindsimkit.profilegen.config import ProfilesConfig
from mindsimkit.profilegen.patientact_inputs import Priors, read_inputs
from mindsimkit.profilegen.situation_schemas import (
    ChainStats,
    DemographicsCheck,
    ProblemFormulation,
    Scaffold,
    SituationProfile,
    SituationPsych,
    shape_data,
)
from mindsimkit.profilegen.situation_stage import plan
from situation_fakes import (
    DEMOGRAPHICS,
    PROBLEM,
    PSYCH,
    Scripted,
    demographics,
    import_situations,
    responder,
    situation_recipe,
    verdict,
)
from test_exit_codes import error_line, mindsim_here


@pytest.fixture
def imported(tmp_path) -> Path:
    return import_situations(tmp_path)


def scaffold(**over: Any) -> Scaffold:
    base = dict(
        age_group="Adult",
        age_range=(18, 64),
        gender="male",
        ethnicity="Hispanic",
        occupation_type="Manual worker",
        core_belief_theme="I am worthless",
        attachment_style="avoidant",
    )
    return Scaffold(**{**base, **over})


def item(imported: Path, index: int = 0, outline: bool = True) -> chain.ChainInput:
    got = read_inputs(imported)
    s = got.situations[index]
    return chain.ChainInput(
        situation_id=chain.situation_id(index, s), situation=s, outline=got.outline(s.disease_key) if outline else None
    )


def run(coro):
    return asyncio.run(coro)


# ---------------------------------------------------------------- schema and scaffold


def test_the_list_sizes_are_the_data_files_and_reach_the_writers_schema():
    limits = shape_data()["limits"]
    assert limits["impact"] == [3, 5] and limits["precipitating"] == [1, 3]
    problem = ProblemFormulation.model_json_schema()
    impact = problem["$defs"]["PresentingProblem"]["properties"]["impact"]
    assert (impact["minItems"], impact["maxItems"]) == (3, 5)
    psych = SituationPsych.model_json_schema()["properties"]
    for name in ("intermediate_beliefs", "automatic_thoughts", "triggers", "coping_patterns"):
        assert (psych[name]["minItems"], psych[name]["maxItems"]) == tuple(limits[name])
    assert "therapist_pattern" in SituationPsych.model_json_schema()["required"]
    with pytest.raises(ValueError, match="impact"):
        ProblemFormulation.model_validate(
            {**PROBLEM, "presenting_problem": {**PROBLEM["presenting_problem"], "impact": ["only one symptom"]}}
        )


def test_a_verdict_that_names_an_issue_has_not_passed_and_a_fail_must_name_one():
    assert not DemographicsCheck.model_validate(demographics(True, ["age does not fit"])).passed
    with pytest.raises(ValueError, match="at least one issue"):
        DemographicsCheck.model_validate(demographics(False, []))


def test_scaffolds_are_seeded_per_situation_and_follow_the_disease_override(imported):
    p = plan(ProfilesConfig(source="patientact-situations", situations=imported), 5)
    again = plan(ProfilesConfig(source="patientact-situations", situations=imported), 5)
    assert [s for _, s in p.inputs] == [s for _, s in again.inputs]
    assert len(p.inputs) == 3 and all(i.outline is not None for i, _ in p.inputs)
    assert (p.demographics_rounds, p.validation_rounds) == (5, 3)
    priors = read_inputs(imported).priors
    # The test priors give depression no children: 200 draws never give one, and the age range is the group's.
    draws = [chain.sample_scaffold(priors, "depression", seed, "s") for seed in range(200)]
    assert {d.age_group for d in draws} == {"Adult", "Elderly"}
    assert all(d.age_range == priors.age_ranges[d.age_group] for d in draws)
    assert {d.gender for d in draws} == {"male", "female"}
    assert {d.attachment_style for d in draws} == {"avoidant", "anxious", "disorganized"}
    # Another disease key reads the global distribution, which has children.
    assert "Child" in {chain.sample_scaffold(priors, "other", s, "s").age_group for s in range(200)}


def test_a_priors_label_the_profile_cannot_take_is_refused_before_any_call(imported):
    raw = json.loads((imported / "priors.json").read_text())
    raw["global"]["attachment_style"]["secure"] = 0.4
    with pytest.raises(InputError, match="attachment_style label 'secure'"):
        chain.check_priors(Priors.model_validate(raw), "here")


# ---------------------------------------------------------------- the conflict rules


def test_the_conflict_rules_fire_on_the_scaffold_and_the_text():
    child = chain.scaffold_values(scaffold(age_group="Child", occupation_type="Office worker"))
    fired = chain.rule_conflicts(child, "His wife says he drinks beer every night.")
    assert [c.rsplit("(rule ", 1)[1] for c in fired] == ["child_occupation)", "child_alcohol)", "child_adult_life)"]
    assert chain.rule_conflicts(chain.scaffold_values(scaffold()), "His wife says he drinks beer.") == []
    assert chain.rule_conflicts(
        chain.scaffold_values(scaffold()), "Weeks after giving birth, postpartum"
    ) and not chain.rule_conflicts(chain.scaffold_values(scaffold(gender="female")), "postpartum")
    old = chain.scaffold_values(scaffold(age_group="Elderly", occupation_type="Student"))
    assert any("elderly_student" in c for c in chain.rule_conflicts(old, ""))
    # On completed demographics an occupation-type rule holds only while the occupation still names the type.
    s = scaffold(age_group="Child", occupation_type="Office worker")
    from mindsimkit.profilegen.situation_schemas import SituationDemographics

    kept = SituationDemographics(**{**DEMOGRAPHICS, "age_group": "Child", "occupation": "office worker helper"})
    changed = kept.model_copy(update={"occupation": "pupil"})
    assert chain.rule_conflicts(chain.completed_values(kept, s), "")
    assert not chain.rule_conflicts(chain.completed_values(changed, s), "")


# ---------------------------------------------------------------- the loops


def test_a_pass_the_rules_contradict_is_not_taken_and_the_next_round_is_told_why(imported):
    inp = item(imported, 0)  # the situation names his wife
    answers = iter([demographics(age_group="Child"), demographics()])
    writer = Scripted(responder(demo=lambda req: next(answers)))
    stats = ChainStats()
    problem = ProblemFormulation.model_validate(PROBLEM)
    d = run(
        chain.complete_demographics(writer, inp, scaffold(age_group="Child", age_range=(6, 17)), problem, [], 5, stats)
    )
    assert d.age_group == "Adult" and stats.demographics_rounds == 2 and stats.demographics_unresolved == 0
    first, second = (text for name, text in writer.calls)
    assert "rule child_adult_life" in first and "none yet" in first
    assert "rule child_adult_life" in second and "age group: Child" in second  # revises its own last answer
    assert any("child_adult_life" in c for c in stats.rule_conflicts)


def test_the_demographics_loop_is_bounded_and_a_run_out_is_counted(imported):
    writer = Scripted(responder(demo=lambda req: demographics(False, ["occupation cannot fit"], name="Last Try")))
    stats = ChainStats()
    d = run(
        chain.complete_demographics(
            writer, item(imported), scaffold(), ProblemFormulation.model_validate(PROBLEM), [], 4, stats
        )
    )
    assert len(writer.calls) == 4 and stats.demographics_unresolved == 1 and d.name == "Last Try"
    assert all("occupation cannot fit" in text for _, text in writer.calls[1:])


def test_a_round_whose_answer_stays_invalid_is_counted_and_the_next_round_asks_again(imported):
    def invalid(req):
        raise StructuredOutputError("no valid situation_demographics", attempts=2, last_error="no issue", raw=None)

    answers = iter([invalid, lambda req: demographics(name="Second Round")])
    writer = Scripted(responder(demo=lambda req: next(answers)(req)))
    stats = ChainStats()
    problem = ProblemFormulation.model_validate(PROBLEM)
    d = run(chain.complete_demographics(writer, item(imported), scaffold(), problem, [], 3, stats))
    assert d.name == "Second Round" and stats.demographics_invalid == 1 and stats.demographics_rounds == 2
    # With no round left and no demographics written, the situation fails (the stage counts it).
    stats = ChainStats()
    with pytest.raises(StructuredOutputError):
        run(
            chain.complete_demographics(
                Scripted(responder(demo=invalid)), item(imported), scaffold(), problem, [], 2, stats
            )
        )
    assert stats.demographics_invalid == 2


def test_a_validator_that_never_passes_is_bounded_and_the_failure_kept_on_the_record(imported):
    validator = Scripted(
        responder(
            validate=lambda req: verdict(False, ["the father episode is undated"], ["date the episode with the father"])
        )
    )
    writer = Scripted(responder())
    rec = run(
        chain.generate_situation_profile(
            writer, validator, item(imported), scaffold(), demographics_rounds=5, validation_rounds=3
        )
    )
    assert not rec.passed and rec.stats.generations == 3 and len(rec.stats.validations) == 3
    problems = [text for name, text in writer.calls if name == "situation_problem"]
    assert "date the episode with the father" not in problems[0]
    assert all("date the episode with the father" in t for t in problems[1:])
    assert [n for n, _ in writer.calls] == ["situation_problem", "situation_demographics", "situation_psych"] * 3


def test_a_passing_profile_stops_the_loop_and_the_guidance_falls_back_to_the_issues(imported):
    answers = iter([verdict(False, ["impact items are paragraphs"]), verdict(True)])
    writer, validator = Scripted(responder()), Scripted(responder(validate=lambda req: next(answers)))
    rec = run(
        chain.generate_situation_profile(
            writer, validator, item(imported), scaffold(), demographics_rounds=5, validation_rounds=3
        )
    )
    assert rec.passed and rec.stats.generations == 2
    assert "impact items are paragraphs" in [t for n, t in writer.calls if n == "situation_psych"][1]


def test_the_outline_gives_the_writer_its_picture_and_the_validator_its_contraindications(imported):
    inp, bare = item(imported, 0), item(imported, 0, outline=False)
    outline = inp.outline
    profile = SituationProfile(demographics=DEMOGRAPHICS, problem_formulation=PROBLEM, psychological_formulation=PSYCH)
    check = chain.validation_messages(inp, profile)[0]["content"]
    for line in [*outline.contraindications, *outline.red_flags]:
        assert line in check
    write = chain.problem_messages(inp, scaffold(), [])[0]["content"]
    assert outline.key_characteristics[0] in write and outline.contraindications[0] not in write
    assert outline.special_populations[0] not in write  # an adult's prompt
    assert (
        outline.special_populations[0]
        in chain.problem_messages(inp, scaffold(age_group="Child", age_range=(6, 17)), [])[0]["content"]
    )
    assert "I am worthless" not in write  # the seed attributes are the psychological formulation's
    assert outline.contraindications[0] not in chain.validation_messages(bare, profile)[0]["content"]
    assert chain.NO_OUTLINE in chain.validation_messages(bare, profile)[0]["content"]
    psych = chain.psych_messages(inp, scaffold(), profile.demographics, profile.problem_formulation, [])[0]["content"]
    assert "I am worthless" in psych
    # Fig. 5: only the relationship patterns are a clinician's third-person notes; beliefs and thoughts are the
    # client's own voice, the thoughts at the client's level of schooling.
    voice = psych.index("third person")
    assert voice > psych.index("interpersonal_patterns:") and "stay in the client's own voice" in psych[voice:]
    assert "first person" in psych and "level of schooling" in psych


# ---------------------------------------------------------------- the stage


def test_the_stage_writes_every_situation_counts_failures_and_resumes(fake_engines, imported, tmp_path):
    from mindsimkit.mindcore.layout import ProfilesFolder
    from mindsimkit.profilegen.dataset import iter_profiles
    from mindsimkit.profilegen.pipeline import run_profiles

    def validate(req):  # the boy's situation never passes
        return verdict(False, ["football is missing"]) if "football" in req.messages[-1]["content"] else verdict(True)

    engines, backend = fake_engines(responder(validate=validate))
    out = tmp_path / "run"
    summary = run_profiles(situation_recipe(imported), engines, out)
    assert summary.kept == summary.pool == 3 and summary.situations is not None
    st = summary.situations
    assert (st.situations, st.with_outline, st.validated, st.validation_failed, st.revised) == (3, 3, 2, 1, 1)
    rows = list(iter_profiles(out / "profiles"))
    assert len(rows) == 3 and all(r.situation_profile is not None and r.in_benchmark for r in rows)
    failed = [r for r in rows if not r.situation_profile.passed]
    assert len(failed) == 1 and len(failed[0].situation_profile.stats.validations) == 3
    assert "Tom Reyes" in rows[0].case_summary and "I am" not in rows[0].case_summary
    assert rows[0].situation_profile.scaffold.core_belief_theme in rows[0].writer_brief
    written = json.loads(ProfilesFolder(out / "profiles").summary.read_text())
    assert written["situations"]["validation_failed"] == 1
    calls = len(backend.requests)
    again = run_profiles(situation_recipe(imported), engines, out)
    assert len(backend.requests) == calls and again.kept == 3  # every situation came from its checkpoint


def test_a_situation_profile_decomposes_with_its_own_formulation(fake_engines, imported, tmp_path):
    from mindsimkit.mindsim.patientact.decompose import decompose, profile_pieces
    from mindsimkit.mindsim.patientact.session import full_profile
    from mindsimkit.profilegen.dataset import iter_profiles
    from mindsimkit.profilegen.pipeline import run_profiles

    engines, _ = fake_engines(responder())
    run_profiles(situation_recipe(imported), engines, tmp_path / "run")
    profile = next(iter_profiles(tmp_path / "run" / "profiles"))
    pieces = profile_pieces(profile, None)
    assert [p.content for p in pieces[:3]] == PROBLEM["presenting_problem"]["impact"]
    assert {p.type for p in pieces} >= {"symptom", "pattern", "memory", "background"}

    class Decomposer(Scripted):
        async def structured(self, messages, model, schema_name=None, **_):
            self.calls.append((schema_name or model.__name__, messages[-1]["content"]))
            n = model.model_json_schema()["properties"]["items"]["minItems"]
            item = {
                "topic": "daily life",
                "shift": 0.0,
                "tags": ["work", "family", "sleep"],
                "category": "emotional_state",
            }
            return model.model_validate({"items": [item] * n})

    d = Decomposer(responder())
    got = run(decompose(d, profile, 3))
    sp = profile.situation_profile
    assert got.formulation.triggers == sp.profile.psychological_formulation.triggers  # no second formulation call
    assert len(d.calls) == 1 and got.psych.attachment == sp.scaffold.attachment_style
    assert got.static.current_concern == PROBLEM["presenting_problem"]["situation"]
    assert len(got.items) == len(profile_pieces(profile, got.formulation))
    # Fig. 7 builds the memory from the profile alone: the seeds the raters are asked to recover stay out of the
    # decomposer's prompt, while the writer brief the other prompts read still names them.
    [(_, prompt)] = d.calls
    no_dm = full_profile(profile, got)  # the w/o DM arm's whole profile, in the patient's prompt
    for text in (prompt, no_dm):
        assert sp.scaffold.core_belief_theme not in text and "attachment style" not in text
    assert PROBLEM["presenting_problem"]["impact"][0] in no_dm
    # The chain's brief already holds the psychological formulation: the whole profile states it once.
    for line in [*PSYCH["automatic_thoughts"], *PSYCH["triggers"]]:
        assert no_dm.count(line) == 1, line
    assert (
        sp.scaffold.core_belief_theme in profile.writer_brief and sp.scaffold.attachment_style in profile.writer_brief
    )


# ---------------------------------------------------------------- the command


def test_a_bad_or_missing_situations_folder_is_one_error_line_and_exit_2(imported, tmp_path):
    def recipe_for(folder: Path) -> Path:
        path = tmp_path / f"r-{folder.name}.yaml"
        path.write_text(
            "name: s\nseed: 1\nengines:\n  remote: {kind: openai, base_url: 'http://127.0.0.1:9/v1', "
            "model: m}\nroles:\n  default: {engine: remote}\nprofiles:\n  source: patientact-situations\n"
            f"  situations: {folder}\n"
        )
        return path

    broken = tmp_path / "broken"
    shutil.copytree(imported, broken)
    (broken / "situations.jsonl").write_text('{"disease_key": "depression", "topic": "x"}\n')
    proc = mindsim_here("profiles", "generate", recipe_for(broken), "--out", tmp_path / "o1", cwd=tmp_path)
    assert proc.returncode == 2 and str(broken) in error_line(proc)
    proc = mindsim_here(
        "profiles", "generate", recipe_for(tmp_path / "nowhere"), "--out", tmp_path / "o2", cwd=tmp_path
    )
    assert proc.returncode == 2 and "mindsim import patientact-situations" in error_line(proc)
    assert not (tmp_path / "o1" / "profiles" / "profiles.parquet").exists()


# ---------------------------------------------------------------- the embedded engine


@pytest.mark.embedded
@pytest.mark.slow
def test_one_situation_through_the_whole_chain_on_the_embedded_engine(embedded_engines, imported):
    from mindsimkit.mindcore.config import RoleSpec
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindsim.patientact.decompose import decompose
    from mindsimkit.profilegen.situation_stage import to_profile, provenance

    # Without the server's prompt cache each answer is the same whatever the suite asked before: a prefix read from
    # the cache changes the numbers enough to change what the 135M model writes, and with it how long the chain
    # runs (91 to 291 s in one day's suites; 106 to 111 s in three runs without the cache, warm or cold server).
    roles = {
        "default": RoleSpec(
            engine="local",
            temperature=0.3,
            max_tokens=4000,
            seed=0,
            max_attempts=3,
            extra_body={"cache_prompt": False},
        )
    }
    p = plan(ProfilesConfig(source="patientact-situations", situations=imported), 0)
    inp, sc = p.inputs[0]
    with Engines.with_backend(embedded_engines.backend("local"), roles=roles) as engines:
        writer = engines.role("profile_writer")
        rec = run(
            chain.generate_situation_profile(
                writer, engines.role("screener"), inp, sc, demographics_rounds=3, validation_rounds=1
            )
        )
        profile = to_profile(rec, 0, provenance(engines, 0))
        got = run(decompose(engines.role("profile_decomposer"), profile, 0))
    assert rec.outline_used and rec.stats.generations == 1 and len(rec.stats.validations) == 1
    assert 1 <= rec.stats.demographics_rounds <= 3
    limits = shape_data()["limits"]
    assert limits["impact"][0] <= len(rec.profile.problem_formulation.presenting_problem.impact) <= limits["impact"][1]
    assert got.items and got.formulation is not None


def test_profile_eval_of_a_situation_run_takes_its_chance_rates_from_the_imported_priors(imported):
    from mindsimkit.judge.patientact_profiles import profile_report
    from mindsimkit.mindsim_app.patientact_eval.cli import situation_seed_priors

    priors = situation_seed_priors(situation_recipe(imported))
    assert priors is not None
    raw = json.loads((imported / "priors.json").read_text())["global"]
    assert priors["theme"] == raw["core_belief_theme"] and priors["attachment"] == raw["attachment_style"]
    # PatientAct's theme chance: the most likely theme under the draw (about a third), not the sample's majority.
    report = profile_report([], theme_prior=priors["theme"], attachment_prior=priors["attachment"])
    top = max(priors["theme"].values()) / sum(priors["theme"].values())
    assert report["identification"]["theme"]["chance"]["prior"]["rate"] == round(top, 3)
    assert situation_seed_priors(None) is None
