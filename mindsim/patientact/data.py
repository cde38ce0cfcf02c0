"""PatientAct's knowledge as typed data: reactions, behaviours and resistance patterns (App. C.1–C.3), the
trust scale and update rules (§3.3.4, App. C.4), the attachment prior (App. A), our core-belief cluster →
theme map, the identification task's options (App. D.1), the retrieval lexicon and the ablation arms (Table 4). All live in `mindsim/data/patientact/`; this module only loads and
checks them, so a broken file stops the run with the file named. A preset may put its own file in place of
`trust.yaml` or `step_rules.yaml` (`mindsim/data/presets.yaml`, files under `mindsim/data/presets/`)."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mindsimkit.mindcore.errors import ConfigError
from mindsimkit.mindcore import yamlio

DATA_DIR = "data/patientact"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Term(_Frozen):
    id: str = Field(pattern=r"^[a-z_]+$", description="Stable id used in schemas and records")
    name: str = Field(description="Display name")
    definition: str = Field(min_length=1, description="Our definition, shown to the model")
    cue: str = Field("", description="How a client acting this way tends to come across (signal text)")
    dimension: Literal["quantity", "content", "style"] | None = Field(None, description="Otani's dimension")


class Taxonomy(_Frozen):
    source: str
    version: str
    intensities: list[str] = Field(min_length=1)
    reactions: list[Term] = Field(min_length=7, max_length=7)
    behaviours: list[Term] = Field(min_length=8, max_length=8)
    resistance_patterns: list[Term] = Field(min_length=7, max_length=7)

    @model_validator(mode="after")
    def _unique(self) -> "Taxonomy":
        for name in ("reactions", "behaviours", "resistance_patterns"):
            ids = [t.id for t in getattr(self, name)]
            if len(set(ids)) != len(ids):
                raise ValueError(f"{name}: ids must be unique")
        if "resistance" not in {b.id for b in self.behaviours}:
            raise ValueError("behaviours: one must be 'resistance' (it opens the resistance-pattern step)")
        return self

    def ids(self, name: str) -> list[str]:
        return [t.id for t in getattr(self, name)]

    def term(self, name: str, term_id: str) -> Term:
        term: Term = next(t for t in getattr(self, name) if t.id == term_id)
        return term


class AttachmentRule(_Frozen):
    max_rise: float = Field(ge=0, description="Largest rise one exchange may give")
    max_fall: float = Field(ge=0, description="Largest fall one exchange may give")
    floor_fall: dict[str, float] = Field(default_factory=dict, description="Criterion -> least fall it causes")
    reverse_after_rises: int = Field(
        0, ge=0, description="After this many rises in a row the next rise reverses (0: never)"
    )
    reversal: float = Field(0.0, le=0, description="The move a reversed rise makes")
    leaning: str = Field(min_length=1, description="How this style's trust moves (told to the trust step)")


class TrustRules(_Frozen):
    source: str
    version: str
    start: float
    minimum: float
    maximum: float
    level_step: float = Field(gt=0)
    changes: dict[str, float]
    levels: dict[str, str]
    attachment: dict[str, AttachmentRule]
    concealment_offset: dict[str, float]
    default_criterion: str
    criteria: dict[Literal["raise", "keep", "lower"], dict[str, str]]

    @model_validator(mode="after")
    def _check(self) -> "TrustRules":
        if not self.minimum <= self.start <= self.maximum:
            raise ValueError("start must lie within [minimum, maximum]")
        if set(self.criteria) != {"raise", "keep", "lower"}:
            raise ValueError("criteria must have the groups raise, keep and lower (PatientAct Fig. 14)")
        names = [c for group in self.criteria.values() for c in group]
        if len(set(names)) != len(names):
            raise ValueError("criteria ids must be unique across groups")
        if self.default_criterion not in self.criteria["keep"]:
            raise ValueError("default_criterion must be a 'keep' criterion: unchanged is the default")
        for style, rule in self.attachment.items():
            unknown = set(rule.floor_fall) - set(self.criteria["lower"])
            if unknown:
                raise ValueError(
                    f"attachment.{style}.floor_fall names criteria that do not lower trust: {sorted(unknown)}"
                )
        if sorted({abs(v) for v in self.changes.values()}) != [0.0, 0.25, 0.5]:
            raise ValueError("changes must be 0, ±0.25 and ±0.5 (PatientAct §3.3.4)")
        if [float(k) for k in self.levels] != self.scale:
            raise ValueError(f"levels must be exactly {self.scale}")
        return self

    def group(self, criterion: str) -> str:
        return next(g for g, names in self.criteria.items() if criterion in names)

    @property
    def criterion_ids(self) -> list[str]:
        return [c for group in ("raise", "keep", "lower") for c in self.criteria[group]]

    @property
    def scale(self) -> list[float]:
        n = round((self.maximum - self.minimum) / self.level_step)
        return [round(self.minimum + i * self.level_step, 2) for i in range(n + 1)]

    def level_text(self, trust: float) -> str:
        """The description of the highest scale level at or below `trust`."""
        below = [lv for lv in self.scale if lv <= trust + 1e-9] or [self.minimum]
        return self.levels[f"{below[-1]:.1f}"]


class StepRules(_Frozen):
    """The behaviour and reaction steps' decision rules (PatientAct Figs. 10-11; `step_rules.yaml`)."""

    source: str
    version: str
    therapeutic_behaviours: list[str] = Field(min_length=1)
    positive_reactions: list[str] = Field(min_length=1)
    neutral_reactions: list[str] = Field(min_length=1)
    pullback_after: int = Field(ge=1)
    low_trust_at_most: float
    high_intensity: str
    moderate_intensity: str
    default_reaction: str
    default_intensity: str
    nothing_activated_behaviours: list[str] = Field(min_length=1)
    recent_behaviours: int = Field(4, ge=1, le=10, description="How many of the latest behaviours the step is shown")
    same_behaviour_run: int = Field(
        0, ge=0, description="Tell the step to avoid a behaviour that would make this many in a row (0: no such rule)"
    )
    neutral_or_low: bool = Field(
        False, description="Also lean to the nothing-activated behaviours at any neutral or low-intensity reaction"
    )


