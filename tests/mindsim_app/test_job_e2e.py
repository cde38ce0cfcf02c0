"""The main job end to end on the real embedded engine: the suite's study run (the README's recipe,
recipes/quickstart.yaml, at test size with every patient engine: `quick_recipes.study_recipe`), and what users do
with its output: load the dataset configs, read the card, export, publish; a rerun that resumes; and the
kill-and-resume run through the installed console script."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from quick_recipes import engines_for, pool_ids, stamps

from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore.layout import RunLayout
from mindsimkit.mindsim_app.cards import MANIFEST
from mindsimkit.mindsim_app.job import run_job

pytestmark = pytest.mark.embedded


@pytest.fixture(scope="module")
def run_dir(study_run):
    return study_run


@pytest.fixture(scope="module")
def recipe(study_run) -> Path:
    return study_run.parent / "recipe.yaml"


def test_every_stage_wrote_its_output(run_dir):
    for rel in (
        "profiles/profiles.parquet",
        "sessions/sessions.parquet",
        "transcripts/transcripts.jsonl",
        "validation/report.json",
        "validation/report.md",
        "dataset/README.md",
        "run.json",
        "report.html",
    ):
        assert (run_dir / rel).is_file(), rel
    info = json.loads((run_dir / "run.json").read_text())
    assert info["engines"]["patient"]["engine"] == "local"
    assert any(k.startswith("patient/") for k in info["prompt_hashes"])
    assert info["usage"]["patient"]["calls"] > 0
    # The quickstart's engine serves the shipped weights re-encoded as Q8_0 (mindcore/embedded.py), from the cache.
    assert info["engine_backends"]["local"]["model"] == "SmolLM2-135M-Instruct.Q4_1.as-Q8_0"
    report = json.loads((run_dir / "validation" / "report.json").read_text())
    assert "mindsim/counsellor" in report["systems"]


def test_dataset_configs_load_with_datasets(run_dir):
    # The user's own cache on purpose: other tests load fake folders also named `dataset/` with the
    # same config names, and `datasets` keys its local-folder cache on the folder name and file path.
    # The content-addressed file names are what keep these loads from returning those cached rows.
    from datasets import load_dataset

    manifest = json.loads((run_dir / "dataset" / MANIFEST).read_text())
    assert {"profiles", "sessions", "transcripts", "validation"} <= set(manifest["configs"])
    for name, meta in manifest["configs"].items():
        assert meta["path"] != f"data/{name}.parquet"
        ds = load_dataset(str(run_dir / "dataset"), name, split="train")
        assert ds.num_rows == meta["rows"] > 0
        assert ds.num_rows == pq.read_metadata(run_dir / "dataset" / meta["path"]).num_rows
        assert set(ds["run_id"]) == {manifest["run_id"]}


def test_card_has_every_section(run_dir):
    card = (run_dir / "dataset" / "README.md").read_text()
    header = card.split("---")[1]
    for key in ("license: cc-by-sa-4.0", "configs:", "task_categories:", "size_categories:", "tags:"):
        assert key in header
    for section in (
        "## What is in it",
        "## How it was made",
        "### Engines and models per role",
        "### Prompt templates",
        "### Schedule settings",
        "### Counts",
        "### Screening verdicts",
        "### Pool against the clean population",
        "### Realism against the reference",
        "## Intended use and limits",
        "## Attribution and licence",
    ):
        assert section in card, section
    assert "SmolLM2" in card and "MIBot" in card and "images/" in card
    assert (run_dir / "dataset" / "MIBOT_NOTICE.md").is_file()


def test_rerun_resumes_and_other_recipe_is_refused(study_run, recipe, embedded_engines, tmp_path):
    # On a copy: the shared run stays as the job first wrote it for the tests that read it later.
    run_dir = tmp_path / "run"
    shutil.copytree(study_run, run_dir)
    before = pq.read_table(run_dir / "sessions" / "sessions.parquet").column("session_id").to_pylist()
    run_id = json.loads((run_dir / "run.json").read_text())["run_id"]
    pool = pool_ids(run_dir)
    profile_marks = stamps(run_dir / "profiles" / "checkpoints")
    session_marks = stamps(run_dir / "sessions" / "checkpoints")
    outage = any(
        json.loads(line)["retry_on_rerun"]
        for line in (run_dir / "profiles" / "failures.jsonl").read_text().splitlines()
    )
    summary = run_job(recipe, run_dir, engines=engines_for(recipe, embedded_engines))
    after = pq.read_table(run_dir / "sessions" / "sessions.parquet").column("session_id").to_pylist()
    # Finished work is reused, not redone: every checkpoint untouched and, unless the engine dropped a
    # request the first time (retried now), the same pool. An arc that failed may add sessions.
    assert summary.run_id == run_id and (outage or pool_ids(run_dir) == pool)
    assert {
        k: v for k, v in stamps(run_dir / "profiles" / "checkpoints").items() if k in profile_marks
    } == profile_marks
    assert {
        k: v for k, v in stamps(run_dir / "sessions" / "checkpoints").items() if k in session_marks
    } == session_marks
    assert set(before) <= set(after)
    other = tmp_path / "other.yaml"
    other.write_text(recipe.read_text().replace("name: study-test", "name: other"))
    assert other.read_text() != recipe.read_text()
    with pytest.raises(ConfigError, match="different recipe"):
        run_job(other, run_dir)  # refused before any engine starts


@pytest.mark.slow
def test_killed_run_resumes_from_finished_work(two_counsellor_run):
    """The installed `mindsim run` (the study's MindSim arc with a second counsellor added) killed with SIGKILL in
    its simulation stage, between the new arc's two sessions, then rerun with the same arguments: finished work is
    kept byte for byte, the arc goes on from its checkpointed first session, and every session ends up present
    exactly once."""
    run = two_counsellor_run
    work, copied, new, kept = run["out"], set(run["copied"]), set(run["new"]), run["kept"]
    ck = work / "sessions" / "checkpoints"
    # The kill landed between two sessions: the copied arc and the new arc's first session were there, not its second.
    assert copied < set(kept) < copied | new, "the kill must land between the new arc's two sessions"
    rerun, info = run["rerun"], run["info"]
    failed = json.loads((work / "sessions" / "summary.json").read_text())["failed_arcs"]
    # Exit 0, or 1 with the failed arc counted (the 135M model's doing, below); never 2 or a traceback.
    assert rerun.returncode == (1 if failed else 0), rerun.stderr[-3000:]
    assert "Traceback" not in rerun.stderr
    assert info["status"] == "finished"
    # Both commands used the suite's running server instead of starting their own (no second llama.cpp).
    assert info["engine_backends"]["local"]["attached"] == run["server"]
    present = {p.name for p in ck.glob("*.json")}
    # Ids are deterministic, so a duplicate or a stray session would show up as an unexpected id.
    assert set(kept) <= present <= copied | new
    # The 135M model can fail an arc on any run (e.g. six scenario drafts in a row cut at their length
    # limit). That is the model, not the resume; what resume owes is that such an arc is counted as
    # failed, not silently missing, and that everything else is there exactly once.
    assert RunLayout(work).header().counts.failed_arcs == len(failed)
    assert not (copied | new) - present or [f["counsellor"] for f in failed] == ["counsellor:b"], failed
    for name, data in kept.items():
        assert (ck / name).read_bytes() == data
    now = stamps(work / "profiles" / "checkpoints")
    assert {k: now[k] for k in run["profile_marks"]} == run["profile_marks"]
    rows = pq.read_table(work / "sessions" / "sessions.parquet").to_pylist()
    assert sorted(r["session_id"] for r in rows) == sorted(p.removesuffix(".json") for p in present)
    # The resumed session continued the arc from the one finished before the kill.
    arc = sorted((r for r in rows if r["counsellor"] == "counsellor:b"), key=lambda r: r["session_index"])
    for before, after in zip(arc, arc[1:]):
        assert after["memory_before"] == before["memory_after"]
    assert (work / "dataset" / "README.md").is_file() and (work / "validation" / "report.json").is_file()


def test_exports_have_the_right_shape(run_dir):
    """The rows as built; loading and rendering them as a trainer does is tests/mindsim_app/test_export_trl.py."""
    from mindsimkit.mindsim_app.exports.sft import patient_rows, sft_rows

    sessions = {r["session_id"]: r for r in pq.read_table(run_dir / "sessions" / "sessions.parquet").to_pylist()}
    sft = sft_rows(run_dir)
    assert sft
    for row in sft:
        msgs = row["messages"]
        assert msgs[0] == {"role": "system", "content": sessions[row["session_id"]]["counsellor_system_prompt"]}
        assert [m["role"] for m in msgs[1:3]] == ["user", "assistant"]
        assert {m["role"] for m in msgs[1:]} <= {"user", "assistant"}
        assert msgs[-1]["role"] == "assistant"
    pat = patient_rows(run_dir)
    assert len(pat) == len(sessions)
    assert any(m["tool_calls"] for r in pat for m in r["messages"])
    assert all(r["profile_summary"] for r in pat)
    assert all(m["role"] in {"system", "user", "assistant", "tool"} for r in pat for m in r["messages"])
    # The MindSim patient's rows carry the tools it was offered; the other engines' patients call none.
    for r in pat:
        called = {c["function"]["name"] for m in r["messages"] for c in (m["tool_calls"] or [])}
        assert called <= {t["function"]["name"] for t in r["tools"]}


def _copy_dataset(run_dir: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "dataset"
    shutil.copytree(run_dir / "dataset", dest)
    return dest


def test_publish_dry_run_checks_and_loads(run_dir, capsys):
    from mindsimkit.mindsim_app.cli import main

    assert main(["publish", str(run_dir), "--repo-id", "someone/tiny", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run" in out and "profiles" in out


def test_publish_refuses_foreign_files_and_reference_text(run_dir, tmp_path, shared_dir):
    from mindsimkit.mindsim_app.publish import PublishRefused, check_folder

    ds = _copy_dataset(run_dir, tmp_path)
    check_folder(ds)  # clean as written
    (ds / "notes.jsonl").write_text("{}\n")
    with pytest.raises(PublishRefused, match="notes.jsonl: not written by the toolkit"):
        check_folder(ds)
    (ds / "notes.jsonl").unlink()

    # Reference conversations smuggled into the transcripts config, even stamped with this run's id.
    mibot = shared_dir / "reference" / "mibot" / "conversations.jsonl"
    line = json.loads(mibot.read_text().splitlines()[0])
    transcripts = ds / json.loads((ds / MANIFEST).read_text())["configs"]["transcripts"]["path"]
    table = pq.read_table(transcripts)
    run_id = table.column("run_id")[0].as_py()
    forged = pa.Table.from_pylist(
        [
            {
                "id": "x",
                "messages": [{"role": m["role"], "content": m["content"]} for m in line["messages"]],
                "run_id": run_id,
            }
        ]
    ).replace_schema_metadata(table.schema.metadata)
    pq.write_table(forged, transcripts)
    with pytest.raises(PublishRefused) as info:
        check_folder(ds, [mibot])
    assert f"{transcripts.relative_to(ds)}: changed after the toolkit wrote it" in str(info.value)
    assert "match reference transcript messages" in str(info.value)


def test_stubbed_push_sends_files_and_never_shows_the_token(run_dir, tmp_path, monkeypatch, capsys, caplog):
    from hub_stub import HubStub

    from mindsimkit.mindsim_app.cli import main

    secret = "hf_TESTSECRET_do_not_print_0123456789"
    monkeypatch.setenv("HF_TOKEN", secret)
    with HubStub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        code = main(["publish", str(run_dir / "dataset"), "--repo-id", "someone/tiny", "--private"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    manifest = json.loads((run_dir / "dataset" / MANIFEST).read_text())
    assert set(hub.files) == set(manifest["files"]) | {MANIFEST}
    assert hub.files["README.md"] == (run_dir / "dataset" / "README.md").read_bytes()
    assert hub.created and hub.created[0]["visibility"] == "private" and hub.created[0]["type"] == "dataset"
    writes = [r for r in hub.requests if r["path"].startswith(("/api/repos/create", "/api/datasets/"))]
    assert len(writes) >= 3 and all(r["auth"] == f"Bearer {secret}" for r in writes)
    assert secret not in captured.out + captured.err + caplog.text
    assert not any(
        secret in p.read_text(errors="ignore")
        for p in run_dir.rglob("*")
        if p.is_file() and p.stat().st_size < 5_000_000
    )
