"""Annotation units: how rows of a sample become the items a rater sees and the units they rate in them.
The one place that knows the unit shapes (MindEval2 §3.4: clinicians rated single replies, five-turn
excerpts and whole conversations, turn by turn; §4.3: realism windows of 1, 5 or 9 turns).

An item shows messages; its units are the messages rated in it, each answered on its own. A unit names the
message it rates (`message`, an index into the item's messages) and, for MHQR, the excerpt id the answer is
exported under (`ref`), because `mindsim judge agreement` reads one annotation line per excerpt id.

MHQR items come from `mindsim judge sample` rows. Today each row is one counsellor reply with the
conversation up to it: one item, one unit. Rows that share a group id (any of `GROUP_FIELDS`: the window and
conversation units of the judge's sampler) become one item whose units are each row's reply, shown in the
longest row's conversation; nothing else here changes when those rows appear.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

from mindcore.errors import InputError

GROUP_FIELDS = ("unit_id", "window_id", "conversation_unit")
SPEAKER = {"user": "patient", "assistant": "counsellor"}


def shown(messages: Iterable[dict[str, Any]], patient_role: str = "user") -> list[dict[str, str]]:
    """Chat messages as the page shows them: speaker `patient` or `counsellor`, text; system prompts, tool
    traffic and empty messages left out."""
    out = []
    for m in messages:
        role, text = m.get("role"), m.get("content")
        if role not in ("user", "assistant") or not isinstance(text, str) or not text.strip() or m.get("tool_calls"):
            continue
        patient = role == patient_role
        out.append({"speaker": "patient" if patient else "counsellor", "text": text})
    return out


@dataclass(frozen=True)
class MhqrItem:
    item_id: str
    system: str
    system_prompt: str
    messages: list[dict[str, str]]
    units: list[dict[str, Any]]
    excerpt_ids: list[str]


def _group(row: dict[str, Any]) -> Optional[str]:
    for f in GROUP_FIELDS:
        if row.get(f):
            return str(row[f])
    return None


def mhqr_items(rows: Sequence[dict[str, Any]], where: str) -> list[MhqrItem]:
    """Excerpt rows → items, in the rows' order (the sampler's shuffle)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    order: list[str] = []
    for row in rows:
        for f in ("excerpt_id", "system", "system_prompt", "messages"):
            if f not in row:
                raise InputError(f"{where}: excerpt row without '{f}'; give a file written by `mindsim judge sample`")
        g = _group(row) or row["excerpt_id"]
        if g not in groups:
            groups[g] = []
            order.append(g)
        groups[g].append(row)
    items = []
    for g in order:
        members = sorted(groups[g], key=lambda r: len(r["messages"]))
        full = members[-1]["messages"]
        units = []
        for k, r in enumerate(members):
            n = len(r["messages"])
            if full[:n] != r["messages"]:
                raise InputError(f"{where}: excerpts of unit {g} do not share one conversation")
            if r["messages"][-1].get("role") != "assistant":
                raise InputError(f"{where}: excerpt {r['excerpt_id']} does not end on a counsellor reply")
            units.append({"unit": str(k), "message": n - 1, "ref": r["excerpt_id"]})
        msgs = [{"speaker": SPEAKER.get(m["role"], m["role"]), "text": m["content"]} for m in full]
        items.append(MhqrItem(g, members[0]["system"], members[0]["system_prompt"], msgs, units,
                              [r["excerpt_id"] for r in members]))
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
    for k, t in enumerate(ts[start:start + size]):
        if t.counsellor is not None:
            msgs.append({"speaker": "counsellor", "text": t.counsellor})
        msgs.append({"speaker": "patient", "text": t.patient})
        units.append({"unit": str(k), "message": len(msgs) - 1, "turn": start + k})
    return msgs, units
