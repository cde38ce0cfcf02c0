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
