"""PatientAct's profile evaluation (mindsim_app/patientact_eval/) on the fake engine, and the system label of
real session records agreeing with what the judge reads from the parquet. The conversation rubric and the
statistics are tested with the judge (tests/judge/test_patientact_rubric.py)."""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pyarrow.parquet as pq

from cli_streams import mindsim_script

from mindsimkit.judge.patientact import parquet_system_labels
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindsim_app.patientact_eval.rubric import (
    answer_model,
    identification_accuracy,
    judge_profile,
    rubrics,
    system_label,
)
from simfakes import make_profile
from test_patientact import PAResponder, decomposition, run


def test_profile_judgment_and_identification_accuracy():
    d = decomposition()
    profile_dims = {x.id for x in rubrics().profile.dimensions}
    ans = {
        **{f"{k}_reason": "specific" for k in profile_dims},
        **dict.fromkeys(profile_dims, 4),
        "attachment": d.psych.attachment,
        "theme": "helpless",
    }
    backend = FakeBackend(lambda req: ans)
    with Engines.with_backend(backend) as engines:
        j = asyncio.run(judge_profile(engines.role("judge"), make_profile("p1"), d))
    assert j.ok and j.truth == {"attachment": d.psych.attachment, "theme": "worthless"}
    prompt = backend.requests[0].messages[0]["content"]
    assert "Attachment style:" not in prompt  # the seed is not shown by name
    assert identification_accuracy([j]) == {"attachment": 1.0, "theme": 0.0}
    props = answer_model("profile").model_json_schema()["properties"]
    assert {"attachment", "theme"} <= set(props)


def test_the_profile_judge_never_sees_the_core_belief_or_its_theme(tmp_path):
    """The writer brief names the core belief's cluster ("Core belief (worthless, ...)"), which maps
    one to one onto the theme the judge is asked to identify; the judge and the diversity call see a view
    without it, and every theme name appears only among the options."""
    from mindsimkit.mindsim.patientact.data import theme_map
    from mindsimkit.mindsim_app.patientact_eval.run import judge_diversity

    d = decomposition()
    base = make_profile("p1")
    cb = base.formulation.core_belief
    # The line prompts/profilegen/writer_brief.jinja2 writes: what the judge used to see.
    brief = f'{base.writer_brief}\nCore belief ({cb.cluster}, about the {cb.arm}): "{cb.belief}" {cb.history}'
    profile = base.model_copy(update={"writer_brief": brief})
    dims = {x.id for x in rubrics().profile.dimensions}
    ans = {
        **{f"{k}_reason": "specific" for k in dims},
        **dict.fromkeys(dims, 4),
        "attachment": d.psych.attachment,
        "theme": "worthless",
    }
    backend = FakeBackend(lambda req: {"reason": "varied", "rating": 4} if "iversity" in req.schema_name else ans)
    with Engines.with_backend(backend) as engines:
        j = asyncio.run(judge_profile(engines.role("judge"), profile, d))
        asyncio.run(judge_diversity(engines.role("judge"), [(profile, d)]))
    assert j.ok
    profile_prompt, diversity_prompt = (r.messages[0]["content"] for r in backend.requests)
    for prompt in (profile_prompt, diversity_prompt):
        assert "Core belief" not in prompt and base.formulation.core_belief.belief not in prompt
        assert base.persona.persona in prompt and base.formulation.presenting.summary in prompt
    shown, options = profile_prompt.split("# Which fits best")
    assert not any(theme in shown.lower() for theme in theme_map().themes)
    assert all(theme in options for theme in theme_map().themes)


def test_a_profile_judge_that_never_fits_is_a_counted_failure():
    backend = FakeBackend(lambda req: {"clinical_plausibility": 9})
    with Engines.with_backend(backend) as engines:
        j = asyncio.run(judge_profile(engines.role("judge"), make_profile("p1"), decomposition()))
    assert not j.ok and j.scores == {} and j.error_kind == "invalid_output" and len(backend.requests) >= 2


def test_system_label_of_records_matches_the_parquet_reader(tmp_path):
    full, _, _ = run(PAResponder())
    nopipe, _, _ = run(PAResponder(), pipeline=False)
    assert system_label(full) == "patientact" and system_label(nopipe) == "patientact-no_pipeline"
    # The judge never sees records: it reads the same label from the sessions parquet mindsim writes.
    path = tmp_path / "sessions.parquet"
    # The columns the judge reads, stored as simulate.write_shard stores them (model_dump → Arrow structs);
    # the fake decomposition holds an empty dict Parquet cannot store, and the label does not need it.
    rows = [
        {
            "session_id": r.session_id,
            "patient_engine": r.patient_engine,
            "patientact": r.patientact.model_dump(mode="json", exclude={"decomposition"}),
        }
        for r in (full, nopipe)
    ]
    rows[1]["session_id"] = "other"
    pq.write_table(pa.Table.from_pylist(rows), path)
    assert parquet_system_labels(path) == {full.session_id: "patientact", "other": "patientact-no_pipeline"}


