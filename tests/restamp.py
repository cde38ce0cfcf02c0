"""`restamp(run)`: the run folder's manifest made to match its files as they are now, for tests that edit a
finished run by hand to stand for a run made differently (another toolkit version, judge or reference). Without
it the commands would rightly refuse the edited folder as altered (`mindcore.manifest`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mindsimkit.mindcore.io import atomic_write_json
from mindsimkit.mindcore.layout import RunLayout
from mindsimkit.mindcore.manifest import FileRecord, read_manifest, sha256_file

if TYPE_CHECKING:
    from mindsimkit.mindcore.runlog import RunHeader


def restamp(run: Path) -> Path:
    manifest = read_manifest(run)
    assert manifest is not None, f"{run}: no manifest to restamp (was it written by the stages?)"
    now: dict[str, str] = {}
    for record in manifest.stages.values():
        for k, rec in enumerate(record.files):
            path = Path(run) / rec.path
            if path.is_file():
                record.files[k] = FileRecord(path=rec.path, bytes=path.stat().st_size, sha256=sha256_file(path))
                now[rec.path] = record.files[k].sha256
    for record in manifest.stages.values():
        record.reads = {rel: now.get(rel, digest) for rel, digest in record.reads.items()}
    atomic_write_json(RunLayout(run).manifest, manifest.model_dump(mode="json"))
    return Path(run)


def record_as_stages(run: Path) -> Path:
    """A run folder a test wrote by hand, standing for what the stages write: each stage whose files are there
    recorded as that stage records itself (same files, same upstream reads)."""
    from mindsimkit.mindcore.manifest import record_stage

    layout = RunLayout(run)
    v, j, pa = layout.validation, layout.judgments, layout.patientact_judge
    stages = {
        "profiles": (
            [
                layout.profiles.parquet,
                layout.profiles.summary,
                layout.profiles.pool_table,
                layout.profiles.failures,
                layout.profiles.provenance,
            ],
            [],
        ),
        "simulation": ([layout.sessions.parquet, layout.transcripts, layout.sessions.summary], ["profiles"]),
        "validation": ([v.report_json, v.report_md, *v.plots()], ["simulation"]),
        "judge": ([j.parquet, j.report_json, j.report_md, *j.plots()], ["simulation"]),
        "patientact_judge": ([pa.judgments, pa.report_json, pa.report_md], ["simulation"]),
        "run": ([layout.run_json], ["profiles", "simulation"]),
    }
    for stage, (files, reads) in stages.items():
        if files[0].is_file():
            record_stage(run, stage, files, reads=reads)
    return Path(run)


def header(info: dict[str, Any]) -> "RunHeader":
    """A finished run's header from the few fields a card test sets (the rest as a real run would leave them)."""
    from mindsimkit.mindcore.runlog import RunHeader

    recipe = {"path": "recipe.yaml", **info.get("recipe", {"name": "t", "seed": 1})}
    return RunHeader.model_validate({"recipe_hash": "test", "status": "finished", **info, "recipe": recipe})
