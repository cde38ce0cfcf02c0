"""The judge on the real embedded engine (SmolLM2-135M), checked on the suite's study run (the README's job,
every patient engine, judges every counsellor reply with the definitions-only rubric), so no second embedded
judging run is paid for. A 135M model's verdicts are not meaningful; the test proves the schema, the rule check and the row
bookkeeping hold on real output."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from mindsimkit.judge.judging import quote_in
from mindsimkit.judge.schemas import read_judgments
from mindsimkit.mindcore.layout import RunLayout

pytestmark = pytest.mark.embedded


def test_every_reply_of_the_study_judged_or_counted(study_run):
    rows = read_judgments(study_run / "judgments" / "judgments.parquet")
    sessions = pq.read_table(study_run / "sessions" / "sessions.parquet").to_pylist()
    replies = {
        (s["session_id"], i)
        for s in sessions
        for i, _ in enumerate(m for m in s["counsellor_messages"] if m["role"] == "assistant")
    }
    assert {(r.session_id, r.reply_index) for r in rows} == replies
    for r in rows:
        assert "+compact" in r.rubric_version  # definitions only, as the quickstart recipe asks
        # The embedded engine takes the no-issue rule as schema alternatives, so no answer can break it.
        assert "is required when no issue is listed" not in (r.error or "")
        if r.status == "ok":
            assert (r.severity == "no_concern") == (not r.issues)
            assert all(i.quote is None or quote_in(i.quote, r.reply) for i in r.issues)
        else:
            assert r.error and r.severity is None
    info = json.loads((study_run / "run.json").read_text())
    judged = RunLayout(study_run).header().counts.judged
    ok, failed = judged.first, judged.second
    assert (ok, failed) == (sum(r.status == "ok" for r in rows), sum(r.status == "failed" for r in rows))
    usage = info["usage"]["judge"]
    # One call (or more, with re-asks) per distinct judge input: replies that meet the same context with the same
    # words (engines sharing the first scenario, a seeded counsellor) are judged once, through the cache.
    distinct = len({r.cache_key for r in rows})
    assert distinct <= len(rows) and usage["calls"] >= distinct
    assert usage["prompt_tokens"] > 1000 * usage["calls"]  # the rubric was sent
    assert (study_run / "judgments" / "report.md").is_file()


def test_judging_the_study_again_from_the_cache_leaves_every_reader_working(study_run, embedded_engines, tmp_path):
    """A judge rerun on the real engine: `mindsim judge run` on the finished study is served from the cache; only the
    judgments that failed (the 135M model often breaks the schema) are asked again, as documented. Judge usage is
    added to the job's, never replaced; with nothing failed no judgment file changes; and export, report and
    publish --dry-run still exit 0 afterwards."""
    import hashlib
    import shutil
    import subprocess
    import sys

    from quick_recipes import attached_env

    run = Path(shutil.copytree(study_run, tmp_path / "run"))
    recipe = study_run.parent / "recipe.yaml"
    files = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (run / "judgments").glob("*") if p.is_file()}
    calls = json.loads((run / "judgments" / "report.json").read_text())["usage"]["judge"]["calls"]
    failed = sum(r.status == "failed" for r in read_judgments(run / "judgments" / "judgments.parquet"))
    env = attached_env(embedded_engines)
    mindsim = [sys.executable, "-m", "mindsimkit.mindsim"]
    for argv in (
        ["judge", "run", run, "--recipe", recipe],
        ["export", "sft", run, "--out", tmp_path / "sft.jsonl"],
        ["report", run, "--out", tmp_path / "r.html"],
        ["publish", run, "--repo-id", "someone/x", "--dry-run"],
    ):
        done = subprocess.run([*mindsim, *map(str, argv)], capture_output=True, text=True, env=env, timeout=900)
        assert done.returncode == 0, (argv, done.stderr[-3000:])
    after = json.loads((run / "judgments" / "report.json").read_text())["usage"]["judge"]["calls"]
    assert calls > 0 and (after == calls if not failed else after > calls)  # added to, never replaced
    if not failed:
        assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in files} == files


def test_the_grammar_holds_the_no_issue_rule_where_the_model_is_told_to_break_it(embedded_engines):
    """Told to copy an answer that lists an issue with severity no_concern, the 135M model copies it under the plain
    object schema and cannot under the two alternatives the judge sends a grammar engine: each answer parses at its
    first attempt, an issue listed with a severity above none."""
    import asyncio

    from mindsimkit.judge.rubric import answer_model, load_rubric
    from mindsimkit.mindcore.errors import StructuredOutputError

    client = embedded_engines.role("judge")
    assert client.schema_alternatives
    pushed = [
        {
            "role": "user",
            "content": 'Copy this JSON exactly: {"issues": [{"issue": "false_fact", "reason": "made up a number", '
            '"quote": null}], "severity": "no_concern"}',
        }
    ]

    async def ask(split: bool, seed: int) -> object:
        model = answer_model(load_rubric(), 3, rule_in_schema=split)
        try:
            answer, _ = await client.structured_reply(pushed, model, max_attempts=1, seed=seed, max_tokens=700)
        except StructuredOutputError as exc:
            return exc
        return answer

    async def both() -> list[list[object]]:
        return [list(await asyncio.gather(*(ask(split, seed) for seed in range(4)))) for split in (False, True)]

    plain, split = embedded_engines.run(both())
    assert any(isinstance(a, StructuredOutputError) and "no_concern" in a.last_error for a in plain)
    for answer in split:
        assert not isinstance(answer, Exception), answer
        assert answer.issues and answer.severity != "no_concern"  # type: ignore[attr-defined]
