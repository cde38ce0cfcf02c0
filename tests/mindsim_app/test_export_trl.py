"""Exports a trainer takes as they are: every export, in both formats, loads with `datasets` into the
column types TRL documents (message lists, never JSON text; tool-call arguments and tool schemas as objects);
each row rendered by transformers' `apply_chat_template` with the shipped ChatML template and the embedded
model's tokenizer has exactly the counsellor's words (the patient's, for the patient export) in its assistant
mask; the summary's token counts are those renderings' lengths; an export that selects nothing fails without a
file. On the fake whole run here, and on the embedded study run at the end (`-m embedded`)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mindsimkit.mindsim_app import chat_tokens
from mindsimkit.mindsim_app.cli import main
from cli_streams import without_progress
from mindsimkit.mindsim_app.exports.write import JSON, shapes_first, write_export

sys.path.insert(0, str(Path(__file__).resolve().parent))
import trlcheck  # noqa: E402

# name -> (export command, options); each is written as .jsonl and .parquet.
EXPORTS = {
    "sft": ("sft", []),
    "sft_turns": ("sft", ["--per-turn", "--no-system"]),
    "patient": ("patient", []),
}


def export_all(run: Path, folder: Path, capsys) -> dict[str, Path]:
    paths = {}
    for name, (command, options) in EXPORTS.items():
        for suffix in ("jsonl", "parquet"):
            out = folder / f"{name}.{suffix}"
            assert main(["export", command, str(run), "--out", str(out), *options]) == 0, capsys.readouterr().err
            paths[f"{name}.{suffix}"] = out
    return paths


def fake_dpo(run: Path, folder: Path, fake_engines) -> dict[str, Path]:
    """Preference pairs over the run's real histories, from two fake counsellors and the fake judge."""
    from test_export_judged import dpo_setup

    counsellors, the_judge, cache, _ = dpo_setup(fake_engines, folder)
    from mindsimkit.mindsim_app.exports.dpo import dpo_pairs

    rows, summary, details = asyncio.run(dpo_pairs(run, counsellors, the_judge, cache, k=2, turns=1))
    assert rows
    return {
        f"dpo.{s}": write_export("dpo", rows, folder / f"dpo.{s}", summary=summary, provenance=details, why_empty="")
        for s in ("jsonl", "parquet")
    }


def _argument_shapes(path: Path) -> set[tuple[str, ...]]:
    """The key sets of the tool calls' arguments in a patient export, read from the file itself."""
    rows = pq.read_table(path).to_pylist() if path.suffix == ".parquet" else map(json.loads, path.open())
    calls = [c for r in rows for m in r["messages"] for c in (m.get("tool_calls") or [])]
    return {tuple(sorted(_arguments(c))) for c in calls}


def _arguments(call: dict[str, Any]) -> dict[str, Any]:
    arguments = call["function"]["arguments"]
    return json.loads(arguments) if isinstance(arguments, str) else arguments


