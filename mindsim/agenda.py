"""The session agenda and its two tools, `complete_todo` and `add_todo` (MindEval2/MindSim §4.2: "between the two
steps, the model may also update the session agenda"; Appendix D patient template: items named by `[id]`
or in the patient's own words, every answer says what is still open).

Pure state, no LLM. Items the patient never reached feed the next session's situation writer.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field

_WORD = re.compile(r"[a-z0-9']+")
_ID = re.compile(r"^\s*\[?\s*(\d+)\s*\]?\s*$")
_STOP = frozenset("a an the to of and or my me i it is be about with for on in that this what whether".split())


class AgendaItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: int = Field(ge=1, description="Item number shown to the patient as [id]")
    text: str = Field(description="The item as written")
    done: bool = Field(False, description="Whether the patient marked it done")
    added: bool = Field(False, description="Added mid-session with add_todo (not from the scenario)")


class Agenda(BaseModel):
    """The patient's own list for one session."""

    model_config = ConfigDict(extra="forbid")
    items: list[AgendaItem] = Field(default_factory=list, description="Items in order of creation")

    @classmethod
    def from_checkpoints(cls, checkpoints: list[str]) -> "Agenda":
        return cls(items=[AgendaItem(id=i + 1, text=t) for i, t in enumerate(checkpoints)])

    @property
    def open_items(self) -> list[AgendaItem]:
        return [i for i in self.items if not i.done]

    def status(self) -> str:
        """What is still open, as every tool answer reports it."""
        if not self.open_items:
            return "Nothing left open on your list."
        return "Still open: " + "; ".join(f"[{i.id}] {i.text}" for i in self.open_items) + "."

    def match(self, ref: str) -> AgendaItem | None:
        """The open item `ref` names: by [id], else by the best word overlap (at least one content word)."""
        if m := _ID.match(ref):
            wanted = int(m.group(1))
            return next((i for i in self.open_items if i.id == wanted), None)
        words = _content_words(ref)
        best, best_score = None, 0.0
        for item in self.open_items:
            iw = _content_words(item.text)
            if not iw or not words:
                continue
            score = len(words & iw) / len(iw)
            if score > best_score:
                best, best_score = item, score
        return best if best_score > 0 else None

    def complete(self, ref: str) -> str:
        item = self.match(ref)
        if item is None:
            return f"Nothing open matches '{ref.strip()}'. {self.status()}"
        item.done = True
        return f"Marked done: {item.text}. {self.status()}"

    def add(self, text: str) -> str:
        text = text.strip()
        if not text:
            return f"Nothing to add. {self.status()}"
        if any(_content_words(text) == _content_words(i.text) for i in self.items):
            return f"That is already on your list. {self.status()}"
        self.items.append(AgendaItem(id=len(self.items) + 1, text=text, added=True))
        return f"Added: {text}. {self.status()}"


def _content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}
