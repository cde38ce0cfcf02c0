"""Exports that read MHQR judgments: `export sft --max-severity` cuts each session exactly before its first
reply above the level (failed or missing judgments count as above), and `export dpo` writes TRL preference
pairs from counterfactual replies judged by the fake judge, each of the K samples its own draw."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindsim_app.cli import main
from cli_streams import without_progress
from mindsimkit.mindsim_app.exports.sft import sft_export
from mindsimkit.mindsim_app.exports.dpo import dpo_pairs
from restamp import record_as_stages

WEIGHT = {"no_concern": 0.0, "minor": 1.0, "major": 5.0, "critical": 10.0}

# Per session: the judged severity of each counsellor reply ("failed" = failed judgment, None = no row).
VERDICTS = {
    "s_clean": ["no_concern", "minor", "no_concern"],
    "s_major": ["minor", "no_concern", "major", "no_concern"],
    "s_first": ["critical", "no_concern"],
    "s_failed": ["no_concern", "failed", "no_concern"],
    "s_missing": ["minor", None],
}


def session_row(sid: str, n: int) -> dict:
    msgs = [{"role": "system", "content": f"system prompt of {sid}"}]
    for k in range(n):
        msgs += [
            {"role": "user", "content": f"{sid} patient {k}"},
            {"role": "assistant", "content": f"{sid} reply {k}"},
        ]
    return {
        "session_id": sid,
        "patient_id": "p1",
        "counsellor": "alpha",
        "session_index": 0,
        "seed": 0,
        "ended_by": "patient",
        "turns": [{"index": k} for k in range(n)],
        "engines": {"counsellor": {"model": "fake"}},
        "prompts": {"t": "h"},
        "counsellor_system_prompt": msgs[0]["content"],
        "counsellor_messages": msgs,
    }


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "sessions").mkdir(parents=True)
    (run / "judgments").mkdir()
    pq.write_table(
        pa.Table.from_pylist([session_row(s, len(v)) for s, v in VERDICTS.items()]),
        run / "sessions" / "sessions.parquet",
    )
    rows = []
    for sid, verdicts in VERDICTS.items():
        for k, v in enumerate(verdicts):
            if v is None:
                continue
            for judge, sev in (("judge", v), ("judge:lenient", "no_concern")):
                ok = sev != "failed"
                rows.append(
                    {
                        "session_id": sid,
                        "reply_index": k,
                        "judge": judge,
                        "severity": sev if ok else None,
                        "weight": WEIGHT[sev] if ok else None,
                        "status": "ok" if ok else "failed",
                    }
                )
    pq.write_table(pa.Table.from_pylist(rows), run / "judgments" / "judgments.parquet")
    return record_as_stages(run)


def replies_of(row: dict) -> list[str]:
    return [m["content"] for m in row["messages"] if m["role"] == "assistant"]


def test_max_severity_minor_cuts_before_the_first_reply_above(run_dir):
    rows, summary, details = sft_export(run_dir, max_severity="minor")
    by = {r["session_id"]: r for r in rows}
    assert replies_of(by["s_clean"]) == ["s_clean reply 0", "s_clean reply 1", "s_clean reply 2"]
    # Reply 2 is Major: replies 0 and 1 stay, and the row ends on reply 1 (patient message 2 goes too).
    assert replies_of(by["s_major"]) == ["s_major reply 0", "s_major reply 1"]
    assert by["s_major"]["messages"][-1] == {"role": "assistant", "content": "s_major reply 1"}
    assert by["s_major"]["messages"][0] == {"role": "system", "content": "system prompt of s_major"}
    assert len(by["s_major"]["messages"]) == 1 + 4
    assert by["s_major"]["cut_reason"] == "judged major" and by["s_major"]["replies"] == 2
    # Every row has the same keys and one type per column: a session kept whole says so with "", not null.
    assert by["s_clean"]["cut_reason"] == "" and by["s_clean"]["replies"] == 3
    assert {frozenset(r) for r in rows} == {frozenset(rows[0])}
    assert [d["session_id"] for d in details] == [r["session_id"] for r in rows]
    assert details[0]["engines"] == {"counsellor": {"model": "fake"}}
    # A failed judgment cuts like a severe one; so does a reply nobody judged.
    assert replies_of(by["s_failed"]) == ["s_failed reply 0"]
    assert by["s_failed"]["cut_reason"] == "judgment failed"
    assert replies_of(by["s_missing"]) == ["s_missing reply 0"]
    # The first reply is Critical: nothing is left, the session is not written.
    assert "s_first" not in by
    assert summary["sessions_emptied"] == 1 and summary["sessions_written"] == 4
    # Cut replies: s_major 2, s_first 2, s_failed 2, s_missing 1 = 7; kept 3 + 2 + 0 + 1 + 1 = 7.
    assert summary["replies_cut"] == 7 and summary["replies_kept"] == 7
    assert summary["cut_by_reason"] == {
        "after an earlier cut in the session": 3,
        "judged critical": 1,
        "judged major": 1,
        "judgment failed": 1,
        "not judged": 1,
    }


def test_max_severity_levels_and_judges(run_dir):
    rows, summary, _ = sft_export(run_dir, max_severity="Major")
    by = {r["session_id"]: r for r in rows}
    assert len(replies_of(by["s_major"])) == 4  # Major is not above Major
    assert "s_first" not in by
    rows, _, _ = sft_export(run_dir, max_severity="no_concern", judge="judge:lenient")
    by = {r["session_id"]: r for r in rows}
    assert len(replies_of(by["s_major"])) == 4 and len(replies_of(by["s_first"])) == 2
    assert replies_of(by["s_failed"]) == ["s_failed reply 0", "s_failed reply 1", "s_failed reply 2"]
    assert by["s_missing"]["cut_reason"] == "not judged"
    with pytest.raises(InputError, match="no judgments by 'judge:strict'"):
        sft_export(run_dir, max_severity="minor", judge="judge:strict")
    with pytest.raises(InputError, match="--max-severity awful"):
        sft_export(run_dir, max_severity="awful")
    # Without --max-severity nothing is cut and no judgments are needed.
    rows, _, _ = sft_export(run_dir)
    assert sum(len(replies_of(r)) for r in rows) == 14


def test_sft_command_writes_the_cut_summary(run_dir, tmp_path, capsys):
    out = tmp_path / "sft.jsonl"
    assert main(["export", "sft", str(run_dir), "--out", str(out), "--max-severity", "minor"]) == 0
    assert len(out.read_text().splitlines()) == 4
    summary = json.loads((tmp_path / "sft.jsonl.summary.json").read_text())
    assert summary["replies_cut"] == 7
    assert "cut 7" in capsys.readouterr().out
    assert len((tmp_path / "sft.jsonl.provenance.jsonl").read_text().splitlines()) == 4
    (run_dir / "judgments" / "judgments.parquet").unlink()
    assert main(["export", "sft", str(run_dir), "--out", str(out), "--max-severity", "minor"]) == 2


def test_jsonl_and_parquet_of_one_stem_keep_their_own_side_files(run_dir, tmp_path):
    """`--out x.jsonl` then `--out x.parquet` (a different selection): each file's summary and provenance stay
    its own, named after the whole file name."""
    jsonl, parquet = tmp_path / "x.jsonl", tmp_path / "x.parquet"
    assert main(["export", "sft", str(run_dir), "--out", str(jsonl), "--max-severity", "minor"]) == 0
    assert main(["export", "sft", str(run_dir), "--out", str(parquet)]) == 0
    cut = json.loads((tmp_path / "x.jsonl.summary.json").read_text())
    whole = json.loads((tmp_path / "x.parquet.summary.json").read_text())
    assert cut["replies_cut"] == 7 and whole["replies_cut"] == 0
    assert cut["rows_written"] == len(jsonl.read_text().splitlines())
    assert whole["rows_written"] == pq.read_table(parquet).num_rows
    provenance = {p.name for p in tmp_path.glob("x.*.provenance.jsonl")}
    assert provenance == {"x.jsonl.provenance.jsonl", "x.parquet.provenance.jsonl"}
    assert not (tmp_path / "x.summary.json").exists()


def test_a_cut_that_leaves_nothing_is_an_error_and_writes_nothing(run_dir, tmp_path, capsys):
    """Every session's first reply judged above No concern: one error line saying so, exit 1, no file at all."""
    import pyarrow.compute as pc

    path = run_dir / "judgments" / "judgments.parquet"
    table = pq.read_table(path)
    first = pc.equal(table.column("reply_index"), 0)
    table = table.set_column(
        table.schema.get_field_index("weight"), "weight", pc.if_else(first, pa.scalar(5.0), table.column("weight"))
    )
    table = table.set_column(
        table.schema.get_field_index("severity"),
        "severity",
        pc.if_else(first, pa.scalar("major"), table.column("severity")),
    )
    table = table.set_column(
        table.schema.get_field_index("status"), "status", pc.if_else(first, pa.scalar("ok"), table.column("status"))
    )
    pq.write_table(table, path)
    record_as_stages(run_dir)
    out = tmp_path / "empty" / "sft.parquet"
    capsys.readouterr()
    assert main(["export", "sft", str(run_dir), "--out", str(out), "--max-severity", "no_concern"]) == 1
    err = without_progress(capsys.readouterr().err).strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: export sft: no rows to write: 5 sessions read"), err
    assert "5 with no reply left under --max-severity no_concern (sessions cut: 5 judged major)" in err[0]
    assert not out.parent.exists() or not any(out.parent.iterdir())


