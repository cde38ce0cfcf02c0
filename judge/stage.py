"""What the judges declare to preflight (`mindcore.stages`): `mindsim judge run` calls the `judge` role, whose
MHQR judgment (or, with `--rubric patientact`, its five-dimension conversation answer) is checked against its
token budget, and whose largest prompt is the rubric, the counsellor's system prompt and the longest session a
simulator can write — taken from the `longest_session` sample the simulator registers, since the judge audits
transcripts and does not import it. Found through the `mindsim.stages` entry point.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mindsimkit.mindcore.budget import (
    PromptSize,
    RoleSchema,
    messages_tokens,
    register_prompt_estimate,
    register_role_schema,
)
from mindsimkit.mindcore.stages import Stage, register_stage, role_use, sample

if TYPE_CHECKING:
    from mindsimkit.judge.config import JudgeConfig
    from mindsimkit.judge.judging import Judge


def judge_config(recipe: Any) -> JudgeConfig:
    """The recipe's judge section, or the defaults (`mindsim judge run` without a recipe)."""
    from mindsimkit.judge.config import JudgeConfig

    return JudgeConfig.model_validate(getattr(recipe, "judge", None) or {})


def _judge(recipe: Any) -> Judge:
    from mindsimkit.judge.judging import Judge
    from mindsimkit.judge.rubric import load_rubric

    cfg = judge_config(recipe)
    return Judge(
        "judge",
        None,
        load_rubric(cfg.rubric),
        full_rubric=cfg.full_rubric,
        max_issues=cfg.max_issues,
        preset=cfg.preset,
    )


def mhqr_schema(recipe: Any = None) -> dict[str, Any]:
    # The preset decides the answer's shape (findings, or a justification and flags).
    return _judge(recipe).output.model_json_schema()


def patientact_conversation_schema() -> dict[str, Any]:
    from mindsimkit.judge.patientact import answer_model

    return answer_model("conversation").model_json_schema()


def _judge_prompt(inp: Any, sz: Any) -> PromptSize | None:
    from mindsimkit.judge.judging import replies
    from mindsimkit.judge.schemas import SessionInput

    longest = sample("longest_session")
    if longest is None:
        return None
    # The last reply of the longest session the simulator can write is the judge's largest prompt.
    system_prompt, exchange = longest(inp, sz)
    session = SessionInput(
        session_id="s",
        patient_id="p",
        counsellor="c",
        session_index=1,
        counsellor_system_prompt=system_prompt,
        messages=exchange,
    )
    judge = _judge(inp.recipe)
    n = messages_tokens(judge.messages(replies(session)[-1]), sz)
    return PromptSize("judge", n, {"rubric, counsellor prompt and the longest session": n}, inp.reply_bound()[1])


def _judge_roles(recipe: Any, engines: Any) -> list[Any]:
    engines.config.check_bound(judge_config(recipe).judges, "judge.judges")
    return [role_use(engines, "judge")]


def register() -> None:
    register_stage(Stage("judge", _judge_roles))
    register_stage(Stage("judge_patientact", _judge_roles))
    register_role_schema(
        RoleSchema("judge", "mhqr_judgment", mhqr_schema, frozenset({"judge"}), schema_for=mhqr_schema)
    )
    # `mindsim judge run --rubric patientact`: one answer per session on PatientAct's 5 dimensions.
    register_role_schema(
        RoleSchema("judge", "patientact_conversation", patientact_conversation_schema, frozenset({"judge_patientact"}))
    )
    register_prompt_estimate("judge", _judge_prompt)
