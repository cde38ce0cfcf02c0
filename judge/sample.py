"""A blinded, stratified sample of counsellor replies for clinicians to annotate (MindEval2 §3.4: three
psychologists annotated excerpts turn by turn without knowing which system produced them).

Each excerpt is one counsellor reply with everything it was written from: the counsellor's system prompt
as sent and the conversation up to and including that reply. The draw is stratified by counsellor and,
where judgments exist, by the judge's severity, so every counsellor is equally represented and rare
severe replies are not crowded out by No concern. Counsellor names are replaced by opaque system codes,
the order is shuffled, and the map back to sessions and counsellors goes to a separate key file that the
annotators should not see. The same seed gives the same sample.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pyarrow.parquet as pq

from judge.agreement import load_vocabulary
from judge.rubric import severity_id
from mindcore.errors import InputError
from mindcore.io import atomic_write_json, atomic_write_jsonl
from mindcore.layout import RunLayout

SESSION_COLUMNS = ["session_id", "patient_id", "counsellor", "session_index", "counsellor_system_prompt",
                   "counsellor_messages"]


@dataclass(frozen=True)
class Reply:
    session_id: str
    reply_index: int
    counsellor: str  # the unit drawn evenly and blinded: the counsellor, or counsellor/engine (see `units`)
    stratum: str  # judged severity, "failed" or "unjudged"


def key_path_for(out: Path) -> Path:
    return Path(out).with_suffix(".key.json")


def load_sessions(run_dir: Path) -> dict[str, dict[str, Any]]:
    path = RunLayout(run_dir).sessions.parquet
    if not path.is_file():
        raise InputError(f"{path} not found: give the --out folder of `mindsim run` or `mindsim simulate`")
    try:
        # `patient_engine` is optional: sessions of other simulators, and older runs, do not have it.
        names = pq.read_schema(path).names
        rows = pq.read_table(path, columns=[*SESSION_COLUMNS, *(["patient_engine"] if "patient_engine" in names else [])]).to_pylist()
    except Exception as exc:  # missing column: pyarrow names it
        raise InputError(f"{path}: not a sessions table ({exc})") from exc
    return {r["session_id"]: r for r in rows}


def conversation(session: dict[str, Any]) -> list[dict[str, str]]:
    """The plain exchange, counsellor = assistant, without the system message."""
    return [{"role": m["role"], "content": m["content"]} for m in session["counsellor_messages"] if m["role"] != "system"]


def judged_strata(run_dir: Path, judge: Optional[str]) -> tuple[Optional[str], dict[tuple[str, int], str]]:
    """Severity stratum per reply from one judge's rows, if the run has judgments."""
    path = RunLayout(run_dir).judgments.parquet
    if not path.is_file():
        if judge:
            raise InputError(f"--judge {judge}: {path} not found; run `mindsim judge run` first or drop --judge")
        return None, {}
    try:
        rows = pq.read_table(path, columns=["session_id", "reply_index", "judge", "severity", "status"]).to_pylist()
    except Exception as exc:  # a missing column or a broken file: pyarrow names it
        raise InputError(f"{path}: not a judgments table ({exc})") from exc
    names = sorted({r["judge"] for r in rows})
    if judge is None:
        judge = names[0] if len(names) == 1 else ("judge" if "judge" in names else None)
        if judge is None:
            raise InputError(f"{path} holds judges {', '.join(names)}; choose one with --judge")
    elif judge not in names:
        raise InputError(f"--judge {judge}: {path} holds judges {', '.join(names) or '(none)'}")
    return judge, {(r["session_id"], int(r["reply_index"])): (severity_id(r["severity"]) if r["status"] == "ok" else "failed")
                   for r in rows if r["judge"] == judge}


def allocate(n: int, sizes: dict[str, int], order: list[str]) -> dict[str, int]:
    """Spread n over strata as evenly as their sizes allow: one each in `order`, skipping full ones."""
    take = {k: 0 for k in order}
    n = min(n, sum(sizes.values()))
    while n > 0:
        for k in order:
            if n and take[k] < sizes[k]:
                take[k] += 1
                n -= 1
    return take


