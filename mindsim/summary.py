"""The simulation stage's summary as typed rows: what one shard counted (`ShardSummary`) and what the run
reports in `sessions/summary.json` (`SimulationSummary`), so callers read fields, never the card's labels.
The JSON keys are those summary.json has always had; older files keep reading (`SimulationSummary.read`).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mindsimkit.mindcore.io import atomic_write_json


class FailedArc(BaseModel):
    """One arc that failed (its finished sessions stay in the dataset), with the error that ended it."""

    model_config = ConfigDict(extra="forbid")
    patient_id: str
    counsellor: str
    patient_engine: str
    error: str = Field(description="'ErrorClass: message'")
    trial: int | None = Field(
        None,
        ge=0,
        exclude_if=lambda t: t is None,
        description="The arc's repeated trial (`simulation.trials` > 1); absent otherwise",
    )


class ShardCounts(BaseModel):
    """Counts every shard reports and the run adds up."""

    model_config = ConfigDict(extra="forbid")
    patients: int = 0
    arcs: int = 0
    failed_arcs: list[FailedArc] = Field(default_factory=list)
    sessions_written: int = 0
    duplicate_checkpoints_discarded: int = 0
    ended_by_patient: int = 0
    memory_repaired: int = 0
    memory_skipped: int = 0
    messages_trimmed: int = 0
    rejected_commits: int = 0
    # Scenario drafts written, re-drafts included (a shared first scenario counts once per patient).
    scenario_drafts: int = 0
    # By reason / by flag. Per shard is exact: a patient, and so its shared first scenario, lives in one shard.
    rejected_messages: dict[str, int] = Field(default_factory=dict)
    counsellor_flags: dict[str, int] = Field(default_factory=dict)


class ShardSummary(ShardCounts):
    shard: int


class SimulationSummary(ShardCounts):
    """`sessions/summary.json`: provenance, the run's totals, engines, usage, the settings and the runner."""

    model_config = ConfigDict(extra="forbid")
    toolkit: str | None = None
    toolkit_version: str | None = None
    git_revision: str | None = None
    git_dirty: bool | None = None
    python: str | None = None
    created_utc: str | None = None
    seed: int
    counsellors: list[str]
    patient_engines: list[str]
    sessions_expected: int
    # Arcs per patient × counsellor × engine (`simulation.trials`); left out at 1, as before trials existed.
    trials: int = Field(1, ge=1, exclude_if=lambda n: n == 1)
    elapsed_s: float
    engines: dict[str, Any] = Field(default_factory=dict)
    usage: dict[str, Any] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)
    # The preset settings the recipe replaced with its own (one line each); left out when none, as before presets.
    preset_overrides: list[str] = Field(default_factory=list, exclude_if=lambda v: not v)
    runner: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def totals(cls, parts: list[ShardSummary], failed_arcs: list[FailedArc], **fields: Any) -> "SimulationSummary":
        """The shards' counts added up (dict counts key by key, every key the first shard has kept at 0)."""
        added: dict[str, Any] = {}
        for name, info in ShardCounts.model_fields.items():
            if name in ("failed_arcs", "patients", "arcs"):
                continue
            if info.annotation == dict[str, int]:
                summed = sum((Counter(getattr(p, name)) for p in parts), Counter())
                added[name] = {**dict.fromkeys(getattr(parts[0], name), 0), **dict(summed)}
            else:
                added[name] = sum(getattr(p, name) for p in parts)
        return cls(**added, failed_arcs=failed_arcs, **fields)

    def write(self, path: Path) -> None:
        atomic_write_json(path, self.model_dump(mode="json"))

    @classmethod
    def read(cls, path: Path) -> "SimulationSummary":
        import json

        return cls.model_validate(json.loads(path.read_text(encoding="utf-8")))
