"""Surface features of the patient's turns (MindEval2/MindSim paper, Appendix E "Surface metrics";
PSI-Bench surface metrics).

Seven values per conversation, computed over the patient's non-empty turns:
words per turn, words per sentence, coefficient of variation of words per turn, MTLD
(lexicalrichness, bidirectional, threshold 0.72), and absolutist / depressive / non-fluency marker
rates per 1,000 pseudo-tokens (`len(text) // 4` of the turns joined by a space, as PSI-Bench does).

A value that is undefined for a conversation (MTLD of a text with no word left after
lexicalrichness's preprocessing, a marker rate over zero pseudo-tokens) is NaN and that
conversation drops out of that one feature's distribution only.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore import yamlio
from mindsimkit.validation.transcripts import Conversation

FEATURES: tuple[str, ...] = (
    "words_per_turn",
    "words_per_sentence",
    "turn_length_cv",
    "mtld",
    "absolutist_per_1k",
    "depressive_per_1k",
    "non_fluency_per_1k",
)
FEATURE_LABELS: dict[str, str] = {
    "words_per_turn": "Words per turn",
    "words_per_sentence": "Words per sentence",
    "turn_length_cv": "Word count CV",
    "mtld": "MTLD",
    "absolutist_per_1k": "Absolutist / 1k tok",
    "depressive_per_1k": "Depressive / 1k tok",
    "non_fluency_per_1k": "Non-fluency / 1k tok",
}
MARKER_FEATURES = {
    "absolutist": "absolutist_per_1k",
    "depressive": "depressive_per_1k",
    "non_fluency": "non_fluency_per_1k",
}

# A sentence ends at a run of terminal punctuation followed by whitespace or the end, or at a line
# break (chat users often end a thought with Enter instead of a full stop).
_SENTENCE_END = re.compile(r"[.!?…]+(?=\s|$)|\n+")


_WORD_RUN = re.compile(r"\w+")


@dataclass(frozen=True)
class MarkerFamily:
    """One marker list split for speed: entries that are a single run of word characters are counted
    from a word-run tally (a `\b…\b` match of such a word is exactly a maximal word run equal to it);
    the few phrases ("give up", "y'know") go through a small regex."""

    words: frozenset[str]
    phrases: re.Pattern[str] | None

    def count(self, lowered: str, runs: Counter[str]) -> int:
        n = sum(runs[w] for w in self.words if w in runs)
        return n + (len(self.phrases.findall(lowered)) if self.phrases is not None else 0)


@dataclass(frozen=True)
class MarkerLexicon:
    """Marker families from `validation/data/markers.yaml`."""

    families: dict[str, MarkerFamily]
    chars_per_token: int
    rate_per: int
    source: str
    version: str


def _family(words: list[str]) -> MarkerFamily:
    entries = {w.strip().lower() for w in words if w.strip()}
    singles = frozenset(w for w in entries if _WORD_RUN.fullmatch(w))
    phrases = sorted(entries - singles, key=len, reverse=True)  # longest first, as PSI-Bench's alternation
    pattern = re.compile(r"\b(?:" + "|".join(re.escape(p) for p in phrases) + r")\b") if phrases else None
    return MarkerFamily(words=singles, phrases=pattern)


def parse_lexicon(data: dict[str, Any], where: str) -> MarkerLexicon:
    """Validate a marker data file's content; every list in MARKER_FEATURES must be present."""
    lists = data.get("lists") if isinstance(data, dict) else None
    if not isinstance(lists, dict):
        raise ConfigError(f"{where}: needs a 'lists' mapping of marker family -> list of words")
    missing = [k for k in MARKER_FEATURES if not isinstance(lists.get(k), list) or not lists[k]]
    if missing:
        raise ConfigError(f"{where}: marker lists {missing} are missing or empty")
    return MarkerLexicon(
        families={k: _family([str(w) for w in lists[k]]) for k in MARKER_FEATURES},
        chars_per_token=int(data.get("pseudo_token_chars", 4)),
        rate_per=int(data.get("rate_per", 1000)),
        source=str(data.get("source", "")),
        version=str(data.get("version", "")),
    )


@lru_cache(maxsize=1)
def default_lexicon() -> MarkerLexicon:
    text = resources.files("mindsimkit.validation").joinpath("data/markers.yaml").read_text(encoding="utf-8")
    return parse_lexicon(yamlio.safe_load(text), "validation/data/markers.yaml")


