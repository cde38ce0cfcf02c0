"""The running memory shared by patient and counsellor (MindEval2/MindSim §4.2 "Memory", Figure 16, Appendix D
memory-compaction template).

After each session an LLM rewrites the log. The template's carry rules are checked here in code, not only
asked for in the prompt: every prior entry survives word for word unless it was `[open]` (it may be
rewritten once the patient reports back) or the cap forced a drop (and then never an `[open]` entry while
an untagged one could go); at most N entries; each entry one line about "patient"; no exact repeats.
A log that still breaks the rules after the bounded re-asks is repaired deterministically and the repair
is recorded. An engine failure is not a rule break: it propagates and fails the arc (counted, retried on
rerun), so a session is never saved with a memory nobody wrote for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mindsimkit.mindcore.prompts import render

if TYPE_CHECKING:
    from mindsimkit.mindcore.client import RoleClient

OPEN_TAG = "[open]"
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_PATIENT = re.compile(r"\bpatient\b", re.IGNORECASE)
ENTRY_MAX_CHARS = 300


def parse_log(text: str) -> list[str]:
    """Entries of a log as the compactor writes it: one `- ` line each; preamble and blank lines ignored."""
    entries = []
    for line in (text or "").splitlines():
        if _BULLET.match(line):
            entry = _BULLET.sub("", line).strip()
            if entry:
                entries.append(entry)
    return entries


def finished_lines(text: str, finish_reason: str | None) -> str:
    """`text` without the line the token budget cut off: an entry is one line, so a reply that ran into its
    budget ends in a half-written entry, which must not enter the log as if the model had finished it."""
    if finish_reason != "length":
        return text or ""
    head, sep, _cut = (text or "").rpartition("\n")
    return head if sep else ""


def format_log(entries: list[str]) -> str:
    return "\n".join(f"- {e}" for e in entries)


def is_open(entry: str) -> bool:
    return OPEN_TAG in entry.lower()


@dataclass
class MemoryCheck:
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def check_log(prior: list[str], new: list[str], cap: int) -> MemoryCheck:
    """Check a rewritten log against the carry-forward rules."""
    out = MemoryCheck()
    kept = set(new)
    missing_closed = [e for e in prior if e not in kept and not is_open(e)]
    missing_open = [e for e in prior if e not in kept and is_open(e)]
    if len(new) > cap:
        out.problems.append(f"the log has {len(new)} entries; the most allowed is {cap}")
    at_cap = len(new) >= cap
    for e in missing_closed:
        if not at_cap:
            out.problems.append(f"a prior entry was changed or dropped without need; keep it word for word: '{e}'")
    if at_cap and missing_open:
        # Dropping an [open] entry at the cap is only fine when no untagged prior entry could have gone.
        kept_untagged = [e for e in prior if e in kept and not is_open(e)]
        new_untagged = [e for e in new if e not in prior and not is_open(e)]
        if kept_untagged or new_untagged:
            out.problems.append("an [open] entry was dropped while an untagged one could have gone instead")
    seen: set[str] = set()
    for e in new:
        if e in seen:
            out.problems.append(f"entry repeated: '{e}'")
        seen.add(e)
        if e not in prior:
            if not _PATIENT.search(e):
                out.problems.append(f"entry does not call the patient 'patient': '{e}'")
            if len(e) > ENTRY_MAX_CHARS:
                out.problems.append(f"entry longer than one sentence: '{e[:60]}…'")
    return out


def repair_log(prior: list[str], new: list[str], cap: int) -> list[str]:
    """Enforce the rules when the model would not: every untagged prior entry back in its place, `[open]`
    entries kept unless an addition reads as their rewrite, then the model's valid new entries, cut to the cap by
    dropping the newest additions first and then the oldest untagged prior entries."""
    kept = set(new)
    additions = [e for e in dict.fromkeys(new) if e not in prior and _PATIENT.search(e) and len(e) <= ENTRY_MAX_CHARS]
    base = [e for e in prior if not is_open(e) or e in kept or not any(_similar(e, a) for a in additions)]
    room = max(cap - len(base), 0)
    log = base + additions[:room]
    while len(log) > cap:
        victim = next((e for e in log if not is_open(e)), log[0])
        log.remove(victim)
    return log


def _words(text: str) -> set[str]:
    # 4-letter prefixes: a crude stem, so "call" and "called" count as the same word.
    return {w[:4] for w in re.findall(r"[a-z']+", text.lower()) if len(w) > 3 and w != "patient"}


def _similar(old: str, new: str) -> bool:
    """Whether `new` reads as a rewrite of the `[open]` entry `old` (a heuristic: 40% of its content
    words carried). Used only when repairing a log the model would not write by the rules."""
    ow = _words(old.replace(OPEN_TAG, ""))
    return bool(ow) and len(ow & _words(new)) / len(ow) >= 0.4


@dataclass
class MemoryResult:
    entries: list[str]
    attempts: int
    repaired: bool
    problems: list[str]


async def compact_memory(
    client: RoleClient, prior: list[str], transcript: str, cap: int, retries: int, *, max_tokens: int | None = None
) -> MemoryResult:
    """Rewrite the log to cover the session just ended; re-ask with the broken rules, then repair. Engine
    errors propagate to the caller."""
    prompt = render("memory/compact.jinja2", prior_log=format_log(prior), transcript=transcript, max_entries=cap)
    messages = [{"role": "system", "content": prompt}, {"role": "user", "content": "Write the updated log now."}]
    problems: list[str] = []
    new: list[str] = []
    for attempt in range(1, retries + 2):
        reply = await client.chat(
            messages, **client.reseeded({"max_tokens": max_tokens} if max_tokens else {}, attempt - 1)
        )
        new = parse_log(finished_lines(reply.content, reply.finish_reason))
        check = check_log(prior, new, cap)
        if check.ok and (new or not transcript):
            return MemoryResult(new, attempt, False, [])
        problems = check.problems or ["the reply held no '- ' entries"]
        messages = [
            *messages[:2],
            {"role": "assistant", "content": reply.content},
            {
                "role": "user",
                "content": "That log breaks the rules: "
                + "; ".join(problems[:6])
                + ". Write the whole log again, one '- ' line per entry.",
            },
        ]
    return MemoryResult(repair_log(prior, new, cap), retries + 1, True, problems)
