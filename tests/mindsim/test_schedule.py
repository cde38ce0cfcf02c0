"""Tests for the per-patient schedule (mindsim/schedule.py)."""

from __future__ import annotations

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
