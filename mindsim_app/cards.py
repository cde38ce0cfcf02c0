"""Assemble a run's publishable dataset folder: one parquet file per config, the validation plots,
a manifest with checksums and provenance, and a Hugging Face dataset card rendered from
`cards/dataset_card.md.jinja2` out of the run's own records (never typed in by hand).

Every parquet file carries the run id in its schema metadata and in a `run_id` column; `publish`
uses both to refuse rows the toolkit did not produce.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.io import atomic_write_json, atomic_write_text
from mindsimkit.mindcore.layout import RunLayout
from mindsimkit.mindcore.manifest import record_stage, sha256_file
from mindsimkit.mindcore.prompts import render_resource
from mindsimkit.mindcore.runlog import ProfilesSummaryView, RunHeader, ValidationReport, played_by
from mindsimkit.mindsim.patient_engines import variant
from mindsimkit.mindsim.patient_engines import names as registered_names
from mindsimkit.profilegen.config import profiles_config

if TYPE_CHECKING:  # pyarrow (with numpy) is a third of a CLI start; the functions that write load it
    import pyarrow as pa

MANIFEST = "manifest.json"
# Session columns no engine's card section reads (the message lists are most of a session's bytes).
_HEAVY = frozenset({"patient_messages", "counsellor_messages", "patient_system_prompt", "counsellor_system_prompt"})
META_KEY = b"mindsim"

CONFIG_DESCRIPTIONS = {
    "profiles": "one screened synthetic patient profile: persona fields, derived attributes, clinical anchor, 5P formulation, style, screening verdict and faults, pool flags, provenance",
    "sessions": "one simulated session: patient- and counsellor-side messages (patient tool calls included; `patient_tools`: the tools the MindSim patient was offered, as JSON text), per-turn moves, scenario (`scenario_shared`: the first session's scenario is the same for every counsellor), schedule entry, memory before/after, prompts as sent, patient messages re-asked and why (`rejected_messages`, never stored as speech), counsellor replies flagged as sent (`counsellor_flags`: tool syntax, JSON, cut off, speaks as patient), tokens, engines",
    "transcripts": "one session as plain chat (`user` = patient, `assistant` = counsellor), the form validation reads",
    "validation": "one aggregate realism number: system × feature distance with its interval and the reference noise floor (no text)",
    "arc": "one aggregate narrative-arc share: system × stretch × label (no text)",
    "judgments": "one MHQR judgment of one counsellor reply by one judge: flagged clinical issues with reasons and verified quotes, severity and its weight, rubric version, prompt hashes",
}


@dataclass
class DatasetConfig:
    name: str
    path: str
    rows: int
    description: str


def _with_run_id(table: pa.Table, run_id: str, config: str) -> pa.Table:
    import pyarrow as pa

    if "run_id" in table.column_names:
        table = table.drop_columns(["run_id"])
    table = table.append_column("run_id", pa.array([run_id] * table.num_rows, pa.string()))
    meta = dict(table.schema.metadata or {})
    meta[META_KEY] = json.dumps({"run_id": run_id, "config": config}).encode()
    return table.replace_schema_metadata(meta)


def _transcripts_table(layout: RunLayout) -> pa.Table:
    import pyarrow as pa

    # exclude_unset: a field a line does not carry (`trial` outside repeated trials) adds no column.
    return pa.Table.from_pylist([r.model_dump(exclude_unset=True) for r in layout.transcript_rows()])


def _validation_tables(report: ValidationReport) -> tuple[pa.Table, pa.Table | None]:
    import pyarrow as pa

    rows = []
    for system in report.systems:
        for feature in [*report.features, "index"]:
            est = report.estimate(system, feature)
            if est is None:
                continue
            lo, hi = est.ci or (None, None)
            rows.append(
                {
                    "system": system,
                    "metric": feature,
                    "distance": est.distance,
                    "ci_low": lo,
                    "ci_high": hi,
                    "floor": report.floor.get(feature),
                }
            )
        if report.joint(system) is not None:
            rows.append(
                {
                    "system": system,
                    "metric": "joint",
                    "distance": report.joint(system),
                    "ci_low": None,
                    "ci_high": None,
                    "floor": report.floor.get("joint"),
                }
            )
    arc_rows = [
        {"system": system, "stretch": int(k), "label": label, "share": share}
        for system, stretches in report.arc.items()
        for k, shares in stretches.items()
        for label, share in shares.items()
    ]
    schema = pa.schema(
        [
            ("system", pa.string()),
            ("metric", pa.string()),
            ("distance", pa.float64()),
            ("ci_low", pa.float64()),
            ("ci_high", pa.float64()),
            ("floor", pa.float64()),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema), (pa.Table.from_pylist(arc_rows) if arc_rows else None)


def _size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "1M<n<10M"


def collect_tables(run_dir: Path, run_id: str) -> dict[str, pa.Table]:
    """The run's outputs as one table per dataset config."""
    tables: dict[str, pa.Table] = {}
    layout = RunLayout(run_dir)
    # Copied into the dataset as they are, so read whole (Arrow), through the run folder's readers.
    for name, folder in (("profiles", layout.profiles), ("sessions", layout.sessions), ("judgments", layout.judgments)):
        if folder.parquet.is_file():
            tables[name] = folder.arrow()
    transcripts = layout.transcripts
    if transcripts.is_file():
        tables["transcripts"] = _transcripts_table(layout)
    report = layout.validation.report(ValidationReport)
    if report is not None:
        val, arc = _validation_tables(report)
        tables["validation"] = val
        if arc is not None:
            tables["arc"] = arc
    if not tables:
        raise InputError(f"{run_dir}: no run outputs found (profiles/, sessions/, transcripts/, validation/)")
    return {name: _with_run_id(t, run_id, name) for name, t in tables.items()}


