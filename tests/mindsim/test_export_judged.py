"""Exports that read MHQR judgments: `export sft --max-severity` cuts each session exactly before its first
reply above the level (failed or missing judgments count as above), and `export dpo` writes TRL preference
pairs from counterfactual replies judged by the fake judge."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mindcore.errors import InputError
from mindsim.cli import main
from mindsim.export import sft_export

WEIGHT = {"no_concern": 0.0, "minor": 1.0, "major": 5.0, "critical": 10.0}

# Per session: the judged severity of each counsellor reply ("failed" = failed judgment, None = no row).
VERDICTS = {
    "s_clean": ["no_concern", "minor", "no_concern"],
    "s_major": ["minor", "no_concern", "major", "no_concern"],
    "s_first": ["critical", "no_concern"],
    "s_failed": ["no_concern", "failed", "no_concern"],
    "s_missing": ["minor", None],
}


def session_row(sid: str, n: int) -> dict:
    msgs = [{"role": "system", "content": f"system prompt of {sid}"}]
    for k in range(n):
        msgs += [{"role": "user", "content": f"{sid} patient {k}"}, {"role": "assistant", "content": f"{sid} reply {k}"}]
    return {"session_id": sid, "patient_id": "p1", "counsellor": "alpha", "session_index": 0, "seed": 0,
            "ended_by": "patient", "turns": [{"index": k} for k in range(n)], "engines": {"counsellor": {"model": "fake"}}, "prompts": {"t": "h"},
            "counsellor_system_prompt": msgs[0]["content"], "counsellor_messages": msgs}


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "sessions").mkdir(parents=True)
    (run / "judgments").mkdir()
    pq.write_table(pa.Table.from_pylist([session_row(s, len(v)) for s, v in VERDICTS.items()]),
                   run / "sessions" / "sessions.parquet")
    rows = []
    for sid, verdicts in VERDICTS.items():
        for k, v in enumerate(verdicts):
            if v is None:
                continue
            for judge, sev in (("judge", v), ("judge:lenient", "no_concern")):
                ok = sev != "failed"
                rows.append({"session_id": sid, "reply_index": k, "judge": judge,
                             "severity": sev if ok else None, "weight": WEIGHT[sev] if ok else None,
                             "status": "ok" if ok else "failed"})
    pq.write_table(pa.Table.from_pylist(rows), run / "judgments" / "judgments.parquet")
    return run


def replies_of(row: dict) -> list[str]:
    return [m["content"] for m in row["messages"] if m["role"] == "assistant"]


def test_max_severity_minor_cuts_before_the_first_reply_above(run_dir):
    rows, summary = sft_export(run_dir, max_severity="minor")
    by = {r["session_id"]: r for r in rows}
    assert replies_of(by["s_clean"]) == ["s_clean reply 0", "s_clean reply 1", "s_clean reply 2"]
    # Reply 2 is Major: replies 0 and 1 stay, and the row ends on reply 1 (patient message 2 goes too).
    assert replies_of(by["s_major"]) == ["s_major reply 0", "s_major reply 1"]
    assert by["s_major"]["messages"][-1] == {"role": "assistant", "content": "s_major reply 1"}
    assert by["s_major"]["messages"][0] == {"role": "system", "content": "system prompt of s_major"}
    assert len(by["s_major"]["messages"]) == 1 + 4
    assert by["s_major"]["cut_reason"] == "judged major" and by["s_major"]["replies_kept"] == 2
    # A failed judgment cuts like a severe one; so does a reply nobody judged.
    assert replies_of(by["s_failed"]) == ["s_failed reply 0"]
    assert by["s_failed"]["cut_reason"] == "judgment failed"
    assert replies_of(by["s_missing"]) == ["s_missing reply 0"]
    # The first reply is Critical: nothing is left, the session is not written.
    assert "s_first" not in by
    assert summary["sessions_emptied"] == 1 and summary["sessions_written"] == 4
    # Cut replies: s_major 2, s_first 2, s_failed 2, s_missing 1 = 7; kept 3 + 2 + 0 + 1 + 1 = 7.
    assert summary["replies_cut"] == 7 and summary["replies_kept"] == 7
    assert summary["cut_by_reason"] == {"after an earlier cut in the session": 3, "judged critical": 1,
                                        "judged major": 1, "judgment failed": 1, "not judged": 1}


def test_max_severity_levels_and_judges(run_dir):
    rows, summary = sft_export(run_dir, max_severity="Major")
    by = {r["session_id"]: r for r in rows}
    assert len(replies_of(by["s_major"])) == 4  # Major is not above Major
    assert "s_first" not in by
    rows, _ = sft_export(run_dir, max_severity="no_concern", judge="judge:lenient")
    by = {r["session_id"]: r for r in rows}
    assert len(replies_of(by["s_major"])) == 4 and len(replies_of(by["s_first"])) == 2
    assert replies_of(by["s_failed"]) == ["s_failed reply 0", "s_failed reply 1", "s_failed reply 2"]
    assert by["s_missing"]["cut_reason"] == "not judged"
    with pytest.raises(InputError, match="no judgments by 'judge:strict'"):
        sft_export(run_dir, max_severity="minor", judge="judge:strict")
    with pytest.raises(InputError, match="--max-severity awful"):
        sft_export(run_dir, max_severity="awful")
    # Without --max-severity nothing is cut and no judgments are needed.
    rows, _ = sft_export(run_dir)
    assert sum(len(replies_of(r)) for r in rows) == 14


def test_sft_command_writes_the_cut_summary(run_dir, tmp_path, capsys):
    out = tmp_path / "sft.jsonl"
    assert main(["export", "sft", str(run_dir), "--out", str(out), "--max-severity", "minor"]) == 0
    assert len(out.read_text().splitlines()) == 4
    summary = json.loads((tmp_path / "sft.summary.json").read_text())
    assert summary["replies_cut"] == 7
    assert "cut 7" in capsys.readouterr().out
    (run_dir / "judgments" / "judgments.parquet").unlink()
    assert main(["export", "sft", str(run_dir), "--out", str(out), "--max-severity", "minor"]) == 2
