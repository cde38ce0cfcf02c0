"""Tests for running the simulator over a pool (mindsim/simulate.py, mindsim/config.py,
mindsim_app/simulate_cli.py) on the fake engine."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import ConfigError, InputError
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindsim.config import CounsellorBinding, SimulationConfig
from mindsimkit.mindsim.simulate import run_simulation
from simfakes import SimResponder, make_profile


class SlowFake(FakeBackend):
    """Fake backend that yields to the event loop per request and records how many were in flight."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.in_flight = self.max_in_flight = 0

    async def complete(self, request):
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.002)
            return await super().complete(request)
        finally:
            self.in_flight -= 1


def simulate(tmp_path: Path, responder=None, profiles=None, backend_cls=FakeBackend, **cfg):
    backend = backend_cls(responder or SimResponder())
    config = SimulationConfig(**{"sessions": 2, "turn_cap": 5, **cfg})
    profiles = profiles or [
        make_profile("p1"),
        make_profile("p2", "joker", "formal"),
        make_profile("p3", "stoic", "plain"),
    ]
    with Engines.with_backend(backend) as engines:
        summary = run_simulation(profiles, engines, config, tmp_path, seed=5)
    return summary, backend


def test_outputs_dataset_and_transcripts(tmp_path):
    summary, _ = simulate(tmp_path)
    assert summary.sessions_expected == summary.sessions_written == 6 and not summary.failed_arcs
    # One draft per scenario: each patient's shared first scenario once, then one per later session.
    assert summary.scenario_drafts == 3 + 3
    rows = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist()
    assert len(rows) == 6 and len({r["session_id"] for r in rows}) == 6
    row = rows[0]
    for key in (
        "patient_messages",
        "counsellor_messages",
        "turns",
        "scenario",
        "schedule",
        "memory_before",
        "memory_after",
        "counsellor_system_prompt",
        "tokens",
        "engines",
    ):
        assert row[key] is not None, key
    lines = [json.loads(l) for l in (tmp_path / "transcripts" / "transcripts.jsonl").read_text().splitlines()]
    assert len(lines) == 6
    for t in lines:
        assert {"id", "patient_id", "messages"} <= set(t)
        assert all(set(m) == {"role", "content"} and m["role"] in ("user", "assistant") for m in t["messages"])
        assert t["messages"][0]["role"] == "user"  # the patient opens
    # later sessions start from the memory the previous session left
    by_key = {(r["patient_id"], r["session_index"]): r for r in rows}
    for pid in ("p1", "p2", "p3"):
        assert by_key[(pid, 1)]["memory_before"] == by_key[(pid, 0)]["memory_after"]
        assert by_key[(pid, 0)]["memory_before"] == []


def test_rerun_skips_finished_sessions(tmp_path):
    simulate(tmp_path)
    summary, backend = simulate(tmp_path)
    assert backend.requests == [] and summary.sessions_written == 6


def test_arcs_advance_concurrently(tmp_path):
    _, backend = simulate(tmp_path, backend_cls=SlowFake)
    # Every arc has a request in flight at once (not one arc after another); between sessions an arc has two,
    # the memory rewrite and the next scenario (tests/mindsim/test_arc_overlap.py).
    assert 3 <= backend.max_in_flight <= 6


def test_schedule_is_the_same_whichever_counsellor(tmp_path):
    cfg = {"counsellors": ["counsellor", "counsellor:b", CounsellorBinding(name="bound", engine="fake", model="m2")]}
    summary, _ = simulate(tmp_path, **cfg)
    rows = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist()
    assert len(rows) == 18 and summary.counsellors == ["counsellor", "counsellor:b", "bound"]
    for pid in ("p1", "p2", "p3"):
        for idx in (0, 1):
            plans = [r["schedule"] for r in rows if r["patient_id"] == pid and r["session_index"] == idx]
            assert len(plans) == 3 and all(p == plans[0] for p in plans)
    bound = next(r for r in rows if r["counsellor"] == "bound")
    assert (
        bound["engines"]["counsellor"]["model"] == "m2" and bound["engines"]["counsellor"]["role"] == "counsellor:bound"
    )


