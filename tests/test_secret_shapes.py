"""No key in any shape: the real commands run against stub servers that echo the key back encoded, recipes that
carry a key in a URL's query, fragment or user part or in `api_key_env`, distilabel's cache and the annotation
server's log. After each, stdout, stderr and every file written are searched for every shape of the key: as it is,
percent-encoded (either case of hex digit, `+` for a space), JSON-escaped and base64 at each byte offset, in the
standard and the URL-safe alphabet."""

from __future__ import annotations

import base64
import json
import re
import signal
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
import requests

TESTS = Path(__file__).resolve().parent
for extra in (TESTS, TESTS / "mindsim", TESTS / "judge", TESTS / "mindsim_app" / "annotate"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from openai_stub import after_probe, always_status, openai_stub  # noqa: E402,F401
from test_exit_codes import SIM_ROLES, _stub_recipe, error_line, mindsim_here  # noqa: E402

# Reserved characters in it, so that percent-encoding and JSON escaping change it.
KEY = "sk-mindsimtest-Zq8/fake+KEY=1234567890"
KEY_VAR = "MINDSIM_TEST_SHAPES_KEY"
PASSWORD = "pw-Zq8fake5678secretword"
PROFILES = "profiles: {personas: synthetic, candidates: 2, pool_size: 1, benchmark_size: 1, use_distilabel: false}\n"


def shapes(secret: str) -> set[str]:
    """Every shape of `secret` a server, a library or a careless writer may put it in."""
    quoted = urllib.parse.quote(secret, safe="")
    found = {
        secret,
        quoted,
        urllib.parse.quote_plus(secret),
        json.dumps(secret)[1:-1].replace("/", "\\/"),
        re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), quoted),
        urllib.parse.quote(quoted, safe=""),
    }
    for lead in (b"", b"u", b"us"):
        encoded = base64.b64encode(lead + secret.encode()).decode()
        middle = encoded[4:-4]  # the characters that hold the secret's bits only, at this offset
        found |= {middle, middle.replace("+", "-").replace("/", "_")}
    return found


def nowhere(secrets: list[str], proc: subprocess.CompletedProcess | None, *folders: Path) -> None:
    """No shape of any of `secrets` in the command's output, nor in any file under `folders` (parquet files also
    read as their rows' text)."""
    import pyarrow.parquet as pq

    every = {s for secret in secrets for s in shapes(secret)}
    texts = [("stdout", proc.stdout), ("stderr", proc.stderr)] if proc is not None else []
    looked = 0
    for folder in folders:
        for path in (p for p in folder.rglob("*") if p.is_file()):
            looked += 1
            texts.append((str(path), path.read_bytes().decode("utf-8", "replace")))
            if path.suffix == ".parquet":
                texts.append((f"{path} rows", json.dumps(pq.read_table(path).to_pylist(), default=str)))
    assert looked or not folders, "nothing was written: the test would pass vacuously"
    for where, text in texts:
        leaked = sorted(s for s in every if s in text)
        assert not leaked, f"{where} holds {leaked}:\n{text[-3000:]}"


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv(KEY_VAR, KEY)
    return KEY


def _keyed(path: Path, stub, roles: list[str], extra: str = "", url: str | None = None) -> Path:
    """A stub recipe whose engine reads its key from KEY_VAR; `url` replaces the stub's base URL."""
    recipe = _stub_recipe(path, stub, roles, extra)
    text = recipe.read_text().replace("native_tools: false}", f"native_tools: false, api_key_env: {KEY_VAR}}}")
    recipe.write_text(text.replace(stub.base_url, url) if url else text)
    return recipe


ENCODED_ECHO = 'bad request; {authorization_urlencoded}; {authorization_base64}; header "{authorization}" refused'


