"""The publish guard (`mindsim_app.publish.check_folder`) on tiny dataset folders built in the test: foreign files,
files changed after the toolkit wrote them, rows or tables of another run, and strings that match a reference
transcript message. Fast and self-contained: no engine, no `../shared` (the embedded job test runs the same guard
on the real quickstart folder against the MIBot reference)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mindsimkit.mindcore.provenance import base_provenance
from mindsimkit.mindcore.manifest import sha256_file
from mindsimkit.mindsim_app.cards import MANIFEST, META_KEY, build_dataset_folder
from mindsimkit.mindsim_app.publish import MIN_FINGERPRINT_WORDS, PublishRefused, check_folder
from restamp import header

RUN_ID = "run0000000000001"
# A reference conversation (as `validation reference` reads them): one long, identifying message, one short one.
REFERENCE_LONG = "I have tried to quit smoking three times since the spring"
REFERENCE_SHORT = "yes I think so"


def _dataset(root: Path, patient_lines: list[str]) -> Path:
    """A run folder with profiles and transcripts, turned into its dataset folder by the toolkit's own writer."""
    run = root / "run"
    (run / "profiles").mkdir(parents=True)
    pq.write_table(
        pa.table({"profile_id": ["p0", "p1"], "in_pool": [True, True]}), run / "profiles" / "profiles.parquet"
    )
    (run / "transcripts").mkdir()
    with (run / "transcripts" / "transcripts.jsonl").open("w") as f:
        for i, text in enumerate(patient_lines):
            f.write(
                json.dumps(
                    {
                        "id": f"c{i}",
                        "patient_id": f"p{i % 2}",
                        "counsellor": "counsellor",
                        "patient_engine": "mindsim",
                        "session_index": 0,
                        "messages": [
                            {"role": "assistant", "content": "What brings you here today?"},
                            {"role": "user", "content": text},
                        ],
                    }
                )
                + "\n"
            )
    return build_dataset_folder(
        run, header({"run_id": RUN_ID, "recipe": {"name": "t", "seed": 1}, "provenance": base_provenance()})
    )


def _reference(root: Path) -> Path:
    path = root / "reference.jsonl"
    path.write_text(
        json.dumps(
            {
                "id": "r1",
                "messages": [
                    {"role": "assistant", "content": "How can I help?"},
                    {"role": "user", "content": REFERENCE_LONG},
                    {"role": "user", "content": REFERENCE_SHORT},
                ],
            }
        )
        + "\n"
    )
    return path


def _config_path(folder: Path, name: str) -> Path:
    return folder / json.loads((folder / MANIFEST).read_text())["configs"][name]["path"]


def _restamp(folder: Path, rel_path: Path) -> None:
    """Record `rel_path`'s current checksum in the manifest, as if the toolkit had written it (isolates one check)."""
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"][str(rel_path.relative_to(folder))] = sha256_file(rel_path)
    (folder / MANIFEST).write_text(json.dumps(manifest))


def _refusal(folder: Path, refs=()) -> str:
    with pytest.raises(PublishRefused) as info:
        check_folder(folder, refs)
    return str(info.value)


@pytest.fixture
def folder(tmp_path) -> Path:
    return _dataset(tmp_path, ["I slept badly all week and I keep skipping lunch at work", "ok"])


def test_a_clean_folder_passes_with_its_manifest(folder, tmp_path):
    manifest = check_folder(folder, [_reference(tmp_path)])
    assert manifest["run_id"] == RUN_ID and set(manifest["configs"]) == {"profiles", "transcripts"}


def test_no_manifest_is_refused(folder):
    (folder / MANIFEST).unlink()
    assert f"no {MANIFEST}" in _refusal(folder)


def test_foreign_files_are_refused_at_any_depth(folder):
    (folder / "notes.jsonl").write_text("{}\n")
    (folder / "data" / "extra.parquet").write_bytes(b"PAR1")
    msg = _refusal(folder)
    assert "notes.jsonl: not written by the toolkit for this run" in msg
    assert "data/extra.parquet: not written by the toolkit for this run" in msg


def test_a_file_changed_after_the_toolkit_wrote_it_is_refused(folder):
    card = folder / "README.md"
    card.write_text(card.read_text() + "\nedited by hand\n")
    assert "README.md: changed after the toolkit wrote it" in _refusal(folder)


def test_a_table_of_another_run_is_refused(folder):
    """Rows and stamp of another run, the manifest's checksum updated: the run-id checks alone catch it."""
    path = _config_path(folder, "profiles")
    table = pq.read_table(path)
    other = table.drop_columns(["run_id"]).append_column("run_id", pa.array(["other"] * table.num_rows))
    other = other.replace_schema_metadata({META_KEY: json.dumps({"run_id": "other"}).encode()})
    pq.write_table(other, path)
    _restamp(folder, path)
    msg = _refusal(folder)
    rel = str(path.relative_to(folder))
    assert f"{rel}: not stamped with this run's id" in msg and f"{rel}: has rows not produced by this run" in msg
    assert "changed after" not in msg


def test_reference_text_is_refused_even_when_the_toolkit_wrote_it(tmp_path):
    """A transcript line that repeats a reference message (other case and spacing) is caught by the text check
    alone: the folder is the toolkit's own, every checksum matches."""
    spaced = "  " + REFERENCE_LONG.upper().replace(" ", "   ") + " "
    folder = _dataset(tmp_path, [spaced, "I slept badly all week and I keep skipping lunch at work"])
    ref = _reference(tmp_path)
    check_folder(folder)  # without the reference, nothing is wrong
    msg = _refusal(folder, [ref])
    rel = str(_config_path(folder, "transcripts").relative_to(folder))
    assert f"{rel}: 1 string(s) match reference transcript messages" in msg
    assert "changed after" not in msg and "not written" not in msg


def test_short_common_messages_do_not_count_as_reference_text(tmp_path):
    assert len(REFERENCE_SHORT.split()) < MIN_FINGERPRINT_WORDS <= len(REFERENCE_LONG.split())
    folder = _dataset(tmp_path, [REFERENCE_SHORT, "I slept badly all week and I keep skipping lunch at work"])
    check_folder(folder, [_reference(tmp_path)])


def test_every_problem_is_named_in_one_refusal(tmp_path):
    folder = _dataset(tmp_path, [REFERENCE_LONG])
    (folder / "stray.txt").write_text("x")
    (folder / "README.md").write_text("replaced")
    msg = _refusal(folder, [_reference(tmp_path)])
    assert msg.startswith(f"refusing to publish {folder}:")
    assert msg.count("\n  - ") == 3, msg


@pytest.mark.parametrize("publish, why", [("never", "marked never-publish"), ("allowed", "are not datasets")])
def test_an_annotation_task_folder_is_refused_even_with_force(tmp_path, publish, why):
    from mindsimkit.mindsim_app.annotate.tasks import TASK_FILE
    from mindsimkit.mindsim_app.publish import resolve_folder

    task = tmp_path / "task"
    task.mkdir()
    (task / TASK_FILE).write_text(json.dumps({"protocol": "realism", "publish": publish}))
    (task / MANIFEST).write_text("{}")  # even beside a manifest: the task marker decides
    with pytest.raises(PublishRefused, match=why):
        resolve_folder(task, force=True)
