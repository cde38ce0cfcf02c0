"""`mindsim realism report` on hand-made rating files: one rater says why α is missing; `true` is not rating 1."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from mindsimkit.mindsim_app.annotate.cli import realism_app


def line(item: str, rater: str, rating, patient: str = "p1") -> str:
    return (
        json.dumps(
            {
                "item_id": item,
                "unit": "0",
                "turn": 0,
                "rater": rater,
                "rating": rating,
                "reasons": ["form_none", "content_none"],
                "system": "S",
                "conversation_id": item,
                "patient_id": patient,
            }
        )
        + "\n"
    )


def test_one_rater_says_why_alpha_is_missing(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text("".join(line(f"i{k}", "ana", 1 + k % 5) for k in range(6)))
    res = CliRunner().invoke(realism_app, ["report", str(path), "--out", str(tmp_path / "o"), "--draws", "10"])
    assert res.exit_code == 0, res.output
    assert "α is missing: one rater only (ana)" in res.output
    assert "one rater only" in (tmp_path / "o" / "realism_report.md").read_text()


def test_a_boolean_rating_is_refused_not_read_as_1(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(line("i1", "ana", 3) + line("i1", "ben", True))
    res = CliRunner().invoke(realism_app, ["report", str(path), "--out", str(tmp_path / "o")])
    assert res.exit_code != 0 and "r.jsonl:2: rating True is not 1-5" in str(res.exception)
