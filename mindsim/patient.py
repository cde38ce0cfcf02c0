"""The patient and counsellor participants (MindEval2/MindSim §4.2 "Turn generation", Figure 6, Appendix D).

A patient turn is a real tool-using exchange kept in the patient-side history: a `commit_move` call, the
harness's answer (accepted with a writing cue, or rejected with the reason and committed again, bounded),
then optional `complete_todo` / `add_todo` calls (ours: each in a request of its own, answered with what is still
open; with `agenda_tools: with_message`, as MindEval2's reference code: offered beside the words), then the
message. The counsellor sees only plain messages, its own system prompt and, with `return_reasoning`, its own
earlier reasoning.

The patient's message must be speech: a blank reply, a tool call or JSON written as text, tool-call syntax in
prose, or a reply stopped by the token budget mid-sentence is re-asked with a short note (bounded, counted in
`PatientTurn.rejected_messages`) and never stored; when the re-asks run out the turn fails (or, with
`message_fallback`, the fallback words are said). The counsellor's replies are never corrected, only flagged
(`counsellor_flags`): it is the system under test.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Sequence

from mindsimkit.mindcore.engine import ToolSpec
from mindsimkit.mindcore.types import ToolCallResult
from mindsimkit.mindsim.agenda import Agenda
from mindsimkit.mindsim.config import SimulationConfig
from mindsimkit.mindsim.guard import (
    GuardState,
    TodoAdd,
    TodoComplete,
    TodoCompletePlain,
    acceptable_moves,
    check_commit,
    commit_move_model,
    pick_cue,
)
from mindsimkit.mindsim.prompting import (
    RejectedMessage,
    TurnFailed,
    counsellor_flags,
    last_complete_sentence,
    load_harness_text,
    rejected,
    speech_defects,
    split_inline_reasoning,
)
from mindsimkit.mindsim.records import CounsellorFlags, PatientTurn, RejectedCommit, TodoUpdate
from mindsimkit.profilegen.moves import Vocabulary

COMMIT_DESCRIPTION = "Commit to what this turn does before writing it. Must be accepted before you write."
COMPLETE_DESCRIPTION = "Mark an item on your list done, only when it actually got said, asked or dealt with."
ADD_DESCRIPTION = "Add something new you need to get to before this conversation is over."
_WRAPPERS = re.compile(r'^\s*(?:patient\s*:\s*)?["“]?(.*?)["”]?\s*$', re.IGNORECASE | re.DOTALL)


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
            ToolSpec.from_model(
                "complete_todo", COMPLETE_DESCRIPTION, TodoCompletePlain if self.config.agenda_plain else TodoComplete
            ),
            ToolSpec.from_model("add_todo", ADD_DESCRIPTION, TodoAdd),
        ]

    @property
    def tools(self) -> list[ToolSpec]:
        """Every tool this patient is offered in a session: `commit_move`, and the agenda tools unless
        `max_todo_calls` is 0 (then they are never sent)."""
        return [self.commit_tool, *(self.todo_tools if self.config.max_todo_calls else [])]

    def open(self, opening_message: str, rejected_openings: Sequence[RejectedMessage] = ()) -> PatientTurn:
        """Turn 0: the scenario's opening message, written before the counsellor has said anything (already
        checked as speech when the scenario was written; its rejected drafts come along)."""
        self.history.append({"role": "assistant", "content": opening_message})
        return PatientTurn.scripted_opening(opening_message, rejected_openings)

    async def turn(self, index: int, counsellor_text: str) -> PatientTurn:
        self.history.append({"role": "user", "content": counsellor_text})
        args, cue, rejected = await self._commit()
        if self._tools_with_message():
            updates, said = await self._agenda_beside_message()
        else:
            updates = await self._agenda_calls()
            said = await self._message()
        self.recent_moves.append(args["move"])
        return PatientTurn(
            index=index,
            opening=False,
            move=args["move"],
            secondary_move=args.get("secondary_move") or None,
            end_conversation=bool(args.get("end_conversation")),
            reasoning=args.get("reasoning"),
            cue=cue,
            rejected=rejected,
            todo_updates=updates,
            message=said.text,
            rejected_messages=said.rejected,
            trimmed=said.trimmed,
            fallback=said.fallback,
        )

    def _tools_with_message(self) -> bool:
        """`agenda_tools: with_message` where it can run: agenda tools on, the whole history sent (the tools are
        offered on it) and an engine that calls tools natively (a JSON-schema engine answers one shape only)."""
        c = self.config
        return (
            c.agenda_tools == "with_message"
            and c.max_todo_calls > 0
            and c.message_context == "full"
            and bool(getattr(self.client, "native_tools", False))
        )

    async def _call(self, tools: list[ToolSpec], allow_none: bool = False, attempt: int = 0) -> ToolCallResult:
        res: ToolCallResult = await self.client.tool_call(
            self.history, tools, allow_none=allow_none, **self.client.reseeded({}, attempt)
        )
        self.tokens.add(res)
        return res

    async def _commit(self) -> tuple[dict[str, Any], str, list[RejectedCommit]]:
        state = GuardState(
            vocabulary=self.vocab,
            archetype=self.archetype,
            max_depth=self.max_depth,
            recent_moves=tuple(self.recent_moves),
            max_same_move_run=self.config.max_same_move_run,
        )
        rejected: list[RejectedCommit] = []
        tool = self._turn_commit_tool(state)
        for attempt in range(self.config.max_commit_retries + 1):
            # A turned-back move is asked for again with the next seed: the guard's reason alone did not stop
            # the 135M patient from committing the same too-deep move seven times running.
            res = await self._call([tool], attempt=attempt)
            call = res.calls[0]
            self.history.append(res.message)
            verdict = check_commit(call.arguments, state)
            if verdict.ok and verdict.move is not None:  # an accepted commit always names its move
                cue = pick_cue(self.vocab, verdict.move, self.style_cues, self.rng)
                self.history.append(
                    _tool_result(call.id, "commit_move", f"Accepted: {verdict.move}. How to write it: {cue}.")
                )
                args = {**call.arguments, "move": verdict.move, "secondary_move": verdict.secondary}
                return args, cue, rejected
            rejected.append(RejectedCommit(arguments=call.arguments, reason=verdict.reason))
            self.history.append(_tool_result(call.id, "commit_move", f"Not accepted: {verdict.reason}"))
        raise TurnFailed(f"no acceptable move after {len(rejected)} commits; last reason: {rejected[-1].reason}")

    def _turn_commit_tool(self, state: GuardState) -> ToolSpec:
        """This turn's `commit_move`: the session's, or, where the recipe asks and the engine answers through a JSON
        grammar (a native tool call follows no grammar), one whose enums hold only the moves the guard would accept
        now. The session's tool is still the one recorded as offered; the guard still checks every commit."""
        if not self.config.offers_acceptable_moves_only or getattr(self.client, "native_tools", False):
            return self.commit_tool
        primary, secondary = acceptable_moves(state)
        if not primary:
            return self.commit_tool  # nothing left to offer: the guard's reason has to do it
        depth = [m for m in self.vocab.depth_moves if m in secondary]
        return ToolSpec.from_model("commit_move", COMMIT_DESCRIPTION, commit_move_model(primary, depth, secondary))

    async def _agenda_calls(self) -> list[TodoUpdate]:
        updates: list[TodoUpdate] = []
        for _ in range(self.config.max_todo_calls):
            res = await self._call(self.todo_tools, allow_none=True)
            if not res.calls:
                break
            updates.append(self._apply_todo(res))
        return updates

    def _apply_todo(self, res: ToolCallResult) -> TodoUpdate:
        call = res.calls[0]
        item = str(call.arguments.get("item", ""))
        result = self.agenda.complete(item) if call.name == "complete_todo" else self.agenda.add(item)
        self.history.append(res.message)
        self.history.append(_tool_result(call.id, call.name, result))
        return TodoUpdate(tool=call.name, item=item, result=result)

    async def _agenda_beside_message(self) -> tuple[list[TodoUpdate], Speech]:
        """The agenda tools offered beside the words (MindEval2's reference code): each request may call one or
        speak; a call is answered and the patient asked again, at most `max_todo_calls` times, then the words are
        asked for without tools. The words go through the same speech check as ever (`speech_reply`)."""
        updates: list[TodoUpdate] = []
        sampling = {"max_tokens": self.config.message_max_tokens} if self.config.message_max_tokens else {}
        for _ in range(self.config.max_todo_calls):
            res = await self.client.reply_or_call(self.history, self.todo_tools, **self.client.reseeded(sampling, 0))
            self.tokens.add(res)
            if not res.calls:
                return updates, await self._message(answered=res)
            updates.append(self._apply_todo(res))
        return updates, await self._message()

    def _speech_view(self, note: str) -> list[dict[str, Any]]:
        """The history as speech only: the system prompt, the messages both sides typed, then `note` (with this
        turn's accepted move and cue). Used for re-asks: a model that wrote a tool call as its message is
        usually copying the tool-call turns in front of it (engines without native tools see them as JSON)."""
        spoken = [m for m in self.history[1:] if m["role"] in ("user", "assistant") and not m.get("tool_calls")]
        accepted = next(
            (m["content"] for m in reversed(self.history) if m["role"] == "tool" and m["name"] == "commit_move"), ""
        )
        return [self.history[0], *spoken, {"role": "user", "content": f"[harness note] {accepted} {note}".strip()}]

    async def _message(self, answered: Any = None) -> Speech:
        """The turn's words. The first ask sends the whole history (the protocol, and the engine's cached
        prefix), or with `message_context: speech` the speech-only view; a re-ask sends the speech-only view
        with a note on what was wrong. `answered`: words already returned by a request that offered the agenda
        tools beside them, checked as the first ask's would be. With `message_fallback`, a message still unusable
        (not blank) after the re-asks is that fallback instead of a failed turn."""
        first = (
            self.history
            if self.config.message_context == "full"
            else self._speech_view(load_harness_text().speech_first_note)
        )
        said = await speech_reply(
            self.client,
            first,
            self._speech_view,
            config=self.config,
            tokens=self.tokens,
            answered=answered,
            fallback=self.config.message_fallback,
        )
        self.history.append({"role": "assistant", "content": said.text})
        return said


