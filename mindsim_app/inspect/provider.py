"""The `mindsim` model provider for inspect: `--model mindsim/ROLE -M recipe=RECIPE` is the recipe's role as an
inspect model.

It answers through the toolkit's engine layer with the role's engine, model and sampling exactly as `mindsim run`
calls it, so a model behind the recipe (its embedded engine, a vLLM server, the fake engine of the tests) can be
the counsellor under test of `mindsimkit/mindeval2`, or a judge bound as an inspect model role. Generation
options inspect sets (`--temperature`, `--max-tokens`, `--seed`, a response schema) override the role's.
"""

from __future__ import annotations

from typing import Any

from inspect_ai.model import ChatMessage, GenerateConfig, ModelAPI, ModelOutput, ModelUsage, StopReason
from inspect_ai.tool import ToolChoice, ToolInfo

from mindsimkit.mindcore.config import role_base, ROLES
from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindsim_app.inspect.engines import IN_PROVIDER, read_recipe, started

# The finish reasons of the engine layer as inspect's stop reasons (the inverse of `backend.FINISH`).
STOP: dict[str, StopReason] = {
    "stop": "stop",
    "length": "max_tokens",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
}


def plain_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """inspect's messages as the engine layer sends them: role and text."""
    out = []
    for m in messages:
        if m.role not in ("system", "user", "assistant"):
            raise ValueError(f"the mindsim provider answers plain conversations; got a {m.role} message")
        out.append({"role": m.role, "content": m.text})
    return out


def sampling(config: GenerateConfig) -> dict[str, Any]:
    """The request fields inspect's config sets; the role's own settings fill the rest."""
    fields: dict[str, Any] = {
        "temperature": config.temperature,
        "top_p": config.top_p,
        "max_tokens": config.max_tokens,
        "seed": config.seed,
        "stop": config.stop_seqs,
        "frequency_penalty": config.frequency_penalty,
        "presence_penalty": config.presence_penalty,
    }
    if config.response_schema is not None:
        fields["response_schema"] = config.response_schema.json_schema.model_dump(exclude_none=True)
        fields["schema_name"] = config.response_schema.name
    return {k: v for k, v in fields.items() if v is not None}


class MindsimRoleAPI(ModelAPI):
    """One recipe role (`model_name`) as an inspect model."""

    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        config: GenerateConfig = GenerateConfig(),
        recipe: str | None = None,
        **model_args: Any,
    ) -> None:
        super().__init__(model_name, base_url, api_key, [], config)
        if model_args:
            raise ConfigError(
                f"mindsim/{model_name}: unknown model args {', '.join(sorted(model_args))}; the provider "
                "takes -M recipe=RECIPE only"
            )
        if role_base(model_name) not in ROLES:
            raise ConfigError(
                f"mindsim/{model_name}: not a recipe role (roles: {', '.join(ROLES)}; extra counsellors "
                "are counsellor:NAME)"
            )
        if recipe is None:
            raise ConfigError(f"mindsim/{model_name}: name the recipe whose role answers, -M recipe=RECIPE")
        self.client = started(read_recipe(recipe)).role(model_name)

    async def generate(
        self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice, config: GenerateConfig
    ) -> ModelOutput:
        if tools:
            raise ValueError("the mindsim provider answers plain conversations; this call offers tools")
        token = IN_PROVIDER.set(True)
        try:
            reply = await self.client.chat(plain_messages(input), **sampling(config))
        finally:
            IN_PROVIDER.reset(token)
        output = ModelOutput.from_content(
            self.model_name, reply.content, stop_reason=STOP.get(reply.finish_reason or "stop", "unknown")
        )
        output.usage = ModelUsage(
            input_tokens=reply.prompt_tokens,
            output_tokens=reply.completion_tokens,
            total_tokens=reply.prompt_tokens + reply.completion_tokens,
        )
        return output
