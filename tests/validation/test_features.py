import math
import re

import numpy as np
import pytest
from lexicalrichness import LexicalRichness

from mindsimkit.validation.features import (
    FEATURES,
    conversation_features,
    count_sentences,
    default_lexicon,
    marker_counts,
    mtld,
)


def _tokens(text):
    # lexicalrichness's documented preprocessing, written out independently
    text = re.sub(r"[0-9]+", "", text.lower()).replace("–", "").replace("—", "").replace("-", "")
    text = re.sub(r"[!\"#$%&'()*+,./:;<=>?@\[\\\]^_`{|}~]", " ", text)
    return text.split()


def _mtld_one_way(tokens, threshold):
    factors, seen, count, ttr = 0.0, set(), 0, 1.0
    for tok in tokens:
        count += 1
        seen.add(tok)
        ttr = len(seen) / count
        if ttr <= threshold:
            factors, seen, count = factors + 1, set(), 0
    if count:
        factors += (1 - ttr) / (1 - threshold)
    if factors == 0:
        whole = len(set(tokens)) / len(tokens)
        factors = 1 if whole == 1 else (1 - whole) / (1 - threshold)
    return len(tokens) / factors


TEXTS = [
    "I don't know. I just feel tired all the time, tired of work, tired of home, tired of everything.",
    "The cat sat on the mat and the dog sat on the log and then the cat and the dog sat together on the mat. "
    "Later, a bird came by with a song nobody had heard before, bright and strange.",
    "ok",
]


@pytest.mark.parametrize("text", TEXTS)
def test_mtld_matches_lexicalrichness_and_is_bidirectional(text):
    toks = _tokens(text)
    expected = (_mtld_one_way(toks, 0.72) + _mtld_one_way(toks[::-1], 0.72)) / 2
    assert mtld(text) == pytest.approx(expected)
    assert mtld(text) == pytest.approx(LexicalRichness(text).mtld(threshold=0.72))


def test_mtld_forward_and_backward_differ_on_an_asymmetric_text():
    toks = _tokens(TEXTS[1])
    assert _mtld_one_way(toks, 0.72) != pytest.approx(_mtld_one_way(toks[::-1], 0.72))


def test_mtld_of_a_text_without_words_is_nan():
    assert math.isnan(mtld("123 -- ?!"))


def test_marker_counts_on_hand_made_sentences():
    lex = default_lexicon()
    counts = marker_counts("I ALWAYS feel sad. Everything is bad, you know? Um, I mean... I'm all done. Always!", lex)
    assert counts == {"absolutist": 4, "depressive": 2, "non_fluency": 3}  # always x2, everything, all
    # Whole words only: "alloy", "badly", "summer" and "sadness" contain markers but are not markers.
    assert marker_counts("alloy badly summer sadness", lex) == {"absolutist": 0, "depressive": 0, "non_fluency": 0}
    # Phrases and typographic apostrophes.
    assert marker_counts("I want to give up. Y’know, let’s see.", lex) == {
        "absolutist": 0,
        "depressive": 1,
        "non_fluency": 2,
    }


def test_sentence_counting():
    assert count_sentences("No punctuation here") == 1
    assert count_sentences("One. Two! Three?") == 3
    assert count_sentences("Well...\nnew line then") == 2
    assert count_sentences("version 2.5 is out") == 1  # a dot inside a number is no sentence end


def test_conversation_features_by_hand():
    turns = ["I am always tired.", "Um ok", "This is a longer turn with ten words in it now."]
    f = conversation_features(turns)
    counts = np.array([4, 2, 11])
    assert list(f) == list(FEATURES)
    assert f["words_per_turn"] == pytest.approx(counts.mean())
    assert f["turn_length_cv"] == pytest.approx(counts.std() / counts.mean())
    assert f["words_per_sentence"] == pytest.approx(17 / 3)
    tokens = len(" ".join(turns)) // 4
    assert f["absolutist_per_1k"] == pytest.approx(1 / tokens * 1000)
    assert f["depressive_per_1k"] == pytest.approx(1 / tokens * 1000)
    assert f["non_fluency_per_1k"] == pytest.approx(1 / tokens * 1000)


def test_rates_over_zero_pseudo_tokens_are_nan_not_zero():
    f = conversation_features(["ok"])
    assert f["words_per_turn"] == 1 and f["turn_length_cv"] == 0
    assert math.isnan(f["absolutist_per_1k"])


def test_fast_marker_counting_equals_a_plain_word_boundary_regex():
    """The word-run tally must give what one `\\b(?:a|b|…)\\b` regex per family gives (PSI-Bench)."""
    import yaml
    from importlib import resources

    lists = yaml.safe_load(resources.files("mindsimkit.validation").joinpath("data/markers.yaml").read_text())["lists"]
    naive = {
        fam: re.compile(r"\b(?:" + "|".join(re.escape(w) for w in sorted(ws, key=len, reverse=True)) + r")\b", re.I)
        for fam, ws in lists.items()
    }
    vocab = [w for ws in lists.values() for w in ws] + [
        "allow",
        "ball",
        "Um-hmm",
        "don't",
        "you",
        "know",
        "I",
        "mean",
        "it's",
        "close-up",
        "bad_thing",
        "ALL",
        "123",
        "x",
    ]
    rng = np.random.default_rng(0)
    seps = [" ", " ", ", ", ". ", "-", "'", "\n", "!! "]
    lex = default_lexicon()
    for _ in range(300):
        parts = rng.choice(vocab, size=int(rng.integers(1, 25)))
        text = "".join(str(p) + seps[int(rng.integers(len(seps)))] for p in parts)
        assert marker_counts(text, lex) == {fam: len(rx.findall(text)) for fam, rx in naive.items()}, text
