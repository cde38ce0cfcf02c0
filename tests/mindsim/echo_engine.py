"""The smallest patient engine (docs/architecture.md, "Adding a patient engine"): one module, one registration.

The echo patient answers each counsellor message by repeating it, and opens the first exchange of a later
session with the last thing it said in the session before (state carried across sessions). It makes no LLM
call of its own, so tests can assert exactly what it said; everything around it — scenarios, the
counsellor, memory, checkpoints, records, transcripts — is the simulator's.
"""

from __future__ import annotations

from typing import Any

from mindsimkit.mindsim.patient import TokenCount
from mindsimkit.mindsim.patient_engines import PatientEngine, TalkStart, register
from mindsimkit.mindsim.records import PatientTurn

LEAVE_AFTER = 3  # patient turns after the opening; then the echo patient ends the session


class EchoPatient:
    def __init__(self, system: str, last_words: str | None):
        self.history: list[dict[str, Any]] = [{"role": "system", "content": system}]
        self.tokens = TokenCount()
        self.last_words = last_words

    def _turn(self, index: int, message: str, **kw: Any) -> PatientTurn:
        self.history.append({"role": "assistant", "content": message})
        return PatientTurn(
            index=index,
            opening=index == 0,
            move=None,
            secondary_move=None,
            reasoning=None,
            cue=None,
            message=message,
            **{"end_conversation": False, **kw},
        )

    def open(self, opening_message: str, rejected_openings: list[Any] = ()) -> PatientTurn:
        return self._turn(0, opening_message, rejected_messages=list(rejected_openings))

    async def turn(self, index: int, counsellor_text: str) -> PatientTurn:
        self.history.append({"role": "user", "content": counsellor_text})
        words = f"You said: {counsellor_text}"
        if index == 1 and self.last_words:
            words += f" Last time I ended with: {self.last_words}"
        return self._turn(index, words, end_conversation=index >= LEAVE_AFTER)


class EchoEngine(PatientEngine):
    name = "echo"
    description = "repeats the counsellor (tests and docs: the smallest engine)"

    def participant(self, talk: TalkStart) -> EchoPatient:
        return EchoPatient(
            f"Patient {talk.arc.profile.profile_id}, session {talk.inp.plan.index}: repeat what you hear.",
            talk.inp.carried,
        )

    def carry(self, plan: Any, previous: Any, config: Any) -> str | None:
        return previous.turns[-1].message if previous is not None else None


ENGINE = register(EchoEngine())