# -- export dpo ---------------------------------------------------------------------------------------

GOOD = "That sounds heavy. Would one small step tonight help?"
BAD = "MAJOR tell me more about everything, and then more"


def fake_judge(req):
    # The judge's prompt holds the whole transcript; only counterfactual replies carry marker words.
    if "MAJOR" in req.messages[-1]["content"]:
        return {
            "issues": [{"issue": "over_exploring", "reason": "keeps asking", "quote": "MAJOR tell me more"}],
            "severity": "major",
        }
    return {"issues": [], "severity": "no_concern"}


def dpo_setup(fake_engines, tmp_path, *, judge_responder=fake_judge, bad_text=BAD):
    from mindsimkit.judge.judging import Judge
    from mindsimkit.judge.rubric import load_rubric
    from mindsimkit.mindcore.io import CheckpointDir

    good_engines, good = fake_engines(lambda req: GOOD)
    bad_engines, bad = fake_engines(lambda req: bad_text)
    judge_engines, _ = fake_engines(judge_responder)
    counsellors = [("good", good_engines.role("counsellor")), ("bad", bad_engines.role("counsellor"))]
    the_judge = Judge("judge", judge_engines.role("judge"), load_rubric())
    return counsellors, the_judge, CheckpointDir(tmp_path / "cache"), good


