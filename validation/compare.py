"""Run a validation (MindEval2/MindSim paper, §4.3 Table 5 and Figure 3; Appendix E): build a
reference artifact from transcripts, or compare systems' transcripts against one.

`compare(reference_artifact, sims, out_dir, config, engines=None)` is what the end-to-end job calls;
the CLI (`validation.cli`) wraps both functions. Only aggregates are written.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any, Coroutine, TypeVar

from mindsimkit.mindcore.errors import ConfigError, InputError
from mindsimkit.mindcore.layout import ValidationFolder
from mindsimkit.mindcore.prompts import template_hash
from mindsimkit.mindcore.runners import Runner
from mindsimkit.validation.arc import ROLE, SYSTEM_TEMPLATE, TURN_TEMPLATE, LabelCache, stretch_shares
from mindsimkit.validation.config import SampleFilters, ValidationConfig
from mindsimkit.validation.distances import compare_samples, joint_distance, joint_floor, noise_floor, system_seed
from mindsimkit.validation.features import FEATURES
from mindsimkit.validation.reference import Measured, load_reference, measure, reference_provenance, write_reference
from mindsimkit.validation.report import build_report, write_report
from mindsimkit.validation.sharded import label_arcs
from mindsimkit.validation.transcripts import load_transcripts

if TYPE_CHECKING:
    from mindsimkit.mindcore.engine import Engines

T = TypeVar("T")


def _run(coro: Coroutine[Any, Any, T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise RuntimeError("called from inside an event loop: await the *_async variant instead")


def _arc_info(engines: Engines, config: ValidationConfig) -> dict[str, Any]:
    return {
        "labeller": engines.role(ROLE).describe(),
        "templates": {SYSTEM_TEMPLATE: template_hash(SYSTEM_TEMPLATE), TURN_TEMPLATE: template_hash(TURN_TEMPLATE)},
        "context_messages": config.arc_context_messages,
        "stretches": config.arc_stretches,
    }


class FilteredOut(InputError):
    """The sample filters left a system with no conversation (a counsellor filter does this by design)."""


async def measure_source(
    source: Any,
    name: str,
    config: ValidationConfig,
    *,
    engines: Engines | None = None,
    cache: LabelCache | None = None,
    runner: Runner | None = None,
    filtered: bool = False,
) -> Measured:
    """Measure one source: a reference artifact (.parquet) is loaded as is; transcripts (JSONL, saved
    dataset, rows) get features and, if `config.arc`, arc labels through `engines`. `filtered`: apply
    the config's sample filters (first sessions, patient-turn cap, counsellors), as compare does for
    the systems; the reference is never filtered."""
    filters: SampleFilters = config.filters() if filtered else {}
    if isinstance(source, (str, Path)) and str(source).endswith(".parquet"):
        if filters:
            raise ConfigError(
                f"{name}: {source} is a numbers-only artifact and cannot be filtered by "
                f"{', '.join(filters)}; give that system's transcripts instead"
            )
        measured = load_reference(source)
        measured.name = name
        return measured
    transcripts = load_transcripts(
        source,
        patient_role=config.patient_role,
        name=name,
        min_patient_turns=config.min_patient_turns,
        first_sessions_only=bool(filters.get("first_sessions_only")),
        max_patient_turns=filters.get("max_patient_turns"),
        counsellors=filters.get("counsellors"),
    )
    if not transcripts.conversations and filters:
        c = transcripts.counts(config.patient_role)
        raise FilteredOut(
            f"{name}: no conversation left after the filters {filters} ({transcripts.read} read, "
            f"{c['skipped_later_session']} later sessions, {c['skipped_other_counsellor']} other "
            f"counsellors, {c['skipped_too_short']} too short)"
        )
    if not transcripts.conversations:
        raise InputError(
            f"{name}: no conversation has a patient turn with role '{config.patient_role}' "
            f"({transcripts.read} read); set validation.patient_role (--patient-role) to the patient's role"
        )
    arc = None
    if config.arc:
        if engines is None:
            raise ConfigError(
                "validation.arc is on but no engines were given: pass engines= (the end-to-end job does), "
                "or on the CLI give --recipe (or nothing, for the embedded engine)"
            )
        arc = await label_arcs(
            transcripts.conversations,
            engines,
            runner,
            patient_role=config.patient_role,
            context_messages=config.arc_context_messages,
            cache=cache,
            max_tokens=config.arc_max_tokens,
            description=f"arc labels: {name}",
        )
    measured = measure(transcripts, config, arc)
    if arc is not None and engines is not None:
        measured.meta["arc"] = {**_arc_info(engines, config), "calls": arc.calls, "cached": arc.cached}
    return measured


async def build_reference_async(
    source: Any,
    out: str | Path,
    config: ValidationConfig | None = None,
    *,
    engines: Engines | None = None,
    attribution: str | None = None,
    name: str | None = None,
) -> Measured:
    """Measure `source` transcripts and write the text-free artifact to `out` (parquet)."""
    config = config or ValidationConfig()
    out = Path(out)
    cache = LabelCache(config.arc_cache or out.with_suffix(".arc_cache.jsonl")) if config.arc else None
    measured = await measure_source(source, name or out.stem, config, engines=engines, cache=cache)
    measured.meta["provenance"] = reference_provenance(
        source, config, attribution=attribution, arc_info=measured.meta.get("arc")
    )
    write_reference(measured, out)
    return measured


def build_reference(source: Any, out: str | Path, config: ValidationConfig | None = None, **kw: Any) -> Measured:
    return _run(build_reference_async(source, out, config, **kw))


def _distances(ref: Measured, systems: dict[str, Measured], config: ValidationConfig) -> dict[str, Any]:
    floor = noise_floor(
        ref.sample, FEATURES, splits=config.floor_splits, quantile=config.floor_quantile, seed=config.seed
    )
    results = {}
    for name, sim in systems.items():
        res = compare_samples(
            ref.sample,
            sim.sample,
            FEATURES,
            draws=config.bootstrap_draws,
            level=config.ci_level,
            seed=system_seed(config.seed, name),
        )
        if config.joint:
            res.joint = joint_distance(ref.values, sim.values)
        results[name] = res
    if config.joint and config.joint_floor_splits:
        floor["joint"] = joint_floor(
            ref.sample, splits=config.joint_floor_splits, quantile=config.floor_quantile, seed=config.seed
        )
    return {"floor": floor, "systems": results}


async def compare_async(
    reference_artifact: str | Path | None,
    sims: dict[str, Any],
    out_dir: str | Path,
    config: ValidationConfig | None = None,
    engines: Engines | None = None,
    runner: Runner | None = None,
) -> dict[str, Any]:
    """Compare each system in `sims` (name -> transcripts path, saved dataset, rows, or a reference
    artifact) against the reference artifact; write report.json, report.md and PNGs to `out_dir`.
    Returns the report dict. `runner`: the job's (`mindcore.runners`; default this process) for the arc labels."""
    config = config or ValidationConfig()
    if not sims:
        raise ConfigError("compare needs at least one system: --sim NAME=PATH")
    out_dir = Path(out_dir)
    ref = load_reference(reference_artifact or config.reference_path())
    cache = LabelCache(config.arc_cache or ValidationFolder(out_dir).arc_cache) if config.arc else None
    systems: dict[str, Measured] = {}
    dropped: list[str] = []
    for name, src in sims.items():
        try:
            systems[name] = await measure_source(
                src, name, config, engines=engines, cache=cache, runner=runner, filtered=True
            )
        except FilteredOut as exc:
            # With a counsellor filter the job's other per-counsellor systems are empty on purpose.
            dropped.append(str(exc))
    if not systems:
        raise InputError("every system is empty after the filters: " + "; ".join(dropped))
    distances = _distances(ref, systems, config)
    arc = {
        name: stretch_shares(m.arc_counts)
        for name, m in {"reference": ref, **systems}.items()
        if m.arc_counts is not None
    }
    report = build_report(ref, systems, distances, arc, config)
    report["filters"] = config.filters()
    report["warnings"] += [f"dropped from the comparison: {d}" for d in dropped]
    write_report(report, ref, systems, out_dir, plots=config.plots)
    return report


def compare(
    reference_artifact: str | Path | None,
    sims: dict[str, Any],
    out_dir: str | Path,
    config: ValidationConfig | None = None,
    engines: Engines | None = None,
    runner: Runner | None = None,
) -> dict[str, Any]:
    """Synchronous `compare_async`; `engines` must be started (`with Engines.from_config(cfg) as e`)."""
    return _run(compare_async(reference_artifact, sims, out_dir, config, engines, runner))
