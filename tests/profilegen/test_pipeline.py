"""The profile job end to end on the fake engine: outputs, counts, failures, resume."""

from __future__ import annotations

import hashlib
import json

import pytest

from mindsimkit.profilegen.config import ProfilesConfig
from mindsimkit.profilegen.dataset import load_profiles
from mindsimkit.profilegen.pipeline import run_profiles


def _bucket(request, n: int) -> int:
    return int(hashlib.sha256(request.messages[1]["content"].encode()).hexdigest(), 16) % n


def _checkpoints(out):
    return [json.loads(p.read_text()) for p in (out / "profiles" / "checkpoints").glob("*.json")]


@pytest.fixture
def responder(fakes):
    """Writer fails for ~1/8 of patients; the judge calls ~1/6 serious (unfixable), ~1/6 minor."""

    def writer(request):
        if request.messages[1]["content"].count("Client") and _bucket(request, 8) == 0:
            return "{ broken"
        return fakes.draft_for(request)

    def screener(request):
        text = fakes.profile_text(request)
        b = int(hashlib.sha256(text.split("\n")[0].encode()).hexdigest(), 16) % 6
        if b == 0:
            return {
                "faults": [
                    {"quote": "Get back to feeling like myself", "reason": "generic goal", "severity": "serious"}
                ],
                "verdict": "serious",
            }
        if b == 1:
            return {
                "faults": [
                    {"quote": "A sister phones every Sunday", "reason": "thin support", "severity": "minor"},
                    {"quote": "not in the profile at all", "reason": "invented", "severity": "minor"},
                ],
                "verdict": "minor",
            }
        return fakes.clean_verdict(request)

    return fakes.make_responder(writer=writer, screener=screener)


def test_run_writes_dataset_and_counts_everything(fake_engines, responder, recipe, tmp_path):
    engines, backend = fake_engines(responder)
    cfg = ProfilesConfig(candidates=60, pool_size=12, benchmark_size=6, max_revisions=1)
    with engines:
        s = run_profiles(recipe, engines, tmp_path, cfg)
    folder = tmp_path / "profiles"
    assert s.runner == "async" and "cannot" in s.runner_note
    assert s.candidates == 60 and s.personas_read == s.candidates + s.skipped_under_18
    failed = sum(s.failed.values())
    assert failed > 0 and s.dropped_serious > 0 and s.discarded_quotes > 0
    assert s.kept + s.dropped_serious + failed == s.candidates
    assert s.verdicts.get("minor", 0) > 0 and s.revised >= s.dropped_serious
    kept = load_profiles(folder, pool_only=False)
    pool = load_profiles(folder)
    assert len(kept) == s.kept and len(pool) == s.pool == 12 and sum(p.in_benchmark for p in kept) == 6
    assert all(p.screen.verdict == "clean" for p in pool)
    assert all(p.provenance.seed == 7 and len(p.provenance.prompts) >= 7 for p in kept)
    assert {r.role for r in kept[0].provenance.roles} == {"profile_writer", "screener"}
    failures = [json.loads(line) for line in (folder / "failures.jsonl").read_text().splitlines()]
    assert len(failures) == failed and all("StructuredOutputError" in f["error"] for f in failures)
    assert "| main_problem |" in (folder / "pool_table.md").read_text()
    assert json.loads((folder / "summary.json").read_text())["kept"] == s.kept
    assert len(list((folder / "case_summaries").glob("*.md"))) == s.kept
    assert "api_key" not in (folder / "provenance.json").read_text().lower()


