"""Tests for the per-patient schedule (mindsim/schedule.py)."""

from __future__ import annotations

import pytest

from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.schedule import draw_schedule, format_gap, load_schedule_data


def test_same_seed_same_schedule_and_seed_matters():
    cfg = SimulationConfig(sessions=5)
    a = draw_schedule("p1", 11, cfg)
    assert a == draw_schedule("p1", 11, cfg)
    assert any(draw_schedule("p1", s, cfg).sessions != a.sessions for s in range(12, 20))
    assert any(draw_schedule(f"p{i}", 11, cfg).sessions != a.sessions for i in range(2, 10))


def test_schedule_rules_hold_over_many_patients():
    cfg = SimulationConfig(sessions=4)
    data = load_schedule_data()
    levels = data.concealment.levels
    for i in range(300):
        s = draw_schedule(f"p{i}", 3, cfg)
        first, *rest = s.sessions
        assert first.gap_hours is None and first.event_category is None and first.hours_since_start == 0
        for prev, cur in zip(s.sessions, rest):
            assert 6 <= cur.gap_hours <= 336
            assert cur.event_category in data.event_categories
            assert cur.hours_since_start == prev.hours_since_start + cur.gap_hours
            # concealment only opens or holds
            assert levels.index(cur.concealment) >= levels.index(prev.concealment)
        assert all(p.emotion in data.emotions for p in s.sessions)
        assert all(p.max_depth == data.concealment.max_depth[p.concealment] for p in s.sessions)


def test_gap_range_from_config_is_respected():
    cfg = SimulationConfig(sessions=3, min_gap_hours=30, max_gap_hours=40)
    for i in range(100):
        gaps = [p.gap_hours for p in draw_schedule(f"q{i}", 0, cfg).sessions[1:]]
        assert all(30 <= g <= 40 for g in gaps)


def test_weekday_and_hour_advance_with_gaps():
    s = draw_schedule("p7", 5, SimulationConfig(sessions=3))
    days = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    start = days.index(s.sessions[0].weekday) * 24 + s.sessions[0].hour
    for p in s.sessions:
        t = start + p.hours_since_start
        assert p.weekday == days[int(t // 24) % 7] and p.hour == int(t % 24)
        assert p.time_context.startswith(f"It is {p.weekday}")


def test_format_gap():
    assert format_gap(9) == "9 hours"
    assert format_gap(24) == "1 day"
    assert format_gap(77) == "3 days and 5 hours"


def test_a_profiles_first_session_fixes_session_one_and_moves_no_other_draw():
    """An imported member's knobs set session 1's concealment and emotion (the reference's `draw_shape`); under our
    schedule and the preset's every other draw is what it would have been, and the level only opens from there."""
    from mindsimkit.mindcore.errors import InputError
    from mindsimkit.mindsim.reference import patient_schedule
    from mindsimkit.profilegen.schemas import FirstSession, GivenSituation

    situation = GivenSituation(
        situation_id="s", event="e", automatic_thoughts=["t"], behaviors=["b"], opening_message="hi", goal="g"
    )
    first = FirstSession(concealment="closed", emotion="happiness", situation=situation)
    for preset in ("ours", "mindeval2-reference"):
        cfg = SimulationConfig.from_section({"preset": preset, "sessions": 4})
        for i in range(40):
            free, fixed = patient_schedule(f"p{i}", 2, cfg), patient_schedule(f"p{i}", 2, cfg, first)
            one = fixed.sessions[0]
            assert (one.concealment, one.emotion) == ("closed", "happiness")
            for a, b in zip(free.sessions, fixed.sessions, strict=True):
                assert (a.gap_hours, a.event_category, a.weekday, a.hour) == (
                    b.gap_hours,
                    b.event_category,
                    b.weekday,
                    b.hour,
                )
            assert [p.emotion for p in free.sessions[1:]] == [p.emotion for p in fixed.sessions[1:]]
            levels = ["closed", "guarded", "open"]
            assert all(
                levels.index(x.concealment) <= levels.index(y.concealment)
                for x, y in zip(fixed.sessions, fixed.sessions[1:], strict=False)
            )
        with pytest.raises(InputError, match="profile p1: first_session.emotion 'joy'"):
            patient_schedule("p1", 2, cfg, first.model_copy(update={"emotion": "joy"}))