# -- Table 1: the profile-evaluation command ------------------------------------------------------------------


def _profile_run(tmp_path):
    from mindsimkit.mindsim.patientact.decompose import DecompositionStore
    from mindsimkit.profilegen.dataset import write_profiles
    from test_patientact import decomposition as decomp

    run_dir = tmp_path / "run"
    profiles = [make_profile("p1"), make_profile("p2", "joker", "formal")]
    # Each persona names its profile, so a fake judge can tell which profile it is shown.
    profiles = [
        p.model_copy(
            update={"persona": p.persona.model_copy(update={"persona": f"{p.profile_id}: {p.persona.persona}"})}
        )
        for p in profiles
    ]
    write_profiles(profiles, run_dir / "profiles")
    store = DecompositionStore(run_dir)
    for p in profiles:
        store.save(decomp(p.profile_id))
    return run_dir, profiles


def test_profile_eval_writes_table_one_with_chance_rates_diversity_and_human_agreement(tmp_path, monkeypatch):
    import json

    from mindsimkit.mindsim_app.cli import main

    run_dir, profiles = _profile_run(tmp_path)
    dims = [d.id for d in rubrics().profile.dimensions]

    def answer(req):
        if req.schema_name == "patientact_diversity":
            assert all(p.persona.persona in req.messages[0]["content"] for p in profiles)
            return {"reason": "two different men", "rating": 4}
        score = 5 if "p1:" in req.messages[0]["content"] else 3
        return {
            **{f"{d}_reason": "ok" for d in dims},
            **dict.fromkeys(dims, score),
            "attachment": "disorganized",
            "theme": "worthless",
        }

    truth = {p.profile_id: decomposition(p.profile_id).psych for p in profiles}
    human = tmp_path / "human.jsonl"
    human.write_text(
        "\n".join(
            json.dumps(
                {
                    "item_id": pid,
                    "rater": r,
                    "scores": dict.fromkeys(dims, s),
                    "source": "x",
                    "predicted": {
                        "attachment": truth[pid].attachment,
                        "theme": "worthless" if r == "r1" else "helpless",
                    },
                    "truth": {"attachment": truth[pid].attachment, "theme": truth[pid].theme},
                }
            )
            for pid in ("p1", "p2")
            for r, s in (("r1", 4), ("r2", 5))
        )
        + "\n"
    )
    div = tmp_path / "div.jsonl"
    div.write_text('{"rater": "r1", "rating": 4, "profiles": 2}\n{"rater": "r2", "rating": 5, "profiles": 2}\n')
    backend = FakeBackend(answer)
    monkeypatch.setattr(Engines, "from_config", classmethod(lambda cls, cfg: Engines.with_backend(backend)))
    code = main(["patientact", "profile-eval", str(run_dir), "--human", str(human), "--diversity", str(div)])
    assert code == 0, code
    rep = json.loads((run_dir / "patientact_profile_eval" / "report.json").read_text())
    d0 = rep["dimensions"][dims[0]]
    assert d0["judge"] == {"n": 2, "mean": 4.0, "sd": 1.0} and d0["human"]["mean"] == 4.5
    assert "krippendorff_alpha" in d0
    att = rep["identification"]["attachment"]
    assert att["chance"]["prior"] == {"class": "disorganized", "rate": round(43 / 79, 3)}
    assert att["human"]["accuracy"] == 1.0 and att["fleiss_kappa"]["raters_per_item"] == 2
    theme = rep["identification"]["theme"]
    assert theme["judge"]["accuracy"] == 1.0 and theme["human"]["accuracy"] == 0.5
    assert theme["chance"]["sample"] == {"class": "worthless", "rate": 1.0}
    # The error analysis: r2 took both worthless profiles for helpless.
    assert theme["human_confusion"]["matrix"] == {"worthless": {"helpless": 2, "worthless": 2}}
    assert theme["human_confusion"]["errors"] == [{"truth": "worthless", "predicted": "helpless", "count": 2, "of": 4}]
    assert theme["judge_confusion"]["errors"] == []
    assert rep["diversity"]["judge"]["rating"] == 4 and rep["diversity"]["human"] == {"n": 2, "mean": 4.5, "sd": 0.5}
    md = (run_dir / "patientact_profile_eval" / "report.md").read_text()
    assert "4.00 ± 1.00" in md and "Fleiss" in md and "Diversity (1–5): judge 4" in md
    assert "Error analysis, theme (human): worthless taken for helpless 2 of 4." in md


def test_profile_eval_without_decompositions_is_one_input_error(tmp_path):
    from mindsimkit.mindsim_app.cli import main

    (tmp_path / "empty").mkdir()
    assert main(["patientact", "profile-eval", str(tmp_path / "empty")]) == 2


def _sentences(text: str) -> set[str]:
    import re

    return {s.strip().lower() for s in re.split(r"[.;]", text) if len(s.strip()) > 12}


