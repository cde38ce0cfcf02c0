"""The recipe's `judge:` section (MindEval2 Appendix G settings) and the engines used when no recipe
is given."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mindsimkit.judge.costs import Price
from mindsimkit.mindcore.config import EmbeddedEngine, EnginesConfig, RoleSpec, Seed, role_base


class JudgeConfig(BaseModel):
    """How replies are judged and scored."""

    model_config = ConfigDict(extra="forbid")

    judges: list[str] = Field(
        default_factory=lambda: ["judge"],
        description="Judge roles, each 'judge' or 'judge:NAME' (bound to engines in `roles:`); each writes its own rows",
        min_length=1,
    )
    bootstrap_draws: int = Field(2000, ge=100, le=100_000, description="Patient-bootstrap draws for intervals")
    seed: Seed = Field(0, description="Seed of the bootstrap draws (0 to 2**32-1)")
    max_replies: int | None = Field(
        None, ge=1, description="Judge at most this many replies per session (the first ones); default all"
    )
    full_rubric: bool = Field(
        True, description="Show the flag / do-not-flag lists; false keeps only definitions (small-context models)"
    )
    rubric: str | None = Field(None, description="Another rubric file of the same shape; default the shipped one")
    max_issues: int | None = Field(
        None,
        ge=1,
        description="Most issues one judgment may list (default: all of the rubric's). The longest "
        "possible answer grows with it (~570 tokens an issue); a small-context model needs a cap",
    )
    preset: str = Field(
        "ours",
        description="Output-format preset (judge/data/presets.yaml): 'ours' (findings with reasons and "
        "checked quotes) or 'mhqr-reference' (the authors' reference answer: justification, then 0/1 for each issue; "
        "its report adds their session summary: mean, p99, incident shares)",
    )
    expected_severity: bool = Field(
        False,
        description="Also record each judgment's expected severity weight from the judge's token log "
        "probabilities (judgments' expected_weight; needs an engine that returns logprobs). MHQR does not use it",
    )
    plots: bool = Field(True, description="Write the PNG plots")
    concurrency: int | None = Field(
        None,
        ge=1,
        description="Replies judged at once (default: as many as the engine allows). Every judgment "
        "starts with the same long rubric prompt; a server that caches prompts per slot (llama.cpp) evaluates it "
        "once per slot it lands on, so on a small CPU server a low number saves that work",
    )

    prices: dict[str, Price] = Field(
        default_factory=dict,
        description="List prices per million tokens for the report's cost table (MindEval2 "
        "Table 8), keyed by role name (judge, judge:NAME, patient, ...) or model name; role wins. Each: input, "
        "output, cached_input (default: input)",
    )
    profiles: str | None = Field(
        None,
        description="Profiles folder or parquet whose in_benchmark column names the benchmark subset "
        "(default: RUN_DIR/profiles/profiles.parquet when there; the sessions' own in_benchmark column wins)",
    )

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, v: str) -> str:
        from mindsimkit.judge.presets import preset_names

        names = preset_names()  # a broken presets file raises its own ConfigError here, not "unknown preset"
        if v not in names:
            raise ValueError(f"unknown preset {v!r}; choose one of {', '.join(names)} (judge/data/presets.yaml)")
        return v

    @field_validator("rubric")
    @classmethod
    def _rubric_loads(cls, v: str | None) -> str | None:
        from mindsimkit.judge.rubric import load_rubric

        if v is not None:
            load_rubric(v)  # a missing, binary or invalid file stops the command here, before any engine starts
        return v

    @field_validator("judges")
    @classmethod
    def _judge_roles(cls, v: list[str]) -> list[str]:
        for name in v:
            if role_base(name) != "judge" or name.endswith(":"):
                raise ValueError(f"'{name}' is not a judge role; write 'judge' or 'judge:NAME'")
        if len(set(v)) != len(v):
            raise ValueError("each judge role may be named once")
        return v


def default_engines_config() -> EnginesConfig:
    """No recipe: the embedded SmolLM2 engine, near-greedy, with room for the rubric prompt. It shows
    the pipeline runs; judgments worth reading need a strong model behind an OpenAI-compatible endpoint."""
    return EnginesConfig(
        engines={"local": EmbeddedEngine(parallel=2, ctx_per_slot=8192)},
        roles={"default": RoleSpec(engine="local", temperature=0.0, max_tokens=768, seed=0)},
    )
