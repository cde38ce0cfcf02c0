"""Secrets out of everything printed or written (`mindcore.redact`, issue 48 item 1): the scrubber, the checks
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
    assert redact.scrub(f"HTTP 400: bad key {key} (sent as {key[:-1]})") == f"HTTP 400: bad key *** (sent as {key[:-1]})"
    assert key not in str(EngineError(f"the server said: {key}"))  # every error the toolkit raises is scrubbed


@pytest.mark.parametrize("text, shown", [
    ("https://user:s3cr3tpass@api.example.com/v1", "https://***@api.example.com/v1"),
    ('{"error": {"echo": {"Authorization": "Bearer abcdefgh12345"}}}', '{"error": {"echo": {"Authorization": "***"}}}'),
    ("authorization: Basic dXNlcjpwYXNz", "authorization: ***"),
    ("sent header Bearer abcdefgh12345 to the server", "sent header Bearer *** to the server"),
    ("no secret in here: a counsellor's reply", "no secret in here: a counsellor's reply"),
])
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


@pytest.mark.parametrize("value", [KEY, "hf_abcdefghijklmnop", "AIzaSyA1234567890abcdefghijklmno", "my key", "sk-",
                                   "Ab3dEf6hIj9kLm2nOp5qRs8tUv"])
def test_api_key_env_holding_a_key_is_refused_without_showing_it(value):
    with pytest.raises(Exception) as exc:
        OpenAIEngine(base_url="http://127.0.0.1:9/v1", model="m", api_key_env=value)
    assert value not in str(exc.value.errors()[0]["msg"]) and "not the NAME of an environment variable" in str(exc.value)


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "MY_KEY", "together_api_key", "HF_TOKEN", "_K1"])
def test_variable_names_are_accepted(name):
    assert check_key_env(name) == name


@pytest.mark.parametrize("url", ["not a url", "ftp://host/v1", "", "http://[::1/v1", "http://host:99999/v1",
                                 "http:///v1", "https://api example.com/v1"])
def test_an_engine_url_that_is_not_http_is_refused_at_load(url):
    with pytest.raises(Exception, match="base_url"):
        OpenAIEngine(base_url=url, model="m")


def test_a_pasted_key_in_a_recipe_is_refused_at_load_in_one_line_without_it(tmp_path):
    from mindsimkit.mindcore.recipe import load_recipe

    path = tmp_path / "r.yaml"
    path.write_text(f"name: x\nengines:\n  e: {{kind: openai, base_url: 'http://127.0.0.1:9/v1', model: m, "
                    f"api_key_env: {KEY}}}\nroles:\n  default: {{engine: e}}\n")
    with pytest.raises(ConfigError) as exc:
        load_recipe(path)
    assert KEY not in str(exc.value) and "engines.e.api_key_env" in str(exc.value)


def test_importing_distilabel_through_the_toolkit_leaves_plain_tracebacks():
    """distilabel's import installs rich tracebacks with show_locals=True for the whole process; the modules that
    import it undo that, so an uncaught exception never prints a frame's local variables (an API key among them)."""
    code = ("import sys, rich.traceback; import mindsimkit.profilegen.distilabel_steps; "
            "print(sys.excepthook is sys.__excepthook__)")
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "True", done.stderr[-2000:]
