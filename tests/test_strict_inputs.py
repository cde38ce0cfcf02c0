"""Inputs the toolkit cannot read exactly are refused, through the CLI, in one line that names the file, row or field
(the exit-code contract of tests/test_exit_codes.py: exit 2, one `error:` line, no traceback, nothing written):
seeds out of range or written as text, a non-ASCII host, an output under /proc, JSON or YAML nested past Python's
stack, ratings files cut short or with a repeated key or column or a numeric rater, Label Studio exports whose results are malformed, importer JSON with a
repeated key, and recipe cross-checks (pool and candidates, max_tokens and a known context, named roles unbound).
The inspect tasks refuse a bad `-T` argument before any work, in one line inspect prints without a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from test_exit_codes import NOWHERE, Case, _check_case, _write, mindsim, mindsim_here  # noqa: E402

# Nothing listens on the discard port: the recipes fail at load or in preflight's role list, before any request.
ENGINE = "engines:\n  r: {kind: openai, base_url: 'URL', model: m}\nroles:\n  default: {engine: r}\n"
CLOSED = "http://127.0.0.1:9/v1"
HEAD = b"item,unit,rater,value\n"
ROW = '{"item": "criterion_1", "unit": "c1", "rater": "ana", "value": 4}\n'


def _recipe(extra: str = "", url: str = CLOSED, roles: str = "") -> bytes:
    return (f"name: x\n{extra}" + ENGINE.replace("URL", url) + roles).encode()


def _ls(result: list | None, annotations: bool = True) -> bytes:
    task: dict = {"id": 1, "data": {"id": "u1"}}
    if annotations:
        task["annotations"] = [{"completed_by": {"email": "ana@x"}, "result": result}]
    return json.dumps([task]).encode()


def _choice(choices) -> list:
    return [{"from_name": "criterion_1", "to_name": "t", "type": "choices", "value": {"choices": choices}}]


class Files:
    def __init__(self, root: Path) -> None:
        r = self.root = root
        self.recipe = {
            k: _write(r / f"{k}.yaml", v)
            for k, v in {
                "seed-negative": _recipe("seed: -1\n"),
                "seed-huge": _recipe("seed: 99999999999999999999\n"),
                "seed-text": _recipe("seed: '5'\n"),
                "role-seed-huge": _recipe(roles="  patient: {engine: r, seed: 4294967296}\n"),
                "host-non-ascii": _recipe(url="http://ex\u00e4mple.com/v1"),
                "candidates-huge": _recipe("profiles: {candidates: 100000000000000000000}\n"),
                "max-tokens-huge": _recipe(roles="  judge: {engine: r, max_tokens: 100000000000000000000}\n"),
                "pool-over-candidates": _recipe("profiles: {candidates: 3, pool_size: 5, benchmark_size: 2}\n"),
                "counsellor-unbound": _recipe("simulation: {counsellors: [counsellor, 'counsellor:ghost']}\n"),
                "judge-unbound": _recipe("judge: {judges: ['judge:ghost']}\n"),
                "ok": _recipe(),
            }.items()
        }
        self.recipe["max-tokens-over-context"] = _write(
            r / "ctx.yaml",
            b"name: x\nengines:\n  local: {kind: embedded}\nroles:\n  default: {engine: local, max_tokens: 100000}\n",
        )
        self.recipe["max-tokens-over-vllm-len"] = _write(
            r / "vllm.yaml",
            (
                "name: x\nengines:\n  v: {kind: vllm, model: m, port: 9, serve_args: ['--max-model-len', '2048']}\n"
                "roles:\n  default: {engine: v}\n  patient: {engine: v, max_tokens: 1500, reasoning_budget: 1000}\n"
            ).encode(),
        )
        self.ratings = {
            k: _write(r / f"ratings-{k}", v)
            for k, v in {
                "cut.csv": HEAD + b"criterion_1,c1,ana,4\ncriterion_1,c1,bo,",
                "open-quote.csv": HEAD + b'criterion_1,c1,ana,4\ncriterion_1,"c1',
                "two-columns.csv": b"item,unit,rater,value,value\ncriterion_1,c1,ana,4,5\n",
                "dup-key.jsonl": (
                    ROW + ROW.replace('"value": 4', '"value": 3, "value": 4').replace("ana", "bo")
                ).encode(),
                "rater-number.jsonl": (ROW + ROW.replace('"ana"', "7")).encode(),
            }.items()
        }
        self.ls = {
            k: _write(r / f"ls-{k}.json", v)
            for k, v in {
                "choices-text": _ls(_choice("4")),
                "two-choices": _ls(_choice(["3", "4"])),
                "no-value": _ls([{"from_name": "criterion_1", "to_name": "t", "type": "choices"}]),
                "no-annotations": _ls(None, annotations=False),
                "empty-result": _ls([]),
                "dup-key": _ls(_choice(["4"])).replace(b'"id": "u1"', b'"id": "u1", "id": "u2"'),
            }.items()
        }
        self.realism_dup = _write(r / "realism.json", b'{"items": [], "items": []}')
        self.members_dup = _write(r / "members.jsonl", b'{"member_id": "a", "member_id": "b"}\n')
        self.key_dup = _write(r / "s.key.json", b'{"excerpts": {}, "excerpts": {}}')
        deep = 100_000
        self.deep_jsonl = _write(r / "deep.jsonl", b'{"a":' * deep + b"1" + b"}" * deep + b"\n")
        self.deep_json = _write(r / "deep.json", b"[" * deep + b"]" * deep)
        self.deep_yaml = _write(r / "deep.yaml", b"name: " + b"[" * deep + b"]" * deep + b"\n")
        self.annotations = _write(r / "ann.jsonl", b'{"excerpt_id": "e1", "annotator": "a", "severity": "none"}\n')


def _run(f: Files, name: str) -> list:
    return ["run", f.recipe[name], "--out", f.root / "o"]


CASES = {
    "run/seed-negative": Case(
        lambda f: _run(f, "seed-negative"),
        2,
        lambda f: "seed-negative.yaml: seed: Input should be greater than or equal to 0",
    ),
    "run/seed-huge": Case(
        lambda f: _run(f, "seed-huge"), 2, lambda f: "seed: Input should be less than or equal to 4294967295"
    ),
    "run/seed-text": Case(
        lambda f: _run(f, "seed-text"), 2, lambda f: "seed: '5' is text; write the number without quotes"
    ),
    "run/role-seed-huge": Case(lambda f: _run(f, "role-seed-huge"), 2, lambda f: "roles.patient.seed"),
    "run/candidates-huge": Case(
        lambda f: _run(f, "candidates-huge"),
        2,
        lambda f: "profiles.candidates: Input should be less than or equal to 1000000",
    ),
    "run/max-tokens-huge": Case(
        lambda f: _run(f, "max-tokens-huge"),
        2,
        lambda f: "roles.judge.max_tokens: Input should be less than or equal to 1048576",
    ),
    "run/host-non-ascii": Case(
        lambda f: _run(f, "host-non-ascii"),
        2,
        lambda f: (
            "engines.r.base_url: 'http://ex\u00e4mple.com/v1' "
            "holds characters outside ASCII; write the host in its xn-- form (the host 'ex\u00e4mple.com' is "
            "written 'xn--exmple-cua.com')"
        ),
    ),
    "engines/host-non-ascii": Case(
        lambda f: ["engines", "check", f.recipe["host-non-ascii"]], 2, lambda f: "outside ASCII", out=NOWHERE
    ),
    "run/out-under-proc": Case(
        lambda f: ["run", f.recipe["ok"], "--out", "/proc/mindsim-out"],
        2,
        lambda f: "--out /proc/mindsim-out: inside /proc, a kernel filesystem",
        out=NOWHERE,
    ),
    "judge-alpha/out-under-proc": Case(
        lambda f: [
            "judge",
            "alpha",
            f.ratings["cut.csv"].with_name("ratings-ok.csv"),
            "--rubric",
            "mindeval_v1_human",
            "--out",
            "/proc/mindsim-alpha",
        ],
        2,
        lambda f: "--out /proc/mindsim-alpha: inside /proc",
        out=NOWHERE,
    ),
    "run/pool-over-candidates": Case(
        lambda f: _run(f, "pool-over-candidates"), 2, lambda f: "profiles: pool_size (5) must not exceed candidates (3)"
    ),
    "run/max-tokens-over-context": Case(
        lambda f: _run(f, "max-tokens-over-context"),
        2,
        lambda f: (
            "roles.default.max_tokens: 100000 is more than the 4096 tokens engine 'local' "
            "holds in one request (ctx_per_slot)"
        ),
    ),
    "engines/max-tokens-over-vllm-len": Case(
        lambda f: ["engines", "check", f.recipe["max-tokens-over-vllm-len"]],
        2,
        lambda f: "roles.patient.max_tokens: 1500 + reasoning_budget 1000 is more than the 2048 tokens",
        out=NOWHERE,
    ),
    "run/counsellor-unbound": Case(
        lambda f: _run(f, "counsellor-unbound"),
        2,
        lambda f: (
            f"{f.recipe['counsellor-unbound']}: simulation.counsellors: 'counsellor:ghost' is not bound in the recipe's roles "
            "(bound: default)"
        ),
    ),
    "run/judge-unbound": Case(
        lambda f: _run(f, "judge-unbound"),
        2,
        lambda f: (
            f"{f.recipe['judge-unbound']}: judge.judges: 'judge:ghost' is not bound in the recipe's roles (bound: default)"
        ),
    ),
    "judge-run/judge-option-unbound": Case(
        lambda f: ["judge", "run", f.root, "--recipe", f.recipe["ok"], "--judge", "judge:ghost"],
        2,
        lambda f: "--judge: 'judge:ghost' is not bound in the recipe's roles",
        out=lambda f: f.root / "judgments",
    ),
    **{
        f"judge-alpha/{k}": Case(
            lambda f, k=k: ["judge", "alpha", f.ratings[k], "--rubric", "mindeval_v1_human", "--out", f.root / "a"],
            2,
            lambda f, k=k, w=w: f"{f.ratings[k]}:{w}",
        )
        for k, w in {
            "cut.csv": "3: the last row ends in an empty cell with no line break after it",
            "open-quote.csv": "3: a quoted cell is still open where the file ends",
            "two-columns.csv": "1: column 'value' appears twice in the header",
            "dup-key.jsonl": "2: the key 'value' is given twice in one object",
            "rater-number.jsonl": "2: rater: 7 is a JSON number; write the rater's id as a string",
        }.items()
    },
    **{
        f"labelstudio-ratings/{k}": Case(
            lambda f, k=k: [
                "annotate",
                "labelstudio",
                "ratings",
                f.ls[k],
                "--rubric",
                "mindeval_v1_human",
                "--out",
                f.root / "o",
            ],
            2,
            lambda f, k=k, w=w: f"{f.ls[k]}{w}",
        )
        for k, w in {
            "choices-text": " task 0: control 'criterion_1': 'choices' is a str, not a list",
            "two-choices": " task 0: control 'criterion_1' takes one choice and holds 2",
            "no-value": " task 0: result 0 has no value",
            "no-annotations": " task 0: no 'annotations' field",
            "empty-result": " task 0: the annotation by ana holds no result",
            "dup-key": ": the key 'id' is given twice in one object",
        }.items()
    },
    "import-realism/dup-key": Case(
        lambda f: ["import", "mindeval2-realism", f.realism_dup, "--out", f.root / "o"],
        2,
        lambda f: f"{f.realism_dup}: the key 'items' is given twice in one object",
    ),
    "import-profiles/dup-key": Case(
        lambda f: ["import", "mindeval2-profiles", f.members_dup, "--out", f.root / "o"],
        2,
        lambda f: f"{f.members_dup}:1: the key 'member_id' is given twice in one object",
    ),
    "judge-alpha/deep-json": Case(
        lambda f: ["judge", "alpha", f.deep_jsonl, "--rubric", "mindeval_v1_human", "--out", f.root / "a"],
        2,
        lambda f: f"{f.deep_jsonl}:1: JSON nested deeper than 100 levels",
    ),
    "labelstudio-ratings/deep-json": Case(
        lambda f: [
            "annotate",
            "labelstudio",
            "ratings",
            f.deep_json,
            "--rubric",
            "mindeval_v1_human",
            "--out",
            f.root / "o",
        ],
        2,
        lambda f: f"{f.deep_json}: JSON nested deeper than 100 levels",
    ),
    "import-realism/deep-json": Case(
        lambda f: ["import", "mindeval2-realism", f.deep_json, "--out", f.root / "o"],
        2,
        lambda f: f"{f.deep_json}: JSON nested deeper than 100 levels",
    ),
    "engines/deep-yaml": Case(
        lambda f: ["engines", "check", f.deep_yaml],
        2,
        lambda f: f"{f.deep_yaml}: not valid YAML (the document nests deeper than",
        out=NOWHERE,
    ),
    "judge-agreement/key-dup-key": Case(
        lambda f: ["judge", "agreement", "--annotations", f.annotations, "--key", f.key_dup],
        2,
        lambda f: f"{f.key_dup}: the key 'excerpts' is given twice in one object",
        out=lambda f: f.root / "agreement",
    ),
}


@pytest.fixture
def files(tmp_path) -> Files:
    f = Files(tmp_path)
    _write(tmp_path / "ratings-ok.csv", HEAD + b"criterion_1,c1,ana,4\ncriterion_1,c1,bo,3\n")
    return f


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_inexact_input_is_one_line_exit_2_and_nothing_written(case: Case, files: Files):
    _check_case(case, files, mindsim_here)


@pytest.mark.parametrize("name", ["run/seed-huge", "judge-alpha/out-under-proc", "labelstudio-ratings/two-choices"])
def test_through_the_console_script(name: str, files: Files):
    _check_case(CASES[name], files, mindsim)


def test_a_missing_rating_at_the_end_of_a_complete_file_is_still_read(files):
    path = _write(
        files.root / "ends-missing.csv", HEAD + b"criterion_1,c1,ana,4\ncriterion_1,c1,bo,3\ncriterion_1,c2,bo,\n"
    )
    proc = mindsim_here(
        "judge", "alpha", path, "--rubric", "mindeval_v1_human", "--out", files.root / "a", cwd=files.root
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads((files.root / "a" / "alpha.json").read_text())["missing"] == 1


# ------------------------------------------------------------------ inspect task arguments


def _profiles(tmp_path: Path) -> Path:
    (tmp_path / "profiles").mkdir()
    return tmp_path / "profiles"


@pytest.mark.parametrize(
    "args, says",
    [
        ({"sessions": -1}, "-T sessions=-1: out of range; give a whole number 1 or more"),
        ({"replies": 0}, "-T replies=0: out of range"),
        ({"max_patients": 0}, "-T max_patients=0: out of range"),
        ({"seed": -3}, "-T seed=-3: out of range; give a whole number from 0 to 4294967295"),
        ({"seed": 2**32}, "-T seed=4294967296: out of range"),
        ({"sessions": "two"}, "-T sessions='two': str, not a whole number"),
        ({"replies": True}, "-T replies=True: bool, not a whole number"),
        ({"patient_engine": "nope"}, "-T patient_engine='nope': unknown patient engine 'nope'"),
        ({"preset": 3}, "-T preset=3: give a preset name or a list of names"),
        ({"counsellor": "a b"}, "-T counsellor='a b': use letters"),
        ({"profiles": "NOT-A-FOLDER"}, "-T profiles="),
        ({"recipe": "SEED-TEXT"}, "seed: '5' is text"),
    ],
)
def test_a_bad_task_argument_is_one_toolkit_error_before_any_work(args, says, tmp_path):
    from mindsimkit.mindcore.errors import ConfigError
    from mindsimkit.mindsim_app.inspect.tasks import mindeval2, patientact

    f = Files(tmp_path)
    given = {"profiles": str(_profiles(tmp_path)), "recipe": str(f.recipe["ok"]), **args}
    given = {
        k: {"NOT-A-FOLDER": str(f.recipe["ok"]), "SEED-TEXT": str(f.recipe["seed-text"])}.get(v, v)
        if isinstance(v, str)
        else v
        for k, v in given.items()
    }
    for task in (mindeval2, patientact):
        if task is patientact and args.get("patient_engine") is None:
            given.setdefault("patient_engine", "patientact")
        with pytest.raises(ConfigError) as err:
            task(**given)
        assert says in str(err.value) and "\n" not in str(err.value)


def test_inspect_eval_prints_a_bad_argument_without_a_traceback(tmp_path):
    """The real command line, offline: inspect's mock model never answers, and nothing gets that far."""
    inspect = Path(sys.executable).with_name("inspect")
    f = Files(tmp_path)
    env = {**os.environ, "INSPECT_LOG_DIR": str(tmp_path / "logs"), "HF_HUB_OFFLINE": "1", "COLUMNS": "400"}
    for args, says in (
        (["-T", "sessions=-1"], "error: -T sessions=-1: out of range"),
        (["-T", "patient_engine=nope"], "error: -T patient_engine='nope': unknown patient engine"),
    ):
        proc = subprocess.run(
            [
                str(inspect),
                "eval",
                "mindsimkit/mindeval2",
                "--model",
                "mockllm/model",
                "-T",
                f"profiles={_profiles(tmp_path) if not (tmp_path / 'profiles').exists() else tmp_path / 'profiles'}",
                "-T",
                f"recipe={f.recipe['ok']}",
                *args,
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            cwd=tmp_path,
        )
        text = proc.stdout + proc.stderr
        assert proc.returncode != 0 and "Traceback" not in text and "ExceptionGroup" not in text, text
        assert [ln for ln in text.splitlines() if ln.strip()] == [
            ln for ln in text.splitlines() if ln.startswith(says)
        ], text
        assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").iterdir())