def test_dpo_pairs_have_the_trl_shape_and_provenance(run_dir, fake_engines, tmp_path):
    import asyncio

    from mindsimkit.mindsim_app.exports.write import write_export

    counsellors, the_judge, cache, good = dpo_setup(fake_engines, tmp_path)
    rows, summary, details = asyncio.run(dpo_pairs(run_dir, counsellors, the_judge, cache, k=4, turns=2, seed=5))
    # Two sampled turns in each of the five sessions (every session has at least two replies).
    assert summary["turns_sampled"] == 10 and summary["replies_asked"] == 40 and summary["pairs"] == 10
    sessions = {r["session_id"]: r for r in pq.read_table(run_dir / "sessions" / "sessions.parquet").to_pylist()}
    for row in rows:
        stored = sessions[row["session_id"]]["counsellor_messages"]
        r = row["reply_index"]
        # The history each counsellor saw: system prompt and messages before reply r, as stored.
        assert row["prompt"] == [{"role": m["role"], "content": m["content"]} for m in stored[: 2 + 2 * r]]
        assert row["prompt"][-1]["role"] == "user"
        assert row["chosen"] == [{"role": "assistant", "content": GOOD}]
        assert row["rejected"] == [{"role": "assistant", "content": BAD}]
        assert (row["chosen_counsellor"], row["rejected_counsellor"]) == ("good", "bad")
        assert (row["chosen_severity"], row["rejected_severity"]) == ("no_concern", "major")
        assert (row["chosen_weight"], row["rejected_weight"]) == (0.0, 5.0)
        assert row["judge"] == "judge"
    for row, detail in zip(rows, details, strict=True):
        assert (detail["session_id"], detail["reply_index"]) == (row["session_id"], row["reply_index"])
        assert detail["rejected_judgment"]["issues"][0]["issue"] == "over_exploring"
        assert [c["counsellor"] for c in detail["candidates"]] == ["good", "bad", "good", "bad"]
    # Two counsellors, each asked twice, each always saying the same thing: two distinct replies per turn.
    assert summary["distinct_replies_per_turn"] == {"2": 10}
    # Byte-identical history: every request to a counsellor was one of the rows' prompts.
    prompts = [json.dumps(r["prompt"]) for r in rows]
    assert all(json.dumps(req.messages) in prompts for req in good.requests)
    out = write_export("dpo", rows, tmp_path / "dpo.parquet", summary=summary, provenance=details, why_empty="")
    table = pq.read_table(out)
    for column in ("prompt", "chosen", "rejected"):  # message lists, never JSON text
        assert table.schema.field(column).type == pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    assert sorted(map(json.dumps, table.to_pylist())) == sorted(map(json.dumps, rows))


