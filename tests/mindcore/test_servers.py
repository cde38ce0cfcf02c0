"""Several servers behind one engine, against two local stub servers: least-outstanding spread,
session affinity, failing servers routed around without failing requests, 429 Retry-After honoured
per server, per-server usage in the ledger, the recipe fields, and a worker's share of a global cap."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from pathlib import Path

import pytest

from mindsimkit.mindcore.backends import OpenAIBackend, _retry_after, worker_caps
from mindsimkit.mindcore.config import EnginesConfig, OpenAIEngine, RoleSpec, VLLMEngine
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import ConfigError, TransportError
from mindsimkit.mindcore.recipe import load_recipe
from mindsimkit.mindcore.types import CallRecord, ChatRequest, UsageLedger

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stub_servers import StubServer  # noqa: E402


def request(affinity: str | None = None, text: str = "hello there") -> ChatRequest:
    return ChatRequest(role="patient", model="m", messages=[{"role": "user", "content": text}], affinity=affinity)


def backend(*stubs: StubServer, **kw) -> OpenAIBackend:
    kw.setdefault("max_concurrency", 8)
    kw.setdefault("timeout_s", 5.0)
    return OpenAIBackend("pool", base_urls=[s.base_url for s in stubs], default_model="m", **kw)


async def send(b: OpenAIBackend, reqs: list[ChatRequest], in_flight: int):
    sem = asyncio.Semaphore(in_flight)

    async def one(r: ChatRequest):
        async with sem:
            return await b.complete(r)

    try:
        return await asyncio.gather(*(one(r) for r in reqs))
    finally:
        await b.aclose_loop()


def test_least_outstanding_splits_evenly_without_affinity():
    with StubServer("a", latency_s=0.01) as a, StubServer("b", latency_s=0.01) as b:
        replies = asyncio.run(send(backend(a, b), [request() for _ in range(200)], in_flight=12))
        assert a.served() + b.served() == 200
        assert abs(a.served() - 100) <= 10 and abs(b.served() - 100) <= 10, (a.served(), b.served())
        # Each reply names the server that answered it, and that server saw it.
        assert sum(r.server == a.base_url for r in replies) == a.served()
        # The cap is per server: neither stub ever held more than max_concurrency at once.
        assert max(a.max_in_flight, b.max_in_flight) <= 8


def test_sequential_calls_alternate():
    with StubServer("a") as a, StubServer("b") as b:
        asyncio.run(send(backend(a, b), [request() for _ in range(10)], in_flight=1))
        assert a.served() == 5 and b.served() == 5


def test_affinity_keeps_a_session_on_one_server():
    with StubServer("a", latency_s=0.005) as a, StubServer("b", latency_s=0.005) as b:
        pool = backend(a, b)

        async def session(sid: str) -> list[str]:
            return [(await pool.complete(request(affinity=sid))).server for _ in range(6)]

        async def main():
            try:
                return await asyncio.gather(*(session(f"s{i}") for i in range(10)))
            finally:
                await pool.aclose_loop()

        per_session = asyncio.run(main())
        for servers in per_session:
            assert len(set(servers)) == 1, servers
        homes = [servers[0] for servers in per_session]
        # Sessions themselves are spread: new keys go to the least busy server.
        assert homes.count(a.base_url) == 5 and homes.count(b.base_url) == 5


def test_affinity_moves_only_when_home_is_a_whole_batch_busier():
    pool = OpenAIBackend(
        "pool", base_urls=["http://127.0.0.1:1/v1", "http://127.0.0.1:2/v1"], default_model="m", max_concurrency=4
    )
    first, _ = pool._choose("s1", set())
    home, other = pool.servers[first], pool.servers[1 - first]
    home.outstanding, other.outstanding = 3, 0  # 3 more than the other: below a batch of 4, stay
    assert pool._choose("s1", set())[0] == first
    home.outstanding = 4  # a whole batch busier: move, and stay on the new server afterwards
    assert pool._choose("s1", set())[0] == 1 - first
    home.outstanding = 0
    assert pool._choose("s1", set())[0] == 1 - first
    other.outstanding = 5  # busier, so only being out of rotation keeps the idle server from winning
    home.out_until = time.monotonic() + 60  # out of rotation: not chosen even when it is the least busy
    assert pool._choose("s2", set())[0] == 1 - first


def test_server_answering_500_is_taken_out_without_failing_requests(caplog):
    with StubServer("a", latency_s=0.005) as a, StubServer("b", latency_s=0.005) as b:
        pool = backend(a, b, failure_limit=3, cooldown_s=30)
        with caplog.at_level(logging.WARNING, logger="mindsimkit.mindcore.backends"):
            asyncio.run(send(pool, [request() for _ in range(20)], in_flight=4))
            b.status = 500
            replies = asyncio.run(send(pool, [request() for _ in range(60)], in_flight=4))
        assert all(r.server == a.base_url for r in replies) and len(replies) == 60
        errors_on_b = sum(1 for h in b.hits if h.status == 500)
        assert 3 <= errors_on_b <= 3 + 4  # the failures in a row, plus requests already on their way
        lines = [r.getMessage() for r in caplog.records if "taken out of rotation" in r.getMessage()]
        assert len(lines) == 1 and "'pool'" in lines[0] and b.base_url in lines[0]
        assert pool.server_stats()[b.base_url]["taken_out"] == 1


def test_server_refusing_connections_is_taken_out_without_failing_requests(caplog):
    with StubServer("a") as a, StubServer("b") as b:
        pool = backend(a, b, failure_limit=2, cooldown_s=30)
        b.stop()
        with caplog.at_level(logging.WARNING, logger="mindsimkit.mindcore.backends"):
            reqs = [request(affinity=f"s{i % 3}" if i % 2 else None) for i in range(30)]
            replies = asyncio.run(send(pool, reqs, in_flight=3))
        assert len(replies) == 30 and {r.server for r in replies} == {a.base_url}
        assert sum("taken out of rotation" in r.getMessage() for r in caplog.records) == 1


def test_cooled_down_server_comes_back():
    with StubServer("a") as a, StubServer("b") as b:
        pool = backend(a, b, failure_limit=1, cooldown_s=0.3)
        b.script.append((500, {}))
        asyncio.run(send(pool, [request() for _ in range(6)], in_flight=1))
        assert pool.server_stats()[b.base_url]["taken_out"] == 1
        time.sleep(0.35)
        served_before = b.served()
        asyncio.run(send(pool, [request() for _ in range(6)], in_flight=1))
        assert b.served() - served_before == 3


def test_all_servers_down_fails_with_a_clear_error():
    with StubServer("a") as a, StubServer("b") as b:
        pool = backend(a, b)
        a.stop()
        b.stop()
        with pytest.raises(TransportError, match="could not connect.*Is the server running"):
            asyncio.run(send(pool, [request()], in_flight=1))


def test_429_retry_after_is_honoured_on_a_single_server():
    with StubServer("a") as a:
        a.script.append((429, {"Retry-After": "1"}))
        t0 = time.monotonic()
        (reply,) = asyncio.run(send(backend(a), [request()], in_flight=1))
        assert reply.content == "reply from a"
        gap = a.hits[1].at - a.hits[0].at
        assert 1.0 <= gap < 2.0, gap
        assert time.monotonic() - t0 >= 1.0


def test_429_sends_traffic_to_the_other_server_for_the_window_only():
    with StubServer("a") as a, StubServer("b") as b:
        pool = backend(a, b)
        a.script.append((429, {"Retry-After": "1"}))
        t0 = time.monotonic()
        replies = asyncio.run(send(pool, [request() for _ in range(8)], in_flight=1))
        elapsed = time.monotonic() - t0
        assert elapsed < 0.9  # nobody waited: b took the traffic while a asked for a pause
        assert all(r.server == b.base_url for r in replies) and a.count == 1
        window_end = pool.servers[0].wait_until
        assert 1.0 <= window_end - a.hits[0].at < 1.5
        time.sleep(max(0.0, window_end - time.monotonic()) + 0.01)
        asyncio.run(send(pool, [request() for _ in range(4)], in_flight=1))
        assert a.served() == 2 and pool.server_stats()[a.base_url]["rate_limited"] == 1


def test_retry_after_forms():
    assert _retry_after({"retry-after": "2.5"}) == 2.5
    assert _retry_after({"retry-after-ms": "1500"}) == 1.5
    assert _retry_after({}) is None and _retry_after({"retry-after": "soon"}) is None
    from email.utils import formatdate

    when = _retry_after({"retry-after": formatdate(time.time() + 30, usegmt=True)})
    assert 28 <= when <= 31
    assert _retry_after({"retry-after": formatdate(time.time() - 30, usegmt=True)}) == 0.0


def test_per_server_usage_in_the_ledger():
    with StubServer("a") as a, StubServer("b") as b:
        replies = asyncio.run(send(backend(a, b), [request(text="one two three four")] * 6, in_flight=2))
    ledger = UsageLedger()
    for r in replies:  # as RoleClient records a call
        ledger.add(
            CallRecord(
                role="patient",
                engine="pool",
                model="m",
                kind="chat",
                ok=True,
                prompt_tokens=r.prompt_tokens,
                completion_tokens=r.completion_tokens,
                cached_tokens=r.cached_tokens,
                latency_s=0.01,
                server=r.server,
            )
        )
    ledger.add(
        CallRecord(
            role="judge",
            engine="x",
            model="m",
            kind="chat",
            ok=False,
            prompt_tokens=0,
            completion_tokens=0,
            cached_tokens=0,
            latency_s=0.0,
        )
    )
    summary = ledger.summary()
    patient = summary["patient"]
    assert patient["calls"] == 6 and patient["prompt_tokens"] == 24 and patient["engine"] == "pool"
    # Least-outstanding picking sends a freed slot's next request to whichever server answered first, so the
    # split depends on timing; what the ledger must get right is each server's own share.
    calls = {k: v["calls"] for k, v in patient["servers"].items()}
    assert set(calls) == {a.base_url, b.base_url} and sum(calls.values()) == 6
    assert calls == {u: sum(r.server == u for r in replies) for u in calls}
    for u, n in calls.items():
        assert patient["servers"][u]["completion_tokens"] == 3 * n  # the stub answers 3 tokens a call
    assert summary["judge"]["servers"] == {} and summary["judge"]["failed"] == 1
    assert set(ledger.by_server()) == {a.base_url, b.base_url}


def test_engines_from_config_spread_a_role_over_base_urls():
    with StubServer("a") as a, StubServer("b") as b:
        cfg = EnginesConfig(
            engines={"pool": OpenAIEngine(base_urls=[a.base_url, b.base_url], model="m")},
            roles={"default": RoleSpec(engine="pool")},
        )
        with Engines.from_config(cfg) as engines:
            client = engines.role("patient")

            async def main():
                return [await client.chat([{"role": "user", "content": "hi"}], affinity="s1") for _ in range(3)]

            engines.run(main())

            async def spread():
                return await asyncio.gather(*(client.chat([{"role": "user", "content": "x"}]) for _ in range(4)))

            both = engines.run(spread())
        his = sorted(sum(h.body["messages"][0]["content"] == "hi" for h in stub.hits) for stub in (a, b))
        assert his == [0, 3]  # the session stayed on one server
        assert a.served() + b.served() == 7 and len(both) == 4
        assert engines.backend("pool").describe()["base_urls"] == [a.base_url, b.base_url]
        # Through RoleClient, each call's server reaches the run's ledger (run.json's usage).
        servers = engines.ledger.summary()["patient"]["servers"]
        assert sum(v["calls"] for v in servers.values()) == 7 and set(servers) <= {a.base_url, b.base_url}


def test_zero_cap_server_is_never_used():
    with StubServer("a") as a, StubServer("b") as b:
        pool = backend(a, b, server_caps=[0, 3])
        asyncio.run(send(pool, [request() for _ in range(9)], in_flight=9))
        assert a.count == 0 and b.served() == 9 and b.max_in_flight <= 3


@pytest.mark.parametrize("cap,workers,servers", [(8, 3, 2), (32, 4, 1), (5, 8, 3), (1, 4, 1), (7, 7, 2), (2, 9, 3)])
def test_worker_caps_keep_the_cap_global(cap, workers, servers):
    shares = [worker_caps(cap, workers, w, servers) for w in range(workers)]
    totals = [sum(s[j] for s in shares) for j in range(servers)]
    assert all(t >= cap for t in totals)
    # Never multiplied by the number of workers: exactly the cap, except one slot for each worker
    # that would otherwise have none anywhere (only when there are more workers than slots).
    assert sum(totals) - cap * servers == max(0, workers - cap * servers)
    assert all(sum(s) >= 1 for s in shares)
    if cap >= workers:
        assert all(max(col) - min(col) <= 1 for col in zip(*shares))  # an even split of each server


def test_worker_caps_rejects_nonsense():
    with pytest.raises(ValueError):
        worker_caps(0, 2, 0)
    with pytest.raises(ValueError):
        worker_caps(4, 2, 2)


def test_recipe_fields(tmp_path):
    def load(engine: str):
        p = tmp_path / "r.yaml"
        p.write_text(f"name: x\nengines:\n  a: {engine}\nroles:\n  default: {{engine: a}}\n")
        return load_recipe(p)

    r = load("{kind: openai, model: m, base_urls: [http://h1:8000/v1, http://h2:8000/v1], cooldown_s: 5}")
    spec = r.engines_config().engines["a"]
    assert spec.urls == ["http://h1:8000/v1", "http://h2:8000/v1"] and spec.cooldown_s == 5
    one = load("{kind: openai, model: m, base_url: http://h1/v1}").engines_config().engines["a"]
    assert one.urls == ["http://h1/v1"] and one.base_urls is None
    with pytest.raises(ConfigError, match="not both"):
        load("{kind: openai, model: m, base_url: http://h/v1, base_urls: [http://h2/v1]}").engines_config()
    with pytest.raises(ConfigError, match="engines.a.base_url: required field is missing"):
        load("{kind: openai, model: m}").engines_config()
    with pytest.raises(ConfigError, match="same server twice"):
        load("{kind: openai, model: m, base_urls: [http://h/v1, http://h/v1]}").engines_config()
    v = load("{kind: vllm, model: m, servers: [{port: 8000}, {host: 10.0.0.2, port: 8000}]}")
    assert v.engines_config().engines["a"].urls == ["http://127.0.0.1:8000/v1", "http://10.0.0.2:8000/v1"]
    with pytest.raises(ConfigError, match="not both"):
        load("{kind: vllm, model: m, port: 9000, servers: [{port: 8000}]}").engines_config()
    with pytest.raises(ConfigError, match="start each yourself"):
        load("{kind: vllm, model: m, launch: true, servers: [{port: 8000}, {port: 8001}]}").engines_config()
    assert VLLMEngine(model="m").urls == ["http://127.0.0.1:8000/v1"]


def _sys(text: str, user: str) -> ChatRequest:
    return ChatRequest(
        role="judge", model="m", messages=[{"role": "system", "content": text}, {"role": "user", "content": user}]
    )


HELD_S = 0.15  # how long the stub holds each request in the gate tests


def _overlaps(hits) -> int:
    """Most requests the stub held at once among `hits` (each held HELD_S from its arrival)."""
    times = sorted(h.at for h in hits)
    return max(sum(1 for u in times if t <= u < t + HELD_S) for t in times)


def test_requests_with_one_long_system_prompt_go_one_at_a_time_on_the_embedded_engine():
    """The embedded engine's gate (`serial_prefix_chars`): four requests opening with the same long system
    prompt reach the server one after another; other long prompts, and short ones, go as they come."""
    rubric, other = "r" * 5000, "o" * 5000
    with StubServer("a", latency_s=HELD_S) as a:
        reqs = [_sys(rubric, f"reply {i}") for i in range(4)] + [_sys(other, "x"), _sys(other, "y")]
        reqs += [_sys("short", f"s{i}") for i in range(3)]
        asyncio.run(send(backend(a, serial_prefix_chars=4000), reqs, in_flight=9))
        by_prompt = {}
        for h in a.hits:
            by_prompt.setdefault(h.body["messages"][0]["content"], []).append(h)
        assert [len(by_prompt[k]) for k in (rubric, other, "short")] == [4, 2, 3]
        assert _overlaps(by_prompt[rubric]) == 1 and _overlaps(by_prompt[other]) == 1
        assert _overlaps(by_prompt["short"]) == 3  # under the threshold: all at once
        assert a.max_in_flight >= 5  # the gate holds one prompt's requests, not the others'
    with StubServer("b", latency_s=HELD_S) as b:  # off (remote engines): all at once
        asyncio.run(send(backend(b), [_sys(rubric, f"reply {i}") for i in range(4)], in_flight=4))
        assert _overlaps(b.hits) == 4


def test_remote_engines_send_long_prefixes_as_they_come():
    cfg = EnginesConfig(
        engines={"api": OpenAIEngine(base_url="http://127.0.0.1:9/v1", model="m")},
        roles={"default": RoleSpec(engine="api")},
    )
    with Engines.from_config(cfg) as engines:
        assert engines.backend("api").serial_prefix_chars == 0
