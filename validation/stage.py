"""What the validation stage declares to preflight (`mindcore.stages`): with `validation.arc` on it calls the
`labeller`, whose arc label is checked against `validation.arc_max_tokens`, and whose largest prompt is the
longest clipped turn with its clipped context. Found through the `mindsim.stages` entry point.
"""

from __future__ import annotations

from typing import Any

from mindsimkit.mindcore.budget import (
    PromptSize,
    RoleSchema,
    messages_tokens,
    register_prompt_estimate,
    register_role_schema,
)
from mindsimkit.mindcore.budget_fit import section_budget
from mindsimkit.mindcore.stages import Stage, register_stage, role_use, sample


def _arc_on(recipe: Any) -> bool:
    return bool((getattr(recipe, "validation", None) or {}).get("arc", False))


def _arc_schema() -> dict[str, Any]:
    from mindsimkit.validation.arc import ArcLabel

    return ArcLabel.model_json_schema()


def _labeller_prompt(inp: Any, sz: Any) -> PromptSize:
    from mindsimkit.mindcore.budget import fill_text
    from mindsimkit.mindcore.prompts import render
    from mindsimkit.validation.arc import MAX_CONTEXT_CHARS, MAX_TURN_CHARS, SYSTEM_TEMPLATE, TURN_TEMPLATE
    from mindsimkit.validation.config import ValidationConfig

    vcfg = ValidationConfig.model_validate(getattr(inp.recipe, "validation", None) or {})
    session = sample("longest_session")
    if getattr(inp, "typical", False) and session is not None:
        return _typical_labeller_prompt(inp, sz, session, vcfg.arc_context_messages)
    context = [{"speaker": "Counsellor", "text": fill_text(MAX_CONTEXT_CHARS)}] * vcfg.arc_context_messages
    user = render(TURN_TEMPLATE, context=context, turn=fill_text(MAX_TURN_CHARS))
    n = messages_tokens([{"role": "system", "content": render(SYSTEM_TEMPLATE)}, {"role": "user", "content": user}], sz)
    return PromptSize("labeller", n, {"longest clipped turn with its context": n})


def _typical_labeller_prompt(inp: Any, sz: Any, session: Any, context_messages: int) -> PromptSize:
    """The mean labelling request over a session the simulator would write at its reply bounds: an early message
    has fewer messages before it than the context window holds, and a message shorter than the clip limit is sent
    whole (the requests are built as the stage builds them, `arc.turn_requests`)."""
    from mindsimkit.validation.arc import turn_requests
    from mindsimkit.validation.transcripts import Conversation, Message

    _, exchange = session(inp, sz)
    conv = Conversation(
        conversation_id="c", patient_id="p", messages=[Message(role=m["role"], content=m["content"]) for m in exchange]
    )
    sizes = [
        messages_tokens(r, sz) for r in turn_requests(conv, patient_role="user", context_messages=context_messages)
    ]
    n = round(sum(sizes) / len(sizes)) if sizes else 0
    return PromptSize("labeller", n, {f"mean of {len(sizes)} messages' requests in a session": n})


def register() -> None:
    from mindsimkit.validation.config import ValidationConfig

    register_stage(
        Stage("validate", lambda recipe, engines: [role_use(engines, "labeller")] if _arc_on(recipe) else [])
    )
    register_role_schema(
        RoleSchema(
            "labeller",
            "ArcLabel",
            _arc_schema,
            frozenset({"validate"}),
            active=_arc_on,
            budget=section_budget(
                "validation", "arc_max_tokens", ValidationConfig.model_fields["arc_max_tokens"].default
            ),
        )
    )
    register_prompt_estimate("labeller", _labeller_prompt)