def build_dataset_folder(run_dir: Path, run_info: RunHeader, dest: Path | None = None) -> Path:
    """Write `dest` (default RUN/dataset): data/*.parquet, images/*.png, README.md card, manifest."""
    import pyarrow.parquet as pq

    run_dir = Path(run_dir)
    layout = RunLayout(run_dir)
    dest = Path(dest or layout.dataset)
    run_id = run_info.run_id
    tables = collect_tables(run_dir, run_id)
    staging = dest.with_name(dest.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "data").mkdir(parents=True)
    configs = []
    for name, table in tables.items():
        # Content-addressed names: `datasets` caches a local folder's configs by folder name and
        # relative file path, so two runs' `dataset/` folders with `data/profiles.parquet` would
        # silently load each other's cached rows. A name that changes with the bytes cannot collide.
        tmp = staging / "data" / f"{name}.parquet.tmp"
        pq.write_table(table, tmp)
        rel = f"data/{name}-{sha256_file(tmp)[:12]}.parquet"
        tmp.rename(staging / rel)
        description = CONFIG_DESCRIPTIONS.get(name, name)
        if name == "sessions" and (stats := patient_engine_stats(table)) is not None:
            # Engines whose rows carry their own fields say so in the config's description.
            description += "".join(sec.get("sessions_note", "") for sec in stats["sections"].values())
        configs.append(DatasetConfig(name, rel, table.num_rows, description))
    images = []
    for stage, folder in (("validation", layout.validation), ("judgments", layout.judgments)):
        for png in folder.plots():
            (staging / "images").mkdir(exist_ok=True)
            name = png.name if stage == "validation" else f"judge_{png.name}"
            shutil.copy2(png, staging / "images" / name)
            images.append({"path": f"images/{name}", "title": png.stem.replace("_", " "), "stage": stage})
    notices = []
    for notice in run_info.notices:
        src = Path(notice)
        if src.is_file():
            shutil.copy2(src, staging / src.name)
            notices.append(src.name)
    card = render_card(run_dir, run_info, configs, images, tables)
    atomic_write_text(staging / "README.md", card + "\n")
    files = sorted(p for p in staging.rglob("*") if p.is_file())
    manifest = {
        "run_id": run_id,
        "toolkit": "mindsim",
        "configs": {c.name: {"path": c.path, "rows": c.rows} for c in configs},
        "files": {str(p.relative_to(staging)): sha256_file(p) for p in files},
        "provenance": run_info.provenance,
    }
    atomic_write_json(staging / MANIFEST, manifest)
    # Swap the finished folder in whole, so a crash never leaves a half-built dataset behind.
    old = dest.with_name(dest.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if dest.exists():
        dest.rename(old)
    staging.rename(dest)
    shutil.rmtree(old, ignore_errors=True)
    if dest.resolve() == layout.dataset.resolve():
        record_stage(
            run_dir,
            "dataset",
            [p for p in dest.rglob("*") if p.is_file()],
            reads=["profiles", "simulation", "validation", "judge", "run"],
            counts={c.name: c.rows for c in configs},
        )
    return dest


def _realism_table(run_dir: Path) -> str:
    return _first_table(RunLayout(run_dir).validation.report_md)


def _first_table(md: Path) -> str:
    """A report's first Markdown table (validation: the distances; judgments: MHQR per counsellor)."""
    if not md.is_file():
        return ""
    lines, started = [], False
    for line in md.read_text(encoding="utf-8").splitlines():
        if line.startswith("|"):
            started = True
            lines.append(line)
        elif started:
            break
    return "\n".join(lines)


def _pool_from(verdicts: list[str]) -> str:
    """'clean', or 'clean and minor' when the recipe let minor profiles in (the paper takes clean only)."""
    words = [v for v in ("clean", "minor") if v in verdicts]
    text = (" and ".join(words) if words else "screened") + " profiles"
    return text + (" (the paper's pools take clean profiles only)" if "minor" in words else "")


def patient_engine_stats(sessions: pa.Table | None) -> dict[str, Any] | None:
    """Sessions per patient engine (or variant) and each engine's own card section
    (`PatientEngine.card_section` over its rows, all its variants together; PatientAct: the share of its
    patient turns by behaviour and the mean trust at the start and end of its sessions). None when no engine
    in the run adds record fields (the card of a MindSim-only run stays as it was). Rows of a name no longer
    registered are counted but get no section."""
    if sessions is None or "patient_engine" not in sessions.column_names:
        return None
    names = [played_by(e) for e in sessions.column("patient_engine").to_pylist()]
    counts = Counter(names)
    known = set(registered_names())
    cols = [c for c in sessions.column_names if c not in _HEAVY]
    by_engine: dict[str, tuple[Any, list[dict[str, Any]]]] = {}
    for name, row in zip(names, sessions.select(cols).to_pylist()):
        if name in known:
            engine = variant(name).engine
            by_engine.setdefault(engine.name, (engine, []))[1].append(row)
    sections = {n: sec for n, (engine, rows) in by_engine.items() if (sec := engine.card_section(rows)) is not None}
    if not any(sec.get("record_fields") for sec in sections.values()):
        return None
    return {"sessions": dict(sorted(counts.items())), "sections": sections}


def render_card(
    run_dir: Path,
    run_info: RunHeader,
    configs: list[DatasetConfig],
    images: list[dict[str, Any]],
    tables: dict[str, pa.Table],
) -> str:
    # Counts include profiles dropped as serious, which are not rows of the profiles config.
    layout = RunLayout(run_dir)
    if run_info.recipe is None:
        raise InputError(f"{layout.run_json}: the run has not finished (no recipe recorded); rerun `mindsim run`")
    recipe = run_info.recipe
    psum = layout.profiles.read_summary(ProfilesSummaryView)
    verdicts = psum.verdicts if psum else {}
    pool_md = layout.profiles.pool_table
    engines = run_info.engines
    uses_nemotron = "nvidia/Nemotron-Personas-USA" in str(run_info.persona_source or "")
    attributions = [
        "Generated with mindsim (Apache-2.0). Methods follow the MindEval2/MindSim design (profiles, move-committing patient, multi-session memory) and PatientAct's 5P profile ideas.",
    ]
    if uses_nemotron:
        attributions.append("Personas: NVIDIA Nemotron-Personas-USA, CC BY 4.0 (nvidia/Nemotron-Personas-USA).")
    elif str(run_info.persona_source or "").startswith("patientact-situations:"):
        attributions.append(
            "Profiles: generated from the PatientAct authors' clinical situations, disease outlines and "
            "attribute priors (Sahandfer/PatientHub, MIT), imported by the user; no persona data."
        )
    else:
        attributions.append(
            "Personas: mindsim's own synthetic sample in the Nemotron-Personas-USA schema (not NVIDIA data)."
        )
    engine_stats = patient_engine_stats(tables.get("sessions"))
    if engine_stats is not None:
        attributions.extend(sec["attribution"] for sec in engine_stats["sections"].values() if sec.get("attribution"))
    uses_mibot = run_info.reference_is_mibot
    if uses_mibot:
        attributions.append(
            "Reference statistics: aggregate numbers computed from the MIBot v6.3A conversations "
            "(CC BY-SA 4.0; see MIBOT_NOTICE.md). The `validation` and `arc` configs derive from them and are "
            "shared under CC BY-SA 4.0."
        )
    return render_resource(
        "cards",
        "dataset_card.md.jinja2",
        license="cc-by-sa-4.0" if uses_mibot else ("cc-by-4.0" if uses_nemotron else "apache-2.0"),
        pretty_name=run_info.pretty_name or f"mindsim synthetic patients ({recipe.name})",
        size_category=_size_category(max(c.rows for c in configs)),
        configs=configs,
        provenance=run_info.provenance,
        recipe=recipe.model_dump(),
        run_id=run_info.run_id,
        load_path=run_info.repo_id or "path/to/this/folder",
        persona_source=run_info.persona_source or "a persona file",
        rates_note=run_info.rates_note or "see the toolkit's rates file",
        engines=engines,
        engine_kinds=sorted({e.get("kind", "") for e in run_info.engine_backends.values()}),
        prompt_hashes=run_info.prompt_hashes,
        prompt_overrides=run_info.prompt_overrides,
        schedule_settings=run_info.schedule_settings.labelled() if run_info.schedule_settings else {},
        presets=run_info.presets,
        counts=run_info.counts.labelled() if run_info.counts else {},
        verdicts=verdicts,
        pool_from=_pool_from(run_info.pool_verdicts or ["clean"]),
        pool_table=pool_md.read_text(encoding="utf-8").strip() if pool_md.is_file() else "",
        realism_table=_realism_table(run_dir),
        mhqr_table=_first_table(layout.judgments.report_md),
        images=[i for i in images if i["stage"] == "validation"],
        mhqr_images=[i for i in images if i["stage"] == "judgments"],
        attributions=attributions,
        patient_engines=engine_stats,
        release_gate=run_info.release_gate,
        # The PatientAct shape lets profiles carry passive death-related thoughts: the card's limits say so.
        patientact_shape=profiles_config(recipe).patientact_shape,
    )