class Speech(NamedTuple):
    text: str
    rejected: list[RejectedMessage]
    trimmed: bool = False
    fallback: bool = False


async def speech_reply(
    client: Any,
    first: list[dict[str, Any]],
    reask: Callable[[str], list[dict[str, Any]]],
    *,
    config: SimulationConfig,
    tokens: TokenCount,
    answered: Any = None,
    fallback: str | None = None,
) -> Speech:
    """A patient reply that is speech, re-asked (bounded by `max_message_retries`) while it is not:
    `reask(note)` builds the messages of a re-ask from the note saying what was wrong. Neither a bad reply
    nor a note is ever stored; every rejection is returned to be counted. With `trim_cut_off`, a reply whose
    only defect is running into its budget is ended at its last complete sentence instead (and marked
    `trimmed`), so nothing cut mid-sentence is stored either way. Both patient engines use this.

    `answered` (a reply with `content` and `finish_reason`) stands for the first ask when the words already came
    back. `fallback`: when the re-asks run out on a reply that was not blank, these words are said instead
    (marked `fallback`) rather than the turn failing — MindEval2's reference code puts its fallback in place of a
    message that keeps failing its check; a blank one still fails there too."""
    notes = load_harness_text()
    sampling = {"max_tokens": config.message_max_tokens} if config.message_max_tokens else {}
    bad: list[RejectedMessage] = []
    for attempt in range(config.max_message_retries + 1):
        if attempt == 0 and answered is not None:
            reply = answered
        else:
            messages = reask(f"{notes.reask_notes[bad[-1].reason]} {notes.reask_tail}") if bad else first
            reply = await client.chat(messages, **client.reseeded(sampling, attempt))
            tokens.add(reply)
        text = clean_message(reply.content)
        defects = speech_defects(text, finish_reason=reply.finish_reason) if text else ["blank"]
        if not defects:
            return Speech(text, bad)
        if defects == ["cut_off"] and config.trim_cut_off:
            kept = last_complete_sentence(text)
            if kept and not speech_defects(kept):
                return Speech(kept, bad, trimmed=True)
        bad.append(rejected(defects[0], reply.content, reply.finish_reason))
    if fallback is not None and bad[-1].reason != "blank":
        return Speech(fallback, bad, fallback=True)
    raise TurnFailed(
        f"role '{client.role}': no usable message after {len(bad)} attempts "
        f"(reasons: {', '.join(r.reason for r in bad)}; last: {bad[-1].text[:80]!r})"
    )