def check_exports(paths: dict[str, Path], cache: Path) -> dict[str, int]:
    """Load every export, check its types, render every row; returns rows checked per export."""
    from datasets import Json, List, Value

    checked = {}
    for name, path in paths.items():
        ds = trlcheck.load(path, cache)
        f = ds.features
        kind = name.split(".")[0]
        if kind == "sft":
            assert f["messages"] == List({"role": Value("string"), "content": Value("string")}), f
            rows = [(r["messages"], None) for r in ds]
        elif kind == "sft_turns":
            assert f["prompt"] == f["completion"] == List({"role": Value("string"), "content": Value("string")})
            rows = [(r["prompt"] + r["completion"], None) for r in ds]
            assert all(r["completion"][0]["role"] == "assistant" and r["prompt"][-1]["role"] == "user" for r in ds)
            assert all(m["role"] != "system" for r in ds for m in r["prompt"])  # --no-system
        elif kind == "patient":
            call = f["messages"].feature["tool_calls"].feature["function"]
            # Parquet carries the JSON type; `datasets`' JSON loader infers it only where the calls' arguments differ
            # in keys (a commit and an agenda call) and otherwise types the one shape as a struct of its keys (the
            # embedded study's patient made no agenda call in one CI run): either way the calls come out as dicts.
            shapes = _argument_shapes(path)
            if path.suffix == ".parquet" or len(shapes) > 1:
                assert call["arguments"] == Json(), f
            else:
                assert isinstance(call["arguments"], dict) and {tuple(sorted(call["arguments"]))} == shapes, f
            assert call["name"] == Value("string"), f
            assert f["tools"].feature["function"]["parameters"] == Json()
            rows = [(r["messages"], r["tools"]) for r in ds]
            calls = [c for r in ds for m in r["messages"] for c in (m["tool_calls"] or [])]
            assert calls and all(isinstance(c["function"]["arguments"], dict) for c in calls)
            for r in ds:  # every tool called is one the row's tools offer
                offered = {t["function"]["name"] for t in r["tools"]}
                assert {c["function"]["name"] for m in r["messages"] for c in (m["tool_calls"] or [])} <= offered
        else:
            for column in ("prompt", "chosen", "rejected"):
                assert f[column] == List({"role": Value("string"), "content": Value("string")}), f
            for r in ds:
                trlcheck.check_preference(r)
            rows = [(r["prompt"] + r["chosen"], None) for r in ds]
        counts = [trlcheck.check_row(messages, tools) for messages, tools in rows]
        if kind == "sft":
            # Rows end on the counsellor's last reply kept: no row trains on a patient turn after it.
            assert all(messages[-1]["role"] == "assistant" for messages, _ in rows)
        summary = json.loads(path.with_name(path.name + ".summary.json").read_text())
        if kind != "dpo":  # a pair's length is its longer reply's; checked on the fake pairs below
            assert summary["lengths"]["max"] == max(counts) and summary["lengths"]["rows"] == len(counts)
        checked[name] = len(counts)
    return checked


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory) -> Path:
    from fakejob import write_fake_job

    return write_fake_job(tmp_path_factory.mktemp("trl"))


def test_every_export_of_a_fake_run_loads_and_masks_only_the_learner(fake_run, tmp_path, capsys, fake_engines):
    paths = export_all(fake_run, tmp_path, capsys)
    paths |= fake_dpo(fake_run, tmp_path, fake_engines)
    checked = check_exports(paths, tmp_path / "hf-cache")
    # The same rows in both formats.
    for name in (*EXPORTS, "dpo"):
        assert checked[f"{name}.jsonl"] == checked[f"{name}.parquet"] > 0
    table = pq.read_table(paths["patient.parquet"])
    assert table.schema.field("tools").type.value_type.field("function").type.field("parameters").type == JSON
    # The patientact sessions' patient calls no tools: their rows say so with an empty list.
    engines = {r["patient_engine"]: r["tools"] for r in table.to_pylist()}
    assert not engines["patientact"] and {t["function"]["name"] for t in engines["mindsim"]} == {
        "commit_move",
        "complete_todo",
        "add_todo",
    }


