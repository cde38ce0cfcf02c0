"""Largest prompt of each simulator role, estimated before a run so preflight can check it fits the context
one request can use, before any call is spent. Estimates, not bounds: prompts are rendered from the real templates,
with the longest persona of the shipped synthetic sample (`profilegen.stage.worst_profile_parts`), the largest
instance of each schema (strings at `maxLength`, filled with English-like text) and replies at their token
budgets, and counted with the engine's tokenizer where it serves one (else at 4 characters per token).

Per role:
- first_scenario_writer: the first-session prompt (the profile's brief, the time and the session emotion);
- scenario_writer: the later-session prompt with the previous scenario and a full transcript of
  `turn_cap` turns (patient messages at `message_max_tokens`, counsellor replies at their budget);
- patient: the system prompt (largest case summary and scenario, memory at `memory_max_tokens`, the
  archetype with the most moves) plus the turns the model writes (`turn_cap - 1`, or `turn_cap` when the
  counsellor opens), each: a counsellor reply, two commit calls (one rejection per turn is assumed; a typical
  estimate, the plan's refusal share) with their answers, `max_todo_calls` agenda calls answered with an open list
  of the scenario's checkpoints plus `ASSUMED_ADDED_ITEMS`, and the message;
- counsellor: its system prompt and the whole exchange; memory_compactor: the prior log, the whole
  transcript and one re-ask when `memory_retries` allows.
`longest_session` is the same worst-case session as the judge reads it (registered as a sample, so the
judge's estimate needs no import of the simulator). A counsellor without `max_tokens` has no reply bound:
its replies are assumed `ASSUMED_UNBOUNDED_REPLY` tokens and the estimate says so.
"""

from __future__ import annotations

from typing import Any

from mindsimkit.mindcore.budget import MESSAGE_OVERHEAD, PromptSize, messages_tokens
from mindsimkit.mindcore.budget_fit import ASSUMED_UNBOUNDED_REPLY
from mindsimkit.mindsim.patient_engines.mindsim_engine import agenda_tool_schema, commit_tool_schema
from mindsimkit.profilegen.stage import profile_parts

# Items a patient adds to its agenda in one session, for the size of the open list each agenda call
# answers with (the agenda has no cap; adding one every turn would make it longer). An estimate.
ASSUMED_ADDED_ITEMS = 3


def simulation(inp: Any) -> Any:
    """The recipe's simulation section, validated, with the settings preflight raised applied."""
    from mindsimkit.mindsim.config import SimulationConfig

    scfg = SimulationConfig.from_section(getattr(inp.recipe, "simulation", None))
    return scfg.model_copy(update=inp.report.section_overrides.get("simulation", {}))


def message_bound(inp: Any) -> int:
    return simulation(inp).message_max_tokens or inp.role_max("patient") or ASSUMED_UNBOUNDED_REPLY


def memory_bound(inp: Any) -> int:
    return simulation(inp).memory_max_tokens or inp.role_max("memory_compactor") or ASSUMED_UNBOUNDED_REPLY


def _typical_length(inp: Any, kind: str, bound: int) -> int:
    """A text's tokens as an estimate quotes it: its bound, or in a typical estimate the length a finished run
    measured (`EstimateInputs.lengths`) where there is one, never above the bound."""
    measured = inp.lengths.get(kind) if getattr(inp, "typical", False) else None
    return bound if measured is None else max(1, min(bound, round(measured)))


def message_tokens(inp: Any) -> tuple[int, int]:
    """Tokens of a patient message and of a counsellor reply as an estimate quotes them."""
    return (
        _typical_length(inp, "patient_message", message_bound(inp)),
        _typical_length(inp, "counsellor_reply", inp.reply_bound()[0]),
    )


def message_texts(inp: Any, sz: Any) -> tuple[str, str]:
    """A patient message and a counsellor reply as an estimate quotes them (`message_tokens`), as text."""
    patient, counsellor = message_tokens(inp)
    return sz.text_of_tokens(patient), sz.text_of_tokens(counsellor)


def patient_request(system: str, fx: dict[str, Any], sz: Any, what: str) -> PromptSize:
    """A prompted patient's last message request of a session: its system prompt and the exchange before its last
    message, the patient's lines as its own (the fixtures' transcript is the counsellor's view)."""
    flipped = {"user": "assistant", "assistant": "user"}
    exchange = [{"role": flipped[m["role"]], "content": m["content"]} for m in fx["transcript"][:-1]]
    n = messages_tokens([{"role": "system", "content": system}, *exchange], sz)
    return PromptSize("patient", n, {what: n})


