"""Test helpers for the simulator: hand-built profiles and a deterministic fake engine that plays every
simulator role (scenario writer, patient tool calls and messages, counsellor, memory compactor)."""

from __future__ import annotations

import json
from typing import Any

from mindsimkit.mindcore.types import ChatRequest
from mindsimkit.profilegen.moves import load_vocabulary
from mindsimkit.profilegen.schemas import (
    Anchor,
    BigFive,
    CoreBelief,
    Demographics,
    Formulation,
    Perpetuating,
    Persona,
    Precipitating,
    Predisposing,
    Presenting,
    Profile,
    Protective,
    Provenance,
    Screen,
    Style,
)


def make_profile(pid: str = "p1", archetype: str = "minimiser", register: str = "casual") -> Profile:
    formulation = Formulation(
        presenting=Presenting(summary="Low mood since a redundancy.", goal="feel like myself again"),
        predisposing=[Predisposing(label="criticism", history="A critical father.")],
        precipitating=Precipitating(label="job loss", when="two months ago", what_changed="No routine now."),
        protective=[Protective(label="a person who checks in", detail="Sister texts daily.")],
        perpetuating=[Perpetuating(label="withdrawal", situation="Skips football with friends.", maladaptive=True)],
        core_belief=CoreBelief(
            cluster="worthless", arm="self", history="Never good enough.", belief="I'm a waste of space."
        ),
        quality_of_life="moderate",
    )
    return Profile(
        profile_id=pid,
        persona=Persona(
            persona_id=f"u-{pid}",
            persona="A warehouse supervisor.",
            sex="Male",
            age=41,
            marital_status="married_present",
            education_level="high_school",
            occupation="supervisor",
            source="test",
        ),
        demographics=Demographics(
            age_band="35-44",
            gender="man",
            relationship="partnered",
            employment="unemployed_seeking_work",
            living_situation="with_partner_or_family",
            big_five=BigFive(
                openness="mid", conscientiousness="high", extraversion="low", agreeableness="mid", neuroticism="high"
            ),
        ),
        anchor=Anchor(main_problem="low mood", secondary_problem=None, impact_domain="work"),
        formulation=formulation,
        style=Style(register=register, verbosity="low", frustration_reactivity="medium", archetype=archetype),
        goal="feel like myself again",
        case_summary=f"You are {pid}, 41, recently made redundant; mornings are the worst.",
        writer_brief=f"{pid}: 41, redundant two months ago. Core belief: I'm a waste of space.",
        screen=Screen(verdict="clean"),
        in_pool=True,
        provenance=Provenance(seed=0, toolkit_version="test"),
    )


SCENARIO = {
    "event": "Got a rejection email on Tuesday. Spent the afternoon on the sofa.",
    "automatic_thoughts": ["nobody wants me", "what's the point applying"],
    "behaviors": ["skipped dinner", "ignored sister's text"],
    "physical": ["tight chest"],
    "opening_message": "hey. rough week",
    "goal": "figure out whether to keep applying",
    "checkpoints": ["the rejection email", "my sister"],
}


class SimResponder:
    """Plays every role deterministically. `first_moves` are committed before cycling the allowed moves,
    so tests can force a rejected commit; `end_after` makes the patient leave on that turn."""

    def __init__(
        self,
        first_moves: list[str] | None = None,
        end_after: int = 4,
        todo: bool = True,
        memory_lines: list[str] | None = None,
    ):
        self.first_moves = list(first_moves or [])
        self.end_after = end_after
        self.todo = todo
        self.memory_lines = memory_lines
        self.patient_turns: dict[str, int] = {}

    def __call__(self, req: ChatRequest) -> Any:
        schema = json.dumps(req.response_schema or {})
        system = req.messages[0]["content"] if req.messages else ""
        if req.schema_name == "Scenario":
            return SCENARIO
        if req.response_schema and "commit_move" in schema:
            return self._commit(req, schema, system)
        if req.response_schema and "complete_todo" in schema:
            done = any("complete_todo" in str(m.get("content")) for m in req.messages[1:])
            if self.todo and not done:
                return {"name": "complete_todo", "arguments": {"item": "[1]"}}
            return {"name": "none"}
        if req.role == "memory_compactor":
            prior = [l for l in system.splitlines() if l.startswith("- Patient")]
            lines = (
                self.memory_lines
                if self.memory_lines is not None
                else [f"- Patient mentioned point {len(prior) + 1} in session."]
            )
            return "\n".join(dict.fromkeys(prior + lines))
        if req.role.startswith("counsellor"):
            n = sum(m["role"] == "assistant" for m in req.messages)
            return f"That sounds hard. What happened next? ({n})"
        n = sum(m["role"] == "user" for m in req.messages)
        return f"yeah idk, turn {n}"

    def _commit(self, req: ChatRequest, schema: str, system: str) -> dict:
        enum = json.loads(schema)["properties"]["arguments"]["properties"]["move"]["enum"]
        user_turns = sum(m["role"] == "user" and not m["content"].startswith("[") for m in req.messages)
        attempts_this_turn = 0
        for m in reversed(req.messages):
            if m["role"] == "user" and not m["content"].startswith("["):
                break
            if m["role"] == "user" and m["content"].startswith("[commit_move result]"):
                attempts_this_turn += 1
        if self.first_moves and user_turns == 1 and attempts_this_turn < len(self.first_moves):
            move = self.first_moves[attempts_this_turn]
        else:
            move = enum[(user_turns * 7 + attempts_this_turn) % len(enum)]
            if load_vocabulary().moves[move].depth:
                move = "answer"
        return {
            "name": "commit_move",
            "arguments": {
                "move": move,
                "secondary_move": None,
                "end_conversation": user_turns >= self.end_after,
                "reasoning": "I don't want to get into it yet.",
            },
        }


class ReferenceResponder(SimResponder):
    """SimResponder committing from the preset's move enum (its own picks know only our vocabulary)."""

    def _commit(self, req, schema, system):
        enum = json.loads(schema)["properties"]["arguments"]["properties"]["move"]["enum"]
        turns = sum(m["role"] == "user" and not m["content"].startswith("[") for m in req.messages)
        return {
            "name": "commit_move",
            "arguments": {
                "move": enum[(turns * 7) % len(enum)]
                if enum[(turns * 7) % len(enum)] not in ("minimize", "share", "go_deeper")
                else "answer_question",
                "secondary_move": None,
                "end_conversation": False,
                "reasoning": "I don't want to get into it yet.",
            },
        }
