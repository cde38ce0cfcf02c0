"""Blinded samples for the three human protocols, each written as a task folder with its key apart
(MindEval2 §3.4 and §4.3 / App. E; PatientAct §4.1–4.2 / App. D).

- `sample_mhqr`: counsellor replies for MHQR, drawn by `mindsim judge sample` (stratified by counsellor and
  judged severity), or read from a file it wrote; its excerpt ids are kept, so the export reads back into
  `mindsim judge agreement` with the key.
- `sample_realism`: windows of 1, 5 or 9 turns of patient replies from any mix of systems (run folders,
  other simulators' session JSONL) and, optionally, real conversations the user supplies as chat JSONL;
  every patient reply in a window is rated. Even over systems, window sizes cycled within each system,
  windows of one conversation never overlap.
- `sample_patientact_sessions`: whole sessions (PatientAct: ten per condition per system), even over systems.
- `sample_patientact_profiles`: PatientAct profiles with their psychological formulation; the seeds
  (attachment style, core-belief theme) go to the key only; each rater's queue ends with the diversity item.

Every sample is blind: systems become opaque codes kept in the items file but never sent to the page, item
ids are random, the order is shuffled; the map back is in the key. The same inputs and seed give the same
bytes.
"""

from __future__ import annotations

import json
import random
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from pydantic import BaseModel

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.io import read_jsonl
from mindsimkit.mindcore.layout import RunLayout
from mindsimkit.mindcore.manifest import verify_run
from mindsimkit.mindsim_app.annotate import tasks, units
from mindsimkit.mindsim_app.annotate.protocol import DIVERSITY
from mindsimkit.mindsim_app.annotate.tasks import Design, Header
from mindsimkit.mindsim_app.exports.write import NothingSelected
from mindsimkit.profilegen.schemas import Profile


# -- MHQR ---------------------------------------------------------------------------------------------------


def sample_mhqr(
    out: Path,
    design: Design,
    *,
    run_dir: Optional[Path] = None,
    n: Optional[int] = None,
    excerpts: Optional[Path] = None,
    excerpts_key: Optional[Path] = None,
    seed: int = 0,
    judge: Optional[str] = None,
    key: Optional[Path] = None,
    unit: str = "reply",
    mix: Optional[dict[str, int]] = None,
    real: Sequence[Path] = (),
) -> dict[str, Any]:
    """A task of MHQR units, from a run folder (drawn here by the judge's sampler: `n` excerpts of `unit`,
    or a `mix`, with `real` sessions mixed in when given) or an excerpt file it wrote. A task holding real
    sessions' text is marked never-publish, as the realism task is."""
    if (run_dir is None) == (excerpts is None):
        raise InputError(
            "give a run folder (RUN_DIR with --n) or --excerpts FILE (from `mindsim judge sample`), not both"
        )
    with tempfile.TemporaryDirectory() as tmp:
        if run_dir is not None:
            from mindsimkit.judge.sample import sample_excerpts

            if not n and not mix:
                raise InputError("--n (with --unit) or --mix paper: how many excerpts to draw from the run")
            _intact(Path(run_dir), RunLayout(run_dir).sessions.parquet)
            excerpts, excerpts_key = Path(tmp) / "excerpts.jsonl", Path(tmp) / "excerpts.key.json"
            sample_excerpts(
                run_dir, n, excerpts, seed=seed, key=excerpts_key, judge=judge, unit=unit, mix=mix, real=list(real)
            )
        elif excerpts is None:  # refused above: neither a run folder nor excerpts
            raise InputError("give a run folder (RUN_DIR with --n) or --excerpts FILE (from `mindsim judge sample`)")
        elif real:
            raise InputError(
                "--real mixes real sessions into a draw from RUN_DIR; with --excerpts, draw them in "
                "`mindsim judge sample --real` instead"
            )
        excerpts_key = Path(excerpts_key) if excerpts_key else Path(excerpts).with_suffix(".key.json")
        rows = [obj for _, obj in read_jsonl(excerpts)]
        judge_key = tasks.load_key(excerpts_key)
    if not rows:
        raise InputError(f"{excerpts}: no excerpts")
    items = units.mhqr_items(rows, str(excerpts))
    entries = judge_key.get("excerpts") or {}
    missing = [it.item_id for it in items if it.item_id not in entries]
    if missing:
        raise InputError(
            f"{excerpts_key}: excerpt {missing[0]!r} is not in the key; give the key written with the excerpts"
        )
    rng = random.Random(seed)
    out_items = [
        {
            "item_id": it.item_id,
            "protocol": "mhqr",
            "kind": it.unit,
            "system": it.system,
            "display": {"system_prompt": it.system_prompt, "messages": it.messages},
            "units": it.units,
        }
        for it in items
    ]
    assignments = tasks.assign([it.item_id for it in items], design, rng, {it.item_id: it.system for it in items})
    # Real text can come from this draw or from an excerpt file drawn with `judge sample --real`: the key says.
    real_text = any(e.get("patient_engine") == "real" for e in (entries[it.item_id] for it in items))
    header = Header(
        protocol="mhqr",
        seed=seed,
        items=len(items),
        units=sum(len(it.units) for it in items),
        design=design,
        real_text=real_text,
        publish="never" if real_text else "allowed",
        notice=tasks.REAL_TEXT_NOTICE if real_text else None,
        sampler={"n": n, "unit": None if mix else unit, "mix": mix},
    )
    key_body = {
        "systems": judge_key.get("systems", {}),
        "excerpts": {it.item_id: entries[it.item_id] for it in items},
        "judge_sample": {k: v for k, v in judge_key.items() if k not in ("excerpts",)},
        "inputs": {
            "run_dir": str(run_dir) if run_dir else None,
            "judge": judge,
            "excerpts": None if run_dir else str(excerpts),
            "real": [str(p) for p in real],
        },
    }
    return tasks.write_task(out, header, out_items, assignments, key_body, key)