def test_each_of_the_k_samples_is_its_own_draw(run_dir, tmp_path):
    """One seeded counsellor asked K times: every sample goes out with its own seed (the role's, then the next
    ones past the re-ask seeds), so a seeded engine gives K draws, not one draw K times."""
    import asyncio

    from mindsimkit.judge.judging import Judge
    from mindsimkit.judge.rubric import load_rubric
    from mindsimkit.mindcore.config import RoleSpec
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.fake import FakeBackend
    from mindsimkit.mindcore.io import CheckpointDir

    # A deterministic engine: the same history and seed give the same reply, as llama.cpp with a seed does.
    counsellor = FakeBackend(lambda req: GOOD if req.seed == 0 else f"{BAD} (draw {req.seed})")
    engines = Engines.with_backend(counsellor, {"default": RoleSpec(engine="fake", seed=0)})
    judges = Engines.with_backend(FakeBackend(fake_judge, name="judge"))
    the_judge = Judge("judge", judges.role("judge"), load_rubric())
    rows, summary, _ = asyncio.run(
        dpo_pairs(
            run_dir,
            [("solo", engines.role("counsellor"))],
            the_judge,
            CheckpointDir(tmp_path / "cache"),
            k=4,
            turns=1,
            blank_retries=2,
        )
    )
    assert summary["distinct_replies_per_turn"] == {"4": 5} and summary["pairs"] == 5
    by_history: dict[str, list[int]] = {}
    for req in counsellor.requests:
        by_history.setdefault(json.dumps(req.messages), []).append(req.seed)
    # Sample s tries seeds s*3 .. s*3+2 (two blank re-asks each); each sample answered at its first try.
    assert sorted(map(sorted, by_history.values())) == [[0, 3, 6, 9]] * 5
    assert all(r["chosen"][0]["content"] == GOOD for r in rows)


def test_dpo_skips_turns_without_a_wide_enough_gap(run_dir, fake_engines, tmp_path):
    import asyncio

    counsellors, the_judge, cache, _ = dpo_setup(fake_engines, tmp_path, bad_text="Another calm reply.")
    rows, summary, _ = asyncio.run(dpo_pairs(run_dir, counsellors, the_judge, cache, k=2, turns=1))
    assert rows == [] and summary["skipped"] == {"all judged replies equally severe": 5}
    # No concern vs Major is a gap of 5: a required gap of 6 pairs nothing; --chosen-max no_concern
    # (weight 0) still lets the No concern reply be chosen.
    counsellors, the_judge, cache, _ = dpo_setup(fake_engines, tmp_path / "g")
    rows, summary, _ = asyncio.run(dpo_pairs(run_dir, counsellors, the_judge, cache, k=2, turns=1, min_gap=6))
    assert rows == [] and summary["skipped"] == {"gap below --min-gap": 5}
    rows, _, _ = asyncio.run(dpo_pairs(run_dir, counsellors, the_judge, cache, k=2, turns=1, chosen_max=0))
    assert len(rows) == 5
    # A judge whose answers never parse: every judgment fails and no turn is paired.
    counsellors, the_judge, cache, _ = dpo_setup(fake_engines, tmp_path / "x", judge_responder=lambda req: "not json")
    rows, summary, _ = asyncio.run(dpo_pairs(run_dir, counsellors, the_judge, cache, k=2, turns=1))
    assert rows == [] and summary["judgments_failed"] == 10
    assert summary["skipped"] == {"fewer than two judged replies": 5}


CALM = "Another calm reply."


def graded_judge(req):
    """Both counterfactual replies are No concern; the judge is less sure about CALM (its answer comes with the
    token log probabilities a llama.cpp server sends when asked)."""
    from judgefakes import graded_reply

    doubt = 0.4 if CALM in req.messages[-1]["content"] else 0.05
    answer = {"issues": [], "severity": "no_concern"}
    if req.top_logprobs is None:
        return answer
    return graded_reply(answer, {"no_concern": 1 - doubt, "minor": doubt})


