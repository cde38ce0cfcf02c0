"""Annotation units: how rows of a sample become the items a rater sees and the units they rate in them.
The one place that knows the unit shapes (MindEval2 §3.4: clinicians rated single replies, five-turn
excerpts and whole conversations, turn by turn; §4.3: realism windows of 1, 5 or 9 turns).

An item shows messages; its units are the messages rated in it, each answered on its own. A unit names the
message it rates (`message`, an index into the item's messages) and, for MHQR, the excerpt and turn ids the
answer is exported under, because `mindsim judge agreement` reads one annotation line per rated turn.

MHQR items are the rows of `mindsim judge sample` (`judge.units.Excerpt`): one excerpt — a reply, a window of
five counsellor turns, or a whole conversation — is one item, its `rate` list the units (each with its
`turn_id`). A row without `rate` (written before multi-turn units) is one reply: its last message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.exchange import spoken

SPEAKER = {"user": "patient", "assistant": "counsellor"}


def shown(messages: Iterable[dict[str, Any]], patient_role: str = "user") -> list[dict[str, str]]:
    """Chat messages as the page shows them: speaker `patient` or `counsellor`, text. Which messages count is
    `mindcore.exchange.spoken`'s rule, so turn k here is turn k in the judge, the report and the samples: a blank
    reply is still a turn (the page shows it as blank) rather than shifting every later turn's number."""
    return [
        {"speaker": "patient" if role == patient_role else "counsellor", "text": text}
        for role, text in spoken(messages)
    ]


@dataclass(frozen=True)
class MhqrItem:
    item_id: str
    unit: str
    system: str
    system_prompt: str
    messages: list[dict[str, str]]
    units: list[dict[str, Any]]


def mhqr_items(rows: Sequence[dict[str, Any]], where: str) -> list[MhqrItem]:
    """Excerpt rows → items, in the rows' order (the sampler's shuffle)."""
    items = []
    for row in rows:
        for f in ("excerpt_id", "system", "system_prompt", "messages"):
            if f not in row:
                raise InputError(f"{where}: excerpt row without '{f}'; give a file written by `mindsim judge sample`")
        eid, msgs = row["excerpt_id"], row["messages"]
        rate = row.get("rate") or [{"turn_id": None, "message_index": len(msgs) - 1}]
        units = []
        for k, t in enumerate(rate):
            i = t["message_index"]
            if not 0 <= i < len(msgs) or msgs[i].get("role") != "assistant":
                raise InputError(f"{where}: excerpt {eid}: rated turn {k + 1} is not a counsellor message")
            units.append(
                {
                    "unit": str(k),
                    "message": i,
                    "excerpt_id": eid,
                    **({"turn_id": t["turn_id"]} if t.get("turn_id") else {}),
                }
            )
        shown_msgs = [{"speaker": SPEAKER.get(m["role"], m["role"]), "text": m["content"]} for m in msgs]
        items.append(MhqrItem(eid, row.get("unit", "reply"), row["system"], row["system_prompt"], shown_msgs, units))
    return items


@dataclass(frozen=True)
class Turn:
    """One realism turn: the counsellor message before the patient's reply (None at an opening) and the reply."""

    counsellor: Optional[str]
    patient: str


def turns(messages: Sequence[dict[str, str]]) -> list[Turn]:
    """Turns of a conversation shown with `shown()`: each patient message with the counsellor message right
    before it. MindEval2 §4.3 rates 'a counsellor message plus the patient's reply'."""
    out = []
    for i, m in enumerate(messages):
        if m["speaker"] == "patient":
            prev = messages[i - 1] if i and messages[i - 1]["speaker"] == "counsellor" else None
            out.append(Turn(prev["text"] if prev else None, m["text"]))
    return out


def window(ts: Sequence[Turn], start: int, size: int) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """Messages and units of the window of `size` turns from turn `start`: every patient reply is a unit."""
    msgs: list[dict[str, str]] = []
    units = []
    for k, t in enumerate(ts[start : start + size]):
        if t.counsellor is not None:
            msgs.append({"speaker": "counsellor", "text": t.counsellor})
        msgs.append({"speaker": "patient", "text": t.patient})
        units.append({"unit": str(k), "message": len(msgs) - 1, "turn": start + k})
    return msgs, units
