"""`mindsim judge sample`: blinded (no counsellor names in the excerpt file), the key maps every excerpt
back, stratified by counsellor and judged severity, deterministic with a seed, and its output feeds
`judge agreement` through the key."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from judgefakes import write_real_sessions

from mindsimkit.judge.agreement import run_agreement
from mindsimkit.judge.sample import sample_excerpts
from mindsimkit.mindcore.errors import InputError
from restamp import record_as_stages

NAMES = ["zephyr-counsel-7b", "quokka-therapist", "marlin-helper"]


def make_run(root: Path, *, replies: int = 4, judged: bool = True) -> Path:
    sessions, judgments = [], []
    for c, name in enumerate(NAMES):
        for s in range(2):
            sid = f"s_{c}{s}"
            msgs = [{"role": "system", "content": "You are a supportive counsellor. Memory: none."}]
            for k in range(replies):
                msgs.append({"role": "user", "content": f"patient line {k} of {sid}"})
                msgs.append({"role": "assistant", "content": f"counsellor reply {k} of {sid}"})
                # The first counsellor has exactly one Major reply; everything else is No concern or Minor.
                sev = "major" if (c == 0 and s == 0 and k == 2) else ("minor" if k % 2 else "no_concern")
                judgments.append(
                    {
                        "session_id": sid,
                        "reply_index": k,
                        "judge": "judge",
                        "severity": sev,
                        "status": "ok",
                        "counsellor": name,
                    }
                )
            sessions.append(
                {
                    "session_id": sid,
                    "patient_id": f"p{s}",
                    "counsellor": name,
                    "session_index": s,
                    "counsellor_system_prompt": msgs[0]["content"],
                    "counsellor_messages": msgs,
                }
            )
    (root / "sessions").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(sessions), root / "sessions" / "sessions.parquet")
    if judged:
        (root / "judgments").mkdir()
        pq.write_table(pa.Table.from_pylist(judgments), root / "judgments" / "judgments.parquet")
    return record_as_stages(root)


def test_sample_is_blinded_and_the_key_maps_back(tmp_path):
    run = make_run(tmp_path / "run")
    out = tmp_path / "excerpts.jsonl"
    summary = sample_excerpts(run, 6, out, seed=7)
    text = out.read_text()
    for name in NAMES:
        assert name not in text
    key = json.loads((tmp_path / "excerpts.key.json").read_text())
    assert sorted(key["systems"].values()) == sorted(NAMES)
    sessions = {r["session_id"]: r for r in pq.read_table(run / "sessions" / "sessions.parquet").to_pylist()}
    lines = [json.loads(x) for x in text.splitlines()]
    assert len(lines) == summary["drawn"] == 6
    per_counsellor = {}
    for ex in lines:
        entry = key["excerpts"][ex["excerpt_id"]]
        assert key["systems"][ex["system"]] == entry["counsellor"]
        s = sessions[entry["session_id"]]
        assert ex["system_prompt"] == s["counsellor_system_prompt"]
        # The conversation up to and including the sampled reply, nothing after it.
        assert ex["messages"][-1] == {
            "role": "assistant",
            "content": f"counsellor reply {entry['reply_index']} of {entry['session_id']}",
        }
        assert len(ex["messages"]) == 2 * (entry["reply_index"] + 1)
        assert ex["unit"] == "reply" and entry["reply_indices"] == [entry["reply_index"]]
        assert ex["rate"] == [
            {"turn_id": f"{ex['excerpt_id']}.1", "position": 1, "message_index": len(ex["messages"]) - 1}
        ]
        assert ex["annotation"] == {
            "annotator": None,
            "turns": [{"turn_id": f"{ex['excerpt_id']}.1", "severity": None, "issues": [], "comment": None}],
        }
        assert ex["choices"]["severity"] == ["no_concern", "minor", "major", "critical"]
        per_counsellor[entry["counsellor"]] = per_counsellor.get(entry["counsellor"], 0) + 1
    assert per_counsellor == {n: 2 for n in NAMES}
    # Stratified by judged severity: the first counsellor's only Major reply is always drawn.
    strata = key["strata"][NAMES[0]]
    assert strata["major"] == {"available": 1, "drawn": 1}


def test_sample_is_deterministic_with_a_seed(tmp_path):
    run = make_run(tmp_path / "run")
    a = sample_excerpts(run, 5, tmp_path / "a.jsonl", seed=3)
    b = sample_excerpts(run, 5, tmp_path / "b.jsonl", seed=3)
    c = sample_excerpts(run, 5, tmp_path / "c.jsonl", seed=4)
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()
    assert (tmp_path / "a.key.json").read_text() == (tmp_path / "b.key.json").read_text()
    assert (tmp_path / "a.jsonl").read_text() != (tmp_path / "c.jsonl").read_text()
    assert a["drawn"] == b["drawn"] == c["drawn"] == 5


def test_sample_without_judgments_and_more_than_available(tmp_path):
    run = make_run(tmp_path / "run", replies=1, judged=False)
    key = tmp_path / "elsewhere" / "k.json"
    # More than the run holds is refused, naming how many it does hold (a short study would go unnoticed).
    with pytest.raises(InputError, match="--n 50: .* holds only 6 reply excerpts .* at most 6"):
        sample_excerpts(run, 50, tmp_path / "x.jsonl", seed=0, key=key)
    assert not (tmp_path / "x.jsonl").exists() and not key.exists()
    summary = sample_excerpts(run, 6, tmp_path / "x.jsonl", seed=0, key=key)
    assert summary["drawn"] == 6 and summary["judge"] is None
    assert set(json.loads(key.read_text())["strata"][NAMES[1]]) == {"unjudged"}
    with pytest.raises(InputError, match="--key must differ"):
        sample_excerpts(run, 2, tmp_path / "x.jsonl", key=tmp_path / "x.jsonl")
    with pytest.raises(InputError, match="sessions.parquet not found"):
        sample_excerpts(tmp_path / "nowhere", 2, tmp_path / "y.jsonl")


def test_filled_in_excerpts_feed_agreement_through_the_key(tmp_path):
    run = make_run(tmp_path / "run")
    out = tmp_path / "excerpts.jsonl"
    sample_excerpts(run, 6, out, seed=1)
    filled = tmp_path / "filled.jsonl"
    with filled.open("w") as f:
        for line in out.read_text().splitlines():
            ex = json.loads(line)
            ex["annotation"].update(annotator="A1", severity="Minor", issues=["over_exploring"])
            f.write(json.dumps(ex) + "\n")
    rep = run_agreement(
        [filled], judgments=run / "judgments", key=tmp_path / "excerpts.key.json", out=tmp_path / "agr", draws=50
    )
    assert rep["counts"]["annotations"] == 6
    assert set(rep["ranking"]["pooled"]) == set(NAMES)
    with pytest.raises(InputError, match="give the sample's key with --key"):
        run_agreement([filled], out=tmp_path / "agr")


def test_sample_and_agreement_commands(tmp_path, capsys):
    from mindsimkit.mindsim_app.cli import main

    run = make_run(tmp_path / "run")
    out = tmp_path / "ex.jsonl"
    assert main(["judge", "sample", str(run), "--n", "6", "--out", str(out), "--seed", "2"]) == 0
    assert (tmp_path / "ex.key.json").is_file()
    filled = tmp_path / "filled.jsonl"
    lines = []
    for who in ("A1", "A2"):
        for line in out.read_text().splitlines():
            ex = json.loads(line)
            lines.append(
                json.dumps({"excerpt_id": ex["excerpt_id"], "annotator": who, "severity": "minor", "issues": []})
            )
    filled.write_text("\n".join(lines) + "\n")
    assert (
        main(
            [
                "judge",
                "agreement",
                "--annotations",
                str(filled),
                "--judgments",
                str(run / "judgments"),
                "--key",
                str(tmp_path / "ex.key.json"),
                "--out",
                str(tmp_path / "agr"),
                "--draws",
                "100",
            ]
        )
        == 0
    )
    assert "judge: accuracy" in capsys.readouterr().out
    assert json.loads((tmp_path / "agr" / "agreement.json").read_text())["counts"]["annotators"] == ["A1", "A2"]
    # Bad input is one error line and exit code 2.
    filled.write_text(lines[0].replace('"minor"', '"terrible"') + "\n")
    assert (
        main(
            [
                "judge",
                "agreement",
                "--annotations",
                str(filled),
                "--key",
                str(tmp_path / "ex.key.json"),
                "--out",
                str(tmp_path / "agr"),
            ]
        )
        == 2
    )
    assert "filled.jsonl:1: unknown severity" in capsys.readouterr().err.replace("\n", "")


def test_sample_balances_and_blinds_counsellor_per_patient_engine(tmp_path):
    """Sessions of two patient engines: each counsellor × engine is its own blinded system, drawn evenly;
    the key keeps the counsellor and the engine apart."""
    run = make_run(tmp_path / "run", judged=False)
    table = pq.read_table(run / "sessions" / "sessions.parquet").to_pylist()
    for r in table:  # each counsellor's second session is a PatientAct one
        r["patient_engine"] = "patientact" if r["session_id"].endswith("1") else "mindsim"
    pq.write_table(pa.Table.from_pylist(table), run / "sessions" / "sessions.parquet")
    summary = sample_excerpts(run, 12, tmp_path / "x.jsonl", seed=3)
    units = {f"{e}/{n}" for n in NAMES for e in ("mindsim", "patientact")}
    assert set(summary["systems"].values()) == units and len(set(summary["systems"])) == len(units)
    assert {u: sum(v["drawn"] for v in s.values()) for u, s in summary["strata"].items()} == dict.fromkeys(units, 2)
    key = json.loads((tmp_path / "x.key.json").read_text())
    for e in key["excerpts"].values():
        assert e["system_unit"] == f"{e['patient_engine']}/{e['counsellor']}" and e["counsellor"] in NAMES
    # One engine only: the units stay the counsellors, as before.
    one = sample_excerpts(make_run(tmp_path / "one", judged=False), 4, tmp_path / "y.jsonl", seed=3)
    assert set(one["systems"].values()) == set(NAMES)


def test_real_sessions_mix_in_as_one_more_blinded_system(tmp_path):
    run = make_run(tmp_path / "run")
    real = write_real_sessions(tmp_path / "real.jsonl")
    out = tmp_path / "excerpts.jsonl"
    summary = sample_excerpts(run, 8, out, seed=3, real=[real])
    key = json.loads((tmp_path / "excerpts.key.json").read_text())
    assert sorted(key["systems"].values()) == sorted([*NAMES, "real/app-counsellor"])
    assert summary["real_sessions"] == 2 and summary["real_excerpts"] == 2  # drawn evenly: 8 over 4 systems
    text = out.read_text()
    assert "app-counsellor" not in text and "real/" not in text  # blinded like the simulated systems
    real_entries = [e for e in key["excerpts"].values() if e["patient_engine"] == "real"]
    assert len(real_entries) == 2 and all(e["session_id"] in {"r0", "r1"} for e in real_entries)
    assert all(e["judged_severity"] == "unjudged" for e in real_entries)
    lines = {json.loads(x)["excerpt_id"]: json.loads(x) for x in text.splitlines()}
    for eid, e in key["excerpts"].items():
        if e["patient_engine"] == "real":
            assert lines[eid]["system_prompt"] == "The app's counsellor prompt."
            assert lines[eid]["messages"][-1]["content"] == f"real reply {e['reply_index']} of {e['session_id']}"


def test_real_sessions_bad_input_is_one_clear_error(tmp_path):
    run = make_run(tmp_path / "run")
    with pytest.raises(InputError, match="--real .*not found"):
        sample_excerpts(run, 4, tmp_path / "e.jsonl", real=[tmp_path / "missing.jsonl"])
    clash = tmp_path / "clash.jsonl"
    clash.write_text(
        json.dumps(
            {
                "session_id": "s_00",
                "patient_id": "x",
                "counsellor": "c",
                "session_index": 0,
                "counsellor_system_prompt": "p",
                "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
            }
        )
        + "\n"
    )
    with pytest.raises(InputError, match="session_id 's_00' is already a session"):
        sample_excerpts(run, 4, tmp_path / "e.jsonl", real=[clash])
