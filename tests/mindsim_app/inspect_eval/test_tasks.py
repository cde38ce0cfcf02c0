"""The tasks run in this process with `inspect_ai.eval` on the fake engine (`inspectfakes`): PatientAct's task and
its rubric (the same rows `mindsim judge run --rubric patientact` writes for the converted folder), a judge bound
as an inspect model role (the same judgments through inspect), epochs as repeated trials, and the errors a user
meets (a log of another task, a folder that is not empty, a role or recipe the provider cannot answer as)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inspectfakes import serve, write_patients, write_recipe
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindsim_app.cli import main


def _eval(task, recipe: Path, tmp: Path, **kw):
    from inspect_ai import eval as inspect_eval

    (log,) = inspect_eval(
        task,
        model="mindsim/counsellor",
        model_args={"recipe": str(recipe)},
        log_dir=str(tmp / "logs"),
        display="none",
        **kw,
    )
    assert log.status == "success", log.error
    return log


def _rows(log, scorer: str) -> list[dict]:
    return [r for s in log.samples for r in s.scores[scorer].metadata["judgments"]]


@pytest.fixture(scope="module")
def stub():
    with serve() as s:
        yield s


def test_patientact_task_scores_every_session_as_the_rubric_command_does(stub, tmp_path):
    from mindsimkit.mindsim_app.inspect.tasks import patientact

    profiles = write_patients(tmp_path / "profiles")
    recipe = write_recipe(tmp_path / "r.yaml", stub, "{sessions: 1, turn_cap: 3, opening: counsellor}")
    log = _eval(
        patientact(profiles=str(profiles), recipe=str(recipe), patient_engine="patientact:no_tg"), recipe, tmp_path
    )
    records = [d for s in log.samples for d in s.store["mindsim/sessions"]]
    assert {d["patient_engine"] for d in records} == {"patientact:no_tg"} and len(records) == 2
    # The counsellor greets first: three replies, each answered by the patient.
    assert [m["role"] for m in records[0]["counsellor_messages"][1:]] == ["assistant", "user"] * 3
    rows = _rows(log, "patientact_rubric")
    assert len(rows) == 2 and all(r["ok"] and r["system"] == "patientact:no_tg" for r in rows)
    metrics = {k: m.value for sc in log.results.scores for k, m in sc.metrics.items()}
    dims = list(rows[0]["scores"])
    assert {d: metrics[d] for d in dims} == pytest.approx({d: sum(r["scores"][d] for r in rows) / 2 for d in dims})
    assert "mhqr" in metrics  # the PatientAct task judges the counsellor too

    out = tmp_path / "run"
    assert main(["inspect", "to-run", log.location, "--out", str(out)]) == 0
    kept = [json.loads(line) for line in (out / "patientact_judge" / "judgments.jsonl").read_text().splitlines()]
    assert [(r["session_id"], r["scores"]) for r in kept] == [(r["session_id"], r["scores"]) for r in rows]
    again = tmp_path / "again"
    assert main(["judge", "run", str(out), "--rubric", "patientact", "--recipe", str(recipe), "--out", str(again)]) == 0
    judged = [json.loads(line) for line in (again / "patientact_judge" / "judgments.jsonl").read_text().splitlines()]
    assert sorted((r["session_id"], json.dumps(r["scores"])) for r in judged) == sorted(
        (r["session_id"], json.dumps(r["scores"])) for r in rows
    )
    assert main(["report", str(out)]) == 0


def test_a_judge_bound_as_an_inspect_model_role_judges_as_the_recipe_role(stub, tmp_path):
    from inspect_ai.model import get_model

    from mindsimkit.mindsim_app.inspect.tasks import mindeval2

    profiles = write_patients(tmp_path / "profiles")
    recipe = write_recipe(tmp_path / "r.yaml", stub, "{sessions: 1, turn_cap: 3}")
    task = lambda: mindeval2(profiles=str(profiles), recipe=str(recipe), replies=2, max_patients=1)  # noqa: E731
    plain = _rows(_eval(task(), recipe, tmp_path / "a"), "mhqr")
    judge = get_model("mindsim/judge", recipe=str(recipe))
    bound = _rows(_eval(task(), recipe, tmp_path / "b", model_roles={"judge": judge}), "mhqr")
    assert len(plain) == len(bound) == 2
    same = ("session_id", "reply", "severity", "issues", "dropped_quotes", "status")
    assert [[r[k] for k in same] for r in bound] == [[r[k] for k in same] for r in plain]
    assert {r["judge_model"] for r in bound} == {"mindsim/judge"} and {r["judge_engine"] for r in bound} == {"inspect"}
    assert {r["judge_model"] for r in plain} == {"judge"}


def test_a_bound_judge_is_held_to_its_answer_bound_and_to_three_issues(tmp_path):
    """The judge bound as a model role gets the rubric's token bound and the schema's `maxItems`, which inspect's
    own JSONSchema drops; an answer listing more issues than the cap is re-asked, as on the native path."""
    from inspect_ai.model import get_model

    from inspectfakes import ROLES, responder
    from mindsimkit.judge.rubric import answer_model, load_rubric
    from mindsimkit.mindsim_app.inspect.scorers import answer_bound
    from mindsimkit.mindsim_app.inspect.tasks import mindeval2
    from openai_stub import OpenAIStub, from_responder

    inner = responder()
    too_many = [
        {"issue": i, "reason": "listed anyway", "quote": None}
        for i in ("over_exploring", "overstatement", "false_fact", "bad_advice")
    ]

    def respond(req):
        if req.role == "judge" and not any("could not be used" in m["content"] for m in req.messages):
            return {"issues": too_many, "severity": "major"}
        return inner(req)

    with OpenAIStub(from_responder(respond)).serve(*ROLES) as stub:
        profiles = write_patients(tmp_path / "profiles")
        recipe = write_recipe(
            tmp_path / "r.yaml", stub, "{sessions: 1, turn_cap: 3}", judge="{bootstrap_draws: 200, max_issues: 3}"
        )
        judge = get_model("mindsim/judge", recipe=str(recipe), memoize=False)
        log = _eval(
            mindeval2(profiles=str(profiles), recipe=str(recipe), replies=2, max_patients=1),
            recipe,
            tmp_path,
            model_roles={"judge": judge},
        )
        asked = [r for r in stub.requests if r["model"] == "judge" and r.get("response_format")]
    rows = _rows(log, "mhqr")
    assert len(rows) == 2 and all(r["status"] == "ok" and len(r["issues"]) <= 3 for r in rows)
    assert len(asked) == 4  # each reply: the over-long list, then the answer after the re-ask
    bound = answer_bound(answer_model(load_rubric(None), 3))
    assert {r["max_tokens"] for r in asked} == {bound} and bound < 4096
    schemas = [r["response_format"]["json_schema"]["schema"] for r in asked]
    assert all(s["properties"]["issues"]["maxItems"] == 3 for s in schemas)


def test_every_roles_usage_is_in_the_log_and_in_the_converted_run(stub, tmp_path):
    """The recipe's roles (patient, scenario writer, judge, …) are counted beside the counsellor in the log's
    model usage, each once, and `to-run` writes them into run.json's usage per role."""
    from mindsimkit.mindsim_app.inspect.tasks import mindeval2

    profiles = write_patients(tmp_path / "profiles")
    recipe = write_recipe(tmp_path / "r.yaml", stub, "{sessions: 1, turn_cap: 3}")
    log = _eval(mindeval2(profiles=str(profiles), recipe=str(recipe), replies=2, max_patients=1), recipe, tmp_path)
    usage = log.stats.model_usage
    for name in ("mindsim/counsellor", "mindsim/patient", "mindsim/first_scenario_writer", "mindsim/judge"):
        assert usage[name].output_tokens > 0, (name, sorted(usage))
    (sample,) = log.samples
    assert {k: u.output_tokens for k, u in sample.model_usage.items()} == {k: u.output_tokens for k, u in usage.items()}
    out = tmp_path / "run"
    assert main(["inspect", "to-run", log.location, "--out", str(out)]) == 0
    written = json.loads((out / "run.json").read_text())["usage"]
    assert {"counsellor", "patient", "first_scenario_writer", "judge"} <= set(written)
    assert written["patient"]["completion_tokens"] == usage["mindsim/patient"].output_tokens
    assert written["judge"]["engine"] == "recipe" and written["counsellor"]["engine"] == "inspect"


