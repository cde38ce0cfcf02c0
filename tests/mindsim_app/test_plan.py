"""`mindsim plan`: the counts on a tiny recipe worked out by hand, money and hours from given prices and rates,
"unknown" where a figure is missing, every shipped recipe through the console script, and the plan in run.json and
the HTML report of a fake-engine run."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typing import Any

from mindsimkit.mindcore.recipe import load_recipe
from mindsimkit.mindsim_app.plan import Assumptions, make_plan, role_loads
from mindsimkit.mindsim_app.throughput import Throughput, engine_key

REPO = Path(__file__).resolve().parents[2]
MINDSIM = Path(sys.executable).with_name("mindsim")

# Round shares so the expected counts can be worked out by hand below.
HAND = Assumptions(
    serious_share=0.5,
    structured_retry_share=0.0,
    commit_reject_share=0.0,
    message_reask_share=0.5,
    resistance_share=0.0,
    repeated_label_share=0.25,
    demographics_conflict_share=0.5,
    memory_reask_share=0.0,
    scenario_redraft_share=0.5,
    reply_fill=1.0,
    structured_fill=1.0,
    reasoning_fill=0.5,
)


def tiny(tmp_path: Path, **over) -> Path:
    recipe = {
        "name": "tiny",
        "seed": 0,
        "engines": {"api": {"kind": "vllm", "model": "m", "port": 8000, "max_concurrency": 4}},
        "roles": {
            "default": {"engine": "api", "max_tokens": 9000},
            "counsellor": {"engine": "api", "max_tokens": 100},
            "counsellor:b": {"engine": "api", "max_tokens": 100, "reasoning_budget": 50},
            "judge": {"engine": "api", "max_tokens": 9000},
        },
        "profiles": {"personas": "synthetic", "candidates": 4, "pool_size": 2, "benchmark_size": 1, "max_revisions": 1},
        "simulation": {
            "sessions": 3,
            "turn_cap": 4,
            "counsellors": ["counsellor", "counsellor:b"],
            "max_message_retries": 2,
            "max_commit_retries": 1,
            "max_todo_calls": 1,
            "final_memory": True,
            "memory_retries": 0,
            "message_max_tokens": 80,
        },
        "validation": {"arc": True},
        "judge": {"judges": ["judge"], "prices": {"judge": {"input": 1.0, "output": 2.0, "cached_input": 0.5}}},
    }
    for key, value in over.items():
        recipe[key] = {**recipe.get(key, {}), **value} if isinstance(value, dict) else value
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def by_role(loads):
    return {(x.stage, x.role): x for x in loads}


def test_counts_of_a_tiny_recipe_match_the_hand_computed_ones(tmp_path):
    loads = by_role(role_loads(load_recipe(tiny(tmp_path)), assumptions=HAND))
    # Profiles: 4 candidates, half serious and revised once: 4 + 2 drafts; at worst 8, each asked 3 times.
    for role in ("profile_writer", "screener"):
        assert loads["profiles", role].requests == pytest.approx(6)
        assert loads["profiles", role].requests_worst == 8 * 3
    # 2 pool patients × 2 counsellors = 4 arcs of 3 sessions; a patient opening and 3 counsellor replies a session.
    assert loads["simulate", "counsellor"].requests == 2 * 3 * 3
    assert loads["simulate", "counsellor:b"].requests == 2 * 3 * 3
    # A scenario is drafted again at half (twice at most: 1 + .5 + .25); at worst 3 drafts, each asked 3 times.
    assert loads["simulate", "first_scenario_writer"].requests == pytest.approx(2 * 1.75)
    assert loads["simulate", "first_scenario_writer"].requests_worst == 2 * 3 * 3
    assert loads["simulate", "scenario_writer"].requests == pytest.approx(4 * 2 * 1.75)
    assert loads["simulate", "memory_compactor"].requests == 4 * 3  # final_memory: every session rewrites
    # 36 patient turns: a message (re-asked at half, twice at most: 1 + .5 + .25), one commit, one agenda call.
    patient = loads["simulate", "patient"]
    assert patient.requests == pytest.approx(36 * 1.75 + 36 + 36)
    assert patient.requests_worst == 36 * 3 + 36 * 2 * 3 + 36 * 3
    # Validation labels every patient message: 12 sessions × 3 turns, and the openings, of which the first session's
    # is the patient's first scenario in all its arcs (one cached label per patient): 2 + 4 arcs × 2 later sessions.
    # The judge reads every reply: 12 × 3.
    assert loads["validate", "labeller"].requests == 36 + 2 + 8
    assert loads["judge", "judge"].requests == 36
    # Replies bounded at 100 tokens; the reasoning counsellor adds half its 50-token budget (all of it at worst).
    assert loads["simulate", "counsellor"].completion_tokens == 18 * 100
    assert loads["simulate", "counsellor:b"].completion_tokens == 18 * 125
    assert loads["simulate", "counsellor:b"].completion_tokens_worst == 18 * 150
    assert patient.completion_tokens_worst > patient.completion_tokens > 0


def test_the_patientact_profile_shape_adds_the_writers_cycle_and_demographics_calls(tmp_path):
    plain = by_role(role_loads(load_recipe(tiny(tmp_path)), assumptions=HAND))["profiles", "profile_writer"]
    shaped = tiny(tmp_path, profiles={"patientact_shape": True})
    writer = by_role(role_loads(load_recipe(shaped), assumptions=HAND))["profiles", "profile_writer"]
    # 6 drafts (8 at worst). Up to one of a draft's first two histories and two of its first three cycles repeat a
    # label, each at a quarter: 6 × 3 × .25 added entries (24 at worst). Half the drafts have their demographics
    # revised once; at worst every one of its 2 screens (max_revisions 1) takes one. Each asked up to 3 times.
    assert writer.requests == pytest.approx(plain.requests + 6 * 3 * 0.25 + 6 * 0.5)
    assert writer.requests_worst == plain.requests_worst + (8 * 3 + 8 * 2) * 3
    assert writer.prompt_tokens > plain.prompt_tokens


def test_annaagent_counts_its_modulator_calls_per_client_turn(tmp_path):
    recipe = tiny(tmp_path, simulation={"patient_engine": "annaagent"})
    loads = by_role(role_loads(load_recipe(recipe), assumptions=HAND))
    # 4 arcs of 3 sessions, 3 client turns each: 36 turns ask the emotion and the switch, the 24 after an arc's
    # first session also ask the memory check, and their recall is counted as if every check said yes.
    modulator = loads["simulate", "annaagent_modulator"]
    assert modulator.requests == pytest.approx(2 * 36 + 24 + 24)
    assert loads["simulate", "baseline_mapper"].requests == 2  # one seeker profile per patient


def test_counsellors_option_and_turns_scale_the_counts(tmp_path):
    base = by_role(role_loads(load_recipe(tiny(tmp_path)), assumptions=HAND))
    three = by_role(role_loads(load_recipe(tiny(tmp_path)), assumptions=HAND, counsellors=3))
    # A third counsellor repeats the first: its requests go to that role, and the judge reads its replies too.
    assert three["simulate", "counsellor"].requests == 2 * base["simulate", "counsellor"].requests
    assert three["judge", "judge"].requests == pytest.approx(1.5 * base["judge", "judge"].requests)
    one = by_role(role_loads(load_recipe(tiny(tmp_path, simulation={"turn_cap": 2})), assumptions=HAND))
    # One reply a session: nothing of the counsellor's prompt was sent before; with three, the earlier ones were.
    assert one["simulate", "counsellor"].cached_tokens == 0
    many = base["simulate", "counsellor"]
    assert 0 < many.cached_tokens < many.prompt_tokens
    # A session's prompts grow: the mean request is smaller than the largest one the worst case takes.
    assert many.prompt_tokens < many.prompt_tokens_worst


def test_consistentmi_is_planned_with_its_mapping_and_its_trackers_questions(tmp_path):
    sim = {"patient_engine": ["consistentmi"], "consistentmi": {"tracker_attempts": 2}}
    loads = by_role(role_loads(load_recipe(tiny(tmp_path, simulation=sim)), assumptions=HAND))
    # 4 arcs × 3 sessions × 3 patient turns = 36; three tracker questions a turn expected, four at most, each asked
    # at most twice; one mapping per pool patient.
    tracker = loads["simulate", "consistentmi_tracker"]
    assert tracker.requests == pytest.approx(36 * 3)
    assert tracker.requests_worst == 36 * 4 * 2
    assert loads["simulate", "baseline_mapper"].requests == 2
    assert tracker.prompt_tokens > 0


FIVE_ENGINES = ["mindsim", "patientact", "patient_psi", "mindeval", "annaagent", "consistentmi"]


def test_an_expected_request_is_never_larger_than_the_largest_one(tmp_path):
    """The expected value sizes a likely prompt, the worst case the largest preflight checks: per request the first
    can only be the smaller, for every role of every engine."""
    recipe = load_recipe(tiny(tmp_path, simulation={"patient_engine": FIVE_ENGINES}))
    for load in role_loads(recipe, assumptions=HAND):
        assert load.prompt_tokens_worst > 0, load.role
        per_request, largest = load.prompt_tokens / load.requests, load.prompt_tokens_worst / load.requests_worst
        # The largest persona is the one whose writer prompt is longest; a role that quotes other persona fields
        # may find the median persona a token or two longer, hence the 1 %.
        assert per_request <= largest * 1.01, (load.stage, load.role, per_request, largest)


def test_each_patient_engine_sizes_its_own_message_requests(tmp_path):
    """A baseline's patient sends its system prompt and the exchange, with no tool calls between: planned at that
    size, not at MindSim's (whose commit and agenda calls make its prompt the largest), and no longer noted as an
    upper estimate."""

    def patient(engines: list[str]) -> Any:
        loads = by_role(
            role_loads(load_recipe(tiny(tmp_path, simulation={"patient_engine": engines})), assumptions=HAND)
        )
        return loads["simulate", "patient"]

    mindsim = patient(["mindsim"])
    for engine in FIVE_ENGINES[1:]:
        other = patient([engine])
        assert other.prompt_tokens / other.requests < 0.8 * mindsim.prompt_tokens / mindsim.requests, engine
        assert not any("sized as MindSim" in n for n in other.notes), (engine, other.notes)


def test_typical_estimates_choose_likely_pieces_and_preflight_keeps_the_largest(tmp_path):
    """Preflight's context check reads every estimate at its largest; the plan's typical one takes a persona of
    median length, the formulation at the recipe's text scale, memory only after a first session, the labeller's
    context as each message has it, and the mean of a role's kinds of request."""
    from dataclasses import replace

    from mindsimkit.mindcore.budget import Sizer, prompt_estimator
    from mindsimkit.mindcore.budget_fit import EstimateInputs
    from mindsimkit.mindsim_app.plan import _fit, job_stages

    recipe = load_recipe(tiny(tmp_path, simulation={"patient_engine": FIVE_ENGINES}))
    config = recipe.engines_config()
    inp = EstimateInputs(recipe, config, _fit(recipe, config, job_stages(recipe), []), {"counsellor": 100})
    assert inp.typical is False  # what preflight builds
    roles = [
        "profile_writer",
        "screener",
        "first_scenario_writer",
        "scenario_writer",
        "patient",
        "counsellor",
        "memory_compactor",
        "baseline_mapper",
        "annaagent_modulator",
        "consistentmi_tracker",
        "patient_appraiser",
        "labeller",
        "judge",
    ]
    smaller = []
    for role in roles:
        est = prompt_estimator(role)
        largest, typical = est(inp, Sizer()).tokens, est(replace(inp, typical=True), Sizer()).tokens
        assert 0 < typical <= largest, role
        smaller.append(typical < largest)
    # Every one of these has a piece to choose; the judge's typical session differs only by its memory.
    assert all(smaller), dict(zip(roles, smaller))


