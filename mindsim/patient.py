"""The patient and counsellor participants (MindEval2/MindSim §4.2 "Turn generation", Figure 6, Appendix D).

A patient turn is a real tool-using exchange kept in the patient-side history: a `commit_move` call, the
harness's answer (accepted with a writing cue, or rejected with the reason and committed again, bounded),
then optional `complete_todo` / `add_todo` calls answered with what is still open, then the message. The
counsellor sees only plain messages and its own system prompt.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from mindcore.engine import ToolSpec
from mindcore.errors import MindsimError
from mindcore.types import ToolCallResult
from mindsim.agenda import Agenda
from mindsim.config import SimulationConfig
from mindsim.guard import GuardState, TodoAdd, TodoComplete, check_commit, commit_move_model, pick_cue
from mindsim.records import PatientTurn, RejectedCommit, TodoUpdate
from profilegen.moves import Vocabulary

COMMIT_DESCRIPTION = "Commit to what this turn does before writing it. Must be accepted before you write."
COMPLETE_DESCRIPTION = "Mark an item on your list done, only when it actually got said, asked or dealt with."
ADD_DESCRIPTION = "Add something new you need to get to before this conversation is over."
_WRAPPERS = re.compile(r'^\s*(?:patient\s*:\s*)?["“]?(.*?)["”]?\s*$', re.IGNORECASE | re.DOTALL)


class TurnFailed(MindsimError):
    """A turn could not be produced within its bounded retries; the session counts as failed."""


class TokenCount:
    def __init__(self) -> None:
        self.prompt = 0
        self.completion = 0

    def add(self, reply: Any) -> None:
        self.prompt += getattr(reply, "prompt_tokens", 0) or 0
        self.completion += getattr(reply, "completion_tokens", 0) or 0


def clean_message(text: str | None) -> str:
    """The words themselves: surrounding quotes and a 'Patient:' label stripped, never invented."""
    m = _WRAPPERS.match(text or "")
    return (m.group(1) if m else (text or "")).strip()


def _tool_result(call_id: str, name: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


@dataclass
class Patient:
    """A patient in one session: its history, agenda and move memory."""

    client: Any
    vocab: Vocabulary
    archetype: str
    max_depth: int
    style_cues: list[str]
    agenda: Agenda
    config: SimulationConfig
    rng: random.Random
    history: list[dict[str, Any]]
    tokens: TokenCount = field(default_factory=TokenCount)
    recent_moves: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        available = [m.id for m in self.vocab.available(self.archetype)]
        depth = [m for m in self.vocab.depth_moves if m in available]
        self.commit_tool = ToolSpec.from_model("commit_move", COMMIT_DESCRIPTION, commit_move_model(available, depth))
        self.todo_tools = [
            ToolSpec.from_model("complete_todo", COMPLETE_DESCRIPTION, TodoComplete),
            ToolSpec.from_model("add_todo", ADD_DESCRIPTION, TodoAdd),
        ]

    def open(self, opening_message: str) -> PatientTurn:
        """Turn 0: the scenario's opening message, written before the counsellor has said anything."""
        self.history.append({"role": "assistant", "content": opening_message})
        return PatientTurn(
            index=0, opening=True, move=None, secondary_move=None, end_conversation=False,
            reasoning=None, cue=None, message=opening_message,
        )

    async def turn(self, index: int, counsellor_text: str) -> PatientTurn:
        self.history.append({"role": "user", "content": counsellor_text})
        args, cue, rejected = await self._commit()
        updates = await self._agenda_calls()
        message = await self._message()
        self.recent_moves.append(args["move"])
        return PatientTurn(
            index=index, opening=False, move=args["move"], secondary_move=args.get("secondary_move") or None,
            end_conversation=bool(args.get("end_conversation")), reasoning=args.get("reasoning"), cue=cue,
            rejected=rejected, todo_updates=updates, message=message,
        )

    async def _call(self, tools: list[ToolSpec], allow_none: bool = False) -> ToolCallResult:
        res = await self.client.tool_call(self.history, tools, allow_none=allow_none)
        self.tokens.add(res)
        return res

    async def _commit(self) -> tuple[dict[str, Any], str, list[RejectedCommit]]:
        state = GuardState(
            vocabulary=self.vocab, archetype=self.archetype, max_depth=self.max_depth,
            recent_moves=tuple(self.recent_moves), max_same_move_run=self.config.max_same_move_run,
        )
        rejected: list[RejectedCommit] = []
        for _ in range(self.config.max_commit_retries + 1):
            res = await self._call([self.commit_tool])
            call = res.calls[0]
            self.history.append(res.message)
            verdict = check_commit(call.arguments, state)
            if verdict.ok:
                cue = pick_cue(self.vocab, verdict.move, self.style_cues, self.rng)
                self.history.append(
                    _tool_result(call.id, "commit_move", f"Accepted: {verdict.move}. How to write it: {cue}.")
                )
                args = {**call.arguments, "move": verdict.move, "secondary_move": verdict.secondary}
                return args, cue, rejected
            rejected.append(RejectedCommit(arguments=call.arguments, reason=verdict.reason))
            self.history.append(_tool_result(call.id, "commit_move", f"Not accepted: {verdict.reason}"))
        raise TurnFailed(
            f"no acceptable move after {len(rejected)} commits; last reason: {rejected[-1].reason}"
        )

    async def _agenda_calls(self) -> list[TodoUpdate]:
        updates: list[TodoUpdate] = []
        for _ in range(self.config.max_todo_calls):
            res = await self._call(self.todo_tools, allow_none=True)
            if not res.calls:
                break
            call = res.calls[0]
            item = str(call.arguments.get("item", ""))
            result = self.agenda.complete(item) if call.name == "complete_todo" else self.agenda.add(item)
            self.history.append(res.message)
            self.history.append(_tool_result(call.id, call.name, result))
            updates.append(TodoUpdate(tool=call.name, item=item, result=result))
        return updates

    async def _message(self) -> str:
        text = await ask_text(self.client, self.history, self.config, self.tokens, self.config.message_max_tokens)
        self.history.append({"role": "assistant", "content": text})
        return text


async def ask_text(client, messages, config: SimulationConfig, tokens: TokenCount, max_tokens: int | None) -> str:
    """A plain message, re-asked when blank (bounded); never returns an empty string."""
    sampling = {"max_tokens": max_tokens} if max_tokens else {}
    for _ in range(config.max_message_retries + 1):
        reply = await client.chat(messages, **sampling)
        tokens.add(reply)
        text = clean_message(reply.content)
        if text:
            return text
    raise TurnFailed(f"role '{client.role}' returned blank messages {config.max_message_retries + 1} times")


@dataclass
class Counsellor:
    """The counsellor under test: system prompt plus the plain exchange (patient = user)."""

    client: Any
    config: SimulationConfig
    history: list[dict[str, Any]]
    tokens: TokenCount = field(default_factory=TokenCount)

    def hear(self, patient_text: str) -> None:
        self.history.append({"role": "user", "content": patient_text})

    async def reply(self) -> str:
        text = await ask_text(self.client, self.history, self.config, self.tokens, None)
        self.history.append({"role": "assistant", "content": text})
        return text