def count_sentences(text: str) -> int:
    """Sentences with at least one word; a turn without terminal punctuation is one sentence."""
    return sum(1 for part in _SENTENCE_END.split(text) if part.split())


def mtld(text: str, threshold: float = 0.72) -> float:
    """lexicalrichness MTLD (mean of the forward and the reversed pass); NaN for a text with no word."""
    # lexicalrichness imports textblob, nltk, scipy.stats and matplotlib at its own import (~3.5 s here): imported on
    # first use, so commands that stop at bad input or never measure a text do not wait for it.
    from lexicalrichness import LexicalRichness

    try:
        return float(LexicalRichness(text).mtld(threshold=threshold))
    except ZeroDivisionError:
        return math.nan


def marker_counts(text: str, lexicon: MarkerLexicon) -> dict[str, int]:
    """Whole-word, case-insensitive matches per marker family (PSI-Bench's `\b…\b` regex matching).
    Typographic apostrophes are folded so that "y’know" and "let’s see" typed on a phone count like
    their ASCII spellings."""
    lowered = text.replace("\u2019", "'").lower()
    runs = Counter(_WORD_RUN.findall(lowered))
    return {name: family.count(lowered, runs) for name, family in lexicon.families.items()}


def conversation_features(
    turns: list[str], *, lexicon: MarkerLexicon | None = None, mtld_threshold: float = 0.72
) -> dict[str, float]:
    """The seven surface features of one conversation's patient turns (non-empty, stripped)."""
    if not turns:
        raise ValueError("conversation_features needs at least one patient turn")
    lexicon = lexicon or default_lexicon()
    word_counts = np.array([len(t.split()) for t in turns], dtype=float)
    total_words = word_counts.sum()
    sentences = sum(count_sentences(t) for t in turns)
    full_text = " ".join(turns)
    tokens = len(full_text) // lexicon.chars_per_token
    mean_wc = word_counts.mean()
    values = {
        "words_per_turn": float(mean_wc),
        "words_per_sentence": float(total_words / sentences) if sentences else math.nan,
        # Population SD: the turns are the whole conversation, not a sample of it.
        "turn_length_cv": float(word_counts.std() / mean_wc) if mean_wc > 0 else math.nan,
        "mtld": mtld(full_text, mtld_threshold),
    }
    for family, count in marker_counts(full_text, lexicon).items():
        values[MARKER_FEATURES[family]] = count / tokens * lexicon.rate_per if tokens else math.nan
    return values


class FeatureRow(BaseModel):
    """Per-conversation feature values: numbers and hashed keys only, never text."""

    conversation_index: int = Field(description="Position of the conversation in its source (no raw id kept).")
    patient_index: int = Field(description="Patient/group number by first appearance; the bootstrap resamples these.")
    patient_turns: int = Field(description="Number of non-empty patient turns.")
    words_per_turn: float = Field(description="Mean words (whitespace tokens) per patient turn.")
    words_per_sentence: float = Field(description="Patient words divided by patient sentences.")
    turn_length_cv: float = Field(description="Population SD / mean of words per patient turn.")
    mtld: float = Field(description="lexicalrichness MTLD (bidirectional) of the joined patient turns.")
    absolutist_per_1k: float = Field(description="Absolutist markers per 1,000 pseudo-tokens (len//4).")
    depressive_per_1k: float = Field(description="Depressive markers per 1,000 pseudo-tokens (len//4).")
    non_fluency_per_1k: float = Field(description="Non-fluency markers per 1,000 pseudo-tokens (len//4).")


def feature_rows(
    conversations: list[Conversation],
    *,
    patient_role: str,
    lexicon: MarkerLexicon | None = None,
    mtld_threshold: float = 0.72,
) -> list[FeatureRow]:
    """Feature rows for conversations that have patient turns. Raw ids are replaced by numbers so an
    artifact cannot be joined back to the source's participant ids."""
    rows = []
    patients: dict[str, int] = {}
    for index, conv in enumerate(conversations):
        turns = conv.patient_turns(patient_role)
        rows.append(
            FeatureRow(
                conversation_index=index,
                patient_index=patients.setdefault(conv.patient_id, len(patients)),
                patient_turns=len(turns),
                **conversation_features(turns, lexicon=lexicon, mtld_threshold=mtld_threshold),
            )
        )
    return rows
