"""Largest prompt of each main-job role, estimated before a run so preflight can check it fits the
context one request can use (issue 9, item 2). Estimates, not bounds: prompts are rendered from the
real templates, with the longest persona of the shipped synthetic sample, the largest instance of each
schema (strings at `maxLength`, filled with English-like text) and replies at their token budgets, and
counted with the engine's tokenizer where it serves one (else at 4 characters per token).

Per role:
- profile_writer: the larger of the first prompt and a revision carrying the largest draft and six
  faults of 2 × 200 characters;
- screener: the brief of the largest formulation;
- scenario_writer: the later-session prompt with the previous scenario and a full transcript of
  `turn_cap` turns (patient messages at `message_max_tokens`, counsellor replies at their budget);
- patient: the system prompt (largest case summary and scenario, memory at `memory_max_tokens`, the
  archetype with the most moves) plus `turn_cap - 1` turns, each: a counsellor reply, two commit
  calls (one rejection per turn is assumed) with their answers, `max_todo_calls` agenda calls answered
  with an open list of the scenario's checkpoints plus `ASSUMED_ADDED_ITEMS`, and the message;
- counsellor: its system prompt and the whole exchange; memory_compactor: the prior log, the whole
  transcript and one re-ask when `memory_retries` allows; labeller: the longest clipped turn with its
  clipped context.
A counsellor without `max_tokens` has no reply bound: its replies are assumed
`ASSUMED_UNBOUNDED_REPLY` tokens and the estimate says so. Other stages register theirs with
`mindcore.budget.register_prompt_estimate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from mindcore.budget import PromptSize, register_prompt_estimate
from mindcore.config import EnginesConfig
from mindsim_app.budgets import BudgetReport, agenda_tool_schema, commit_tool_schema

# Chat-template tokens around each message (ChatML: "<|im_start|>role\n" … "<|im_end|>\n"); an estimate.
MESSAGE_OVERHEAD = 6
# A counsellor without max_tokens has no reply bound; its replies are assumed this long and the
# estimate says so.
ASSUMED_UNBOUNDED_REPLY = 512
ESTIMATE_PERSONAS = 40
# Items a patient adds to its agenda in one session, for the size of the open list each agenda call
# answers with (the agenda has no cap; adding one every turn would make it longer). An estimate.
ASSUMED_ADDED_ITEMS = 3


@dataclass
class EstimateInputs:
    """What the prompt estimators read: the recipe, the engines config (after budgets were fitted),
    the simulation section (with raised settings applied) and the budget report."""

    recipe: Any
    config: EnginesConfig
    report: BudgetReport
    counsellor_max_tokens: dict[str, int | None] = field(default_factory=dict)

    @property
    def simulation(self) -> Any:
        from mindsim.config import SimulationConfig

        scfg = SimulationConfig.from_section(getattr(self.recipe, "simulation", None))
        return scfg.model_copy(update=self.report.section_overrides.get("simulation", {}))

    def role_max(self, role: str) -> int | None:
        return self.config.role_spec(role).max_tokens

    def reply_bound(self) -> tuple[int, str]:
        """Longest counsellor reply in tokens, and a note when one is unbounded."""
        values = list(self.counsellor_max_tokens.values()) or [self.role_max("counsellor")]
        if any(v is None for v in values):
            return ASSUMED_UNBOUNDED_REPLY, (f"a counsellor has no max_tokens; its replies are assumed "
                                             f"{ASSUMED_UNBOUNDED_REPLY} tokens")
        return max(v for v in values if v is not None), ""

    def message_bound(self) -> int:
        s = self.simulation
        return s.message_max_tokens or self.role_max("patient") or ASSUMED_UNBOUNDED_REPLY

    def memory_bound(self) -> int:
        s = self.simulation
        return s.memory_max_tokens or self.role_max("memory_compactor") or ASSUMED_UNBOUNDED_REPLY


def _messages_tokens(messages: list[dict[str, Any]], sz: Any) -> int:
    return sum(sz(str(m.get("content") or "")) + MESSAGE_OVERHEAD for m in messages)


def _worst_profile_parts(recipe: Any) -> tuple[Any, Any, list[Any]]:
    from profilegen.config import profiles_config

    cfg = profiles_config(recipe)
    return _profile_parts(getattr(recipe, "seed", 0), cfg.rates)


@lru_cache(maxsize=4)
def _profile_parts(seed: int, rates: str | None) -> tuple[Any, Any, list[Any]]:
    """The longest anchored persona of the shipped sample, the largest formulation, the most faults."""
    from mindcore.budget import largest_instance
    from profilegen.anchors import anchor_personas
    from profilegen.formulation import draft_model, to_formulation, writer_messages
    from profilegen.personas import load_personas
    from profilegen.rates import load_rates
    from profilegen.schemas import Fault
    from profilegen.screen import JudgeVerdict

    personas = load_personas("synthetic", ESTIMATE_PERSONAS, seed)
    rows = anchor_personas(personas.rows, load_rates(rates), seed)
    row = max(rows, key=lambda r: sum(len(m["content"]) for m in writer_messages(r)))
    f = to_formulation(draft_model().model_validate(largest_instance(draft_model().model_json_schema())))
    verdict = largest_instance(JudgeVerdict.model_json_schema())
    faults = [Fault(quote=x["quote"], reason=x["reason"], severity="serious", source="judge") for x in verdict["faults"]]
    return row, f, faults


def _writer_prompt(inp: EstimateInputs, sz: Any) -> PromptSize:
    from profilegen.config import profiles_config
    from profilegen.formulation import revision_messages, writer_messages
    from profilegen.screen import causal_faults

    causal = profiles_config(inp.recipe).shape.causal_checks
    row, f, faults = _worst_profile_parts(inp.recipe)
    faults = faults + (causal_faults(f) if causal else [])
    first = _messages_tokens(writer_messages(row, causal=causal), sz)
    revision = _messages_tokens(revision_messages(row, f, faults, causal=causal), sz)
    return PromptSize("profile_writer", max(first, revision), {"first draft": first, "revision": revision},
                      "personas from the shipped synthetic sample; the revision carries the largest draft and six faults")


def _screener_prompt(inp: EstimateInputs, sz: Any) -> PromptSize:
    from profilegen.render import writer_brief
    from profilegen.screen import judge_messages

    from profilegen.config import profiles_config

    row, f, _ = _worst_profile_parts(inp.recipe)
    n = _messages_tokens(judge_messages(writer_brief(row, f), causal=profiles_config(inp.recipe).shape.causal_checks), sz)
    return PromptSize("screener", n, {"brief of the largest formulation": n})


def _session_fixtures(inp: EstimateInputs, sz: Any) -> dict[str, Any]:
    from mindcore.budget import fill_text, largest_instance
    from mindsim.agenda import Agenda
    from mindsim.prompting import load_style_data
    from mindsim.scenario import Scenario, _ScenarioDraft
    from mindsim.schedule import SessionPlan, load_schedule_data
    from profilegen.moves import load_vocabulary
    from profilegen.render import case_summary, writer_brief

    row, f, _ = _worst_profile_parts(inp.recipe)
    s = inp.simulation
    style, sched, vocab = load_style_data(), load_schedule_data(), load_vocabulary()
    scenario = Scenario.model_validate(largest_instance(_ScenarioDraft.model_json_schema()))
    longest = lambda keys: max(keys, key=len)  # noqa: E731
    plan = SessionPlan(index=1, gap_hours=s.max_gap_hours, event_category=longest(list(sched.event_categories)),
                       beat=longest([c.beat for c in sched.event_categories.values()]),
                       emotion=max(style.emotion, key=lambda k: len(style.emotion[k])),
                       concealment=max(style.concealment, key=lambda k: len(style.concealment[k].line)),
                       max_depth=3, hours_since_start=0, weekday="Wednesday", hour=12)
    turns = s.turn_cap
    patient_msg, counsellor_msg = sz.text_of_tokens(inp.message_bound()), sz.text_of_tokens(inp.reply_bound()[0])
    transcript = [{"role": "user", "content": patient_msg}]
    for _ in range(turns - 1):
        transcript += [{"role": "assistant", "content": counsellor_msg}, {"role": "user", "content": patient_msg}]
    added = [fill_text(120)] * (min(ASSUMED_ADDED_ITEMS, (turns - 1) * s.max_todo_calls))
    return {"row": row, "f": f, "brief": writer_brief(row, f), "summary": case_summary(row, f), "scenario": scenario,
            "plan": plan, "style": style, "vocab": vocab, "transcript": transcript, "added": added,
            "agenda": Agenda.from_checkpoints(list(scenario.checkpoints) + added),
            "memory": [sz.text_of_tokens(inp.memory_bound())]}


def _scenario_prompt(inp: EstimateInputs, sz: Any) -> PromptSize:
    from mindcore.prompts import render
    from mindsim.prompting import transcript_text
    from mindsim.scenario import FIRST_TEMPLATE, NEXT_TEMPLATE

    fx = _session_fixtures(inp, sz)
    reg = fx["style"].register
    lines = [max((r.register_line for r in reg.values()), key=len),
             max((v.line for v in fx["style"].verbosity.values()), key=len)]
    user = [{"role": "user", "content": "Write the situation now, as JSON."}]
    first = render(FIRST_TEMPLATE, writer_brief=fx["brief"], goal=fx["f"].presenting.goal,
                   time_context=fx["plan"].time_context, emotion=fx["plan"].emotion, register_lines=lines)
    nxt = render(NEXT_TEMPLATE, writer_brief=fx["brief"], prev_situation=fx["scenario"].as_text(),
                 transcript=transcript_text(fx["transcript"]), now_line=fx["plan"].time_context,
                 gap=fx["plan"].gap_text, leftover_todos=list(fx["scenario"].checkpoints) + fx["added"],
                 beat=fx["plan"].beat, register_lines=lines)
    a = _messages_tokens([{"role": "system", "content": first}, *user], sz)
    b = _messages_tokens([{"role": "system", "content": nxt}, *user], sz)
    return PromptSize("scenario_writer", max(a, b), {"first session": a, "later session": b},
                      inp.reply_bound()[1])


def _patient_prompt(inp: EstimateInputs, sz: Any) -> PromptSize:
    import json

    from mindcore.budget import fill_text, largest_instance
    from mindsim.agenda import Agenda
    from mindsim.prompting import patient_system_prompt
    from profilegen.testing import make_profiles

    fx = _session_fixtures(inp, sz)
    s, vocab = inp.simulation, fx["vocab"]
    arch = max(vocab.archetypes, key=lambda a: len(vocab.available(a)))
    base = make_profiles(1, 0)[0]
    profile = base.model_copy(update={"case_summary": fx["summary"],
                                      "style": base.style.model_copy(update={"archetype": arch})})
    system = sz(patient_system_prompt(profile, vocab, fx["plan"], fx["scenario"], fx["agenda"], fx["memory"],
                                      agenda_plain=s.agenda_plain)) + MESSAGE_OVERHEAD
    commit = sz(json.dumps(largest_instance(commit_tool_schema()), ensure_ascii=False))
    todo = sz(json.dumps(largest_instance(agenda_tool_schema()), ensure_ascii=False))
    cue = max((c for m in vocab.moves.values() for c in m.cues), key=len)
    never = max((r.never for a in vocab.archetypes.values() for r in a.removed), key=len)
    longest_move = max(vocab.moves, key=len)
    result = max(sz(f"Accepted: {longest_move}. How to write it: {cue}; {cue}."),
                 sz(f"Not accepted: `{longest_move}` is not something you do. {never} Pick another move from your list."))
    listed = list(fx["scenario"].checkpoints) + [fill_text(120)] * ASSUMED_ADDED_ITEMS
    status = sz("Marked done: " + Agenda.from_checkpoints(listed).status())
    reply, note = inp.reply_bound()
    commits = 1 + min(1, s.max_commit_retries)
    per_turn = (reply + commits * (commit + result) + s.max_todo_calls * (todo + status)
                + inp.message_bound() + MESSAGE_OVERHEAD * (2 + 2 * commits + 2 * s.max_todo_calls))
    turns = s.turn_cap - 1
    growth = turns * per_turn
    return PromptSize("patient", system + growth, {"system prompt": system, "first turn": per_turn,
                                                   f"growth over {turns} turns": growth}, note)


def _counsellor_prompt(inp: EstimateInputs, sz: Any) -> PromptSize:
    from mindsim.prompting import counsellor_system_prompt

    fx = _session_fixtures(inp, sz)
    system = sz(counsellor_system_prompt(fx["plan"], fx["memory"])) + MESSAGE_OVERHEAD
    history = _messages_tokens(fx["transcript"][:-1], sz) + sz(fx["transcript"][-1]["content"])
    return PromptSize("counsellor", system + history, {"system prompt": system, "exchange": history},
                      inp.reply_bound()[1])


def _memory_prompt(inp: EstimateInputs, sz: Any) -> PromptSize:
    from mindcore.prompts import render
    from mindsim.memory import format_log
    from mindsim.prompting import transcript_text

    fx = _session_fixtures(inp, sz)
    s = inp.simulation
    prompt = render("memory/compact.jinja2", prior_log=format_log(fx["memory"]),
                    transcript=transcript_text(fx["transcript"]), max_entries=s.memory_max_entries)
    base = _messages_tokens([{"role": "system", "content": prompt}, {"role": "user", "content": "Write the updated log now."}], sz)
    retry = (inp.memory_bound() + 120 + 2 * MESSAGE_OVERHEAD) if s.memory_retries else 0
    return PromptSize("memory_compactor", base + retry, {"first ask": base, "re-ask adds": retry})


def _labeller_prompt(inp: EstimateInputs, sz: Any) -> PromptSize:
    from mindcore.budget import fill_text
    from mindcore.prompts import render
    from validation.arc import _MAX_CONTEXT_CHARS, _MAX_TURN_CHARS, SYSTEM_TEMPLATE, TURN_TEMPLATE
    from validation.config import ValidationConfig

    vcfg = ValidationConfig.model_validate(getattr(inp.recipe, "validation", None) or {})
    context = [{"speaker": "Counsellor", "text": fill_text(_MAX_CONTEXT_CHARS)}] * vcfg.arc_context_messages
    user = render(TURN_TEMPLATE, context=context, turn=fill_text(_MAX_TURN_CHARS))
    n = _messages_tokens([{"role": "system", "content": render(SYSTEM_TEMPLATE)}, {"role": "user", "content": user}], sz)
    return PromptSize("labeller", n, {"longest clipped turn with its context": n})


def _judge_prompt(inp: EstimateInputs, sz: Any) -> PromptSize:
    from judge.judging import Judge, replies
    from judge.rubric import load_rubric
    from judge.schemas import SessionInput
    from mindsim_app.budgets import judge_config
    from mindsim.prompting import counsellor_system_prompt

    # The last reply of the longest session the simulator can write is the judge's largest prompt.
    cfg = judge_config(inp.recipe)
    fx = _session_fixtures(inp, sz)
    exchange = [*fx["transcript"], {"role": "assistant", "content": sz.text_of_tokens(inp.reply_bound()[0])}]
    session = SessionInput(session_id="s", patient_id="p", counsellor="c", session_index=1,
                           counsellor_system_prompt=counsellor_system_prompt(fx["plan"], fx["memory"]),
                           messages=exchange)
    judge = Judge("judge", None, load_rubric(cfg.rubric), full_rubric=cfg.full_rubric, max_issues=cfg.max_issues)
    n = _messages_tokens(judge.messages(replies(session)[-1]), sz)
    return PromptSize("judge", n, {"rubric, counsellor prompt and the longest session": n}, inp.reply_bound()[1])


for _role, _fn in (("profile_writer", _writer_prompt), ("screener", _screener_prompt),
                   ("scenario_writer", _scenario_prompt), ("patient", _patient_prompt),
                   ("counsellor", _counsellor_prompt), ("memory_compactor", _memory_prompt),
                   ("labeller", _labeller_prompt), ("judge", _judge_prompt)):
    register_prompt_estimate(_role, _fn)
