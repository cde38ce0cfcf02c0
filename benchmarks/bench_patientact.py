"""Cost of the PatientAct patient engine and its three ablation arms against the MindSim one: on
the same profiles, schedule and counsellor, the calls and tokens each engine or arm spends per patient turn,
and the wall time of the run, side by side in one benchmark run. Each runs on a freshly started engine so none
inherits another's prompt cache.

    python benchmarks/bench_patientact.py [--patients 2] [--sessions 1] [--turn-cap 4] [--parallel 4] [--fake]
        [--retrieval lexical|llm] [--engines mindsim,patientact,patientact:no_tg,patientact:no_dm,patientact:no_pipe]

`--fake` runs on the deterministic fake engine of the tests: call counts are exact, tokens are word counts
and timings mean nothing. Without it the embedded SmolLM2-135M engine is used (minutes on 2 cores). Record
the numbers in docs/patientact.md. Timings are never asserted in tests.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "mindsim"))  # hand-built profiles and fakes shared with the tests

from mindsimkit.mindcore.layout import RunLayout  # noqa: E402
from mindsimkit.mindsim.config import SimulationConfig  # noqa: E402
from mindsimkit.mindsim.simulate import simulate_async  # noqa: E402
from simfakes import SimResponder, make_profile  # noqa: E402

from recording import Recorder  # noqa: E402
from smoke import parse_args, session_engines

PER_PATIENT = {"DecompositionDraft", "PsychFormulation"}
PATIENT_ROLES = {"patient", "patient_appraiser", "profile_decomposer", "patient_matcher"}
STEPS = {
    "DecompositionDraft": "decomposition",
    "PsychFormulation": "formulation",
    "Reaction": "reaction",
    "Behaviour": "behaviour",
    "Resistance": "resistance",
    "TrustChange": "trust",
    "TagMatch": "matcher",
}
ENGINES = ("mindsim", "patientact", "patientact:no_tg", "patientact:no_dm", "patientact:no_pipe")


def fake_responder():
    """MindSim's test responder, plus answers for PatientAct's steps (imported lazily: a test module)."""
    from test_patientact import PAResponder

    sim, pa = SimResponder(end_after=99), PAResponder(trust=["rise_slight", "unchanged", "fall_slight"])

    def respond(req):
        if req.schema_name == "TagMatch":
            return {"why": "fake", "tags": req.response_schema["properties"]["tags"]["items"]["enum"][:1]}
        if req.schema_name in STEPS:
            return pa(req)
        return sim(req)

    return respond


def run_engine(engine: str, args) -> dict:
    config = SimulationConfig(
        sessions=args.sessions,
        turn_cap=args.turn_cap,
        patient_engine=engine,
        max_todo_calls=1,
        message_max_tokens=120,
        max_message_retries=3,
        scenario_max_tokens=2550,
        memory_max_tokens=300,
        memory_retries=0,
        patientact={"retrieval": args.retrieval},
    )
    profiles = [make_profile(f"b{i}", "minimiser", "casual") for i in range(args.patients)]
    with session_engines(args, fake_responder) as engines, tempfile.TemporaryDirectory() as tmp:
        rec = Recorder(next(iter(engines._backends.values())))
        t0 = time.monotonic()
        summary = asyncio.run(simulate_async(profiles, engines, config, tmp, seed=0))
        wall = time.monotonic() - t0
        rows = [json.loads(p.read_text()) for p in RunLayout(tmp).sessions.checkpoints.glob("*.json")]
    turns = sum(1 for r in rows for t in r["turns"] if not t["opening"])
    # PatientAct's steps and decomposition run on their own roles (mindsim.simulate.shared_roles).
    patient = [(q, r) for _, q, r in rec.calls if q.role in PATIENT_ROLES]
    kinds = Counter(STEPS.get(q.schema_name or "", "tool_call" if q.response_schema else "message") for q, _ in patient)
    per_turn = [(q, r) for q, r in patient if q.schema_name not in PER_PATIENT]
    per_patient = [(q, r) for q, r in patient if q.schema_name in PER_PATIENT]
    return {
        "engine": engine,
        "sessions_written": summary.sessions_written,
        "failed_arcs": len(summary.failed_arcs),
        "patient_turns": turns,
        "patient_requests_per_turn": round(len(per_turn) / turns, 2) if turns else None,
        "patient_prompt_tokens_per_turn": round(sum(r.prompt_tokens for _, r in per_turn) / turns) if turns else None,
        "patient_completion_tokens_per_turn": round(sum(r.completion_tokens for _, r in per_turn) / turns)
        if turns
        else None,
        "patient_requests_by_kind": dict(kinds),
        "per_patient_requests": len(per_patient),
        "per_patient_tokens": sum(r.prompt_tokens + r.completion_tokens for _, r in per_patient),
        "all_requests": len(rec.calls),
        "wall_s": round(wall, 1),
        "patient_turns_per_min": round(turns / wall * 60, 1) if wall and turns else None,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--patients", type=int, default=2)
    ap.add_argument("--sessions", type=int, default=1)
    ap.add_argument("--turn-cap", type=int, default=4)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--fake", action="store_true", help="deterministic fake engine: exact call counts only")
    ap.add_argument("--retrieval", choices=("lexical", "llm"), default="lexical")
    ap.add_argument("--engines", default=",".join(ENGINES), help="comma-separated engines / arms to run")
    args = parse_args(ap, patients=1, sessions=1, turn_cap=2, fake=True, retrieval="lexical")
    print(json.dumps([run_engine(e, args) for e in args.engines.split(",")], indent=2))


if __name__ == "__main__":
    main()