def test_the_identification_options_are_not_the_texts_the_formulation_is_written_from():
    """Table 1: raters and the judge choose among annotator descriptions (App. D.1); the formulation writer is
    conditioned on other texts, so an echo of the seed's wording cannot be matched string for string."""
    from mindsimkit.mindsim.patientact.data import attachment_prior, identification, theme_map
    from mindsimkit.mindsim_app.annotate.protocol import identification_options
    from mindsimkit.profilegen.psych import psych_messages

    ident = identification()
    written = {**attachment_prior().descriptions, **theme_map().themes}
    options = {**ident.attachment, **ident.theme}
    assert set(options) == set(written)
    for key, text in options.items():
        assert not _sentences(text) & _sentences(written[key]), key
    # The formulation prompt carries the writer's text; the judge and the rating page the options.
    d = decomposition()
    att, theme = d.psych.attachment, d.psych.theme
    writer = psych_messages(
        make_profile("p1"), att, attachment_prior().descriptions[att], theme, theme_map().themes[theme]
    )[0]["content"]
    assert written[att] in writer and ident.attachment[att] not in writer
    dims = {x.id for x in rubrics().profile.dimensions}
    ans = {**{f"{k}_reason": "ok" for k in dims}, **dict.fromkeys(dims, 4), "attachment": att, "theme": theme}
    backend = FakeBackend(lambda req: ans)
    with Engines.with_backend(backend) as engines:
        asyncio.run(judge_profile(engines.role("judge"), make_profile("p1"), d))
    prompt = backend.requests[0].messages[0]["content"]
    assert all(t in prompt for t in options.values()) and not any(t in prompt for t in written.values())
    assert identification_options() == (dict(ident.attachment), dict(ident.theme))


def test_the_judge_and_the_raters_read_the_same_profile_text():
    from mindsimkit.mindsim_app.annotate.samplers import profile_sections
    from mindsimkit.profilegen.psych import PsychFormulation
    from test_patientact import PSYCH

    d = decomposition().model_copy(update={"formulation": PsychFormulation(**PSYCH)})
    profile = make_profile("p1")
    dims = {x.id for x in rubrics().profile.dimensions}
    ans = {
        **{f"{k}_reason": "ok" for k in dims},
        **dict.fromkeys(dims, 4),
        "attachment": d.psych.attachment,
        "theme": d.psych.theme,
    }
    backend = FakeBackend(lambda req: ans)
    with Engines.with_backend(backend) as engines:
        asyncio.run(judge_profile(engines.role("judge"), profile, d))
    judge_sees = backend.requests[0].messages[0]["content"].split("# The profile\n", 1)[1].split("# How to rate")[0]
    raters_see = profile_sections(profile, d.formulation.model_dump(mode="json"))
    from mindsimkit.mindsim.patientact.card import Section, card_markdown

    assert judge_sees.strip() == card_markdown([Section(s["title"], tuple(s["lines"])) for s in raters_see]).strip()
    for line in (
        PSYCH["intermediate_beliefs"][0],
        PSYCH["triggers"][0],
        profile.formulation.presenting.summary,
        profile.persona.persona,
        "Wish: to be taken seriously",
    ):
        assert line in judge_sees, line
    assert profile.formulation.core_belief.belief not in judge_sees


def test_profile_card_command_renders_figure_two_from_a_run(tmp_path):
    import json
    import subprocess

    from mindsimkit.profilegen.dataset import write_profiles
    from mindsimkit.profilegen.psych import PsychFormulation
    from test_patientact import PSYCH

    run_dir = tmp_path / "run"
    profile = make_profile("p1")
    write_profiles([profile], run_dir / "profiles")
    d = decomposition().model_copy(update={"formulation": PsychFormulation(**PSYCH)})
    folder = run_dir / "sessions" / "decompositions"
    folder.mkdir(parents=True)
    (folder / "p1-0.json").write_text(json.dumps(d.model_dump(mode="json")))
    out = tmp_path / "cards.md"
    done = subprocess.run(
        [mindsim_script() or "mindsim", "patientact", "profile-card", str(run_dir), "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    card = out.read_text()
    for heading in (
        "# Profile p1",
        "## Demographics",
        "## Presenting problem",
        "## Precipitating factors",
        "## Predisposing factors",
        "## Perpetuating factors",
        "## Protective factors",
        "## Core belief",
        "## Intermediate beliefs",
        "## Automatic thoughts",
        "## Triggers",
        "## Coping patterns",
        "## Emotional range",
        "## Interpersonal pattern: the counsellor",
        "## Seed attributes",
    ):
        assert heading in card, heading
    assert f"Attachment style: {d.psych.attachment}" in card and profile.formulation.core_belief.belief in card
    blind = subprocess.run(
        [mindsim_script() or "mindsim", "patientact", "profile-card", str(run_dir), "--blind"],
        capture_output=True,
        text=True,
    )
    assert blind.returncode == 0 and "## Core belief" not in blind.stdout and "Seed attributes" not in blind.stdout
    bad = subprocess.run(
        [mindsim_script() or "mindsim", "patientact", "profile-card", str(run_dir), "--patient", "nobody"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "error:" in bad.stderr and "nobody" in bad.stderr
