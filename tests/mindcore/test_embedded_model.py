"""The embedded engine's model file (mindcore/embedded.py): the shipped Q4_1 weights re-encoded once as Q8_0 and
cached, or the shipped / the recipe's file as it is. On small GGUF files written here, no engine."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader, GGUFWriter
from gguf.quants import dequantize, quantize

from mindsimkit.mindcore import embedded
from mindsimkit.mindcore.config import EmbeddedEngine
from mindsimkit.mindcore.errors import EngineUnavailable


def _tiny(path, seed=0):
    """A GGUF file shaped like the shipped one: Q4_1 matrices, an F32 norm, string and array metadata."""
    rng = np.random.default_rng(seed)
    w = GGUFWriter(path, "llama")
    w.add_name("tiny")
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    w.add_uint32("llama.block_count", 2)
    for i in range(2):
        w.add_tensor(
            f"blk.{i}.attn_q.weight",
            quantize(rng.standard_normal((8, 64)).astype(np.float32), Q.Q4_1),
            raw_dtype=Q.Q4_1,
        )
    w.add_tensor("output_norm.weight", rng.standard_normal(64).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture
def shipped(tmp_path, monkeypatch):
    (tmp_path / "pkg").mkdir()
    src = _tiny(tmp_path / "pkg" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    monkeypatch.setattr(embedded, "default_model_path", lambda: src)
    monkeypatch.setenv("MINDSIM_CACHE", str(tmp_path / "cache"))
    return src


def test_the_shipped_model_is_reencoded_once_as_q8_0_and_read_from_the_cache(shipped, tmp_path):
    path = embedded.served_model_path(EmbeddedEngine())
    assert (
        path.parent.parent == tmp_path / "cache" / "models" and path.name == "SmolLM2-135M-Instruct.Q4_1.as-Q8_0.gguf"
    )
    src, out = GGUFReader(shipped), GGUFReader(path)
    assert [t.name for t in out.tensors] == [t.name for t in src.tensors]
    for a, b in zip(src.tensors, out.tensors):
        if a.tensor_type == Q.Q4_1:
            assert b.tensor_type == Q.Q8_0
            before, after = dequantize(a.data, Q.Q4_1), dequantize(b.data, Q.Q8_0)
            # Q8_0 keeps each block within about half its step (the block's largest magnitude / 127) of the Q4_1
            # values; the step itself is stored in 16 bits, which adds a little.
            step = np.abs(before.reshape(-1, 32)).max(axis=1, keepdims=True) / 127
            assert np.all(np.abs(after - before).reshape(-1, 32) <= 0.6 * step)
        else:
            assert b.tensor_type == a.tensor_type and np.array_equal(np.asarray(b.data), np.asarray(a.data))
    assert out.fields["tokenizer.ggml.tokens"].contents() == ["a", "b", "c"]
    assert out.fields["llama.block_count"].contents() == 2 and out.fields["general.name"].contents() == "tiny"
    stamp = path.stat().st_mtime_ns
    assert embedded.served_model_path(EmbeddedEngine()) == path and path.stat().st_mtime_ns == stamp  # not redone
    assert not list(path.parent.glob(".*part"))


def test_another_shipped_file_gets_its_own_copy(shipped):
    first = embedded.served_model_path(EmbeddedEngine())
    _tiny(shipped, seed=1)  # a new release of the model package: another digest
    second = embedded.served_model_path(EmbeddedEngine())
    assert second != first and second.parent.parent == first.parent.parent and first.is_file()


def test_reencode_off_or_a_recipe_model_serves_the_file_as_it_is(shipped, tmp_path):
    assert embedded.served_model_path(EmbeddedEngine(reencode=None)) == shipped
    own = _tiny(tmp_path / "own.gguf")
    assert embedded.served_model_path(EmbeddedEngine(model_path=str(own))) == own
    assert not (tmp_path / "cache").exists()


def test_an_unwritable_cache_is_one_error_naming_both_fixes(shipped, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("MINDSIM_CACHE", str(blocker))  # a file where the folder should be
    with pytest.raises(
        EngineUnavailable, match=r"could not write the re-encoded embedded model.*MINDSIM_CACHE.*reencode: null"
    ):
        embedded.served_model_path(EmbeddedEngine())


def test_a_failed_reencoding_leaves_no_file_behind(shipped, tmp_path, monkeypatch):
    def broken(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(GGUFWriter, "write_tensors_to_file", broken)
    with pytest.raises(EngineUnavailable, match="disk full"):
        embedded.served_model_path(EmbeddedEngine())
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("MINDSIM_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert embedded.model_cache() == tmp_path / "xdg" / "mindsim" / "models"
    monkeypatch.setenv("MINDSIM_CACHE", str(tmp_path / "m"))
    assert embedded.model_cache() == tmp_path / "m" / "models"
