"""Reading transcripts to audit (MindEval2/MindSim paper, §4.3 "Validation" and Appendix E).

Input is chat JSONL (one conversation per line: an id, an optional patient/group id and `messages`
with `role` and `content`), a saved `datasets` dataset with the same fields, or in-memory rows. The
patient's role is configurable because other simulators put the patient on the `assistant` side.

Only patient turns matter to the features; the preceding messages of any role are kept because the
arc labeller shows the model the four messages before each patient turn. A conversation without a
patient turn is skipped and counted, never silently dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.inputs import input_lines, loads_json

# Accepted spellings of the two key fields; chat exports disagree on them (MIBot uses
# `conversation_id`, our simulator `id`).
ID_FIELDS = ("id", "conversation_id")
PATIENT_FIELDS = ("patient_id", "group_id")


class Message(BaseModel):
    """One chat message."""

    role: str = Field(description="Chat role of the speaker, e.g. 'user', 'assistant', 'system'.")
    content: str = Field(description="Message text; empty for content-less tool-call messages.")


class Conversation(BaseModel):
    """One conversation to audit. `patient_id` groups conversations of the same patient for the
    patient-level bootstrap; it defaults to the conversation id (one patient per conversation)."""

    conversation_id: str = Field(description="Identifier of the conversation, unique in its source.")
    patient_id: str = Field(description="Patient/group key; conversations of one patient share it.")
    messages: list[Message] = Field(description="All messages in order, every role kept.")
    session_index: int | None = Field(None, ge=0, description="0-based session of the patient's arc, if known.")
    counsellor: str | None = Field(None, description="Counsellor the conversation was held with, if known.")
    trial: int | None = Field(
        None,
        ge=0,
        description="Repeated trial of the arc (mindsim `simulation.trials`), if known: trials are more "
        "conversations of the same patient and system, resampled with the patient",
    )

    def patient_turn_indices(self, patient_role: str) -> list[int]:
        """Indices into `messages` of the patient's non-empty turns."""
        return [i for i, m in enumerate(self.messages) if m.role == patient_role and m.content.strip()]

    def patient_turns(self, patient_role: str) -> list[str]:
        """The patient's non-empty turns, stripped, in order."""
        return [self.messages[i].content.strip() for i in self.patient_turn_indices(patient_role)]


class TranscriptSet(BaseModel):
    """Conversations with at least one patient turn, plus what was skipped on the way."""

    name: str = Field(description="Label of the source (system name or file name).")
    conversations: list[Conversation] = Field(description="Conversations with >=1 patient turn.")
    read: int = Field(description="Conversations read from the source.")
    skipped_no_patient_turn: int = Field(description="Conversations dropped: no non-empty patient turn.")
    skipped_too_short: int = Field(0, description="Conversations dropped: fewer patient turns than min_patient_turns.")
    skipped_later_session: int = Field(0, description="Conversations dropped by first_sessions_only.")
    skipped_other_counsellor: int = Field(0, description="Conversations dropped by the counsellors filter.")
    truncated: int = Field(0, description="Conversations cut at max_patient_turns.")

    @property
    def patients(self) -> int:
        return len({c.patient_id for c in self.conversations})

    @property
    def trials(self) -> int:
        """Repeated trials among the conversations (1 when none names a trial)."""
        return len({c.trial or 0 for c in self.conversations}) or 1

    def counts(self, patient_role: str) -> dict[str, int]:
        """Aggregate counts for reports and provenance (numbers only)."""
        return {
            "conversations_read": self.read,
            "conversations_used": len(self.conversations),
            "skipped_no_patient_turn": self.skipped_no_patient_turn,
            "skipped_too_short": self.skipped_too_short,
            "skipped_later_session": self.skipped_later_session,
            "skipped_other_counsellor": self.skipped_other_counsellor,
            "truncated_at_max_patient_turns": self.truncated,
            "patients": self.patients,
            # Only where the source has repeated trials, so other sources' counts read as before.
            **({"trials": self.trials} if self.trials > 1 else {}),
            "patient_turns": sum(len(c.patient_turn_indices(patient_role)) for c in self.conversations),
        }


