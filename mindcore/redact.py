"""Secrets never leave the process in what the toolkit prints or writes: the one scrubber every error line,
console line, log line and written report passes through.

What it removes:
- the values of the environment variables that hold keys: every `api_key_env` a loaded recipe names (`watch`,
  called by `mindcore.recipe.load_recipe`), and the Hub's and OpenAI's usual ones (`ALWAYS`) — in every shape a
  server or a library may echo them: as they are, percent-encoded (either case of hex digits, `+` for a space,
  encoded twice), JSON-escaped (`\\/`, `\\u00XX`), and base64 (standard or URL-safe, with or without padding, at
  any byte offset, e.g. inside a `Basic` header of `user:key`);
- the user part of a URL (`https://user:key@host/…` → `https://***@host/…`), where a key is sometimes pasted;
- the value of a URL's query parameter whose name says it is a credential (`?api-key=`, `key`, `token`,
  `access_token`, `sig`, `password`, …) and a URL fragment that looks like a key;
- `Authorization:` header values and `Bearer …` tokens, which an engine's error body may echo back.

A value is replaced by `***`, wherever it appears (an error body quoting it, a URL holding it, a log line).
Values shorter than `MIN_SECRET` are not searched for: a variable set to "x" would otherwise mangle every line.

Data is scrubbed before it is serialised (`scrub_data`, then JSON): masking serialised JSON as text could cut an
escape sequence in half and leave a file its own reader refuses. `shown_url` is how an engine's URL is displayed.
"""

from __future__ import annotations

import base64
import math
import os
import re
from collections import Counter
from functools import lru_cache
from typing import Any, Iterable

MASK = "***"
MIN_SECRET = 6
# Always treated as secret, whether or not a recipe names them: the Hub token `publish` reads, and the variable
# OpenAI's own tools read (users often set it while pointing a recipe elsewhere).
ALWAYS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY")

_watched: set[str] = set(ALWAYS)

_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)[^\s/@'\"<>\[\]]+@")
# `Authorization: Bearer x`, `"authorization": "Bearer x"`, `Authorization=Basic x`: the value up to the end of
# the token (and a scheme word before it), whatever quoting the echoing server used. A backslash ends the value:
# inside a JSON string it starts the escape of the closing quote, which must stay whole.
_AUTH = re.compile(
    r"(?i)(\bauthorization\b[\"']?\s*(?:[:=]|%3a|%3d)\s*[\"']?)"
    r"(?:(?:bearer|basic|token)(?:\s+|%20|\+))?[^\s\"',;}\]\\&]+"
)
_BEARER = re.compile(r"(?i)(?<![a-z])(bearer)(?:\s+|%20|\+)[A-Za-z0-9._~+/=%\-]{4,}")
# Query (or fragment) parameters whose value is a credential by name: API keys, OAuth tokens, SAS signatures,
# passwords. The annotation server's own link parameter `k` is one too.
_SECRET_PARAM = re.compile(
    r"(?i)(?P<lead>[?&#;](?:k|sig|code|auth|pwd|[\w.\-]*(?:key|token|secret|passw|signature|credential)[\w.\-]*)=)"
    r"(?P<value>[^&#\s\"'<>\\]+)"
)
# Any parameter: its value is masked when it has the shape of a key, whatever the parameter is called.
_ANY_PARAM = re.compile(r"(?P<lead>[?&#;][\w.\-]+=)(?P<value>[^&#\s\"'<>\\]+)")
_URL_FRAGMENT = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s#\"'<>]*#)(?P<fragment>[^\s\"'<>\\]+)")
# How API keys commonly begin (OpenAI, Anthropic, Hugging Face, Groq, xAI, Google, GitHub, …).
_KEY_SHAPES = re.compile(
    r"^(sk|hf|gsk|xai|ghp|gho|ghs|github_pat|glpat|csk|nvapi)[-_](?:[A-Za-z0-9]+[-_])*[A-Za-z0-9]{8,}"
    r"|^AIza[0-9A-Za-z_-]{20,}"
)
_B64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_")


def watch(names: Iterable[str | None]) -> None:
    """Also scrub the values of these environment variables (a recipe's `api_key_env` names)."""
    _watched.update(n for n in names if n)


def watched() -> set[str]:
    return set(_watched)


def _values() -> tuple[str, ...]:
    found = {os.environ.get(n) or "" for n in _watched}
    # Longest first, so a key that contains another watched value is masked whole.
    return tuple(sorted((v for v in found if len(v) >= MIN_SECRET), key=lambda v: (-len(v), v)))


def looks_like_key(value: str) -> bool:
    """True for a string with the shape of an API key or token rather than of a name or a word: a known key
    prefix, a long mix of upper case, lower case and digits, a long run of hex digits, or a long string of
    letters and digits too varied to be a word."""
    if _KEY_SHAPES.match(value):
        return True
    if any(c.isspace() for c in value):
        return False
    digits, upper, lower = (any(f(c) for c in value) for f in (str.isdigit, str.isupper, str.islower))
    if len(value) >= 24 and digits and upper and lower:
        return True
    if len(value) >= 16 and digits and re.fullmatch(r"[0-9a-fA-F\-]+", value) and sum(c.isdigit() for c in value) >= 4:
        return True
    return len(value) >= 20 and digits and (upper or lower) and value.isalnum() and _entropy(value) >= 3.5


def _entropy(value: str) -> float:
    counts = Counter(value)
    return -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())


