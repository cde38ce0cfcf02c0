"""MindEval v1's released clinician ratings (SWORDHealth/mind-eval `data/human_annotations.jsonl`) in the long rating
format (judge/ratings.py), so `mindsim judge alpha --rubric mindeval_v1_human` computes their agreement.

The file is a Label Studio export: one line per rated conversation, with for each criterion three parallel lists,
`<criterion>.responses` (the values), `.responses.users` (who) and `.responses.status`; the line's `id` names the
conversation and `model` the counsellor model. Each value becomes one rating: item = the criterion id, unit = the
conversation id, rater = the user id as released (already pseudonymous), system = the model, patient = the member's
name as `member_attributes` gives it. Values are checked against the rubric here, so an off-scale value stops the
import naming its line and criterion; 0 stays a 0, which the rubric reads as not rated when α is computed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mindsimkit.judge.ratings import RatingRow
from mindsimkit.judge.rubrics import load
from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindsim_app.imports.common import Record, jsonl_records, names, unique

RESPONSES = ".responses"


def _criteria(rec: Record, known: set[str]) -> list[str]:
    """The criterion ids of one line: every `<id>.responses` field whose id the rubric knows. A `criterion…`
    field the rubric does not know is an error (a release with a new criterion needs a rubric item first)."""
    found = []
    for key in rec.obj:
        if not key.endswith(RESPONSES):
            continue
        crit = key[: -len(RESPONSES)]
        if crit in known:
            found.append(crit)
        elif crit.startswith("criterion"):
            raise rec.fail(
                key,
                f"criterion {crit!r} is not an item of rubric mindeval_v1_human "
                f"({', '.join(sorted(known))}); add it to judge/data/rubrics/mindeval_v1_human.yaml",
            )
    if not found:
        raise InputError(
            f"{rec.where}: no criterion responses (fields like 'criterion_1.responses'); is this "
            "MindEval v1's data/human_annotations.jsonl?"
        )
    return found


def convert(path: Path) -> dict[str, Any]:
    """Every rating of the file as `RatingRow`s, with counts of what was left out and why."""
    spec = load(names()["mindeval_v1"]["rubric"])
    scale = spec.scale
    if scale is None:  # the shipped rubric scores items on a scale; a file edited to another kind cannot take ratings
        raise InputError(f"rubric {spec.id}: has no scale, so it cannot take MindEval v1's integer ratings")
    counted = set(names()["mindeval_v1"]["counted_status"])
    known = set(spec.ids)
    rows: list[RatingRow] = []
    ids: list[tuple[str, str]] = []
    skipped: dict[str, int] = {}
    conversations = 0
    for _, rec in jsonl_records(Path(path)):
        unit = rec.text("id")
        ids.append((unit, rec.where))
        system = rec.text("model", optional=True)
        member = rec.get("member_attributes", dict, optional=True) or {}
        patient = member.get("name") if isinstance(member.get("name"), str) else None
        conversations += 1
        for crit in _criteria(rec, known):
            values = rec.get(crit + RESPONSES, list, optional=True)
            if values is None:  # nobody answered this criterion on this conversation
                continue
            users = rec.get(crit + RESPONSES + ".users", list)
            status = rec.get(crit + RESPONSES + ".status", list, optional=True) or ["submitted"] * len(values)
            if not len(values) == len(users) == len(status):
                raise rec.fail(
                    crit + RESPONSES,
                    f"{len(values)} values, {len(users)} users and {len(status)} "
                    "statuses; the three lists must run in parallel",
                )
            for k, (value, user, state) in enumerate(zip(values, users, status, strict=True)):
                if state not in counted:
                    skipped[str(state)] = skipped.get(str(state), 0) + 1
                    continue
                where = f"{rec.where}: field '{crit}{RESPONSES}[{k}]'"
                if isinstance(value, bool) or not isinstance(value, int):
                    raise InputError(f"{where}: expected an integer rating, got {value!r}")
                if value not in scale.not_applicable:
                    try:
                        scale.check(value)
                    except ValueError as exc:
                        raise InputError(f"{where}: {exc} (rubric {spec.id})") from None
                if not isinstance(user, str) or not user:
                    raise InputError(f"{rec.where}: field '{crit}{RESPONSES}.users[{k}]': expected a user id")
                rows.append(RatingRow(item=crit, unit=unit, rater=user, value=value, system=system, patient=patient))
    if not rows:
        raise InputError(f"{path}: no ratings (every response was left out or the file is empty)")
    unique(ids, "conversation id")
    return {
        "rows": rows,
        "conversations": conversations,
        "skipped_by_status": skipped,
        "raters": sorted({r.rater for r in rows}),
        "rubric": spec.id,
    }
