"""The session agenda and its two tools, `complete_todo` and `add_todo` (MindEval2/MindSim §4.2: "between the two
steps, the model may also update the session agenda"; Appendix D patient template, whose `agenda_plain` switch
picks between the two ways below).

Ours: items are shown and named by `[id]` (or in the patient's words), and every answer says what is still open.
Plain (`simulation.agenda_plain`, as MindEval2's reference code keeps the list): no ids, the patient names items in
its own words, an answer is a word (`brief`) and never the list, and a completion that matches no open item is kept
as a done item of its own, since the patient, not seeing the list, still got to a thing it meant to.

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
    brief: dict[str, str] | None = Field(
        None, description="Plain agenda: the word each answer is (done, added, duplicate, unnamed); None: ours"
    )

    @classmethod
    def from_checkpoints(cls, checkpoints: list[str], brief: dict[str, str] | None = None) -> "Agenda":
        return cls(items=[AgendaItem(id=i + 1, text=t) for i, t in enumerate(checkpoints)], brief=brief)

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
        if self.brief is not None:
            if not ref.strip():
                return self.brief["unnamed"]
            if item is None:  # not on the list, yet said: kept as a done item of its own
                item = AgendaItem(id=len(self.items) + 1, text=ref.strip(), added=True)
                self.items.append(item)
            item.done = True
            return self.brief["done"]
        if item is None:
            return f"Nothing open matches '{ref.strip()}'. {self.status()}"
        item.done = True
        return f"Marked done: {item.text}. {self.status()}"

    def add(self, text: str) -> str:
        text = text.strip()
        brief = self.brief
        if not text:
            return brief["unnamed"] if brief else f"Nothing to add. {self.status()}"
        if any(_content_words(text) == _content_words(i.text) for i in self.items):
            return brief["duplicate"] if brief else f"That is already on your list. {self.status()}"
        self.items.append(AgendaItem(id=len(self.items) + 1, text=text, added=True))
        return brief["added"] if brief else f"Added: {text}. {self.status()}"


def _content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}
