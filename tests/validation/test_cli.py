import json

from typer.testing import CliRunner

from validation.cli import app

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
        ["compare", "--reference", str(ref), "--sim", f"long={sim}", "--sim", f"same={src}", "--out", str(out),
         "--draws", "50", "--splits", "10", "--no-plots"],
    )
    assert res.exit_code == 0, res.output
    report = json.loads((out / "report.json").read_text())
    assert report["settings"]["bootstrap_draws"] == 50 and report["settings"]["floor_splits"] == 10
    assert list(report["systems"]) == ["long", "same"]
    assert report["reference"]["provenance"]["attribution"] == "made up"
    assert "long: index" in res.output


def test_compare_defaults_to_the_shipped_reference(tmp_path, synth, jsonl):
    sim = jsonl(tmp_path / "s.jsonl", synth(10, seed=6, mean_words=14))
    res = runner.invoke(app, ["compare", "--sim", f"x={sim}", "--out", str(tmp_path / "o"), "--draws", "20", "--splits", "5", "--no-plots"])
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "o" / "report.json").read_text())["counts"]["reference"]["conversations_used"] == 106


def test_user_errors_exit_with_code_2(tmp_path):
    res = runner.invoke(app, ["compare", "--sim", "no-equals-sign", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "NAME=PATH" in res.output
    res = runner.invoke(app, ["reference", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "r.parquet")])
    assert res.exit_code == 2 and "not found" in res.output
    res = runner.invoke(app, ["reference", str(tmp_path / "x.jsonl"), "--out", str(tmp_path / "r.csv")])
    assert res.exit_code == 2 and "parquet" in res.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "messages": []}\n[oops\n')
    res = runner.invoke(app, ["compare", "--sim", f"b={bad}", "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "line 2" in res.output