def session_fixtures(inp: Any, sz: Any) -> dict[str, Any]:
    """The worst-case pieces every estimate of a session builds on: profile, scenario, plan, style data,
    a whole transcript at the reply budgets, agenda and memory (also read by the engines' own estimates)."""
    from mindsimkit.mindcore.budget import fill_text, largest_instance
    from mindsimkit.mindsim.agenda import Agenda
    from mindsimkit.mindsim.prompting import load_style_data
    from mindsimkit.mindsim.scenario import Scenario, draft_model
    from mindsimkit.mindsim.schedule import SessionPlan, load_schedule_data
    from mindsimkit.profilegen.render import case_summary, writer_brief

    row, f, _ = profile_parts(inp)
    s = simulation(inp)
    from mindsimkit.mindsim.reference import vocabulary_for

    style, sched = load_style_data(), load_schedule_data()
    vocab = vocabulary_for(s.preset_for("mindsim"))
    scenario = Scenario.model_validate(largest_instance(draft_model().model_json_schema()))

    def longest(keys: list[str]) -> str:
        return max(keys, key=len)

    plan = SessionPlan(
        index=1,
        gap_hours=s.max_gap_hours,
        event_category=longest(list(sched.event_categories)),
        beat=longest([c.beat for c in sched.event_categories.values()]),
        emotion=max(style.emotion, key=lambda k: len(style.emotion[k])),
        concealment=max(style.concealment, key=lambda k: len(style.concealment[k].line)),
        max_depth=3,
        hours_since_start=0,
        weekday="Wednesday",
        hour=12,
    )
    patient_msg, counsellor_msg = message_texts(inp, sz)
    # A counsellor's greeting opens the session when it speaks first; else the patient's scripted opening does.
    transcript = [{"role": "assistant", "content": counsellor_msg}] if s.opening == "counsellor" else []
    transcript.append({"role": "user", "content": patient_msg})
    for _ in range(s.turn_cap - 1):
        transcript += [{"role": "assistant", "content": counsellor_msg}, {"role": "user", "content": patient_msg}]
    added = [fill_text(120)] * (min(ASSUMED_ADDED_ITEMS, replies(s) * s.max_todo_calls))
    return {
        "row": row,
        "f": f,
        "brief": writer_brief(row, f),
        "summary": case_summary(row, f),
        "scenario": scenario,
        "plan": plan,
        "style": style,
        "vocab": vocab,
        "transcript": transcript,
        "added": added,
        "agenda": Agenda.from_checkpoints(list(scenario.checkpoints) + added),
        "memory": [sz.text_of_tokens(_memory_tokens(inp, s))],
    }


def _memory_tokens(inp: Any, s: Any) -> int:
    """The running memory an estimate holds: its bound, or typically that bound over a patient's sessions, of which
    the first has none."""
    bound: int = memory_bound(inp)
    if not getattr(inp, "typical", False):
        return bound
    sessions: int = s.sessions
    return round(_typical_length(inp, "memory", bound) * (sessions - 1) / max(sessions, 1))


def _scenario_systems(inp: Any, sz: Any) -> tuple[str, str]:
    """The first- and later-session scenario writers' system prompts at their largest."""
    from mindsimkit.mindcore.prompts import render
    from mindsimkit.mindsim.prompting import transcript_text
    from mindsimkit.mindsim.scenario import FIRST_TEMPLATE, NEXT_TEMPLATE

    from mindsimkit.mindsim.memory import format_log
    from mindsimkit.mindsim.reference import PRESET

    fx = session_fixtures(inp, sz)
    reg = fx["style"].register
    # Under the mindeval2-reference preset the later-session writer also reads the running memory and the next
    # session's conduct (mindsim/session.py `_write_next`): sized at their longest.
    ref = simulation(inp).preset_for("mindsim") == PRESET
    vocab, style = fx["vocab"], fx["style"]
    conduct = {
        "archetype_text": max((a.text for a in vocab.archetypes.values()), key=len) if ref else None,
        "archetype_avoids": max((a.never_lines for a in vocab.archetypes.values()), key=lambda n: len(" ".join(n)))
        if ref
        else [],
        "conduct_lines": [
            max((c.line for c in style.concealment.values()), key=len),
            max(style.emotion.values(), key=len),
        ]
        if ref
        else [],
    }
    lines = [
        max((r.register_line for r in reg.values()), key=len),
        max((v.line for v in fx["style"].verbosity.values()), key=len),
    ]
    # The chat frame is the longer one (it lists the register's lines): the estimate bounds both.
    first = render(
        FIRST_TEMPLATE,
        frame="chat",
        writer_brief=fx["brief"],
        goal=fx["f"].presenting.goal,
        time_context=fx["plan"].time_context,
        emotion=fx["plan"].emotion,
        register_lines=lines,
    )
    nxt = render(
        NEXT_TEMPLATE,
        writer_brief=fx["brief"],
        prev_situation=fx["scenario"].as_text(),
        transcript=transcript_text(fx["transcript"]),
        now_line=fx["plan"].time_context,
        gap=fx["plan"].gap_text,
        leftover_todos=list(fx["scenario"].checkpoints) + fx["added"],
        beat=fx["plan"].beat,
        register_lines=lines,
        formulation=fx["brief"],
        beat_gloss=fx["plan"].beat,
        memory=format_log(fx["memory"]) if ref else None,
        **conduct,
    )
    return first, nxt