# -- sources of conversations (realism, PatientAct sessions) -------------------------------------------------


@dataclass(frozen=True)
class Source:
    system: str
    conversation_id: str
    patient_id: str
    session_index: Optional[int]
    origin: str
    real: bool
    messages: list[dict[str, str]]


def _intact(run: Path, sessions: Path) -> None:
    """A run folder a task is drawn from must hold what its manifest lists (raters must not rate the leftovers
    of a damaged folder). A folder without sessions is left to the loader, which names what is missing."""
    if sessions.is_file():
        verify_run(run, needs=["simulation"], optional=["judge"])  # judgments, when there, set the strata


def _named(spec: str) -> tuple[Optional[str], Path]:
    """`NAME=PATH` or `PATH`."""
    if "=" in spec and not Path(spec).exists():
        name, path = spec.split("=", 1)
        return name.strip() or None, Path(path)
    return None, Path(spec)


def load_sources(
    runs: Sequence[str] = (), sessions: Sequence[str] = (), real: Sequence[str] = (), patient_role: str = "user"
) -> list[Source]:
    """Conversations of run folders, other simulators' session files and real chat JSONL, labelled by system:
    the name given as NAME=PATH, else the patient engine (with PatientAct ablations), else `real`."""
    from mindsimkit.judge.inputs import load_sessions
    from mindsimkit.judge.patientact import jsonl_system_labels, parquet_system_labels

    out: list[Source] = []
    for spec in runs:
        name, path = _named(spec)
        if not path.is_dir():
            raise InputError(f"--run {spec}: no such run folder")
        parquet = RunLayout(path).sessions.parquet
        _intact(path, parquet)
        labels = parquet_system_labels(parquet) if parquet.is_file() else {}
        for s in load_sessions(path):
            out.append(
                Source(
                    name or labels.get(s.session_id, "mindsim"),
                    s.session_id,
                    s.patient_id,
                    s.session_index,
                    str(path),
                    False,
                    units.shown(s.messages),
                )
            )
    for spec in sessions:
        name, path = _named(spec)
        labels = parquet_system_labels(path) if path.suffix == ".parquet" else jsonl_system_labels(path)
        for s in load_sessions(path.parent, path):
            out.append(
                Source(
                    name or labels.get(s.session_id) or path.stem,
                    s.session_id,
                    s.patient_id,
                    s.session_index,
                    str(path),
                    False,
                    units.shown(s.messages),
                )
            )
    for spec in real:
        from mindsimkit.validation.transcripts import load_transcripts

        name, path = _named(spec)
        ts = load_transcripts(path, patient_role=patient_role)
        for c in ts.conversations:
            msgs = units.shown([m.model_dump() for m in c.messages], patient_role)
            out.append(Source(name or "real", c.conversation_id, c.patient_id, None, str(path), True, msgs))
    if not out:
        raise InputError("no conversations: give --run DIR, --sessions FILE or --real FILE")
    seen: set[tuple[str, str]] = set()
    for src in out:
        if (src.system, src.conversation_id) in seen:
            raise InputError(
                f"conversation {src.conversation_id!r} of system {src.system!r} comes twice; "
                "name each input (NAME=PATH) or remove the duplicate"
            )
        seen.add((src.system, src.conversation_id))
    return sorted(out, key=lambda s: (s.system, s.conversation_id))


