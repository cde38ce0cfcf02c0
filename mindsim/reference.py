"""The `mindeval2-reference` preset's data and draws: MindSim with the settings and data of the MindEval2 authors'
public code (SWORDHealth/mind-eval: `config/moves.yaml`, `config/archetypes.yaml`, `config/episode.yaml`, `arc.py`).

What the preset changes is data under `mindsim/data/presets/mindeval2-reference/` (named in
`mindsim/data/presets.yaml`); this module reads it and holds the few rules that differ in kind from ours: the
concealment level opens after a drawn number of sessions (a dwell draw per level) rather than by a coin per
follow-up, gaps are not rounded to whole hours, the first hour is drawn from bands, the time line names a part of
the day and the previous session and says the gap in approximate words, and the day and time are the patient's
only. Every draw has its own random stream per (patient, session, quantity), as in the reference, so adding a
session never moves an earlier draw.
Pure: no LLM. Used only when `cfg.preset_for("mindsim") == PRESET`.
"""

from __future__ import annotations

import hashlib
import random
from functools import lru_cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mindsimkit.mindcore import yamlio
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindsim import presets
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.schedule import (
    WEEKDAYS,
    ConcealmentLevels,
    EventCategory,
    GapBucket,
    Schedule,
    SessionPlan,
    first_session_given,
)
from mindsimkit.mindsim.schedule import draw_schedule as draw_our_schedule
from mindsimkit.profilegen.moves import Vocabulary, build_vocabulary, load_vocabulary
from mindsimkit.profilegen.schemas import FirstSession

PRESET = "mindeval2-reference"
NEVER = "never"


