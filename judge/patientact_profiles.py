"""PatientAct's profile evaluation as the paper reports it (PatientAct §4.1, Table 1, App. D.1): the four
profile dimensions as mean ± sd, attachment-style and core-belief-theme identification accuracy against its
chance rate, a diversity rating, and, from human ratings, ordinal Krippendorff's α on the scores and Fleiss'
κ on the identifications. Judge rows are `judge.patientact.Judgment` (kind "profile"); human rows are the
files the annotation tool exports (`mindsim annotate export`, docs/human-evaluation.md):
`patientact_profile_human.jsonl` (item_id = profile id, rater, scores, predicted, truth) and
`patientact_diversity.jsonl` (rater, rating). Pure functions over stored rows plus the readers; the caller
(mindsim's `mindsim patientact profile-eval`) makes the judge rows and passes the attachment prior.

Chance rates (ours, after the paper's): the accuracy of always naming the most frequent true class, in the
evaluated sample (`sample`) and under the prior the seeds were drawn from (`prior`). Situation-seeded profiles draw
both seeds from the imported priors (the authors' file: themes near uniform, so about a third, as the paper
computes); persona profiles draw attachment from our prior (54% for disorganized) and take the theme from the
profile's core-belief cluster, which is no draw, so their theme has the sample's majority share only.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from statistics import mean, pstdev
from typing import Any, Iterable, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.io import read_jsonl
from mindsimkit.judge.patientact import SCALE, Judgment, krippendorff_alpha, rubrics
from mindsimkit.judge.stats import fleiss_kappa

PICKS = ("attachment", "theme")


class ProfileHuman(BaseModel):
    """One rater's answer for one profile (a line of `patientact_profile_human.jsonl`)."""

    model_config = ConfigDict(extra="ignore")
    item_id: str = Field(min_length=1, description="Profile id")
    rater: str = Field(min_length=1)
    scores: dict[str, int] = Field(min_length=1, description="Dimension id → 1-5")
    predicted: dict[str, str] = Field(default_factory=dict, description="attachment, theme")
    truth: dict[str, str] = Field(default_factory=dict, description="The seeds: attachment, theme")


class DiversityRating(BaseModel):
    """One rater's overall diversity rating (a line of `patientact_diversity.jsonl`)."""

    model_config = ConfigDict(extra="ignore")
    rater: str = Field(min_length=1)
    rating: int = Field(ge=1, le=5)


def _read(path: Path, model: type[BaseModel], what: str) -> list[Any]:
    if not Path(path).is_file():
        raise InputError(f"{path}: {what} file not found")
    out = []
    for line, obj in read_jsonl(path):
        try:
            out.append(model.model_validate(obj))
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err["loc"]) or "(line)"
            raise InputError(
                f"{path}:{line}: {loc}: {err['msg']} (see docs/human-evaluation.md for the {what} format)"
            ) from exc
    if not out:
        raise InputError(f"{path}: no {what} lines in the file")
    return out


def load_profile_human(path: Path) -> list[ProfileHuman]:
    rows = _read(path, ProfileHuman, "profile ratings")
    dims = set(rubrics().profile.ids)
    for r in rows:
        bad = {d: v for d, v in r.scores.items() if d not in dims or v not in SCALE}
        if bad:
            raise InputError(
                f"{path}: rater {r.rater} on {r.item_id}: scores {bad} not allowed; dimensions are "
                f"{', '.join(sorted(dims))}, scores 1-5"
            )
    return rows


def load_diversity(path: Path) -> list[DiversityRating]:
    return _read(path, DiversityRating, "diversity ratings")


def mean_sd(values: Iterable[float]) -> dict[str, Any]:
    v = list(values)
    return {"n": len(v), "mean": round(mean(v), 3) if v else None, "sd": round(pstdev(v), 3) if len(v) > 1 else None}


def chance(truths: Sequence[str], prior: dict[str, float] | None = None) -> dict[str, Any]:
    """Accuracy of always naming the most frequent class: in the sample, and under `prior` when given."""
    out: dict[str, Any] = {}
    if truths:
        cls, n = Counter(truths).most_common(1)[0]
        out["sample"] = {"class": cls, "rate": round(n / len(truths), 3)}
    if prior:
        total = sum(prior.values())
        cls = max(prior, key=lambda k: prior[k])
        out["prior"] = {"class": cls, "rate": round(prior[cls] / total, 3)}
    return out