def test_rerun_resumes_keeps_invalid_output_final_and_retries_outages(fake_engines, fakes, responder, recipe, tmp_path):
    from mindsimkit.mindcore.errors import TransportError

    cfg = ProfilesConfig(candidates=30, pool_size=8, benchmark_size=4, max_revisions=1)

    def down_for_some(request):
        # The server "goes down" for ~1/5 of the patients' writer calls during the first run.
        if request.messages[1]["content"].count("Client") and _bucket(request, 5) == 1:
            raise TransportError("connection refused")
        return responder(request)

    engines, backend = fake_engines(down_for_some)
    with engines:
        first = run_profiles(recipe, engines, tmp_path, cfg)
    failures = [json.loads(line) for line in (tmp_path / "profiles" / "failures.jsonl").read_text().splitlines()]
    outages = [f for f in failures if f["retry_on_rerun"]]
    invalid = [f for f in failures if not f["retry_on_rerun"]]
    assert outages and invalid and all("TransportError" in f["error"] for f in outages)
    assert all("StructuredOutputError" in f["error"] for f in invalid)

    engines2, backend2 = fake_engines(responder)
    with engines2:
        second = run_profiles(recipe, engines2, tmp_path, cfg)
    # Only the patients the outage hit are asked again; invalid output after the bounded re-asks is
    # final for the run (checkpointed), so it is neither re-asked nor able to reshuffle the pool.
    asked = {r.messages[1]["content"] for r in backend2.requests if r.messages[1]["content"].count("Client")}
    assert 0 < len(asked) <= len(outages)
    assert sum(second.failed.values()) == len(invalid) + sum(
        1
        for line in (tmp_path / "profiles" / "failures.jsonl").read_text().splitlines()
        if json.loads(line)["retry_on_rerun"]
    )
    assert second.kept >= first.kept
    assert {p.profile_id for p in load_profiles(tmp_path / "profiles", pool_only=False)} == {
        o["profile"]["profile_id"] for o in _checkpoints(tmp_path) if o["status"] == "ok"
    }

    engines3, backend3 = fake_engines(responder)
    with engines3:
        third = run_profiles(recipe, engines3, tmp_path, cfg)
    assert backend3.requests == [] and third.pool == second.pool and third.kept == second.kept


def test_same_seed_same_pool(fake_engines, fakes, recipe, tmp_path):
    cfg = ProfilesConfig(candidates=25, pool_size=6, benchmark_size=3)
    pools = []
    for i in range(2):
        engines, _ = fake_engines(fakes.make_responder())
        with engines:
            run_profiles(recipe, engines, tmp_path / str(i), cfg)
        pools.append([p.profile_id for p in load_profiles(tmp_path / str(i) / "profiles")])
    assert pools[0] == pools[1] and len(pools[0]) == 6


def test_small_writer_budget_is_warned(fake_engines, fakes, recipe, tmp_path):
    from mindsimkit.mindcore.config import RoleSpec
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.fake import FakeBackend

    backend = FakeBackend(fakes.make_responder())
    engines = Engines.with_backend(backend, roles={"default": RoleSpec(engine="fake", max_tokens=384)})
    with engines:
        s = run_profiles(recipe, engines, tmp_path, ProfilesConfig(candidates=3, pool_size=2, benchmark_size=1))
    assert len(s.warnings) == 1 and "profile_writer.max_tokens is 384" in s.warnings[0]


def _first_serious(fakes, n: int):
    """A screener that calls the first `n` profiles it reviews serious (a noisy judge), the rest clean."""
    seen: list[str] = []

    def screener(request):
        head = fakes.profile_text(request).split("\n")[0]
        if head not in seen:
            seen.append(head)
        if seen.index(head) < n:
            return {
                "faults": [{"quote": "Get back to feeling like myself", "reason": "generic", "severity": "serious"}],
                "verdict": "serious",
            }
        return fakes.clean_verdict(request)

    return fakes.make_responder(screener=screener)


def test_a_pool_emptied_by_a_noisy_screener_is_topped_up_with_more_candidates(fake_engines, fakes, recipe, tmp_path):
    cfg = ProfilesConfig(candidates=3, pool_size=2, benchmark_size=1, max_revisions=0)
    engines, _ = fake_engines(_first_serious(fakes, 3))
    with engines:
        s = run_profiles(recipe, engines, tmp_path / "plain", cfg)
    assert (s.candidates, s.kept, s.pool) == (3, 0, 0)
    engines, _ = fake_engines(_first_serious(fakes, 3))
    with engines:
        s = run_profiles(recipe, engines, tmp_path / "topped", cfg.model_copy(update={"extra_candidates": 3}))
    # The next three personas of the same seeded order were written and screened: the pool is full.
    assert (s.candidates, s.dropped_serious, s.pool) == (6, 3, 2) and s.warnings == []
    first = {p.profile_id for p in load_profiles(tmp_path / "topped" / "profiles", pool_only=False)}
    assert len(first) == 3


def test_a_pool_left_short_says_so_in_one_line(fake_engines, fakes, recipe, tmp_path):
    engines, _ = fake_engines(_first_serious(fakes, 2))
    with engines:
        s = run_profiles(
            recipe, engines, tmp_path, ProfilesConfig(candidates=3, pool_size=2, benchmark_size=1, max_revisions=0)
        )
    (line,) = [w for w in s.warnings if "pool" in w]
    assert line.startswith("profiles: a pool of 1 where 2 were asked: 3 candidates written, 1 kept")
    assert "raise profiles.candidates or profiles.extra_candidates" in line and "\n" not in line