def test_the_typical_patient_quotes_measured_replies_and_counts_refusals_at_their_share(tmp_path):
    """MindSim's typical patient request quotes the counsellor's replies at a pilot's measured length (not the
    reply bound) and holds a refused commit per turn only at the assumed share; preflight's largest holds one."""
    from dataclasses import replace

    from mindsimkit.mindcore.budget import Sizer, prompt_estimator
    from mindsimkit.mindcore.budget_fit import EstimateInputs
    from mindsimkit.mindsim_app.plan import _fit, job_stages

    recipe = load_recipe(tiny(tmp_path))
    config = recipe.engines_config()
    inp = EstimateInputs(recipe, config, _fit(recipe, config, job_stages(recipe), []), {"counsellor": 100})
    patient = prompt_estimator("patient")

    def tokens(**changes: object) -> int:
        return patient(replace(inp, typical=True, **changes), Sizer()).tokens

    base = tokens()
    assert tokens(lengths={"counsellor_reply": 20}) < base  # 20 of the 100-token bound
    assert tokens(lengths={"counsellor_reply": 500}) == base  # never above the bound
    assert tokens(rates={"commit_reject_share": 0.1}) < base
    assert tokens(rates={"commit_reject_share": 1.0}) == base  # every turn refused once: as the largest counts
    largest = patient(replace(inp, rates={"commit_reject_share": 0.0}), Sizer()).tokens
    assert largest == patient(inp, Sizer()).tokens  # preflight's estimate ignores the shares


