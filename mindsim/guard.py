"""The `commit_move` tool and the pure guard that accepts or rejects a committed move (MindEval2/MindSim §4.2
"Turn generation", Figure 6, Appendix D patient template: move, optional secondary move incl. depth moves,
end_conversation, first-person reasoning; the harness accepts with a writing cue or rejects with the reason).

No LLM here. The tool's JSON schema advertises only the moves left to the archetype, but the argument
model accepts any string so that an off-list move reaches the guard and is answered with a reason the
patient can act on (rather than a generic schema error), and is recorded as a rejected attempt. Where a
recipe asks for it (`simulation.acceptable_moves_only`), an engine that answers through a JSON grammar gets
each turn's schema narrowed further to the moves the guard would accept (`acceptable_moves`), so the
grammar itself keeps the patient from committing a move that would be turned back.
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, create_model

from mindsimkit.profilegen.moves import Vocabulary

REASONING_MAX = 300
REASONING_MIN = 8
# Reasoning must be the patient's own thought, not a clinician's note about them (template rule).
_THIRD_PERSON = re.compile(r"^\s*(the|this)\s+(patient|client|person|user)\b", re.IGNORECASE)


def commit_move_model(moves: list[str], depth_moves: list[str], secondary: list[str] | None = None) -> type[BaseModel]:
    """Argument model of `commit_move` for one patient: the enum lists `moves` only (`secondary`, default `moves`,
    for the secondary move). One class per move list (an archetype's, or one turn's acceptable moves), built once:
    a class per session cost a pydantic build, and a schema build on every call."""
    return _commit_move_model(tuple(moves), tuple(depth_moves), tuple(moves if secondary is None else secondary))


@functools.lru_cache(maxsize=256)
def _commit_move_model(
    moves: tuple[str, ...], depth_moves: tuple[str, ...], secondary: tuple[str, ...]
) -> type[BaseModel]:
    enum_schema = {"type": "string", "enum": list(moves)}
    secondary_schema = {"anyOf": [{"type": "string", "enum": list(secondary)}, {"type": "null"}], "default": None}
    return create_model(
        "CommitMove",
        __config__=ConfigDict(extra="forbid"),
        move=(
            Annotated[str, WithJsonSchema(enum_schema)],
            Field(max_length=40, description="What this turn does: one move from your list"),
        ),
        secondary_move=(
            Annotated[str | None, WithJsonSchema(secondary_schema)],
            Field(
                None,
                max_length=40,
                description="Optional second move riding along; for weight use "
                + ", ".join(depth_moves)
                + " (least to most)",
            ),
        ),
        end_conversation=(bool, Field(False, description="True only if you are leaving after this turn")),
        reasoning=(
            str,
            # minLength lets a grammar-constrained engine rule out the empty reasoning the guard would reject
            # (the quickstart's 135M patient lost an arc to four empty ones in a row).
            Field(
                min_length=REASONING_MIN,
                max_length=REASONING_MAX,
                description="A sentence or two, first person: why this move",
            ),
        ),
    )


class TodoComplete(BaseModel):
    """Arguments of `complete_todo`."""

    model_config = ConfigDict(extra="forbid")
    item: str = Field(max_length=120, description="The item's [id] or your own words for it")


class TodoCompletePlain(BaseModel):
    """Arguments of `complete_todo` on a plain agenda (`simulation.agenda_plain`: the patient sees no ids)."""

    model_config = ConfigDict(extra="forbid")
    item: str = Field(max_length=120, description="Your own words for the thing that got said, asked or dealt with")


class TodoAdd(BaseModel):
    """Arguments of `add_todo`."""

    model_config = ConfigDict(extra="forbid")
    item: str = Field(max_length=120, description="Something new you need to get to before this is over")


@dataclass(frozen=True)
class GuardState:
    """What the guard needs to know about the patient and the session so far."""

    vocabulary: Vocabulary
    archetype: str
    max_depth: int
    recent_moves: tuple[str, ...] = ()
    max_same_move_run: int = 3


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str = ""
    move: str | None = None
    secondary: str | None = None


def acceptable_moves(state: GuardState) -> tuple[list[str], list[str]]:
    """The moves `check_commit` would accept this turn, as (primary, secondary), in the vocabulary's order: the
    archetype's moves no deeper than the patient's limit, and as primary not the move that would make the run of
    one move too long. A grammar built from them lets a small model commit only what the guard lets through."""
    vocab = state.vocabulary
    shallow = [
        m.id
        for m in vocab.available(state.archetype)
        if not ((depth := vocab.moves[m.id].depth) and depth > state.max_depth)
    ]
    run = state.max_same_move_run
    recent = state.recent_moves[-run:] if run else ()
    worn = recent[0] if run and len(recent) == run and len(set(recent)) == 1 else None
    return [m for m in shallow if m != worn], shallow


def check_commit(args: dict[str, Any], state: GuardState) -> Verdict:
    """Accept or reject one `commit_move` call. Rejection reasons speak to the patient in second person."""
    vocab = state.vocabulary
    arch = vocab.archetype(state.archetype)
    never = {r.move: r.never for r in arch.removed}
    move = (args.get("move") or "").strip()
    secondary = (args.get("secondary_move") or "").strip() or None
    reasoning = (args.get("reasoning") or "").strip()

    def bad_move(name: str, field: str) -> str | None:
        if name in never:
            return f"`{name}` is not something you do. {never[name]} Pick another {field} from your list."
        if name not in vocab.moves:
            return f"`{name}` is not a move. Use a {field} from the list in your instructions, exactly as written."
        return None

    if not move:
        return Verdict(False, "You gave no move. Name one move from your list.")
    if reason := bad_move(move, "move"):
        return Verdict(False, reason)
    if secondary is not None:
        if reason := bad_move(secondary, "secondary_move"):
            return Verdict(False, reason)
        if secondary == move:
            return Verdict(False, "The secondary move repeats the main move. Name a different one, or leave it empty.")
    for name in (move, secondary):
        depth = vocab.moves[name].depth if name else None
        if depth and depth > state.max_depth:
            allowed = [m for m in vocab.depth_moves if (vocab.moves[m].depth or 0) <= state.max_depth]
            return Verdict(
                False,
                f"`{name}` goes further than you are willing to go today. "
                f"The most you would let out is `{allowed[-1]}`; choose with that in mind.",
            )
    if not reasoning:
        return Verdict(False, "The reasoning is empty. Say in a sentence, as yourself, why this move.")
    if _THIRD_PERSON.match(reasoning):
        return Verdict(False, "The reasoning describes you from outside. Say it as yourself, with 'I'.")
    run = state.max_same_move_run
    if run and len(state.recent_moves) >= run and all(m == move for m in state.recent_moves[-run:]):
        return Verdict(
            False, f"You have done `{move}` {run} turns running. People do not; pick what else this turn does."
        )
    return Verdict(True, move=move, secondary=secondary)


def pick_cue(vocab: Vocabulary, move: str, style_cues: list[str], rng: random.Random) -> str:
    """The short writing instruction sent with an accepted move: a move cue plus a style cue."""
    parts = [rng.choice(vocab.moves[move].cues)]
    if style_cues:
        parts.append(rng.choice(style_cues))
    return "; ".join(parts)