def _pick(row: Mapping[str, Any], names: tuple[str, ...]) -> Any:
    for name in names:
        value = row.get(name)
        if value is not None and value != "":
            return value
    return None


def parse_row(row: Any, where: str) -> Conversation:
    """Validate one raw conversation record; `where` names it in the error ("file.jsonl line 7")."""
    if not isinstance(row, Mapping):
        raise InputError(f"{where}: expected a JSON object with 'messages', got {type(row).__name__}")
    conv_id = _pick(row, ID_FIELDS)
    if conv_id is None:
        # Without an id the position is the only stable name; reruns over the same file agree.
        conv_id = where
    patient = _pick(row, PATIENT_FIELDS)
    raw_messages = row.get("messages")
    if not isinstance(raw_messages, list):
        raise InputError(
            f"{where}: 'messages' must be a list of {{'role', 'content'}} objects "
            f"(got {type(raw_messages).__name__}); fix the record or the exporter that wrote it"
        )
    messages = []
    for k, m in enumerate(raw_messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise InputError(f"{where}: messages[{k}] needs a string 'role' and a 'content'")
        content = m.get("content")
        if content is None:
            content = ""  # OpenAI tool-call messages carry no content
        if not isinstance(content, str):
            raise InputError(f"{where}: messages[{k}].content must be a string, got {type(content).__name__}")
        messages.append(Message(role=m["role"], content=content))
    index = row.get("session_index")
    if index is not None and (isinstance(index, bool) or not isinstance(index, int) or index < 0):
        raise InputError(f"{where}: session_index must be a whole number >= 0 (0 = first session), got {index!r}")
    counsellor = row.get("counsellor")
    if counsellor is not None and not isinstance(counsellor, str):
        raise InputError(f"{where}: counsellor must be a string, got {type(counsellor).__name__}")
    trial = row.get("trial")
    if trial is not None and (isinstance(trial, bool) or not isinstance(trial, int) or trial < 0):
        raise InputError(f"{where}: trial must be a whole number >= 0 (0 = the first trial), got {trial!r}")
    return Conversation(
        conversation_id=str(conv_id),
        patient_id=str(patient) if patient is not None else str(conv_id),
        messages=messages,
        session_index=index,
        counsellor=counsellor or None,
        trial=trial,
    )


def truncate(conv: Conversation, patient_role: str, max_patient_turns: int) -> tuple[Conversation, bool]:
    """The conversation up to and including its `max_patient_turns`-th patient turn, and whether it was cut."""
    turns = conv.patient_turn_indices(patient_role)
    if len(turns) <= max_patient_turns:
        return conv, False
    return conv.model_copy(update={"messages": conv.messages[: turns[max_patient_turns - 1] + 1]}), True


def _decode_line(raw: bytes, path: Path, lineno: int) -> str:
    """One line of a JSONL file as text; a binary or non-UTF-8 file is an InputError naming it."""
    if b"\x00" in raw:
        raise InputError(
            f"{path}: binary data at line {lineno}, not chat JSONL text; pass a JSONL file "
            f"(one conversation object per line) or a saved dataset folder"
        )
    try:
        # utf-8-sig on the first line: editors on Windows start UTF-8 files with a byte-order mark.
        return raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{path}: line {lineno} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at column {exc.start + 1}); "
            f"save or convert the transcripts as UTF-8 JSONL"
        ) from None


def _iter_jsonl(path: Path) -> Iterable[tuple[Any, str]]:
    # Bytes in, decoded per line: a decoding error then names its line instead of ending in a traceback.
    for lineno, raw in input_lines(path, "transcripts", hint="pass a chat JSONL file or a saved dataset folder"):
        line = _decode_line(raw, path, lineno)
        if not line.strip():
            continue
        where = f"{path} line {lineno}"
        try:
            yield loads_json(line, where), where
        except json.JSONDecodeError as exc:
            raise InputError(
                f"{where}: not valid JSON ({exc.msg} at column {exc.colno}); "
                f"each line must hold one whole conversation object"
            ) from None


