"""Judge one counsellor reply (MindEval2 §3, Appendix G "Judge and score"): one structured call per
reply through a `judge` role, seeing what the paper's judge sees: the counsellor's system prompt as
sent, the conversation so far and the reply.

Prompt layout serves the engine's prefix cache: the system message is the rubric, byte-identical
for every call of a judge; the user message is the counsellor's system prompt, then the transcript
ending with the reply under review, then a fixed closing line. Reply k's prompt is therefore a
prefix of reply k+1's up to the end of reply k.

Evidence is checked like the profile screener's: a quote not found in the reply (after normalising
case, whitespace, quote marks and dashes) is dropped and counted, and the issue stays. Issues the
rubric marks as omissions need no quote; an issue about the reply's words that arrives without a
verifiable quote keeps no quote and counts as dropped.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from mindsimkit.mindcore.errors import EngineError, StructuredOutputError
from mindsimkit.mindcore.exchange import COUNSELLOR, spoken
from mindsimkit.mindcore.io import off_loop
from mindsimkit.mindcore.prompts import render, template_hash
from mindsimkit.mindcore.quotes import normalise, quote_in  # noqa: F401 - part of this module's API
from mindsimkit.mindcore.runner import gather_progress
from mindsimkit.judge.config import JudgeConfig
from mindsimkit.judge.grading import TOP_LOGPROBS, expected_weight, severity_probs
from mindsimkit.judge.presets import DEFAULT as DEFAULT_PRESET, flags_answer_model, flags_outcome, get_preset
from mindsimkit.judge.rubric import Rubric, answer_model, load_rubric
from mindsimkit.judge.schemas import IssueRecord, JudgmentRow, SessionInput

SYSTEM_TEMPLATE = "judge/system.jinja2"
USER_TEMPLATE = "judge/user.jinja2"
TEMPLATES = (SYSTEM_TEMPLATE, USER_TEMPLATE)
SPEAKERS = {"user": "Patient", "assistant": "Counsellor"}
# Most judged replies with a rendered prompt at once (see `judge_all`).
IN_FLIGHT = 256


@dataclass(frozen=True)
class Reply:
    """One counsellor reply in its context: the transcript up to and including it."""

    session: SessionInput
    reply_index: int
    transcript: tuple[tuple[str, str], ...]  # (speaker, text); the last entry is the reply

    @property
    def text(self) -> str:
        return self.transcript[-1][1]


def replies(session: SessionInput, max_replies: int | None = None) -> list[Reply]:
    """Every counsellor reply with text, in order. System messages are skipped (the judge gets the
    system prompt from `counsellor_system_prompt`); tool traffic, if any, is not part of the exchange."""
    seen: list[tuple[str, str]] = []
    out: list[Reply] = []
    for role, content in spoken(session.messages):
        seen.append((SPEAKERS[role], content))
        if role == COUNSELLOR:
            if max_replies is not None and len(out) >= max_replies:
                break
            out.append(Reply(session, len(out), tuple(seen)))
    return out


class Judge:
    """One judge role bound to a rubric. `await judge(reply)` returns a `JudgmentRow`, ok or failed."""

    def __init__(
        self,
        name: str,
        client: Any,
        rubric: Rubric,
        *,
        full_rubric: bool = True,
        max_issues: int | None = None,
        preset: str = DEFAULT_PRESET,
        graded: bool = False,
    ):
        self.name = name
        # Ask for token log probabilities and record the expected severity weight beside the label
        # (`judge.grading`). The label, and so MHQR, is the same either way: the cache key does not change.
        self.graded = graded
        self.client = client
        self.rubric = rubric
        self.preset_name = preset
        self.preset = get_preset(preset)
        self.preset.check(rubric, preset)
        flags = self.preset.answer == "justification_then_flags"
        # A flags answer marks every issue, so a cap on listed issues does not apply to it.
        capped = not flags and max_issues is not None and max_issues < len(rubric.issues)
        # The version names every departure from the full rubric and the default format, so cached judgments
        # never mix them.
        self.rubric_version = (
            rubric.version
            + ("" if full_rubric else "+compact")
            + (f"+max{max_issues}issues" if capped else "")
            + ("" if preset == DEFAULT_PRESET else f"+{preset}")
        )
        self.templates = (self.preset.template, USER_TEMPLATE)
        self.system = render(
            self.preset.template,
            rubric=rubric,
            full=full_rubric,
            categories={c.id: c.name for c in rubric.categories},
            keys={i.id: self.preset.key(i.id) for i in rubric.issues},
            severities={s.id: s.name if self.preset.severity_labels else s.id for s in rubric.severities},
        )
        self.prompt_hashes = {t: template_hash(t) for t in self.templates}
        # A grammar engine is held to the no-issue rule by the schema itself (`rubric.answer_model`).
        self.output = (
            flags_answer_model(rubric, self.preset)
            if flags
            else answer_model(rubric, max_issues, rule_in_schema=bool(getattr(client, "schema_alternatives", False)))
        )

    @property
    def model(self) -> str:
        model: str = self.client.model
        return model

    def messages(self, reply: Reply) -> list[dict[str, str]]:
        user = render(
            USER_TEMPLATE,
            counsellor_system_prompt=reply.session.counsellor_system_prompt,
            transcript=[{"speaker": s, "text": t} for s, t in reply.transcript],
            reply_number=reply.reply_index + 1,
        )
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]

    def key(self, reply: Reply) -> str:
        """Content key: the same judge and model on the same rubric, prompts and context give the
        same judgment, whichever run or session id it came from."""
        blob = json.dumps(
            [
                self.name,
                self.model,
                self.rubric_version,
                self.prompt_hashes,
                reply.session.counsellor_system_prompt,
                reply.transcript,
            ],
            ensure_ascii=False,
        )
        return "j_" + hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]

    async def ask(self, reply: Reply) -> dict[str, Any]:
        """One judged reply as a cacheable outcome: severity, verified issues, dropped quotes."""
        sampling = {"top_logprobs": TOP_LOGPROBS} if self.graded else {}
        answer, raw = await self.client.structured_reply(
            self.messages(reply), self.output, schema_name="mhqr_judgment", **sampling
        )
        graded = {}
        if self.graded:
            # A flags answer has no severity token (its severity follows from the flags): no graded value there.
            probs = (
                None
                if self.preset.answer == "justification_then_flags" or raw.logprobs is None
                else severity_probs(raw.logprobs, [s.id for s in self.rubric.severities], answer.severity)
            )
            graded = {"severity_probs": probs}
        if self.preset.answer == "justification_then_flags":
            return {**flags_outcome(answer, self.rubric, self.preset), **graded}
        issues, dropped = [], 0
        for f in answer.issues:
            quote = f.quote if f.quote and quote_in(f.quote, reply.text) else None
            needs = self.rubric.issue(f.issue).evidence == "quote"
            if (f.quote and quote is None) or (needs and not f.quote):
                dropped += 1
            issues.append(
                {"issue": f.issue, "category": self.rubric.category_of(f.issue), "reason": f.reason, "quote": quote}
            )
        return {"severity": answer.severity, "issues": issues, "dropped_quotes": dropped, **graded}

    def knows_grading(self, outcome: dict[str, Any]) -> bool:
        """Whether a cached outcome serves this judge: a graded judge needs one asked with log probabilities."""
        return not self.graded or "severity_probs" in outcome

    def row(
        self, reply: Reply, key: str, outcome: dict[str, Any] | None = None, error: Exception | None = None
    ) -> JudgmentRow:
        s = reply.session
        base = dict(
            session_id=s.session_id,
            patient_id=s.patient_id,
            counsellor=s.counsellor,
            patient_engine=s.patient_engine,
            counsellor_model=s.counsellor_model,
            session_index=s.session_index,
            reply_index=reply.reply_index,
            reply=reply.text,
            judge=self.name,
            judge_model=self.model,
            judge_engine=self.client.engine_name,
            rubric_version=self.rubric_version,
            prompt_hashes=self.prompt_hashes,
            cache_key=key,
            counsellor_flags=s.reply_flags(reply.reply_index),
            trial=s.trial,
        )
        if outcome is not None:
            probs = outcome.get("severity_probs")
            weights = {s.id: self.rubric.weight(s.id) for s in self.rubric.severities}
            return JudgmentRow(
                **base,
                status="ok",
                severity=outcome["severity"],
                weight=self.rubric.weight(outcome["severity"]),
                severity_probs=probs,
                expected_weight=None if probs is None else expected_weight(probs, weights),
                issues=[IssueRecord(**i) for i in outcome["issues"]],
                dropped_quotes=outcome["dropped_quotes"],
            )
        kind = "invalid_output" if isinstance(error, StructuredOutputError) else "engine"
        return JudgmentRow(**base, status="failed", error=f"{type(error).__name__}: {error}"[:2000], error_kind=kind)


async def judge_reply(
    judge: Judge, reply: Reply, cache: Any, asking: dict[str, "asyncio.Future[dict[str, Any]]"] | None = None
) -> JudgmentRow:
    """Cached outcome if this exact judgment was made before (no request); else ask, checkpoint an
    ok outcome, and turn an engine failure into a failed row. Failures are not cached: a rerun
    tries them again. `asking` (shared by concurrent callers, see `judge_all`): judgments being asked
    right now by key, so identical contexts in flight at once share one request."""
    key = judge.key(reply)
    if cache.has(key):
        cached = cache.read(key)
        if judge.knows_grading(cached):
            return judge.row(reply, key, outcome=cached)
    task = asking.get(key) if asking is not None else None
    if task is None:
        task = asyncio.ensure_future(_ask_and_keep(judge, reply, key, cache))
        if asking is not None:
            asking[key] = task
            task.add_done_callback(lambda _t: asking.pop(key, None))  # by then the cache holds it (or it failed)
    try:
        outcome = await task
    except EngineError as exc:
        return judge.row(reply, key, error=exc)
    return judge.row(reply, key, outcome=outcome)


async def _ask_and_keep(judge: Judge, reply: Reply, key: str, cache: Any) -> dict[str, Any]:
    outcome = await judge.ask(reply)
    await off_loop(cache.write, key, outcome)
    return outcome


def judges_from_config(engines: Any, config: JudgeConfig) -> list[Judge]:
    """One `Judge` per configured judge role, all on the configured rubric (the local and the Ray path
    build them the same way)."""
    rubric = load_rubric(config.rubric)
    engines.config.check_bound(config.judges, "judge.judges")
    out = []
    for name in config.judges:
        # Plain `judge` unbound falls back to `default`; with no default, Engines raises a ConfigError naming it.
        out.append(
            Judge(
                name,
                engines.role(name),
                rubric,
                full_rubric=config.full_rubric,
                max_issues=config.max_issues,
                preset=config.preset,
                graded=config.expected_severity,
            )
        )
    return out


async def judge_all(
    judges: list[Judge],
    sessions: list[SessionInput],
    cache: Any,
    max_replies: int | None,
    concurrency: int | None = None,
    *,
    progress: bool = True,
) -> list[JudgmentRow]:
    """Every reply of every session, by every judge, concurrently: the engine layer bounds how many
    requests are in flight, and `concurrency` (judge.concurrency) bounds it further when set. Rows come back
    in (judge, session, reply) order. `cache`: a `mindcore.io.CheckpointDir` (or anything with its `has`, `read`
    and `write`). `progress`: draw a bar (off where another display owns the terminal, e.g. inspect's)."""
    work = [(j, r) for j in judges for s in sessions for r in replies(s, max_replies)]
    # Prompts are rendered when a task starts, before the engine's own semaphore; this bound keeps a
    # paper-scale run (~60k replies) from holding every rendered conversation in memory at once.
    gate = asyncio.Semaphore(min(concurrency or IN_FLIGHT, IN_FLIGHT))
    asking: dict[str, asyncio.Future[dict[str, Any]]] = {}

    async def one(j: Judge, r: Any) -> JudgmentRow:
        async with gate:
            return await judge_reply(j, r, cache, asking)

    if not progress:
        return list(await asyncio.gather(*(one(j, r) for j, r in work)))
    return await gather_progress((one(j, r) for j, r in work), "judging replies")
