"""The per-patient session schedule (MindEval2/MindSim §4.2 "Multi session" and "Session style", Appendix D
Table 12): number of sessions, gap before each follow-up, between-session event category, the Ekman emotion
closest to the surface, a concealment level that only opens or holds, and the first session's weekday and hour.

Drawn once per patient from (seed, patient id) only — never from the counsellor — so every counsellor meets
the same arc. Pure: no LLM. Distributions live in `mindsim/data/schedule.yaml`.
"""

from __future__ import annotations

import hashlib
import random
from functools import lru_cache
from importlib import resources
from typing import Iterable, Mapping, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from mindsimkit.mindcore.errors import ConfigError, InputError
from mindsimkit.mindcore import yamlio
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.profilegen.schemas import FirstSession

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


class EventCategory(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    weight: float = Field(gt=0, description="Sampling weight")
    beat: str = Field(description="Shape of the stretch, told to the situation writer without naming it")


class GapBucket(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    low: float = Field(ge=0, description="Bucket start in hours (inclusive)")
    high: float = Field(gt=0, description="Bucket end in hours (exclusive)")
    weight: float = Field(gt=0, description="Sampling weight")


class ConcealmentLevels(BaseModel):
    """The concealment levels and what each allows; ours and the reference preset differ in how a level moves."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    levels: list[str] = Field(min_length=2, description="Closed → open")
    max_depth: dict[str, int] = Field(description="Deepest depth-move rank allowed per level")
    start_weights: dict[str, float] = Field(description="Sampling weights of the first session's level")


class ConcealmentSpec(ConcealmentLevels):
    open_probability: float = Field(ge=0, le=1, description="Chance to open one level at each follow-up")


class ScheduleData(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    source: str
    version: str
    gap_hours: list[GapBucket]
    event_categories: dict[str, EventCategory]
    emotions: dict[str, float]
    concealment: ConcealmentSpec
    weekday_weights: dict[str, float]
    hour_weights: dict[int, float]


class SessionPlan(BaseModel):
    """One session's entry in the schedule."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    index: int = Field(ge=0, description="0-based session index")
    gap_hours: float | None = Field(description="Hours since the previous session; None for the first")
    # Left out of dumps when unset, so records of runs without the `mindeval2-reference` preset read as before.
    gap_words: str | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="The gap as a preset words it for the patient and the writer ('about 3 days'); None: exact hours",
    )
    event_category: str | None = Field(description="Between-session event category; None for the first")
    beat: str | None = Field(description="The category's shape as told to the situation writer")
    emotion: str = Field(description="Ekman emotion closest to the surface this session")
    concealment: str = Field(description="Concealment level this session (closed → open)")
    max_depth: int = Field(ge=1, description="Deepest depth move the guard accepts this session")
    hours_since_start: float = Field(ge=0, description="Hours from the first session's start")
    weekday: str = Field(description="Weekday the session starts")
    hour: int = Field(ge=0, le=23, description="Local hour the session starts")
    # Both left out of dumps when unset, so records of runs without the `mindeval2-reference` preset read as before.
    time_text: str | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="The time line as a preset words it (mindeval2-reference: part of day, and the last session)",
    )
    patient_only_time: bool = Field(
        False,
        exclude_if=lambda v: not v,
        description="True: the counsellor's prompt is not told the day and time",
    )

    @property
    def time_context(self) -> str:
        return self.time_text or f"It is {self.weekday}, around {self.hour:02d}:00."

    @property
    def counsellor_time_context(self) -> str:
        """What the counsellor's prompt is told of the time: nothing when the schedule keeps it to the patient."""
        return "" if self.patient_only_time else self.time_context

    @property
    def gap_text(self) -> str:
        return self.gap_words or format_gap(self.gap_hours or 0)


