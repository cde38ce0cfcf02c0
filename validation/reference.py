"""Text-free reference statistics (MindEval2/MindSim paper, §4.3: the real reference is "reported only
in aggregate"; this module makes that shareable).

A reference artifact is a parquet file with one row per conversation: patient number (by first
appearance; raw ids are dropped), number of patient turns, the seven feature values and, when
asked, per-stretch arc label counts. Its schema metadata holds the counts and the provenance. No
message text, no raw id. Every comparison can start from such an artifact, so a team with private
transcripts can publish its reference statistics and let others audit against them.

`Measured` is the in-memory form used for both sides of a comparison: a simulator's transcripts are
measured the same way and never written with text.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.inputs import MAX_CONFIG_BYTES, check_input, read_input_bytes
from mindsimkit.mindcore.io import atomic_write_parquet
from mindsimkit.mindcore.provenance import base_provenance
from mindsimkit.mindcore import yamlio
from mindsimkit.validation.arc import LABELS, ArcResult, stretch_counts
from mindsimkit.validation.config import ValidationConfig
from mindsimkit.validation.distances import FeatureSample
from mindsimkit.validation.features import FEATURES, MarkerLexicon, default_lexicon, feature_rows, parse_lexicon
from mindsimkit.validation.transcripts import TranscriptSet

META_KEY = b"mindsim.validation"
KIND = "mindsim.validation.reference"
FORMAT_VERSION = 1


@dataclass
class Measured:
    """Per-conversation numbers of one transcript set (reference or system)."""

    name: str
    values: np.ndarray  # (n, len(FEATURES)), NaN where undefined
    patients: np.ndarray  # (n,) patient numbers 0..P-1
    patient_turns: np.ndarray  # (n,)
    arc_counts: np.ndarray | None = None  # (n, stretches, 4)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def sample(self) -> FeatureSample:
        return FeatureSample(self.values, self.patients)

    @property
    def counts(self) -> dict[str, Any]:
        counts: dict[str, Any] = self.meta.get("counts", {})
        return counts


def load_lexicon(config: ValidationConfig) -> MarkerLexicon:
    if not config.markers:
        return default_lexicon()
    path = Path(config.markers)
    check_input(path, "validation.markers:", hint="give a marker YAML like validation/data/markers.yaml")
    try:
        data = yamlio.safe_load(read_input_bytes(path, "validation.markers:", MAX_CONFIG_BYTES).decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(
            f"validation.markers: {path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); save it as UTF-8 YAML"
        ) from None
    except yaml.YAMLError as exc:
        raise InputError(f"validation.markers: {path} is not valid YAML ({' '.join(str(exc).split())})") from None
    return parse_lexicon(data, str(path))


def measure(transcripts: TranscriptSet, config: ValidationConfig, arc: ArcResult | None = None) -> Measured:
    """Features (and arc counts, if labels are given) of a transcript set; keeps no text."""
    lexicon = load_lexicon(config)
    rows = feature_rows(
        transcripts.conversations,
        patient_role=config.patient_role,
        lexicon=lexicon,
        mtld_threshold=config.mtld_threshold,
    )
    counts = transcripts.counts(config.patient_role)
    meta: dict[str, Any] = {
        "counts": counts,
        "features": list(FEATURES),
        "settings": {
            "patient_role": config.patient_role,
            "min_patient_turns": config.min_patient_turns,
            "mtld_threshold": config.mtld_threshold,
            "markers_source": lexicon.source,
            "markers_version": lexicon.version,
        },
    }
    arc_counts = None
    if arc is not None:
        arc_counts = stretch_counts(arc.labels, config.arc_stretches)
        counts["arc_labelled_turns"] = int(arc_counts.sum())
        counts["arc_failed_turns"] = arc.failed
    return Measured(
        name=transcripts.name,
        values=np.array([[getattr(r, f) for f in FEATURES] for r in rows], dtype=float).reshape(
            len(rows), len(FEATURES)
        ),
        patients=np.array([r.patient_index for r in rows], dtype=np.int64),
        patient_turns=np.array([r.patient_turns for r in rows], dtype=np.int64),
        arc_counts=arc_counts,
        meta=meta,
    )


def _arc_column(k: int, label: str) -> str:
    return f"arc_s{k}_{label}"


def to_table(measured: Measured) -> pa.Table:
    """The artifact table: numeric columns only, with counts and provenance in schema metadata."""
    columns: dict[str, Any] = {
        "conversation_index": pa.array(np.arange(len(measured.patients)), pa.int64()),
        "patient_index": pa.array(measured.patients, pa.int64()),
        "patient_turns": pa.array(measured.patient_turns, pa.int64()),
    }
    for j, name in enumerate(FEATURES):
        columns[name] = pa.array(measured.values[:, j], pa.float64())
    if measured.arc_counts is not None:
        for k in range(measured.arc_counts.shape[1]):
            for j, label in enumerate(LABELS):
                columns[_arc_column(k, label)] = pa.array(measured.arc_counts[:, k, j], pa.int64())
    meta = {"kind": KIND, "format_version": FORMAT_VERSION, "name": measured.name, **measured.meta}
    table = pa.table(columns)
    return table.replace_schema_metadata({META_KEY: json.dumps(meta, sort_keys=True, default=str).encode("utf-8")})


def write_reference(measured: Measured, path: str | Path) -> Path:
    return atomic_write_parquet(path, to_table(measured))


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def reference_provenance(
    source: Any, config: ValidationConfig, *, attribution: str | None, arc_info: dict[str, Any] | None
) -> dict[str, Any]:
    """What an artifact records about where it came from; the source is named by file name and hash only."""
    prov = base_provenance()
    if isinstance(source, (str, Path)) and Path(source).is_file():
        prov["source_file"] = Path(source).name
        prov["source_sha256"] = file_sha256(source)
    if attribution:
        prov["attribution"] = attribution
    prov["arc"] = arc_info
    prov["validation_config"] = config.model_dump(exclude={"reference", "arc_cache"})
    return prov


def load_reference(path: str | Path) -> Measured:
    """Read an artifact written by `write_reference`; anything else fails with what and how to fix."""
    path = Path(path)
    check_input(
        path, "reference artifact", hint=f"build one with `mindsim validate reference TRANSCRIPTS --out {path}`"
    )
    if path.stat().st_size == 0:
        raise InputError(f"{path}: empty file, not a reference artifact; build one with `mindsim validate reference`")
    try:
        table = pq.read_table(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise InputError(
            f"{path}: not a readable parquet file ({type(exc).__name__}: {' '.join(str(exc).split())}); "
            f"give the artifact written by `mindsim validate reference`"
        ) from None
    raw = (table.schema.metadata or {}).get(META_KEY)
    try:
        meta = json.loads(raw) if raw else {}
    except (UnicodeDecodeError, json.JSONDecodeError):
        meta = {"kind": None}  # unreadable metadata: reported below as "not a mindsim reference artifact"
    if not isinstance(meta, dict):
        meta = {"kind": None}
    if meta.get("kind") != KIND:
        raise InputError(
            f"{path}: not a mindsim reference artifact (no '{META_KEY.decode()}' metadata); build it with `mindsim validate reference`"
        )
    if meta.get("format_version", 0) > FORMAT_VERSION:
        raise InputError(
            f"{path}: artifact format {meta['format_version']} is newer than this toolkit reads ({FORMAT_VERSION}); upgrade mindsim"
        )
    missing = [c for c in ("patient_index", "patient_turns", *FEATURES) if c not in table.column_names]
    if missing:
        raise InputError(f"{path}: artifact lacks columns {missing}; rebuild it with this toolkit")
    values = np.column_stack([table.column(f).to_numpy(zero_copy_only=False).astype(float) for f in FEATURES])
    arc_counts = None
    stretches = sorted({int(c.split("_")[1][1:]) for c in table.column_names if c.startswith("arc_s")})
    if stretches:
        arc_counts = np.stack(
            [np.column_stack([table.column(_arc_column(k, lab)).to_numpy() for lab in LABELS]) for k in stretches],
            axis=1,
        )
    meta.pop("kind", None)
    meta.pop("format_version", None)
    return Measured(
        name=str(meta.pop("name", path.stem)),
        values=values,
        # Renumbered 0..P-1: the bootstrap draws P patients, so a gap would act as a phantom patient.
        patients=np.unique(table.column("patient_index").to_numpy(), return_inverse=True)[1].astype(np.int64),
        patient_turns=table.column("patient_turns").to_numpy().astype(np.int64),
        arc_counts=arc_counts,
        meta=meta,
    )
