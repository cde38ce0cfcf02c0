"""Fakes of the situation-seeded PatientAct profile chain, shared by the profile-stage and simulator tests: one
valid answer per step (a man who lost his warehouse job), a responder dispatching on the step's schema name, a
scripted client that records each step's prompt, and the import of the test situations through the real command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mindsimkit.mindcore.recipe import Recipe

from test_exit_codes import mindsim_here

DATA = Path(__file__).resolve().parent / "data" / "patientact_situations"


def import_situations(tmp_path: Path) -> Path:
    """The test situations, outline and priors imported with `mindsim import patientact-situations`."""
    out = tmp_path / "imported"
    proc = mindsim_here(
        "import",
        "patientact-situations",
        DATA / "patientAct.json",
        "--outlines",
        DATA / "disease_outlines.json",
        "--priors",
        DATA / "attribute_priors.json",
        "--disease-priors",
        DATA / "disease_priors.json",
        "--out",
        out,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    return out


PROBLEM = {
    "presenting_problem": {
        "situation": "His wife asked the GP to see him after weeks of sitting alone in the car after interviews.",
        "impact": ["wakes at 4am most days", "skips family dinners", "has stopped answering calls"],
    },
    "goal": "To feel useful again and get back to work.",
    "precipitating_factors": ["Laid off from the warehouse three months ago."],
    "predisposing_factors": {
        "psychological": [
            "At 12 his father mocked him for a failed school test.",
            "At 30 he was passed over for a promotion he trained for.",
        ],
        "social": ["Grew up where a man without work was talked about as idle."],
    },
    "perpetuating_factors": {
        "internal": [
            "Avoids calls from friends, feels relief, then feels more alone and lower.",
            "Stays in bed late, saves energy, then the day feels wasted and mood drops.",
        ],
        "external": ["Few openings for his trade in the town."],
    },
    "protective_factors": {
        "internal": ["Takes pride in finishing what he starts.", "Wants to be a good father."],
        "external": ["A wife who keeps asking how he is.", "A brother who offers him shifts."],
    },
}
PATTERN = {
    "wish": "to be taken seriously",
    "response_of_other": "expects to be judged lazy",
    "response_of_self": "answers briefly and changes the subject",
}
PSYCH = {
    "intermediate_beliefs": ["If he is not earning, he is letting everyone down.", "Asking for help means failure."],
    "automatic_thoughts": ["I am useless to them now.", "Nobody will hire someone my age."],
    "triggers": ["Questions about work at family meals.", "A counsellor asking what he does all day."],
    "coping_patterns": ["Leaves the room when money comes up.", "Sits in the car until everyone is asleep."],
    "emotional_range": "Shows irritation easily; sadness and fear stay hidden behind it.",
    "therapist_pattern": PATTERN,
    "interpersonal_patterns": [{"domain": "wife", **PATTERN}],
}
DEMOGRAPHICS = {
    "name": "Tom Reyes",
    "gender": "male",
    "age_group": "Adult",
    "occupation": "unemployed warehouse hand",
    "marital_status": "married",
    "cultural_background": "Hispanic",
}


def demographics(passed: bool = True, issues: list[str] | None = None, **over: Any) -> dict[str, Any]:
    return {
        "passed": passed,
        "issues": issues or [],
        "rationale": "checked the life stage and the work",
        "demographics": {**DEMOGRAPHICS, **over},
    }


def verdict(passed: bool, issues: list[str] | None = None, guidance: list[str] | None = None) -> dict[str, Any]:
    return {
        "passed": passed,
        "issues": issues or [],
        "rationale": "read against the situation",
        "revision_guidance": guidance or [],
    }


def responder(validate=lambda req: verdict(True), demo=lambda req: demographics()):
    def respond(req):
        return {
            "situation_problem": lambda r: PROBLEM,
            "situation_demographics": demo,
            "situation_psych": lambda r: PSYCH,
            "situation_validation": validate,
        }[req.schema_name](req)

    return respond


class Scripted:
    """A client answering `structured` from the responder, recording each (schema name, prompt)."""

    def __init__(self, respond):
        self.respond, self.calls = respond, []

    async def structured(self, messages, model, schema_name=None, **_):
        from types import SimpleNamespace

        self.calls.append((schema_name, messages[-1]["content"]))
        return model.model_validate(self.respond(SimpleNamespace(schema_name=schema_name, messages=messages)))

    def describe(self):
        return {"engine": "scripted", "model": "scripted"}


def situation_recipe(folder: Path, **profiles: Any) -> Recipe:
    return Recipe(
        name="situations",
        seed=3,
        engines={"local": {"kind": "embedded"}},
        roles={"default": {"engine": "local"}},
        profiles={"source": "patientact-situations", "situations": str(folder), **profiles},
    )
