"""A blinded, stratified sample of excerpts for clinicians to annotate (MindEval2 §3.4: three
psychologists annotated 19 complete conversations and 48 five-turn excerpts turn by turn, without
knowing which system produced them).

An excerpt is one annotation unit (`judge/units.py`): a single reply, a window of five consecutive
counsellor turns, or a whole conversation, each shown with everything it was written from: the
counsellor's system prompt as sent and the conversation up to its last rated turn. The draw is
stratified by counsellor and, where judgments exist, by the judge's severity (for several turns, their
most severe), so every counsellor is equally represented and rare severe excerpts are not crowded out. Counsellor names are replaced by opaque system codes,
the order is shuffled, and the map back to sessions and counsellors goes to a separate key file that the
annotators should not see. The same seed gives the same sample.

Real sessions can be mixed in (`real=`: JSONL in the judge's input format, `judge.inputs`), as the paper's human
evaluation mixes conversations of three simulators with real sessions of an online mental-health app (§3.4): each
real counsellor is one more system, named `real/COUNSELLOR` in the key (patient engine `real`), blinded and drawn
evenly like the simulated ones; real sessions have no judgments, so they are drawn from the `unjudged` stratum.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel

from mindsimkit.mindcore.exchange import spoken
from mindsimkit.mindcore.systems import report_label, several
from mindsimkit.judge.agreement import load_vocabulary
from mindsimkit.judge.rubric import severity_id
from mindsimkit.judge.units import (
    UNITS,
    WINDOW_TURNS,
    Choices,
    Excerpt,
    ExcerptAnnotation,
    KeyEntry,
    RatedTurn,
    Unit,
    TurnAnnotation,
)
from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.io import atomic_write_json, atomic_write_jsonl
from mindsimkit.mindcore.layout import RunLayout


class SampledSession(BaseModel):
    """The columns of a run's sessions the sample reads (`patient_engine` is absent in older runs and in other
    simulators' sessions)."""

    session_id: str
    patient_id: str
    counsellor: str
    session_index: int
    counsellor_system_prompt: str
    counsellor_messages: list[dict[str, Any]]
    patient_engine: str | None = None


class _Verdict(BaseModel):
    session_id: str
    reply_index: int
    judge: str
    severity: str | None = None
    status: str


@dataclass(frozen=True)
class Reply:
    session_id: str
    reply_index: int
    counsellor: str  # the unit drawn evenly and blinded: the counsellor, or counsellor/engine (see `units`)
    stratum: str  # judged severity, "failed" or "unjudged"
    replies: int = 1  # consecutive counsellor replies rated from reply_index on (window 5, conversation all)


def key_path_for(out: Path) -> Path:
    return Path(out).with_suffix(".key.json")


REAL = "real"


def load_sessions(run_dir: Path) -> dict[str, SampledSession]:
    path = RunLayout(run_dir).sessions.parquet
    if not path.is_file():
        raise InputError(f"{path} not found: give the --out folder of `mindsim run` or `mindsim simulate`")
    return {r.session_id: r for r in RunLayout(run_dir).sessions.rows(SampledSession)}


def load_real(paths: list[Path], simulated: dict[str, SampledSession]) -> dict[str, SampledSession]:
    """Real sessions (`judge.inputs` JSONL) as sample sessions of patient engine `real`. An id that is also a
    simulated session's, or given twice, is refused: the key must map every excerpt back to one session."""
    from mindsimkit.judge.inputs import read_sessions_jsonl

    out: dict[str, SampledSession] = {}
    for path in paths:
        if not Path(path).is_file():
            raise InputError(f'--real {path}: not found; give a JSONL file of real sessions (docs/judge.md "Input")')
        for s in read_sessions_jsonl(Path(path)):
            if s.session_id in simulated or s.session_id in out:
                raise InputError(
                    f"--real {path}: session_id {s.session_id!r} is already a session of the sample; "
                    "give every real session an id of its own"
                )
            out[s.session_id] = SampledSession(
                session_id=s.session_id,
                patient_id=s.patient_id,
                counsellor=s.counsellor,
                session_index=s.session_index,
                counsellor_system_prompt=s.counsellor_system_prompt,
                counsellor_messages=s.messages,
                patient_engine=REAL,
            )
    return out


def conversation(session: SampledSession) -> list[dict[str, str]]:
    """The plain exchange, counsellor = assistant: patient and counsellor messages with text, counted as
    the judge counts replies (`judge.judging.replies`), so reply indices agree with the judgments."""
    return [{"role": role, "content": content} for role, content in spoken(session.counsellor_messages)]


