"""`mindsim import …`: the MindEval authors' three released files read into the toolkit's files, checked through the
installed console script (exit 0 on a file in the documented shape; exit 2, one `error:` line naming file, record
and field, and nothing written on a file that is not), and read by the commands that use them: `judge alpha`,
`realism report` (Tables 4 and 13), `judge agreement`, and `simulate` under `mindeval2-reference`. The files are
small fixtures in the releases' shapes with invented content (import_fixtures.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from import_fixtures import OPENING, broken, member, realism_release, v1_line, v1_release, write_json, write_jsonl
from mindsimkit.judge.alpha import alpha
from mindsimkit.profilegen.dataset import load_profiles
from test_exit_codes import error_line, mindsim, mindsim_here


def refused(proc: subprocess.CompletedProcess, *parts: str) -> None:
    """Exit 2 with exactly one line on stderr, an `error:` line holding every part."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    line = " ".join(error_line(proc).split())
    for part in parts:
        assert part in line, (part, proc.stderr)


# -- MindEval v1: data/human_annotations.jsonl → the long format → judge alpha -------------------------------------


def test_v1_ratings_import_into_the_long_format_that_judge_alpha_reads(tmp_path):
    src = write_jsonl(tmp_path / "human_annotations.jsonl", v1_release())
    proc = mindsim("import", "mindeval-v1-ratings", src, "--out", tmp_path / "v1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (tmp_path / "v1" / "ratings.jsonl").read_text().splitlines()]
    # 3 conversations x 10 criteria x 3 raters, less the one response whose status is not `submitted`.
    assert len(rows) == 3 * 10 * 3 - 10
    assert {
        "item": "criterion_1",
        "unit": "conv-b",
        "rater": "u-bbbb",
        "value": 4,
        "system": "vendor/model-b",
        "patient": "Ana",
    } in rows
    record = json.loads((tmp_path / "v1" / "import.json").read_text())
    assert record["skipped_by_status"] == {"skipped": 10} and record["conversations"] == 3
    assert len(record["sha256"]) == 64

    proc = mindsim_here(
        "judge",
        "alpha",
        tmp_path / "v1" / "ratings.jsonl",
        "--rubric",
        "mindeval_v1_human",
        "--out",
        tmp_path / "alpha",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    rep = json.loads((tmp_path / "alpha" / "alpha.json").read_text())
    assert rep["not_applicable"] == 2  # the two 0s: not rated, left out of α
    # criterion_1 on the three conversations every rater rated: [2,2,3] [5,4,5] and conv-c's two submitted values.
    got = rep["items"]["criterion_1"]["alpha_pairable"]
    nan = float("nan")
    want = alpha([[2, 5, 3], [2, 4, 3], [3, 5, nan]], "ordinal", [1, 2, 3, 4, 5, 6])
    assert got == pytest.approx(want)


@pytest.mark.parametrize(
    "change, where",
    [
        (lambda ls: ls[1].update({"criterion_2.responses.users": ["u-aaaa"]}), ":2: field 'criterion_2.responses'"),
        (lambda ls: ls[0].update({"criterion_3.responses": [3, 7, 3]}), ":1: field 'criterion_3.responses[1]'"),
        (lambda ls: ls[2].update({"criterion_5.responses": [3, 3, 3]}), ":3: field 'criterion_5.responses'"),
        (lambda ls: ls[0].pop("id"), ":1: field 'id': missing"),
    ],
    ids=["lists-out-of-step", "off-scale", "unknown-criterion", "no-id"],
)
def test_a_v1_file_off_its_shape_is_refused_naming_line_and_field(tmp_path, change, where):
    lines = v1_release()
    change(lines)
    src = write_jsonl(tmp_path / "human_annotations.jsonl", lines)
    refused(
        mindsim_here("import", "mindeval-v1-ratings", src, "--out", tmp_path / "v1", cwd=tmp_path), str(src) + where
    )
    assert not (tmp_path / "v1").exists()


def test_a_v1_file_whose_conversation_repeats_is_refused(tmp_path):
    src = write_jsonl(tmp_path / "h.jsonl", [v1_line("conv-a", {}), v1_line("conv-a", {})])
    refused(
        mindsim_here("import", "mindeval-v1-ratings", src, "--out", tmp_path / "v1", cwd=tmp_path),
        "conversation id 'conv-a' repeats",
    )


# -- MindEval2 realism study: member_realism_annotations.json → Tables 4, 13 and the counsellor labels ------------


def test_the_realism_release_gives_tables_4_and_13_straight_from_the_file(tmp_path):
    src = write_json(tmp_path / "member_realism_annotations.json", realism_release())
    proc = mindsim_here("realism", "report", src, "--out", tmp_path / "rep", "--draws", "50", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rep = json.loads((tmp_path / "rep" / "realism_report.json").read_text())
    t4 = rep["table4"]
    assert set(t4) == {"mindsim", "mindeval", "patient_psi"}  # the release's ours / mindeval / patient.psi
    ours = t4["mindsim"]
    assert ours["ratings"] == 7 and ours["conversations"] == 2
    assert ours["mean_turn"] == pytest.approx(30 / 7)
    assert ours["mean_conversation"] == pytest.approx((25 / 6 + 5) / 2)
    assert ours["share_at_most_3"] == pytest.approx(1 / 7) and ours["share_no_reason"] == pytest.approx(5 / 7)
    assert ours["reason_shares"]["register"] == pytest.approx(1 / 7)
    assert ours["reason_shares"]["sycophancy"] == pytest.approx(1 / 7)
    me = t4["mindeval"]
    assert me["reason_shares"]["emotional_mismatch"] == pytest.approx(1 / 5)
    assert me["reason_shares"]["content_other"] == pytest.approx(1 / 5)
    assert me["reason_shares"]["typography"] == pytest.approx(1 / 5)
    t13 = rep["table13"]
    # item_001's two turns, rated by A1, A2 and A3: (4, 4, 5) and (5, 3, 4).
    assert t13["raters"] == ["A1", "A2", "A3"] and t13["turns"] == 2 and t13["items"] == 1
    assert t13["alpha"] == pytest.approx(alpha([[4, 5], [4, 3], [5, 4]], "ordinal", [1, 2, 3, 4, 5]))
    assert t13["within_one"] == 0.5 and t13["exact"] == 0.0
    assert (tmp_path / "rep" / "realism_report.png").is_file()


def test_the_realism_import_writes_ratings_and_counsellor_labels_that_judge_agreement_reads(tmp_path):
    src = write_json(tmp_path / "member_realism_annotations.json", realism_release())
    out = tmp_path / "imp"
    proc = mindsim("import", "mindeval2-realism", src, "--out", out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "6 windows, 15 turn ratings by 3 annotators" in " ".join(proc.stdout.split())
    record = json.loads((out / "import.json").read_text())
    assert record["release_counts"] == {"items": 6, "turn_ratings": 15} and record["turn_ratings"] == 15
    lines = [json.loads(x) for x in (out / "mhqr_annotations.jsonl").read_text().splitlines()]
    assert {
        "excerpt_id": "item_004",
        "turn": 2,
        "annotator": "A3",
        "severity": "major",
        "issues": ["out_of_scope"],
    } in lines  # the release's out_of_scope_responding, our id
    key = json.loads((out / "mhqr_annotations.key.json").read_text())["excerpts"]
    assert key["item_004"] == {
        "session_id": "item_004",
        "counsellor": "model-x",
        "reply_indices": [0, 1],
        "conversation_id": "conv_003",
        "first_member_turn": 3,
        "system": "mindeval",
        "context": "last5",
    }

    proc = mindsim_here(
        "judge",
        "agreement",
        "--annotations",
        out / "mhqr_annotations.jsonl",
        "--key",
        out / "mhqr_annotations.key.json",
        "--out",
        tmp_path / "agr",
        "--draws",
        "20",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    rep = json.loads((tmp_path / "agr" / "agreement.json").read_text())
    # Each window is its own excerpt (the paper's unit): item_003 and item_004 show two of the same messages of
    # conv_003, to different annotators, and those stay four rated replies.
    assert rep["counts"]["annotations"] == 15 and rep["counts"]["replies"] == 11 and rep["counts"]["excerpts"] == 6
    sev = rep["inter_annotator"]["severity"]
    assert sev["replies_with_several_annotators"] == 2 and sev["replies_annotated_by_all"] == 2
    # item_001 turn 1: A1 no_concern, A2 minor, A3 no_concern; turn 2 all no_concern.
    assert sev["exact"] == pytest.approx(4 / 6)
    assert set(rep["ranking"]["pooled"]) == {"model-x", "model-y"}

    proc = mindsim_here(
        "realism", "report", out / "realism_ratings.jsonl", "--out", tmp_path / "rep", "--draws", "10", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr


def _drop_turn(r):
    r["items"][0]["ratings"] = [x for x in r["items"][0]["ratings"] if not (x["annotator"] == "A2" and x["turn"] == 2)]


@pytest.mark.parametrize(
    "change, parts",
    [
        (
            lambda r: r["items"][2]["ratings"][0]["counsellor_issues"].append("rude"),
            ["items[2].ratings[0]: field 'counsellor_issues[2]': unknown label 'rude'"],
        ),
        (lambda r: r["items"][1].update(system="human"), ["items[1]: field 'system': unknown value 'human'"]),
        (lambda r: r["items"][4]["ratings"][1].update(rating=6), ["items[4].ratings[1]: field 'rating': 6"]),
        (_drop_turn, ["items[0]: field 'ratings': annotator 'A2' rates turns [1] but not [2]"]),
        (lambda r: r["items"][3]["turns"][1].update(turn=3), ["items[3].turns[1]: field 'turn': turns are numbered"]),
        (lambda r: r["items"][3]["ratings"][1].update(turn=3), ["items[3].ratings[1]: field 'turn': 3"]),
        (lambda r: r["items"][5]["source_window"].update(n_turns=3), ["items[5].source_window: field 'n_turns'"]),
        (lambda r: r.pop("items"), ["field 'items': missing"]),
    ],
    ids=[
        "unknown-issue",
        "unknown-system",
        "off-scale",
        "turn-unrated",
        "turns-out-of-order",
        "no-such-turn",
        "n-turns",
        "no-items",
    ],
)
def test_a_realism_file_off_its_shape_is_refused_by_both_commands(tmp_path, change, parts):
    src = write_json(tmp_path / "release.json", broken(realism_release(), change))
    refused(mindsim_here("import", "mindeval2-realism", src, "--out", tmp_path / "imp", cwd=tmp_path), str(src), *parts)
    assert not (tmp_path / "imp").exists()
    refused(mindsim_here("realism", "report", src, "--out", tmp_path / "rep", cwd=tmp_path), *parts)
    assert not (tmp_path / "rep").exists()


# -- MindEval2 members: data/profiles.jsonl → a profiles folder → simulate under the preset -------------------------


def test_members_import_as_profiles_with_their_formulation_knobs_archetype_and_first_situation(tmp_path):
    src = write_jsonl(tmp_path / "profiles.jsonl", [member("m9001"), member("m9002", "ready_client")])
    proc = mindsim("import", "mindeval2-profiles", src, "--out", tmp_path / "members", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    one, two = load_profiles(tmp_path / "members")
    raw = member("m9001")
    assert one.profile_id == "m9001" and one.in_pool and one.in_benchmark and not one.layered
    assert one.case_summary == one.writer_brief == raw["formulation"]
    assert one.goal == "I want my Sundays back, and to stop rehearsing every shift in my head."
    assert (one.style.register, one.style.verbosity, one.style.frustration_reactivity) == ("casual", "low", "medium")
    # The preset's map is one to one: their externalizer is our externaliser, their ready_client our fixer.
    assert (one.style.archetype, two.style.archetype) == ("externaliser", "fixer")
    fs = one.first_session
    assert (fs.concealment, fs.emotion) == ("closed", "happiness")  # their high and joy
    assert fs.situation.model_dump() == raw["situation"]
    assert one.imported_from.startswith("SWORDHealth/mind-eval data/profiles.jsonl (sha256 ")
    assert (tmp_path / "members" / "case_summaries" / "m9001.md").read_text() == raw["formulation"] + "\n"


@pytest.mark.parametrize(
    "row, where",
    [
        (member(archetype="worrier"), ":1: field 'archetype': unknown archetype 'worrier'"),
        (member(archetype=None), ":1: field 'archetype': null"),
        (member(knobs={"verbosity": "high"}), ":1.knobs: field 'verbosity': unknown value 'high'"),
        (member(knobs={"mood": "low"}), ":1.knobs: field 'mood': not a field"),
        (member(situation={"goal": None}), ":1.situation: field 'goal': missing or empty"),
        (member(situation={"checkpoints": ["a", "b", "c", "d", "e"]}), ":1.situation: field 'checkpoints'"),
        (member(situation={"behaviors": ["ok", ""]}), ":1.situation: field 'behaviors[1]'"),
        (member(notes="x"), ":1: field 'notes': not a field"),
        (
            {"member_attributes": {"name": "Ana"}, "member_narrative": "You grew up …"},
            ":1: field 'member_attributes': this is MindEval v1's profiles.jsonl",
        ),
    ],
    ids=[
        "unknown-archetype",
        "null-archetype",
        "bad-knob",
        "extra-knob",
        "no-goal",
        "five-checkpoints",
        "blank-behaviour",
        "extra-field",
        "mindeval-v1-file",
    ],
)
def test_a_member_off_the_release_shape_is_refused_naming_line_and_field(tmp_path, row, where):
    src = write_jsonl(tmp_path / "profiles.jsonl", [row])
    refused(
        mindsim_here("import", "mindeval2-profiles", src, "--out", tmp_path / "members", cwd=tmp_path), str(src) + where
    )
    assert not (tmp_path / "members").exists()


def test_a_repeated_member_is_refused(tmp_path):
    src = write_jsonl(tmp_path / "profiles.jsonl", [member("m1"), member("m1")])
    refused(
        mindsim_here("import", "mindeval2-profiles", src, "--out", tmp_path / "members", cwd=tmp_path),
        f"{src}:2: member_id 'm1' repeats the one at {src}:1",
    )


@pytest.mark.parametrize(
    "member_id, problem",
    [
        ("../../PRB_escape1", "holds a path separator"),
        ("/tmp/PRB_escape2", "holds a path separator"),
        ("PRB\nescape3", "holds a control character"),
        ("..", "is a path step"),
        ("x" * 300, "is 300 bytes long"),
    ],
    ids=["dotdot", "absolute", "newline", "dotdot-alone", "longer-than-a-file-name"],
)
def test_a_member_id_that_is_not_one_file_name_is_refused_and_nothing_is_written(tmp_path, member_id, problem):
    """A downloaded members file names the case-summary files: an id must not write outside --out (or fail late as
    an internal error). The third member is the bad one, so two good ones would be written first were it not
    checked before any write."""
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    src = write_jsonl(work / "profiles.jsonl", [member("m1"), member("m2"), member(member_id)])
    out = work / "members"
    before = {p for p in tmp_path.rglob("*")}
    proc = mindsim("import", "mindeval2-profiles", src, "--out", out, cwd=work)
    refused(proc, f"{src}:3: field 'member_id'", problem, "names a file")
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists() and {p for p in tmp_path.rglob("*")} == before
    assert not list(Path("/tmp").glob("PRB_escape*"))


def _recipe(path: Path, base_url: str, roles: list[str], extra: str) -> Path:
    lines = [f"  {r!r}: {{engine: stub, model: {r!r}}}" for r in roles]
    path.write_text(
        f"name: stub\nseed: 3\nengines:\n  stub: {{kind: openai, base_url: '{base_url}', model: m, "
        "native_tools: false}\nroles:\n  default: {engine: stub}\n" + "\n".join(lines) + "\n" + extra
    )
    return path


SIM_ROLES = ["patient", "scenario_writer", "memory_compactor", "counsellor"]


def test_an_imported_member_is_simulated_under_the_preset_with_its_own_first_session(tmp_path):
    """`mindsim simulate` through the console script on a scripted OpenAI-compatible server: session 1 plays the
    released situation verbatim (no scenario writer asked), at its concealment and emotion, with the released
    formulation in the patient's prompt and the reference archetype's moves; session 2 is written as usual."""
    from openai_stub import OpenAIStub, from_responder
    from simfakes import ReferenceResponder

    from mindsimkit.mindsim import reference
    from mindsimkit.mindsim.prompting import load_style_data

    src = write_jsonl(tmp_path / "profiles.jsonl", [member("m9001")])
    assert (
        mindsim_here("import", "mindeval2-profiles", src, "--out", tmp_path / "members", cwd=tmp_path).returncode == 0
    )
    responder = ReferenceResponder(end_after=99)
    with OpenAIStub(from_responder(responder)) as stub:
        stub.serve("m", *SIM_ROLES)
        recipe = _recipe(
            tmp_path / "r.yaml",
            stub.base_url,
            SIM_ROLES,
            "simulation: {preset: mindeval2-reference, sessions: 2, turn_cap: 3}\n",
        )
        proc = mindsim(
            "simulate", "--profiles", tmp_path / "members", "--recipe", recipe, "--out", tmp_path / "sim", cwd=tmp_path
        )
        requests = list(stub.requests)
    assert proc.returncode == 0, proc.stderr
    import pyarrow.parquet as pq

    rows = sorted(
        pq.read_table(tmp_path / "sim" / "sessions" / "sessions.parquet").to_pylist(), key=lambda r: r["session_index"]
    )
    first, second = rows
    raw = member("m9001")
    situation = {k: v for k, v in raw["situation"].items() if k != "situation_id"}
    assert first["scenario"] == situation and first["scenario_shared"]
    assert first["counsellor_messages"][1]["content"] == OPENING  # spoken verbatim, 239 characters
    assert (first["schedule"]["concealment"], first["schedule"]["emotion"]) == ("closed", "happiness")
    assert raw["formulation"].strip() in first["patient_system_prompt"]
    assert load_style_data().emotion["happiness"] in first["patient_system_prompt"]
    assert "scenario/first.jinja2" not in first["prompts"] and second["prompts"]["scenario/next_reference.jinja2"]
    writes = [r for r in requests if (r.get("response_format") or {}).get("json_schema", {}).get("name") == "Scenario"]
    assert len(writes) == 1 and "previous conversation" in writes[0]["messages"][0]["content"]
    # The next-scenario writer reads the released formulation as the profile's writer brief.
    assert raw["formulation"].strip() in writes[0]["messages"][0]["content"]
    moves = {
        tuple(
            json.loads(json.dumps(r["response_format"]["json_schema"]["schema"]))["properties"]["arguments"][
                "properties"
            ]["move"]["enum"]
        )
        for r in requests
        if "commit_move" in json.dumps(r.get("response_format") or {})
    }
    assert moves == {tuple(m.id for m in reference.load_reference_vocabulary().available("externalizer"))}
    scen = json.loads(next((tmp_path / "sim" / "sessions" / "scenarios").glob("*.json")).read_text())
    assert scen["engine"]["given"] == "profile" and scen["engine"]["situation_id"] == "m9001_sit00"


def test_a_patient_engine_that_reads_the_profile_layers_refuses_an_imported_member(tmp_path):
    from mindsimkit.mindcore.engine import Engines
    from mindsimkit.mindcore.errors import InputError
    from mindsimkit.mindcore.fake import FakeBackend
    from mindsimkit.mindsim.config import SimulationConfig
    from mindsimkit.mindsim.simulate import run_simulation
    from mindsimkit.mindsim_app.imports.profiles import convert

    profiles = convert(write_jsonl(tmp_path / "p.jsonl", [member("m9001")]))["profiles"]
    backend = FakeBackend(lambda req: pytest.fail("no model is called"))
    with Engines.with_backend(backend) as engines, pytest.raises(InputError) as err:
        run_simulation(
            profiles, engines, SimulationConfig.from_section({"patient_engine": "patientact"}), tmp_path / "out", seed=0
        )
    assert "m9001" in str(err.value) and "patientact" in str(err.value) and "mindsim" in str(err.value)
