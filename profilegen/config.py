"""The recipe's `profiles:` section (MindEval2 §4.1 and Appendix C settings; paper defaults: 1,000
candidates, a pool of 100 with a floor of 10 poor-QoL patients, a benchmark of 50).

Read it with `profiles_config(recipe)`: it also resolves `causal_checks` from the recipe's
`simulation.patient_engine` (PatientAct's causal 5P rules apply when the PatientAct patient is run).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mindsimkit.mindcore.config import Seed
from mindsimkit.mindcore.runlog import DEFAULT_ENGINE

if TYPE_CHECKING:
    from mindsimkit.profilegen.schemas import ProfileShape

# Profiles one run may ask for: a thousand times the paper's 1,000 candidates; more is a typo.
MAX_COUNT = 1_000_000


def _clean_only() -> list[Literal["clean", "minor"]]:
    return ["clean"]


class ProfilesConfig(BaseModel):
    """Settings of the profile stages. Every field has a default; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")

    personas: str = Field(
        "synthetic",
        description="Persona source: 'synthetic' (the shipped sample), a local parquet/JSONL file or folder "
        "in the Nemotron-Personas-USA schema, or a Hub id such as 'nvidia/Nemotron-Personas-USA'.",
    )

    @field_validator("personas")
    @classmethod
    def _source_exists(cls, v: str) -> str:
        # Checked with the recipe, so a typo in a local path stops `mindsim run` before its folder is made; a Hub
        # id (OWNER/NAME) is opened when the stage runs.
        hub = "/" in v and not v.startswith((".", "/", "~"))
        if v not in ("", "synthetic") and not hub and not Path(v).expanduser().exists():
            raise ValueError(
                f"persona source '{v}' is neither an existing file/folder nor a Hub dataset id "
                "(OWNER/NAME); give a parquet/JSONL path, a Hub id, or 'synthetic'"
            )
        return v

    source: Literal["personas", "patientact-situations"] = Field(
        "personas",
        exclude_if=lambda v: v == "personas",
        description="Where profiles come from: 'personas' (written from persona records, the MindEval2 stages) or "
        "'patientact-situations' (PatientAct's chain seeded by the clinical situations of `situations`).",
    )
    situations: Path | None = Field(
        None,
        exclude_if=lambda v: v is None,
        description="The folder `mindsim import patientact-situations` wrote (source: patientact-situations).",
    )
    demographics_rounds: int | None = Field(
        None,
        ge=1,
        le=10,
        exclude_if=lambda v: v is None,
        description="Situation source: most demographics completion rounds per generation; empty = the authors' "
        "5 (profilegen/data/situation_profile.yaml).",
    )
    validation_rounds: int | None = Field(
        None,
        ge=1,
        le=10,
        exclude_if=lambda v: v is None,
        description="Situation source: most generate-and-validate rounds per situation; empty = the authors' 3.",
    )

    @model_validator(mode="after")
    def _situations_folder(self) -> "ProfilesConfig":
        # The folder itself is read when the stage starts (`situation_stage.plan`): a recipe that names one not yet
        # imported still plans.
        if self.source == "patientact-situations":
            if self.situations is None:
                raise ValueError(
                    "source 'patientact-situations' needs profiles.situations: the folder "
                    "`mindsim import patientact-situations` wrote"
                )
        elif self.situations is not None:
            raise ValueError(
                "profiles.situations is read only with source: patientact-situations; set the source or remove it"
            )
        return self

    candidates: int = Field(
        1000, ge=1, le=MAX_COUNT, description="How many adult personas to turn into candidate profiles."
    )
    pool_size: int = Field(
        100, ge=1, le=MAX_COUNT, description="Size of the validation pool selected from clean profiles."
    )
    benchmark_size: int = Field(50, ge=0, le=MAX_COUNT, description="Size of the benchmark subset of the pool.")
    poor_qol_floor: float = Field(
        0.10, ge=0, le=1, description="Minimum share of poor-quality-of-life patients in the pool."
    )
    benchmark_poor_qol: int | None = Field(
        None,
        ge=0,
        description="Poor-quality-of-life patients the benchmark subset must hold; empty = every patient of the "
        "pool's floor (the paper: 10 of 100 in the pool, all 10 in the benchmark of 50, i.e. 20%).",
    )
    pool_verdicts: list[Literal["clean", "minor"]] = Field(
        default_factory=_clean_only,
        description="Screening verdicts a profile may have to enter the pool (the paper: clean only).",
    )
    extra_candidates: int = Field(
        0,
        ge=0,
        exclude_if=lambda v: v == 0,
        description="When fewer profiles than pool_size are kept with a pool verdict, write and screen up to this "
        "many more candidates (the next personas of the same seeded order), once; 0 = never. A noisy screener "
        "costs these only in the runs it empties the pool in.",
    )
    max_revisions: int = Field(2, ge=0, le=10, description="Revisions of a serious profile before it is dropped.")
    text_scale: float = Field(
        1.0,
        ge=0.25,
        le=1.0,
        description="Scale on the writer's text limits (1 = full; small models fill every field to its limit, "
        "so this is what a profile costs to write).",
    )
    screen_max_faults: int = Field(6, ge=1, le=6, description="Most faults the screener may list in one verdict.")
    rates: Path | None = Field(
        None, description="Rates file (see `mindsim profiles fit-rates`); empty = the shipped illustrative prior."
    )
    seed: Seed | None = Field(None, description="Seed of the profile stages (0 to 2**32-1); empty = the recipe's seed.")
    concurrency: int = Field(
        8, ge=1, le=256, description="Profiles in flight at once (the engine's own limit still applies)."
    )
    use_distilabel: bool = Field(
        True, description="Run stages 3–4 as a distilabel pipeline (false = the plain async path)."
    )
    # 256: distilabel spends a fixed ~0.2 s of CPU per batch (it caches the pipeline and its batch manager after
    # each one); at 64 rows that was ~0.4 ms per request more than the bare client, at 256 it is a quarter of it
    # (benchmarks/bench_harness.py). A batch also caps the rows in flight, and `concurrency` goes to 256.
    distilabel_batch_size: int = Field(
        256, ge=1, description="distilabel batch size (large batches: its per-batch overhead is ~0.2 s of CPU)."
    )
    causal_checks: bool | None = Field(
        None,
        description="PatientAct's causal 5P rules (dated predisposing episodes, coping as maintenance cycles, one "
        "causal chain) in the writer's and screener's prompts plus deterministic checks; empty = on exactly when "
        "simulation.patient_engine includes 'patientact'.",
    )

    when_forms: bool = Field(
        False,
        description="Under the causal rules, each predisposing history's `when` is one of the time forms "
        "profilegen/data/causal_rules.yaml lists, offered as an enum in the writer's schema: a grammar-constrained "
        "small model cannot leave a history undated (the quickstart sets it; off, `when` is free text the dating "
        "check reads).",
    )

    patientact_shape: bool = Field(
        False,
        description="PatientAct's profile shape (§3.1-3.2, Figs. 2-4): the presenting problem with an impact list of "
        "observable symptoms, predisposing factors split into psychological (2-3) and social (1-2), 3-5 "
        "perpetuating cycles with helpful habits under protective, passive death-related thoughts allowed without "
        "intent, and hard conflicts with relationship, work or living situation resolved by revising those "
        "demographics.",
    )

    @model_validator(mode="after")
    def _sizes(self) -> "ProfilesConfig":
        # Only a pool the recipe asks for: the default pool (100) over a few candidates means "every candidate".
        if "pool_size" in self.model_fields_set and self.pool_size > self.candidates:
            raise ValueError(
                f"pool_size ({self.pool_size}) must not exceed candidates ({self.candidates}): the pool is "
                "chosen from the candidates; raise candidates or lower pool_size"
            )
        if self.benchmark_size > self.pool_size:
            raise ValueError(f"benchmark_size ({self.benchmark_size}) must not exceed pool_size ({self.pool_size})")
        if self.benchmark_poor_qol is not None:
            pool_floor = pool_poor_floor(self.poor_qol_floor, self.pool_size)
            if self.benchmark_poor_qol > min(pool_floor, self.benchmark_size):
                raise ValueError(
                    f"benchmark_poor_qol ({self.benchmark_poor_qol}) must not exceed the pool's poor-QoL floor "
                    f"({pool_floor} = poor_qol_floor {self.poor_qol_floor:g} × pool_size {self.pool_size}) nor "
                    f"benchmark_size ({self.benchmark_size}); raise poor_qol_floor or lower benchmark_poor_qol"
                )
        return self

    @property
    def shape(self) -> "ProfileShape":
        """The text and fault limits every profile of this recipe is written with."""
        from mindsimkit.profilegen.schemas import ProfileShape

        # An unresolved (None) causal_checks counts as off: resolve it with `profiles_config` first.
        return ProfileShape(
            text_scale=self.text_scale,
            screen_max_faults=self.screen_max_faults,
            causal_checks=bool(self.causal_checks),
            patientact=self.patientact_shape,
            # Only where it acts: a run without the causal rules records the shape it recorded before.
            when_forms=self.when_forms and bool(self.causal_checks),
        )

    @property
    def benchmark_poor_floor(self) -> int:
        """How many poor-QoL patients the benchmark must hold (where the pool has them)."""
        if self.benchmark_poor_qol is not None:
            return self.benchmark_poor_qol
        return min(pool_poor_floor(self.poor_qol_floor, self.pool_size), self.benchmark_size)


