"""Agreement of MHQR judges with clinicians (MindEval2 §3.4, Tables 2, 3, 7, 9 and 10).

Reads clinicians' annotations (JSONL, several annotators per reply), optionally the judge's stored
judgments and the key file of a blinded sample, and computes: inter-annotator agreement on severity and
per issue; each judge's severity and issue agreement with the annotations; and whether the judge ranks
the counsellors as the annotators do, with bootstrap stability. Every number is recomputed from stored
rows; nothing calls a model. Definitions (pooled annotation, units, failed judgments) are in
`docs/judge-agreement.md` and repeated in `agreement.json` under `definitions`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mindsimkit.mindcore.errors import ConfigError, InputError
from mindsimkit.mindcore.io import atomic_write_json, atomic_write_text, read_json_file, read_jsonl
from mindsimkit.mindcore.layout import JudgmentsFolder, RunLayout
from mindsimkit.mindcore.recipe import format_validation_error
from mindsimkit.mindcore.runlog import read_table, remake
from mindsimkit.judge import stats, tradeoff
from mindsimkit.judge.rubric import severity_id
from mindsimkit.judge.significance import issue_tests

BOOTSTRAP_DRAWS = 2000

DEFINITIONS = {
    "reply": "one counsellor reply: (session_id, reply_index), reply_index counting the session's counsellor replies from 0",
    "unit": "one excerpt x one annotator, every counsellor turn of the excerpt rated (the paper's 'excerpt and "
    "annotator'); annotations by session and reply without a sample key: one session x one annotator",
    "pooled_severity": "per reply, the median of its annotators' severities; with an even count the more severe middle level",
    "pooled_issues": "per reply, the issues flagged by at least half of its annotators",
    "mhqr": "mean severity weight of a unit's replies; a counsellor's MHQR is the mean over its units",
    "failed_judgments": "count as errors in accuracy, F1 and within-one; left out of kappa, W, issue and ranking statistics",
    "mode": "most frequent severity of a unit; ties go to the more severe level",
}


# -- vocabulary from the rubric ---------------------------------------------------------------------


@dataclass(frozen=True)
class Vocabulary:
    """Severity levels (mildest first) with their weights, and issue id → category, from the rubric."""

    levels: tuple[str, ...]
    weights: tuple[float, ...]
    issues: dict[str, str]

    def level(self, raw: Any, where: str) -> int:
        key = severity_id(raw)
        if key not in self.levels:
            raise InputError(f"{where}: unknown severity {raw!r}; use one of {', '.join(self.levels)}")
        return self.levels.index(key)

    def issue(self, raw: Any, where: str) -> str:
        key = severity_id(raw)
        if key not in self.issues:
            raise InputError(
                f"{where}: unknown issue {raw!r}; issue ids are listed in judge/data/rubric.yaml: "
                f"{', '.join(sorted(self.issues))}"
            )
        return key


def load_vocabulary(path: Optional[Path] = None) -> Vocabulary:
    """Severity levels, weights and issue ids from the judge's rubric (the shipped one by default)."""
    from mindsimkit.judge.rubric import load_rubric

    try:
        rubric = load_rubric(str(path) if path else None)
    except ConfigError as exc:
        raise InputError(str(exc)) from exc
    sev = sorted(rubric.severities, key=lambda s: s.weight)
    return Vocabulary(
        tuple(s.id for s in sev), tuple(float(s.weight) for s in sev), {i.id: i.category for i in rubric.issues}
    )


# -- inputs -----------------------------------------------------------------------------------------


class AnnotationLine(BaseModel):
    """One clinician's judgment of one reply: by excerpt id (with the sample's key) or by session + reply."""

    model_config = ConfigDict(extra="ignore")
    excerpt_id: Optional[str] = Field(None, description="Excerpt id from `mindsim judge sample`")
    turn_id: Optional[str] = Field(None, description="Rated turn of a multi-turn excerpt ('<excerpt_id>.<position>')")
    turn: Optional[int] = Field(None, ge=1, description="Or its 1-based position among the excerpt's rated turns")
    session_id: Optional[str] = Field(None, description="Session id, when not annotating a blinded sample")
    reply_index: Optional[int] = Field(None, ge=0, description="0-based counsellor reply in the session")
    annotator: str = Field(..., min_length=1, description="Annotator id")
    severity: str = Field(..., min_length=1, description="Severity level id")
    issues: list[str] = Field(default_factory=list, description="Issue ids present in the reply")


