"""A graded severity beside the judge's label: the expected severity weight under the judge's own probabilities of
the severity labels, read from the token log probabilities of its answer (ours, beyond the paper; MHQR itself
uses only the label).

At the token where the severity value of the answer starts, the engine reports the model's most likely tokens
with their log probabilities. An alternative token that continues the text towards exactly one severity label
counts for that label; one that fits none (the model's distribution is taken before the JSON grammar narrows
it) or several (a bare "m" could begin "minor" or "major") is left out, and what is left is renormalised. The
expected weight is then the sum of each label's probability times its rubric weight. Two replies the judge gives
the same label can so still be told apart: the one it was closer to calling worse gets the higher value.

Where the engine sent no log probabilities, or the tokens do not spell the answer's severity, there is no graded
value (None), never a guess.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Sequence

# Alternatives asked per token: the most OpenAI accepts, and what vLLM and llama.cpp serve by default.
TOP_LOGPROBS = 20

_SEVERITY_VALUE = re.compile(r'"severity"\s*:\s*"')


def _texts(tokens: Sequence[Mapping[str, Any]]) -> list[str] | None:
    out = []
    for t in tokens:
        text = t.get("token")
        if not isinstance(text, str):
            return None
        out.append(text)
    return out


def severity_probs(
    tokens: Sequence[Mapping[str, Any]], labels: Sequence[str], severity: str
) -> dict[str, float] | None:
    """Probability of each severity label at the answer's severity value, from the reply's token log probabilities
    (`RawReply.logprobs`); None where they cannot be read (see the module docstring). The value is found in the
    text the tokens spell, which a server may send back changed a little as the reply's content (stripped)."""
    texts = _texts(tokens)
    if texts is None:
        return None
    spelled = "".join(texts)
    # The last one: severity is the answer's closing field, and a quote inside a string value is escaped.
    starts = [m.end() for m in _SEVERITY_VALUE.finditer(spelled) if spelled.startswith(severity + '"', m.end())]
    if not starts:
        return None
    value = starts[-1]
    offset = 0
    for text, token in zip(texts, tokens):
        if offset + len(text) > value:
            return _at_token(spelled[offset:value], token, labels)
        offset += len(text)
    return None


def _at_token(before: str, token: Mapping[str, Any], labels: Sequence[str]) -> dict[str, float] | None:
    """Label probabilities at one token position; `before`: the part of the token that precedes the value."""
    alternatives = {
        str(a.get("token")): float(a["logprob"])
        for a in token.get("top_logprobs") or []
        if isinstance(a, dict) and isinstance(a.get("logprob"), (int, float))
    }
    # The sampled token is always one of the alternatives, even where the server listed it apart.
    if isinstance(token.get("logprob"), (int, float)):
        alternatives.setdefault(str(token["token"]), float(token["logprob"]))
    mass = dict.fromkeys(labels, 0.0)
    for text, logprob in alternatives.items():
        if not text.startswith(before) or math.isinf(logprob):
            continue
        rest = text[len(before) :]
        if not rest:
            continue  # a token that ends where the value starts says nothing about it
        fits = [lab for lab in labels if lab.startswith(rest) or rest.startswith(lab + '"')]
        if len(fits) == 1:
            mass[fits[0]] += math.exp(logprob)
    total = sum(mass.values())
    if total <= 0:
        return None
    return {lab: m / total for lab, m in mass.items()}


def expected_weight(probs: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """Sum of each label's probability times its weight."""
    return float(sum(p * weights[lab] for lab, p in probs.items()))
