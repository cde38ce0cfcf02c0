"""The PatientAct authors' generation inputs (Sahandfer/PatientHub, downloaded by the user; never shipped) read into
the folder `profilegen.patientact_inputs` reads back.

- the situations file (`data/seeds/patientAct.json`): a list of objects, each `disease_key`, `topic`, `situation`;
- the outlines file (`data/resources/PatientAct/disease_outlines.json`): an object, disease key → outline with the
  seven fields of `DiseaseOutline`, `typical_presentation` holding one text per severity;
- the attribute priors (`attribute_priors.json`): `age_ranges` (age group → [low, high]) and `global` (attribute →
  label → weight), beside documentation fields (`note`, `methodology`, `sources`) that are not read;
- the disease priors (`disease_priors.json`): disease key → attribute → an object whose `labels` (label → weight)
  replaces the global distribution for that disease, beside the same documentation fields.

Every file is checked whole, and all of them before anything is written: one malformed value is one `error:`
line naming the file, the entry and the field.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindsim_app.imports.common import Record
from mindsimkit.profilegen.patientact_inputs import (
    OUTLINE_LISTS,
    SCAFFOLD_ATTRIBUTES,
    SEVERITIES,
    DiseaseOutline,
    Priors,
    Situation,
)

# The authors' files are a few hundred kilobytes; a file far larger is not one of them, and reading it whole
# would only spend memory before the shape check refuses it.
MAX_BYTES = 32 * 1024 * 1024
DOC_FIELDS = ("note", "methodology", "sources")


def _no_repeats(path: Path) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise InputError(
                    f"{path}: the key {key!r} appears twice in one object; JSON readers keep only one "
                    "of them, so the file is ambiguous: remove one"
                )
            out[key] = value
        return out

    return hook


def read_json(path: Path) -> Any:
    """A whole JSON file, refusing a missing, oversized, binary, truncated file or a repeated key."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path} not found; give the path of the file you downloaded from PatientHub")
    if path.stat().st_size > MAX_BYTES:
        raise InputError(
            f"{path}: {path.stat().st_size} bytes, over the {MAX_BYTES} this importer reads; is this "
            "the PatientHub file the option names?"
        )
    try:
        return json.loads(path.read_bytes().decode("utf-8-sig"), object_pairs_hook=_no_repeats(path))
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start + 1}); is this the JSON file?") from exc
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); download the file again"
        ) from exc


def _only(rec: Record, allowed: tuple[str, ...]) -> None:
    extra = [k for k in rec.obj if k not in allowed]
    if extra:
        raise rec.fail(
            extra[0], f"not a field of this file's shape ({', '.join(allowed)}); this importer would leave it unread"
        )


def situations(path: Path) -> list[Situation]:
    data = read_json(path)
    if not isinstance(data, list) or not data:
        raise InputError(
            f"{path}: expected a non-empty JSON list of situations, got "
            f"{type(data).__name__ if data else 'an empty one'}"
        )
    out = []
    for i, obj in enumerate(data):
        rec = Record(obj, f"{path}: situation [{i}]", "one situation")
        _only(rec, ("disease_key", "topic", "situation"))
        out.append(
            Situation(disease_key=rec.text("disease_key"), topic=rec.text("topic"), situation=rec.text("situation"))
        )
    return out


def outlines(path: Path) -> dict[str, DiseaseOutline]:
    data = read_json(path)
    if not isinstance(data, dict) or not data:
        raise InputError(f"{path}: expected a non-empty JSON object (disease key → outline)")
    out = {}
    for key, obj in data.items():
        rec = Record(obj, f"{path}: outline {key!r}", "one disease outline")
        _only(rec, ("key_characteristics", "typical_presentation", *OUTLINE_LISTS[1:]))
        typical = rec.child("typical_presentation", "one text per severity")
        _only(typical, SEVERITIES)
        out[key] = DiseaseOutline(
            typical_presentation={s: typical.text(s) for s in SEVERITIES},  # type: ignore[arg-type]
            **{f: rec.texts(f) for f in OUTLINE_LISTS},
        )
    return out


