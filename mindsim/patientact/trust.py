"""Trust dynamics (PatientAct §3.3.4) and, beyond the paper, trust across the sessions of an arc.

Within a session: after each exchange the trust step names the criterion that fits it (`trust.yaml`
`criteria`, after Fig. 14: what raises, keeps and lowers trust) and a change (unchanged, ±0.25, ±0.5). Code
decides (`update`): the criterion's group sets the direction (a "keep" criterion leaves trust unchanged
whatever change was named; a change against the group's direction becomes the slight move in it), the
attachment style's rules act (`floor_fall`: an anxious client's fall at a brush-off, an avoidant client's at
pushing, is significant; `max_rise` / `max_fall` caps: an avoidant client never gains 0.5 in one exchange;
`reverse_after_rises`: a disorganized client's rise after two rises running turns into a slight fall), and the
result is bounded to [1.0, 4.0]. The model proposes, the rules decide.

Across sessions (ours; the paper leaves multi-session to future work): a session starts from the previous
session's final trust, moved by the change in the schedule's concealment offset, then drifted toward the
session's baseline (start + concealment offset) by `drift_per_day` per day of gap, never past it; the first
session starts at its baseline. Results are snapped to the 0.25 grid updates move on.
"""

from __future__ import annotations

from typing import Sequence

from mindsimkit.mindsim.patientact.data import trust_rules
from mindsimkit.mindsim.schedule import SessionPlan

GRID = 0.25


def snap(value: float, preset: str | None = None) -> float:
    r = trust_rules(preset)
    return min(r.maximum, max(r.minimum, round(value / GRID) * GRID))


def apply_change(trust: float, change: str, attachment: str, preset: str | None = None) -> tuple[float, float]:
    """(new trust, the move actually made) for a named change, capped by attachment and bounded (the authors'
    update, `trust_update: direction`: their data has no caps, so the change is applied as named)."""
    r = trust_rules(preset)
    if change not in r.changes:
        raise ValueError(f"unknown trust change '{change}' (known: {', '.join(r.changes)})")
    rule = r.attachment[attachment]
    delta = max(-rule.max_fall, min(rule.max_rise, r.changes[change]))
    new = min(r.maximum, max(r.minimum, trust + delta))
    return new, round(new - trust, 2)


def update(
    trust: float,
    criterion: str,
    change: str,
    attachment: str,
    previous_moves: Sequence[float] = (),
    preset: str | None = None,
) -> tuple[float, float]:
    """(new trust, the move made) after one exchange judged as `criterion` with the named `change`;
    `previous_moves` are this session's earlier moves, oldest first (the disorganized reversal reads them)."""
    r = trust_rules(preset)
    if change not in r.changes:
        raise ValueError(f"unknown trust change '{change}' (known: {', '.join(r.changes)})")
    if criterion not in r.criterion_ids:
        raise ValueError(f"unknown trust criterion '{criterion}' (known: {', '.join(r.criterion_ids)})")
    group, proposed = r.group(criterion), r.changes[change]
    slight = min(abs(v) for v in r.changes.values() if v)
    if group == "keep":
        delta = 0.0
    elif group == "raise":
        delta = proposed if proposed > 0 else slight
    else:
        delta = proposed if proposed < 0 else -slight
    rule = r.attachment[attachment]
    if group == "lower" and criterion in rule.floor_fall:
        delta = min(delta, -rule.floor_fall[criterion])
    delta = max(-rule.max_fall, min(rule.max_rise, delta))
    n = rule.reverse_after_rises
    if delta > 0 and n and len(previous_moves) >= n and all(m > 0 for m in list(previous_moves)[-n:]):
        delta = rule.reversal
    new = min(r.maximum, max(r.minimum, trust + delta))
    return new, round(new - trust, 2)


def baseline(plan: SessionPlan, concealment_offset: bool = True, preset: str | None = None) -> float:
    r = trust_rules(preset)
    return snap(r.start + (r.concealment_offset.get(plan.concealment, 0.0) if concealment_offset else 0.0), preset)


def session_start(
    plan: SessionPlan,
    previous: SessionPlan | None,
    carried: float | None,
    drift_per_day: float,
    *,
    concealment_offset: bool = True,
    carry: bool = True,
    preset: str | None = None,
) -> float:
    """Starting trust of the session `plan`; `carried` is the previous session's final trust. With
    `concealment_offset` off every baseline is the scale's start (2.5); with `carry` off every session
    starts at its baseline (the paper's single-session setting)."""
    base = baseline(plan, concealment_offset, preset)
    if previous is None or carried is None or not carry:
        return base
    r = trust_rules(preset)

    def off(p: SessionPlan) -> float:
        return r.concealment_offset.get(p.concealment, 0.0) if concealment_offset else 0.0

    shifted = carried + off(plan) - off(previous)
    pull = drift_per_day * (plan.gap_hours or 0.0) / 24.0
    if shifted > base:
        shifted = max(base, shifted - pull)
    else:
        shifted = min(base, shifted + pull)
    return snap(shifted, preset)