def test_failed_arc_is_counted_and_retried_on_rerun(tmp_path):
    base = SimResponder()

    def blank_p2(req):  # blank patient messages for p2 sink p2's arc only
        if req.role == "patient" and not req.response_schema and "You are p2" in req.messages[0]["content"]:
            return "  "
        return base(req)

    profiles = [make_profile("p1"), make_profile("p2")]
    summary, _ = simulate(tmp_path, blank_p2, profiles)
    assert [f.patient_id for f in summary.failed_arcs] == ["p2"]
    assert "blank" in summary.failed_arcs[0].error and summary.sessions_written == 2
    summary, _ = simulate(tmp_path, base, profiles)
    assert not summary.failed_arcs and summary.sessions_written == 4


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="simulation.sesions"):
        SimulationConfig.from_section({"sesions": 3})
    with pytest.raises(ConfigError, match="not a counsellor role"):
        SimulationConfig.from_section({"counsellors": ["patient"]})
    with pytest.raises(ConfigError, match="unique"):
        SimulationConfig.from_section({"counsellors": ["counsellor", "counsellor"]})
    assert SimulationConfig.from_section(None).turn_cap == 30


def test_bad_profiles_and_bindings_fail_before_any_call(tmp_path):
    with pytest.raises(InputError, match="archetype 'nope'"):
        simulate(tmp_path, profiles=[make_profile("p1", "nope")])
    with pytest.raises(InputError, match="duplicate"):
        simulate(tmp_path, profiles=[make_profile("p1"), make_profile("p1")])
    with pytest.raises(ConfigError, match="engine 'elsewhere'"):
        simulate(tmp_path, counsellors=[CounsellorBinding(name="x", engine="elsewhere")])


def test_cli_rejects_a_recipe_typo_before_starting_engines(tmp_path):
    from mindsimkit.mindsim_app.simulate_cli import simulate_cmd

    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "name: t\nengines: {local: {kind: embedded}}\nroles: {default: {engine: local}}\nsimulation: {turncap: 3}\n"
    )
    with pytest.raises(ConfigError, match="simulation.turncap"):
        simulate_cmd(profiles=tmp_path, recipe=recipe, out_dir=tmp_path / "o")