_SCENARIO_USER = [{"role": "user", "content": "Write the situation now, as JSON."}]


def scenario_prompt(inp: Any, sz: Any) -> PromptSize:
    """The later-session writer (`scenario_writer`): previous scenario and a whole session in its prompt."""
    b = messages_tokens([{"role": "system", "content": _scenario_systems(inp, sz)[1]}, *_SCENARIO_USER], sz)
    return PromptSize("scenario_writer", b, {"later session": b}, inp.reply_bound()[1])


def first_scenario_prompt(inp: Any, sz: Any) -> PromptSize:
    """The first-session writer (`first_scenario_writer`): the profile brief, no transcript."""
    a = messages_tokens([{"role": "system", "content": _scenario_systems(inp, sz)[0]}, *_SCENARIO_USER], sz)
    return PromptSize("first_scenario_writer", a, {"first session": a})


def patient_prompt(inp: Any, sz: Any) -> PromptSize:
    import json

    from mindsimkit.mindcore.budget import fill_text, largest_instance
    from mindsimkit.mindsim.agenda import Agenda
    from mindsimkit.mindsim.prompting import patient_system_prompt
    from mindsimkit.profilegen.testing import make_profiles

    fx = session_fixtures(inp, sz)
    s, vocab = simulation(inp), fx["vocab"]
    arch = max(vocab.archetypes, key=lambda a: len(vocab.available(a)))
    base = make_profiles(1, 0)[0]
    profile = base.model_copy(
        update={"case_summary": fx["summary"], "style": base.style.model_copy(update={"archetype": arch})}
    )
    system = (
        sz(
            patient_system_prompt(
                profile, vocab, fx["plan"], fx["scenario"], fx["agenda"], fx["memory"], agenda_plain=s.agenda_plain
            )
        )
        + MESSAGE_OVERHEAD
    )
    commit = sz(json.dumps(largest_instance(commit_tool_schema(s.preset_for("mindsim"))), ensure_ascii=False))
    todo = sz(json.dumps(largest_instance(agenda_tool_schema()), ensure_ascii=False))
    cue = max((c for m in vocab.moves.values() for c in m.cues), key=len)
    never = max((r.never for a in vocab.archetypes.values() for r in a.removed), key=len)
    longest_move = max(vocab.moves, key=len)
    result = max(
        sz(f"Accepted: {longest_move}. How to write it: {cue}; {cue}."),
        sz(f"Not accepted: `{longest_move}` is not something you do. {never} Pick another move from your list."),
    )
    listed = list(fx["scenario"].checkpoints) + [fill_text(120)] * ASSUMED_ADDED_ITEMS
    status = sz("Marked done: " + Agenda.from_checkpoints(listed).status())
    reply, note = message_tokens(inp)[1], inp.reply_bound()[1]
    commits = 1 + _rejected_commits(inp, s.max_commit_retries)
    per_turn = round(
        reply
        + commits * (commit + result)
        + s.max_todo_calls * (todo + status)
        + message_tokens(inp)[0]
        + MESSAGE_OVERHEAD * (2 + 2 * commits + 2 * s.max_todo_calls)
    )
    turns = replies(s)
    growth = turns * per_turn
    return PromptSize(
        "patient",
        system + growth,
        {"system prompt": system, "first turn": per_turn, f"growth over {turns} turns": growth},
        note,
    )


