"""The round trip back from the annotation page (or a Label Studio export) to the files the toolkit's
statistics read. `mindsim annotate export TASK --out DIR [--key KEY]` writes, by protocol:

- every protocol: `answers.jsonl` (one line per rater × unit, blinded, as stored) and `export.json`
  (what was written, answered / assigned per rater).
- mhqr: `mhqr_annotations.jsonl`, one line per rater × rated counsellor turn in the format
  `mindsim judge agreement --annotations … --key TASK.key.json` reads (excerpt_id, turn_id, annotator,
  severity, issues; quote and comment kept), for the excerpts a rater rated on every turn; the others are
  listed in `export.json` under `incomplete_excerpts`.
- realism: `realism_ratings.jsonl` (item_id, unit, turn, rater, rating, reasons, other, comment; with the
  key also system, conversation_id, patient_id), read by `mindsim realism report`.
- every scales rubric (PatientAct's, MindEval's, a user file): `ratings.jsonl` in the long format of
  judge/ratings.py (item, unit, rater, value, system, patient; unit = the judge's item id, system and patient
  from the key when given, else the task's item id and system code), read by `mindsim judge alpha` and
  `mindsim judge run --rubric … --human`.
- patientact_session (key required): also `patientact_human.jsonl` (item_id = the judge's item id, rater,
  scores), read by `mindsim judge run --rubric patientact --human`.
- patientact_profile (key required): `patientact_profile_human.jsonl` (item_id = profile id, rater, scores,
  predicted {attachment, theme}, truth), `patientact_diversity.jsonl` (rater, rating, profiles rated) and
  `patientact_profile_summary.json` (PatientAct Table 1: mean ± sd and ordinal Krippendorff's α per dimension,
  identification accuracy and Fleiss' κ, diversity mean ± sd).
The files are documented field by field in docs/human-evaluation.md.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.io import atomic_write_json, atomic_write_jsonl
from mindsimkit.mindsim_app.annotate.protocol import DIVERSITY, AnswerError, for_task, rubric_of
from mindsimkit.mindsim_app.annotate.store import read_answers
from mindsimkit.mindsim_app.annotate.tasks import Task, load_key, load_task


def checked_answers(
    task: Task, answers: Iterable[dict[str, Any]], where: str, any_rater: bool = False
) -> list[dict[str, Any]]:
    """Answers that name an item and unit of the task and fit the protocol (imports are checked like the
    server's). Raters must be the task's, except for imports (`any_rater`), whose tool assigns its own."""
    out = []
    for a in answers:
        it = task.items.get(a["item_id"])
        if it is None:
            raise InputError(f"{where}: item {a['item_id']!r} is not in task {task.root}")
        if a["rater"] not in task.assignments and not any_rater:
            raise InputError(f"{where}: rater {a['rater']!r} is not a rater of task {task.root}")
        if a["unit"] not in {u["unit"] for u in it["units"]}:
            raise InputError(f"{where}: item {a['item_id']} has no unit {a['unit']!r}")
        try:
            clean = for_task(task, it["protocol"]).validate(a["answer"])
        except AnswerError as exc:
            raise InputError(f"{where}: item {a['item_id']} unit {a['unit']} by {a['rater']}: {exc}") from None
        out.append({**a, "answer": clean})
    return sorted(out, key=lambda a: (a["rater"], a["item_id"], a["unit"]))


def export_task(
    task_dir: Path,
    out: Path,
    key: Optional[Path] = None,
    answers: Optional[list[dict[str, Any]]] = None,
    source: Optional[str] = None,
) -> dict[str, Any]:
    """Write the export files for one task; `answers` (e.g. from Label Studio) replace the stored ones."""
    task = load_task(task_dir)
    where = source or str(Path(task_dir) / "answers.sqlite")
    rows = checked_answers(
        task, read_answers(task_dir) if answers is None else answers, where, any_rater=answers is not None
    )
    if not rows:
        raise InputError(
            f"{where}: no answers yet; serve the task (`mindsim annotate serve {task_dir}`) and let raters answer"
        )
    k = load_key(key) if key else None
    p = task.protocol
    if p == "patientact_session" and k is None:
        raise InputError("--key: the PatientAct judge reads session ids, which only the key holds; give TASK.key.json")
    if p == "patientact_profile" and k is None:
        raise InputError("--key: profile ids and seeds are in the key only; give TASK.key.json")
    rubric = None if p == "realism" else rubric_of(task, p)
    out = Path(out)
    written = {"answers": str(atomic_write_jsonl(out / "answers.jsonl", rows))}
    incomplete: list[dict[str, Any]] = []
    if p == "realism":
        written["realism_ratings"] = str(
            atomic_write_jsonl(out / "realism_ratings.jsonl", realism_lines(task, rows, k))
        )
    elif rubric is not None and rubric.kind == "severity_issues":
        lines, incomplete = mhqr_lines(task, rows)
        written["mhqr_annotations"] = str(atomic_write_jsonl(out / "mhqr_annotations.jsonl", lines))
    else:
        written["ratings"] = str(atomic_write_jsonl(out / "ratings.jsonl", long_lines(task, rows, k)))
    if p == "patientact_session" and k is not None:  # refused above without a key
        written["patientact_human"] = str(atomic_write_jsonl(out / "patientact_human.jsonl", session_lines(rows, k)))
    elif p == "patientact_profile" and k is not None:
        prof, div = profile_lines(rows, k)
        written["patientact_profile_human"] = str(atomic_write_jsonl(out / "patientact_profile_human.jsonl", prof))
        written["patientact_diversity"] = str(atomic_write_jsonl(out / "patientact_diversity.jsonl", div))
        written["patientact_profile_summary"] = str(
            atomic_write_json(out / "patientact_profile_summary.json", profile_summary(prof, div))
        )
    per_rater = {}
    for r in sorted(set(task.assignments) | {a["rater"] for a in rows}):
        total = sum(len(task.items[i]["units"]) for i in task.assignments.get(r, []))
        per_rater[r] = {"answered": sum(1 for a in rows if a["rater"] == r), "assigned": total}
    summary = {
        "task": str(task_dir),
        "protocol": p,
        "answers": len(rows),
        "raters": per_rater,
        "files": written,
        "source": where,
        "publish": task.header.publish,
        "incomplete_excerpts": incomplete,
    }
    atomic_write_json(out / "export.json", summary)
    return summary


def long_lines(task: Task, rows: list[dict[str, Any]], key: Optional[dict[str, Any]]) -> list[dict[str, Any]]:
    """A scales rubric's answers in the long format: one line per rater × item × rated unit. With the key, the
    unit is the id the judge uses (session or profile) and system and patient are named; without it, the
    task's blinded item id and system code."""
    out = []
    for a in rows:
        if a["item_id"] == DIVERSITY:
            continue  # the closing question is one answer per rater, not a rating of a unit
        it = task.items[a["item_id"]]
        unit, system, patient = a["item_id"], it.get("system"), None
        if key is not None:
            e = key["items"][a["item_id"]]
            unit = e.get("judge_item_id") or e.get("profile_id") or a["item_id"]
            system, patient = e.get("system", system), e.get("patient_id")
        if len(it["units"]) > 1:
            unit = f"{unit}#{a['unit']}"
        for item, value in a["answer"]["scores"].items():
            out.append(
                {
                    "item": item,
                    "unit": unit,
                    "rater": a["rater"],
                    "value": value,
                    **({"system": system} if system else {}),
                    **({"patient": patient} if patient else {}),
                }
            )
    return out


def mhqr_lines(task: Task, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Annotation lines of the excerpts a rater rated on every turn (`judge agreement`'s unit: one excerpt ×
    one annotator, every turn rated), and the excerpts left incomplete (not written)."""
    unit = {(i, u["unit"]): u for i, it in task.items.items() for u in it["units"]}
    got: dict[tuple[str, str], int] = defaultdict(int)
    for a in rows:
        got[(a["rater"], a["item_id"])] += 1
    lines, incomplete = [], []
    for (rater, iid), n in sorted(got.items()):
        if n != len(task.items[iid]["units"]):
            incomplete.append({"rater": rater, "item_id": iid, "rated": n, "turns": len(task.items[iid]["units"])})
    skip = {(x["rater"], x["item_id"]) for x in incomplete}
    for a in rows:
        if (a["rater"], a["item_id"]) in skip:
            continue
        u = unit[(a["item_id"], a["unit"])]
        lines.append(
            {
                "excerpt_id": u["excerpt_id"],
                **({"turn_id": u["turn_id"]} if "turn_id" in u else {}),
                "annotator": a["rater"],
                **a["answer"],
            }
        )
    return lines, incomplete


def realism_lines(task: Task, rows: list[dict[str, Any]], key: Optional[dict[str, Any]]) -> list[dict[str, Any]]:
    turn = {(i, u["unit"]): u["turn"] for i, it in task.items.items() for u in it["units"]}
    out = []
    for a in rows:
        line = {
            "item_id": a["item_id"],
            "unit": a["unit"],
            "turn": turn[(a["item_id"], a["unit"])],
            "rater": a["rater"],
            **a["answer"],
        }
        if key is not None:
            e = key["items"][a["item_id"]]
            line.update(
                system=e["system"],
                conversation_id=e["conversation_id"],
                patient_id=e["patient_id"],
                real=e["real"],
                window=e["window"],
            )
        out.append(line)
    return out


def session_lines(rows: list[dict[str, Any]], key: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"item_id": key["items"][a["item_id"]]["judge_item_id"], "rater": a["rater"], "scores": a["answer"]["scores"]}
        for a in rows
    ]


def profile_lines(rows: list[dict[str, Any]], key: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    prof: list[dict[str, Any]] = []
    div: list[dict[str, Any]] = []
    rated: dict[str, int] = defaultdict(int)
    for a in rows:
        if a["item_id"] != DIVERSITY:
            rated[a["rater"]] += 1
    for a in rows:
        if a["item_id"] == DIVERSITY:
            div.append(
                {
                    "rater": a["rater"],
                    "rating": a["answer"]["rating"],
                    "profiles": rated[a["rater"]],
                    **({"comment": a["answer"]["comment"]} if "comment" in a["answer"] else {}),
                }
            )
            continue
        e = key["items"][a["item_id"]]
        prof.append(
            {
                "item_id": e["profile_id"],
                "rater": a["rater"],
                "scores": a["answer"]["scores"],
                "predicted": {"attachment": a["answer"]["attachment"], "theme": a["answer"]["theme"]},
                "truth": e["truth"],
                "source": e["source"],
            }
        )
    return prof, div


def _mean_sd(xs: list[float]) -> dict[str, Any]:
    if not xs:
        return {"n": 0, "mean": None, "sd": None}
    return {"n": len(xs), "mean": float(np.mean(xs)), "sd": float(np.std(xs, ddof=1)) if len(xs) > 1 else None}


def profile_summary(prof: list[dict[str, Any]], div: list[dict[str, Any]]) -> dict[str, Any]:
    """PatientAct Table 1 from the human profile ratings."""
    from mindsimkit.judge.patientact import krippendorff_alpha
    from mindsimkit.judge.stats import fleiss_kappa

    raters = sorted({p["rater"] for p in prof})
    items = sorted({p["item_id"] for p in prof})
    dims = sorted({d for p in prof for d in p["scores"]})
    cell = {(p["rater"], p["item_id"]): p for p in prof}
    out: dict[str, Any] = {"profiles": len(items), "raters": raters, "dimensions": {}, "identification": {}}
    for d in dims:
        matrix = [[cell[(r, i)]["scores"][d] if (r, i) in cell else None for i in items] for r in raters]
        shared = sum(1 for i in items if sum((r, i) in cell for r in raters) >= 2)
        distinct = {p["scores"][d] for p in prof}  # α is undefined when every rating is the same
        out["dimensions"][d] = {
            **_mean_sd([p["scores"][d] for p in prof]),
            "alpha": krippendorff_alpha(matrix) if shared >= 2 and len(raters) >= 2 and len(distinct) > 1 else None,
        }
    for what in ("attachment", "theme"):
        hits = [p["predicted"][what] == p["truth"][what] for p in prof]
        cats = sorted({p["predicted"][what] for p in prof} | {p["truth"][what] for p in prof})
        by_item: dict[str, list[str]] = defaultdict(list)
        for p in prof:
            by_item[p["item_id"]].append(p["predicted"][what])
        sizes = [len(v) for v in by_item.values()]
        k = max(set(sizes), key=sizes.count) if sizes else 0  # Fleiss' κ needs one rater count: the usual one
        counts = [[v.count(c) for c in cats] for v in by_item.values() if len(v) == k]
        kappa = float(fleiss_kappa(counts)) if k >= 2 and len(counts) >= 2 else None
        out["identification"][what] = {
            "accuracy": float(np.mean(hits)) if hits else None,
            "judgments": len(hits),
            "fleiss_kappa": None if kappa is None or np.isnan(kappa) else kappa,
            "kappa_items": len(counts),
            "kappa_raters_per_item": k,
        }
    out["diversity"] = _mean_sd([d["rating"] for d in div])
    return out
