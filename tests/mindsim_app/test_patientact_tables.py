"""`mindsim patientact table N RUN`: PatientAct's Tables 2-5 one at a time from the run's PatientAct judge report.
Table 2 holds all four of the paper's simulators (PatientAct, Patient-Psi, AnnaAgent, ConsistentMI) with the
significance mark against the second best; Table 4 the full framework beside its arm; a table the run cannot have
is one `error:` line and exit 2, naming what to do."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from judgefakes import session

from mindsimkit.judge.patientact import load_items, rubrics
from mindsimkit.judge.patientact_report import run_patientact
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindsim_app.cli import main

DIMS = [d.id for d in rubrics().conversation.dimensions]


def pa_session(sid: str, engine: str, switches: dict | None = None, patient: str = "p1") -> dict:
    s = session(sid, patient, "alpha", 0, ["How are you?", "Tell me more."])
    return {
        **s,
        "patient_engine": engine,
        "patientact": None
        if engine != "patientact"
        else {
            "switches": {"trust_gating": True, "dynamic_memory": True, "pipeline": True} | (switches or {}),
            "trust_end": 2.5,
        },
    }


def write(run: Path, sessions: list[dict]) -> Path:
    (run / "sessions").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(sessions), run / "sessions" / "sessions.parquet")
    return run


def judge_answer(score: int) -> dict:
    return {k: v for d in DIMS for k, v in ((f"{d}_reason", "keeps to the situation"), (d, score))}


# Each system's judged score on every dimension: PatientAct first by far, so the mark is on it.
SCORES = {"pa": 5, "ps": 3, "an": 2, "cm": 2, "np": 4}
SESSIONS = [
    *(pa_session(f"pa{i}", "patientact", patient=f"p{i}") for i in range(4)),
    *(pa_session(f"ps{i}", "patient_psi", patient=f"p{i}") for i in range(4)),
    *(pa_session(f"an{i}", "annaagent", patient=f"p{i}") for i in range(4)),
    *(pa_session(f"cm{i}", "consistentmi", patient=f"p{i}") for i in range(4)),
    *(pa_session(f"np{i}", "patientact", {"pipeline": False}, patient=f"p{i}") for i in range(4)),
]


def judge(req):
    text = req.messages[0]["content"]
    return judge_answer(next(v for k, v in SCORES.items() if f"of {k}" in text))


@pytest.fixture(scope="module")
def judged(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("tables")
    items = load_items([write(tmp / "run", SESSIONS)])
    with Engines.with_backend(FakeBackend(judge)) as engines:
        run_patientact(tmp / "run", engines, items)
    return tmp / "run"


def rows_of(text: str) -> list[str]:
    return [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ") and "---" not in line]


def test_table_2_holds_the_four_simulators_and_marks_the_best(judged, capsys, tmp_path):
    out = tmp_path / "table2.md"
    assert main(["patientact", "table", "2", str(judged), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("# PatientAct Table 2") and out.read_text() == text
    systems = [r for r in rows_of(text) if r not in ("system", "best", "second")]
    assert set(systems[:4]) == {"patientact", "patient_psi", "annaagent", "consistentmi"}
    # Four sessions each, 5 against 3: PatientAct's lead over the second best is significant on every dimension.
    assert "| patientact | 5.00 * |" in text
    assert "patientact-no_pipeline" not in text


def test_table_4_holds_the_full_framework_and_its_arm(judged, capsys):
    assert main(["patientact", "table", "4", str(judged)]) == 0
    text = capsys.readouterr().out
    assert "## Comparison `ablation`: patientact, patientact-no_pipeline" in text and "patient_psi" not in text


def test_table_5_is_the_case_study(judged, capsys):
    assert main(["patientact", "table", "5", str(judged)]) == 0
    assert "## Case study (Table 5)" in capsys.readouterr().out


def test_a_table_the_run_cannot_have_is_one_error_line(judged, capsys, tmp_path):
    # Table 3 needs the raters' scores: the run was judged without --human.
    assert main(["patientact", "table", "3", str(judged)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "--human" in err[0]
    assert main(["patientact", "table", "7", str(judged)]) == 2
    assert "Tables 2, 3, 4, 5" in capsys.readouterr().err
    assert main(["patientact", "table", "2", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "mindsim judge run --rubric patientact" in err and "Traceback" not in err
