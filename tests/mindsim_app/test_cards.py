"""The dataset folder on hand-made run folders (fast; the real run is in test_job_e2e.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from mindsimkit.mindsim_app.cards import MANIFEST, build_dataset_folder
from mindsimkit.mindsim_app.publish import check_folder, check_loads
from restamp import header


def _run(root: Path, n_profiles: int, run_id: str) -> tuple[Path, dict]:
    root.mkdir(parents=True)
    (root / "profiles").mkdir()
    pq.write_table(
        pa.table({"profile_id": [f"p{i}" for i in range(n_profiles)], "in_pool": [True] * n_profiles}),
        root / "profiles" / "profiles.parquet",
    )
    from mindsimkit.mindcore.provenance import base_provenance

    return root, {"run_id": run_id, "recipe": {"name": "t", "seed": 1}, "provenance": base_provenance()}


def test_two_runs_named_dataset_never_load_each_others_rows(tmp_path):
    """`datasets` caches a local folder by its name and each config's file path; two runs' `dataset/`
    folders must still load their own rows, through the user's default cache too."""
    from datasets import load_dataset

    seen = []
    for n, run_id in ((3, "aaaa"), (5, "bbbb")):
        run_dir, info = _run(tmp_path / run_id, n, run_id)
        folder = build_dataset_folder(run_dir, header(info))
        manifest = check_folder(folder)
        path = manifest["configs"]["profiles"]["path"]
        assert path.startswith("data/profiles-") and path.endswith(".parquet")
        assert check_loads(folder, manifest) == {"profiles": n}
        ds = load_dataset(str(folder), "profiles", split="train")
        seen.append((ds.num_rows, set(ds["run_id"])))
    assert seen == [(3, {"aaaa"}), (5, {"bbbb"})]


def test_rebuilt_folder_replaces_the_old_one_whole(tmp_path):
    run_dir, info = _run(tmp_path / "r", 2, "cccc")
    first = json.loads((build_dataset_folder(run_dir, header(info)) / MANIFEST).read_text())
    pq.write_table(
        pa.table({"profile_id": ["p0", "p1", "p2"], "in_pool": [True] * 3}), run_dir / "profiles" / "profiles.parquet"
    )
    folder = build_dataset_folder(run_dir, header(info))
    second = json.loads((folder / MANIFEST).read_text())
    assert first["configs"]["profiles"]["path"] != second["configs"]["profiles"]["path"]
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == sorted(
        [*second["files"], MANIFEST]
    )
    assert not list(folder.parent.glob("dataset.*"))


def test_push_of_a_new_version_replaces_the_old_files(tmp_path, monkeypatch):
    from hub_stub import HubStub
    from mindsimkit.mindsim_app.publish import push

    monkeypatch.setenv("HF_TOKEN", "hf_TESTSECRET_cards_0123456789")
    with HubStub() as hub:
        sent = []
        for n, run_id in ((2, "dddd"), (4, "eeee")):
            run_dir, info = _run(tmp_path / run_id, n, run_id)
            folder = build_dataset_folder(run_dir, header(info))
            push(folder, "someone/versions", private=True, endpoint=hub.endpoint)
            sent.append(json.loads((folder / MANIFEST).read_text()))
        hub.files["notes/kept.txt"] = b"the user's own file"
        hub.files["docs/guide.md"] = b"# the user's own page"
        push(folder, "someone/versions", private=True, endpoint=hub.endpoint)
    first, second = sent
    old = first["configs"]["profiles"]["path"]
    assert old != second["configs"]["profiles"]["path"] and old in hub.deleted
    # The repo now holds exactly the second version, plus what the user put there outside our folders.
    assert set(hub.files) == set(second["files"]) | {MANIFEST, "notes/kept.txt", "docs/guide.md"}
    assert json.loads(hub.files[MANIFEST])["run_id"] == "eeee"


def test_card_pool_sentence_follows_pool_verdicts(tmp_path):
    for verdicts, expected in (
        (["clean"], "selected from the clean profiles:"),
        (["clean", "minor"], "selected from the clean and minor profiles"),
    ):
        run_dir, info = _run(tmp_path / "-".join(verdicts), 2, "ffff")
        card = (build_dataset_folder(run_dir, header({**info, "pool_verdicts": verdicts})) / "README.md").read_text()
        assert expected in card
        assert ("clean and minor" in card) == ("minor" in verdicts)


