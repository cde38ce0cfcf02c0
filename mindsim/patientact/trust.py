"""Trust dynamics (PatientAct §3.3.4) and, beyond the paper, trust across the sessions of an arc.

Within a session: after each exchange the trust step names a change (`trust.yaml` `changes`: unchanged,
±0.25, ±0.5); code caps it by the attachment style's largest rise / fall (avoidant clients never gain 0.5 in
one exchange) and bounds the result to [1.0, 4.0]. The model proposes, the rules decide, so trust can never
leave the scale whatever the model says.

Across sessions (ours; the paper leaves multi-session to future work): a session starts from the previous
session's final trust, moved by the change in the schedule's concealment offset, then drifted toward the
session's baseline (start + concealment offset) by `drift_per_day` per day of gap, never past it; the first
session starts at its baseline. Results are snapped to the 0.25 grid updates move on.
"""

from __future__ import annotations

from mindsim.patientact.data import trust_rules
from mindsim.schedule import SessionPlan

GRID = 0.25


def snap(value: float) -> float:
    r = trust_rules()
    return min(r.maximum, max(r.minimum, round(value / GRID) * GRID))


def apply_change(trust: float, change: str, attachment: str) -> tuple[float, float]:
    """(new trust, the move actually made) for a named change, capped by attachment and bounded."""
    r = trust_rules()
    if change not in r.changes:
        raise ValueError(f"unknown trust change '{change}' (known: {', '.join(r.changes)})")
    rule = r.attachment[attachment]
    delta = max(-rule.max_fall, min(rule.max_rise, r.changes[change]))
    new = min(r.maximum, max(r.minimum, trust + delta))
    return new, round(new - trust, 2)


def baseline(plan: SessionPlan) -> float:
    r = trust_rules()
    return snap(r.start + r.concealment_offset.get(plan.concealment, 0.0))


def session_start(plan: SessionPlan, previous: SessionPlan | None, carried: float | None, drift_per_day: float) -> float:
    """Starting trust of the session `plan`; `carried` is the previous session's final trust."""
    base = baseline(plan)
    if previous is None or carried is None:
        return base
    r = trust_rules()
    shifted = carried + r.concealment_offset.get(plan.concealment, 0.0) - r.concealment_offset.get(previous.concealment, 0.0)
    pull = drift_per_day * (plan.gap_hours or 0.0) / 24.0
    if shifted > base:
        shifted = max(base, shifted - pull)
    else:
        shifted = min(base, shifted + pull)
    return snap(shifted)