def test_cli_rejects_a_bad_profile_row_before_starting_engines(tmp_path, monkeypatch):
    """The pool is read lazily, but every row is still checked before a model is loaded."""
    from mindsimkit.mindcore.io import atomic_write_parquet
    from mindsimkit.mindsim_app.simulate_cli import simulate_cmd

    rows = [make_profile(f"p{i}").model_dump(mode="json") | {"in_pool": True} for i in range(3)]
    rows[2]["style"]["verbosity"] = "endless"
    atomic_write_parquet(tmp_path / "profiles" / "profiles.parquet", rows)
    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: t\nengines: {local: {kind: embedded}}\nroles: {default: {engine: local}}\n")

    def started(*_a, **_k):
        raise AssertionError("engines started before the profiles were checked")

    monkeypatch.setattr(Engines, "from_config", started)
    with pytest.raises(InputError, match=r"profiles.parquet row 2: not a profiles table row \(style.verbosity"):
        simulate_cmd(profiles=tmp_path / "profiles", recipe=recipe, out_dir=tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_memory_engine_failure_fails_the_arc_and_the_rerun_writes_it(tmp_path):
    from mindsimkit.mindcore.errors import TransportError

    base = SimResponder()
    failed = []

    def memory_down_once(req):
        if req.role == "memory_compactor" and not failed:
            failed.append(req)
            raise TransportError("memory engine went away")
        return base(req)

    profiles = [make_profile("p1")]
    summary, _ = simulate(tmp_path, memory_down_once, profiles, sessions=1)
    assert [f.patient_id for f in summary.failed_arcs] == ["p1"]
    assert "memory engine went away" in summary.failed_arcs[0].error
    assert summary.sessions_written == 0
    assert not list((tmp_path / "sessions" / "checkpoints").glob("*.json"))  # never saved with the old memory

    summary, _ = simulate(tmp_path, base, profiles, sessions=1)
    assert not summary.failed_arcs and summary.sessions_written == 1
    row = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist()[0]
    assert row["memory_after"] == ["Patient mentioned point 1 in session."]
    assert row["memory_update"] == {"attempts": 1, "repaired": False, "problems": [], "skipped": False}


def test_rows_keep_the_counsellor_prompt_and_messages_exactly_as_sent(tmp_path):
    _, backend = simulate(tmp_path)
    rows = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist()
    sent = [r for r in backend.requests if r.role == "counsellor"]
    assert sent
    for req in sent:  # every request is a prefix of one stored session's counsellor messages
        matches = [row for row in rows if row["counsellor_messages"][: len(req.messages)] == req.messages]
        assert len(matches) == 1
        row = matches[0]
        assert row["counsellor_system_prompt"] == req.messages[0]["content"] == row["counsellor_messages"][0]["content"]
    later = next(r for r in rows if r["session_index"] == 1)
    assert later["memory_before"] and all(e in later["counsellor_system_prompt"] for e in later["memory_before"])
    replies = sum(m["role"] == "assistant" for r in rows for m in r["counsellor_messages"])
    assert replies == len(sent) == sum(len(r["counsellor_flags"]) for r in rows)


def _files(folder: Path) -> tuple[list, str]:
    return (
        pq.read_table(folder / "sessions" / "sessions.parquet").to_pylist(),
        (folder / "transcripts" / "transcripts.jsonl").read_text(),
    )


def test_sessions_streamed_in_runs_give_the_same_dataset_in_the_same_order(tmp_path, monkeypatch):
    """A shard writer that spills every session as its own sorted run (the streaming path of a large shard)
    writes the same rows, in the same order, as one that holds the whole shard; its runs are gone afterwards."""
    import random

    from mindsimkit.mindsim import simulate as sim
    from mindsimkit.mindsim.records import SessionRecord
    from mindsimkit.mindsim.simulate import SessionStore, ShardWriter

    profiles = [make_profile(f"p{i}", arch) for i, arch in enumerate(["joker", "stoic", "joker", "stoic", "joker"])]
    whole, _ = simulate(tmp_path / "whole", profiles=profiles, counsellors=["counsellor", "counsellor:b"])
    monkeypatch.setattr(sim, "RUN_ROWS", 1)
    spilled = []
    close = sim.ShardWriter.close
    monkeypatch.setattr(sim.ShardWriter, "close", lambda self: (spilled.append(self.runs_written), close(self))[1])
    streamed, _ = simulate(tmp_path / "streamed", profiles=profiles, counsellors=["counsellor", "counsellor:b"])
    assert spilled == [20]  # every session went to disk as its own run before the shard file was written
    assert streamed.sessions_written == whole.sessions_written == 20
    (rows_a, text_a), (rows_b, text_b) = _files(tmp_path / "whole"), _files(tmp_path / "streamed")
    assert [r["session_id"] for r in rows_b] == [r["session_id"] for r in rows_a] and text_b == text_a
    assert rows_b == rows_a
    assert streamed.model_dump(exclude={"elapsed_s", "created_utc", "usage"}) == whole.model_dump(
        exclude={"elapsed_s", "created_utc", "usage"}
    )
    assert not list((tmp_path / "streamed" / "sessions" / "shards").glob(".runs-*"))
    # Sessions arriving in any order, some with a field no session of their run has (typed null there).
    records = SessionStore(tmp_path / "whole").all()
    random.Random(3).shuffle(records)
    records = [
        SessionRecord.model_validate({**r.model_dump(mode="json"), "counsellor_flags": []}) if i % 3 else r
        for i, r in enumerate(records)
    ]
    monkeypatch.setattr(sim, "MAX_RUNS", 2)  # runs merged on disk before the end, too
    monkeypatch.setattr(sim, "CONVERT_ROWS", 1)  # batches of one: some hold only sessions without flags
    writer = ShardWriter(tmp_path / "direct", 0, 3, run_rows=3)
    for r in records:
        writer.add(r)
    assert writer.runs_written == len(records) // 3 and len(writer._runs) <= 2
    writer.close()
    parquet, jsonl = writer.parquet, writer.jsonl
    got = pq.read_table(parquet)
    meta = pq.ParquetFile(parquet).metadata
    assert got.num_rows == len(records)
    # A shard of several: the merge decodes one row group per shard at a time, so they stay small.
    assert max(meta.row_group(i).num_rows for i in range(meta.num_row_groups)) <= sim.SHARD_ROW_GROUP
    assert not pa.types.is_null(got.schema.field("counsellor_flags").type.value_type)  # typed where flags were
    expected = sorted(records, key=sim._order)
    assert [r["session_id"] for r in got.to_pylist()] == [r.session_id for r in expected]
    assert [json.loads(line)["id"] for line in jsonl.read_text().splitlines()] == [r.session_id for r in expected]
    assert not list(parquet.parent.glob(".runs-*"))


def test_text_with_tabs_line_breaks_and_other_separators_survives_the_runs(tmp_path):
    """A run line is JSON fields joined by tabs, one session a line: text holding tabs, line breaks, Unicode line
    separators, quotes and emoji must come back exactly, in the parquet rows and in the transcripts."""
    from mindsimkit.mindsim.records import SessionRecord
    from mindsimkit.mindsim.simulate import SessionStore, ShardWriter

    simulate(tmp_path / "src", profiles=[make_profile("p0", "joker"), make_profile("p\t1", "stoic")])
    odd = ["a\tb", "line\nbreak\r\n", "sep\u2028x\u0085y", 'quote " and \\ back', "emoji \U0001f642"]
    records = []
    for r in SessionStore(tmp_path / "src").all():
        d = r.model_dump(mode="json")
        d["memory_after"] = odd
        d["counsellor_messages"] = [
            {**m, "content": m["content"] + odd[len(records) % len(odd)]} for m in d["counsellor_messages"]
        ]
        records.append(SessionRecord.model_validate(d))
    out = {}
    for name, run_rows in (("held", 10_000), ("spilled", 1)):
        writer = ShardWriter(tmp_path / name, 0, 1, run_rows=run_rows)
        for r in records:
            writer.add(r)
        writer.close()
        out[name] = (pq.read_table(writer.parquet).to_pylist(), writer.jsonl.read_text(encoding="utf-8"))
    assert out["spilled"] == out["held"]
    rows, text = out["spilled"]
    assert len(rows) == len(records) and all(r["memory_after"] == odd for r in rows)
    assert len(text.splitlines()) > len(records)  # str.splitlines breaks at U+2028 too ...
    lines = text.split("\n")[:-1]  # ... a JSONL reader splits at "\n" only, and gets one session a line
    assert [json.loads(line)["id"] for line in lines] == [r["session_id"] for r in rows]


def test_profiles_read_from_a_folder_are_held_packed_and_give_the_same_dataset(tmp_path, monkeypatch):
    """Profiles read lazily (`iter_profiles`, as `mindsim simulate` and the main job read them) are checked a few
    at a time and held packed until their patient runs; a list the caller passes is used as it is. Both give the
    same files; a bad or repeated profile late in the input still fails before any request."""
    from mindsimkit.mindsim import simulate as sim
    from mindsimkit.profilegen.dataset import PackedProfile, iter_profiles, write_profiles

    monkeypatch.setattr(sim, "CHECK_ROWS", 2)
    profiles = [make_profile(f"p{i}", arch) for i, arch in enumerate(["joker", "stoic", "joker", "stoic", "joker"])]
    write_profiles(profiles, tmp_path / "profiles")
    held = []
    prepare = sim._prepare
    monkeypatch.setattr(sim, "_prepare", lambda *a: (held.append(prepare(*a)), held[-1])[1])
    listed, _ = simulate(tmp_path / "list", profiles=profiles)
    read, _ = simulate(tmp_path / "read", profiles=iter_profiles(tmp_path / "profiles", pool_only=False))
    assert all(a is b for a, b in zip(held[0], profiles, strict=True))  # the caller's objects, not copies
    assert all(isinstance(p, PackedProfile) for p in held[1]) and [p.unpack() for p in held[1]] == profiles
    assert _files(tmp_path / "read") == _files(tmp_path / "list") and read.sessions_written == 10
    assert read.model_dump(exclude={"elapsed_s", "created_utc", "usage"}) == listed.model_dump(
        exclude={"elapsed_s", "created_utc", "usage"}
    )

    def late(bad):  # four good profiles, then the bad one: the third batch of two
        return iter([*profiles[:4], bad])

    for bad, match in (
        (make_profile("p9", "nope"), "archetype 'nope'"),
        (profiles[1], r"duplicate profile_id values \(p1\)"),
    ):
        out = tmp_path / f"late-{bad.profile_id}"
        with pytest.raises(InputError, match=match):
            simulate(out, profiles=late(bad))
        assert not (out / "sessions").exists()


def test_a_field_only_later_sessions_have_reaches_the_table(tmp_path):
    """pyarrow's from_pylist takes its columns from the first row: a field that only some sessions carry (the
    MindSim patient's `patient_tools`, absent for other engines) must still become a column."""
    from mindsimkit.mindsim.simulate import _write_lines

    rows = [{"session_id": "a", "n": 1}, {"session_id": "b", "n": 2, "patient_tools": "[]"}]
    lines = [f'["{r["session_id"]}"]\t{json.dumps(r)}\t{{}}\n' for r in rows]
    parquet, jsonl = tmp_path / "s.parquet", tmp_path / "t.jsonl"
    assert _write_lines(lambda: [iter(lines)], parquet, jsonl, 128) == 2
    assert pq.read_table(parquet).to_pylist() == [
        {"session_id": "a", "n": 1, "patient_tools": None},
        {"session_id": "b", "n": 2, "patient_tools": "[]"},
    ]
