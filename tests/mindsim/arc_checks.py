"""Checks on a finished simulation folder that hold whatever the engine wrote, shared by the fake-engine tests
(where a mutation of the bookkeeping is shown to turn them red) and the embedded end-to-end tests (where a 135M
model decides which arcs fail and where).

- `check_arc_ledger`: every arc is either complete or listed once as failed; a failed arc keeps the sessions it
  finished before it failed (a contiguous prefix of its schedule); the dataset holds exactly the checkpointed
  sessions, each once; the summary's counts add up to the sessions expected.
- `check_trust_carry`: a PatientAct arc's first session starts at its baseline, each later one at
  `session_start(...)` of the previous session's final trust, and within a session the per-turn trust chains
  from the session's start to its end.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from mindsimkit.mindsim.patientact.trust import baseline, session_start
from mindsimkit.mindsim.schedule import SessionPlan
from mindsimkit.mindsim.simulate import SessionStore

Arc = tuple[str, str, str]


def arc_of(row: dict[str, Any]) -> Arc:
    return row["patient_id"], row["counsellor"], row["patient_engine"] or "mindsim"


def check_arc_ledger(out: Path, sessions: int | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Assert the failed-arc bookkeeping of `out/sessions`; returns (dataset rows, summary). Each arc owes the
    sessions its engine plays (`simulation.sessions`, or fewer under `engine_sessions`); `sessions`, when given,
    must be the run's `simulation.sessions`."""
    summary = json.loads((out / "sessions" / "summary.json").read_text())
    config = summary["config"]
    assert sessions is None or sessions == config["sessions"], (sessions, config["sessions"])

    def owed(arc: Arc) -> int:
        return (config.get("engine_sessions") or {}).get(arc[2], config["sessions"])

    table = out / "sessions" / "sessions.parquet"
    rows = pq.read_table(table).to_pylist() if table.is_file() else []
    failed = {(f["patient_id"], f["counsellor"], f["patient_engine"]): f for f in summary["failed_arcs"]}
    assert len(failed) == len(summary["failed_arcs"]), "an arc is listed as failed twice"
    assert all(f["error"] for f in failed.values()), "a failed arc without its error"
    ids = [r["session_id"] for r in rows]
    assert len(ids) == len(set(ids)) == summary["sessions_written"], "dataset and summary disagree"
    # No lost work and nothing invented: the dataset is exactly the finished sessions' checkpoints.
    assert set(ids) == {r.session_id for r in SessionStore(out).all()}
    by_arc: dict[Arc, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_arc[arc_of(r)].append(r)
    arcs = set(by_arc) | set(failed)
    assert len(arcs) == summary["arcs"], "an arc neither wrote its sessions nor failed"
    for arc, arc_rows in by_arc.items():
        idx = sorted(r["session_index"] for r in arc_rows)
        # A failed arc keeps what it finished before it failed: always a prefix of its schedule.
        assert idx == list(range(len(idx))), (arc, idx)
        assert (len(idx) < owed(arc)) if arc in failed else (len(idx) == owed(arc)), (arc, idx, arc in failed)
    missing = sum(owed(arc) - len(by_arc.get(arc, [])) for arc in failed)
    assert summary["sessions_written"] + missing == summary["sessions_expected"] == sum(owed(a) for a in arcs)
    return rows, summary


def check_trust_carry(rows: list[dict[str, Any]]) -> int:
    """Assert the trust ledger of every PatientAct arc in `rows`; returns how many session-to-session carries
    were checked (0 when no arc has two sessions)."""
    by_arc: dict[Arc, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["patient_engine"] == "patientact":
            by_arc[arc_of(r)].append(r)
    carries = 0
    for arc_rows in by_arc.values():
        arc_rows.sort(key=lambda r: r["session_index"])
        prev = None
        for r in arc_rows:
            pa, plan = r["patientact"], SessionPlan.model_validate(r["schedule"])
            if prev is None:
                assert r["session_index"] == 0 and pa["trust_start"] == baseline(plan), (pa["trust_start"], plan)
            else:
                before = prev["patientact"]
                expected = session_start(
                    plan,
                    SessionPlan.model_validate(prev["schedule"]),
                    before["trust_end"],
                    before["switches"]["trust_drift_per_day"],
                )
                assert pa["trust_start"] == expected, (
                    r["session_id"],
                    pa["trust_start"],
                    before["trust_end"],
                    expected,
                )
                carries += 1
            trust = pa["trust_start"]
            for t in r["turns"]:
                state = t["patientact"]
                assert state["trust_before"] == trust, (r["session_id"], t["index"], state, trust)
                trust = state["trust_after"]
            assert pa["trust_end"] == trust, (r["session_id"], pa["trust_end"], trust)
            prev = r
    return carries
