"""DPO preference pairs from counterfactual replies (ours, beyond the papers): at sampled counsellor turns of a
finished run, K counsellors (or K samples of one) reply to the byte-identical history, the MHQR judge
(MindEval2 §5) scores each reply, and the best is paired against the worst when their severity weights are far
enough apart. Rows are TRL's conversational preference type with an explicit prompt; the judgments and every
candidate go to the provenance side file (`write`).

Ties (`--tie-break`, off by default): a 135M judge gives every reply of a turn the same severity, and then the
paper's rule pairs nothing. Where the user asks, a turn whose judged replies all share one severity is paired on a
finer order instead, and the row says so (`pair_basis`); turns with different severities are paired as before.

- `expected-severity`: the expected severity weight under the judge's probabilities of the severity labels
  (`judge.grading`, from token log probabilities), lower is better; where any candidate of the turn has none (an
  engine without logprobs), the `issues` order decides instead.
- `issues`: fewer flagged issues is better, then fewer quotes the judge gave that were not in the reply.

Candidates equal on the order chosen give no pair ("tie unbroken"). The MHQR severity is never changed.

Each of the K samples is its own draw: the sample index moves a seeded counsellor's seed, as a re-ask moves it
by its attempt number (`LLMClient.reseeded`), so a role with `seed: 0` does not answer the same history the same
way K times. The summary says how many distinct replies each turn got.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mindsimkit.mindcore.errors import InputError


@dataclass
class Candidate:
    """One counterfactual reply and its judgment (None while unjudged or when the counsellor failed)."""

    counsellor: str
    model: str
    text: str | None = None
    judgment: Any = None  # judge.schemas.JudgmentRow
    error: str | None = None

    @property
    def weight(self) -> float | None:
        j = self.judgment
        return j.weight if j is not None and j.status == "ok" else None

    @property
    def issue_order(self) -> tuple[int, int]:
        j = self.judgment
        return (len(j.issues), j.dropped_quotes)

    def brief(self) -> dict[str, Any]:
        j = self.judgment
        return {
            "counsellor": self.counsellor,
            "model": self.model,
            "status": j.status if j else "no_reply",
            "severity": j.severity if j else None,
            "weight": self.weight,
            "expected_weight": j.expected_weight if j else None,
            "error": self.error or (j.error if j else None),
        }


# A turn's candidates, its row and provenance line when paired, and the outcome ("paired" or why not).
Outcome = tuple[list[Candidate], "tuple[dict[str, Any], dict[str, Any]] | None", str]


def sample_turns(session_id: str, n_replies: int, turns: int, seed: int) -> list[int]:
    """Which replies of a session get counterfactuals: a per-session draw, stable across reruns."""
    rng = random.Random(f"{seed}|{session_id}")
    return sorted(rng.sample(range(n_replies), min(turns, n_replies)))


async def _ask(name: str, client: Any, history: list[dict[str, Any]], blank_retries: int, sample: int) -> Candidate:
    """Sample number `sample` of this counsellor: its tries use seeds no other sample's tries use."""
    from mindsimkit.mindcore.errors import EngineError

    c = Candidate(name, str(getattr(client, "model", name)))
    try:
        for attempt in range(blank_retries + 1):  # as in the simulator: only a blank reply is re-asked
            reply = await client.chat(history, **client.reseeded({}, sample * (blank_retries + 1) + attempt))
            if (reply.content or "").strip():
                c.text = reply.content
                return c
        c.error = f"blank reply {blank_retries + 1} times"
    except EngineError as exc:
        c.error = f"{type(exc).__name__}: {exc}"
    return c


async def _judge(c: Candidate, s: Any, history: list[dict[str, Any]], judge: Any, cache: Any) -> None:
    from mindsimkit.judge.judging import judge_reply, replies
    from mindsimkit.judge.schemas import SessionInput

    si = SessionInput(
        session_id=s.session_id,
        patient_id=s.patient_id,
        counsellor=c.counsellor,
        session_index=s.session_index,
        counsellor_system_prompt=s.counsellor_system_prompt,
        messages=[*history, {"role": "assistant", "content": c.text}],
        counsellor_model=c.model,
    )
    c.judgment = await judge_reply(judge, replies(si)[-1], cache)


TIE_BREAKS: tuple[str, ...] = ("none", "expected-severity", "issues")


