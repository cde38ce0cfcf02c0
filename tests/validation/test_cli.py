import json

import pytest
from typer.testing import CliRunner

from mindsimkit.validation.cli import app

runner = CliRunner()


def test_reference_then_compare(tmp_path, synth, jsonl):
    src = jsonl(tmp_path / "t.jsonl", synth(20, seed=5, mean_words=7, patients=10))
    ref = tmp_path / "ref.parquet"
    res = runner.invoke(app, ["reference", str(src), "--out", str(ref), "--attribution", "made up"])
    assert res.exit_code == 0, res.output
    assert "20 conversations, 10 patients" in res.output and ref.is_file()
    sim = jsonl(tmp_path / "s.jsonl", synth(10, seed=6, mean_words=14))
    out = tmp_path / "out"
    res = runner.invoke(
        app,
        [
            "compare",
            "--reference",
            str(ref),
            "--sim",
            f"long={sim}",
            "--sim",
            f"same={src}",
            "--out",
            str(out),
            "--draws",
            "50",
            "--splits",
            "10",
            "--no-plots",
        ],
    )
    assert res.exit_code == 0, res.output
    report = json.loads((out / "report.json").read_text())
    assert report["settings"]["bootstrap_draws"] == 50 and report["settings"]["floor_splits"] == 10
    assert list(report["systems"]) == ["long", "same"]
    assert report["reference"]["provenance"]["attribution"] == "made up"
    assert "long: index" in res.output


def test_compare_defaults_to_the_shipped_reference(tmp_path, synth, jsonl):
    sim = jsonl(tmp_path / "s.jsonl", synth(10, seed=6, mean_words=14))
    res = runner.invoke(
        app,
        ["compare", "--sim", f"x={sim}", "--out", str(tmp_path / "o"), "--draws", "20", "--splits", "5", "--no-plots"],
    )
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "o" / "report.json").read_text())["counts"]["reference"]["conversations_used"] == 106


def _one_error_line(res) -> str:
    # Whole lines only: a long temporary path once pushed rich's 80-column wrap between "not" and "found".
    lines = res.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    return lines[0]


def test_user_errors_exit_with_code_2(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    res = runner.invoke(app, ["compare", "--sim", "no-equals-sign", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "NAME=PATH" in _one_error_line(res)
    missing = tmp_path / ("long-folder-name-" * 8) / "missing.jsonl"
    res = runner.invoke(app, ["reference", str(missing), "--out", str(tmp_path / "r.parquet")])
    assert res.exit_code == 2 and f"'{missing}' not found" in _one_error_line(res)
    res = runner.invoke(app, ["reference", str(tmp_path / "x.jsonl"), "--out", str(tmp_path / "r.csv")])
    assert res.exit_code == 2 and f"--out {tmp_path / 'r.csv'}" in _one_error_line(res)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "messages": []}\n[oops\n')
    res = runner.invoke(app, ["compare", "--sim", f"b={bad}", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and f"{bad} line 2: not valid JSON" in _one_error_line(res)


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"", "no conversations (the source is empty)"),
        ("caf\u00e9\n".encode("latin-1"), "line 1 is not UTF-8 text (byte 0xe9 at column 4)"),
        (b"PAR1\x00\x15\x04", "binary data at line 1"),
        (
            b'{"id": "a", "messages": [{"role": "assistant", "content": "hi"}]}\n',
            "has a non-empty turn by patient role 'user' (roles present: assistant)",
        ),
    ],
    ids=["empty", "not-utf8", "binary", "wrong-role"],
)
def test_unreadable_transcripts_name_the_file(tmp_path, content, expected):
    src = tmp_path / "t.jsonl"
    src.write_bytes(content)
    res = runner.invoke(app, ["reference", str(src), "--out", str(tmp_path / "r.parquet")])
    assert res.exit_code == 2
    line = _one_error_line(res)
    assert line.startswith(f"error: {src}:") and expected in line, line


def test_a_byte_order_mark_is_not_an_error(tmp_path, synth, jsonl):
    src = jsonl(tmp_path / "t.jsonl", synth(4, seed=2, mean_words=6))
    src.write_bytes(b"\xef\xbb\xbf" + src.read_bytes())
    res = runner.invoke(app, ["reference", str(src), "--out", str(tmp_path / "r.parquet")])
    assert res.exit_code == 0, res.output


def test_compare_filter_flags(tmp_path, synth, jsonl):
    rows = synth(12, seed=6, mean_words=9, patients=6, turns=8)
    for k, r in enumerate(rows):
        r.update(session_index=k % 3, counsellor="prod" if k % 2 else "other")
    sim = jsonl(tmp_path / "s.jsonl", rows)
    out = tmp_path / "o"
    res = runner.invoke(
        app,
        [
            "compare",
            "--sim",
            f"x={sim}",
            "--out",
            str(out),
            "--draws",
            "20",
            "--splits",
            "5",
            "--no-plots",
            "--first-sessions",
            "--max-patient-turns",
            "4",
            "--counsellor",
            "prod",
        ],
    )
    assert res.exit_code == 0, res.output
    report = json.loads((out / "report.json").read_text())
    assert report["settings"]["first_sessions_only"] and report["settings"]["max_patient_turns"] == 4
    assert report["settings"]["counsellors"] == ["prod"]
    # k in 0..11 with k % 3 == 0 and k odd: 3 and 9.
    assert report["counts"]["x"]["conversations_used"] == 2 and report["counts"]["x"]["patient_turns"] == 8
    bad = runner.invoke(app, ["compare", "--sim", f"x={sim}", "--out", str(out), "--max-patient-turns", "0"])
    assert bad.exit_code == 2
