"""The MindEval2 authors' 50 released benchmark members (SWORDHealth/mind-eval `data/profiles.jsonl`) as a profiles
folder that `mindsim simulate` plays under `simulation.preset: mindeval2-reference`, so the paper's Table 6 can be
run patient for patient.

One line of the release is one member: `member_id`, `formulation` (prose the reference pastes verbatim into the
patient's prompt and into the later-scenario writer's), `knobs` (concealment propensity, frustration reactivity,
session affect, verbosity, writing style), `archetype` (one of the reference's sixteen) and `situation` (session 1:
event, thoughts, behaviours, bodily signs, opening message, goal, checkpoints). Each becomes a `Profile`:

- `case_summary` and `writer_brief` are the formulation, verbatim (the reference shows both sides the same text);
  `goal` is the formulation's "What they want out of support:" sentence (empty when it has none).
- `style`: writing style → register, verbosity and frustration reactivity as they are; the archetype → our id
  that the preset's `from_ours` map reads as it (the map is one to one), so under the preset the member plays
  exactly the reference's archetype, and under our defaults the nearest of ours.
- `first_session`: the situation, played verbatim as session 1 (no scenario writer is called), with the knobs'
  concealment and affect as session 1's level and emotion (the reference's `draw_shape` does the same); later
  sessions are drawn and written as usual.
- No persona, demographics, anchor, structured formulation or screen: the release has none, and none is made up
  (`Profile.layered` is False; only MindSim plays such a profile). Every member is in the pool and the benchmark.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mindsimkit.mindcore import __version__
from mindsimkit.mindcore.errors import ConfigError, InputError
from mindsimkit.mindcore.io import file_name
from mindsimkit.mindsim.reference import PRESET, vocabulary_for
from mindsimkit.mindsim.scenario import given_scenario
from mindsimkit.mindsim_app.imports.common import Record, file_sha256, jsonl_records, names, unique
from mindsimkit.profilegen.schemas import FirstSession, GivenSituation, Profile, Provenance, Style

SOURCE = "SWORDHealth/mind-eval data/profiles.jsonl"
FIELDS = ("member_id", "formulation", "knobs", "archetype", "situation")
KNOBS = ("concealment_propensity", "frustration_reactivity", "session_affect", "verbosity", "writing_style")
SITUATION = (
    "situation_id",
    "event",
    "automatic_thoughts",
    "behaviors",
    "physical",
    "opening_message",
    "goal",
    "checkpoints",
)


def archetype_map() -> dict[str, str]:
    """The reference's archetype id → the toolkit's id the preset reads as it (the inverse of `from_ours`)."""
    ours_to_theirs = vocabulary_for(PRESET).aliases
    inverse = {theirs: ours for ours, theirs in ours_to_theirs.items()}
    if len(inverse) != len(ours_to_theirs):
        raise ConfigError(
            f"the {PRESET} preset's archetypes.yaml from_ours map is not one to one; an imported "
            "archetype could not be read back"
        )
    return inverse


def _only(rec: Record, allowed: tuple[str, ...]) -> None:
    extra = [k for k in rec.obj if k not in allowed]
    if extra:
        raise rec.fail(
            extra[0], f"not a field of the release's schema ({', '.join(allowed)}); this importer would leave it unread"
        )


def goal_of(formulation: str) -> str:
    """The sentence after the formulation's goal label, or '' when the formulation has none."""
    label = names()["profiles"]["goal_line"]
    for line in formulation.splitlines():
        if line.strip().startswith(label):
            return line.strip()[len(label) :].strip()
    return ""


def _situation(rec: Record) -> GivenSituation:
    _only(rec, SITUATION)
    goal = rec.text("goal", optional=True)
    if not goal:
        raise rec.fail("goal", "missing or empty; the simulator's agenda starts from the situation's goal")
    data = {
        "situation_id": rec.text("situation_id"),
        "event": rec.text("event"),
        "automatic_thoughts": rec.texts("automatic_thoughts"),
        "behaviors": rec.texts("behaviors"),
        "physical": rec.texts("physical", optional=True),
        "opening_message": rec.text("opening_message"),
        "goal": goal,
        "checkpoints": rec.texts("checkpoints", optional=True),
    }
    try:
        situation = GivenSituation.model_validate(data)
        given_scenario(situation)  # within what a stored scenario holds
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise rec.fail(field, f"{err['msg']} (a stored scenario's limit; mindsim/scenario.py `Scenario`)") from None
    return situation