def test_judgments_become_a_config_and_the_card_shows_the_mhqr_table(tmp_path):
    run_dir, info = _run(tmp_path / "judged", 2, "gggg")
    (run_dir / "judgments").mkdir()
    pq.write_table(
        pa.table({"session_id": ["s1", "s1"], "reply_index": [0, 1], "severity": ["Minor", "No concern"]}),
        run_dir / "judgments" / "judgments.parquet",
    )
    (run_dir / "judgments" / "report.md").write_text(
        "# MHQR\n\n| counsellor | MHQR | 95% CI |\n|---|---|---|\n| counsellor | 0.50 | 0.00–1.00 |\n\nmore text\n"
    )
    from PIL import Image

    Image.new("RGB", (4, 4)).save(run_dir / "judgments" / "mhqr.png")
    folder = build_dataset_folder(run_dir, header(info))
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["configs"]["judgments"]["rows"] == 2
    card = (folder / "README.md").read_text()
    section = card.split("### Counsellor quality (MHQR)")[1]
    assert "| counsellor | 0.50 | 0.00–1.00 |" in section and "images/judge_mhqr.png" in section
    assert "more text" not in card and (folder / "images" / "judge_mhqr.png").is_file()


def test_card_says_when_the_judge_did_not_run(tmp_path):
    run_dir, info = _run(tmp_path / "unjudged", 2, "hhhh")
    card = (build_dataset_folder(run_dir, header(info)) / "README.md").read_text()
    assert "_The MHQR judge was not run._" in card


def test_a_corrupt_manifest_is_refused_with_one_clear_error(tmp_path):
    import pytest

    from mindsimkit.mindsim_app.publish import PublishRefused

    run_dir, info = _run(tmp_path / "corrupt", 2, "iiii")
    folder = build_dataset_folder(run_dir, header(info))
    (folder / MANIFEST).write_bytes(b"\xff\x00not json")
    with pytest.raises(PublishRefused, match="not a readable manifest"):
        check_folder(folder)


def test_card_carries_the_recipe_description(tmp_path):
    run_dir, info = _run(tmp_path / "described", 2, "jjjj")
    info["recipe"]["description"] = "Four candidates to stay quick."
    card = (build_dataset_folder(run_dir, header(info)) / "README.md").read_text()
    assert "Recipe `t`: Four candidates to stay quick." in card


def test_card_marks_the_prompts_the_recipe_swapped_for_its_own_files(tmp_path):
    run_dir, info = _run(tmp_path / "swapped", 2, "kkkk")
    info["prompt_hashes"] = {"judge/user.jinja2": "aaaa000011112222", "patient/system.jinja2": "bbbb000011112222"}
    info["prompt_overrides"] = {
        "judge/user.jinja2": {"path": "/x/my_prompts/judge_user.jinja2", "sha256": "aaaa000011112222"}
    }
    card = (build_dataset_folder(run_dir, header(info)) / "README.md").read_text()
    assert "replaced 1 shipped template with its own file" in card
    assert "| `judge/user.jinja2` (own file: `judge_user.jinja2`) | `aaaa000011112222` |" in card
    assert "| `patient/system.jinja2` | `bbbb000011112222` |" in card


def test_card_says_patientact_shaped_profiles_may_hold_passive_death_thoughts(tmp_path):
    run_dir, info = _run(tmp_path / "plain", 2, "llll")
    plain = (build_dataset_folder(run_dir, header(info)) / "README.md").read_text()
    assert "Profiles deliberately exclude self-harm and suicidal ideation" in plain
    assert "passive thoughts of death" not in plain
    run_dir, info = _run(tmp_path / "shaped", 2, "mmmm")
    info["recipe"]["profiles"] = {"patientact_shape": True}
    shaped = (build_dataset_folder(run_dir, header(info)) / "README.md").read_text()
    assert "passive thoughts of death without intent" in shaped
    assert "exclude suicidal intent, plans and self-harm" in shaped
    assert "exclude self-harm and suicidal ideation" not in shaped
