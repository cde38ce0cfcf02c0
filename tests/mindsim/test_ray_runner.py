"""The Ray runner, which spreads a large run over a cluster: same outputs as the local runner, nothing lost or
duplicated when a worker is killed mid-run, and a rerun after the driver is SIGKILLed resumes.

One local Ray cluster (2 CPUs) serves the whole module. The deterministic fake engine is the unit
tests' `SimResponder` (and profilegen's fakes) behind `tests/openai_stub.py`: Ray workers are other
processes, so they reach it over HTTP on 127.0.0.1, as they would reach a real model server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

import ray  # noqa: E402

from arc_checks import check_arc_ledger  # noqa: E402
from killing import kill_when  # noqa: E402
from mindsimkit.mindcore.config import EnginesConfig, OpenAIEngine, RoleSpec  # noqa: E402
from mindsimkit.mindcore.engine import Engines  # noqa: E402
from mindsimkit.mindcore.recipe import RaySettings  # noqa: E402
from mindsimkit.mindcore.runners import RayRunner  # noqa: E402
from mindsimkit.mindsim.config import SimulationConfig  # noqa: E402
from mindsimkit.mindsim.records import ScenarioRecord, session_id  # noqa: E402
from mindsimkit.mindsim.scenario import Scenario  # noqa: E402
from mindsimkit.mindsim.simulate import ScenarioStore, run_simulation  # noqa: E402
from openai_stub import OpenAIStub, from_responder  # noqa: E402
from simfakes import SCENARIO, SimResponder, make_profile  # noqa: E402

SIM_ROLES = ["patient", "scenario_writer", "memory_compactor", "counsellor", "counsellor:b"]
PATIENTS = ["r1", "r2", "r3", "r4", "r5"]
COUNSELLORS = ["counsellor", "counsellor:b"]
# Fields that say when or how long, not what: they differ between any two runs.
TIMING = {"elapsed_s", "latency_s", "started_at", "finished_at", "created_at", "wall_s"}


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def slowed(behaviour, delay_s: float):
    def behave(body):
        time.sleep(delay_s)
        return behaviour(body)

    return behave


@pytest.fixture
def stub():
    with OpenAIStub(from_responder(SimResponder(end_after=3))) as s:
        s.serve(*SIM_ROLES)
        yield s


def engines_on(stub: OpenAIStub, cap: int = 8) -> Engines:
    return Engines.from_config(
        EnginesConfig(
            engines={"stub": OpenAIEngine(base_url=stub.base_url, model="m", native_tools=False, max_concurrency=cap)},
            roles={"default": RoleSpec(engine="stub"), **{r: RoleSpec(engine="stub", model=r) for r in SIM_ROLES}},
        )
    )


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in TIMING}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def _sessions(out: Path) -> list[dict]:
    return _strip(pq.read_table(out / "sessions" / "sessions.parquet").to_pylist())


def _config(sessions: int = 2) -> SimulationConfig:
    return SimulationConfig(sessions=sessions, turn_cap=3, counsellors=COUNSELLORS)


def test_ray_sessions_equal_the_local_runners(cluster, stub, tmp_path):
    profiles = [make_profile(p, a) for p, a in zip(PATIENTS, ["minimiser", "joker", "stoic", "venter", "minimiser"])]
    with engines_on(stub) as engines:
        local = run_simulation(profiles, engines, _config(), tmp_path / "local", seed=4)
    with engines_on(stub) as engines:
        remote = run_simulation(
            profiles,
            engines,
            _config(),
            tmp_path / "ray",
            seed=4,
            runner=RayRunner(RaySettings(workers=2, shards_per_worker=2)),
        )
        usage = engines.ledger.summary()
    assert remote.runner["runner"] == "ray" and remote.runner["shards"] == 4
    assert local.sessions_written == remote.sessions_written == len(PATIENTS) * 2 * 2
    assert _sessions(tmp_path / "local") == _sessions(tmp_path / "ray")
    assert (tmp_path / "local" / "transcripts" / "transcripts.jsonl").read_bytes() == (
        tmp_path / "ray" / "transcripts" / "transcripts.jsonl"
    ).read_bytes()
    for key in (
        "ended_by_patient",
        "rejected_commits",
        "rejected_messages",
        "counsellor_flags",
        "failed_arcs",
        "memory_repaired",
        "arcs",
        "sessions_expected",
    ):
        assert getattr(local, key) == getattr(remote, key), key
    # Every worker's calls reached the driver's ledger: the same calls as the local run made.
    assert {r: u["calls"] for r, u in usage.items()} == {r: u["calls"] for r, u in local.usage.items()}


def test_runner_choice_is_outside_the_recipe_hash(tmp_path):
    from mindsimkit.mindcore.recipe import load_recipe
    from mindsimkit.mindsim_app.job import _recipe_hash

    base = "name: x\nengines:\n  local: {kind: embedded}\nroles:\n  default: {engine: local}\n"
    (tmp_path / "a.yaml").write_text(base)
    (tmp_path / "b.yaml").write_text(base + "runner: ray\nray: {workers: 3, address: auto}\n")
    a, b = load_recipe(tmp_path / "a.yaml"), load_recipe(tmp_path / "b.yaml")
    assert (a.runner, b.runner) == ("local", "ray") and _recipe_hash(a) == _recipe_hash(b)
    assert "runner" not in a.content_dump() and "ray" not in b.content_dump()
    assert a.with_runner(None, env={}).runner == "local"
    chosen = a.with_runner(None, env={"RAY_ADDRESS": "10.0.0.1:6379"})
    assert (chosen.runner, chosen.ray.address, chosen.path) == ("ray", "10.0.0.1:6379", a.path)
    assert a.with_runner("auto", env={"RAY_ADDRESS": "elsewhere:1"}).ray.address == "auto"
    assert b.with_runner(None, env={}).ray.workers == 3


def _finish_reasons(obj, value):
    if isinstance(obj, dict):
        return {k: value if k == "finish_reason" else _finish_reasons(v, value) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finish_reasons(v, value) for v in obj]
    return obj


def test_merge_streams_shards_in_one_order_promotes_null_columns_and_drops_stale_files(tmp_path):
    from mindsimkit.mindcore.engine import Engines as E
    from mindsimkit.mindcore.fake import FakeBackend
    from mindsimkit.mindsim.records import SessionRecord
    from mindsimkit.mindsim.simulate import SessionStore, merge_shards, write_shard

    with E.with_backend(FakeBackend(SimResponder(end_after=3))) as engines:
        run_simulation([make_profile(p) for p in PATIENTS[:3]], engines, _config(), tmp_path, seed=1)
    merged = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist()
    records = SessionStore(tmp_path).all()
    # Shard 0 never saw a finish reason (its column is typed null there); shard 2 did.
    odd = [
        SessionRecord.model_validate(_finish_reasons(r.model_dump(mode="json"), None))
        for r in records
        if r.patient_id != "r2"
    ]
    write_shard(tmp_path, 0, 3, odd)
    write_shard(tmp_path, 2, 3, [r for r in records if r.patient_id == "r2"])
    stale = tmp_path / "sessions" / "shards" / "00001-of-00003.parquet"
    stale.write_bytes((tmp_path / "sessions" / "shards" / "00000-of-00001.parquet").read_bytes())
    assert merge_shards(tmp_path, 3, {0, 2}, batch_rows=3) == len(records)
    assert not stale.exists() and not (tmp_path / "sessions" / "shards" / "00000-of-00001.parquet").exists()
    rows = pq.read_table(tmp_path / "sessions" / "sessions.parquet").to_pylist()
    key = lambda r: (r["counsellor"], r["patient_id"], r["session_index"])  # noqa: E731
    assert [key(r) for r in rows] == sorted(key(r) for r in merged) == [key(r) for r in merged]
    assert [r["session_id"] for r in rows] == [r["session_id"] for r in merged]
    reasons = {t.get("finish_reason") for r in rows if r["patient_id"] == "r2" for t in _walk(r)}
    assert "stop" in reasons
    lines = [json.loads(line) for line in (tmp_path / "transcripts" / "transcripts.jsonl").read_text().splitlines()]
    assert [line["id"] for line in lines] == [r["session_id"] for r in rows]


def _walk(obj):
    if isinstance(obj, dict):
        if "finish_reason" in obj:
            yield obj
        for v in obj.values():
            yield from _walk(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk(v)


def _ckpts(out: Path) -> dict[str, bytes]:
    d = out / "sessions" / "checkpoints"
    return {p.name: p.read_bytes() for p in d.glob("*.json")} if d.is_dir() else {}


def test_a_killed_worker_loses_and_duplicates_nothing(cluster, tmp_path):
    from mindsimkit.mindcore.shards import plan_shards

    profiles = [make_profile(p) for p in PATIENTS]
    total = len(PATIENTS) * len(COUNSELLORS) * 3
    out = tmp_path / "run"
    pids: list[int] = []
    seen: dict[str, bytes] = {}
    killed = threading.Event()
    settings = RaySettings(workers=2, shards_per_worker=2)

    def grab(actors):
        pids.extend(ray.get([a.pid.remote() for a in actors]))
        threading.Thread(target=kill_first_worker, daemon=True).start()

    def kill_first_worker():
        deadline = time.monotonic() + 60
        while not _ckpts(out) and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(pids[0], signal.SIGKILL)
        seen.update(_ckpts(out))
        killed.set()

    with OpenAIStub(slowed(from_responder(SimResponder(end_after=99)), 0.01)) as stub:
        stub.serve(*SIM_ROLES)
        with engines_on(stub) as engines:
            summary = run_simulation(
                profiles, engines, _config(sessions=3), out, 4, runner=RayRunner(settings, on_workers=grab)
            )
    assert killed.wait(5) and 1 <= len(seen) < total, "the kill must land mid-run"
    expected = {session_id(p, c, i, 4) for p in PATIENTS for c in COUNSELLORS for i in range(3)}
    # The killed worker (rank 0) was handed the first shard and takes another only once that one is done, so
    # the first shard still missing sessions at the kill proves the worker died holding unfinished work; the
    # run's ending with all of them proves that shard was retried and finished after the kill.
    plan = plan_shards(profiles, lambda p: p.profile_id, settings)
    assert plan.shards == summary.runner["shards"]
    first = plan.parts[0][1]
    held = {f"{session_id(p.profile_id, c, i, 4)}.json" for p in first for c in COUNSELLORS for i in range(3)}
    assert held - set(seen), "the killed worker had already finished its shard"
    assert held <= set(_ckpts(out))
    assert not summary.failed_arcs and summary.sessions_written == total
    ids = pq.read_table(out / "sessions" / "sessions.parquet", columns=["session_id"]).column(0).to_pylist()
    assert len(ids) == len(set(ids)) and set(ids) == expected
    assert {n.removesuffix(".json") for n in _ckpts(out)} == expected
    # What was finished before the kill is kept as it was: the retried shard skipped it.
    assert {n: b for n, b in _ckpts(out).items() if n in seen} == seen
    lines = (out / "transcripts" / "transcripts.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["id"] for line in lines) == sorted(expected)


def test_judging_on_ray_gives_the_local_paths_rows(cluster, tmp_path):
    sys.path.insert(0, str(TESTS / "judge"))
    from mindsimkit.judge.config import JudgeConfig
    from mindsimkit.judge.inputs import load_sessions
    from mindsimkit.judge.judging import judge_all, judges_from_config
    from mindsimkit.judge.sharded import judge_rows
    from judgefakes import fake_judge, write_run
    from mindsimkit.mindcore.io import CheckpointDir

    inputs = load_sessions(write_run(tmp_path / "run"))
    config = JudgeConfig()
    with OpenAIStub(from_responder(fake_judge)) as judge_server:
        judge_server.serve("gpt-5-judge")
        cfg = EnginesConfig(
            engines={"stub": OpenAIEngine(base_url=judge_server.base_url, model="gpt-5-judge", native_tools=False)},
            roles={"default": RoleSpec(engine="stub", temperature=0.0)},
        )
        with Engines.from_config(cfg) as engines:
            local = engines.run(
                judge_all(
                    judges_from_config(engines, config), inputs, CheckpointDir(tmp_path / "a"), config.max_replies
                )
            )
            remote = judge_rows(
                engines, config, inputs, tmp_path / "b", RayRunner(RaySettings(workers=2, shards_per_worker=2))
            )
            calls = engines.ledger.summary()["judge"]["calls"]
    assert len(local) == len(remote) == 12 and all(r.status == "ok" for r in remote)
    assert [_strip(r.model_dump(mode="json")) for r in local] == [_strip(r.model_dump(mode="json")) for r in remote]
    assert calls == 2 * len(local)  # the workers' calls reached the driver's ledger
    assert len(list((tmp_path / "b").glob("*.json"))) == len(remote)


def test_ray_workers_render_the_recipes_own_prompts(cluster, tmp_path):
    """A recipe's `prompts:` override reaches the Ray workers as text (the file is gone before they start)
    and is what they send; the rows record its hash."""
    sys.path.insert(0, str(TESTS / "judge"))
    from mindsimkit.judge.config import JudgeConfig
    from mindsimkit.judge.inputs import load_sessions
    from mindsimkit.judge.sharded import judge_rows
    from judgefakes import fake_judge, write_run
    from mindsimkit.mindcore.prompts import install_overrides, load_overrides, template_hash

    mine = tmp_path / "judge_user.jinja2"
    mine.write_text("OWN JUDGE PROMPT, reply {{ reply_number }}\n{{ counsellor_system_prompt }}\n{{ transcript }}\n")
    install_overrides(load_overrides({"judge/user.jinja2": str(mine)}, tmp_path))
    mine.unlink()
    inputs = load_sessions(write_run(tmp_path / "run"))
    with OpenAIStub(from_responder(fake_judge)) as judge_server:
        judge_server.serve("gpt-5-judge")
        cfg = EnginesConfig(
            engines={"stub": OpenAIEngine(base_url=judge_server.base_url, model="gpt-5-judge", native_tools=False)},
            roles={"default": RoleSpec(engine="stub", temperature=0.0)},
        )
        with Engines.from_config(cfg) as engines:
            rows = judge_rows(
                engines, JudgeConfig(), inputs, tmp_path / "b", RayRunner(RaySettings(workers=2, shards_per_worker=2))
            )
        users = [b["messages"][-1]["content"] for b in judge_server.requests]
    assert rows and all(r.status == "ok" for r in rows)
    assert users and all(u.startswith("OWN JUDGE PROMPT, reply") for u in users)
    assert {r.prompt_hashes["judge/user.jinja2"] for r in rows} == {template_hash("judge/user.jinja2")}


def test_arc_labels_on_ray_equal_the_local_paths_and_fold_into_one_cache(cluster, tmp_path):
    import hashlib

    from mindsimkit.validation.arc import LabelCache, label_conversations
    from mindsimkit.validation.sharded import label_arcs
    from mindsimkit.validation.transcripts import Conversation

    def labeller(req):  # a deterministic label from the turn's text
        text = req.messages[-1]["content"]
        return {"label": "PTCF"[int(hashlib.sha256(text.encode()).hexdigest(), 16) % 4]}

    convs = [
        Conversation(
            conversation_id=f"c{i}",
            patient_id=f"p{i % 4}",
            messages=[
                {"role": "user" if k % 2 == 0 else "assistant", "content": f"conversation {i} message {k}"}
                for k in range(6)
            ],
        )
        for i in range(8)
    ]
    kw = dict(patient_role="user", context_messages=2, max_tokens=16, description="arc labels")
    with OpenAIStub(from_responder(labeller)) as server:
        server.serve("labeller")
        cfg = EnginesConfig(
            engines={"stub": OpenAIEngine(base_url=server.base_url, model="labeller", native_tools=False)},
            roles={"default": RoleSpec(engine="stub", temperature=0.0)},
        )
        with Engines.from_config(cfg) as engines:
            local = engines.run(label_conversations(convs, engines.role("labeller"), cache=LabelCache(None), **kw))
            cache = LabelCache(tmp_path / "arc_cache.jsonl")
            ray_runner = RayRunner(RaySettings(workers=2, shards_per_worker=2))
            remote = engines.run(label_arcs(convs, engines, ray_runner, cache=cache, **kw))
            again = engines.run(
                label_arcs(convs, engines, ray_runner, cache=LabelCache(tmp_path / "arc_cache.jsonl"), **kw)
            )
    assert remote.labels == local.labels and remote.failed == 0 and remote.calls == local.calls == 24
    # The workers' shard files are folded into the one cache file, and a rerun sends no request.
    assert not list(tmp_path.glob("arc_cache.shard-*.jsonl"))
    assert len(LabelCache(tmp_path / "arc_cache.jsonl").labels) == 24
    assert again.labels == local.labels and again.calls == 0 and again.cached == 24


# ---------------------------------------------------------------- the whole job, driver SIGKILLed


def _job_recipe(path: Path, stub: OpenAIStub) -> Path:
    roles = ["profile_writer", "screener", "labeller", *SIM_ROLES]
    stub.serve(*roles)
    path.write_text(
        f"name: raytest\nseed: 3\nengines:\n  stub: {{kind: openai, base_url: '{stub.base_url}', model: m, "
        "native_tools: false, max_concurrency: 8}\nroles:\n  default: {engine: stub}\n"
        + "".join(f"  {r!r}: {{engine: stub, model: {r!r}}}\n" for r in roles)
        + "profiles: {personas: synthetic, candidates: 4, pool_size: 3, benchmark_size: 1, pool_verdicts: [clean, minor]}\n"
        "simulation: {sessions: 2, turn_cap: 3, counsellors: [counsellor, 'counsellor:b']}\n"
        "validation: {bootstrap_draws: 20, floor_splits: 5}\n"
        "ray: {workers: 2, shards_per_worker: 2, profile_replicas: 2}\n"
    )
    return path


def _job_responder():
    import importlib.util

    spec = importlib.util.spec_from_file_location("profilegen_fakes_ray", TESTS / "profilegen" / "conftest.py")
    pg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pg)
    sim = SimResponder(end_after=99)

    def respond(req):
        if req.role == "profile_writer":
            return pg.draft_for(req)
        return pg.clean_verdict(req) if req.role == "screener" else sim(req)

    return respond


@pytest.mark.slow
def test_job_on_ray_resumes_after_the_driver_is_killed_and_equals_the_local_run(cluster, tmp_path):
    from mindsimkit.mindsim_app.job import run_job

    with OpenAIStub(slowed(from_responder(_job_responder()), 0.01)) as stub:
        recipe = _job_recipe(tmp_path / "r.yaml", stub)
        local = tmp_path / "local"
        run_job(recipe, local)
        out = tmp_path / "ray"
        cmd = [sys.executable, "-m", "mindsimkit.mindsim", "run", str(recipe), "--out", str(out), "--ray", cluster]
        # Generous limits: a loaded CI machine starts Ray workers slowly; nothing here times the run.
        kill_when(cmd, lambda: bool(_ckpts(out)), timeout_s=400, poll_s=0.02)
        before = _ckpts(out)
        assert before and not (out / "sessions" / "sessions.parquet").exists(), "the kill must land mid-simulation"
        rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
        assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert {n: b for n, b in _ckpts(out).items() if n in before} == before
    a, b = (json.loads((d / "run.json").read_text()) for d in (local, out))
    assert a["recipe_hash"] == b["recipe_hash"] and a["counts"] == b["counts"]
    assert (a["runner"]["name"], b["runner"]["name"]) == ("local", "ray")
    assert b["runner"]["simulation"]["runner"] == "ray" and b["usage"]["patient"]["calls"] > 0
    assert (
        pq.read_table(local / "profiles" / "profiles.parquet").to_pylist()
        == pq.read_table(out / "profiles" / "profiles.parquet").to_pylist()
    )
    assert _sessions(local) == _sessions(out)
    ids = [r["session_id"] for r in _sessions(out)]
    assert len(ids) == len(set(ids)) == 3 * 2 * 2
    assert (local / "transcripts" / "transcripts.jsonl").read_bytes() == (
        out / "transcripts" / "transcripts.jsonl"
    ).read_bytes()


# ---------------------------------------------------------------- the real embedded engine (integrator runs it)


@pytest.mark.embedded
@pytest.mark.slow
def test_the_embedded_engine_runs_under_the_ray_runner(cluster, embedded_engines, tmp_path):
    """One llama.cpp server, started by the driver and shared by both workers (at its URL on
    127.0.0.1), not one per worker: on two cores a second server only splits the same cores and
    memory, prompt evaluation does not speed up with more servers (NOTES §2), and one server keeps
    the shared first scenario's prefix in one cache. Its `parallel` slots are the global cap the
    workers share. On a multi-node cluster the embedded engine is not reachable from other nodes:
    use `kind: vllm` / `kind: openai` servers there (docs/scale.md).

    The patients are MindEval baselines (a mapper call, then one request a turn): what is under test is the
    workers' calls reaching the driver's server, which every engine makes alike, and on 2 cores a MindSim turn's
    four long-prompt requests would cost the suite minutes here (docs/baselines.md "Cost per patient turn");
    the MindSim patient on Ray is pinned against the local runner on the fake engine above."""
    before = embedded_engines.ledger.summary().get("patient", {}).get("calls", 0)
    profiles = [make_profile("e1"), make_profile("e3", "joker")]  # stable_shard puts them in shards 0 and 1
    # The first scenarios are checkpointed in advance, so the workers resume them: the scenario writer already
    # runs on this engine in the quickstart, and what is under test is the workers' patient and counsellor
    # calls reaching the driver's server. Quickstart-sized messages keep the 135M model's turns short.
    store = ScenarioStore(tmp_path)
    for p in profiles:
        store.save(
            ScenarioRecord(
                patient_id=p.profile_id, seed=1, scenario=Scenario.model_validate(SCENARIO), engine={}, prompt={}
            )
        )
    config = SimulationConfig(
        sessions=1,
        turn_cap=2,
        patient_engine="mindeval",
        final_memory=False,
        message_max_tokens=80,
        max_message_retries=3,
        trim_cut_off=True,
    )
    # A 135M model may sink an arc; a rerun resumes (finished sessions kept, failed arcs retried), bounded.
    for _ in range(3):
        summary = run_simulation(
            profiles,
            embedded_engines,
            config,
            tmp_path,
            seed=1,
            runner=RayRunner(RaySettings(workers=2, shards_per_worker=1)),
        )
        assert summary.runner == {"runner": "ray", "workers": 2, "shards": 2}
        # Every arc either wrote its one session or is counted as failed; the dataset is the checkpoints.
        assert summary.sessions_written + len(summary.failed_arcs) == summary.arcs == 2
        check_arc_ledger(tmp_path, sessions=1)
        if summary.sessions_written:
            break
    assert embedded_engines.ledger.summary()["patient"]["calls"] > before  # the workers' calls reached the driver
    assert summary.sessions_written, f"both arcs failed in 3 runs: {summary.failed_arcs}"
    ids = pq.read_table(tmp_path / "sessions" / "sessions.parquet", columns=["session_id"]).column(0).to_pylist()
    assert len(ids) == len(set(ids)) == summary.sessions_written
