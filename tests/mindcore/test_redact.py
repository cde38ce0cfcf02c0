"""Secrets out of everything printed or written (`mindcore.redact`): the scrubber, the checks
at recipe load that keep a key out of the recipe, and the traceback hook distilabel installs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mindsimkit.mindcore import redact
from mindsimkit.mindcore.config import OpenAIEngine, check_key_env
from mindsimkit.mindcore.errors import ConfigError, EngineError
from mindsimkit.mindcore.io import atomic_write_json, atomic_write_text

KEY = "sk-test-Zq8fake1234567890abcdef"


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv("MINDSIM_TEST_KEY", KEY)
    redact.watch(["MINDSIM_TEST_KEY"])
    return KEY


def test_a_watched_variables_value_is_masked_wherever_it_appears(key):
    assert (
        redact.scrub(f"HTTP 400: bad key {key} (sent as {key[:-1]})") == f"HTTP 400: bad key *** (sent as {key[:-1]})"
    )
    assert key not in str(EngineError(f"the server said: {key}"))  # every error the toolkit raises is scrubbed


@pytest.mark.parametrize(
    "text, shown",
    [
        ("https://user:s3cr3tpass@api.example.com/v1", "https://***@api.example.com/v1"),
        (
            '{"error": {"echo": {"Authorization": "Bearer abcdefgh12345"}}}',
            '{"error": {"echo": {"Authorization": "***"}}}',
        ),
        ("authorization: Basic dXNlcjpwYXNz", "authorization: ***"),
        ("sent header Bearer abcdefgh12345 to the server", "sent header Bearer *** to the server"),
        ("no secret in here: a counsellor's reply", "no secret in here: a counsellor's reply"),
    ],
)
def test_url_user_parts_and_authorization_values_are_masked(text, shown):
    assert redact.scrub(text) == shown


def test_short_values_are_not_searched_for(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "x")  # a token of one letter would otherwise mask every x
    assert redact.scrub("box of six") == "box of six"


def test_what_the_toolkit_writes_as_text_or_json_is_scrubbed(key, tmp_path):
    atomic_write_json(tmp_path / "a.json", {"error": f"engine said {key}", "url": "http://u:pw123456@h/v1"})
    atomic_write_text(tmp_path / "b.md", f"| {key} |\n")
    written = (tmp_path / "a.json").read_text() + (tmp_path / "b.md").read_text()
    assert key not in written and "pw123456" not in written
    assert json.loads((tmp_path / "a.json").read_text())["url"] == "http://***@h/v1"


@pytest.mark.parametrize(
    "value",
    [KEY, "hf_abcdefghijklmnop", "AIzaSyA1234567890abcdefghijklmno", "my key", "sk-", "Ab3dEf6hIj9kLm2nOp5qRs8tUv"],
)
def test_api_key_env_holding_a_key_is_refused_without_showing_it(value):
    with pytest.raises(Exception) as exc:
        OpenAIEngine(base_url="http://127.0.0.1:9/v1", model="m", api_key_env=value)
    assert value not in str(exc.value.errors()[0]["msg"]) and "not the NAME of an environment variable" in str(
        exc.value
    )


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "MY_KEY", "together_api_key", "HF_TOKEN", "_K1"])
def test_variable_names_are_accepted(name):
    assert check_key_env(name) == name


@pytest.mark.parametrize(
    "url",
    [
        "not a url",
        "ftp://host/v1",
        "",
        "http://[::1/v1",
        "http://host:99999/v1",
        "http:///v1",
        "https://api example.com/v1",
    ],
)
def test_an_engine_url_that_is_not_http_is_refused_at_load(url):
    with pytest.raises(Exception, match="base_url"):
        OpenAIEngine(base_url=url, model="m")


def test_a_pasted_key_in_a_recipe_is_refused_at_load_in_one_line_without_it(tmp_path):
    from mindsimkit.mindcore.recipe import load_recipe

    path = tmp_path / "r.yaml"
    path.write_text(
        f"name: x\nengines:\n  e: {{kind: openai, base_url: 'http://127.0.0.1:9/v1', model: m, "
        f"api_key_env: {KEY}}}\nroles:\n  default: {{engine: e}}\n"
    )
    with pytest.raises(ConfigError) as exc:
        load_recipe(path)
    assert KEY not in str(exc.value) and "engines.e.api_key_env" in str(exc.value)


def test_importing_distilabel_through_the_toolkit_leaves_plain_tracebacks():
    """distilabel's import installs rich tracebacks with show_locals=True for the whole process; the modules that
    import it undo that, so an uncaught exception never prints a frame's local variables (an API key among them)."""
    code = (
        "import sys, rich.traceback; import mindsimkit.profilegen.distilabel_steps; "
        "print(sys.excepthook is sys.__excepthook__)"
    )
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "True", done.stderr[-2000:]


