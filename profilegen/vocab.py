"""Loads and checks the profile vocabularies shipped as data (MindEval2 §4.1, Appendix C, Tables 11 and
16–21): presenting problems and impact domains (`data/problems.yaml`), the 5P formulation labels and
core-belief clusters (`data/formulation.yaml`). The counts the paper fixes are checked on load so an
edited file that breaks them fails with one clear error.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore import yamlio

CORE_GROUPS = ("mood_and_emotions", "wellbeing_and_functioning", "interpersonal", "personal_growth")
SKINNER_FAMILIES = (
    "problem_solving",
    "information_seeking",
    "helplessness",
    "escape",
    "self_reliance",
    "support_seeking",
    "delegation",
    "social_isolation",
    "accommodation",
    "negotiation",
    "submission",
    "opposition",
)
PROTECTIVE_GROUPS = (
    "connectedness",
    "hope_and_optimism",
    "identity",
    "meaning",
    "empowerment",
    "practical_footing",
)
CORE_BELIEFS = {
    "helpless": "self",
    "unlovable": "self",
    "worthless": "self",
    "unsafe": "world",
    "exploitative": "world",
    "unchangeable": "future",
    "futile": "future",
}
N_MAIN, N_SECONDARY_ONLY, N_DOMAINS = 16, 5, 5


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Requires(_Strict):
    """Demographic values a label is compatible with; an absent key means any value."""

    age_bands: list[str] | None = Field(None, description="Allowed age bands.")
    relationship: list[str] | None = Field(None, description="Allowed relationship statuses.")
    employment: list[str] | None = Field(None, description="Allowed employment statuses.")
    living_situation: list[str] | None = Field(None, description="Allowed living situations.")


class Label(_Strict):
    """One vocabulary entry."""

    id: str = Field(pattern=r"^[a-z_]+$", description="Label id the writer must use.")
    description: str = Field(description="What the label means, shown to the writer.")
    group: str | None = Field(None, description="Group the label belongs to, if grouped.")
    name: str | None = Field(None, description="Human-readable name.")
    sources: list[str] | None = Field(None, description="Framework codes the category comes from.")
    family: str | None = Field(None, description="Skinner coping family (coping labels only).")
    maladaptive: bool | None = Field(None, description="Maladaptive coping (coping labels only).")
    arm: str | None = Field(None, description="Beck triad arm (core beliefs only).")
    requires: Requires = Field(default_factory=Requires, description="Demographic constraints.")
    kind: Literal["psychological", "social"] | None = Field(
        None,
        description="Predisposing labels only: a social condition rather than a personal history (PatientAct's "
        "split, §3.1); PatientAct-shaped profiles offer social ones only in the social section.",
    )


class Vocabularies(_Strict):
    """All label sets of a profile, by section."""

    version: str = Field(description="'<problems version>+<formulation version>'.")
    groups: dict[str, str] = Field(description="Core problem groups.")
    main: dict[str, Label] = Field(description="Main presenting problems.")
    secondary_only: dict[str, Label] = Field(description="Problems that occur only as secondary.")
    impact_domains: dict[str, Label] = Field(description="WSAS functional-impact domains.")
    quality_of_life: dict[str, str] = Field(description="QoL bands and what they mean.")
    impact_given_group: dict[str, dict[str, float]] = Field(
        description="Relative weight of each impact domain given the main problem's core group."
    )
    predisposing: dict[str, Label] = Field(description="Predisposing factors.")
    social_predisposing: dict[str, Label] = Field(
        default_factory=dict, description="Social predisposing conditions offered only to PatientAct-shaped profiles."
    )
    precipitating: dict[str, Label] = Field(description="Precipitating events (group in `group`).")
    protective: dict[str, Label] = Field(description="Protective factors (group in `group`).")
    coping: dict[str, Label] = Field(description="Coping behaviours.")
    core_beliefs: dict[str, Label] = Field(description="Core-belief clusters.")

    @property
    def secondary(self) -> list[str]:
        """Every problem that may fill the secondary slot: the main ones and the secondary-only ones."""
        return [*self.main, *self.secondary_only]

    def problem(self, pid: str) -> Label:
        return self.main.get(pid) or self.secondary_only[pid]


def _read(name: str) -> dict[str, Any]:
    path = resources.files("mindsimkit.profilegen") / "data" / name
    try:
        data = yamlio.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read profilegen/data/{name}: {exc}") from exc
    if not isinstance(data, dict) or "source" not in data or "version" not in data:
        raise ConfigError(f"profilegen/data/{name} must be a mapping with source:, version: and entries")
    return data


def _labels(items: list[dict[str, Any]], **extra: Any) -> dict[str, Label]:
    out: dict[str, Label] = {}
    for item in items:
        label = Label.model_validate({**item, **extra})
        if label.id in out:
            raise ConfigError(f"duplicate vocabulary label {label.id!r}")
        out[label.id] = label
    return out


def _grouped(groups: dict[str, list[dict[str, Any]]]) -> dict[str, Label]:
    out: dict[str, Label] = {}
    for group, items in groups.items():
        for lid, label in _labels(items, group=group).items():
            if lid in out:
                raise ConfigError(f"duplicate vocabulary label {lid!r}")
            out[lid] = label
    return out


def build_vocabularies(problems: dict[str, Any], formulation: dict[str, Any]) -> Vocabularies:
    """Validate raw YAML of both files; raise ConfigError naming every broken rule."""
    try:
        voc = Vocabularies(
            version=f"{problems['version']}+{formulation['version']}",
            groups=problems["groups"],
            main=_labels(problems["main"]),
            secondary_only=_labels(problems["secondary_only"]),
            impact_domains=_labels([{**d, "description": d["name"]} for d in problems["impact_domains"]]),
            quality_of_life=problems["quality_of_life"],
            impact_given_group=problems["impact_given_group"],
            predisposing=_labels(formulation["predisposing"]),
            social_predisposing=_labels(formulation.get("social_predisposing", []), kind="social"),
            precipitating=_grouped(formulation["precipitating"]),
            protective=_grouped(formulation["protective"]),
            coping=_labels(formulation["coping"]),
            core_beliefs=_labels(formulation["core_beliefs"]),
        )
    except (KeyError, TypeError, ValidationError) as exc:
        raise ConfigError(f"profile vocabulary files are malformed: {exc!r}") from exc
    problems_found = []
    if tuple(voc.groups) != CORE_GROUPS:
        problems_found.append(f"core groups must be {CORE_GROUPS}, found {tuple(voc.groups)}")
    if len(voc.main) != N_MAIN or {m.group for m in voc.main.values()} != set(CORE_GROUPS):
        problems_found.append(f"need {N_MAIN} main problems spread over all four core groups")
    if len(voc.secondary_only) != N_SECONDARY_ONLY:
        problems_found.append(f"need {N_SECONDARY_ONLY} secondary-only problems")
    if set(voc.main) & set(voc.secondary_only):
        problems_found.append("a problem is both main and secondary-only")
    if len(voc.impact_domains) != N_DOMAINS:
        problems_found.append(f"need the {N_DOMAINS} WSAS impact domains")
    if set(voc.impact_given_group) != set(CORE_GROUPS) or any(
        set(w) != set(voc.impact_domains) for w in voc.impact_given_group.values()
    ):
        problems_found.append("impact_given_group needs a weight per impact domain for each core group")
    if set(voc.quality_of_life) != {"poor", "moderate", "good"}:
        problems_found.append("quality_of_life must be poor / moderate / good")
    if {c.family for c in voc.coping.values()} != set(SKINNER_FAMILIES):
        problems_found.append(f"coping labels must cover exactly the twelve families {SKINNER_FAMILIES}")
    if any(c.maladaptive is None for c in voc.coping.values()):
        problems_found.append("every coping label needs maladaptive: true/false")
    if {p.group for p in voc.protective.values()} != set(PROTECTIVE_GROUPS):
        problems_found.append(f"protective groups must be {PROTECTIVE_GROUPS}")
    if {k: v.arm for k, v in voc.core_beliefs.items()} != CORE_BELIEFS:
        problems_found.append(f"core beliefs must be the seven clusters {CORE_BELIEFS}")
    if set(voc.social_predisposing) & set(voc.predisposing):
        problems_found.append("a social_predisposing label repeats a predisposing one")
    if problems_found:
        raise ConfigError("profile vocabulary invalid: " + "; ".join(problems_found))
    return voc


@lru_cache(maxsize=1)
def load_vocabularies() -> Vocabularies:
    """The shipped vocabularies (cached)."""
    return build_vocabularies(_read("problems.yaml"), _read("formulation.yaml"))


def read_data(name: str) -> dict[str, Any]:
    """A YAML data file of this package (must carry source: and version:)."""
    return _read(name)