class ItemType(_Frozen):
    anchor: float
    description: str = Field(min_length=1)
    sources: list[str] = Field(min_length=1)


class ItemTypes(_Frozen):
    """The dynamic layer's item types, their anchored levels and the discomfort categories (`item_types.yaml`)."""

    source: str
    version: str
    spread: float = Field(ge=0)
    types: dict[str, ItemType] = Field(min_length=1)
    generic_tags: list[str] = Field(default_factory=list, description="Tags too generic to be patient-specific")
    discomfort_categories: dict[str, bool] = Field(min_length=2)
    category_anchors: dict[str, float] = Field(
        default_factory=dict,
        description="Discomfort category → the level an item of it is anchored at instead of "
        "its type's (PatientAct Fig. 7 puts therapy-specific vulnerability at 4.0)",
    )

    @model_validator(mode="after")
    def _known_categories(self) -> "ItemTypes":
        if unknown := set(self.category_anchors) - set(self.discomfort_categories):
            raise ValueError(f"category_anchors names unknown categories: {sorted(unknown)}")
        return self

    def anchor(self, item_type: str, category: str) -> float:
        """The level an item of this type and discomfort category starts from, before the decomposer's shift."""
        return self.category_anchors.get(category, self.types[item_type].anchor)

    def shifts(self, step: float) -> list[float]:
        n = round(self.spread / step)
        return [round(i * step, 2) for i in range(-n, n + 1)]


class AttachmentPrior(_Frozen):
    source: str
    version: str
    weights: dict[str, float]
    descriptions: dict[str, str]


class ThemeMap(_Frozen):
    source: str
    version: str
    themes: dict[str, str]
    clusters: dict[str, str]

    @model_validator(mode="after")
    def _targets(self) -> "ThemeMap":
        bad = {c: t for c, t in self.clusters.items() if t not in self.themes}
        if bad:
            raise ValueError(f"clusters map onto unknown themes: {bad}")
        return self


class Identification(_Frozen):
    """The identification task's options (Table 1, App. D.1): what raters and the profile judge choose from."""

    source: str
    version: str
    attachment: dict[str, str] = Field(min_length=2, description="Attachment style → the option's description")
    theme: dict[str, str] = Field(min_length=2, description="Core-belief theme → the option's description")