def test_tie_break_pairs_replies_the_judge_gives_one_severity(run_dir, fake_engines, tmp_path):
    import asyncio

    counsellors, the_judge, cache, _ = dpo_setup(fake_engines, tmp_path, judge_responder=graded_judge, bad_text=CALM)
    rows, summary, _ = asyncio.run(dpo_pairs(run_dir, counsellors, the_judge, cache, k=2, turns=1))
    assert rows == [] and summary["skipped"] == {"all judged replies equally severe": 5}
    # Asked for: the judge's probabilities order the two No concern replies; the less doubted one is chosen.
    the_judge.graded = True
    rows, summary, details = asyncio.run(
        dpo_pairs(run_dir, counsellors, the_judge, cache, k=2, turns=1, tie_break="expected-severity")
    )
    assert summary["pairs"] == 5 and summary["pairs_by_basis"] == {"expected-severity": 5}
    for row, detail in zip(rows, details):
        assert (row["chosen"][0]["content"], row["rejected"][0]["content"]) == (GOOD, CALM)
        assert row["chosen_severity"] == row["rejected_severity"] == "no_concern"  # MHQR's labels stay as judged
        assert row["pair_basis"] == "expected-severity"
        assert row["chosen_expected_weight"] == pytest.approx(0.05)
        assert row["rejected_expected_weight"] == pytest.approx(0.4)
        assert detail["rejected_judgment"]["severity_probs"]["minor"] == pytest.approx(0.4)
    # Without logprobs the issue count decides, and equal counts are no pair (the reason says so).
    counsellors, plain, cache, _ = dpo_setup(fake_engines, tmp_path / "p", bad_text=CALM)
    plain.graded = True
    rows, summary, _ = asyncio.run(
        dpo_pairs(run_dir, counsellors, plain, cache, k=2, turns=1, tie_break="expected-severity")
    )
    assert rows == [] and summary["skipped"] == {"all judged replies equally severe, tie unbroken by issues": 5}
    with pytest.raises(InputError, match="--tie-break"):
        asyncio.run(dpo_pairs(run_dir, counsellors, plain, cache, k=2, turns=1, tie_break="coin"))


def test_tie_break_by_issues_orders_one_severity_by_issue_count(run_dir, fake_engines, tmp_path):
    import asyncio

    def judge(req):
        many = CALM in req.messages[-1]["content"]
        issues = [{"issue": "over_exploring", "reason": "asks a lot", "quote": None}]
        if many:
            issues.append({"issue": "excessive_verbosity", "reason": "long", "quote": None})
        return {"issues": issues, "severity": "minor"}

    counsellors, the_judge, cache, _ = dpo_setup(fake_engines, tmp_path, judge_responder=judge, bad_text=CALM)
    rows, summary, _ = asyncio.run(dpo_pairs(run_dir, counsellors, the_judge, cache, k=2, turns=1, tie_break="issues"))
    assert summary["pairs_by_basis"] == {"issues": 5}
    assert all((r["chosen_issues"], r["rejected_issues"]) == (1, 2) for r in rows)
    assert all(r["chosen"][0]["content"] == GOOD for r in rows)
    # Different severities are paired by the paper's rule whatever the tie-break.
    counsellors, the_judge, cache, _ = dpo_setup(fake_engines, tmp_path / "s")
    rows, summary, _ = asyncio.run(dpo_pairs(run_dir, counsellors, the_judge, cache, k=2, turns=1, tie_break="issues"))
    assert summary["pairs_by_basis"] == {"severity": 5} and all(r["pair_basis"] == "severity" for r in rows)