def test_money_and_hours_from_given_prices_and_rates(tmp_path):
    recipe = load_recipe(tiny(tmp_path))
    prices = {
        "judge": __import__("mindsimkit.judge.costs", fromlist=["Price"]).Price(input=1.0, output=2.0, cached_input=0.5)
    }
    rate = Throughput(
        prompt_tokens_per_s=1000.0,
        completion_tokens_per_s=100.0,
        concurrency=4,
        measured_at="2026-12-06T00:00:00Z",
        model="m",
    )
    key = engine_key(recipe.engines_config().engines["api"])
    plan = make_plan(recipe, prices=prices, rates={key: rate})
    judge = next(r for r in plan.rows if r.role == "judge")
    assert judge.cost == pytest.approx(
        ((judge.prompt_tokens - judge.cached_tokens) * 1.0 + judge.cached_tokens * 0.5 + judge.completion_tokens * 2.0)
        / 1e6
    )
    assert judge.cost_worst == pytest.approx((judge.prompt_tokens_worst + 2 * judge.completion_tokens_worst) / 1e6)
    assert judge.time_s == pytest.approx(
        (judge.prompt_tokens - judge.cached_tokens) / 1000 + judge.completion_tokens / 100
    )
    # Only the judge is priced: the total is unknown, and the plan says which roles lack a price.
    assert plan.totals["cost"] is None
    assert any(line.startswith("no price for roles profile_writer") for line in plan.unknown)
    assert not any("throughput" in line for line in plan.unknown)
    # Spread over two servers, every role's time halves.
    two = load_recipe(
        tiny(
            tmp_path,
            engines={
                "api": {
                    "kind": "vllm",
                    "model": "m",
                    "max_concurrency": 4,
                    "servers": [{"host": "10.0.0.1", "port": 8000}, {"host": "10.0.0.2", "port": 8000}],
                }
            },
        )
    )
    key2 = engine_key(two.engines_config().engines["api"])
    split = make_plan(two, prices=prices, rates={key2: rate})
    assert next(r for r in split.rows if r.role == "judge").time_s == pytest.approx(judge.time_s / 2)
    assert split.totals["wall_s"] == pytest.approx(plan.totals["wall_s"] / 2)


