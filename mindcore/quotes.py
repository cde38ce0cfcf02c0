"""Checking that a quoted span really occurs in a text. The profile screener and the MHQR judge both
ask a model to back each fault with words copied from what it judged; a quote that is not there is
dropped, so the check must be one rule everywhere."""

from __future__ import annotations

import re

_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-"})


def normalise(text: str) -> str:
    """Case, whitespace, curly quotes and dashes do not make a quote unverifiable; words do."""
    text = re.sub(r"\s+", " ", text.translate(_QUOTES).casefold()).strip()
    return text.strip(" \"'.,;:")


def quote_in(quote: str, text: str) -> bool:
    q = normalise(quote)
    return len(q) >= 3 and q in normalise(text)


def quote_span(quote: str | None, text: str) -> tuple[int, int] | None:
    """Where a quote that `quote_in` accepts sits in `text`, as [start, end) offsets into `text` (the report
    highlights it); None when `quote_in` would drop it. Same rule: `text` is normalised character by character,
    remembering where each normalised character came from."""
    if not quote:
        return None
    q = normalise(quote)
    if len(q) < 3:
        return None
    chars: list[str] = []
    origin: list[int] = []
    for i, ch in enumerate(text):
        if ch.isspace():
            if chars and chars[-1] != " ":
                chars.append(" ")
                origin.append(i)
            continue
        for c in ch.translate(_QUOTES).casefold():
            chars.append(c)
            origin.append(i)
    at = "".join(chars).find(q)
    if at < 0:
        return None
    return origin[at], origin[at + len(q) - 1] + 1
