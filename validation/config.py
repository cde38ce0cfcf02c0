"""The recipe's `validation:` section (MindEval2/MindSim paper, §4.3 and Appendix E settings).

All fields are defaulted to the paper's choices and unknown fields are rejected, so a typo in a
recipe names the field instead of being ignored.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TypedDict

from pydantic import BaseModel, ConfigDict, Field

from mindsimkit.mindcore.config import Seed

SHIPPED_REFERENCE = "data/mibot_reference.parquet"


def shipped_reference_path() -> Path:
    """The reference artifact shipped with the package (MIBot v6.3A human turns, numbers only)."""
    return Path(str(resources.files("mindsimkit.validation").joinpath(SHIPPED_REFERENCE)))


class SampleFilters(TypedDict, total=False):
    """The sample filters a comparison applies to each system, only those that are set."""

    first_sessions_only: bool
    max_patient_turns: int
    counsellors: list[str]


class ValidationConfig(BaseModel):
    """Settings for surface-feature distances, the noise floor, narrative arcs and the report."""

    model_config = ConfigDict(extra="forbid")

    reference: str | None = Field(
        None,
        description="Reference artifact (.parquet from `mindsim validate reference`); default: the shipped MIBot one",
    )
    patient_role: str = Field("user", min_length=1, description="Chat role that is the patient in the transcripts")
    min_patient_turns: int = Field(
        1, ge=1, description="Skip conversations with fewer patient turns (the paper's real set used 4)"
    )
    # The paper's sample (§4.3, App. E "Narrative arc"): first sessions, up to 15 patient turns, with the
    # production counsellor. These filters apply to the systems compared, never to the reference.
    first_sessions_only: bool = Field(
        False, description="Compare only each patient's first session (transcripts need session_index)"
    )
    max_patient_turns: int | None = Field(
        None,
        ge=1,
        description="Keep each conversation only up to its N-th patient turn (the paper: 15), as if "
        "the session had been capped there; default: whole conversations",
    )
    counsellors: list[str] | None = Field(
        None,
        min_length=1,
        description="Compare only conversations with these counsellors (transcripts need "
        "counsellor); a system left with none is dropped with a warning",
    )
    bootstrap_draws: int = Field(1000, ge=10, le=100_000, description="Patient-level bootstrap replicates")
    ci_level: float = Field(0.95, gt=0.5, lt=1.0, description="Coverage of the percentile intervals")
    floor_splits: int = Field(100, ge=2, le=100_000, description="Random halvings of the reference for the noise floor")
    floor_quantile: float = Field(
        0.95, gt=0.0, lt=1.0, description="Quantile of the split distances reported as the floor"
    )
    joint: bool = Field(True, description="Also compute the joint OT distance over the standardised 7-feature vectors")
    joint_floor_splits: int = Field(
        10, ge=0, le=1000, description="Halvings for the joint distance's own floor (exact OT per split; 0 = skip)"
    )
    mtld_threshold: float = Field(0.72, gt=0.0, lt=1.0, description="MTLD factor threshold (TTR) for lexicalrichness")
    markers: str | None = Field(None, description="Marker-list YAML replacing validation/data/markers.yaml")
    seed: Seed = Field(0, description="Seed for bootstrap draws and floor splits (0 to 2**32-1)")
    arc: bool = Field(False, description="Label patient turns P/T/C/F with the `labeller` role and report arc shares")
    arc_context_messages: int = Field(4, ge=0, le=20, description="Preceding messages shown to the labeller per turn")
    arc_stretches: int = Field(5, ge=1, le=20, description="Equal stretches each conversation is split into")
    arc_cache: str | None = Field(
        None, description="JSONL cache of labels keyed by content; default: <out_dir>/arc_cache.jsonl"
    )
    arc_max_tokens: int = Field(24, ge=8, le=512, description="Token budget of one label reply (a tiny JSON object)")
    plots: bool = Field(True, description="Write PNG plots next to the report")

    def filters(self) -> SampleFilters:
        """The sample filters that are set, by name (empty when the whole transcripts are compared)."""
        out: SampleFilters = {}
        if self.first_sessions_only:
            out["first_sessions_only"] = True
        if self.max_patient_turns is not None:
            out["max_patient_turns"] = self.max_patient_turns
        if self.counsellors is not None:
            out["counsellors"] = self.counsellors
        return out

    def reference_path(self) -> Path:
        return Path(self.reference) if self.reference else shipped_reference_path()