# ---------------------------------------------------------------- every shape a key travels in

SLASHED = "sk-redacttest-Zq8/fake+KEY=0987654321"  # reserved characters: encoding and escaping change it


def _text_shapes(secret: str) -> set[str]:
    """`secret` as it is, percent-encoded (upper- and lower-case hex, `+` for a space, twice) and JSON-escaped,
    computed here independently of the scrubber."""
    import re
    import urllib.parse

    quoted = urllib.parse.quote(secret, safe="")
    return {
        secret,
        quoted,
        urllib.parse.quote_plus(secret),
        urllib.parse.quote(quoted, safe=""),
        re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), quoted),
        json.dumps(secret)[1:-1].replace("/", "\\/"),
    }


def _shapes(secret: str) -> set[str]:
    """`_text_shapes`, and the middle of its base64 at each byte offset in both alphabets (what any base64 text
    holding the whole secret contains)."""
    import base64

    found = _text_shapes(secret)
    for lead in (b"", b"u", b"us"):
        middle = base64.b64encode(lead + secret.encode()).decode()[4:-4]
        found |= {middle, middle.replace("+", "-").replace("/", "_")}
    return found


@pytest.fixture
def slashed(monkeypatch):
    monkeypatch.setenv("MINDSIM_TEST_SLASHED", SLASHED)
    redact.watch(["MINDSIM_TEST_SLASHED"])
    return SLASHED


def _assert_no_shape(text: str, secret: str = SLASHED) -> None:
    leaked = sorted(s for s in _shapes(secret) if s in text)
    assert not leaked, f"{leaked} in {text!r}"


def test_every_shape_of_a_watched_key_is_masked_in_text(slashed):
    import base64

    for shape in sorted(_text_shapes(slashed)):
        out = redact.scrub(f"the server said <{shape}> and stopped")
        assert out.startswith("the server said <") and out.endswith("> and stopped"), out
        _assert_no_shape(out)
    basic = base64.b64encode(f"user:{slashed}".encode()).decode()
    assert redact.scrub(f"proxy saw Basic {basic}") == "proxy saw Basic ***"
    # Keys ending at each byte offset of a base64 run, with padding or without.
    for lead in ("", "a", "ab"):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            text = "x " + encode((lead + slashed + lead).encode()).decode() + " y"
            assert redact.scrub(text) == "x *** y"


@pytest.mark.parametrize(
    "text, shown",
    [
        (
            "GET http://h/v1?api-key=abcdef123456&api-version=2024-06-01 failed",
            "GET http://h/v1?api-key=***&api-version=2024-06-01 failed",
        ),
        ("http://h/v1?access_token=abc123xyz", "http://h/v1?access_token=***"),
        (
            "https://acct.blob.core.windows.net/c?sv=2022-11-02&sig=Zq8abcDEF%2Bghi",
            "https://acct.blob.core.windows.net/c?sv=2022-11-02&sig=***",
        ),
        ("http://h/v1?q=sk-proj-abcdefgh12345678", "http://h/v1?q=***"),
        ("http://h/v1#sk-proj-abcdefgh12345678", "http://h/v1#***"),
        (
            "see https://example.org/docs/page#install-the-package",
            "see https://example.org/docs/page#install-the-package",
        ),
        (
            '{"detail": "header \\"Authorization: Bearer abcdefgh12345\\" refused"}',
            '{"detail": "header \\"Authorization: ***\\" refused"}',
        ),
        ("Authorization%3A%20Bearer%20abcdefgh12345", "Authorization%3A***"),
        ("a logged query: ?h=Bearer%20abcdefgh12345", "a logged query: ?h=Bearer ***"),
    ],
)
def test_query_credentials_key_like_fragments_and_escaped_headers_are_masked(text, shown):
    assert redact.scrub(text) == shown


def test_a_masked_json_document_still_parses():
    doc = json.dumps({"detail": 'header "Authorization: Bearer abcdefgh12345" refused', "n": 1})
    assert json.loads(redact.scrub(doc)) == {"detail": 'header "Authorization: ***" refused', "n": 1}