class HourBand(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    low: float = Field(ge=0, lt=24, description="Band start, local hour (inclusive)")
    high: float = Field(gt=0, le=24, description="Band end, local hour (exclusive)")
    weight: float = Field(gt=0, description="Sampling weight")


class PartOfDay(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    before: float = Field(gt=0, le=24, description="The part runs up to this hour")
    name: str = Field(min_length=1, description="How the time line names it")


class DwellConcealment(ConcealmentLevels):
    dwell: dict[str, dict[str, float]] = Field(
        description="Per level: sessions it holds ('1', '2', …) or 'never' → probability"
    )

    @model_validator(mode="after")
    def _consistent(self) -> "DwellConcealment":
        levels = set(self.levels)
        if set(self.max_depth) != levels or not set(self.start_weights) <= levels or set(self.dwell) != levels:
            raise ValueError("concealment max_depth, start_weights and dwell must use its levels")
        for level, dist in self.dwell.items():
            bad = [k for k in dist if k != NEVER and not (k.isdigit() and int(k) >= 1)]
            if bad or abs(sum(dist.values()) - 1) > 1e-6:
                raise ValueError(
                    f"concealment dwell.{level}: keys are session counts ≥ 1 or '{NEVER}', "
                    f"probabilities summing to 1 (got {dist})"
                )
        return self


class TimeLines(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    first: str = Field(description="The first session's line; {now}")
    later: str = Field(description="A later session's line; {now}, {gap}, {then}")


class GapWords(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    below: float = Field(gt=0, description="The row words gaps shorter than this many hours")
    text: str = Field(min_length=1, description="The words; {hours}, {days}, {weeks} are the gap rounded")


class ReferenceSchedule(BaseModel):
    """The preset's `schedule.yaml`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    source: str
    version: str
    gap_hours: list[GapBucket] = Field(min_length=1)
    event_categories: dict[str, EventCategory] = Field(min_length=1)
    emotions: dict[str, float] = Field(min_length=1)
    concealment: DwellConcealment
    weekday_weights: dict[str, float]
    start_hour_bands: list[HourBand] = Field(min_length=1)
    parts_of_day: list[PartOfDay] = Field(min_length=1)
    time_lines: TimeLines
    gap_words: list[GapWords] = Field(min_length=1)
    patient_only_time: bool

    @model_validator(mode="after")
    def _consistent(self) -> "ReferenceSchedule":
        if set(self.weekday_weights) != set(WEEKDAYS):
            raise ValueError("weekday_weights must name all seven weekdays")
        if self.parts_of_day[-1].before < 24:
            raise ValueError("parts_of_day must end at hour 24")
        if self.gap_words[-1].below != float("inf"):
            raise ValueError("gap_words must end with a row below .inf, so every gap has words")
        return self


def _read(key: str) -> tuple[str, Any]:
    name = presets.data_file(PRESET, key)
    if name is None:
        raise ConfigError(f"mindsim/data/presets.yaml: preset '{PRESET}' names no '{key}' data file")
    path = resources.files("mindsimkit.mindsim").joinpath("data", "presets", *name.split("/"))
    try:
        return name, yamlio.safe_load(path.read_text(encoding="utf-8"))
    except Exception as exc:
        raise ConfigError(f"mindsim/data/presets/{name} cannot be read: {exc}") from exc


@lru_cache(maxsize=1)
def load_schedule() -> ReferenceSchedule:
    name, raw = _read("schedule")
    try:
        return ReferenceSchedule.model_validate(raw)
    except Exception as exc:
        raise ConfigError(f"mindsim/data/presets/{name} is invalid: {exc}") from exc


@lru_cache(maxsize=1)
def load_reference_vocabulary() -> Vocabulary:
    return build_vocabulary(_read("moves")[1], _read("archetypes")[1])


def vocabulary_for(preset: str) -> Vocabulary:
    """The move vocabulary an engine running under `preset` plays with."""
    return load_reference_vocabulary() if preset == PRESET else load_vocabulary()


def _stream(seed: int, patient_id: str, what: str) -> random.Random:
    # A hash, not hash(): stable across processes; one stream per quantity, as in the reference.
    digest = hashlib.sha256(f"schedule|{PRESET}|{seed}|{patient_id}|{what}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _pick(rng: random.Random, weights: dict[str, float]) -> str:
    keys = list(weights)
    return rng.choices(keys, weights=[weights[k] for k in keys], k=1)[0]


def concealment_levels(data: DwellConcealment, start: str, n: int, draw: Any) -> list[str]:
    """`n` sessions' levels from `start`: each level visited holds for a drawn number of sessions, then opens one
    step; a drawn 'never', or the most open level, holds for good. `draw(step, dist)` makes the step-th draw."""
    out: list[str] = []
    level, step = start, 0
    while len(out) < n:
        last = data.levels.index(level) == len(data.levels) - 1
        drawn = NEVER if last else draw(step, data.dwell[level])
        if drawn == NEVER:
            out += [level] * (n - len(out))
            break
        out += [level] * min(int(drawn), n - len(out))
        level = data.levels[data.levels.index(level) + 1]
        step += 1
    return out


def _gap(rng_band: random.Random, rng_in: random.Random, bands: list[GapBucket], lo: float, hi: float) -> float:
    usable = [b for b in bands if b.high > lo and b.low < hi]
    if not usable:
        raise ConfigError(f"simulation gap range {lo}–{hi} h overlaps no gap band of the {PRESET} preset")
    b = rng_band.choices(usable, weights=[b.weight for b in usable], k=1)[0]
    return rng_in.uniform(max(b.low, lo), min(b.high, hi))


def gap_words(data: ReferenceSchedule, hours: float) -> str:
    """A gap in the approximate words the reference tells it in ('about 3 days', 'about 9 hours'), where ours says
    the exact hours ('3 days and 5 hours')."""
    row = next(r for r in data.gap_words if hours < r.below)
    return row.text.format(hours=max(2, round(hours)), days=round(hours / 24), weeks=round(hours / 24 / 7))


def part_of_day(data: ReferenceSchedule, hour: float) -> str:
    h = hour % 24
    return next(p.name for p in data.parts_of_day if h < p.before)


def patient_schedule(
    patient_id: str, seed: int, config: SimulationConfig, first: FirstSession | None = None
) -> Schedule:
    """The schedule a patient's arcs are played on. One per patient, met by every counsellor and every patient
    engine so their sessions stay paired: a recipe that runs MindSim under this preset draws it as the authors'
    code does, every other recipe from our priors. `first`: the profile's fixed first session, if it has one."""
    if config.preset_for("mindsim") == PRESET:
        return draw_schedule(patient_id, seed, config, first)
    return draw_our_schedule(patient_id, seed, config, first)


def draw_schedule(patient_id: str, seed: int, config: SimulationConfig, first: FirstSession | None = None) -> Schedule:
    """The schedule of one patient under the preset. Same (patient_id, seed, config) → identical schedule. A
    profile with a fixed first session (`first`) starts concealment at its level and plays session 1 with its
    emotion, as the reference plays a released member's knobs (`draw_shape`); the other draws keep their streams."""
    data = load_schedule()
    conc = data.concealment
    given = first_session_given(first, conc.levels, data.emotions, patient_id)

    def stream(what: str) -> random.Random:
        return _stream(seed, patient_id, what)

    start = given.concealment if given is not None else _pick(stream("level"), conc.start_weights)
    levels = concealment_levels(conc, start, config.sessions, lambda step, dist: _pick(stream(f"dwell|{step}"), dist))
    day = WEEKDAYS.index(_pick(stream("weekday"), data.weekday_weights))
    hours = stream("hour")
    band = hours.choices(data.start_hour_bands, weights=[b.weight for b in data.start_hour_bands], k=1)[0]
    start_hour = hours.uniform(band.low, band.high)

    def when(elapsed: float) -> tuple[str, int, str]:
        at = start_hour + elapsed
        weekday = WEEKDAYS[(day + int(at // 24)) % 7]
        return weekday, int(at % 24), f"{weekday} {part_of_day(data, at)}"

    elapsed, plans = 0.0, []
    for i in range(config.sessions):
        gap = category = beat = None
        if i:
            gap = _gap(
                stream(f"gap_band|{i}"), stream(f"gap|{i}"), data.gap_hours, config.min_gap_hours, config.max_gap_hours
            )
            category = _pick(stream(f"event|{i}"), {k: v.weight for k, v in data.event_categories.items()})
            beat = data.event_categories[category].beat
        then = when(elapsed)[2]
        elapsed += gap or 0.0
        weekday, hour, now = when(elapsed)
        words = gap_words(data, gap) if gap is not None else None  # set on every session after the first
        line = (
            data.time_lines.first.format(now=now)
            if not i
            else data.time_lines.later.format(now=now, gap=words, then=then)
        )
        plans.append(
            SessionPlan(
                index=i,
                gap_hours=gap,
                gap_words=words,
                event_category=category,
                beat=beat,
                emotion=given.emotion if given is not None and not i else _pick(stream(f"emotion|{i}"), data.emotions),
                concealment=levels[i],
                max_depth=conc.max_depth[levels[i]],
                hours_since_start=elapsed,
                weekday=weekday,
                hour=hour,
                time_text=line,
                patient_only_time=data.patient_only_time,
            )
        )
    return Schedule(patient_id=patient_id, seed=seed, sessions=plans)
