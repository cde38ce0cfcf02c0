import json

import pytest

from mindsimkit.mindcore.errors import ConfigError, InputError
from mindsimkit.validation.compare import build_reference, compare
from mindsimkit.validation.config import ValidationConfig
from mindsimkit.validation.features import FEATURES

FAST = dict(bootstrap_draws=100, floor_splits=20, joint_floor_splits=3)


@pytest.fixture
def reference(tmp_path, synth, jsonl):
    src = jsonl(tmp_path / "ref.jsonl", synth(60, seed=10, mean_words=8, patients=30))
    out = tmp_path / "ref.parquet"
    build_reference(src, out, ValidationConfig())
    return out


def test_compare_writes_the_report_and_orders_systems_correctly(tmp_path, reference, synth, jsonl):
    close = jsonl(tmp_path / "close.jsonl", synth(40, seed=11, mean_words=8, patients=20))
    far_rows = synth(40, seed=12, mean_words=30)
    out = tmp_path / "report"
    report = compare(reference, {"close": close, "far": far_rows}, out, ValidationConfig(**FAST))
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk["features"] == list(FEATURES)
    assert set(on_disk["floor"]) >= set(FEATURES) | {"index", "joint"}
    for name in ("close", "far"):
        sys = on_disk["systems"][name]
        assert set(sys) == set(FEATURES) | {"index", "joint"}
        lo, hi = sys["index"]["ci"]
        assert lo <= hi and sys["joint"] >= 0
    far, close_ = on_disk["systems"]["far"], on_disk["systems"]["close"]
    assert far["words_per_turn"]["distance"] > 3 * close_["words_per_turn"]["distance"]
    assert far["index"]["distance"] > close_["index"]["distance"] and far["joint"] > close_["joint"]
    assert on_disk["counts"]["close"]["patients"] == 20 and on_disk["counts"]["far"]["patients"] == 40
    assert on_disk["arc"] == {} and report["systems"].keys() == on_disk["systems"].keys()
    md = (out / "report.md").read_text()
    assert "| Words per turn |" in md and "| Floor |" in md
    words_row = next(line for line in md.splitlines() if line.startswith("| Words per turn |"))
    assert words_row.split(" | ")[1].startswith("**")  # "close" is lowest and marked; "far" is not
    assert not words_row.split(" | ")[2].startswith("**")
    for png in ("features.png", "distances.png"):
        assert (out / png).stat().st_size > 5000
    # Only aggregates leave the module: no patient text in any output.
    words = {
        m["content"] for r in far_rows for m in r["messages"] if m["role"] == "user" and len(m["content"].split()) >= 3
    }
    for f in ("report.json", "report.md"):
        text = (out / f).read_text()
        assert not any(w in text for w in words)


def test_compare_accepts_artifacts_as_systems(tmp_path, reference):
    report = compare(reference, {"itself": reference}, tmp_path / "r", ValidationConfig(**FAST, plots=False))
    assert report["systems"]["itself"]["index"]["distance"] == pytest.approx(0.0, abs=1e-12)
    assert not (tmp_path / "r" / "features.png").exists()


def test_arc_comparison_with_a_fake_labeller(tmp_path, synth, jsonl, fake_engines):
    engines, backend = fake_engines(
        lambda req: {"label": "P" if "tired" in req.messages[-1]["content"].split("Last patient turn:")[1] else "F"}
    )
    cfg = ValidationConfig(**FAST, arc=True)
    src = jsonl(tmp_path / "ref.jsonl", synth(6, seed=1, mean_words=6, turns=5))
    ref = tmp_path / "ref.parquet"
    measured = build_reference(src, ref, cfg, engines=engines)
    assert measured.arc_counts.shape == (6, 5, 4)
    assert (tmp_path / "ref.arc_cache.jsonl").is_file()
    calls = len(backend.requests)
    report = compare(ref, {"sim": src}, tmp_path / "out", cfg, engines=engines)
    assert len(backend.requests) == calls * 2  # the report uses its own cache in out_dir
    assert set(report["arc"]) == {"reference", "sim"}
    assert report["arc"]["reference"] == report["arc"]["sim"]
    shares = report["arc"]["sim"]["0"]
    assert sum(shares.values()) == pytest.approx(1.0)
    assert (tmp_path / "out" / "arc.png").is_file()
    compare(ref, {"sim": src}, tmp_path / "out", cfg, engines=engines)
    assert len(backend.requests) == calls * 2  # rerun: everything from the cache


def test_errors_are_clear(tmp_path, reference, synth):
    with pytest.raises(ConfigError, match="no engines were given"):
        compare(reference, {"s": synth(2, seed=0, mean_words=5)}, tmp_path / "o", ValidationConfig(arc=True))
    with pytest.raises(InputError, match="patient_role"):
        compare(
            reference, {"s": synth(2, seed=0, mean_words=5)}, tmp_path / "o", ValidationConfig(patient_role="client")
        )
    with pytest.raises(ConfigError, match="at least one system"):
        compare(reference, {}, tmp_path / "o")
    with pytest.raises(Exception, match="extra"):
        ValidationConfig(bootstrap_draw=5)


def test_compare_filters_the_systems_never_the_reference(tmp_path, reference, synth):
    rows = synth(40, seed=11, mean_words=8, patients=20, turns=20)
    for k, r in enumerate(rows):
        r.update(session_index=k % 2, counsellor="prod" if k % 4 < 2 else "other")
    cfg = ValidationConfig(**FAST, plots=False, first_sessions_only=True, max_patient_turns=15, counsellors=["prod"])
    report = compare(reference, {"sim": rows, "nobody": [dict(r, counsellor="x") for r in rows]}, tmp_path / "r", cfg)
    c = report["counts"]["sim"]
    assert c["conversations_used"] == 10 and c["skipped_later_session"] == 20 and c["skipped_other_counsellor"] == 10
    assert c["patient_turns"] == 10 * 15 and c["truncated_at_max_patient_turns"] == 10
    assert report["counts"]["reference"]["conversations_used"] == 60
    assert list(report["systems"]) == ["sim"]
    assert any("dropped from the comparison: nobody" in w for w in report["warnings"])
    assert report["filters"] == {"first_sessions_only": True, "max_patient_turns": 15, "counsellors": ["prod"]}
    md = (tmp_path / "r" / "report.md").read_text()
    assert "first sessions only; each conversation cut after patient turn 15; counsellors prod" in md
    # Every system empty: an input error. An artifact cannot be filtered.
    with pytest.raises(InputError, match="every system is empty"):
        compare(reference, {"nobody": [dict(r, counsellor="x") for r in rows]}, tmp_path / "r2", cfg)
    with pytest.raises(ConfigError, match="cannot be filtered"):
        compare(reference, {"art": reference}, tmp_path / "r3", cfg)