class Lexicon(_Frozen):
    source: str
    version: str
    min_stem: int = Field(ge=2)
    suffixes: list[str]
    stopwords: list[str]
    synonyms: dict[str, str] = Field(default_factory=dict)


M = TypeVar("M", bound=BaseModel)


def _load(name: str, model: type[M], preset: str | None = None) -> M:
    """`name` from `mindsim/data/patientact/`, or the file a preset puts in its place (its `data` key is the
    file's stem: `trust`, `step_rules`)."""
    from mindsimkit.mindsim.presets import data_file

    swapped = data_file(preset, name.removesuffix(".yaml"))
    where = f"mindsim/data/presets/{swapped}" if swapped else f"mindsim/{DATA_DIR}/{name}"
    path = resources.files("mindsimkit.mindsim").joinpath(*where.split("/")[1:])
    try:
        return model.model_validate(yamlio.safe_load(path.read_text(encoding="utf-8")))
    except Exception as exc:
        raise ConfigError(f"{where} is invalid: {exc}") from exc


def preset_of(config: Any) -> str | None:
    """The preset the PatientAct engine runs under in a recipe's simulation settings (None: ours)."""
    from mindsimkit.mindsim.patientact import NAME

    name = config.preset_for(NAME) if config is not None else None
    return None if name in (None, "ours") else name


@lru_cache(maxsize=1)
def taxonomy() -> Taxonomy:
    return _load("taxonomy.yaml", Taxonomy)


@lru_cache(maxsize=4)
def trust_rules(preset: str | None = None) -> TrustRules:
    rules = _load("trust.yaml", TrustRules, preset)
    prior = attachment_prior()
    if set(rules.attachment) != set(prior.weights):
        raise ConfigError(f"trust.yaml ({preset or 'ours'}): attachment rules must cover {sorted(prior.weights)}")
    return rules


@lru_cache(maxsize=4)
def step_rules(preset: str | None = None) -> StepRules:
    rules = _load("step_rules.yaml", StepRules, preset)
    tax = taxonomy()
    behaviours, reactions = set(tax.ids("behaviours")), set(tax.ids("reactions"))
    bad = (set(rules.therapeutic_behaviours) | set(rules.nothing_activated_behaviours)) - behaviours
    bad |= (set(rules.positive_reactions) | set(rules.neutral_reactions) | {rules.default_reaction}) - reactions
    bad |= {rules.high_intensity, rules.moderate_intensity, rules.default_intensity} - set(tax.intensities)
    if bad:
        raise ConfigError(f"mindsim/{DATA_DIR}/step_rules.yaml names terms taxonomy.yaml does not have: {sorted(bad)}")
    return rules


@lru_cache(maxsize=1)
def item_types() -> ItemTypes:
    types = _load("item_types.yaml", ItemTypes)
    scale = trust_rules().scale
    for name, t in types.types.items():
        if t.anchor not in scale:
            raise ConfigError(
                f"mindsim/{DATA_DIR}/item_types.yaml: {name}'s anchor {t.anchor} is not on the trust scale"
            )
    return types


@lru_cache(maxsize=1)
def attachment_prior() -> AttachmentPrior:
    return _load("attachment_prior.yaml", AttachmentPrior)


@lru_cache(maxsize=1)
def theme_map() -> ThemeMap:
    return _load("core_belief_themes.yaml", ThemeMap)


@lru_cache(maxsize=1)
def identification() -> Identification:
    """The options of the identification task, checked to name exactly the seeds' styles and themes and to share
    no text with what the formulation is written from."""
    ident = _load("identification.yaml", Identification)
    where = f"mindsim/{DATA_DIR}/identification.yaml"
    for name, options, written in (
        ("attachment", ident.attachment, attachment_prior().descriptions),
        ("theme", ident.theme, theme_map().themes),
    ):
        if set(options) != set(written):
            raise ConfigError(f"{where}: `{name}` must name exactly {sorted(written)}")
        same = [k for k in options if options[k].strip().lower() == written[k].strip().lower()]
        if same:
            raise ConfigError(
                f"{where}: `{name}` options {same} repeat the text the formulation is written from; "
                "word the annotators' option differently"
            )
    return ident


@lru_cache(maxsize=1)
def lexicon() -> Lexicon:
    return _load("retrieval.yaml", Lexicon)
