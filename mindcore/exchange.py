"""The spoken exchange of a session: which of its chat messages are the patient's and the counsellor's words.

One rule for everything that numbers or shows replies (the MHQR judge, the PatientAct rubric, the MHQR sample,
the report's drill-down), so "reply k" is the same reply everywhere: a user or assistant message whose content
is text and that carries no tool call. System prompts and tool traffic are not part of the exchange.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

PATIENT, COUNSELLOR = "user", "assistant"


def spoken(messages: Iterable[dict[str, Any]]) -> Iterator[tuple[str, str]]:
    """(role, text) of each spoken message, in order; role is `PATIENT` or `COUNSELLOR`."""
    for m in messages:
        role, content = m.get("role"), m.get("content")
        if role in (PATIENT, COUNSELLOR) and isinstance(content, str) and not m.get("tool_calls"):
            yield role, content