def draw(replies: list[Reply], n: int, rng: random.Random, levels: tuple[str, ...]) -> list[Reply]:
    """Even over counsellors, then even over severity strata within each counsellor. When a quota is
    smaller than the number of strata, the more severe strata are served first: they are the rare ones
    and the ones whose agreement matters most."""
    by_c: dict[str, dict[str, list[Reply]]] = defaultdict(lambda: defaultdict(list))
    for r in sorted(replies, key=lambda r: (r.counsellor, r.stratum, r.session_id, r.reply_index)):
        by_c[r.counsellor][r.stratum].append(r)
    counsellors = sorted(by_c)
    rng.shuffle(counsellors)
    quota = allocate(n, {c: sum(map(len, s.values())) for c, s in by_c.items()}, counsellors)
    rank = {lv: i for i, lv in enumerate(reversed(levels))}
    chosen: list[Reply] = []
    for c in sorted(by_c):
        strata = by_c[c]
        order = sorted(strata, key=lambda s: (rank.get(s, len(rank)), s))
        per = allocate(quota[c], {s: len(v) for s, v in strata.items()}, order)
        for s in sorted(strata):
            pool = list(strata[s])
            rng.shuffle(pool)
            chosen += pool[: per[s]]
    return chosen


def sample_excerpts(run_dir: Path, n: int, out: Path, *, seed: int = 0, key: Optional[Path] = None,
                    judge: Optional[str] = None, rubric: Optional[Path] = None) -> dict[str, Any]:
    """Write the excerpt file and its key; return the key's summary part."""
    if n < 1:
        raise InputError(f"--n {n}: draw at least one excerpt")
    key = Path(key) if key else key_path_for(out)
    if key.resolve() == Path(out).resolve():
        raise InputError("--key must differ from --out: the key un-blinds the excerpts")
    vocab = load_vocabulary(rubric)
    sessions = load_sessions(run_dir)
    judge, strata = judged_strata(run_dir, judge)
    unit = units(sessions)
    replies = []
    for sid, s in sorted(sessions.items()):
        k = 0
        for m in conversation(s):
            if m["role"] == "assistant":
                replies.append(Reply(sid, k, unit[sid], strata.get((sid, k), "unjudged")))
                k += 1
    if not replies:
        raise InputError(f"{run_dir}: the sessions hold no counsellor replies to sample")
    rng = random.Random(seed)
    chosen = draw(replies, n, rng, vocab.levels)
    rng.shuffle(chosen)
    names = sorted({r.counsellor for r in replies})
    codes = [f"S{i + 1}" for i in range(len(names))]
    rng.shuffle(codes)
    system_of = dict(zip(names, codes))
    excerpts, entries, used = [], {}, set()
    for r in chosen:
        eid = f"e{rng.getrandbits(48):012x}"
        while eid in used:
            eid = f"e{rng.getrandbits(48):012x}"
        used.add(eid)
        s = sessions[r.session_id]
        messages = _up_to_reply(conversation(s), r.reply_index)
        excerpts.append({
            "excerpt_id": eid,
            "system": system_of[r.counsellor],
            "system_prompt": s["counsellor_system_prompt"],
            "messages": messages,
            "rate": "the last message (the counsellor's reply)",
            "choices": {"severity": list(vocab.levels), "issues": sorted(vocab.issues)},
            "annotation": {"annotator": None, "severity": None, "issues": [], "comment": None},
        })
        entries[eid] = {"session_id": r.session_id, "reply_index": r.reply_index, "counsellor": s["counsellor"],
                        "patient_engine": s.get("patient_engine"), "system_unit": r.counsellor, "patient_id": s["patient_id"], "session_index": s["session_index"], "judged_severity": r.stratum}
    table: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(lambda: {"available": 0, "drawn": 0}))
    for r in replies:
        table[r.counsellor][r.stratum]["available"] += 1
    for r in chosen:
        table[r.counsellor][r.stratum]["drawn"] += 1
    summary = {"run_dir": str(run_dir), "seed": seed, "requested": n, "drawn": len(chosen), "judge": judge,
               "systems": {code: name for name, code in system_of.items()},
               "strata": {c: dict(v) for c, v in sorted(table.items())}}
    atomic_write_jsonl(out, excerpts)
    atomic_write_json(key, {**summary, "excerpts": entries})
    return {**summary, "out": str(out), "key": str(key)}


def units(sessions: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Per session, what the sample balances and blinds: the counsellor, or `counsellor/engine` when the run
    holds sessions of several patient engines (as the MHQR report ranks them), so one engine's sessions
    cannot crowd out the other's and the codes do not pool the two."""
    engines = {s.get("patient_engine") or "unknown" for s in sessions.values()}
    if len(engines) <= 1:
        return {sid: s["counsellor"] for sid, s in sessions.items()}
    return {sid: f"{s['counsellor']}/{s.get('patient_engine') or 'unknown'}" for sid, s in sessions.items()}


def _up_to_reply(messages: list[dict[str, str]], reply_index: int) -> list[dict[str, str]]:
    k = -1
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            k += 1
            if k == reply_index:
                return messages[: i + 1]
    raise InputError(f"reply {reply_index} not in the conversation")
