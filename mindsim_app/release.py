"""The realism gate on publishing (ours — no paper gates a release): the recipe's
`release:` section sets limits on what the run's validation report measured, and `mindsim publish`
refuses a run outside them (exit 1, one line per failed criterion) unless `--force`, which the card then
states. The card always shows the gate and its outcome.

Criteria, each optional (unset: not checked), each applied to every validated system (patient engine ×
counsellor) unless `systems` names some:
- `max_index_over_floor`: the realism index (mean of the 7 feature distances) divided by its noise floor;
- `max_feature_distance`: per feature, the largest distance in reference SDs (point estimate);
- `min_arc_agreement`: 1 − total-variation distance between the system's P/T/C/F shares (all stretches
  pooled) and the reference's; needs a report built with `validation.arc`;
- `max_failed_arc_share`: failed arcs / arcs, from `sessions/summary.json`.

The report read is the run's `validation/report.json` — with validation filters set in the recipe, the
report the validation stage wrote under them is the one in that file, so the gate judges what the card
shows.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mindsimkit.mindcore.runlog import SimulationSummaryView, ValidationReport

if TYPE_CHECKING:  # pragma: no cover - typing only
    from mindsimkit.mindcore.runlog import RunHeader

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.layout import RunLayout


class ReleaseConfig(BaseModel):
    """The recipe's `release:` section."""

    model_config = ConfigDict(extra="forbid")
    max_index_over_floor: float | None = Field(None, gt=0, description="Largest realism index / its noise floor")
    max_feature_distance: dict[str, float] = Field(
        default_factory=dict, description="Feature id → largest distance to the reference (reference SDs)"
    )
    min_arc_agreement: float | None = Field(
        None, ge=0, le=1, description="Smallest 1 − TV distance of arc-label shares to the reference"
    )
    max_failed_arc_share: float | None = Field(None, ge=0, le=1, description="Largest share of failed arcs")
    systems: list[str] | None = Field(None, description="Validated systems the gate applies to (default: all)")

    @field_validator("max_feature_distance")
    @classmethod
    def _known_features(cls, v: dict[str, float]) -> dict[str, float]:
        from mindsimkit.validation.features import FEATURES

        unknown = sorted(set(v) - set(FEATURES))
        if unknown:
            raise ValueError(f"unknown feature(s) {', '.join(unknown)}; use {', '.join(FEATURES)}")
        bad = [k for k, x in v.items() if x <= 0]
        if bad:
            raise ValueError(f"limits must be > 0 ({', '.join(bad)})")
        return v

    def is_empty(self) -> bool:
        return (
            self.max_index_over_floor is None
            and not self.max_feature_distance
            and self.min_arc_agreement is None
            and self.max_failed_arc_share is None
        )


def _criterion(
    name: str, system: str | None, value: float | None, limit: float, ok: bool, detail: str
) -> dict[str, Any]:
    return {"criterion": name, "system": system, "value": value, "limit": limit, "ok": ok, "detail": detail}


def _pooled(shares: dict[str, dict[str, float | None]]) -> dict[str, float]:
    tot: dict[str, float] = {}
    for row in shares.values():
        for k, x in row.items():
            tot[k] = tot.get(k, 0.0) + (x or 0.0)
    s = sum(tot.values()) or 1.0
    return {k: x / s for k, x in tot.items()}


