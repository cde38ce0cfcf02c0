"""Fixture data for the annotation tests: a run folder with sessions of two patient engines (the PatientAct
ones carry a seed and a formulation), profiles, MHQR judgments, and a real-conversation chat JSONL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from restamp import record_as_stages

COUNSELLORS = ["zephyr-counsel-7b", "quokka-therapist"]
ENGINES = ["mindsim", "patientact"]
SEEDS = {
    "p0": ("avoidant", "worthless"),
    "p1": ("anxious", "unlovable"),
    "p2": ("disorganized", "helpless"),
    "p3": ("avoidant", "helpless"),
}


def formulation(pid: str) -> dict[str, Any]:
    return {
        "intermediate_beliefs": [f"If I ask for help ({pid}), I am a burden"],
        "automatic_thoughts": ["they will see through me"],
        "triggers": ["being left on read"],
        "coping_patterns": ["stays late at work"],
        "emotional_range": "irritation comes easily; grief stays down",
        "therapist_pattern": {
            "wish": "to be taken seriously",
            "response_of_other": "polite distance",
            "response_of_self": "goes quiet",
        },
        "interpersonal_patterns": [
            {
                "domain": "their sister",
                "wish": "closeness",
                "response_of_other": "criticism",
                "response_of_self": "withdraws",
            }
        ],
    }


def profile(pid: str, n: int) -> dict[str, Any]:
    """A whole profile row (the raters read the identification card, made from the whole profile)."""
    from mindsimkit.profilegen.testing import make_profiles

    from mindsimkit.profilegen.schemas import Predisposing

    p = make_profiles(len(SEEDS), 0)[n]
    # A label that is not a seed word ("anxious temperament" would name a seed: the real sampler counts those).
    f = p.formulation.model_copy(
        update={
            "predisposing": [
                Predisposing(label="emotional_neglect", history=f"At 9 nobody at home asked how {pid} was.")
            ]
        }
    )
    return p.model_copy(
        update={"profile_id": pid, "formulation": f, "case_summary": f"{pid}: 34, works nights, lives alone."}
    ).model_dump(mode="json")


def _padded(text: str, chars: int) -> str:
    """`text` followed by numbered sentences up to `chars` characters (no padding when `chars` is 0)."""
    k = 0
    while len(text) < chars:
        k += 1
        text += f" Sentence {k} goes on about the week, the job and the people in it."
    return text


def messages(sid: str, turns: int, prompt_chars: int = 0, patient_chars: int = 0) -> list[dict[str, str]]:
    msgs = [
        {"role": "system", "content": _padded(f"You are a counsellor.\n## Memory\n- nothing yet ({sid})", prompt_chars)}
    ]
    for k in range(turns):
        msgs.append({"role": "user", "content": _padded(f"patient says {k} in {sid}", patient_chars)})
        msgs.append({"role": "assistant", "content": f"counsellor answers {k} in {sid}"})
    return msgs


def write_run(root: Path, turns: int = 6, prompt_chars: int = 0, patient_chars: int = 0) -> Path:
    """A run folder; `prompt_chars` / `patient_chars` make every system prompt / patient message that long."""
    sessions, judgments = [], []
    for e, engine in enumerate(ENGINES):
        for c, name in enumerate(COUNSELLORS):
            for p, pid in enumerate(SEEDS):
                sid = f"s{e}{c}{p}"
                msgs = messages(sid, turns, prompt_chars, patient_chars)
                state = None
                if engine == "patientact":
                    att, theme = SEEDS[pid]
                    state = json.dumps(
                        {
                            "attachment": att,
                            "theme": theme,
                            "switches": {},
                            "decomposition": {"formulation": formulation(pid)},
                        }
                    )
                sessions.append(
                    {
                        "session_id": sid,
                        "patient_id": pid,
                        "counsellor": name,
                        "session_index": 0,
                        "counsellor_system_prompt": msgs[0]["content"],
                        "counsellor_messages": msgs,
                        "patient_engine": engine,
                        "patientact": state,
                    }
                )
                for k in range(turns):
                    judgments.append(
                        {
                            "session_id": sid,
                            "reply_index": k,
                            "judge": "judge",
                            "status": "ok",
                            "severity": "minor" if k % 3 == 0 else "no_concern",
                            "counsellor": name,
                        }
                    )
    (root / "sessions").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(sessions), root / "sessions" / "sessions.parquet")
    (root / "judgments").mkdir()
    pq.write_table(pa.Table.from_pylist(judgments), root / "judgments" / "judgments.parquet")
    (root / "profiles").mkdir()
    pq.write_table(
        pa.Table.from_pylist([profile(pid, i) for i, pid in enumerate(SEEDS)]), root / "profiles" / "profiles.parquet"
    )
    return record_as_stages(root)


def write_real(path: Path, n: int = 4, turns: int = 6) -> Path:
    rows = []
    for i in range(n):
        msgs = []
        for k in range(turns):
            msgs.append({"role": "assistant", "content": f"real counsellor {k} of r{i}"})
            msgs.append({"role": "user", "content": f"real person {k} of r{i}"})
        rows.append({"conversation_id": f"r{i}", "messages": msgs})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