def test_the_first_block_of_a_jsonl_export_shows_every_shape(tmp_path):
    """`datasets` types a JSON Lines file from its first block and fails on a later row of another shape; the
    writer puts the rows that first show a shape in front. A small block stands in for a large file."""
    from datasets import load_dataset
    from datasets.exceptions import DatasetGenerationError

    def row(i: int, args: dict, secondary=None) -> dict:
        call = {"id": f"c{i}", "type": "function", "function": {"name": "commit_move", "arguments": args}}
        return {
            "messages": [
                {"role": "assistant", "content": None, "tool_calls": [call], "tool_call_id": None, "name": None},
                {"role": "tool", "content": "ok", "tool_calls": None, "tool_call_id": f"c{i}", "name": "commit_move"},
            ],
            "note": secondary,
        }

    rows = [row(i, {"move": "share"}) for i in range(300)] + [row(300, {"item": "sleep"}, "late")]
    raw, ordered = tmp_path / "raw.jsonl", tmp_path / "ordered.jsonl"
    raw.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ordered.write_text("".join(json.dumps(r) + "\n" for r in shapes_first(rows)))
    with pytest.raises(DatasetGenerationError):  # "An error occurred while generating the dataset": a cast failed
        load_dataset("json", data_files=str(raw), split="train", chunksize=4096, cache_dir=str(tmp_path / "c1"))
    ds = load_dataset("json", data_files=str(ordered), split="train", chunksize=4096, cache_dir=str(tmp_path / "c2"))
    # The first row, then the one row of a new shape, then the rest in their order.
    assert len(ds) == 301 and [ds[i]["note"] for i in range(3)] == [None, "late", None]
    assert ds[0]["messages"][0]["tool_calls"][0]["function"]["arguments"] == {"move": "share"}
    assert ds[1]["messages"][0]["tool_calls"][0]["function"]["arguments"] == {"item": "sleep"}


def test_an_export_that_selects_nothing_fails_and_writes_nothing(fake_run, tmp_path, capsys):
    for command in ("sft", "patient"):
        out = tmp_path / command / f"{command}.jsonl"
        capsys.readouterr()
        assert main(["export", command, str(fake_run), "--out", str(out), "--min-turns", "99"]) == 1
        err = without_progress(capsys.readouterr().err).strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: export {command}: no rows to write: "), err
        assert "left out by --min-turns / --finished-only" in err[0]
        assert not out.parent.exists()
    assert main(["export", "sft", str(fake_run), "--out", str(tmp_path / "x.csv")]) == 2


def test_the_gguf_header_reader_agrees_with_gguf(tmp_path):
    """The header reader token counts use, against the `gguf` package's own reader on a file it wrote."""
    import gguf

    path = tmp_path / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_array("tokenizer.ggml.tokens", ["<|im_end|>", "a", "b", "Ġ", "Ġa"])
    w.add_array("tokenizer.ggml.token_type", [3, 1, 1, 1, 1])
    w.add_array("tokenizer.ggml.merges", ["Ġ a"])
    w.add_uint32("tokenizer.ggml.eos_token_id", 0)
    w.add_float32("general.x", 0.5)
    w.add_tensor("w", __import__("numpy").zeros((2, 2), dtype="float32"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    meta = chat_tokens.read_gguf_metadata(path)
    fields = gguf.GGUFReader(str(path)).fields
    assert meta == {k: f.contents() for k, f in fields.items() if k.startswith("tokenizer.")}
    assert meta["tokenizer.ggml.tokens"] == ["<|im_end|>", "a", "b", "Ġ", "Ġa"]
    tok = chat_tokens.gguf_tokenizer(path)
    assert tok.encode("<|im_end|> a", add_special_tokens=False).tokens == ["<|im_end|>", "Ġa"]


def test_rows_are_written_with_the_nested_types(tmp_path):
    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], "n": 1}]
    out = write_export("sft", rows, tmp_path / "s.parquet", summary={}, provenance=[], why_empty="")
    assert pq.read_schema(out).field("messages").type == pa.list_(
        pa.struct([("role", pa.string()), ("content", pa.string())])
    )
    assert pq.read_table(out).to_pylist() == rows


# -- the embedded study run -------------------------------------------------------------------------------


@pytest.mark.embedded
def test_every_export_of_the_study_run_loads_and_masks_only_the_learner(
    study_run, embedded_engines, tmp_path, capsys, fake_engines
):
    """The same on real output: the study run's exports (the preference pairs over its real histories,
    with fake replies) load, render with only the learner's tokens in the mask, and the tokenizer built from the
    GGUF gives the ids the embedded llama.cpp server gives for the same text."""
    import httpx

    paths = export_all(study_run, tmp_path, capsys) | fake_dpo(study_run, tmp_path, fake_engines)
    checked = check_exports(paths, tmp_path / "hf-cache")
    assert all(n > 0 for n in checked.values()), checked
    base = embedded_engines.backend("local").base_url.removesuffix("/v1")
    rows = [json.loads(x) for x in paths["patient.jsonl"].read_text().splitlines()]
    for row in rows[:3]:
        text = chat_tokens.render(row["messages"], row["tools"])
        got = httpx.post(
            f"{base}/tokenize", json={"content": text, "add_special": False, "parse_special": True}, timeout=60
        ).json()["tokens"]
        assert got == chat_tokens.gguf_tokenizer().encode(text, add_special_tokens=False).ids