def judged_strata(run_dir: Path, judge: Optional[str]) -> tuple[Optional[str], dict[tuple[str, int], str]]:
    """Severity stratum per reply from one judge's rows, if the run has judgments."""
    path = RunLayout(run_dir).judgments.parquet
    if not path.is_file():
        if judge:
            raise InputError(f"--judge {judge}: {path} not found; run `mindsim judge run` first or drop --judge")
        return None, {}
    rows = RunLayout(run_dir).judgments.rows(_Verdict)
    names = sorted({r.judge for r in rows})
    if judge is None:
        judge = names[0] if len(names) == 1 else ("judge" if "judge" in names else None)
        if judge is None:
            raise InputError(f"{path} holds judges {', '.join(names)}; choose one with --judge")
    elif judge not in names:
        raise InputError(f"--judge {judge}: {path} holds judges {', '.join(names) or '(none)'}")
    return judge, {
        (r.session_id, r.reply_index): (severity_id(r.severity) if r.status == "ok" else "failed")
        for r in rows
        if r.judge == judge
    }


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


def _stratum(strata: list[str], levels: tuple[str, ...]) -> str:
    """One stratum for a multi-turn unit: its most severe judged level, else failed, else unjudged."""
    judged = [x for x in strata if x in levels]
    if judged:
        return max(judged, key=levels.index)
    return "failed" if "failed" in strata else "unjudged"


def _mix(unit: str, n: Optional[int], mix: Optional[dict[str, int]]) -> dict[str, int]:
    if mix is not None:
        bad = [k for k in mix if k not in UNITS]
        if bad or not mix or any(v < 0 for v in mix.values()) or not sum(mix.values()):
            raise InputError(f"mix {mix}: give counts >= 0 of {', '.join(UNITS)}, at least one above 0")
        return {k: v for k, v in mix.items() if v}
    if unit not in UNITS:
        raise InputError(f"--unit {unit}: use one of {', '.join(UNITS)}")
    if n is None or n < 1:
        raise InputError(f"--n {n}: draw at least one excerpt")
    return {unit: n}