class Schedule(BaseModel):
    """A patient's whole arc, shared by every counsellor."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    patient_id: str = Field(description="Profile id the schedule belongs to")
    seed: int = Field(description="Run seed it was drawn from")
    sessions: list[SessionPlan] = Field(description="One entry per session, in order")


@lru_cache(maxsize=1)
def load_schedule_data() -> ScheduleData:
    path = resources.files("mindsimkit.mindsim") / "data" / "schedule.yaml"
    try:
        data = ScheduleData.model_validate(yamlio.safe_load(path.read_text(encoding="utf-8")))
    except Exception as exc:
        raise ConfigError(f"mindsim/data/schedule.yaml is invalid: {exc}") from exc
    levels = data.concealment.levels
    if set(data.concealment.max_depth) != set(levels) or not set(data.concealment.start_weights) <= set(levels):
        raise ConfigError("mindsim/data/schedule.yaml: concealment max_depth/start_weights must use its levels")
    if set(data.weekday_weights) != set(WEEKDAYS):
        raise ConfigError("mindsim/data/schedule.yaml: weekday_weights must name all seven weekdays")
    return data


def _rng(seed: int, patient_id: str) -> random.Random:
    # A hash, not hash(): stable across processes and Python versions.
    digest = hashlib.sha256(f"schedule|{seed}|{patient_id}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


K = TypeVar("K")


def _pick(rng: random.Random, weights: Mapping[K, float]) -> K:
    keys = list(weights)
    return rng.choices(keys, weights=[weights[k] for k in keys], k=1)[0]


def _gap(rng: random.Random, data: ScheduleData, lo: float, hi: float) -> float:
    buckets = [b for b in data.gap_hours if b.high > lo and b.low < hi]
    if not buckets:
        raise ConfigError(f"simulation gap range {lo}–{hi} h overlaps no bucket of schedule.yaml")
    b = rng.choices(buckets, weights=[b.weight for b in buckets], k=1)[0]
    return float(round(rng.uniform(max(b.low, lo), min(b.high, hi))))


def first_session_given(
    first: FirstSession | None, levels: list[str], emotions: Iterable[str], patient_id: str
) -> FirstSession | None:
    """A profile's fixed first session, checked against the schedule's concealment levels and emotions."""
    if first is None:
        return None
    if first.concealment not in levels:
        raise InputError(
            f"profile {patient_id}: first_session.concealment '{first.concealment}' is not a level of "
            f"the schedule ({', '.join(levels)})"
        )
    if first.emotion not in set(emotions):
        raise InputError(
            f"profile {patient_id}: first_session.emotion '{first.emotion}' is not an emotion of the "
            f"schedule ({', '.join(emotions)})"
        )
    return first


def draw_schedule(patient_id: str, seed: int, config: SimulationConfig, first: FirstSession | None = None) -> Schedule:
    """The schedule of one patient, drawn from our priors. Same (patient_id, seed, config) → identical schedule.
    `first`: a profile's fixed first session, whose concealment and emotion session 1 takes (drawn as usual, then
    replaced, so every other draw stays what it would be). (`mindsim.reference.patient_schedule` picks between
    this and the `mindeval2-reference` preset's.)"""
    data = load_schedule_data()
    rng = _rng(seed, patient_id)
    conc = data.concealment
    given = first_session_given(first, conc.levels, data.emotions, patient_id)
    level = conc.levels.index(_pick(rng, conc.start_weights))
    if given is not None:
        level = conc.levels.index(given.concealment)
    day = WEEKDAYS.index(_pick(rng, data.weekday_weights))
    hour = int(_pick(rng, data.hour_weights))
    elapsed = 0.0
    plans = []
    for i in range(config.sessions):
        gap = category = beat = None
        if i:
            gap = _gap(rng, data, config.min_gap_hours, config.max_gap_hours)
            category = _pick(rng, {k: v.weight for k, v in data.event_categories.items()})
            beat = data.event_categories[category].beat
            # Concealment only opens or holds: a fixed draw per follow-up, not a reaction to the counsellor.
            if rng.random() < conc.open_probability:
                level = min(level + 1, len(conc.levels) - 1)
            elapsed += gap
        emotion = _pick(rng, data.emotions)
        if i == 0 and given is not None:
            emotion = given.emotion
        total = hour + elapsed
        plans.append(
            SessionPlan(
                index=i,
                gap_hours=gap,
                event_category=category,
                beat=beat,
                emotion=emotion,
                concealment=conc.levels[level],
                max_depth=conc.max_depth[conc.levels[level]],
                hours_since_start=elapsed,
                weekday=WEEKDAYS[(day + int(total // 24)) % 7],
                hour=int(total % 24),
            )
        )
    return Schedule(patient_id=patient_id, seed=seed, sessions=plans)


def format_gap(hours: float) -> str:
    """A gap in words as the situation writer is told it ('about 9 hours', '3 days and 5 hours')."""
    h = int(round(hours))
    if h < 24:
        return f"{h} hours"
    days, rest = divmod(h, 24)
    unit = "day" if days == 1 else "days"
    return f"{days} {unit}" if rest == 0 else f"{days} {unit} and {rest} hours"