def member(rec: Record, line: int, sha: str, archetypes: dict[str, str]) -> Profile:
    """One line of the release as a profile; an `InputError` names the line and field that does not fit."""
    maps = names()["profiles"]
    if "member_attributes" in rec.obj and "knobs" not in rec.obj:
        raise rec.fail(
            "member_attributes",
            "this is MindEval v1's profiles.jsonl (attributes and a narrative); the "
            "importer reads MindEval2's, whose lines hold member_id, formulation, "
            "knobs, archetype and situation",
        )
    _only(rec, FIELDS)
    member_id = file_name(rec.text("member_id"), "member_id", rec.where)  # it names the case summary's file
    formulation = rec.text("formulation")
    knobs = rec.child("knobs", "the member's five knobs")
    _only(knobs, KNOBS)
    missing = [k for k in KNOBS if k not in knobs.obj]
    if missing:
        raise knobs.fail(missing[0], "missing; a released member has all five knobs")
    theirs = rec.get("archetype", str, optional=True)
    if theirs is None:
        raise rec.fail(
            "archetype",
            "null; the preset plays one of the reference's sixteen archetypes, so a member "
            "without one cannot be imported",
        )
    if theirs not in archetypes:
        raise rec.fail(
            "archetype", f"unknown archetype {theirs!r}; the {PRESET} preset knows {', '.join(sorted(archetypes))}"
        )
    goal = goal_of(formulation)
    if len(goal) > Profile.model_fields["goal"].metadata[-1].max_length:
        raise rec.fail(
            "formulation",
            f"its goal sentence has {len(goal)} characters; a profile's goal holds at most "
            f"{Profile.model_fields['goal'].metadata[-1].max_length}",
        )
    style = Style(
        register=knobs.one_of("writing_style", maps["writing_style"]),
        verbosity=knobs.one_of("verbosity", maps["verbosity"]),
        frustration_reactivity=knobs.one_of("frustration_reactivity", maps["frustration_reactivity"]),
        archetype=archetypes[theirs],
    )
    first = FirstSession(
        concealment=knobs.one_of("concealment_propensity", maps["concealment_propensity"]),
        emotion=knobs.one_of("session_affect", maps["session_affect"]),
        situation=_situation(rec.child("situation", "the member's session-1 situation")),
    )
    return Profile(
        profile_id=member_id,
        style=style,
        goal=goal,
        case_summary=formulation,
        writer_brief=formulation,
        in_pool=True,
        in_benchmark=True,
        provenance=Provenance(seed=0, toolkit_version=__version__),
        first_session=first,
        imported_from=f"{SOURCE} (sha256 {sha[:12]}), line {line}, member {member_id}",
    )


def convert(path: Path) -> dict[str, Any]:
    """Every member of the file as a profile, checked, in file order; nothing is written here."""
    path = Path(path)
    sha = file_sha256(path) if path.is_file() else ""
    archetypes = archetype_map()
    profiles, ids = [], []
    for line, rec in jsonl_records(path):
        p = member(rec, line, sha, archetypes)
        profiles.append(p)
        ids.append((p.profile_id, rec.where))
    if not profiles:
        raise InputError(f"{path}: no members (an empty file); the release holds 50")
    unique(ids, "member_id")
    archetypes_used: dict[str, int] = {}
    for p in profiles:
        archetypes_used[p.style.archetype] = archetypes_used.get(p.style.archetype, 0) + 1
    return {
        "profiles": profiles,
        "sha256": sha,
        "members": len(profiles),
        "archetypes": {
            f"{theirs} (ours: {ours})": archetypes_used.get(ours, 0)
            for theirs, ours in sorted(archetypes.items())
            if archetypes_used.get(ours)
        },
        "longest_formulation_chars": max(len(p.case_summary) for p in profiles),
    }