def sample_excerpts(
    run_dir: Path,
    n: Optional[int],
    out: Path,
    *,
    seed: int = 0,
    key: Optional[Path] = None,
    judge: Optional[str] = None,
    rubric: Optional[Path] = None,
    unit: str = "reply",
    mix: Optional[dict[str, int]] = None,
    real: Optional[list[Path]] = None,
) -> dict[str, Any]:
    """Write the excerpt file (`judge.units.Excerpt` rows) and its key; return the key's summary part.
    `n` excerpts of one `unit`, or `mix` = {unit: count} (the paper's: `judge.units.PAPER_MIX`).
    Conversations are drawn first, then windows from other sessions (one per session), then replies
    from sessions not used yet, so no counsellor turn is in two excerpts. `real`: JSONL files of real sessions to
    mix in (module docstring)."""
    plan = _mix(unit, n, mix)
    key = Path(key) if key else key_path_for(out)
    if key.resolve() == Path(out).resolve():
        raise InputError("--key must differ from --out: the key un-blinds the excerpts")
    vocab = load_vocabulary(rubric)
    sessions = load_sessions(run_dir)
    judge, strata = judged_strata(run_dir, judge)
    unit_of = units(sessions)
    real_sessions = load_real(list(real or []), sessions)
    sessions.update(real_sessions)
    unit_of.update({sid: f"{REAL}/{s.counsellor}" for sid, s in real_sessions.items()})
    counts = {sid: sum(m["role"] == "assistant" for m in conversation(s)) for sid, s in sorted(sessions.items())}
    if not any(counts.values()):
        raise InputError(f"{run_dir}: the sessions hold no counsellor replies to sample")
    rng = random.Random(seed)

    def stratum(sid: str, first: int, k: int) -> str:
        return _stratum([strata.get((sid, i), "unjudged") for i in range(first, first + k)], vocab.levels)

    candidates: dict[Unit, list[Reply]] = {}
    chosen: list[tuple[Unit, Reply]] = []
    used: set[str] = set()
    kinds: tuple[Unit, ...] = ("conversation", "window", "reply")
    for kind in [u for u in kinds if u in plan]:
        if kind == "conversation":
            pool = [Reply(sid, 0, unit_of[sid], stratum(sid, 0, c), c) for sid, c in counts.items() if c]
        elif kind == "window":
            # One window per session, its start drawn first so the stratum is the window's own.
            pool = []
            for sid, c in counts.items():
                if sid not in used and c >= WINDOW_TURNS:
                    start = rng.randrange(c - WINDOW_TURNS + 1)
                    pool.append(Reply(sid, start, unit_of[sid], stratum(sid, start, WINDOW_TURNS), WINDOW_TURNS))
        else:
            pool = [
                Reply(sid, k, unit_of[sid], strata.get((sid, k), "unjudged"))
                for sid, c in counts.items()
                if sid not in used
                for k in range(c)
            ]
        if not pool:
            need = (
                f"sessions with at least {WINDOW_TURNS} counsellor replies"
                if kind == "window"
                else "counsellor replies"
            )
            raise InputError(f"{run_dir}: no {need} left to draw {kind} excerpts from")
        if len(pool) < plan[kind]:
            # Fewer excerpts than asked would leave the study short without a word: say so instead.
            asked = f"--n {plan[kind]}" if mix is None else f"the mix's {plan[kind]} {kind}s"
            raise InputError(
                f"{asked}: {run_dir} holds only {len(pool)} {kind} excerpt{'s' if len(pool) != 1 else ''} "
                f"that can be drawn (no counsellor turn in two excerpts); ask for at most {len(pool)}"
            )
        candidates[kind] = pool
        drawn = draw(pool, plan[kind], rng, vocab.levels)
        used.update(r.session_id for r in drawn)
        chosen += [(kind, r) for r in drawn]
    rng.shuffle(chosen)
    names = sorted({u for u in unit_of.values()} & {r.counsellor for pool in candidates.values() for r in pool})
    codes = [f"S{i + 1}" for i in range(len(names))]
    rng.shuffle(codes)
    system_of = dict(zip(names, codes))
    choices = Choices(severity=list(vocab.levels), issues=sorted(vocab.issues))
    excerpts, entries, ids = [], {}, set()
    for kind, r in chosen:
        eid = f"e{rng.getrandbits(48):012x}"
        while eid in ids:
            eid = f"e{rng.getrandbits(48):012x}"
        ids.add(eid)
        s = sessions[r.session_id]
        messages = _up_to_reply(conversation(s), r.reply_index + r.replies - 1)
        at = [i for i, m in enumerate(messages) if m["role"] == "assistant"][r.reply_index :]
        rate = [RatedTurn(turn_id=f"{eid}.{k + 1}", position=k + 1, message_index=i) for k, i in enumerate(at)]
        excerpts.append(
            Excerpt(
                excerpt_id=eid,
                unit=kind,
                system=system_of[r.counsellor],
                system_prompt=s.counsellor_system_prompt,
                messages=messages,
                rate=rate,
                choices=choices,
                annotation=ExcerptAnnotation(turns=[TurnAnnotation(turn_id=t.turn_id) for t in rate]),
            ).model_dump(mode="json")
        )
        entries[eid] = KeyEntry(
            unit=kind,
            session_id=r.session_id,
            reply_indices=list(range(r.reply_index, r.reply_index + r.replies)),
            turn_ids=[t.turn_id for t in rate],
            reply_index=r.reply_index,
            counsellor=s.counsellor,
            patient_engine=s.patient_engine,
            system_unit=r.counsellor,
            patient_id=s.patient_id,
            session_index=s.session_index,
            judged_severity=r.stratum,
        ).model_dump(mode="json")
    by_unit: dict[str, Any] = {}
    for kind, pool in candidates.items():
        table: dict[str, dict[str, dict[str, int]]] = defaultdict(
            lambda: defaultdict(lambda: {"available": 0, "drawn": 0})
        )
        for r in pool:
            table[r.counsellor][r.stratum]["available"] += 1
        for k, r in chosen:
            if k == kind:
                table[r.counsellor][r.stratum]["drawn"] += 1
        by_unit[kind] = {c: dict(v) for c, v in sorted(table.items())}
    drawn_by_unit = {k: sum(1 for x, _ in chosen if x == k) for k in plan}
    summary = {
        "run_dir": str(run_dir),
        "seed": seed,
        "requested": plan,
        "drawn": len(chosen),
        "real_sessions": len(real_sessions),
        "real_excerpts": sum(r.session_id in real_sessions for _, r in chosen),
        "drawn_by_unit": drawn_by_unit,
        "rated_turns": sum(r.replies for _, r in chosen),
        "judge": judge,
        "systems": {code: name for name, code in system_of.items()},
        **({"strata": by_unit[next(iter(plan))]} if len(plan) == 1 else {}),
        "strata_by_unit": by_unit,
    }
    atomic_write_jsonl(out, excerpts)
    atomic_write_json(key, {**summary, "excerpts": entries}, private=True)  # it un-blinds the excerpts
    return {**summary, "out": str(out), "key": str(key)}


def units(sessions: dict[str, SampledSession]) -> dict[str, str]:
    """Per session, what the sample balances and blinds: the system as the MHQR report ranks it — the
    counsellor, or `engine/counsellor` when the run holds sessions of several patient engines — so one engine's
    sessions cannot crowd out the other's and the codes do not pool the two."""
    by_engine = several(s.patient_engine for s in sessions.values())
    return {sid: report_label(s.patient_engine, s.counsellor, by_engine) for sid, s in sessions.items()}


def _up_to_reply(messages: list[dict[str, str]], reply_index: int) -> list[dict[str, str]]:
    k = -1
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            k += 1
            if k == reply_index:
                return messages[: i + 1]
    raise InputError(f"reply {reply_index} not in the conversation")