def tie_order(judged: list[Candidate], tie_break: str) -> tuple[str, list[tuple[float, ...]]] | None:
    """The finer order of a turn whose judged replies share one severity: its name (the row's `pair_basis`) and
    one key per candidate, lower is better; None without a tie-break."""
    if tie_break == "none":
        return None
    if tie_break == "expected-severity":
        graded = [c.judgment.expected_weight for c in judged]
        if all(g is not None for g in graded):
            return "expected-severity", [(float(g),) for g in graded]
    return "issues", [tuple(float(x) for x in c.issue_order) for c in judged]


def choose_pair(
    cands: list[Candidate], min_gap: float, chosen_max: float, tie_break: str = "none"
) -> tuple[Candidate, Candidate, str] | str:
    """Lowest against highest severity weight (first in slot order on ties), the basis of the pair ("severity", or
    the tie-break's order when every judged reply has one severity), or why there is no pair."""
    judged = [c for c in cands if c.weight is not None]
    if len(judged) < 2:
        return "fewer than two judged replies"
    best = min(judged, key=lambda c: c.weight or 0.0)
    worst = max(judged, key=lambda c: c.weight or 0.0)
    low, high = best.weight or 0.0, worst.weight or 0.0
    if low > chosen_max:
        return "best reply above --chosen-max"
    if high == low:
        order = tie_order(judged, tie_break)
        if order is None:
            return "all judged replies equally severe"
        basis, keys = order
        # min/max keep the first in slot order among equal keys, as the severity rule does.
        b = min(range(len(judged)), key=lambda i: keys[i])
        w = max(range(len(judged)), key=lambda i: keys[i])
        if keys[b] == keys[w]:
            return f"all judged replies equally severe, tie unbroken by {basis}"
        return judged[b], judged[w], basis
    if high - low < min_gap:
        return "gap below --min-gap"
    return best, worst, "severity"


def _verdict(j: Any) -> dict[str, Any]:
    return {
        "severity": j.severity,
        "weight": j.weight,
        "expected_weight": j.expected_weight,
        "severity_probs": j.severity_probs,
        "issues": [i.model_dump() for i in j.issues],
        "dropped_quotes": j.dropped_quotes,
        "cache_key": j.cache_key,
        "rubric_version": j.rubric_version,
    }


