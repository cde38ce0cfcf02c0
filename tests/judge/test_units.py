"""Annotation units as the paper's (MindEval2 §3.4): `judge sample --unit window|conversation` and the
paper's mix (19 conversations + 48 five-turn windows), their row schema (`judge.units`), and `judge
agreement` on units of one excerpt × one annotator with every counsellor turn rated."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mindsimkit.judge.agreement import run_agreement
from mindsimkit.judge.sample import sample_excerpts
from mindsimkit.judge.units import PAPER_MIX, Excerpt, KeyEntry
from mindsimkit.mindcore.errors import InputError
from restamp import record_as_stages

NAMES = ["zephyr-counsel-7b", "quokka-therapist", "marlin-helper"]


def make_run(root: Path, *, per_counsellor: int = 25, replies: int = 7) -> Path:
    sessions, judgments = [], []
    for c, name in enumerate(NAMES):
        for s in range(per_counsellor):
            sid = f"s_{c}_{s:02d}"
            n = replies - (s % 3)  # 7, 6 or 5 replies: windows start at different places
            msgs = [{"role": "system", "content": "You are a supportive counsellor."}]
            for k in range(n):
                msgs.append({"role": "user", "content": f"patient line {k} of {sid}"})
                msgs.append({"role": "assistant", "content": f"counsellor reply {k} of {sid}"})
                sev = ["no_concern", "minor", "major"][(c + k) % 3] if c else "minor"
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
            msgs.append({"role": "user", "content": f"closing line of {sid}"})
            sessions.append(
                {
                    "session_id": sid,
                    "patient_id": f"p{s}",
                    "counsellor": name,
                    "session_index": 0,
                    "counsellor_system_prompt": msgs[0]["content"],
                    "counsellor_messages": msgs,
                }
            )
    (root / "sessions").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(sessions), root / "sessions" / "sessions.parquet")
    (root / "judgments").mkdir()
    pq.write_table(pa.Table.from_pylist(judgments), root / "judgments" / "judgments.parquet")
    return record_as_stages(root)


def _read(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_window_excerpts_rate_five_consecutive_counsellor_turns(tmp_path):
    run = make_run(tmp_path / "run")
    out = tmp_path / "w.jsonl"
    summary = sample_excerpts(run, 9, out, seed=1, unit="window")
    key = json.loads((tmp_path / "w.key.json").read_text())
    rows = _read(out)
    assert len(rows) == 9 == summary["drawn"] and summary["rated_turns"] == 45
    for row in rows:
        ex = Excerpt.model_validate(row)  # the schema an annotation page reads
        entry = KeyEntry.model_validate(key["excerpts"][ex.excerpt_id])
        assert ex.unit == "window" and len(ex.rate) == 5 and len(set(entry.reply_indices)) == 5
        assert entry.reply_indices == list(range(entry.reply_index, entry.reply_index + 5))
        assert [t.turn_id for t in ex.rate] == entry.turn_ids == [f"{ex.excerpt_id}.{k}" for k in range(1, 6)]
        for t, r in zip(ex.rate, entry.reply_indices):
            assert ex.messages[t.message_index].content == f"counsellor reply {r} of {entry.session_id}"
        # Context before the window is shown; nothing after its last turn.
        assert ex.messages[-1].role == "assistant" and ex.rate[-1].message_index == len(ex.messages) - 1
        assert len(ex.messages) == 2 * (entry.reply_indices[-1] + 1)
        assert [t.turn_id for t in ex.annotation.turns] == entry.turn_ids
    assert {key["excerpts"][r["excerpt_id"]]["counsellor"] for r in rows} == set(NAMES)
    # One window per session: no counsellor turn is in two excerpts.
    assert len({key["excerpts"][r["excerpt_id"]]["session_id"] for r in rows}) == 9
    for name in NAMES:
        assert name not in out.read_text()


def test_conversation_excerpts_rate_every_counsellor_turn(tmp_path):
    run = make_run(tmp_path / "run", per_counsellor=2)
    summary = sample_excerpts(run, 6, tmp_path / "c.jsonl", seed=0, unit="conversation")
    key = json.loads((tmp_path / "c.key.json").read_text())
    for row in _read(tmp_path / "c.jsonl"):
        entry = key["excerpts"][row["excerpt_id"]]
        n = 7 - (int(entry["session_id"][-2:]) % 3)
        assert row["unit"] == "conversation" and entry["reply_indices"] == list(range(n)) and len(row["rate"]) == n
        assert "closing line" not in json.dumps(row["messages"])  # ends at the last rated turn
    assert summary["drawn"] == 6
    # Stratum of a multi-turn unit: its most severe judged turn.
    assert set(summary["strata"][NAMES[1]]) == {"major"}


def test_the_papers_mix_is_drawn_and_byte_reproducible(tmp_path):
    run = make_run(tmp_path / "run")
    a = sample_excerpts(run, None, tmp_path / "a.jsonl", seed=5, mix=PAPER_MIX)
    sample_excerpts(run, None, tmp_path / "b.jsonl", seed=5, mix=PAPER_MIX)
    assert a["drawn_by_unit"] == {"conversation": 19, "window": 48} and a["drawn"] == 67
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert (tmp_path / "a.key.json").read_bytes() == (tmp_path / "b.key.json").read_bytes()
    key = json.loads((tmp_path / "a.key.json").read_text())
    sessions = [e["session_id"] for e in key["excerpts"].values()]
    assert len(sessions) == len(set(sessions)) == 67  # windows come from sessions not drawn whole
    units = [r["unit"] for r in _read(tmp_path / "a.jsonl")]
    assert units != sorted(units)  # shuffled together, so the kind does not give away the order
    c = sample_excerpts(run, None, tmp_path / "c.jsonl", seed=6, mix=PAPER_MIX)
    assert c["drawn"] == 67 and (tmp_path / "c.jsonl").read_bytes() != (tmp_path / "a.jsonl").read_bytes()


def test_bad_unit_requests_are_input_errors(tmp_path):
    run = make_run(tmp_path / "run", per_counsellor=1, replies=4)
    with pytest.raises(InputError, match="at least 5 counsellor replies"):
        sample_excerpts(run, 2, tmp_path / "x.jsonl", unit="window")
    with pytest.raises(InputError, match="mix"):
        sample_excerpts(run, None, tmp_path / "x.jsonl", mix={"paragraph": 3})
    with pytest.raises(InputError, match="--n"):
        sample_excerpts(run, None, tmp_path / "x.jsonl")


def _fill(src: Path, dst: Path, who: str, severity=lambda k: "minor", skip_turn: int | None = None) -> None:
    with dst.open("w") as f:
        for row in _read(src):
            row["annotation"]["annotator"] = who
            for k, t in enumerate(row["annotation"]["turns"]):
                if k != skip_turn:
                    t.update(severity=severity(k), issues=["over_exploring"] if severity(k) != "no_concern" else [])
            f.write(json.dumps(row) + "\n")


def test_agreement_on_units_of_one_excerpt_and_one_annotator(tmp_path):
    run = make_run(tmp_path / "run", per_counsellor=4)
    sample_excerpts(run, None, tmp_path / "ex.jsonl", seed=2, mix={"conversation": 3, "window": 6})
    key = tmp_path / "ex.key.json"
    entries = json.loads(key.read_text())["excerpts"]
    turns = sum(len(e["reply_indices"]) for e in entries.values())
    _fill(tmp_path / "ex.jsonl", tmp_path / "a1.jsonl", "A1")
    _fill(tmp_path / "ex.jsonl", tmp_path / "a2.jsonl", "A2", severity=lambda k: "major" if k % 2 else "minor")
    rep = run_agreement(
        [tmp_path / "a1.jsonl", tmp_path / "a2.jsonl"],
        judgments=run / "judgments",
        key=key,
        out=tmp_path / "agr",
        draws=50,
    )
    c = rep["counts"]
    assert c["annotations"] == 2 * turns and c["excerpts"] == 9 and c["units"] == 18
    # Conversation-level W compares the two annotators' units over the same excerpts; the judge's over each unit.
    assert rep["judges"]["judge"]["severity"]["conversation_units"] == 18
    assert rep["ranking"]["units"] == 18 and set(rep["ranking"]["pooled"]) == set(NAMES)
    # Flat lines naming turn_id or position read the same as the filled-in excerpt.
    flat = tmp_path / "flat.jsonl"
    with flat.open("w") as f:
        for eid, e in entries.items():
            for pos, tid in enumerate(e["turn_ids"], start=1):
                f.write(
                    json.dumps(
                        {
                            "excerpt_id": eid,
                            **({"turn_id": tid} if pos % 2 else {"turn": pos}),
                            "annotator": "A1",
                            "severity": "minor",
                            "issues": ["over_exploring"],
                        }
                    )
                    + "\n"
                )
    again = run_agreement(
        [flat, tmp_path / "a2.jsonl"], judgments=run / "judgments", key=key, out=tmp_path / "agr2", draws=50
    )
    assert again["inter_annotator"] == rep["inter_annotator"] and again["ranking"] == rep["ranking"]


def test_a_unit_with_an_unrated_turn_is_refused(tmp_path):
    run = make_run(tmp_path / "run", per_counsellor=2)
    sample_excerpts(run, 3, tmp_path / "ex.jsonl", seed=0, unit="window")
    key = tmp_path / "ex.key.json"
    _fill(tmp_path / "ex.jsonl", tmp_path / "part.jsonl", "A1", skip_turn=2)
    with pytest.raises(InputError, match="1 of its 5 turns have no severity"):
        run_agreement([tmp_path / "part.jsonl"], key=key, out=tmp_path / "agr")
    eid, entry = next(iter(json.loads(key.read_text())["excerpts"].items()))
    flat = tmp_path / "flat.jsonl"
    flat.write_text(
        "".join(
            json.dumps({"excerpt_id": eid, "turn": p, "annotator": "A1", "severity": "minor"}) + "\n" for p in (1, 2, 3)
        )
    )
    with pytest.raises(InputError, match=r"rated 3 of the 5 turns .*missing positions \[4, 5\]"):
        run_agreement([flat], key=key, out=tmp_path / "agr")
    flat.write_text(json.dumps({"excerpt_id": eid, "annotator": "A1", "severity": "minor"}) + "\n")
    with pytest.raises(InputError, match="has 5 rated turns; give turn_id or turn"):
        run_agreement([flat], key=key, out=tmp_path / "agr")


def test_sample_command_flags(tmp_path):
    from typer.testing import CliRunner

    from mindsimkit.judge.cli import app

    run = make_run(tmp_path / "run")
    runner = CliRunner()
    res = runner.invoke(app, ["sample", str(run), "--mix", "paper", "--out", str(tmp_path / "p.jsonl")])
    assert res.exit_code == 0, res.output
    assert "19 conversations, 48 windows" in res.output and "key (keep it from the annotators)" in res.output
    res = runner.invoke(
        app, ["sample", str(run), "--conversations", "2", "--windows", "3", "--out", str(tmp_path / "m.jsonl")]
    )
    assert res.exit_code == 0, res.output
    assert [r["unit"] for r in _read(tmp_path / "m.jsonl")].count("window") == 3
    res = runner.invoke(app, ["sample", str(run), "--unit", "window", "--n", "4", "--out", str(tmp_path / "w.jsonl")])
    assert res.exit_code == 0 and len(_read(tmp_path / "w.jsonl")) == 4
    for bad in (["--mix", "paper", "--windows", "3"], ["--mix", "paper", "--n", "3"], []):
        res = runner.invoke(app, ["sample", str(run), "--out", str(tmp_path / "z.jsonl"), *bad])
        assert res.exit_code != 0 and not (tmp_path / "z.jsonl").exists()