@dataclass
class Counsellor:
    """The counsellor under test: system prompt plus the plain exchange (patient = user). Its replies are
    kept exactly as sent; defects are flagged per reply, never corrected."""

    client: Any
    config: SimulationConfig
    history: list[dict[str, Any]]
    tokens: TokenCount = field(default_factory=TokenCount)
    flags: list[CounsellorFlags] = field(default_factory=list)

    def hear(self, patient_text: str) -> None:
        self.history.append({"role": "user", "content": patient_text})

    @property
    def returns_reasoning(self) -> bool:
        """Whether its earlier reasoning goes back with its earlier replies: its role's (or binding's)
        `return_reasoning` when set, else the run's `simulation.return_reasoning`."""
        own = getattr(getattr(self.client, "spec", None), "return_reasoning", None)
        return self.config.return_reasoning if own is None else own

    async def reply(self, note: str | None = None) -> str:
        """The counsellor's next reply. `note` (a session note such as the wrap-up reminder) goes after the
        patient's last message on this request only: the stored history, and so the transcript, keep the
        patient's words as they were said."""
        sent = self.history
        if note:
            last = self.history[-1]
            sent = [*self.history[:-1], {**last, "content": f"{last.get('content') or ''}\n\n{note}".lstrip()}]
        # A blank reply is the one thing re-asked: the patient cannot answer nothing. The re-asks are counted.
        for blanks in range(self.config.max_message_retries + 1):
            reply = await self.client.chat(sent, **self.client.reseeded({}, blanks))
            self.tokens.add(reply)
            text, inline = reply.content or "", None
            if self.config.split_inline_reasoning:
                # The patient and the judge meet the counsellor's words, as a person would; a reply that is
                # all reasoning (cut off before it spoke) is as empty to them as a blank one.
                text, inline = split_inline_reasoning(text)
            if text.strip():
                reasoning = getattr(reply, "reasoning", None) or None
                self.flags.append(
                    CounsellorFlags(
                        reply_index=len(self.flags),
                        flags=counsellor_flags(text, reply.finish_reason),
                        finish_reason=reply.finish_reason,
                        blank_retries=blanks,
                        reasoning=reasoning,
                        inline_reasoning=inline,
                    )
                )
                # Sent back on every later request exactly as the server returned it (Kimi, GLM and Qwen chat
                # templates render an earlier turn's reasoning; without it they see an empty trace there).
                carried = reasoning if reasoning and self.returns_reasoning else {}
                self.history.append({"role": "assistant", "content": text, **carried})
                return text
        raise TurnFailed(
            f"role '{self.client.role}' returned blank messages {self.config.max_message_retries + 1} times"
        )