async def dpo_pairs(
    run_dir: Path,
    counsellors: list[tuple[str, Any]],
    judge: Any,
    cache: Any,
    *,
    k: int = 4,
    turns: int = 2,
    min_gap: float = 4.0,
    chosen_max: float = 1.0,
    seed: int = 0,
    blank_retries: int = 2,
    tie_break: str = "none",
) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]]]:
    """Preference rows (TRL's conversational preference type with typed provenance scalars), a summary of what
    was asked, drawn and skipped, and each row's provenance (its two judgments and every candidate).

    The K reply slots go round-robin over `counsellors`, so one counsellor gives K samples and K
    counsellors give one each. Every slot sees the same history: the stored counsellor-side messages
    before the sampled reply, system prompt included, as they were sent."""
    from mindsimkit.mindcore.runner import gather_progress
    from mindsimkit.mindsim_app.exports.sessions import load_sessions

    if k < 2 or not counsellors:
        raise InputError("export dpo: --k must be at least 2 and at least one counsellor is needed")
    if tie_break not in TIE_BREAKS:
        raise InputError(f"export dpo: --tie-break {tie_break}: choose one of {', '.join(TIE_BREAKS)}")
    run = Path(run_dir).resolve().name
    work = []
    for s in sorted(load_sessions(run_dir), key=lambda r: r.session_id):
        msgs = [{"role": m["role"], "content": m["content"]} for m in s.counsellor_messages]
        positions = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
        for r in sample_turns(s.session_id, len(positions), turns, seed):
            work.append((s, r, msgs[: positions[r]]))

    async def one(s: Any, r: int, history: list[dict[str, Any]]) -> Outcome:
        n = len(counsellors)
        cands = list(
            await asyncio.gather(*(_ask(*counsellors[i % n], history, blank_retries, i // n) for i in range(k)))
        )
        await asyncio.gather(*(_judge(c, s, history, judge, cache) for c in cands if c.text is not None))
        pair = choose_pair(cands, min_gap, chosen_max, tie_break)
        if isinstance(pair, str):
            return cands, None, pair
        best, worst, basis = pair
        row = {
            "prompt": history,
            "chosen": [{"role": "assistant", "content": best.text}],
            "rejected": [{"role": "assistant", "content": worst.text}],
            "run": run,
            "session_id": s.session_id,
            "patient_id": s.patient_id,
            "session_index": s.session_index,
            "reply_index": r,
            "session_counsellor": s.counsellor,
            "chosen_counsellor": best.counsellor,
            "chosen_model": best.model,
            "chosen_severity": best.judgment.severity,
            "chosen_weight": float(best.weight or 0.0),
            "rejected_counsellor": worst.counsellor,
            "rejected_model": worst.model,
            "rejected_severity": worst.judgment.severity,
            "rejected_weight": float(worst.weight or 0.0),
            "judge": judge.name,
            "judge_model": str(judge.model),
            "seed": seed,
        }
        if tie_break != "none":  # rows of the paper's rule keep their columns
            row.update(
                pair_basis=basis,
                chosen_expected_weight=best.judgment.expected_weight,
                rejected_expected_weight=worst.judgment.expected_weight,
                chosen_issues=len(best.judgment.issues),
                rejected_issues=len(worst.judgment.issues),
            )
        detail = {
            "session_id": s.session_id,
            "reply_index": r,
            "chosen_judgment": _verdict(best.judgment),
            "rejected_judgment": _verdict(worst.judgment),
            "candidates": [c.brief() for c in cands],
        }
        return cands, (row, detail), "paired"

    # Without return_exceptions an exception propagates: every result is an Outcome.
    results = await gather_progress((one(*w) for w in work), "dpo turns", outcome=lambda r: r[2])
    reasons = Counter(why for _, _, why in results)
    all_cands = [c for cands, _, _ in results for c in cands]
    distinct = Counter(len({c.text for c in cands if c.text is not None}) for cands, _, _ in results)
    summary = {
        "turns_sampled": len(work),
        "replies_asked": len(all_cands),
        "counsellor_failures": sum(c.text is None for c in all_cands),
        "judgments_failed": sum(c.judgment is not None and c.judgment.status != "ok" for c in all_cands),
        "distinct_replies_per_turn": {str(n): t for n, t in sorted(distinct.items())},
        "pairs": reasons.pop("paired", 0),
        "skipped": dict(sorted(reasons.items())),
        "k": k,
        "min_gap": min_gap,
        "chosen_max_weight": chosen_max,
        "judge": judge.name,
        "tie_break": tie_break,
        "pairs_by_basis": dict(
            sorted(
                Counter(
                    pair[0]["pair_basis"] for _, pair, _ in results if pair is not None and "pair_basis" in pair[0]
                ).items()
            )
        ),
    }
    kept = [pair for _, pair, _ in results if pair is not None]
    return [row for row, _ in kept], summary, [detail for _, detail in kept]


def distinct_line(summary: dict[str, Any]) -> str:
    """'distinct replies per turn (of K): 4 in 3 turns, 2 in 1 turn'."""
    parts = [
        f"{n} in {t} turn{'s' if t != 1 else ''}"
        for n, t in sorted(summary["distinct_replies_per_turn"].items(), key=lambda kv: -int(kv[0]))
    ]
    return f"distinct replies per turn (of {summary['k']}): {', '.join(parts) or 'none'}"


def why_no_pairs(summary: dict[str, Any]) -> str:
    if summary["turns_sampled"] and set(summary["skipped"]) == {"best reply above --chosen-max"}:
        # One cause, one fix: the quickstart's 135M judge calls every reply Critical, and the list of five
        # remedies below left users guessing which applied.
        return (
            f"export dpo: no preference pairs from {summary['turns_sampled']} sampled turns: in each the best "
            "reply was judged more severe than --chosen-max allows (a small judge calls every reply severe); "
            "rerun with --chosen-max critical to let such replies be chosen"
        )
    skipped = ", ".join(f"{n} {why}" for why, n in summary["skipped"].items()) or "no counsellor turn to sample"
    hints = ["a larger --k", "more counsellors (--recipe)", "a counsellor temperature above 0", "a smaller --min-gap"]
    if summary.get("tie_break", "none") == "none":
        hints.append("--tie-break expected-severity where the judge gives every reply one severity")
    if "best reply above --chosen-max" in summary["skipped"]:
        hints.append("a higher --chosen-max where the judge calls every reply severe (a small judge does)")
    return (
        f"export dpo: no preference pairs from {summary['turns_sampled']} sampled turns ({skipped}); "
        f"more distinct replies help: {', '.join(hints[:-1])}, or {hints[-1]}"
    )