def pool_poor_floor(rate: float, pool_size: int) -> int:
    """Poor-QoL patients a pool of `pool_size` must hold. Rounded first so 0.07 × 100 is 7, not 8."""
    return math.ceil(round(rate * pool_size, 9))


PATIENTACT = "patientact"


def uses_patientact(simulation: dict[str, Any] | None) -> bool:
    """Whether a recipe's raw `simulation:` dict runs the PatientAct patient or one of its variants
    (`patient_engine` a name or a list; a variant is `patientact:ARM`, `mindsim.patient_engines`). Read raw on
    purpose: the simulation section is validated by its own stage, and profilegen must not import the simulator."""
    engines = (simulation or {}).get("patient_engine", DEFAULT_ENGINE)
    names = [engines] if isinstance(engines, str) else list(engines) if isinstance(engines, (list, tuple)) else []
    return PATIENTACT in {str(n).split(":", 1)[0] for n in names}


def resolve_causal_checks(cfg: ProfilesConfig, simulation: dict[str, Any] | None) -> ProfilesConfig:
    """`cfg` with an empty `causal_checks` decided by the recipe's patient engines; an explicit value stays."""
    if cfg.causal_checks is not None:
        return cfg
    return cfg.model_copy(update={"causal_checks": uses_patientact(simulation)})


def profiles_config(recipe: Any) -> ProfilesConfig:
    """The recipe's `profiles:` section, validated (errors name `profiles.field`) and with `causal_checks`
    resolved. Every caller that needs the profile shape reads the section through this."""
    section = getattr(recipe, "section", None)
    if callable(section):
        cfg = section("profiles", ProfilesConfig)
    else:
        cfg = ProfilesConfig.model_validate(getattr(recipe, "profiles", None) or {})
    return resolve_causal_checks(cfg, getattr(recipe, "simulation", None))
