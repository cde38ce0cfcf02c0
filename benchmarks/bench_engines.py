"""Cost of every patient engine side by side: one run with `patient_engine: [mindsim, patientact,
patient_psi, mindeval, annaagent, consistentmi]` on the same profiles, schedule, first scenario and counsellor, and the patient-side
requests and tokens each engine spends per patient turn, plus what it spends once per patient (PatientAct's
formulation and decomposition, the baselines' mapper call; AnnaAgent's modulator calls and ConsistentMI's tracker
questions count per turn).

    python benchmarks/bench_engines.py [--patients 1] [--turn-cap 3] [--parallel 4] [--fake] [--write-scenario]

Without `--fake` it runs on the embedded SmolLM2-135M engine (minutes on 2 cores): tokens are the server's
counts. `--fake` runs on the tests' deterministic fake engine: request counts are exact, tokens are word counts.
All engines share one server and one run, so they share its prompt cache as they would in a study; each
request is attributed to its engine by what it carries (the session's patient or appraiser system prompt as
recorded, or the schema of a per-patient call). The first scenario, which every engine shares and none is
charged for, is checkpointed in advance from the tests' fixture unless `--write-scenario` asks the scenario
writer for it. Record the numbers in docs/baselines.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "mindsim"))  # hand-built profiles and fakes shared with the tests

from mindsimkit.mindsim.config import SimulationConfig  # noqa: E402
from mindsimkit.mindsim.simulate import simulate_async  # noqa: E402
from simfakes import make_profile  # noqa: E402

from recording import Recorder  # noqa: E402
from smoke import parse_args, session_engines

ENGINES = ["mindsim", "patientact", "patient_psi", "mindeval", "annaagent", "consistentmi"]
# Calls made once per patient, by the schema they ask for.
PER_PATIENT = {
    "DecompositionDraft": "patientact",
    "PsychFormulation": "patientact",
    "PatientPsiMap": "patient_psi",
    "MindEvalMap": "mindeval",
    "AnnaAgentMap": "annaagent",
    "ConsistentMIMap": "consistentmi",
}
# Roles only one engine calls (their requests carry no system prompt to attribute them by).
ROLE_OF = {"annaagent_modulator": "annaagent", "consistentmi_tracker": "consistentmi"}
PATIENT_SIDE = {"patient", "patient_appraiser", "profile_decomposer", "baseline_mapper", *ROLE_OF}


def fake_responder():
    from test_baselines import responder  # the baseline tests' responder answers every engine's calls
    from test_annaagent import AnnaResponder  # AnnaAgent's mapper and modulator
    from test_consistentmi import Script  # ConsistentMI's mapper and tracker

    cmi, anna = Script(topics=["Economy"]), AnnaResponder()
    anna_schemas = {"AnnaAgentMap", "AnnaEmotion", "ComplaintSwitch", "MemoryCheck"}

    def answer(req):
        name = req.schema_name or ""
        if name in anna_schemas or req.role == "annaagent_modulator":
            return anna(req)
        return cmi(req) if name.startswith("ConsistentMI") or name == "MotivationCheck" else responder(req)

    return answer


def attribute(request, by_system: dict[str, str]) -> str | None:
    """The engine a patient-side request belongs to, or None when it is not patient-side."""
    if request.role not in PATIENT_SIDE:
        return None
    if request.schema_name in PER_PATIENT:
        return PER_PATIENT[request.schema_name]
    if request.role in ROLE_OF:
        return ROLE_OF[request.role]
    system = request.messages[0]["content"] if request.messages and request.messages[0]["role"] == "system" else ""
    return by_system.get(system)


def run(args) -> dict:
    config = SimulationConfig(
        sessions=1,
        turn_cap=args.turn_cap,
        patient_engine=ENGINES,
        max_todo_calls=1,
        message_max_tokens=120,
        max_message_retries=3,
        scenario_max_tokens=2550,
        scenario_scale=0.3,
        final_memory=False,
        trim_cut_off=True,
    )
    profiles = [make_profile(f"b{i}", "minimiser", "casual") for i in range(args.patients)]
    with session_engines(args, fake_responder) as engines, tempfile.TemporaryDirectory() as tmp:
        rec = Recorder(next(iter(engines._backends.values())))
        if not args.write_scenario:
            from mindsimkit.mindsim.records import ScenarioRecord
            from mindsimkit.mindsim.scenario import Scenario
            from mindsimkit.mindsim.simulate import ScenarioStore
            from simfakes import SCENARIO

            for p in profiles:
                ScenarioStore(Path(tmp)).save(
                    ScenarioRecord(
                        patient_id=p.profile_id,
                        seed=0,
                        engine={},
                        prompt={},
                        scenario=Scenario.model_validate(SCENARIO),
                    )
                )
        t0 = time.monotonic()
        summary = asyncio.run(simulate_async(profiles, engines, config, tmp, seed=0))
        wall = time.monotonic() - t0
        rows = [json.loads(p.read_text()) for p in (Path(tmp) / "sessions" / "checkpoints").glob("*.json")]
    by_system: dict[str, str] = {}
    turns: dict[str, int] = defaultdict(int)
    for r in rows:
        by_system[r["patient_system_prompt"]] = r["patient_engine"]
        if r.get("patientact"):
            by_system[r["patientact"]["appraiser_system_prompt"]] = r["patient_engine"]
        turns[r["patient_engine"]] += sum(1 for t in r["turns"] if not t["opening"])
    per_turn: dict[str, list] = defaultdict(list)
    once: dict[str, list] = defaultdict(list)
    unattributed = 0
    for _, q, reply in rec.calls:
        engine = attribute(q, by_system)
        if engine is None:
            unattributed += q.role in PATIENT_SIDE
            continue
        (once if q.schema_name in PER_PATIENT else per_turn)[engine].append(reply)
    out = []
    for engine in ENGINES:
        n, calls = turns[engine], per_turn[engine]
        out.append(
            {
                "engine": engine,
                "patient_turns": n,
                "requests_per_turn": round(len(calls) / n, 2) if n else None,
                "prompt_tokens_per_turn": round(sum(r.prompt_tokens for r in calls) / n) if n else None,
                "completion_tokens_per_turn": round(sum(r.completion_tokens for r in calls) / n) if n else None,
                "per_patient_requests": len(once[engine]),
                "per_patient_tokens": sum(r.prompt_tokens + r.completion_tokens for r in once[engine]),
            }
        )
    return {
        "engines": out,
        "sessions_written": summary.sessions_written,
        "failed_arcs": [(f.patient_engine, f.error[:120]) for f in summary.failed_arcs],
        "unattributed_patient_side_requests": unattributed,
        "all_requests": len(rec.calls),
        "wall_s": round(wall, 1),
        "fake": args.fake,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--patients", type=int, default=1)
    ap.add_argument("--turn-cap", type=int, default=3)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--fake", action="store_true", help="deterministic fake engine: exact request counts only")
    ap.add_argument("--write-scenario", action="store_true", help="have the scenario writer write the first scenario")
    print(json.dumps(run(parse_args(ap, patients=1, turn_cap=2, fake=True)), indent=2))


if __name__ == "__main__":
    main()
