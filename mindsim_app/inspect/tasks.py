"""The inspect tasks `mindsimkit/mindeval2` and `mindsimkit/patientact` (registered through the `inspect_ai`
entry point in pyproject.toml; docs/inspect.md).

    inspect eval mindsimkit/mindeval2 --model PROVIDER/MODEL -T profiles=PROFILES_DIR [-T recipe=RECIPE] …

The eval's model is the counsellor under test; a sample is one patient's arc of sessions (`solver.patient_arc`);
the recipe serves the patient, the scenario writers, the memory compactor and the judges. `mindeval2` scores the
counsellor's replies on the MHQR rubric (MindEval2 Table 6); `patientact` plays the PatientAct patient and scores
every session on PatientAct's rubric (its Tables 2 and 4), and on MHQR too unless `-T mhqr=false`.
"""

from __future__ import annotations

from typing import Any

from inspect_ai import Epochs, Task, task

from mindsimkit.mindsim_app.inspect.harness import Harness, TaskArgumentError, TaskSettings
from mindsimkit.mindsim_app.inspect.scorers import mhqr, patientact_rubric, pooled
from mindsimkit.mindsim_app.inspect.solver import JUDGE_ROLE, patient_arc
from mindsimkit.mindsim_app.inspect.solver import stages as preflight_stages


def _task(harness: Harness, with_mhqr: bool, with_patientact: bool) -> Task:
    scorers, stages, roles = [], [], set()
    if with_patientact:
        scorers.append(patientact_rubric(harness))
        stages.append("judge_patientact")
        roles.add(JUDGE_ROLE)
    if with_mhqr:
        scorers.append(mhqr(harness))
        stages.append("judge")
        roles.update(harness.judge.judges)
    harness.roles = roles
    harness.start_now(preflight_stages(harness, set(stages)))
    return Task(
        dataset=harness.samples(),
        solver=patient_arc(harness, tuple(stages)),
        scorer=scorers,
        epochs=Epochs(1, pooled()),
        metadata={"recipe": harness.recipe.name, "patient_engine": harness.kind, "seed": harness.seed},
    )


@task
def mindeval2(
    profiles: str,
    recipe: str = "quickstart",
    patient_engine: str = "mindsim",
    sessions: int | None = None,
    replies: int | None = None,
    preset: str | None = None,
    seed: int | None = None,
    max_patients: int | None = None,
    counsellor: str | None = None,
) -> Task:
    """MindEval2: the eval's model counsels each patient of `profiles` over `sessions` sessions of at most
    `replies` replies, with the running memory MindSim keeps, and every reply is judged on the MHQR rubric.

    Args:
        profiles: Profiles folder (holds profiles.parquet): `mindsim profiles` output, or the benchmark members
            written by the authors' importer.
        recipe: Recipe file, or the name of a shipped one, serving every role but the counsellor.
        patient_engine: Patient engine or ENGINE:ARM (mindsim, patientact, patientact:no_tg, …).
        sessions: Sessions per patient (default: the recipe's).
        replies: Counsellor replies per session at most (default: the recipe's turn cap).
        preset: Simulation preset, e.g. mindeval2-reference (default: the recipe's).
        seed: Seed of the schedules, scenarios and sampling (default: the recipe's).
        max_patients: Play only the first N patients.
        counsellor: The counsellor's name in session ids and reports (default: the model's name).
    """
    return _task(Harness(_settings(locals())), with_mhqr=True, with_patientact=False)


@task
def patientact(
    profiles: str,
    recipe: str = "quickstart",
    patient_engine: str = "patientact",
    sessions: int | None = None,
    replies: int | None = None,
    preset: str | None = None,
    seed: int | None = None,
    max_patients: int | None = None,
    counsellor: str | None = None,
    mhqr: bool = True,
) -> Task:
    """PatientAct: the eval's model counsels PatientAct patients (trust-gated memory, reaction → behaviour →
    resistance, stepped trust) and every session is scored on PatientAct's conversation rubric.

    The parameters are `mindeval2`'s, with these differences:

    Args:
        patient_engine: patientact or one of its arms (patientact:no_tg, patientact:no_dm, patientact:no_pipe).
        preset: Simulation preset, e.g. patientact-reference (default: the recipe's).
        mhqr: Also judge every counsellor reply on the MHQR rubric.
    """
    if not isinstance(mhqr, bool):
        raise TaskArgumentError(f"-T mhqr={mhqr!r}: give true or false")
    return _task(Harness(_settings(locals())), with_mhqr=mhqr, with_patientact=True)


def _settings(params: dict[str, Any]) -> TaskSettings:
    """The task's parameters that are settings of the arc (all but the choice of scorers)."""
    return TaskSettings(**{k: v for k, v in params.items() if k in TaskSettings.__dataclass_fields__})