@pytest.mark.parametrize(
    "url, shown",
    [
        ("http://u:pw123456@h:8000/v1?key=abc&api-version=1#frag", "http://***@h:8000/v1?key=***&api-version=1#***"),
        ("https://api.example.com/v1?foo=a3f9c0e17b2d4e8f9a0b1c2d", "https://api.example.com/v1?foo=***"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
    ],
)
def test_shown_url_masks_what_a_url_may_hold(url, shown):
    assert redact.shown_url(url) == shown


@pytest.mark.parametrize(
    "value, refused",
    [
        ("a3f9c0e17b2d4e8f9a0b1c2d3e4f5a6b", True),
        ("k7p2x9m4q8w3z6v1t5r0", True),
        ("sk_proj_abcdefgh12345678", True),
        ("OPENAI_API_KEY_2024", False),
        ("AZURE_OPENAI_KEY", False),
        ("MY_PROVIDER_TOKEN_FOR_PROJECT_7", False),
        ("hf_token_value", False),
    ],
)
def test_hex_and_high_entropy_keys_are_refused_as_variable_names_and_long_names_are_not(value, refused):
    if not refused:
        assert check_key_env(value) == value
        return
    with pytest.raises(Exception) as exc:
        OpenAIEngine(base_url="http://127.0.0.1:9/v1", model="m", api_key_env=value)
    message = str(exc.value.errors()[0]["msg"])
    assert value not in message and "put the key in a variable" in message


def _row(secret: str) -> dict:
    import base64
    import urllib.parse

    return {
        "error": f'engine said: header "Authorization: Bearer {secret}" refused; '
        f"echo={urllib.parse.quote(secret, safe='')}; b64={base64.b64encode(secret.encode()).decode()}",
        "url": f"http://user:{urllib.parse.quote(secret, safe='')}@h/v1?api-key={secret}",
        "nested": [{"Authorization": f"Bearer {secret}", "note": 'a "quoted" path C:\\dir\\file'}],
        secret: "the key as a mapping key",
    }


def test_every_writer_writes_parseable_files_without_any_shape_of_the_key(slashed, tmp_path):
    """Each writer of rows, reports and logs, given a row that holds the key in several shapes (one an
    Authorization header quoted inside a JSON string): the file parses and no shape of the key is in it."""
    import logging

    from mindsimkit.mindcore.io import atomic_write_json_if_changed, atomic_write_jsonl, write_json_once
    from mindsimkit.mindcore.logs import library_logs_to
    from mindsimkit.mindsim_app.report.build import _blob

    row = _row(slashed)
    atomic_write_json(tmp_path / "a.json", row)
    atomic_write_jsonl(tmp_path / "b.jsonl", [row, row])
    write_json_once(tmp_path / "c.json", row)
    atomic_write_json_if_changed(tmp_path / "d.json", row)
    atomic_write_text(tmp_path / "e.md", f"| {row['error']} |\n")
    (tmp_path / "f.json").write_text(_blob(row))
    with library_logs_to(tmp_path / "logs"):
        logging.getLogger("httpx").warning("HTTP 400 body: %s", json.dumps(row))
    docs = [json.loads((tmp_path / n).read_text()) for n in ("a.json", "c.json", "d.json", "f.json")]
    docs += [json.loads(line) for line in (tmp_path / "b.jsonl").read_text().splitlines()]
    logged = (tmp_path / "logs" / "libraries.log").read_text()
    docs.append(json.loads(logged.split("HTTP 400 body: ", 1)[1]))
    for doc in docs:
        assert doc["nested"][0]["note"] == 'a "quoted" path C:\\dir\\file'  # what is no secret is kept as it was
        assert 'header "Authorization: ***" refused' in doc["error"]
    for path in tmp_path.rglob("*"):
        if path.is_file():
            _assert_no_shape(path.read_text())
    _assert_no_shape((tmp_path / "e.md").read_text())


def test_the_distilabel_step_dump_shows_no_credential_of_the_engine():
    """What distilabel writes to its cache (pipeline.yaml) is the LLM's pydantic dump; the object keeps the real
    URLs for the requests it makes."""
    from mindsimkit.mindcore.distilabel_llm import MindcoreLLM

    url = "http://user:pw-Zq8fake5678@127.0.0.1:9/v1?key=abcdef123456#sk-proj-abcdefgh12345678"
    llm = MindcoreLLM(wire={"role": "profile_writer", "engine": "e", "model": "m", "base_url": url, "base_urls": [url]})
    dumped = json.dumps(llm.model_dump())
    assert "pw-Zq8fake5678" not in dumped and "abcdef123456" not in dumped and "abcdefgh12345678" not in dumped
    assert "http://***@127.0.0.1:9/v1?key=***#***" in dumped
    assert llm.wire["base_url"] == url