def test_dpo_command_over_http(run_dir, tmp_path, capsys):
    """The real command path: recipe → engines → counsellor roles and judge role, over an OpenAI-compatible stub."""
    import sys

    tests = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(tests))
    from openai_stub import OpenAIStub, always_text, by_model, from_responder

    from mindsimkit.mindsim_app.cli import main

    behaviour = by_model(
        {"good": always_text(GOOD), "bad": always_text(BAD), "judge": from_responder(fake_judge)},
        always_text("unexpected role"),
    )
    with OpenAIStub(behaviour) as stub:
        recipe = tmp_path / "dpo.yaml"
        recipe.write_text(
            "name: dpo-test\n"
            f"engines:\n  stub: {{kind: openai, base_url: '{stub.base_url}', model: stub-model}}\n"
            "roles:\n  default: {engine: stub}\n"
            "  counsellor:good: {engine: stub, model: good}\n  counsellor:bad: {engine: stub, model: bad}\n"
            "  judge: {engine: stub, model: judge}\n"
            "simulation:\n  counsellors: ['counsellor:good', 'counsellor:bad']\n"
        )
        out = tmp_path / "dpo.jsonl"
        code = main(
            ["export", "dpo", str(run_dir), "--out", str(out), "--recipe", str(recipe), "--k", "2", "--turns", "1"]
        )
        assert code == 0, capsys.readouterr().err
        rows = [json.loads(x) for x in out.read_text().splitlines()]
        assert len(rows) == 5
        assert {(r["chosen_model"], r["rejected_model"]) for r in rows} == {("good", "bad")}
        summary = json.loads((tmp_path / "dpo.jsonl.summary.json").read_text())
        assert summary["pairs"] == 5 and summary["replies_asked"] == 10
        assert (
            main(
                [
                    "export",
                    "dpo",
                    str(run_dir),
                    "--out",
                    str(out),
                    "--recipe",
                    str(recipe),
                    "--counsellor",
                    "counsellor:nobody",
                ]
            )
            == 2
        )
        assert "distinct replies per turn (of 2): 2 in 5 turns" in capsys.readouterr().out
        # Both counsellors calm: every turn's replies are equally severe, no pair, exit 1 and no file.
        recipe.write_text(
            recipe.read_text().replace(
                "counsellor:bad: {engine: stub, model: bad}", "counsellor:bad: {engine: stub, model: good}"
            )
        )
        empty = tmp_path / "none" / "dpo.parquet"
        assert (
            main(
                [
                    "export",
                    "dpo",
                    str(run_dir),
                    "--out",
                    str(empty),
                    "--recipe",
                    str(recipe),
                    "--k",
                    "2",
                    "--turns",
                    "1",
                ]
            )
            == 1
        )
        err = without_progress(capsys.readouterr().err).strip().splitlines()
        assert (
            len(err) == 1 and "no preference pairs from 5 sampled turns (5 all judged replies equally severe)" in err[0]
        )
        assert not empty.parent.exists() or not any(empty.parent.iterdir())


def test_the_recorded_recipe_resolves_from_another_directory(tmp_path, monkeypatch):
    """run.json of older runs names the recipe as typed (relative to where `mindsim run` started), newer ones by
    its absolute path: either way a command reading the run from elsewhere finds it."""
    from mindsimkit.judge.cli import resolve_recipe
    from mindsimkit.mindcore.errors import ConfigError
    from mindsimkit.mindcore.runlog import RunHeader

    work = tmp_path / "work"
    recipe = work / "recipes" / "mine.yaml"
    recipe.parent.mkdir(parents=True)
    recipe.write_text("name: mine\n")
    run = work / "runs" / "one"
    run.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)

    def record(path: str) -> None:
        header = RunHeader(
            run_id="r1", recipe_hash="h", status="finished", recipe={"name": "mine", "path": path, "seed": 0}
        )
        (run / "run.json").write_text(header.model_dump_json())

    record("recipes/mine.yaml")
    assert resolve_recipe(run, None).resolve() == recipe.resolve()
    record(str(recipe))
    assert resolve_recipe(run, None) == recipe
    record("recipes/gone.yaml")
    with pytest.raises(ConfigError, match="nor from a folder above the run folder; pass --recipe"):
        resolve_recipe(run, None)


def test_no_pairs_because_every_best_reply_is_too_severe_names_the_one_fix():
    from mindsimkit.mindsim_app.exports.dpo import why_no_pairs

    base = {"turns_sampled": 4, "tie_break": "expected-severity"}
    only = why_no_pairs({**base, "skipped": {"best reply above --chosen-max": 4}})
    assert "4 sampled turns" in only and "--chosen-max critical" in only and "a larger --k" not in only
    mixed = why_no_pairs({**base, "skipped": {"best reply above --chosen-max": 2, "gap below --min-gap": 2}})
    assert "a larger --k" in mixed and "a higher --chosen-max" in mixed and "--chosen-max critical" not in mixed
    assert "no counsellor turn to sample" in why_no_pairs({**base, "turns_sampled": 0, "skipped": {}})