@pytest.mark.embedded
@pytest.mark.slow
def test_preference_pairs_of_the_study_run_with_the_tie_break_train(
    study_run, embedded_engines, tmp_path, capsys, monkeypatch
):
    """`export dpo --tie-break expected-severity` on the embedded study run: the 135M judge gives its replies one
    severity (2 of 2 turns Critical on a copy of the study run, 2026-12-06), and its probabilities of the severity
    labels order them. Run from another directory without --recipe
    (run.json names it), one session at a time until a turn pairs; the pairs render for TRL's DPO, and DPOTrainer
    takes a step on them (examples/train_trl.py)."""
    import shutil
    import subprocess

    from restamp import record_as_stages

    sessions = pq.read_table(study_run / "sessions" / "sessions.parquet").to_pylist()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    out = tmp_path / "dpo.jsonl"
    tried = []
    for i, session in enumerate(sorted(sessions, key=lambda s: s["session_id"])):
        run = Path(shutil.copytree(study_run, tmp_path / f"run{i}"))
        pq.write_table(pa.Table.from_pylist([session]), run / "sessions" / "sessions.parquet")
        record_as_stages(run)
        # The 135M judge calls nearly every reply Critical: the chosen one may be too, or nothing pairs.
        code = main(
            [
                "export",
                "dpo",
                str(run),
                "--out",
                str(out),
                "--k",
                "3",
                "--turns",
                "1",
                "--tie-break",
                "expected-severity",
                "--chosen-max",
                "critical",
            ]
        )
        captured = capsys.readouterr()
        tried.append((code, without_progress(captured.err).strip()[-300:]))
        assert code in (0, 1), tried  # no pair is exit 1 with its reason; anything else is a bug
        if code == 0:
            break
    assert out.is_file(), f"no pair from {len(tried)} sessions: {tried}"
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    summary = json.loads(out.with_name(f"{out.name}.summary.json").read_text())  # side files are named per output
    assert rows and summary["tie_break"] == "expected-severity"
    # The ledger: the real model as counsellor and judge, every asked reply judged or counted as a failure, every
    # sampled turn paired or skipped with its reason.
    assert summary["turns_sampled"] == 1 and summary["replies_asked"] == 3
    assert 0 <= summary["counsellor_failures"] + summary["judgments_failed"] <= 1  # two judged replies make a pair
    assert summary["pairs"] + sum(summary["skipped"].values()) == 1 and len(rows) == summary["pairs"]
    for row in rows:
        trlcheck.check_preference(row)
        assert row["prompt"][0]["role"] == "system" and row["prompt"][-1]["role"] == "user"
        if row["pair_basis"] == "expected-severity":
            assert row["chosen_severity"] == row["rejected_severity"]
            assert row["chosen_expected_weight"] < row["rejected_expected_weight"]
        else:
            assert row["chosen_weight"] < row["rejected_weight"]
    # `make install` puts the train extra and PyTorch's CPU build beside the test extra, so the step is taken here,
    # not skipped: a skip would leave the one trainer run on embedded-engine pairs out of every CI run.
    missing = [m for m in ("torch", "trl") if importlib.util.find_spec(m) is None]
    assert not missing, f"DPOTrainer needs {missing}: install the train extra as `make install` does (Makefile)"
    proc = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve().parents[2] / "examples" / "train_trl.py"),
            "--dpo",
            str(out),
            "--steps",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert proc.returncode == 0 and "dpo" in proc.stdout, proc.stderr[-3000:]
