"""The fake engine of the inspect tests, served over HTTP (`openai_stub`) so that `mindsim` commands and `inspect
eval` in a subprocess reach the same one: every simulator role (`simfakes.SimResponder`, PatientAct's steps), a
counsellor whose replies carry the fake judge's marker words chosen from what it was told (so sessions and scores
differ from patient to patient and session to session), and the judge (MHQR: `judgefakes.fake_judge`; PatientAct's
rubric: a score per dimension drawn from the transcript)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[2]
for extra in (TESTS, TESTS / "judge", TESTS / "mindsim"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from judgefakes import fake_judge  # noqa: E402
from openai_stub import OpenAIStub, from_responder  # noqa: E402
from simfakes import SimResponder, make_profile  # noqa: E402
from test_patientact import PAResponder  # noqa: E402

ROLES = [
    "patient",
    "first_scenario_writer",
    "scenario_writer",
    "memory_compactor",
    "counsellor",
    "judge",
    "patient_appraiser",
    "profile_decomposer",
    "patient_matcher",
]
PA_STEPS = {"DecompositionDraft", "PsychFormulation", "Reaction", "Behaviour", "Resistance", "TrustChange"}
MARKS = ["I hear you.", "MINOR hello there", "MAJOR tell me more about it", "CRIT skip your meds then"]


def _pick(text: str, n: int) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % n


def counsellor_reply(messages: list[dict[str, Any]]) -> str:
    """A reply whose marker depends on the system prompt (time, memory) and the patient's last words."""
    said = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    n = sum(m["role"] == "assistant" for m in messages)
    return f"{MARKS[_pick(messages[0]['content'] + said + str(n), len(MARKS))]} ({n})"


def patientact_answer(req: Any) -> dict[str, Any]:
    from mindsimkit.judge.patientact import rubrics

    text = req.messages[-1]["content"]
    return {
        k: v
        for d in rubrics().conversation.ids
        for k, v in ((f"{d}_reason", "as the transcript shows"), (d, 1 + _pick(d + text, 5)))
    }


def responder():
    sim, pa = SimResponder(end_after=99), PAResponder()

    def respond(req):
        if req.role.startswith("judge"):
            return patientact_answer(req) if req.schema_name.startswith("patientact") else fake_judge(req)
        if req.role.startswith("counsellor"):
            return counsellor_reply(req.messages)
        return pa(req) if req.schema_name in PA_STEPS else sim(req)

    return respond


def serve() -> OpenAIStub:
    """The stub (enter it), answering every role named in `ROLES` (one model per role)."""
    return OpenAIStub(from_responder(responder())).serve(*ROLES)


def write_recipe(path: Path, stub: OpenAIStub, simulation: str, judge: str = "{bootstrap_draws: 200}") -> Path:
    path.write_text(
        f"name: inspecttest\nseed: 3\nengines:\n  stub: {{kind: openai, base_url: '{stub.base_url}', model: m, "
        "native_tools: false, max_concurrency: 8}\nroles:\n  default: {engine: stub}\n"
        + "".join(f"  {r!r}: {{engine: stub, model: {r!r}, temperature: 0.5, seed: 0}}\n" for r in ROLES)
        + f"simulation: {simulation}\njudge: {judge}\n"
    )
    return path


def write_patients(folder: Path) -> Path:
    from mindsimkit.profilegen.dataset import write_profiles

    write_profiles([make_profile("p1"), make_profile("p2", archetype="deflector", register="formal")], folder)
    return folder
