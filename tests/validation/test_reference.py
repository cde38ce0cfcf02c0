import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mindsimkit.mindcore.errors import InputError
from mindsimkit.validation.compare import build_reference
from mindsimkit.validation.config import ValidationConfig, shipped_reference_path
from mindsimkit.validation.features import FEATURES
from mindsimkit.validation.reference import META_KEY, file_sha256, load_reference, measure
from mindsimkit.validation.transcripts import load_transcripts


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


def assert_text_free(artifact, rows):
    """No message string and no raw id of the input survives anywhere in the artifact."""
    table = pq.read_table(artifact)
    for field in table.schema:
        assert pa.types.is_integer(field.type) or pa.types.is_floating(field.type), field
    meta_text = table.schema.metadata[META_KEY].decode("utf-8")
    leaves = set(_strings(json.loads(meta_text)))
    raw = artifact.read_bytes().decode("latin-1")
    checked = 0
    for row in rows:
        for key in ("id", "conversation_id", "patient_id"):
            if row.get(key):
                assert str(row[key]) not in leaves
                if len(str(row[key])) >= 8:
                    assert str(row[key]) not in meta_text and str(row[key]) not in raw
        for m in row["messages"]:
            content = (m.get("content") or "").strip()
            assert content not in leaves
            if len(content.split()) >= 3:
                assert content not in meta_text and content not in raw
                checked += 1
    assert checked > 0


def test_synthetic_artifact_is_text_free_and_round_trips(tmp_path, synth, jsonl):
    rows = synth(12, seed=3, mean_words=9, patients=5)
    src = jsonl(tmp_path / "t.jsonl", rows)
    out = tmp_path / "ref.parquet"
    measured = build_reference(src, out, ValidationConfig(), attribution="test data")
    assert_text_free(out, rows)
    back = load_reference(out)
    np.testing.assert_array_equal(back.values, measured.values)
    np.testing.assert_array_equal(back.patients, measured.patients)
    assert sorted(set(back.patients.tolist())) == list(range(5))
    assert back.counts["conversations_used"] == 12 and back.counts["patients"] == 5
    prov = back.meta["provenance"]
    assert prov["source_file"] == "t.jsonl" and len(prov["source_sha256"]) == 64 and prov["attribution"] == "test data"
    assert back.arc_counts is None


def test_mibot_artifact_is_text_free(tmp_path, shared_dir):
    src = shared_dir / "reference" / "mibot" / "conversations.jsonl"
    rows = [json.loads(line) for line in src.read_text(encoding="utf-8").splitlines() if line.strip()]
    out = tmp_path / "mibot.parquet"
    build_reference(src, out)
    assert_text_free(out, rows)


def test_shipped_artifact_matches_the_mibot_source(shared_dir):
    """The shipped numbers are what this code computes from the MIBot file (no hand-made values)."""
    shipped = load_reference(shipped_reference_path())
    src = shared_dir / "reference" / "mibot" / "conversations.jsonl"
    assert shipped.meta["provenance"]["source_sha256"] == file_sha256(src)
    fresh = measure(load_transcripts(src), ValidationConfig())
    np.testing.assert_allclose(shipped.values, fresh.values, equal_nan=True)
    assert shipped.counts["patient_turns"] == 1573
    assert "CC BY-SA 4.0" in shipped.meta["provenance"]["attribution"]
    assert shipped.values.shape == (106, len(FEATURES))


def test_loading_something_else_fails_clearly(tmp_path):
    plain = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), plain)
    with pytest.raises(InputError, match="not a mindsim reference artifact"):
        load_reference(plain)
    with pytest.raises(InputError, match="not found"):
        load_reference(tmp_path / "missing.parquet")
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    with pytest.raises(InputError, match="not a readable parquet"):
        load_reference(junk)