def test_engines_check_with_an_engine_echoing_the_key_encoded_shows_no_shape_of_it(openai_stub, key, tmp_path):
    stub = openai_stub(always_status(500, ENCODED_ECHO))
    proc = mindsim_here("engines", "check", _keyed(tmp_path / "r.yaml", stub, []), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "HTTP 500" in proc.stdout + proc.stderr
    nowhere([key], proc)


def test_run_profiles_simulate_and_judge_run_with_an_engine_echoing_the_key_encoded_write_it_nowhere(
    openai_stub, key, tmp_path
):
    """The echo also quotes the header inside quotes: masking it must leave `profiles/failures.jsonl` readable, so
    a second `run` on the same folder reaches the same engine error instead of refusing its own file."""
    from judgefakes import write_run
    from mindsimkit.profilegen.dataset import write_profiles
    from simfakes import make_profile

    stub = openai_stub(after_probe(always_status(400, ENCODED_ECHO)))
    recipe = _keyed(tmp_path / "r.yaml", stub, SIM_ROLES, PROFILES + "simulation: {sessions: 1, turn_cap: 3}\n")
    for attempt in range(2):
        stub.behaviour = after_probe(always_status(400, ENCODED_ECHO))
        proc = mindsim_here("run", recipe, "--out", tmp_path / "o", cwd=tmp_path)
        assert proc.returncode == 1, proc.stderr
        assert "profiles: all 2 candidates failed" in error_line(proc, only_line=False), attempt
        nowhere([key], proc, tmp_path / "o")
    failures = tmp_path / "o" / "profiles" / "failures.jsonl"
    rows = [json.loads(line) for line in failures.read_text().splitlines()]
    assert rows and all("Authorization: ***" in json.dumps(r) for r in rows)

    stub.behaviour = after_probe(always_status(400, ENCODED_ECHO))
    profiles = mindsim_here("profiles", recipe, "--out", tmp_path / "p", cwd=tmp_path)
    assert profiles.returncode == 1, profiles.stderr
    nowhere([key], profiles, tmp_path / "p")

    write_profiles([make_profile("p1")], tmp_path / "pool")
    stub.behaviour = after_probe(always_status(400, ENCODED_ECHO))
    simulate = mindsim_here(
        "simulate", "--profiles", tmp_path / "pool", "--recipe", recipe, "--out", tmp_path / "s", cwd=tmp_path
    )
    assert simulate.returncode == 1, simulate.stderr
    nowhere([key], simulate, tmp_path / "s")

    judged_run = write_run(tmp_path / "judged")
    stub.behaviour = after_probe(always_status(400, ENCODED_ECHO))
    judged = mindsim_here("judge", "run", judged_run, "--recipe", recipe, cwd=tmp_path)
    assert judged.returncode == 1, judged.stderr
    nowhere([key], judged, judged_run)


@pytest.mark.parametrize(
    "where",
    ["?api-key={}", "?key={}", "?token={}&api-version=2024-06-01", "?q={}", "#{}"],
    ids=["api-key", "key", "token", "any-name", "fragment"],
)
def test_a_key_in_the_engine_urls_query_or_fragment_is_shown_nowhere(where, openai_stub, tmp_path):
    """The key written into the URL itself (no variable to look it up by): masked by the parameter's name, or by its
    shape, in the engines table, the error lines and everything `run` writes."""
    stub = openai_stub(after_probe(always_status(400, "refused")))
    url = stub.base_url + where.format(KEY)
    recipe = _stub_recipe(tmp_path / "r.yaml", stub, [])
    recipe.write_text(recipe.read_text().replace(stub.base_url, url))
    check = mindsim_here("engines", "check", recipe, cwd=tmp_path)
    assert check.returncode in (1, 2), check.stderr
    assert stub.base_url.removesuffix("/v1") in check.stdout + check.stderr  # the URL is shown, its secret masked
    nowhere([KEY], check)
    run = mindsim_here("run", recipe, "--out", tmp_path / "o", cwd=tmp_path)
    assert run.returncode in (1, 2), run.stderr
    nowhere([KEY], run, *[p for p in [tmp_path / "o"] if p.exists()])


@pytest.mark.parametrize(
    "pasted", ["a3f9c0e17b2d4e8f9a0b1c2d3e4f5a6b", "k7p2x9m4q8w3z6v1t5r0"], ids=["hex", "lower-alnum"]
)
def test_a_key_pasted_into_api_key_env_is_refused_without_echoing_it(pasted, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"name: x\nengines:\n  e: {{kind: openai, base_url: 'http://127.0.0.1:9/v1', model: m, "
        f"api_key_env: {pasted}}}\nroles:\n  default: {{engine: e}}\n"
    )
    for args in (["engines", "check", recipe], ["run", recipe, "--out", tmp_path / "o"]):
        proc = mindsim_here(*args, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        line = error_line(proc)
        assert "api_key_env" in line and "put the key in a variable" in line
        nowhere([pasted], proc)
    assert not (tmp_path / "o").exists()


def test_a_vllm_host_with_a_password_is_not_repeated_in_the_serve_hint(tmp_path):
    import socket

    with socket.socket() as s:  # a port nobody serves: the check fails and prints its hints
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"name: x\nengines:\n  g: {{kind: vllm, model: m, host: 'admin:{PASSWORD}@127.0.0.1', "
        f"port: {port}}}\nroles:\n  default: {{engine: g}}\n"
    )
    proc = mindsim_here("engines", "check", recipe, cwd=tmp_path)
    assert proc.returncode in (1, 2), proc.stderr
    assert "vllm serve m --host 127.0.0.1" in " ".join((proc.stdout + proc.stderr).split())
    nowhere([PASSWORD], proc)


def test_the_distilabel_cache_stores_no_credential_of_the_engine_url(openai_stub, key, tmp_path):
    """distilabel writes each step's settings (the engine's URL among them) to `profiles/distilabel_cache/`: the
    URL's user part stays out, as everywhere else (and the key the engine echoes)."""
    stub = openai_stub(after_probe(always_status(400, ENCODED_ECHO)))
    url = stub.base_url.replace("http://", f"http://user:{PASSWORD}@")
    recipe = _keyed(
        tmp_path / "r.yaml", stub, [], PROFILES.replace("use_distilabel: false", "use_distilabel: true"), url=url
    )
    proc = mindsim_here("run", recipe, "--out", tmp_path / "o", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    cache = tmp_path / "o" / "profiles" / "distilabel_cache"
    stored = [p for p in cache.rglob("pipeline.yaml")]
    assert stored, f"distilabel wrote no pipeline.yaml under {cache}"
    assert "***@127.0.0.1" in stored[0].read_text()
    nowhere([key, PASSWORD], proc, tmp_path / "o")


def test_the_annotation_servers_log_holds_no_token_even_from_a_query_string(tmp_path):
    from annotfakes import write_run as write_annotation_run
    from serving import free_port, start, tokens

    from mindsimkit.mindsim_app.annotate.samplers import sample_realism
    from mindsimkit.mindsim_app.annotate.tasks import Design

    run = write_annotation_run(tmp_path / "run")
    task = tmp_path / "t"
    sample_realism(task, Design(raters=["R1", "R2"], k=1, all_raters=0), n=2, runs=[str(run)], seed=1)
    port, log = free_port(), tmp_path / "server.log"
    proc = start([task], port, log)
    try:
        token = tokens(task)["R1"]
        base = f"http://127.0.0.1:{port}"
        # A link copied by hand with the token as a query value, sent with and without the header.
        assert requests.get(f"{base}/api/session?k={token}", timeout=10).status_code == 401
        got = requests.get(
            f"{base}/api/session?k={token}&x=1", headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        assert got.status_code == 200
        requests.get(f"{base}/?token={token}", timeout=10)
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: the lines written while stopping count too
        proc.wait(30)
    text = log.read_text()
    assert "/api/session?k=***" in text, text
    nowhere([token], subprocess.CompletedProcess([], 0, text, ""))  # (the links file holds it, by design)