def _char_forms(c: str) -> str:
    """A regex for one character of a key as a server may write it back: itself, percent-encoded (either case of
    hex digit, `%25` for encoding twice), `+` for a space, or JSON-escaped."""
    forms = [re.escape(c)]
    encoded = "".join(f"%(?:25)?[{b >> 4:X}{b >> 4:x}][{b & 15:X}{b & 15:x}]" for b in c.encode("utf-8"))
    forms.append(encoded)
    if c == " ":
        forms.append(r"\+")
    if c == "/":
        forms.append(r"\\/")
    if c in '"\\':
        forms.append(re.escape("\\" + c))
    if ord(c) < 0x10000:
        forms.append(r"\\u" + "".join(f"[{d.upper()}{d}]" for d in f"{ord(c):04x}"))
    return "(?:" + "|".join(forms) + ")"


def _base64_cores(value: str) -> set[str]:
    """The part of the base64 text of `value` that is the same wherever `value` sits in the encoded bytes: one
    core per byte offset (0, 1, 2), in the standard and the URL-safe alphabets. The characters at either end
    also carry bits of the neighbouring bytes, so they are left out of the core (and masked with the run)."""
    raw = value.encode("utf-8")
    cores: set[str] = set()
    for offset, skip in ((0, 0), (1, 2), (2, 3)):
        text = base64.b64encode(b"\0" * offset + raw).decode("ascii")
        core = text[skip : ((offset + len(raw)) * 8) // 6]
        if len(core) >= MIN_SECRET:
            cores.update({core, core.translate(str.maketrans("+/", "-_"))})
    return cores


@lru_cache(maxsize=16)
def _matchers(values: tuple[str, ...]) -> tuple[re.Pattern[str] | None, tuple[str, ...], tuple[str, ...]]:
    """For the watched values: one regex for their plain, percent-encoded and JSON-escaped forms; literal
    pieces of them, any of which a text must hold before the regex is worth running; their base64 cores."""
    if not values:
        return None, (), ()
    pattern = re.compile("|".join("".join(_char_forms(c) for c in v) for v in values))
    # The longest run each value keeps whole under percent-encoding (its unreserved characters).
    pieces = tuple(max(re.split(r"[^A-Za-z0-9\-._~]", v), key=len) for v in values)
    cores = tuple(sorted({c for v in values for c in _base64_cores(v)}, key=len, reverse=True))
    return pattern, pieces, cores


def _mask_base64(text: str, cores: tuple[str, ...]) -> str:
    for core in cores:
        start = text.find(core)
        while start != -1:
            # The whole base64 run around the core goes: its edge characters hold bits of the key too.
            left, right = start, start + len(core)
            while left > 0 and text[left - 1] in _B64_CHARS:
                left -= 1
            while right < len(text) and text[right] in _B64_CHARS:
                right += 1
            while right < len(text) and text[right] == "=":
                right += 1
            text = text[:left] + MASK + text[right:]
            start = text.find(core, left + len(MASK))
    return text


class _Scrubber:
    """`scrub` for the watched values as they are now (looked up once, for a whole document of strings)."""

    def __init__(self) -> None:
        self.pattern, self.pieces, self.cores = _matchers(_values())
        self.always = any(len(p) < 4 for p in self.pieces)

    def __call__(self, text: str) -> str:
        if not text:
            return text
        if self.pattern is not None:
            if self.always or "%" in text or "\\" in text or any(p in text for p in self.pieces):
                text = self.pattern.sub(MASK, text)
            if any(c in text for c in self.cores):
                text = _mask_base64(text, self.cores)
        text = _mask_url_parts(text)
        lowered = text.lower()
        if "authorization" in lowered:
            text = _AUTH.sub(lambda m: m.group(1) + MASK, text)
        if "bearer" in lowered:
            text = _BEARER.sub(lambda m: m.group(1) + " " + MASK, text)
        return text

    def data(self, value: Any) -> Any:
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {self.data(k): self.data(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):  # a tuple comes back as a list, as JSON would have it
            return [self.data(v) for v in value]
        return value


def _mask_url_parts(text: str) -> str:
    if "@" in text:
        text = url_without_userinfo(text)
    if "=" in text:
        text = _SECRET_PARAM.sub(lambda m: m.group("lead") + MASK, text)
        text = _ANY_PARAM.sub(
            lambda m: m.group("lead") + (MASK if looks_like_key(m.group("value")) else m.group("value")), text
        )
    if "#" in text:
        text = _URL_FRAGMENT.sub(
            lambda m: m.group("head") + (MASK if looks_like_key(m.group("fragment")) else m.group("fragment")), text
        )
    return text


def scrub(text: str) -> str:
    """`text` with every secret this module knows of replaced by `***`. For text; data that will be serialised
    goes through `scrub_data` first."""
    return _Scrubber()(text) if text else text


def scrub_data(value: Any) -> Any:
    """`scrub` applied to every string inside JSON-like data (dict keys included)."""
    return _Scrubber().data(value)


def url_without_userinfo(url: str) -> str:
    """A URL as it may be shown (or any text holding URLs): every user part masked."""
    return _USERINFO.sub(lambda m: m.group("scheme") + MASK + "@", url)


def shown_url(url: str) -> str:
    """An engine's URL as every table and message shows it: scrubbed (user part, credential query values by name or
    by shape) and its fragment masked whatever it holds: a fragment is never sent to a server, so one in an
    engine's URL can only be something pasted there."""
    head, hash_sign, fragment = scrub(url).partition("#")
    return head + hash_sign + (MASK if fragment else "")