@dataclass
class Annotation:
    reply: tuple[str, int]
    annotator: str
    level: int
    issues: frozenset[str]
    counsellor: Optional[str]
    where: str
    unit: str = ""  # the excerpt id, or the session id when annotated by session and reply

    def __post_init__(self) -> None:
        self.unit = self.unit or self.reply[0]


def load_key(path: Optional[Path]) -> dict[str, dict[str, Any]]:
    if path is None:
        return {}
    data = read_json_file(path, "the sample key file `mindsim judge sample` wrote (FILE.key.json)")
    try:
        return dict(data["excerpts"])
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(
            f"{path}: not a sample key file (a JSON object with an 'excerpts' map): {type(exc).__name__}"
        ) from exc


def _lines(obj: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """The flat annotation lines of one JSONL object. A filled-in excerpt line (`judge.units.Excerpt`)
    gives one per rated turn of its `annotation.turns`; an older single-reply one carries severity and
    issues on `annotation` itself. An excerpt nobody filled in (no annotator, no severity) gives none."""
    ann = obj.get("annotation")
    if not isinstance(ann, dict):
        return [obj]
    base = {k: v for k, v in obj.items() if k in ("excerpt_id", "session_id", "reply_index")}
    turns = ann.get("turns")
    single = (
        isinstance(turns, list) and len(turns) == 1 and isinstance(turns[0], dict) and turns[0].get("severity") is None
    )
    if not isinstance(turns, list) or (single and ann.get("severity") is not None):
        # A single-reply excerpt filled in on `annotation` itself, as before multi-turn units.
        return [{**base, **{k: v for k, v in ann.items() if k != "turns"}}]
    rated = [t for t in turns if isinstance(t, dict) and t.get("severity") is not None]
    if ann.get("annotator") is None and not rated:
        return []
    if len(rated) != len(turns):
        missing = [str(t.get("turn_id")) for t in turns if not isinstance(t, dict) or t.get("severity") is None]
        raise InputError(
            f"{where}: excerpt {obj.get('excerpt_id')!r}: {len(missing)} of its {len(turns)} turns have no "
            f"severity ({', '.join(missing)}); a unit is rated on every turn: rate them or drop the line"
        )
    return [
        {
            **base,
            "annotator": ann.get("annotator"),
            "turn_id": t.get("turn_id"),
            "severity": t["severity"],
            "issues": t.get("issues") or [],
        }
        for t in rated
    ]


def read_annotations(paths: Iterable[Path], vocab: Vocabulary, key: dict[str, dict[str, Any]]) -> list[Annotation]:
    """Annotation lines, flat or as filled-in excerpt lines; every excerpt an annotator rated must be
    rated on all its turns (one unit = one excerpt x one annotator)."""
    out: list[Annotation] = []
    seen: dict[tuple[Any, ...], str] = {}
    for path in paths:
        if not Path(path).is_file():
            raise InputError(f"annotations file {path} not found")
        for lineno, obj in read_jsonl(path):
            where = f"{path}:{lineno}"
            if not isinstance(obj, dict):
                raise InputError(f"{where}: expected a JSON object per line")
            for flat in _lines(obj, where):
                try:
                    line = AnnotationLine.model_validate(flat)
                except ValidationError as exc:
                    raise InputError(
                        format_validation_error(
                            exc, where, limit=1, top="", plain=True, line="{where}: field '{field}': {msg}"
                        )
                    ) from None
                reply, counsellor, unit = _locate(line, key, where)
                a = Annotation(
                    reply,
                    line.annotator,
                    vocab.level(line.severity, where),
                    frozenset(vocab.issue(i, where) for i in line.issues),
                    counsellor,
                    where,
                    unit,
                )
                dup = (a.reply, a.annotator)
                if dup in seen:
                    raise InputError(f"{where}: annotator {a.annotator!r} already annotated this reply at {seen[dup]}")
                seen[dup] = where
                out.append(a)
    if not out:
        raise InputError("no annotations in " + ", ".join(map(str, paths)))
    _check_units_complete(out, key)
    return out


def _rated(entry: dict[str, Any]) -> list[int]:
    # Key files written before multi-turn units name one reply only.
    return [int(i) for i in entry.get("reply_indices") or [entry["reply_index"]]]


def _check_units_complete(annotations: list[Annotation], key: dict[str, dict[str, Any]]) -> None:
    done: dict[tuple[str, str], set[int]] = defaultdict(set)
    first: dict[tuple[str, str], str] = {}
    for a in annotations:
        if a.unit in key:
            done[(a.unit, a.annotator)].add(a.reply[1])
            first.setdefault((a.unit, a.annotator), a.where)
    for (eid, who), got in done.items():
        want = _rated(key[eid])
        if set(want) != got:
            missing = [p + 1 for p, i in enumerate(want) if i not in got]
            raise InputError(
                f"{first[(eid, who)]}: annotator {who!r} rated {len(got)} of the {len(want)} turns of "
                f"excerpt {eid!r} (missing positions {missing}); a unit is rated on every turn"
            )


def _locate(
    line: AnnotationLine, key: dict[str, dict[str, Any]], where: str
) -> tuple[tuple[str, int], Optional[str], str]:
    """(session, reply), counsellor if known, and the unit id: the excerpt, or the session."""
    if line.excerpt_id is not None:
        if not key:
            raise InputError(f"{where}: annotation names excerpt {line.excerpt_id!r}; give the sample's key with --key")
        entry = key.get(line.excerpt_id)
        if entry is None:
            raise InputError(f"{where}: excerpt {line.excerpt_id!r} is not in the key file")
        rated = _rated(entry)
        ids = entry.get("turn_ids") or [f"{line.excerpt_id}.{k + 1}" for k in range(len(rated))]
        if line.turn_id is not None:
            if line.turn_id not in ids:
                raise InputError(
                    f"{where}: turn_id {line.turn_id!r} is not a rated turn of excerpt {line.excerpt_id!r}"
                )
            pos = ids.index(line.turn_id)
        elif line.turn is not None:
            if line.turn > len(rated):
                raise InputError(f"{where}: turn {line.turn}: excerpt {line.excerpt_id!r} has {len(rated)} rated turns")
            pos = line.turn - 1
        elif len(rated) == 1:
            pos = 0
        else:
            raise InputError(
                f"{where}: excerpt {line.excerpt_id!r} has {len(rated)} rated turns; give turn_id or turn (1-based)"
            )
        return (entry["session_id"], rated[pos]), entry.get("counsellor"), line.excerpt_id
    if line.session_id is None or line.reply_index is None:
        raise InputError(f"{where}: give excerpt_id, or session_id and reply_index")
    reply = (line.session_id, line.reply_index)
    by_reply = {(e["session_id"], i): e.get("counsellor") for e in key.values() for i in _rated(e)}
    return reply, by_reply.get(reply), line.session_id


@dataclass
class JudgeView:
    """One judge's verdicts: level (-1 = failed) and issues per reply."""

    name: str
    model: str
    level: dict[tuple[str, int], int] = field(default_factory=dict)
    issues: dict[tuple[str, int], frozenset[str]] = field(default_factory=dict)
    counsellor: dict[tuple[str, int], str] = field(default_factory=dict)


def judgments_path(path: Path) -> Path:
    """A judgments parquet file, its folder, or a run folder."""
    p = Path(path)
    for cand in (p, JudgmentsFolder(p).parquet, RunLayout(p).judgments.parquet):
        if cand.is_file():
            return cand
    raise InputError(f"no judgments at {path}; give RUN_DIR/judgments (written by `mindsim judge run`)")


class _StoredIssue(BaseModel):
    model_config = ConfigDict(extra="ignore")
    issue: str


class _StoredJudgment(BaseModel):
    """A judgments table's columns as agreement reads them; other tools' tables may name the model `model`."""

    session_id: str | None = None
    reply_index: int | None = None
    judge: str | None = None
    status: str | None = None
    judge_model: str | None = None
    model: str | None = None
    severity: str | None = None
    issues: list[_StoredIssue] | None = None
    counsellor: str | None = None


def read_judgments(path: Path, vocab: Vocabulary) -> dict[str, JudgeView]:
    file = judgments_path(path)
    rows = read_table(file, _StoredJudgment, what="judgments table", remake=remake("judge", file.parent.parent))
    views: dict[str, JudgeView] = {}
    for i, r in enumerate(rows):
        where = f"{file} row {i}"
        missing = [c for c in ("session_id", "reply_index", "judge", "status") if getattr(r, c) is None]
        judge, session_id, reply_index = r.judge, r.session_id, r.reply_index
        if missing or judge is None or session_id is None or reply_index is None:
            raise InputError(f"{where}: missing {', '.join(missing)}")
        v = views.setdefault(judge, JudgeView(judge, str(r.judge_model or r.model or "")))
        reply = (session_id, reply_index)
        ok = r.status == "ok"
        v.level[reply] = vocab.level(r.severity, where) if ok else -1
        v.issues[reply] = frozenset(vocab.issue(x.issue, where) for x in (r.issues or [])) if ok else frozenset()
        if r.counsellor:
            v.counsellor[reply] = r.counsellor
    return views


def check_coverage(annotations: list[Annotation], judges: dict[str, JudgeView]) -> None:
    for a in annotations:
        for j in judges.values():
            if a.reply not in j.level:
                raise InputError(
                    f"{a.where}: reply {a.reply[1]} of session {a.reply[0]} has no judgment by "
                    f"'{j.name}'; judge those sessions first or drop the line"
                )


# -- statistics -------------------------------------------------------------------------------------


# Reply → annotator → that annotator's annotation of the reply.
ByReply = dict[tuple[str, int], dict[str, Annotation]]


def _by_reply(annotations: list[Annotation]) -> ByReply:
    out: dict[tuple[str, int], dict[str, Annotation]] = defaultdict(dict)
    for a in annotations:
        out[a.reply][a.annotator] = a
    return dict(out)


def _mean(xs: Iterable[Optional[float]]) -> Optional[float]:
    vals = [x for x in xs if x is not None]
    return float(np.mean(vals)) if vals else None


def _unit_summary(levels: list[int], how: str) -> int:
    return max(levels) if how == "max" else stats.mode_level(levels)


def _conversation_w(pairs_by_session: Mapping[Any, tuple[list[int], list[int]]]) -> dict[str, Optional[float]]:
    """Two-rater Kendall's W of the maximum and of the mode severity per session (Table 7, 'Conv. W')."""
    out: dict[str, Optional[float]] = {}
    for how in ("max", "mode"):
        a = [_unit_summary(x, how) for x, _ in pairs_by_session.values()]
        b = [_unit_summary(y, how) for _, y in pairs_by_session.values()]
        out[how] = stats.defined(stats.kendall_w([a, b])) if len(a) >= 2 else None
    return out


def inter_annotator(by_reply: ByReply, annotators: list[str], vocab: Vocabulary) -> dict[str, Any]:
    """Table 2 (severity) and Table 9 (issues) among annotators."""
    n_levels = len(vocab.levels)
    pairs: list[dict[str, Any]] = []
    dist: dict[int, int] = defaultdict(int)
    conv: list[dict[str, Optional[float]]] = []
    issue_pairs: dict[str, list[tuple[float, Optional[float]]]] = defaultdict(list)
    for a, b in combinations(annotators, 2):
        shared = sorted(r for r, d in by_reply.items() if a in d and b in d)
        if not shared:
            continue
        la = [by_reply[r][a].level for r in shared]
        lb = [by_reply[r][b].level for r in shared]
        for x, y in zip(la, lb):
            dist[abs(x - y)] += 1
        pairs.append(
            {
                "annotators": [a, b],
                "replies": len(shared),
                "exact": float(np.mean(np.equal(la, lb))),
                "within_one": stats.within_one(la, lb),
                "kappa_w": stats.weighted_kappa(la, lb, n_levels),
            }
        )
        # A conversation-level pair is one unit of each annotator over the same excerpt.
        units: dict[tuple[str, str], tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
        for r, x, y in zip(shared, la, lb):
            u = (by_reply[r][a].unit, by_reply[r][b].unit)
            units[u][0].append(x)
            units[u][1].append(y)
        conv.append(_conversation_w(units))
        for issue in vocab.issues:
            fa = [issue in by_reply[r][a].issues for r in shared]
            fb = [issue in by_reply[r][b].issues for r in shared]
            issue_pairs[issue].append((float(np.mean(np.equal(fa, fb))), stats.binary_kappa(fa, fb)))
    total = sum(dist.values())
    complete = sorted(r for r, d in by_reply.items() if len(d) == len(annotators))
    turn_w = None
    if len(annotators) >= 2 and len(complete) >= 2:
        turn_w = stats.defined(stats.kendall_w([[by_reply[r][a].level for r in complete] for a in annotators]))
    severity = {
        "replies_with_several_annotators": sum(1 for d in by_reply.values() if len(d) >= 2),
        "replies_annotated_by_all": len(complete),
        "pairs": pairs,
        "mean_pairwise_kappa_w": _mean(p["kappa_w"] for p in pairs),
        "exact": dist[0] / total if total else None,
        "within_one": (dist[0] + dist[1]) / total if total else None,
        "distance_shares": {str(k): dist[k] / total for k in range(n_levels)} if total else {},
        "kendall_w_turn": turn_w,
        "conversation_w": {h: _mean(c[h] for c in conv) for h in ("max", "mode")},
    }
    issues: dict[str, dict[str, Any]] = {}
    for issue, cat in vocab.issues.items():
        counts = [
            [
                sum(issue in by_reply[r][a].issues for a in annotators),
                sum(issue not in by_reply[r][a].issues for a in annotators),
            ]
            for r in complete
        ]
        flagged = any(issue in x.issues for d in by_reply.values() for x in d.values())
        fleiss = stats.defined(stats.fleiss_kappa(counts)) if complete and len(annotators) >= 2 and flagged else None
        issues[issue] = {
            "category": cat,
            "flags": {a: sum(issue in by_reply[r][a].issues for r in complete) for a in annotators},
            "observed": _mean(o for o, _ in issue_pairs[issue]),
            "mean_cohen_kappa": _mean(k for _, k in issue_pairs[issue]) if flagged else None,
            "fleiss_kappa": fleiss,
        }
    return {
        "severity": severity,
        "issues": issues,
        "issue_means": {
            "mean_cohen_kappa": _mean(v["mean_cohen_kappa"] for v in issues.values()),
            "fleiss_kappa": _mean(v["fleiss_kappa"] for v in issues.values()),
        },
    }


def pooled(by_reply: ByReply) -> dict[tuple[str, int], tuple[int, frozenset[str]]]:
    """Per reply: upper-median severity and the issues at least half of its annotators flag."""
    out: dict[tuple[str, int], tuple[int, frozenset[str]]] = {}
    for r, d in by_reply.items():
        votes: dict[str, int] = defaultdict(int)
        for a in d.values():
            for i in a.issues:
                votes[i] += 1
        out[r] = (
            stats.upper_median([a.level for a in d.values()]),
            frozenset(i for i, n in votes.items() if 2 * n >= len(d)),
        )
    return out


def judge_severity(j: JudgeView, annotations: list[Annotation], by_reply: ByReply, vocab: Vocabulary) -> dict[str, Any]:
    """Table 7 for one judge: every annotation is one comparison."""
    n_levels = len(vocab.levels)
    gold = [a.level for a in annotations]
    pred = [j.level[a.reply] for a in annotations]
    ok = [(g, p, a) for g, p, a in zip(gold, pred, annotations) if p >= 0]
    out: dict[str, Any] = {"annotations": len(annotations), "failed": len(annotations) - len(ok)}
    out.update(stats.level_f1(gold, pred, vocab.levels))
    out["within_one"] = stats.within_one(gold, pred)
    out["kappa_w"] = stats.weighted_kappa([g for g, _, _ in ok], [p for _, p, _ in ok], n_levels)
    out["kappa_w_by_annotator"] = {
        name: stats.weighted_kappa(
            [g for g, _, a in ok if a.annotator == name], [p for _, p, a in ok if a.annotator == name], n_levels
        )
        for name in sorted({a.annotator for a in annotations})
    }
    pool = pooled(by_reply)
    replies = sorted(r for r in pool if j.level[r] >= 0)
    out["kappa_w_pooled"] = stats.weighted_kappa([pool[r][0] for r in replies], [j.level[r] for r in replies], n_levels)
    out["kendall_w_turn"] = (
        stats.defined(stats.kendall_w([[g for g, _, _ in ok], [p for _, p, _ in ok]])) if len(ok) >= 2 else None
    )
    units: dict[tuple[str, str], tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
    for g, p, a in ok:
        units[(a.unit, a.annotator)][0].append(g)
        units[(a.unit, a.annotator)][1].append(p)
    out["conversation_w"] = _conversation_w(units)
    out["conversation_units"] = len(units)
    return out


def judge_issues(j: JudgeView, annotations: list[Annotation], by_reply: ByReply, vocab: Vocabulary) -> dict[str, Any]:
    """Table 10 for one judge: every (annotation, issue) is one binary decision."""
    ok = [a for a in annotations if j.level[a.reply] >= 0]
    per = {}
    pool = pooled(by_reply)
    replies = sorted(r for r in pool if j.level[r] >= 0)
    for issue in vocab.issues:
        row = stats.prf([issue in a.issues for a in ok], [issue in j.issues[a.reply] for a in ok])
        row["kappa_vs_pooled"] = stats.binary_kappa(
            [issue in pool[r][1] for r in replies], [issue in j.issues[r] for r in replies]
        )
        per[issue] = row

    def pooled_prf(subset: list[Annotation]) -> dict[str, Any]:
        g = [i in a.issues for a in subset for i in vocab.issues]
        p = [i in j.issues[a.reply] for a in subset for i in vocab.issues]
        return {"annotations": len(subset), **stats.prf(g, p)}

    by_level = {lvl: pooled_prf([a for a in ok if a.level == k]) for k, lvl in enumerate(vocab.levels)}
    return {
        "per_issue": per,
        "pooled": pooled_prf(ok),
        "macro_f1": _mean(v["f1"] for v in per.values() if v["gold"]),
        "pooled_by_annotated_level": by_level,
    }


# -- the report -------------------------------------------------------------------------------------


def compute(
    annotations: list[Annotation],
    judges: dict[str, JudgeView],
    vocab: Vocabulary,
    *,
    draws: int = BOOTSTRAP_DRAWS,
    seed: int = 0,
) -> dict[str, Any]:
    by_reply = _by_reply(annotations)
    annotators = sorted({a.annotator for a in annotations})
    report: dict[str, Any] = {
        "definitions": DEFINITIONS,
        "severity_levels": dict(zip(vocab.levels, vocab.weights)),
        "counts": {
            "annotations": len(annotations),
            "replies": len(by_reply),
            "annotators": annotators,
            "sessions": len({r[0] for r in by_reply}),
            "excerpts": len({a.unit for a in annotations}),
            "units": len({(a.unit, a.annotator) for a in annotations}),
        },
        "inter_annotator": inter_annotator(by_reply, annotators, vocab),
        "judges": {},
    }
    for name, j in sorted(judges.items()):
        report["judges"][name] = {
            "model": j.model,
            "severity": judge_severity(j, annotations, by_reply, vocab),
            "issues": judge_issues(j, annotations, by_reply, vocab),
        }
    counsellor_of = {a.reply[0]: a.counsellor for a in annotations if a.counsellor}
    for j in judges.values():
        for r, c in j.counsellor.items():
            counsellor_of.setdefault(r[0], c)
    missing = sorted({a.reply[0] for a in annotations} - set(counsellor_of))
    if missing:
        report["ranking"] = {"skipped": f"counsellor unknown for {len(missing)} sessions (give --key or --judgments)"}
    else:
        report["ranking"] = stats.ranking_block(annotations, judges, counsellor_of, vocab.weights, draws, seed)
    if len(judges) >= 2:
        f1 = {n: v["issues"]["pooled"]["f1"] for n, v in report["judges"].items()}
        report["issue_tests"] = issue_tests(annotations, judges, list(vocab.issues), f1, draws=draws, seed=seed)
    return report


def run_agreement(
    annotation_files: list[Path],
    *,
    judgments: Optional[Path] = None,
    key: Optional[Path] = None,
    out: Path = Path("agreement"),
    draws: int = BOOTSTRAP_DRAWS,
    seed: int = 0,
    rubric: Optional[Path] = None,
    costs: Optional[Path] = None,
) -> dict[str, Any]:
    """Read, check, compute, and write `agreement.json` and `agreement.md` into `out` (and Figure 2's plot when
    the judges' cost per query is known: `costs`, else the judge run's report.json beside its judgments)."""
    vocab = load_vocabulary(rubric)
    annotations = read_annotations(annotation_files, vocab, load_key(key))
    judges = read_judgments(judgments, vocab) if judgments is not None else {}
    if costs is None and judgments is not None:
        beside = judgments_path(judgments).parent / "report.json"
        costs = beside if beside.is_file() else None
    cost_rows = tradeoff.read_costs(costs) if costs is not None else {}
    check_coverage(annotations, judges)
    report = compute(annotations, judges, vocab, draws=draws, seed=seed)
    report["inputs"] = {
        "annotations": [str(p) for p in annotation_files],
        "judgments": str(judgments) if judgments else None,
        "key": str(key) if key else None,
        "costs": str(costs) if costs else None,
    }
    out = Path(out)
    if judges:
        report["cost_tradeoff"] = tradeoff.points(report, cost_rows)
        if report["cost_tradeoff"]["drawn"]:
            tradeoff.plot(report["cost_tradeoff"], out / tradeoff.PLOT)
            report["plots"] = [tradeoff.PLOT]
    atomic_write_json(out / "agreement.json", report)
    atomic_write_text(out / "agreement.md", render(report))
    return report


def _f(x: Any, digits: int = 2) -> str:
    return "—" if x is None else (f"{x:.{digits}f}" if isinstance(x, float) else str(x))


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    return (
        ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        + ["| " + " | ".join(_f(c) for c in r) + " |" for r in rows]
        + [""]
    )


def _issue_tests_md(t: dict[str, Any]) -> list[str]:
    """The paired tests of pooled issue recall and F1 between judges (judge/significance.py)."""

    def pval(p: Optional[float]) -> str:
        return "—" if p is None else ("< 0.001" if p < 0.001 else f"{p:.3f}")

    def cell(m: Optional[dict[str, Any]]) -> str:
        if not m or m["difference"] is None:
            return "—"
        iv = m["interval"]
        return f"{m['difference']:+.3f}" + (f" [{iv[0]:+.3f}, {iv[1]:+.3f}]" if iv else "") + f", p {pval(m['p'])}"

    lines = [
        "## Is one judge's pooled issue recall or F1 lower than another's? (cf. §3.4, Table 10)",
        "",
        f"Differences first − second on the annotations both judged; interval and two-sided p from "
        f"{t['draws']} paired bootstrap resamples of excerpts (seed {t['seed']}); McNemar: exact test on the "
        "annotated (annotation, issue) pairs one judge finds and the other misses. Definitions: "
        "docs/judge-agreement.md.",
        "",
    ]
    rows = [
        [
            " / ".join(p["judges"]),
            p["annotations"],
            cell(p["recall"]),
            "—"
            if not p["mcnemar_recall"]
            else f"{p['mcnemar_recall']['only_first']} vs "
            f"{p['mcnemar_recall']['only_second']}, p {pval(p['mcnemar_recall']['p'])}",
            cell(p["precision"]),
            cell(p["f1"]),
        ]
        for p in t["pairs"]
    ]
    lines += _table(
        ["first / second", "annotations", "Δ pooled recall", "McNemar (recall)", "Δ pooled precision", "Δ pooled F1"],
        rows,
    )
    if "best_f1" in t:
        lower = t["significantly_lower_than_best"]
        said = "; ".join(f"{n} ({', '.join(ms)})" for n, ms in sorted(lower.items())) or "none"
        lines += [
            f"Highest pooled F1: {t['best_f1']}. Significantly lower than it (p < {t['alpha']}, bootstrap): {said}.",
            "",
        ]
    return lines


def render(report: dict[str, Any]) -> str:
    """agreement.md: the same numbers as agreement.json, laid out like the paper's tables."""
    levels = list(report["severity_levels"])
    c = report["counts"]
    lines = [
        "# MHQR agreement with clinicians",
        "",
        f"{c['annotations']} annotations of {c['replies']} replies in {c['sessions']} sessions "
        f"({c.get('excerpts', c['sessions'])} excerpts, {c.get('units', '–')} units of excerpt × annotator) by "
        f"{len(c['annotators'])} annotators ({', '.join(c['annotators'])}). Definitions: docs/judge-agreement.md.",
        "",
    ]
    ia = report["inter_annotator"]["severity"]
    lines += ["## Inter-annotator agreement on severity (cf. MindEval2 Table 2)", ""]
    lines += _table(
        ["pair", "replies", "exact", "within 1", "κ_w"],
        [[" / ".join(p["annotators"]), p["replies"], p["exact"], p["within_one"], p["kappa_w"]] for p in ia["pairs"]]
        + [["all", ia["replies_with_several_annotators"], ia["exact"], ia["within_one"], ia["mean_pairwise_kappa_w"]]],
    )
    lines += [
        f"Kendall's W (tie-corrected, {ia['replies_annotated_by_all']} replies annotated by all): "
        f"{_f(ia['kendall_w_turn'])}; conversation W (max / mode, mean over pairs): "
        f"{_f(ia['conversation_w']['max'])} / {_f(ia['conversation_w']['mode'])}.",
        "",
    ]
    if report["judges"]:
        lines += ["## Judge severity agreement with the annotations (cf. Table 7)", ""]
        rows = []
        for n, j in report["judges"].items():
            s = j["severity"]
            rows.append(
                [
                    n,
                    s["accuracy"],
                    *[s["f1"][lv] for lv in levels],
                    s["macro_f1"],
                    s["kappa_w"],
                    s["kappa_w_pooled"],
                    s["within_one"],
                    s["kendall_w_turn"],
                    s["conversation_w"]["max"],
                    s["conversation_w"]["mode"],
                    s["failed"],
                ]
            )
        lines += _table(
            [
                "judge",
                "acc.",
                *[f"F1 {lv}" for lv in levels],
                "macro F1",
                "κ_w",
                "κ_w pooled",
                "within 1",
                "W turn",
                "conv. W max",
                "conv. W mode",
                "failed",
            ],
            rows,
        )
    iss = report["inter_annotator"]["issues"]
    lines += ["## Per-issue agreement (cf. Tables 9 and 10)", ""]
    head = ["issue", "category", "observed", "mean Cohen κ", "Fleiss κ"]
    judge_names = list(report["judges"])
    for n in judge_names:
        head += [f"{n} gold", f"{n} P", f"{n} R", f"{n} F1", f"{n} κ vs pooled"]
    rows = []
    for issue, v in sorted(iss.items(), key=lambda kv: (kv[1]["category"], kv[0])):  # grouped as in Table 1
        row = [issue, v["category"], v["observed"], v["mean_cohen_kappa"], v["fleiss_kappa"]]
        for n in judge_names:
            p = report["judges"][n]["issues"]["per_issue"][issue]
            row += [p["gold"], p["precision"], p["recall"], p["f1"], p["kappa_vs_pooled"]]
        rows.append(row)
    lines += _table(head, rows)
    for n in judge_names:
        ji = report["judges"][n]["issues"]
        lines += [
            f"{n}: pooled P / R / F1 {_f(ji['pooled']['precision'])} / {_f(ji['pooled']['recall'])} / "
            f"{_f(ji['pooled']['f1'])}; macro F1 {_f(ji['macro_f1'])}; pooled F1 on annotations rated "
            + ", ".join(f"{lv} {_f(v['f1'])}" for lv, v in ji["pooled_by_annotated_level"].items())
            + ".",
            "",
        ]
    if report.get("issue_tests"):
        lines += _issue_tests_md(report["issue_tests"])
    if report.get("cost_tradeoff"):
        lines += tradeoff.markdown(report["cost_tradeoff"])
    rk = report["ranking"]
    lines += ["## Counsellor ranking (cf. Table 3; MHQR, lower is better)", ""]
    if "skipped" in rk:
        lines += [f"Skipped: {rk['skipped']}.", ""]
        return "\n".join(lines)
    names = list(rk["pooled"])
    rows = [
        ["annotators (pooled)", *[rk["pooled"][x] for x in names], "", "", rk.get("bootstrap", {}).get("annotators")]
    ]
    for a, v in rk["annotators"].items():
        rows.append([a, *[v["scores"].get(x) for x in names], v["tau_b_vs_pooled"], "", None])
    for n, v in rk["judges"].items():
        rows.append(
            [n, *[v["scores"].get(x) for x in names], v["tau_b"], f"{v['matched']}/{v['of']}", v.get("bootstrap")]
        )
    lines += _table(["scored by", *names, "τ_b", "matched", "bootstrap"], rows)
    if "bootstrap" in rk:
        lines += [
            f"Bootstrap: {rk['bootstrap']['draws']} resamples of excerpts (units without a sample: sessions) within each counsellor "
            f"(seed {rk['bootstrap']['seed']}).",
            "",
        ]
    return "\n".join(lines)