def pick_kappa(rows: Sequence[ProfileHuman], pick: str) -> dict[str, Any]:
    """Fleiss' κ of the raters' picks, over the items rated by the most common number of raters (≥ 2)."""
    by: dict[str, list[str]] = {}
    for r in rows:
        if pick in r.predicted:
            by.setdefault(r.item_id, []).append(r.predicted[pick])
    sizes = Counter(len(v) for v in by.values() if len(v) >= 2)
    if not sizes:
        return {"error": "no item has two or more raters"}
    k = sizes.most_common(1)[0][0]
    items = [v for v in by.values() if len(v) == k]
    cats = sorted({c for v in items for c in v})
    kappa = fleiss_kappa([[v.count(c) for c in cats] for v in items])
    return {"kappa": None if math.isnan(kappa) else round(kappa, 3), "items": len(items), "raters_per_item": k}


def _alpha(rows: Sequence[ProfileHuman], dim: str) -> Any:
    raters = sorted({r.rater for r in rows if dim in r.scores})
    items = sorted({r.item_id for r in rows if dim in r.scores})
    if len(raters) < 2:
        return {"error": "one rater only: α needs at least two"}
    cell = {(r.rater, r.item_id): r.scores[dim] for r in rows if dim in r.scores}
    try:
        value = krippendorff_alpha([[cell.get((a, i)) for i in items] for a in raters])
        return None if value is None else round(value, 3)
    except (InputError, ValueError, ZeroDivisionError) as exc:
        return {"error": str(exc)}


def accuracy(pairs: Iterable[tuple[str, str | None]]) -> dict[str, Any]:
    p = list(pairs)
    return {"n": len(p), "accuracy": round(sum(a == b for a, b in p) / len(p), 3) if p else None}


def confusion(pairs: Iterable[tuple[str, str | None]]) -> dict[str, Any]:
    """The paper's error analysis (§4.1, after Table 1): for each true class, what it was identified as
    (truth → predicted → count), and the off-diagonal confusions, most frequent first."""
    table: dict[str, dict[str, int]] = {}
    for predicted, truth in pairs:
        if truth is None:
            continue
        table.setdefault(truth, {}).setdefault(predicted, 0)
        table[truth][predicted] += 1
    errors = sorted(
        ((t, p, n) for t, row in table.items() for p, n in row.items() if p != t), key=lambda e: (-e[2], e[0], e[1])
    )
    return {
        "matrix": {t: dict(sorted(row.items())) for t, row in sorted(table.items())},
        "errors": [{"truth": t, "predicted": p, "count": n, "of": sum(table[t].values())} for t, p, n in errors],
    }