def _cli(*args, env=None) -> tuple[subprocess.CompletedProcess, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([str(MINDSIM), *map(str, args)], capture_output=True, text=True, env=env, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return proc, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@pytest.mark.parametrize("recipe", sorted(p.name for p in (REPO / "recipes").glob("*.yaml")))
def test_every_shipped_recipe_plans_through_the_cli(recipe, tmp_path, monkeypatch):
    import os

    env = {**os.environ, "MINDSIM_CACHE": str(tmp_path / "cache")}
    proc, cpu_s = _cli("plan", REPO / "recipes" / recipe, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    # CPU seconds, not wall: the suite's machine is shared, and the plan itself must not take 5 s of work.
    assert cpu_s < 5, cpu_s
    plan = json.loads(proc.stdout)
    assert plan["rows"] and all(r["requests"] > 0 for r in plan["rows"])
    assert plan["totals"]["requests_worst"] >= plan["totals"]["requests"]
    # No throughput recorded in this cache: every engine's time is unknown, and said to be.
    assert all(e["time_s"] is None for e in plan["engines"].values())
    assert len([u for u in plan["unknown"] if u.startswith("no throughput for engine")]) == len(plan["engines"])


def test_missing_price_is_an_unknown_line_not_zero(tmp_path):
    import os

    env = {**os.environ, "MINDSIM_CACHE": str(tmp_path / "cache")}
    proc, _ = _cli("plan", tiny(tmp_path), env=env)
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "unknown: no price for roles profile_writer, screener" in out
    assert "(model m); add it under judge.prices" in out
    assert "unknown: no throughput for engine api" in out
    prices = tmp_path / "prices.yaml"
    prices.write_text("m: {input: 0.1, output: 0.4}\n")
    proc, _ = _cli("plan", tiny(tmp_path), "--prices", prices, "--json", env=env)
    plan = json.loads(proc.stdout)
    assert not [u for u in plan["unknown"] if u.startswith("no price")]
    assert plan["totals"]["cost"] > 0


def test_a_bad_prices_file_is_one_error_line(tmp_path):
    bad = tmp_path / "prices.yaml"
    bad.write_text("judge: {input: cheap}\n")
    proc, _ = _cli("plan", tiny(tmp_path), "--prices", bad)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "price 'judge'" in proc.stderr and "Traceback" not in proc.stderr


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory):
    sys.path.insert(0, str(Path(__file__).parent))
    from fakejob import write_fake_job

    return write_fake_job(tmp_path_factory.mktemp("planjob"))


def test_the_run_keeps_its_plan_and_sets_it_beside_the_actual(fake_run):
    info = json.loads((fake_run / "run.json").read_text())
    assert info["plan"]["rows"] and info["plan"]["recipe"] == "layouttest"
    compared = {r["role"]: r for r in info["plan_vs_actual"]["roles"]}
    for role in ("profile_writer", "screener", "counsellor", "patient", "labeller", "judge"):
        row = compared[role]
        assert row["actual"]["requests"] > 0 and row["planned"]["requests"] > 0
        assert row["ratio"]["requests"] == pytest.approx(row["actual"]["requests"] / row["planned"]["requests"])
    # The fake engine's screener calls every draft clean, so no revision: fewer writer requests than expected.
    assert compared["profile_writer"]["actual"]["requests"] == 4
    stages = {s["stage"]: s for s in info["plan_vs_actual"]["stages"]}
    assert set(stages) == {"profiles", "simulate", "validate", "judge"}
    assert all(s["actual_s"] > 0 for s in stages.values())
    html = (fake_run / "report.html").read_text()
    assert 'id="plan-roles-0"' in html and "profile_writer" in html
    # report.json carries the same comparison as data, beside the page.
    data = json.loads((fake_run / "report.json").read_text())
    assert data["runs"][0]["plan"] == info["plan_vs_actual"]


def test_measured_throughput_is_recorded_and_read_by_the_plan(tmp_path, monkeypatch):
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.fake import FakeBackend
    from mindsimkit.mindsim_app.throughput import load_records, measure_engine, record_path, save_record

    monkeypatch.setenv("MINDSIM_CACHE", str(tmp_path / "cache"))
    with Engines.with_backend(FakeBackend(lambda req: "a b c d", max_concurrency=3)) as engines:
        name = next(iter(engines.config.engines))
        rate = measure_engine(engines, name)
    # Three requests in flight, each reporting its words as tokens: positive rates, nothing left in the run's ledger
    # under a stage role.
    assert rate.concurrency == 3 and rate.prompt_tokens_per_s > 0 and rate.completion_tokens_per_s > 0
    recipe = load_recipe(tiny(tmp_path))
    key = engine_key(recipe.engines_config().engines["api"])
    save_record(key, rate)
    assert record_path() == tmp_path / "cache" / "throughput.json"
    assert load_records()[key] == rate
    plan = make_plan(recipe)
    assert all(r.time_s is not None and r.time_s > 0 for r in plan.rows)
    assert plan.totals["wall_s"] > 0 and not any("throughput" in u for u in plan.unknown)


def test_a_finished_run_gives_its_measured_completion_lengths(fake_run):
    info = json.loads((fake_run / "run.json").read_text())
    plan = make_plan(load_recipe(fake_run.parent / "r.yaml"), from_run=fake_run)
    judge = next(r for r in plan.rows if r.role == "judge")
    used = info["usage"]["judge"]
    assert judge.completion_from == f"run {fake_run}"
    assert judge.completion_tokens / judge.requests == pytest.approx(used["completion_tokens"] / used["attempts"])
    assert plan.sources["completions"] == f"measured means of {fake_run}"


@pytest.fixture(scope="module")
def pilot_run(tmp_path_factory, fake_run):
    """The fake job of `fake_run` on one patient of its two: a pilot of the same recipe. Made with
    `--plan-from fake_run`, so its own run.json plan takes the two-patient run's measured sizes."""
    from fakejob import run_fake_job

    return run_fake_job(tmp_path_factory.mktemp("pilot"), ", max_patients: 1", plan_from=fake_run)


def _per_request(rows: list[Any]) -> dict[str, tuple[float, float]]:
    sums: dict[str, list[float]] = {}
    for r in rows:
        x = sums.setdefault(r.role, [0.0, 0.0, 0.0])
        x[0], x[1], x[2] = x[0] + r.requests, x[1] + r.prompt_tokens, x[2] + r.completion_tokens
    return {role: (p / n, c / n) for role, (n, p, c) in sums.items() if n}


def test_a_pilot_of_the_same_recipe_gives_the_size_of_every_request(fake_run, pilot_run):
    """A run of the same recipe on fewer patients (the pilot) measured what one request of each role holds and how
    many requests each planned one became: the plan of the whole run takes those sizes and those rates, and the
    whole run's requests are that size and that many."""
    recipe = load_recipe(fake_run.parent / "r.yaml")
    plan = make_plan(recipe, from_run=pilot_run)
    assert plan.sources["prompts"] == f"from the measured means of {pilot_run}"
    assert plan.sources["requests"].startswith(f"the recipe's counts at the rates {pilot_run} showed")
    assert all(r.prompt_from == f"run {pilot_run}" for r in plan.rows if r.role != "patient_matcher")
    actual = json.loads((fake_run / "run.json").read_text())["usage"]
    counts: dict[str, float] = {}
    for r in plan.rows:
        counts[r.role] = counts.get(r.role, 0.0) + r.requests
    assumed = {r.role: r.requests for r in make_plan(recipe).rows}
    # The fake engine's two patients write the same messages, and a message labelled once is not labelled again.
    off = [
        f"{role}: {actual[role]['attempts']} requests, planned {n:.1f}"
        for role, n in counts.items()
        if actual.get(role) and role != "labeller" and abs(actual[role]["attempts"] / n - 1) > 0.15
    ]
    assert not off, off
    # The fake patient's re-asks are not the assumed rates: the pilot's rates move at least one role's count.
    assert any(abs(counts[role] / n - 1) > 0.05 for role, n in assumed.items() if n), (counts, assumed)
    off = []
    for role, (prompt, completion) in _per_request(plan.rows).items():
        used = actual.get(role)
        if not used:
            continue
        got = (used["prompt_tokens"] / used["attempts"], used["completion_tokens"] / used["attempts"])
        if abs(got[0] / prompt - 1) > 0.15 or abs(got[1] / completion - 1) > 0.15:
            off.append(f"{role}: {got} per request, planned {(prompt, completion)}")
    assert not off, off
    # Without the pilot the same plan estimates every prompt from the templates at the reply bounds.
    estimated = _per_request(make_plan(recipe).rows)
    assert estimated["counsellor"][0] > 1.15 * _per_request(plan.rows)["counsellor"][0]


def test_a_run_planned_from_a_pilot_keeps_that_plan_beside_its_actuals(fake_run, pilot_run):
    """`mindsim run --plan-from RUN`: the plan in run.json, and the comparison at the end, are those of
    `mindsim plan --from-run RUN`: every role's requests are as large as the plan said."""
    info = json.loads((pilot_run / "run.json").read_text())
    assert info["plan"]["sources"]["prompts"] == f"from the measured means of {fake_run}"
    planned: dict[str, list[float]] = {}
    for row in info["plan"]["rows"]:
        x = planned.setdefault(row["role"], [0.0, 0.0])
        x[0], x[1] = x[0] + row["requests"], x[1] + row["prompt_tokens"]
    off = []
    for role, used in info["usage"].items():
        if role in planned and used.get("attempts"):
            per, want = used["prompt_tokens"] / used["attempts"], planned[role][1] / planned[role][0]
            if abs(per / want - 1) > 0.15:
                off.append(f"{role}: {per:.0f} prompt tokens a request, {want:.0f} planned")
    assert not off, off
    assert {r["role"] for r in info["plan_vs_actual"]["roles"]} >= {"patient", "counsellor", "judge"}
    # The report's plan section says where the planned sizes came from.
    assert f"prompts from the measured means of {fake_run}" in info["plan_vs_actual"]["note"]


def _spoil_population(info: dict[str, Any]) -> str:
    info["recipe"]["profiles"]["candidates"] = "many"
    return "profiles.candidates"


def _spoil_counter(info: dict[str, Any]) -> str:
    info["usage"]["patient"]["attempts"] = -5
    return "usage of role 'patient': attempts"


def _spoil_row(info: dict[str, Any]) -> str:
    info["usage"]["counsellor"] = "lots"
    return "usage of role 'counsellor': a str, not a table of counters"


@pytest.mark.parametrize("spoil", [_spoil_population, _spoil_counter, _spoil_row], ids=lambda f: f.__name__[7:])
def test_a_spoiled_pilot_is_one_error_line_naming_its_run_json(fake_run, pilot_run, tmp_path, spoil):
    """A pilot's run.json is a file from elsewhere: a population or a counter that is not one stops the plan with
    one line naming that file (not the recipe), exit 2."""
    import shutil

    bad = Path(shutil.copytree(pilot_run, tmp_path / "pilot"))
    info = json.loads((bad / "run.json").read_text())
    where = spoil(info)
    (bad / "run.json").write_text(json.dumps(info))
    proc, _ = _cli("plan", fake_run.parent / "r.yaml", "--from-run", bad)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {bad / 'run.json'}: {where}"), lines


def test_plan_from_names_a_folder_without_a_run_before_anything_starts(tmp_path):
    proc, _ = _cli("run", REPO / "recipes" / "quickstart.yaml", "--out", tmp_path / "o", "--plan-from", tmp_path)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert f"error: --plan-from {tmp_path}: no run.json there" in " ".join(proc.stderr.split())
    assert not (tmp_path / "o").exists()


def test_a_run_of_another_shape_lends_its_text_lengths_not_its_prompt_sizes(fake_run, pilot_run, tmp_path):
    """Longer sessions hold more per request than the pilot's did: the plan estimates their prompts, quoting the
    patient messages and counsellor replies at the lengths the pilot measured, and says why."""
    text = (fake_run.parent / "r.yaml").read_text().replace("turn_cap: 3", "turn_cap: 6")
    (tmp_path / "r.yaml").write_text(text)
    recipe = load_recipe(tmp_path / "r.yaml")
    plan = make_plan(recipe, from_run=pilot_run)
    assert plan.sources["prompts"] == "estimated from the templates"
    assert any("its recipe differs in simulation" in n for n in plan.notes), plan.notes
    assert "patient_message" in plan.sources["quoted texts"]
    bounded = _per_request(make_plan(recipe).rows)
    quoted = _per_request(plan.rows)
    # The fake engine's messages are a few words: every role that quotes the exchange asks with less.
    for role in ("counsellor", "labeller", "judge"):
        assert quoted[role][0] < bounded[role][0], role


def test_the_embedded_engine_costs_no_money_and_says_so(tmp_path):
    import os

    env = {**os.environ, "MINDSIM_CACHE": str(tmp_path / "cache")}
    proc, _ = _cli("plan", REPO / "recipes" / "quickstart.yaml", env=env)
    assert proc.returncode == 0, proc.stderr
    # Every role of the quickstart runs on the embedded engine: no price is asked for, and the cost is not "unknown".
    assert "no price" not in proc.stdout and "none (local)" in proc.stdout
    proc, _ = _cli("plan", REPO / "recipes" / "quickstart.yaml", "--json", env=env)
    plan = json.loads(proc.stdout)
    assert plan["totals"]["cost"] == 0 and all(r["price_key"].startswith("none: the embedded") for r in plan["rows"])
    # Time stays unknown until throughput is measured: the machine's time is what a local run costs.
    assert plan["totals"]["wall_s"] is None
