"""Trust-gated retrieval over the dynamic memory layer (PatientAct §3.3.2).

Each counsellor message is matched against the items' activation tags; a relevant item is *retrieved* when
current trust reaches its disclosure level, *blocked* when it is above trust and carries the discomfort flag
(the patient is told something sensitive is being approached, never what), and otherwise stays out of
sight. The paper says only that the utterance is matched against the tags. Two matchers, switched by
`simulation.patientact.retrieval`: `lexical` (here, the offline default, deterministic: a tag matches when
every content word of it, crudely stemmed, is among the message's stems; stop words, suffixes and a few
everyday synonyms are data, `retrieval.yaml`) and `llm` (`mindsim.patientact.matcher`: the matcher role picks
the tags that fit, given the recent conversation). Both feed `split`. Recall and precision of both on one
held-out set: docs/patientact.md. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Protocol, Sequence

from mindsimkit.mindsim.patientact.data import lexicon

_WORD = re.compile(r"[a-z]+")


class Tagged(Protocol):
    id: str
    level: float
    tags: list[str]
    discomfort: bool


def stem(word: str) -> str:
    lex = lexicon()
    word = lex.synonyms.get(word, word)
    for suffix in sorted(lex.suffixes, key=len, reverse=True):
        if word.endswith(suffix) and len(word) - len(suffix) >= lex.min_stem:
            return word[: -len(suffix)]
    return word


def stems(text: str) -> set[str]:
    stop = set(lexicon().stopwords)
    words = _WORD.findall(text.lower().replace("’", "'").replace("'", ""))
    return {stem(w) for w in words if w not in stop}


def tag_matches(tag: str, message_stems: set[str]) -> bool:
    wanted = stems(tag)
    return bool(wanted) and wanted <= message_stems


def relevant(items: Iterable[Tagged], message: str) -> list[str]:
    """Ids of the items any of whose tags match `message`, in item order."""
    found = stems(message)
    return [it.id for it in items if any(tag_matches(t, found) for t in it.tags)]


@dataclass
class Gate:
    """One turn's split of the relevant items."""

    relevant: list[str] = field(default_factory=list)
    retrieved: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    withheld: list[str] = field(default_factory=list)  # above trust, no discomfort: silently out of reach


def content_tags(text: str, most: int = 5) -> list[str]:
    """Up to `most` distinct content words of `text`, longest first: the tags of an item no decomposer tagged
    (a session's scenario items; ours)."""
    stop = set(lexicon().stopwords)
    words = _WORD.findall(text.lower().replace("’", "'").replace("'", ""))
    seen: dict[str, str] = {}
    for w in words:
        if w not in stop and len(w) > 3 and stem(w) not in seen:
            seen[stem(w)] = w
    return sorted(seen.values(), key=lambda w: (-len(w), w))[:most]


def gate(items: Sequence[Tagged], message: str, trust: float, *, trust_gating: bool = True) -> Gate:
    """Split the items relevant to `message` (lexical matcher) by trust."""
    return split(items, relevant(items, message), trust, trust_gating=trust_gating)


def split(items: Sequence[Tagged], relevant_ids: list[str], trust: float, *, trust_gating: bool = True) -> Gate:
    """Split the relevant items by trust. Without gating (an ablation) every relevant item is retrieved and
    nothing is blocked."""
    by_id = {it.id: it for it in items}
    out = Gate(relevant=[i for i in (it.id for it in items) if i in set(relevant_ids)])
    for iid in out.relevant:
        it = by_id[iid]
        if not trust_gating or trust + 1e-9 >= it.level:
            out.retrieved.append(iid)
        elif it.discomfort:
            out.blocked.append(iid)
        else:
            out.withheld.append(iid)
    return out