def _iter_dataset(obj: Any, label: str) -> Iterable[tuple[Any, str]]:
    for i, row in enumerate(obj):
        yield row, f"{label} row {i}"


def _iter_source(source: Any, label: str) -> Iterable[tuple[Any, str]]:
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.exists():
            raise InputError(f"transcripts '{path}' not found; pass a chat JSONL file or a saved dataset folder")
        if path.is_dir():
            import datasets  # heavy import, only when a saved dataset is given

            try:
                ds = datasets.load_from_disk(str(path))
            except Exception as exc:  # noqa: BLE001 - datasets raises many types here
                raise InputError(f"{path}: not a saved `datasets` dataset ({exc})") from exc
            if isinstance(ds, datasets.DatasetDict):
                raise InputError(f"{path}: holds several splits ({list(ds)}); save or pass one split")
            return _iter_dataset(ds, str(path))
        return _iter_jsonl(path)
    if isinstance(source, Mapping):
        raise InputError(f"{label}: expected a list of conversations, got a single mapping")
    return _iter_dataset(source, label)


def load_transcripts(
    source: Any,
    *,
    patient_role: str = "user",
    name: str | None = None,
    min_patient_turns: int = 1,
    first_sessions_only: bool = False,
    max_patient_turns: int | None = None,
    counsellors: list[str] | None = None,
) -> TranscriptSet:
    """Read conversations from a JSONL path, a saved dataset folder, a `datasets.Dataset` or a list
    of dicts / `Conversation`s. Malformed records raise `InputError` naming the line or row; so do an
    empty source and one where no conversation has a turn by `patient_role` (a wrong role would
    otherwise surface later as a confusing "nothing to measure").

    Sample filters (the paper's realism sample, §4.3): `first_sessions_only` keeps session_index 0;
    `counsellors` keeps the named counsellors; `max_patient_turns` cuts each conversation after that
    patient turn, before `min_patient_turns` is applied. Each drop is counted; a filter that needs a
    field the record lacks is an `InputError` naming the record, never a silent drop."""
    wanted = set(counsellors) if counsellors else None
    label = name or (Path(source).name if isinstance(source, (str, Path)) else "rows")
    origin = str(source) if isinstance(source, (str, Path)) else label
    kept: list[Conversation] = []
    read = no_patient = too_short = later = other = cut = 0
    roles: set[str] = set()
    for row, where in _iter_source(source, label):
        conv = row if isinstance(row, Conversation) else parse_row(row, where)
        read += 1
        roles.update(m.role for m in conv.messages if m.content.strip())
        if first_sessions_only:
            if conv.session_index is None:
                raise InputError(
                    f"{where}: first_sessions_only needs session_index on every conversation (0 = first); "
                    "add it or drop --first-sessions"
                )
            if conv.session_index != 0:
                later += 1
                continue
        if wanted is not None:
            if conv.counsellor is None:
                raise InputError(
                    f"{where}: the counsellors filter needs a counsellor field on every conversation; "
                    "add it or drop --counsellor"
                )
            if conv.counsellor not in wanted:
                other += 1
                continue
        if max_patient_turns is not None:
            conv, was_cut = truncate(conv, patient_role, max_patient_turns)
            cut += was_cut
        n_turns = len(conv.patient_turn_indices(patient_role))
        if n_turns == 0:
            no_patient += 1
        elif n_turns < min_patient_turns:
            too_short += 1
        else:
            kept.append(conv)
    if read == 0:
        raise InputError(
            f"{origin}: no conversations (the source is empty); give transcripts with one conversation per line"
        )
    if no_patient and no_patient == read - later - other:
        seen = ", ".join(sorted(roles)) or "none with text"
        raise InputError(
            f"{origin}: no conversation of the {read} read has a non-empty turn by patient role '{patient_role}' "
            f"(roles present: {seen}); set --patient-role (validation.patient_role) to the patient's role"
        )
    return TranscriptSet(
        name=label,
        conversations=kept,
        read=read,
        skipped_no_patient_turn=no_patient,
        skipped_too_short=too_short,
        skipped_later_session=later,
        skipped_other_counsellor=other,
        truncated=cut,
    )