def test_a_model_role_the_task_does_not_take_is_refused(stub, tmp_path):
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import get_model

    from mindsimkit.mindsim_app.inspect.tasks import mindeval2

    profiles = write_patients(tmp_path / "profiles")
    recipe = write_recipe(tmp_path / "r.yaml", stub, "{sessions: 1, turn_cap: 2}")
    patient = get_model("mindsim/patient", recipe=str(recipe))
    (log,) = inspect_eval(
        mindeval2(profiles=str(profiles), recipe=str(recipe), max_patients=1),
        model="mindsim/counsellor",
        model_args={"recipe": str(recipe)},
        model_roles={"patient": patient},
        log_dir=str(tmp_path / "logs"),
        display="none",
    )
    assert log.status == "error"
    assert "--model-role patient: not a role this task binds" in log.error.message
    assert "it takes judge" in log.error.message


def test_inspect_eval_stops_with_one_line_and_exit_1_on_a_bad_role_or_a_failed_preflight(stub, tmp_path):
    """From the command line the task checks its roles and runs preflight while inspect builds it, so both stop
    the eval before any sample, with one line and a nonzero exit."""
    import os
    import shutil
    import subprocess
    import sys

    inspect = shutil.which("inspect", path=str(Path(sys.executable).parent))
    profiles = write_patients(tmp_path / "profiles")
    recipe = write_recipe(tmp_path / "r.yaml", stub, "{sessions: 1, turn_cap: 2}")
    base = [
        inspect,
        "eval",
        "mindsimkit/mindeval2",
        "--model",
        "mindsim/counsellor",
        "-M",
        f"recipe={recipe}",
        "-T",
        f"profiles={profiles}",
        "-T",
        f"recipe={recipe}",
        "--log-dir",
        str(tmp_path / "logs"),
        "--display",
        "plain",
    ]
    env = {**os.environ, "NO_COLOR": "1"}
    done = subprocess.run(
        [*base, "--model-role", f"patient={{model: mindsim/patient, model_args: {{recipe: {recipe}}}}}"],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 1 and "error: --model-role patient: not a role this task binds" in said
    assert "Traceback" not in said
    gone = write_recipe(tmp_path / "gone.yaml", stub, "{sessions: 1, turn_cap: 2}")
    gone.write_text(gone.read_text().replace(stub.base_url, "http://127.0.0.1:9/v1"))
    done = subprocess.run(
        [
            *base[:-6],
            "-T",
            f"profiles={profiles}",
            "-T",
            f"recipe={gone}",
            "--log-dir",
            str(tmp_path / "logs2"),
            "--display",
            "plain",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 1 and "error: preflight" in said and "Traceback" not in said, said[-2000:]


def test_epochs_are_repeated_trials_and_every_epoch_is_scored(stub, tmp_path):
    from mindsimkit.mindsim_app.inspect.tasks import mindeval2

    profiles = write_patients(tmp_path / "profiles")
    recipe = write_recipe(tmp_path / "r.yaml", stub, "{sessions: 1, turn_cap: 2}")
    log = _eval(mindeval2(profiles=str(profiles), recipe=str(recipe), max_patients=1), recipe, tmp_path, epochs=2)
    ids = {d["session_id"]: d.get("trial") for s in log.samples for d in s.store["mindsim/sessions"]}
    assert sorted(ids.values(), key=str) == [1, None]  # trial 0 keeps the one-trial id
    # The reduced score (what the metrics read) holds both epochs' judgments, one reply each.
    (reduced,) = log.reductions
    assert reduced.reducer == "pooled"
    assert [sorted({r["session_id"] for r in s.metadata["judgments"]}) for s in reduced.samples] == [sorted(ids)]
    out = tmp_path / "run"
    assert main(["inspect", "to-run", log.location, "--out", str(out)]) == 0
    summary = json.loads((out / "sessions" / "summary.json").read_text())
    assert summary["trials"] == 2 and summary["sessions_written"] == 2


def test_to_run_refuses_what_it_cannot_convert_in_one_line(stub, tmp_path, capsys):
    from inspect_ai import Task, eval as inspect_eval
    from inspect_ai.dataset import Sample

    (other,) = inspect_eval(
        Task(dataset=[Sample(input="hi")], solver=[]),
        model="none/none",
        log_dir=str(tmp_path / "other"),
        display="none",
    )
    assert main(["inspect", "to-run", other.location, "--out", str(tmp_path / "x")]) == 2
    assert "only mindsimkit/mindeval2 and mindsimkit/patientact" in capsys.readouterr().err
    assert main(["inspect", "to-run", str(tmp_path / "missing.eval"), "--out", str(tmp_path / "x")]) == 2
    full = tmp_path / "full"
    full.mkdir()
    (full / "keep.txt").write_text("mine")
    assert main(["inspect", "to-run", other.location, "--out", str(full)]) == 2
    assert "not an empty folder" in capsys.readouterr().err and (full / "keep.txt").read_text() == "mine"
    assert not (tmp_path / "x").exists()


def test_the_provider_answers_only_as_a_recipe_role(stub, tmp_path):
    from inspect_ai.model import get_model

    recipe = write_recipe(tmp_path / "r.yaml", stub, "{sessions: 1}")
    with pytest.raises(ConfigError, match="not a recipe role"):
        get_model("mindsim/therapist", recipe=str(recipe), memoize=False)
    with pytest.raises(ConfigError, match="-M recipe=RECIPE"):
        get_model("mindsim/counsellor", memoize=False)
    with pytest.raises(ConfigError, match="no such file, nor a shipped recipe"):
        get_model("mindsim/counsellor", recipe=str(tmp_path / "none.yaml"), memoize=False)