def _rejected_commits(inp: Any, most: int) -> float:
    """Refused commits a turn's history holds: one where retries allow (the largest estimate), or typically each
    further ask at the assumed refusal share (a geometric sum, as the plan counts the asks themselves)."""
    share: float | None = inp.rates.get("commit_reject_share") if getattr(inp, "typical", False) else None
    if share is None:
        return min(1, most)
    return sum(share**k for k in range(1, most + 1))


def replies(s: Any) -> int:
    """Patient turns the model writes in one session: every turn up to the cap but the scripted opening, which
    only a patient who speaks first has."""
    turns: int = s.turn_cap - (s.opening == "patient")
    return turns


def counsellor_prompt(inp: Any, sz: Any) -> PromptSize:
    from mindsimkit.mindsim.prompting import counsellor_system_prompt

    fx = session_fixtures(inp, sz)
    system = sz(counsellor_system_prompt(fx["plan"], fx["memory"])) + MESSAGE_OVERHEAD
    shown = fx["transcript"]
    if inp.typical:  # the last request comes before the last reply and the patient's message after it
        last_reply = max(i for i, m in enumerate(shown) if m["role"] == "assistant") if len(shown) > 1 else 1
        shown = shown[:last_reply]
    history = messages_tokens(shown[:-1], sz) + sz(shown[-1]["content"]) if shown else 0
    return PromptSize(
        "counsellor", system + history, {"system prompt": system, "exchange": history}, inp.reply_bound()[1]
    )


def memory_prompt(inp: Any, sz: Any) -> PromptSize:
    from mindsimkit.mindcore.prompts import render
    from mindsimkit.mindsim.memory import format_log
    from mindsimkit.mindsim.prompting import transcript_text

    fx = session_fixtures(inp, sz)
    s = simulation(inp)
    prompt = render(
        "memory/compact.jinja2",
        prior_log=format_log(fx["memory"]),
        transcript=transcript_text(fx["transcript"]),
        max_entries=s.memory_max_entries,
    )
    base = messages_tokens(
        [{"role": "system", "content": prompt}, {"role": "user", "content": "Write the updated log now."}], sz
    )
    retry = (memory_bound(inp) + 120 + 2 * MESSAGE_OVERHEAD) if s.memory_retries else 0
    return PromptSize("memory_compactor", base + retry, {"first ask": base, "re-ask adds": retry})


def longest_session(inp: Any, sz: Any) -> tuple[str, list[dict[str, str]]]:
    """The counsellor's system prompt and the exchange of the longest session this recipe can write, ending on
    a counsellor reply at its budget: what the judge's prompt holds at its largest."""
    from mindsimkit.mindsim.prompting import counsellor_system_prompt

    fx = session_fixtures(inp, sz)
    exchange = [*fx["transcript"], {"role": "assistant", "content": message_texts(inp, sz)[1]}]
    return counsellor_system_prompt(fx["plan"], fx["memory"]), exchange


def sizing_profile(fx: dict[str, Any]) -> Any:
    """A `Profile` made of an estimate's fixtures, with a self cluster (Patient-Psi's candidate list for it is a
    whole category, the longest)."""
    from mindsimkit.profilegen.testing import make_profiles

    f = fx["f"].model_copy(update={"core_belief": fx["f"].core_belief.model_copy(update={"cluster": "helpless"})})
    return make_profiles(1, 0)[0].model_copy(
        update={
            "persona": fx["row"].persona,
            "formulation": f,
            "writer_brief": fx["brief"],
            "case_summary": fx["summary"],
        }
    )


def mapper_prompt(inp: Any, sz: Any) -> PromptSize:
    """The baseline mapper's largest prompt: the mapping call (`mapper_messages`) of each engine of the recipe that
    maps, on the worst-case profile. Typical: the mean over those engines, each of which maps once per patient."""
    from mindsimkit.mindsim.patient_engines import engines_of, names, recipe_variants

    profile = sizing_profile(session_fixtures(inp, sz))
    ran = engines_of(v.name for v in recipe_variants(inp.recipe))
    mappers = [e for e in ran if hasattr(e, "mapper_messages")] or [
        e for e in engines_of(names()) if hasattr(e, "mapper_messages")
    ]
    parts = {e.name: messages_tokens(e.mapper_messages(profile), sz) for e in mappers}
    size = round(sum(parts.values()) / len(parts)) if inp.typical else max(parts.values())
    return PromptSize("baseline_mapper", size, parts)
