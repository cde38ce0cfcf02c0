"""Secrets never leave the process in what the toolkit prints or writes: the one scrubber every error line,
console line, log line and written report passes through.

What it removes:
- the values of the environment variables that hold keys: every `api_key_env` a loaded recipe names (`watch`,
  called by `mindcore.recipe.load_recipe`), and the Hub's and OpenAI's usual ones (`ALWAYS`);
- the user part of a URL (`https://user:key@host/…` → `https://***@host/…`), where a key is sometimes pasted;
- `Authorization:` header values and `Bearer …` tokens, which an engine's error body may echo back.

A value is replaced by `***`, wherever it appears (an error body quoting it, a URL holding it, a JSON dump).
Values shorter than `MIN_SECRET` are not searched for: a variable set to "x" would otherwise mangle every line.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable

MASK = "***"
MIN_SECRET = 6
# Always treated as secret, whether or not a recipe names them: the Hub token `publish` reads, and the variable
# OpenAI's own tools read (users often set it while pointing a recipe elsewhere).
ALWAYS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY")

_watched: set[str] = set(ALWAYS)

_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)[^\s/@'\"<>\[\]]+@")
# `Authorization: Bearer x`, `"authorization": "Bearer x"`, `Authorization=Basic x`: the value up to the end of
# the token (and a scheme word before it), whatever quoting the echoing server used.
_AUTH = re.compile(r"(?i)(\bauthorization\b[\"']?\s*[:=]\s*[\"']?)(?:(?:bearer|basic|token)\s+)?[^\s\"',;}\]]+")
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=\-]{4,}")


def watch(names: Iterable[str | None]) -> None:
    """Also scrub the values of these environment variables (a recipe's `api_key_env` names)."""
    _watched.update(n for n in names if n)


def watched() -> set[str]:
    return set(_watched)


def _values() -> list[str]:
    found = {os.environ.get(n) or "" for n in _watched}
    # Longest first, so a key that contains another watched value is masked whole.
    return sorted((v for v in found if len(v) >= MIN_SECRET), key=len, reverse=True)


def scrub(text: str) -> str:
    """`text` with every secret this module knows of replaced by `***`."""
    if not text:
        return text
    for value in _values():
        if value in text:
            text = text.replace(value, MASK)
    if "@" in text:
        text = url_without_userinfo(text)
    lowered = text.lower()
    if "authorization" in lowered:
        text = _AUTH.sub(lambda m: m.group(1) + MASK, text)
    if "bearer" in lowered:
        text = _BEARER.sub(lambda m: m.group(1) + " " + MASK, text)
    return text


def scrub_data(value: Any) -> Any:
    """`scrub` applied to every string inside JSON-like data (dict keys included)."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {scrub_data(k): scrub_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):  # a tuple comes back as a list, as JSON would have it
        return [scrub_data(v) for v in value]
    return value


def url_without_userinfo(url: str) -> str:
    """A URL as it may be shown (or any text holding URLs): every user part masked."""
    return _USERINFO.sub(lambda m: m.group("scheme") + MASK + "@", url)