def evaluate(run_dir: str | Path, config: ReleaseConfig) -> dict[str, Any]:
    """The gate's outcome: every checked criterion with its value and limit, and whether all passed."""
    run_dir = Path(run_dir)
    checks: list[dict[str, Any]] = []
    if config.is_empty():
        return {"set": False, "passed": True, "checks": [], "config": config.model_dump()}
    layout = RunLayout(run_dir)
    vpath = layout.validation.report_json
    needs_validation = (
        config.max_index_over_floor is not None or config.max_feature_distance or config.min_arc_agreement is not None
    )
    report = layout.validation.report(ValidationReport) if needs_validation else None
    if needs_validation and report is None:
        raise InputError(
            f"{vpath}: the recipe's release gate needs the run's validation report; rerun "
            "`mindsim run` with the same --out (or drop the release: realism limits)"
        )
    # Without limits that need it the report is not read: an empty one then gives no system to check.
    found = report or ValidationReport(features=[], systems={})
    systems = list(found.systems)
    if config.systems and report:
        missing = sorted(set(config.systems) - set(systems))
        if missing:
            raise InputError(f"release.systems: {', '.join(missing)} not in {vpath} (it has {', '.join(systems)})")
        systems = list(config.systems)
    floor = found.floor
    for s in systems:
        if config.max_index_over_floor is not None:
            est = found.estimate(s, "index")
            idx = est.distance if est else None
            index_floor = floor.get("index")
            ratio = idx / index_floor if idx is not None and index_floor else None
            checks.append(
                _criterion(
                    "max_index_over_floor",
                    s,
                    ratio,
                    config.max_index_over_floor,
                    ratio is not None and ratio <= config.max_index_over_floor,
                    f"realism index {idx if idx is None else round(idx, 3)} over floor "
                    f"{index_floor and round(index_floor, 3)}",
                )
            )
        for f, limit in sorted(config.max_feature_distance.items()):
            est = found.estimate(s, f)
            d = est.distance if est else None
            checks.append(
                _criterion(
                    f"max_feature_distance.{f}",
                    s,
                    d,
                    limit,
                    d is not None and d <= limit,
                    f"{found.feature_labels.get(f, f)} distance",
                )
            )
        if config.min_arc_agreement is not None:
            arc = found.arc
            if s not in arc or "reference" not in arc:
                checks.append(
                    _criterion(
                        "min_arc_agreement",
                        s,
                        None,
                        config.min_arc_agreement,
                        False,
                        "no arc labels in the validation report (set validation.arc: true)",
                    )
                )
            else:
                a, r = _pooled(arc[s]), _pooled(arc["reference"])
                agree = 1 - 0.5 * sum(abs(a.get(k, 0) - r.get(k, 0)) for k in set(a) | set(r))
                checks.append(
                    _criterion(
                        "min_arc_agreement",
                        s,
                        agree,
                        config.min_arc_agreement,
                        agree >= config.min_arc_agreement,
                        "arc-label shares vs the reference",
                    )
                )
    if config.max_failed_arc_share is not None:
        summary = layout.sessions.read_summary(SimulationSummaryView) or SimulationSummaryView()
        arcs, failed = summary.arcs, len(summary.failed_arcs)
        share = failed / arcs if arcs else None
        checks.append(
            _criterion(
                "max_failed_arc_share",
                None,
                share,
                config.max_failed_arc_share,
                share is not None and share <= config.max_failed_arc_share,
                f"{failed} of {arcs} arcs failed",
            )
        )
    return {"set": True, "passed": all(c["ok"] for c in checks), "checks": checks, "config": config.model_dump()}


def failure_lines(result: dict[str, Any]) -> list[str]:
    out = []
    for c in result["checks"]:
        if c["ok"]:
            continue
        who = f" ({c['system']})" if c["system"] else ""
        value = "not measured" if c["value"] is None else f"{c['value']:.3g}"
        op = "≥" if c["criterion"] == "min_arc_agreement" else "≤"
        out.append(f"release gate: {c['criterion']}{who} is {value}, needs {op} {c['limit']:g} — {c['detail']}")
    return out


def outcome(result: dict[str, Any], forced: bool = False) -> str:
    if not result.get("set"):
        return "no release gate set in the recipe (release: section absent or empty)"
    n = len(result["checks"])
    bad = sum(not c["ok"] for c in result["checks"])
    if not bad:
        return f"passed ({n} criteria)"
    return (
        f"FAILED {bad} of {n} criteria — published anyway with --force" if forced else f"failed {bad} of {n} criteria"
    )


def gate_for_run(run_dir: Path, info: "RunHeader", forced: bool = False) -> dict[str, Any]:
    """Evaluate the gate of the recipe recorded in `run.json` and return it as the card shows it."""
    from pydantic import ValidationError

    from mindsimkit.mindcore.errors import ConfigError
    from mindsimkit.mindcore.recipe import format_validation_error

    try:
        cfg = ReleaseConfig.model_validate((info.recipe.model_dump() if info.recipe else {}).get("release") or {})
    except ValidationError as exc:
        raise ConfigError(
            format_validation_error(exc, str(RunLayout(run_dir).run_json), prefix="recipe.release")
        ) from exc
    result = evaluate(run_dir, cfg)
    return {**result, "forced": bool(forced and not result["passed"]), "outcome": outcome(result, forced)}