def _quotas(n: int, systems: list[str], rng: random.Random) -> dict[str, int]:
    order = list(systems)
    rng.shuffle(order)
    q = {s: n // len(systems) for s in systems}
    for s in order[: n % len(systems)]:
        q[s] += 1
    return q


# -- realism ------------------------------------------------------------------------------------------------


def sample_realism(
    out: Path,
    design: Design,
    *,
    n: int,
    runs: Sequence[str] = (),
    sessions: Sequence[str] = (),
    real: Sequence[str] = (),
    windows: Sequence[int] = (1, 5, 9),
    seed: int = 0,
    first_sessions: bool = False,
    max_turns: Optional[int] = None,
    patient_role: str = "user",
    key: Optional[Path] = None,
) -> dict[str, Any]:
    """`n` windows, even over systems; inside a system the window sizes take turns."""
    if n < 1:
        raise InputError(f"--n {n}: draw at least one window")
    if not windows or any(w < 1 for w in windows):
        raise InputError(f"--windows {','.join(map(str, windows))}: sizes must be positive turn counts")
    convs = load_sources(runs, sessions, real, patient_role)
    if first_sessions:
        convs = [c for c in convs if c.session_index in (None, 0)]
    rng = random.Random(seed)
    by: dict[str, list[tuple[Source, list[units.Turn]]]] = defaultdict(list)
    for c in convs:
        ts = units.turns(c.messages)[:max_turns] if max_turns else units.turns(c.messages)
        if ts:
            by[c.system].append((c, ts))
    if not by:
        raise InputError("no conversation has a patient reply to rate (check --first-sessions / --max-turns)")
    systems = sorted(by)
    codes = tasks.system_codes(systems, rng)
    quota = _quotas(n, systems, rng)
    drawn: list[tuple[str, Source, int, int, list[units.Turn]]] = []
    short: dict[str, int] = {}
    for system in systems:
        pool = list(by[system])
        rng.shuffle(pool)
        taken: dict[str, list[tuple[int, int]]] = defaultdict(list)
        got = 0
        for j in range(quota[system]):
            size = windows[j % len(windows)]
            for step in range(len(pool)):
                c, ts = pool[(j + step) % len(pool)]
                free = [
                    s
                    for s in range(len(ts) - size + 1)
                    if all(s + size <= a or s >= b for a, b in taken[c.conversation_id])
                ]
                if free:
                    start = rng.choice(free)
                    taken[c.conversation_id].append((start, start + size))
                    drawn.append((system, c, start, size, ts))
                    got += 1
                    break
        if got < quota[system]:
            short[system] = quota[system] - got
    if not drawn:
        # A task with no item would open as an empty page: refused like an export that selects nothing.
        longest = max(len(ts) for pool in by.values() for _, ts in pool)
        raise NothingSelected(
            f"annotate sample realism: no window drawn: --windows {','.join(map(str, windows))} asks for more patient "
            f"turns than any conversation has (the longest has {longest}); give --windows {longest} or "
            "fewer, or runs with longer sessions"
        )
    rng.shuffle(drawn)
    ids = tasks.item_ids(rng, len(drawn))
    items: list[dict[str, Any]] = []
    entries: dict[str, dict[str, Any]] = {}
    for iid, (system, c, start, size, ts) in zip(ids, drawn):
        msgs, us = units.window(ts, start, size)
        items.append(
            {
                "item_id": iid,
                "protocol": "realism",
                "kind": "window",
                "system": codes[system],
                "display": {"messages": msgs, "window": size},
                "units": us,
            }
        )
        entries[iid] = {
            "system": system,
            "code": codes[system],
            "conversation_id": c.conversation_id,
            "patient_id": c.patient_id,
            "session_index": c.session_index,
            "source": c.origin,
            "real": c.real,
            "window": size,
            "turns": [u["turn"] for u in us],
        }
    real_text = any(e["real"] for e in entries.values())
    assignments = tasks.assign(ids, design, rng, {i["item_id"]: i["system"] for i in items})
    header = Header(
        protocol="realism",
        seed=seed,
        items=len(items),
        units=sum(len(i["units"]) for i in items),
        design=design,
        real_text=real_text,
        publish="never" if real_text else "allowed",
        notice=tasks.REAL_TEXT_NOTICE if real_text else None,
        sampler={"n": n, "windows": list(windows), "first_sessions": first_sessions, "max_turns": max_turns},
    )
    # Input names and paths can name a system, so they go to the key, not to the served folder.
    summary = {
        "systems": {code: name for name, code in codes.items()},
        "requested": n,
        "drawn": len(items),
        "short": short,
        "real_systems": sorted({e["system"] for e in entries.values() if e["real"]}),
        "inputs": {"runs": list(runs), "sessions": list(sessions), "real": list(real)},
    }
    written = tasks.write_task(out, header, items, assignments, {**summary, "items": entries}, key)
    return {**written, **{k: summary[k] for k in ("requested", "drawn", "short")}, "systems": len(codes)}


# -- PatientAct sessions ------------------------------------------------------------------------------------


def sample_patientact_sessions(
    out: Path,
    design: Design,
    *,
    runs: Sequence[Path] = (),
    sessions: Optional[Path] = None,
    per_system: Optional[int] = None,
    per_group: bool = False,
    systems: Sequence[str] = (),
    seed: int = 0,
    key: Optional[Path] = None,
    rubric: Any = "patientact_session",
) -> dict[str, Any]:
    """Whole sessions, `per_system` of each system (all when not given; with `per_group`, of each system within
    each patient group; of `systems` only when given), rated on a conversation rubric (PatientAct's five scales
    by default; any rubric id or file of unit `conversation`)."""
    from mindsimkit.judge import rubrics as registry
    from mindsimkit.judge.patientact import load_items

    spec = rubric if isinstance(rubric, registry.Rubric) else registry.load(rubric)
    if spec.unit != "conversation":
        raise InputError(
            f"--rubric {spec.id}: it rates one {spec.unit}; whole sessions need a rubric of unit conversation"
        )

    for r in runs:
        _intact(Path(r), RunLayout(r).sessions.parquet)
    found = load_items([Path(r) for r in runs], sessions)
    if systems:
        present = sorted({it.system for it in found})
        unknown = sorted(set(systems) - set(present))
        if unknown:
            raise InputError(
                f"--system {', '.join(unknown)}: no such system in the inputs; they hold {', '.join(present) or 'none'}"
            )
        found = [it for it in found if it.system in systems]
    rng = random.Random(seed)
    by: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for it in sorted(found, key=lambda i: (i.system, i.item_id)):
        # A session whose run names no group is a stratum of its own rather than dropped.
        by[(it.system, (it.group or "(no group)") if per_group else "")].append(it)
    codes = tasks.system_codes(sorted({system for system, _ in by}), rng)
    chosen = []
    for stratum in sorted(by):
        pool = list(by[stratum])
        rng.shuffle(pool)
        chosen += pool[:per_system] if per_system else pool
    if not chosen:
        raise InputError("no sessions to rate")
    rng.shuffle(chosen)
    ids = tasks.item_ids(rng, len(chosen))
    speaker = {"Client": "patient", "Counsellor": "counsellor"}
    items: list[dict[str, Any]] = []
    entries: dict[str, dict[str, Any]] = {}
    for iid, it in zip(ids, chosen):
        msgs = [{"speaker": speaker[s], "text": t} for s, t in it.transcript]
        items.append(
            {
                "item_id": iid,
                "protocol": spec.id,
                "kind": "session",
                "system": codes[it.system],
                "display": {"messages": msgs},
                "units": [{"unit": "0"}],
            }
        )
        entries[iid] = {
            "judge_item_id": it.item_id,
            "session_id": it.session_id,
            "system": it.system,
            "code": codes[it.system],
            "patient_id": it.patient_id,
            "counsellor": it.counsellor,
            "session_index": it.session_index,
            "source": it.source,
            **({"group": it.group} if per_group else {}),
        }
    assignments = tasks.assign(ids, design, rng, {i["item_id"]: i["system"] for i in items})
    own = None if registry.builtin().get(spec.id) == spec else registry.carried(spec)
    header = Header(
        protocol=spec.id,
        seed=seed,
        items=len(items),
        units=len(items),
        design=design,
        sampler={"per_system": per_system, **({"per_group": True} if per_group else {})},
        rubric=own,
    )
    key_body = {
        "systems": {c: s for s, c in codes.items()},
        "items": entries,
        # The systems chosen name what raters must not know: the key holds them, the served header does not.
        "inputs": {
            "runs": [str(r) for r in runs],
            "sessions": str(sessions) if sessions else None,
            **({"systems": sorted(set(systems))} if systems else {}),
        },
    }
    return {**tasks.write_task(out, header, items, assignments, key_body, key), "systems": len(codes)}


# -- PatientAct profiles ------------------------------------------------------------------------------------


def _maybe_json(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return json.loads(v)
        except ValueError:
            return None
    return v


def profile_sections(profile: Profile, formulation: Optional[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a rater reads of a profile: the identification task's card (`mindsim.patientact.card`, blind), the
    text the profile judge reads too. Never the attachment style or theme by name, nor the core belief the theme
    is mapped from."""
    from mindsimkit.mindsim.patientact.card import profile_card
    from mindsimkit.profilegen.psych import PsychFormulation

    psych = PsychFormulation.model_validate(formulation) if formulation else None
    return [s.as_dict() for s in profile_card(profile, psych, blind=True)]


class _PatientActState(BaseModel):
    patient_id: str
    session_index: int
    patientact: Any = None  # the session's PatientAct state (None for other engines' sessions)


def load_profiles(runs: Sequence[Path]) -> list[dict[str, Any]]:
    """Profiles that played PatientAct sessions: profile row, seed and formulation, per run folder."""
    out = []
    for run in runs:
        layout = RunLayout(run)
        ppath, spath = layout.profiles.parquet, layout.sessions.parquet
        for p in (ppath, spath):
            if not p.is_file():
                raise InputError(f"{p} not found: give the --out folder of a `mindsim run` with the PatientAct engine")
        verify_run(run, needs=["profiles", "simulation"])
        profiles = {r.profile_id: r for r in layout.profiles.rows(Profile)}
        states = layout.sessions.rows(_PatientActState)
        if all(r.patientact is None for r in states):
            raise InputError(
                f"{spath}: no PatientAct sessions (no patientact state); the profile protocol needs "
                "the psychological seed of simulation.patient_engine: patientact"
            )
        seeds: dict[str, dict[str, Any]] = {}
        for r in states:
            state = _maybe_json(r.patientact)
            if isinstance(state, dict) and r.patient_id not in seeds:
                seeds[r.patient_id] = state
        for pid in sorted(set(seeds) & set(profiles)):
            st = seeds[pid]
            dec = _maybe_json(st.get("decomposition")) or {}
            out.append(
                {
                    "profile_id": pid,
                    "source": str(run),
                    "attachment": st["attachment"],
                    "theme": st["theme"],
                    "sections": profile_sections(profiles[pid], _maybe_json(dec.get("formulation"))),
                }
            )
    if not out:
        raise InputError("no profile with a PatientAct seed in " + ", ".join(map(str, runs)))
    return out


def sample_patientact_profiles(
    out: Path,
    design: Design,
    *,
    runs: Sequence[Path],
    n: Optional[int] = None,
    seed: int = 0,
    key: Optional[Path] = None,
) -> dict[str, Any]:
    """`n` profiles (all when not given) for the four scales and the two picks; every rater ends with the
    diversity rating."""
    found = load_profiles(runs)
    rng = random.Random(seed)
    pool = sorted(found, key=lambda p: (p["source"], p["profile_id"]))
    rng.shuffle(pool)
    chosen = pool[:n] if n else pool
    ids = tasks.item_ids(rng, len(chosen))
    items: list[dict[str, Any]] = []
    entries: dict[str, dict[str, Any]] = {}
    for iid, p in zip(ids, chosen):
        items.append(
            {
                "item_id": iid,
                "protocol": "patientact_profile",
                "kind": "profile",
                "system": "profile",
                "display": {"sections": p["sections"]},
                "units": [{"unit": "0"}],
            }
        )
        entries[iid] = {
            "profile_id": p["profile_id"],
            "source": p["source"],
            "truth": {"attachment": p["attachment"], "theme": p["theme"]},
        }
    assignments = tasks.assign(ids, design, rng)
    # PatientAct App. D.1: the diversity question comes once, after all of a rater's profiles.
    items.append(
        {
            "item_id": DIVERSITY,
            "protocol": DIVERSITY,
            "kind": DIVERSITY,
            "system": "profile",
            "display": {},
            "units": [{"unit": "0"}],
        }
    )
    for r in assignments:
        assignments[r].append(DIVERSITY)
    seen_words = _seed_words_shown(items[:-1], entries)
    header = Header(
        protocol="patientact_profile", seed=seed, items=len(items), units=len(items), design=design, sampler={"n": n}
    )
    key_body = {"items": entries, "seed_words_shown": seen_words, "inputs": {"runs": [str(r) for r in runs]}}
    return {**tasks.write_task(out, header, items, assignments, key_body, key), "seed_words_shown": seen_words}


def _seed_words_shown(items: list[dict[str, Any]], entries: dict[str, Any]) -> int:
    """Profiles whose shown text names their own attachment style or theme word (kept, but counted: the
    formulation is written from the seed and may use the word in passing)."""
    n = 0
    for it in items:
        text = " ".join(" ".join(s["lines"]) for s in it["display"]["sections"]).lower()
        truth = entries[it["item_id"]]["truth"]
        n += any(w in text for w in truth.values())
    return n
