"""The PatientAct authors' generation inputs, as `mindsim import patientact-situations` writes them: the clinical
situations that seed one profile each, the disease outlines the generator follows and the validator checks, and
the attribute priors the demographic scaffold is sampled from. This module is the typed reader of that folder,
so the profile stage reads the inputs without knowing the authors' file layout.

The folder holds `import.json` (which files this import wrote), `situations.jsonl` (one situation a line),
`outlines.json` (disease key → outline; only when outlines were imported) and `priors.json` (only when priors were
imported). `import.json` is written last: a folder without it is not a finished import.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from mindsimkit.mindcore.errors import InputError

RECORD = "import.json"
SITUATIONS = "situations.jsonl"
OUTLINES = "outlines.json"
PRIORS = "priors.json"
WHAT = "PatientAct situations"

# The scaffold attributes the authors' generator samples; a priors file must give a distribution for each.
SCAFFOLD_ATTRIBUTES = (
    "age_group",
    "biological_sex",
    "ethnicity",
    "occupation_type",
    "core_belief_theme",
    "attachment_style",
)
# The validator's checks read the whole outline; the writer reads only the first two (and the populations note
# for a child or an older adult), so every field is required here.
OUTLINE_LISTS = (
    "key_characteristics",
    "important_notes",
    "contraindications",
    "differential_considerations",
    "special_populations",
    "red_flags",
)
SEVERITIES = ("mild", "moderate", "severe")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Situation(_Strict):
    """One clinical situation: the seed of one generated profile."""

    disease_key: str = Field(min_length=1)
    topic: str = Field(min_length=1)
    situation: str = Field(min_length=1)


class TypicalPresentation(_Strict):
    mild: str = Field(min_length=1)
    moderate: str = Field(min_length=1)
    severe: str = Field(min_length=1)


class DiseaseOutline(_Strict):
    """What a disorder looks like (for the writer) and what must not appear (for the validator)."""

    key_characteristics: list[str]
    typical_presentation: TypicalPresentation
    important_notes: list[str]
    contraindications: list[str]
    differential_considerations: list[str]
    special_populations: list[str]
    red_flags: list[str]


Distribution = dict[str, float]


def _positive(dist: Distribution, where: str) -> None:
    if not dist:
        raise ValueError(f"{where}: no labels")
    if any(w < 0 for w in dist.values()) or sum(dist.values()) <= 0:
        raise ValueError(f"{where}: weights must be non-negative with a positive total")


class Priors(_Strict):
    """Weights (not necessarily summing to 1: sampling normalises) per scaffold attribute, with per-disease
    overrides that replace the global distribution of an attribute for situations of that disease."""

    age_ranges: dict[str, tuple[int, int]]
    global_: dict[str, Distribution] = Field(alias="global")
    by_disease: dict[str, dict[str, Distribution]] = Field(default_factory=dict)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _consistent(self) -> "Priors":
        for attr in SCAFFOLD_ATTRIBUTES:
            if attr not in self.global_:
                raise ValueError(f"global has no '{attr}' distribution")
        for attr, dist in self.global_.items():
            _positive(dist, f"global.{attr}")
        for key, overrides in self.by_disease.items():
            for attr, dist in overrides.items():
                _positive(dist, f"{key}.{attr}")
        for label, (low, high) in self.age_ranges.items():
            if not 0 <= low <= high:
                raise ValueError(f"age_ranges.{label}: expected 0 <= low <= high, got [{low}, {high}]")
        groups = set(self.global_["age_group"]).union(*(o.get("age_group", {}) for o in self.by_disease.values()))
        missing = sorted(groups - set(self.age_ranges))
        if missing:
            raise ValueError(f"age_ranges has no range for the age group(s) {', '.join(missing)}")
        return self

    def distribution(self, attribute: str, disease_key: str | None = None) -> Distribution:
        """The weights the scaffold samples `attribute` from for a situation of `disease_key`."""
        override = self.by_disease.get(disease_key or "", {})
        if attribute in override:
            return dict(override[attribute])
        if attribute not in self.global_:
            raise KeyError(attribute)
        return dict(self.global_[attribute])


class PatientActInputs(BaseModel):
    """An imported folder, read back."""

    model_config = ConfigDict(frozen=True)

    situations: list[Situation]
    outlines: dict[str, DiseaseOutline] | None = None
    priors: Priors | None = None

    def outline(self, disease_key: str) -> DiseaseOutline | None:
        return (self.outlines or {}).get(disease_key)


def _load(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(
            f"{path} not found; the folder is not a complete `mindsim import patientact-situations` "
            "output: import the files again"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: unreadable {what} ({exc}); import the files again") from exc


def read_inputs(folder: str | Path) -> PatientActInputs:
    """The inputs imported into `folder` (InputError naming the file on anything missing or malformed)."""
    folder = Path(folder)
    record = _load(folder / RECORD, "import record")
    if not isinstance(record, dict) or record.get("what") != WHAT or not isinstance(record.get("files"), dict):
        raise InputError(
            f"{folder / RECORD}: not the record of `mindsim import patientact-situations`; give the "
            "folder that command wrote"
        )
    files: dict[str, Any] = record["files"]
    try:
        rows = [json.loads(line) for line in (folder / SITUATIONS).read_text(encoding="utf-8").splitlines() if line]
        data = {
            "situations": rows,
            "outlines": _load(folder / OUTLINES, "outlines") if "outlines" in files else None,
            "priors": _load(folder / PRIORS, "priors") if "priors" in files else None,
        }
        return PatientActInputs.model_validate(data)
    except FileNotFoundError:
        raise InputError(f"{folder / SITUATIONS} not found; import the files again") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValidationError) as exc:
        first = str(exc).splitlines()[0] if not isinstance(exc, ValidationError) else _first(exc)
        raise InputError(
            f"{folder}: the imported PatientAct inputs do not read back ({first}); import the files again"
        ) from exc


def _first(exc: ValidationError) -> str:
    err = exc.errors()[0]
    return f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