def _weights(obj: Any, where: str) -> dict[str, float]:
    if not isinstance(obj, dict) or not obj:
        raise InputError(f"{where}: expected a non-empty object (label → weight), got {json.dumps(obj)[:60]}")
    for label, weight in obj.items():
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
            raise InputError(f"{where}: label {label!r}: expected a non-negative number, got {json.dumps(weight)[:60]}")
    if sum(obj.values()) <= 0:
        raise InputError(f"{where}: the weights sum to 0; give at least one label a positive weight")
    return {label: float(w) for label, w in obj.items()}


def _doc_only(data: Any, path: Path, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object, got {type(data).__name__}")
    extra = [k for k in data if k not in allowed]
    if extra:
        raise InputError(
            f"{path}: top-level key {extra[0]!r} is not part of this file's shape "
            f"({', '.join(allowed)}); is this the file the option names?"
        )
    return data


def attribute_priors(path: Path) -> dict[str, Any]:
    data = _doc_only(read_json(path), path, ("age_ranges", "global", *DOC_FIELDS))
    rec = Record(data, str(path), "attribute priors")
    ranges = {}
    for label, pair in rec.get("age_ranges", dict).items():
        ok = isinstance(pair, list) and len(pair) == 2 and all(type(v) is int for v in pair)
        if not ok or not 0 <= pair[0] <= pair[1]:
            raise rec.fail(
                f"age_ranges.{label}",
                f"expected [low, high], whole years with 0 <= low <= high, got {json.dumps(pair)[:60]}",
            )
        ranges[label] = (pair[0], pair[1])
    glob = rec.get("global", dict)
    for attr in SCAFFOLD_ATTRIBUTES:
        if attr not in glob:
            raise rec.fail(f"global.{attr}", "missing; the scaffold samples this attribute from it")
    weights = {attr: _weights(dist, f"{path}: field 'global.{attr}'") for attr, dist in glob.items()}
    missing = sorted(set(weights["age_group"]) - set(ranges))
    if missing:
        raise rec.fail(
            "age_ranges", f"no range for the age group {missing[0]!r} of global.age_group; add [low, high] for it"
        )
    return {"age_ranges": ranges, "global": weights}


def disease_priors(path: Path) -> dict[str, dict[str, dict[str, float]]]:
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object (disease key → attribute → labels)")
    out: dict[str, dict[str, dict[str, float]]] = {}
    for key, obj in data.items():
        if key in DOC_FIELDS:
            continue
        rec = Record(obj, f"{path}: disease {key!r}", "attribute → {labels}")
        out[key] = {
            attr: _weights(
                rec.child(attr, "an object with labels").get("labels", dict),
                f"{path}: disease {key!r}: field '{attr}.labels'",
            )
            for attr in rec.obj
        }
    return out


def convert(
    situations_file: Path, outlines_file: Path | None, priors_file: Path | None, disease_priors_file: Path | None
) -> dict[str, Any]:
    """Every given file checked, and checked against the others; nothing is written here."""
    if disease_priors_file is not None and priors_file is None:
        raise InputError(
            f"--disease-priors {disease_priors_file}: the overrides replace distributions of the "
            "attribute priors; give --priors attribute_priors.json too"
        )
    rows = situations(situations_file)
    keys = sorted({s.disease_key for s in rows})
    outs = outlines(outlines_file) if outlines_file is not None else None
    if outs is not None:
        for i, s in enumerate(rows):
            if s.disease_key not in outs:
                raise InputError(
                    f"{situations_file}: situation [{i}]: field 'disease_key': {s.disease_key!r} has "
                    f"no outline in {outlines_file} (it has {', '.join(sorted(outs))}); give the "
                    "outlines file that matches these situations"
                )
    priors = None
    if priors_file is not None:
        got = attribute_priors(priors_file)
        by_disease = disease_priors(disease_priors_file) if disease_priors_file is not None else {}
        for key, overrides in by_disease.items():
            missing = sorted(set(overrides.get("age_group", {})) - set(got["age_ranges"]))
            if missing:
                raise InputError(
                    f"{disease_priors_file}: disease {key!r}: field 'age_group.labels': the age group "
                    f"{missing[0]!r} has no range in {priors_file}'s age_ranges"
                )
        priors = Priors.model_validate({**got, "by_disease": by_disease})
    return {"situations": rows, "disease_keys": keys, "outlines": outs, "priors": priors}
