"""The patient move vocabulary and the coping archetypes (MindEval2/MindSim §4.1 "Conversational style",
§4.2 "Turn generation", Tables 22–23).

Loads `profilegen/data/moves.yaml` (39 moves in four classes, with the depth moves ordered least to
most) and `profilegen/data/archetypes.yaml` (sixteen archetypes, each removing moves with one "never"
sentence per removed move), and checks them. Pure: no LLM, no simulator state. The profile writer samples
an archetype id from here; the simulator builds the `commit_move` enum and the prompt's move list from it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.profilegen.vocab import read_data

MoveClass = Literal["disclosing", "concealing", "expressive", "engaging"]
MOVE_CLASSES: tuple[str, ...] = ("disclosing", "concealing", "expressive", "engaging")
EXPECTED_MOVES = 39
EXPECTED_ARCHETYPES = 16


class Move(BaseModel):
    """One patient move: an act a turn performs, not a topic."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    id: str = Field(description="Move id as it appears in the commit_move enum", pattern=r"^[a-z_]+$")
    cls: MoveClass = Field(alias="class", description="Which of the four move classes it belongs to")
    description: str = Field(description="One line shown in the patient prompt's move list")
    cues: list[str] = Field(min_length=1, description="Short writing cues; one is sent when the move is accepted")
    depth: int | None = Field(
        default=None, ge=1, description="Rank among the depth moves (1 = least of oneself); None if not one"
    )
    level: str | None = Field(
        default=None, description="Disclosure level the move carries, from the file's `levels`; None if it has none"
    )

    @property
    def prompt_line(self) -> str:
        """The move as listed in the patient's system prompt."""
        return f"`{self.id}` ({self.cls}): {self.description}"


class RemovedMove(BaseModel):
    """A move an archetype takes away, with the sentence telling the patient they never do it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    move: str = Field(description="Id of the removed move")
    never: str = Field(description="One second-person sentence: what this person never does")


class Archetype(BaseModel):
    """A coping style: prompt text plus the moves it removes from the repertoire."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(description="Archetype id stored in the profile's style", pattern=r"^[a-z_]+$")
    name: str = Field(description="Human-readable name")
    text: str = Field(description="Second-person paragraph for the prompt's 'How you cope' section")
    removed: list[RemovedMove] = Field(min_length=1, description="Removed moves with their 'never' sentences")

    @property
    def removed_ids(self) -> frozenset[str]:
        return frozenset(r.move for r in self.removed)

    @property
    def never_lines(self) -> list[str]:
        return [r.never for r in self.removed]


class _MovesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: str
    version: str
    classes: dict[MoveClass, str]
    levels: list[str] = Field(default_factory=list, description="Disclosure levels, least to most (may be empty)")
    moves: list[Move]


class _ArchetypesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source: str
    version: str
    keep_every_class: bool = Field(True, description="Whether every archetype must keep a move in each class")
    from_ours: dict[str, str] = Field(
        default_factory=dict, description="A preset's file: the toolkit's archetype id → the archetype it plays as"
    )
    archetypes: list[Archetype]


class Vocabulary(BaseModel):
    """Moves and archetypes loaded together and cross-checked."""

    model_config = ConfigDict(frozen=True)
    moves: dict[str, Move] = Field(description="All moves by id, in file order")
    archetypes: dict[str, Archetype] = Field(description="All archetypes by id, in file order")
    version: str = Field(description="'<moves version>+<archetypes version>'")
    aliases: dict[str, str] = Field(
        default_factory=dict, description="Another id a profile may name → the archetype it plays as (presets)"
    )

    @property
    def depth_moves(self) -> list[str]:
        """Depth moves ordered least to most."""
        return [m.id for m in sorted((m for m in self.moves.values() if m.depth), key=lambda m: m.depth or 0)]

    def archetype(self, archetype_id: str) -> Archetype:
        try:
            return self.archetypes[self.aliases.get(archetype_id, archetype_id)]
        except KeyError:
            raise ConfigError(
                f"unknown coping archetype {archetype_id!r}; known: {', '.join(self.archetypes)}"
            ) from None

    def available(self, archetype_id: str) -> list[Move]:
        """The moves left to a patient of this archetype, in vocabulary order."""
        removed = self.archetype(archetype_id).removed_ids
        return [m for m in self.moves.values() if m.id not in removed]


def build_vocabulary(moves_data: dict[str, Any], archetypes_data: dict[str, Any]) -> Vocabulary:
    """Validate raw YAML data for both files and cross-check them; raise ConfigError naming the fault."""
    try:
        mf = _MovesFile.model_validate(moves_data)
        af = _ArchetypesFile.model_validate(archetypes_data)
    except ValidationError as exc:
        raise ConfigError(f"move/archetype vocabulary is malformed: {exc}") from exc
    problems: list[str] = []
    moves = {m.id: m for m in mf.moves}
    if len(moves) != len(mf.moves):
        problems.append("duplicate move ids")
    if len(moves) != EXPECTED_MOVES:
        problems.append(f"expected {EXPECTED_MOVES} moves, found {len(moves)}")
    for cls in MOVE_CLASSES:
        if not any(m.cls == cls for m in moves.values()):
            problems.append(f"no move in class {cls!r}")
    stray = sorted({m.level for m in moves.values() if m.level is not None} - set(mf.levels))
    if stray:
        problems.append(f"move levels {stray} are not in the file's levels {mf.levels}")
    depths = sorted(m.depth for m in moves.values() if m.depth)
    if depths != list(range(1, len(depths) + 1)) or len(depths) < 2:
        problems.append(f"depth ranks must be 1..n with n >= 2, found {depths}")
    archetypes = {a.id: a for a in af.archetypes}
    if len(archetypes) != len(af.archetypes):
        problems.append("duplicate archetype ids")
    if len(archetypes) != EXPECTED_ARCHETYPES:
        problems.append(f"expected {EXPECTED_ARCHETYPES} archetypes, found {len(archetypes)}")
    for a in archetypes.values():
        ids = [r.move for r in a.removed]
        if len(set(ids)) != len(ids):
            problems.append(f"archetype {a.id!r} removes a move twice")
        unknown = [m for m in ids if m not in moves]
        if unknown:
            problems.append(f"archetype {a.id!r} removes unknown moves {unknown}")
        left = {moves[m].cls for m in moves if m not in ids}
        if af.keep_every_class and set(MOVE_CLASSES) - left:
            problems.append(f"archetype {a.id!r} leaves no move in {sorted(set(MOVE_CLASSES) - left)}")
    unknown_targets = sorted(set(af.from_ours.values()) - set(archetypes))
    if unknown_targets:
        problems.append(f"from_ours maps to unknown archetypes {unknown_targets}")
    if problems:
        raise ConfigError("move/archetype vocabulary invalid: " + "; ".join(problems))
    return Vocabulary(
        moves=moves, archetypes=archetypes, version=f"{mf.version}+{af.version}", aliases=dict(af.from_ours)
    )


@lru_cache(maxsize=1)
def load_vocabulary() -> Vocabulary:
    """The shipped vocabulary (cached)."""
    return build_vocabulary(read_data("moves.yaml"), read_data("archetypes.yaml"))


def archetype_ids() -> list[str]:
    """The sixteen archetype ids, in file order (what the profile sampler draws from)."""
    return list(load_vocabulary().archetypes)
