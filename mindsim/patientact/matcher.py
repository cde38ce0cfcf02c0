"""The LLM tag matcher (PatientAct §3.3.2, `simulation.patientact.retrieval: llm`): the matcher role is shown
the recent conversation, the counsellor's latest message and every activation tag of the patient's items,
and names the tags that message touches; an item is relevant when any of its tags is named. The paper says
only that the utterance is matched against the tags; asking a model which tags fit, given the conversation,
is what the authors' public implementation does (ours: the prompt, the schema and that it sees
`context_turns` recent exchanges). Its answer is enum-constrained to the patient's own tags, re-asked when
it does not fit, and a turn fails when it never does (as for the other steps).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any, Iterable, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from mindsimkit.mindcore.errors import StructuredOutputError
from mindsimkit.mindcore.prompts import render
from mindsimkit.mindsim.prompting import TurnFailed

MATCHER_TEMPLATE = "patientact/matcher.jinja2"
MATCHER_ROLE = "patient_matcher"
MAX_TAGS = 8
TAG_CHARS = 30


class TagMatch(BaseModel):
    """The worst case the budget check reads: any tags, at most MAX_TAGS."""

    model_config = ConfigDict(extra="forbid")
    why: str = Field(max_length=200, description="One short sentence: what the message is about")
    tags: list[Annotated[str, Field(max_length=TAG_CHARS)]] = Field(
        max_length=MAX_TAGS, description="The listed tags the counsellor's message touches (may be empty)"
    )


@lru_cache(maxsize=256)
def match_model(tags: tuple[str, ...]) -> type[BaseModel]:
    """The answer schema for one patient: tags from its own list only (same schema name as `TagMatch`)."""
    # Built from the patient's tags at run time, so this is a value for pydantic, not a type mypy can follow.
    tag_list: Any = list[Literal[tags]] if tags else list[str]  # type: ignore[valid-type]
    return create_model(
        "TagMatch",
        __config__=ConfigDict(extra="forbid"),
        why=(str, Field(max_length=200, description="One short sentence: what the message is about")),
        tags=(
            tag_list,
            Field(max_length=MAX_TAGS, description="The listed tags the counsellor's message touches (may be empty)"),
        ),
    )


def all_tags(items: Iterable[Any]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for it in items:
        for t in it.tags:
            seen.setdefault(t, None)
    return tuple(seen)


def matcher_messages(recent: list[tuple[str, str]], message: str, tags: tuple[str, ...]) -> list[dict[str, str]]:
    return [{"role": "user", "content": render(MATCHER_TEMPLATE, recent=recent, message=message, tags=tags)}]


async def match(
    client: Any,
    items: list[Any],
    recent: list[tuple[str, str]],
    message: str,
    *,
    max_tokens: int | None = None,
    max_attempts: int | None = None,
) -> tuple[list[str], str]:
    """(ids of the items any of whose tags the matcher named, in item order; its reason)."""
    tags = all_tags(items)
    if not tags:
        return [], ""
    sampling = {"max_tokens": max_tokens} if max_tokens else {}
    try:
        out = await client.structured(
            matcher_messages(recent, message, tags), match_model(tags), max_attempts=max_attempts, **sampling
        )
    except StructuredOutputError as exc:
        raise TurnFailed(f"patientact matcher: {exc}") from exc
    named = set(out.tags)
    return [it.id for it in items if named & set(it.tags)], out.why