def profile_report(
    judge_rows: Sequence[Judgment],
    human: Sequence[ProfileHuman] = (),
    diversity_human: Sequence[DiversityRating] = (),
    diversity_judge: dict[str, Any] | None = None,
    attachment_prior: dict[str, float] | None = None,
    theme_prior: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Table 1 as data: per dimension judge and human mean ± sd (α among humans), per pick accuracy of judge
    and humans against the chance rates (κ among humans), and the diversity ratings."""
    dims = rubrics().profile.ids
    ok = [r for r in judge_rows if r.ok and r.kind == "profile"]
    truths = {r.item_id: r.truth for r in judge_rows if r.truth}
    truths.update({h.item_id: h.truth for h in human if h.truth and h.item_id not in truths})
    report: dict[str, Any] = {
        "profiles": len({r.item_id for r in judge_rows}),
        "judged_ok": len(ok),
        "failed": [{"item_id": r.item_id, "error": r.error} for r in judge_rows if not r.ok],
        "dimensions": {},
        "identification": {},
        "human_raters": sorted({h.rater for h in human}),
        "human_items": len({h.item_id for h in human}),
    }
    for d in dims:
        row = {"judge": mean_sd(r.scores[d] for r in ok if d in r.scores)}
        if human:
            row["human"] = mean_sd(h.scores[d] for h in human if d in h.scores)
            row["krippendorff_alpha"] = _alpha(human, d)
        report["dimensions"][d] = row
    for pick in PICKS:
        row = {
            "chance": chance(
                [t[pick] for t in truths.values() if pick in t],
                attachment_prior if pick == "attachment" else theme_prior,
            ),
            "judge": accuracy(
                (r.predicted[pick], r.truth[pick]) for r in ok if pick in r.predicted and pick in r.truth
            ),
        }
        row["judge_confusion"] = confusion(
            (r.predicted[pick], r.truth[pick]) for r in ok if pick in r.predicted and pick in r.truth
        )
        if human:
            pairs = [
                (h.predicted[pick], h.truth.get(pick) or truths.get(h.item_id, {}).get(pick))
                for h in human
                if pick in h.predicted
            ]
            row["human"] = accuracy(pairs)
            row["human_confusion"] = confusion(pairs)
            row["fleiss_kappa"] = pick_kappa(human, pick)
        report["identification"][pick] = row
    report["diversity"] = {
        "judge": diversity_judge,
        "human": mean_sd(r.rating for r in diversity_human) if diversity_human else None,
    }
    return report


def _f(x: Any, digits: int = 2) -> str:
    return "—" if not isinstance(x, (int, float)) else f"{x:.{digits}f}"


def _ms(m: dict[str, Any] | None) -> str:
    if not m or m.get("mean") is None:
        return "—"
    return f"{_f(m['mean'])} ± {_f(m['sd'])}" if m.get("sd") is not None else _f(m["mean"])


def profile_report_md(rep: dict[str, Any]) -> str:
    human = bool(rep["human_raters"])
    lines = [
        "# PatientAct profile evaluation (Table 1)",
        "",
        f"{rep['profiles']} profiles, {rep['judged_ok']} judged; "
        f"{len(rep['human_raters'])} human raters on {rep['human_items']} profiles.",
        "",
        "| dimension | judge (mean ± sd) |" + (" human (mean ± sd) | Krippendorff's α |" if human else ""),
        "|---|---|" + ("---|---|" if human else ""),
    ]
    for d, row in rep["dimensions"].items():
        cells = [_ms(row["judge"])]
        if human:
            a = row["krippendorff_alpha"]
            cells += [_ms(row["human"]), a["error"] if isinstance(a, dict) else _f(a, 3)]
        lines.append(f"| {d} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| identification | judge accuracy |"
        + (" human accuracy | Fleiss' κ |" if human else "")
        + " chance (sample majority) | chance (prior) |",
        "|---|---|" + ("---|---|" if human else "") + "---|---|",
    ]
    for pick, row in rep["identification"].items():
        c = row["chance"]
        cells = [_f(row["judge"]["accuracy"], 3)]
        if human:
            k = row["fleiss_kappa"]
            cells += [_f(row["human"]["accuracy"], 3), k.get("error") or _f(k.get("kappa"), 3)]
        cells += [
            f"{_f(c['sample']['rate'], 3)} ({c['sample']['class']})" if "sample" in c else "—",
            f"{_f(c['prior']['rate'], 3)} ({c['prior']['class']})" if "prior" in c else "—",
        ]
        lines.append(f"| {pick} | " + " | ".join(cells) + " |")
    for pick, row in rep["identification"].items():
        for who in ("human", "judge"):
            errs = (row.get(f"{who}_confusion") or {}).get("errors") or []
            if errs:
                lines += [
                    "",
                    f"Error analysis, {pick} ({who}): "
                    + "; ".join(f"{e['truth']} taken for {e['predicted']} {e['count']} of {e['of']}" for e in errs[:5])
                    + ".",
                ]
    div = rep["diversity"]
    j = div.get("judge") or {}
    lines += [
        "",
        f"Diversity (1–5): judge {_f(j.get('rating'), 0) if j else '—'}"
        + (f" ({j['error']})" if j.get("error") else "")
        + f"; humans {_ms(div.get('human'))}.",
    ]
    if rep["failed"]:
        lines += ["", f"Failed judgments: {len(rep['failed'])}"] + [
            f"- {f['item_id']}: {(f['error'] or '')[:200]}" for f in rep["failed"]
        ]
    return "\n".join(lines) + "\n"
