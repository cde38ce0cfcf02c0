"""Exit codes and error lines of every `mindsim` command. The table runs each case
in-process through the CLI entry point the console script calls (`mindsim_app.cli.main`, stdout and stderr
captured as pipes, the case's folder as working directory); a starting interpreter per case was most of this file's
time. `CONSOLE_CASES`, help, success, Ctrl-C and publishing (whose Hub settings are read at import) run
the installed console script in a subprocess, as users and CI run it.

The contract (docs/commands.md, "Exit codes and errors"): 0 success; 2 bad input, configuration or usage; 1 an
engine failed at run time or a stage finished with failed arcs / failed engines; 130 Ctrl-C. A failure
prints ONE error line on stderr that names the file (or option, or engine) at fault. Every subprocess
runs with COLUMNS=40 and the files live under pytest's temporary directory, so a long path and a
narrow width would expose any hard wrapping (run with `--basetemp=/tmp/$(python3 -c 'print("x"*120)')`
to make the paths very long).

Engine failures come from `openai_stub.OpenAIStub`, a scripted OpenAI-compatible server on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from mindsimkit.mindcore.layout import RunLayout

TESTS = Path(__file__).resolve().parent
for extra in (TESTS, TESTS / "mindsim"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from openai_stub import (  # noqa: F401 - fixtures (openai_stub) and names the tests below use
    after_probe,
    OpenAIStub,
    Reply,
    always_status,
    always_text,
    by_model,
    from_responder,
    openai_stub,
)
from restamp import header
from cli_streams import mindsim_script, without_progress  # noqa: E402

MINDSIM = mindsim_script()
# Table cases also run through the installed console script: the entry point, typer's usage errors, a file error.
CONSOLE_CASES = [
    "run/missing",
    "profiles/bad-option",
    "reference/malformed",
    "unknown-command",
    "run/out-is-a-file",
    "run/ray-unreachable",
]
# Not a terminal (pipes) and a narrow declared width: the worst case for rich's hard wrapping.
ENV = {**os.environ, "COLUMNS": "40", "HF_HUB_OFFLINE": "0"}
ENV.pop("FORCE_COLOR", None)

CONVERSATION = {
    "id": "c1",
    "messages": [
        {"role": "assistant", "content": "What brings you here today?"},
        {"role": "user", "content": "I have not been sleeping and work feels pointless lately."},
        {"role": "assistant", "content": "That sounds heavy. How long has it been like this?"},
        {"role": "user", "content": "A couple of months, since the move."},
    ],
}
BINARY = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00"
NOT_UTF8 = "caf\u00e9 conversations\n".encode("latin-1")


def mindsim(*args: object, cwd: Path, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    """The installed console script in a subprocess."""
    assert MINDSIM, "the `mindsim` console script is not on PATH; install the package (make install)"
    return subprocess.run(
        [MINDSIM, *map(str, args)], cwd=cwd, env=env or ENV, capture_output=True, text=True, timeout=timeout
    )


def mindsim_here(*args: object, cwd: Path) -> subprocess.CompletedProcess:
    """The same command in this process: `main(argv)` with stdout and stderr as pipes (not terminals, so the
    consoles take their pipe settings), COLUMNS=40 and `cwd` as the working directory, all restored after."""
    from mindsimkit.mindsim_app.cli import main

    out, err = io.StringIO(), io.StringIO()
    old_cwd, old_columns = os.getcwd(), os.environ.get("COLUMNS")
    os.chdir(cwd)
    os.environ["COLUMNS"] = "40"
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:  # what the console script's sys.exit would see
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(old_cwd)
        if old_columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old_columns
    return subprocess.CompletedProcess([MINDSIM, *map(str, args)], code, out.getvalue(), err.getvalue())


def error_line(proc: subprocess.CompletedProcess, *, only_line: bool = True) -> str:
    """The one error line on stderr. `only_line`: nothing else may be on stderr at all (commands whose
    stages print progress rules there, like `run`, pass False)."""
    lines = [ln for ln in without_progress(proc.stderr).splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(("error:", "engine error:"))]
    assert len(errors) == 1, f"expected one error line, got stderr:\n{proc.stderr}"
    if only_line:
        assert lines == errors, f"stderr holds more than the error line:\n{proc.stderr}"
    assert "\x1b[" not in proc.stderr, "colour codes on a non-terminal stream"
    assert "Traceback" not in proc.stderr
    return errors[0]


# ---------------------------------------------------------------- inputs that are wrong on disk


@dataclass
class Files:
    root: Path

    def __post_init__(self) -> None:
        r = self.root
        self.missing = r / "missing-input.jsonl"
        self.binary = _write(r / "binary-input.jsonl", BINARY)
        self.latin = _write(r / "latin1-input.jsonl", NOT_UTF8)
        self.empty = _write(r / "empty-input.jsonl", b"")
        self.malformed = _write(r / "malformed-input.jsonl", (json.dumps(CONVERSATION) + "\n{oops\n").encode())
        self.good = _write(
            r / "good-input.jsonl",
            "".join(json.dumps({**CONVERSATION, "id": f"c{i}"}) + "\n" for i in range(6)).encode(),
        )
        self.recipe_missing = r / "missing-recipe.yaml"
        self.recipe_binary = _write(r / "binary-recipe.yaml", BINARY)
        self.recipe_empty = _write(r / "empty-recipe.yaml", b"")
        self.recipe_malformed = _write(r / "malformed-recipe.yaml", b"name: [x\nengines: {}\n")
        self.recipe_ok = _write(
            r / "ok-recipe.yaml", b"name: x\nengines:\n  local: {kind: embedded}\nroles:\n  default: {engine: local}\n"
        )
        self.recipe_typo = _write(
            r / "typo-recipe.yaml",
            self.recipe_ok.read_bytes() + b"profiles: {candidatez: 3}\nsimulation: {sesions: 2}\n",
        )
        self.table_binary = _write(r / "binary-table.csv", BINARY)
        self.table_empty = _write(r / "empty-table.csv", b"")
        self.run_corrupt = r / "corrupt-run"
        _write(self.run_corrupt / "sessions" / "sessions.parquet", BINARY)
        _write(self.run_corrupt / "profiles" / "profiles.parquet", BINARY)
        self.afile = _write(r / "a-file.txt", b"a file where a folder is expected\n")
        self.adir = r / "a-folder"
        self.adir.mkdir()
        self.no_sessions_run = r / "run-without-sessions"
        self.no_sessions_run.mkdir()
        # A run folder whose run.json a later mindsim wrote: an unknown log version is refused, not half-read.
        self.run_newer = r / "newer-run"
        _write(self.run_newer / "run.json", json.dumps({"log_version": 99, "run_id": "x"}).encode())
        # Rubric files and long-format ratings: a rubric whose scale has no anchor for 6, a value off
        # the scale, a column the format does not have.
        self.rubric_bad = _write(
            r / "bad-rubric.yaml",
            b"id: mine\nname: x\nversion: '1'\nsource: ours\n"
            b"unit: conversation\nscale: {min: 1, max: 6}\nitems:\n  - {id: warmth, name: W, "
            b"question: Q, anchors: {1: a, 2: b, 3: c, 4: d, 5: e}}\npage: {title: T}\n",
        )
        self.ratings_off = _write(r / "off-scale.csv", b"item,unit,rater,value\ncriterion_1,c1,ana,7\n")
        self.ratings_column = _write(r / "wrong-column.csv", b"item,unit,rater,score\ncriterion_1,c1,ana,4\n")
        self.ratings_bool = _write(
            r / "bool-ratings.jsonl", b'{"item": "criterion_1", "unit": "c1", "rater": "ana", "value": true}\n'
        )
        self._hostile_inputs(r)

    def _hostile_inputs(self, r: Path) -> None:
        """Inputs of the hardening probes: secrets in recipes, files a rubric or recipe reaches for outside its folder,
        templates that fail, malformed ratings and Label Studio exports, duplicate keys."""
        engine = "engines:\n  remote: {kind: openai, base_url: 'BASE', model: m, api_key_env: KEYVAR}\nroles:\n  default: {engine: remote}\n"
        recipe = lambda base, var="MINDSIM_TEST_KEY": f"name: x\n{engine}".replace("BASE", base).replace("KEYVAR", var)  # noqa: E731
        self.recipe_url = {
            u: _write(r / f"url-{i}.yaml", recipe(u).encode())
            for i, u in enumerate(["not a url", "ftp://host/v1", "", "http://[::1/v1"])
        }
        self.recipe_pasted_key = _write(r / "pasted-key.yaml", recipe("http://127.0.0.1:9/v1", FAKE_KEY).encode())
        self.recipe_dup = _write(
            r / "dup-recipe.yaml",
            self.recipe_ok.read_bytes() + b"simulation: {sessions: 2}\nsimulation: {turn_cap: 4}\n",
        )
        self.recipe_escape = _write(
            r / "escape-recipe.yaml",
            self.recipe_ok.read_bytes() + b"prompts: {memory/compact.jinja2: ../outside.jinja2}\n",
        )
        self.recipe_judge_outside = _write(
            r / "judge-outside.yaml", self.recipe_ok.read_bytes() + b"judge: {rubric: /etc/passwd}\n"
        )
        self.binary_mhqr = _write(r / "binary-mhqr.yaml", BINARY)
        self.recipe_judge_binary = _write(
            r / "judge-binary.yaml", self.recipe_ok.read_bytes() + f"judge: {{rubric: {self.binary_mhqr}}}\n".encode()
        )
        self.recipe_judge_missing = _write(
            r / "judge-missing.yaml",
            self.recipe_ok.read_bytes() + f"judge: {{rubric: {r / 'no-rubric.yaml'}}}\n".encode(),
        )
        self.recipe_personas_missing = _write(
            r / "personas-missing.yaml", self.recipe_ok.read_bytes() + b"profiles: {personas: ./no-personas.parquet}\n"
        )
        rubric = (
            self.rubric_bad.read_text()
            .replace("max: 6", "max: 5")
            .replace("page:", "judge: {template: TEMPLATE}\npage:")
        )
        self.templates = _write(r / "templates" / "x", b"").parent
        for name, body in {
            "div": b"{{ 1/0 }}",
            "empty": b"  \n",
            "include": b'{% include "/etc/passwd" %}',
            "syntax": b"{% if %}",
            "binary": BINARY,
        }.items():
            _write(self.templates / f"{name}.jinja2", body)
        (self.templates / "link.jinja2").symlink_to("/etc/passwd")
        self.rubric_template = {
            t: _write(self.templates / f"rubric-{i}.yaml", rubric.replace("TEMPLATE", t).encode())
            for i, (t, _) in enumerate(_RUBRIC_TEMPLATES.values())
        }
        self.rubric_binary = _write(r / "binary-rubric.yaml", BINARY)
        self.rubric_latin = _write(r / "latin-rubric.yaml", "name: caf\u00e9\n".encode("latin-1"))
        base = self.rubric_bad.read_text().replace("max: 6", "max: 5")
        self.rubric_dup = _write(r / "dup-rubric.yaml", (base + "name: again\n").encode())
        self.rubric_coerced = {
            k: _write(r / f"coerced-{k}.yaml", base.replace("min: 1", v).encode())
            for k, v in {"false": "min: false", "text": "min: '1'"}.items()
        }
        self.rubric_na_text = _write(
            r / "na-text.yaml", base.replace("max: 5}", "max: 5, not_applicable: ['3']}").encode()
        )
        head = b"item,unit,rater,value\n"
        self.csv = {
            k: _write(r / f"ratings-{k}.csv", head + v)
            for k, v in {
                "latin1": "criterion_1,caf\u00e9,ana,4\n".encode("latin-1"),
                "nul": b"criterion_1,c\x001,ana,4\n",
                "huge-cell": b"criterion_1,c1,ana," + b"x" * 140_000 + b"\n",
                "digits": b"criterion_1,c1,ana," + b"1" * 5000 + b"\n",
                "short-row": b"criterion_1,c1\n",
                "unknown-item-null": b"nope,c1,ana,\ncriterion_1,c1,bo,4\n",
                "duplicate-first-null": b"criterion_1,c1,ana,\ncriterion_1,c1,ana,4\n",
            }.items()
        }
        self.csv["binary"] = _write(r / "ratings-binary.csv", BINARY)
        self.ls = {
            k: _write(r / f"ls-{k}.json", v)
            for k, v in {
                "numbers": b"[1, 2, 3]",
                "data-list": b'[{"data": [1], "annotations": []}]',
                "annotations-string": b'[{"data": {"id": "u1"}, "annotations": "oops"}]',
            }.items()
        }


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.fixture
def files(tmp_path) -> Files:
    return Files(tmp_path)


@dataclass
class Case:
    args: Callable[[Files], list]
    code: int
    names: Callable[[Files], str]  # what the error line must name
    # Where the command would write: by default the path after `--out`; given for commands that write elsewhere
    # (`judge run` into RUN_DIR/judgments, `judge agreement` into ./agreement); NOWHERE for those that write nothing.
    out: Callable[[Files], Path | None] | None = None

    def output(self, f: Files) -> Path | None:
        if self.out is not None:
            return self.out(f)
        args = [str(a) for a in self.args(f)]
        assert "--out" in args, "say where this command writes (Case.out)"
        return Path(args[args.index("--out") + 1])


def NOWHERE(f: Files) -> None:
    return None


CASES = {
    # mindsim profiles (generate)
    "profiles/missing": Case(
        lambda f: ["profiles", f.recipe_missing, "--out", f.root / "o"], 2, lambda f: str(f.recipe_missing)
    ),
    "profiles/malformed": Case(
        lambda f: ["profiles", f.recipe_malformed, "--out", f.root / "o"], 2, lambda f: str(f.recipe_malformed)
    ),
    "profiles/empty": Case(
        lambda f: ["profiles", f.recipe_empty, "--out", f.root / "o"], 2, lambda f: str(f.recipe_empty)
    ),
    "profiles/binary": pytest.param(
        Case(lambda f: ["profiles", f.recipe_binary, "--out", f.root / "o"], 2, lambda f: str(f.recipe_binary))
    ),
    "profiles/wrong-field": Case(
        lambda f: ["profiles", f.recipe_typo, "--out", f.root / "o"], 2, lambda f: "profiles.candidatez"
    ),
    "profiles/bad-option": Case(
        lambda f: ["profiles", "generate", f.recipe_ok, "--out", f.root / "o", "--bogus"], 2, lambda f: "--bogus"
    ),
    # mindsim profiles fit-rates
    "fit-rates/missing": Case(
        lambda f: ["profiles", "fit-rates", f.root / "no.csv", "--out", f.root / "r.yaml"],
        2,
        lambda f: str(f.root / "no.csv"),
    ),
    "fit-rates/empty": Case(
        lambda f: ["profiles", "fit-rates", f.table_empty, "--out", f.root / "r.yaml"], 2, lambda f: str(f.table_empty)
    ),
    "fit-rates/binary": pytest.param(
        Case(
            lambda f: ["profiles", "fit-rates", f.table_binary, "--out", f.root / "r.yaml"],
            2,
            lambda f: str(f.table_binary),
        )
    ),
    # mindsim simulate
    "simulate/missing-profiles": Case(
        lambda f: ["simulate", "--profiles", f.root / "nope", "--recipe", f.recipe_ok, "--out", f.root / "o"],
        2,
        lambda f: str(f.root / "nope"),
    ),
    "simulate/corrupt-profiles": Case(
        lambda f: ["simulate", "--profiles", f.run_corrupt, "--recipe", f.recipe_ok, "--out", f.root / "o"],
        2,
        lambda f: str(f.run_corrupt / "profiles" / "profiles.parquet"),
    ),
    "simulate/missing-recipe": Case(
        lambda f: ["simulate", "--profiles", f.run_corrupt, "--recipe", f.recipe_missing, "--out", f.root / "o"],
        2,
        lambda f: str(f.recipe_missing),
    ),
    "simulate/wrong-field": Case(
        lambda f: ["simulate", "--profiles", f.run_corrupt, "--recipe", f.recipe_typo, "--out", f.root / "o"],
        2,
        lambda f: "simulation.sesions",
    ),
    "simulate/bad-option": Case(
        lambda f: ["simulate", "--profiles", f.run_corrupt, "--recipe", f.recipe_ok, "--out", f.root / "o", "--bogus"],
        2,
        lambda f: "--bogus",
    ),
    # mindsim validate reference
    "reference/missing": Case(
        lambda f: ["validate", "reference", f.missing, "--out", f.root / "r.parquet"], 2, lambda f: str(f.missing)
    ),
    "reference/malformed": Case(
        lambda f: ["validate", "reference", f.malformed, "--out", f.root / "r.parquet"],
        2,
        lambda f: f"{f.malformed} line 2",
    ),
    "reference/empty": Case(
        lambda f: ["validate", "reference", f.empty, "--out", f.root / "r.parquet"], 2, lambda f: str(f.empty)
    ),
    "reference/not-utf8": Case(
        lambda f: ["validate", "reference", f.latin, "--out", f.root / "r.parquet"], 2, lambda f: str(f.latin)
    ),
    "reference/binary": Case(
        lambda f: ["validate", "reference", f.binary, "--out", f.root / "r.parquet"], 2, lambda f: str(f.binary)
    ),
    "reference/wrong-role": Case(
        lambda f: ["validate", "reference", f.good, "--out", f.root / "r.parquet", "--patient-role", "client"],
        2,
        lambda f: str(f.good),
    ),
    "reference/bad-out": Case(
        lambda f: ["validate", "reference", f.good, "--out", f.root / "r.csv"], 2, lambda f: str(f.root / "r.csv")
    ),
    "reference/bad-option": Case(
        lambda f: ["validate", "reference", f.good, "--out", f.root / "r.parquet", "--draws", "3"],
        2,
        lambda f: "--draws",
    ),
    # mindsim validate compare (default reference: the shipped artifact)
    "compare/bad-sim-option": Case(
        lambda f: ["validate", "compare", "--sim", "no-equals-sign", "--out", f.root / "o"], 2, lambda f: "NAME=PATH"
    ),
    "compare/missing": Case(
        lambda f: ["validate", "compare", "--sim", f"x={f.missing}", "--out", f.root / "o"], 2, lambda f: str(f.missing)
    ),
    "compare/malformed": Case(
        lambda f: ["validate", "compare", "--sim", f"x={f.malformed}", "--out", f.root / "o"],
        2,
        lambda f: f"{f.malformed} line 2",
    ),
    "compare/empty": Case(
        lambda f: ["validate", "compare", "--sim", f"x={f.empty}", "--out", f.root / "o"], 2, lambda f: str(f.empty)
    ),
    "compare/not-utf8": Case(
        lambda f: ["validate", "compare", "--sim", f"x={f.latin}", "--out", f.root / "o"], 2, lambda f: str(f.latin)
    ),
    "compare/wrong-role": Case(
        lambda f: ["validate", "compare", "--sim", f"x={f.good}", "--out", f.root / "o", "--patient-role", "client"],
        2,
        lambda f: str(f.good),
    ),
    "compare/reference-not-parquet": Case(
        lambda f: ["validate", "compare", "--sim", f"x={f.good}", "--reference", f.binary, "--out", f.root / "o"],
        2,
        lambda f: str(f.binary),
    ),
    "compare/reference-missing": Case(
        lambda f: [
            "validate",
            "compare",
            "--sim",
            f"x={f.good}",
            "--reference",
            f.root / "ref.parquet",
            "--out",
            f.root / "o",
        ],
        2,
        lambda f: str(f.root / "ref.parquet"),
    ),
    # mindsim export
    "export-sft/missing": Case(
        lambda f: ["export", "sft", f.root / "no-run", "--out", f.root / "x.jsonl"], 2, lambda f: str(f.root / "no-run")
    ),
    "export-patient/missing": Case(
        lambda f: ["export", "patient", f.root / "no-run", "--out", f.root / "x.jsonl"],
        2,
        lambda f: str(f.root / "no-run"),
    ),
    "export-sft/corrupt": pytest.param(
        Case(lambda f: ["export", "sft", f.run_corrupt, "--out", f.root / "x.jsonl"], 2, lambda f: str(f.run_corrupt))
    ),
    "export-patient/bad-option": Case(
        lambda f: ["export", "patient", f.run_corrupt, "--out", f.root / "x.jsonl", "--bogus"], 2, lambda f: "--bogus"
    ),
    # mindsim publish --dry-run
    "publish/missing": Case(
        lambda f: ["publish", f.root / "no-run", "--repo-id", "someone/x", "--dry-run"],
        2,
        lambda f: str(f.root / "no-run"),
        out=NOWHERE,
    ),
    "publish/not-a-run": Case(
        lambda f: ["publish", f.run_corrupt, "--repo-id", "someone/x", "--dry-run"],
        2,
        lambda f: str(f.run_corrupt),
        out=NOWHERE,
    ),
    "publish/bad-repo-id": Case(
        lambda f: ["publish", f.run_corrupt, "--repo-id", "no-slash", "--dry-run"],
        2,
        lambda f: "--repo-id 'no-slash'",
        out=NOWHERE,
    ),
    # mindsim engines check
    "engines/missing": Case(
        lambda f: ["engines", "check", f.recipe_missing], 2, lambda f: str(f.recipe_missing), out=NOWHERE
    ),
    "engines/malformed": Case(
        lambda f: ["engines", "check", f.recipe_malformed], 2, lambda f: str(f.recipe_malformed), out=NOWHERE
    ),
    "engines/binary": pytest.param(
        Case(lambda f: ["engines", "check", f.recipe_binary], 2, lambda f: str(f.recipe_binary), out=NOWHERE)
    ),
    # mindsim run
    "run/missing": Case(lambda f: ["run", f.recipe_missing, "--out", f.root / "o"], 2, lambda f: str(f.recipe_missing)),
    "run/malformed": Case(
        lambda f: ["run", f.recipe_malformed, "--out", f.root / "o"], 2, lambda f: str(f.recipe_malformed)
    ),
    "run/empty": Case(lambda f: ["run", f.recipe_empty, "--out", f.root / "o"], 2, lambda f: str(f.recipe_empty)),
    "run/binary": pytest.param(
        Case(lambda f: ["run", f.recipe_binary, "--out", f.root / "o"], 2, lambda f: str(f.recipe_binary))
    ),
    "run/wrong-field": Case(
        lambda f: ["run", f.recipe_typo, "--out", f.root / "o"], 2, lambda f: "profiles.candidatez"
    ),
    "run/bad-option": Case(lambda f: ["run", f.recipe_ok, "--out", f.root / "o", "--bogus"], 2, lambda f: "--bogus"),
    "run/missing-argument": Case(lambda f: ["run"], 2, lambda f: "'recipe'", out=NOWHERE),
    # mindsim judge (the judge package's own commands)
    "judge-run/missing": Case(
        lambda f: ["judge", "run", f.root / "no-run"],
        2,
        lambda f: str(f.root / "no-run"),
        out=lambda f: f.root / "no-run" / "judgments",
    ),
    "judge-run/malformed": Case(
        lambda f: ["judge", "run", f.root, "--sessions", f.malformed],
        2,
        lambda f: str(f.malformed),
        out=lambda f: f.root / "judgments",
    ),
    "judge-run/empty": Case(
        lambda f: ["judge", "run", f.root, "--sessions", f.empty],
        2,
        lambda f: str(f.empty),
        out=lambda f: f.root / "judgments",
    ),
    "judge-run/binary": pytest.param(
        Case(
            lambda f: ["judge", "run", f.root, "--sessions", f.binary],
            2,
            lambda f: str(f.binary),
            out=lambda f: f.root / "judgments",
        )
    ),
    "judge-run/corrupt": Case(
        lambda f: ["judge", "run", f.run_corrupt],
        2,
        lambda f: str(f.run_corrupt / "sessions" / "sessions.parquet"),
        out=lambda f: f.run_corrupt / "judgments",
    ),
    "judge-run/bad-option": Case(
        lambda f: ["judge", "run", f.root, "--bogus"], 2, lambda f: "--bogus", out=lambda f: f.root / "judgments"
    ),
    "judge-sample/missing": Case(
        lambda f: ["judge", "sample", f.root / "no-run", "--n", "3", "--out", f.root / "s.jsonl"],
        2,
        lambda f: str(f.root / "no-run"),
    ),
    # A folder no stage recorded cannot be checked, so it is refused before its files are read.
    "judge-sample/corrupt": Case(
        lambda f: ["judge", "sample", f.run_corrupt, "--n", "3", "--out", f.root / "s.jsonl"],
        2,
        lambda f: f"{f.run_corrupt / 'run_manifest.json'}: missing",
    ),
    "judge-agreement/missing": Case(
        lambda f: ["judge", "agreement", "--annotations", f.missing],
        2,
        lambda f: str(f.missing),
        out=lambda f: f.root / "agreement",
    ),
    "judge-agreement/malformed": Case(
        lambda f: ["judge", "agreement", "--annotations", f.malformed],
        2,
        lambda f: str(f.malformed),
        out=lambda f: f.root / "agreement",
    ),
    "judge-agreement/not-utf8": pytest.param(
        Case(
            lambda f: ["judge", "agreement", "--annotations", f.latin],
            2,
            lambda f: str(f.latin),
            out=lambda f: f.root / "agreement",
        )
    ),
    "unknown-command": Case(lambda f: ["simulatee"], 2, lambda f: "simulatee", out=NOWHERE),
    # Paths of the wrong kind: refused before any work, nothing written beside them.
    "run/out-is-a-file": Case(
        lambda f: ["run", f.recipe_ok, "--out", f.afile], 2, lambda f: f"--out {f.afile}: is a file", out=NOWHERE
    ),
    "run/out-below-a-file": Case(
        lambda f: ["run", f.recipe_ok, "--out", f.afile / "o"],
        2,
        lambda f: f"sits below the file {f.afile}",
        out=NOWHERE,
    ),
    "compare/out-is-a-file": Case(
        lambda f: ["validate", "compare", "--sim", f"x={f.good}", "--out", f.afile],
        2,
        lambda f: f"--out {f.afile}: is a file",
        out=NOWHERE,
    ),
    "report/newer-run-log": Case(
        lambda f: ["report", f.run_newer, "--out", f.root / "r.html"],
        2,
        lambda f: f"{f.run_newer / 'run.json'}: written by a newer mindsim",
    ),
    "publish/newer-run-log": Case(
        lambda f: ["publish", f.run_newer, "--repo-id", "a/b", "--dry-run"],
        2,
        lambda f: f"{f.run_newer / 'run.json'}: written by a newer mindsim",
        out=NOWHERE,
    ),
    "report/out-is-a-folder": Case(
        lambda f: ["report", f.run_corrupt, "--out", f.adir],
        2,
        lambda f: f"--out {f.adir}: a folder, not a file",
        out=NOWHERE,
    ),
    "report/out-below-a-file": Case(
        lambda f: ["report", f.run_corrupt, "--out", f.afile / "r.html"],
        2,
        lambda f: f"sits below the file {f.afile}",
        out=NOWHERE,
    ),
    "sessions-sample/no-sessions": Case(
        lambda f: [
            "annotate",
            "sample",
            "patientact-sessions",
            "--out",
            f.root / "task",
            "--run",
            f.no_sessions_run,
            "--n-raters",
            "3",
        ],
        2,
        lambda f: str(f.no_sessions_run / "sessions" / "sessions.parquet"),
    ),
    "judge-agreement/binary-key": Case(
        lambda f: ["judge", "agreement", "--annotations", f.good, "--key", f.binary],
        2,
        lambda f: str(f.binary),
        out=lambda f: f.root / "agreement",
    ),
    "run/ray-garbage": Case(
        lambda f: ["run", f.recipe_ok, "--out", f.root / "o", "--ray", "garbage::address"],
        2,
        lambda f: "--ray 'garbage::address': not a Ray address",
    ),
    # Nothing listens on the discard port of this machine: refused at once, before the run folder exists.
    "run/ray-unreachable": Case(
        lambda f: ["run", f.recipe_ok, "--out", f.root / "o", "--ray", "127.0.0.1:9"],
        1,
        lambda f: "Ray cluster at 127.0.0.1:9: cannot connect",
    ),
    "judge-run/bad-rubric": Case(
        lambda f: ["judge", "run", f.root, "--rubric", f.rubric_bad],
        2,
        lambda f: f"{f.rubric_bad}: item warmth: no anchor for point 6",
        out=lambda f: f.root / "rubric_judge",
    ),
    "judge-alpha/off-scale": Case(
        lambda f: ["judge", "alpha", f.ratings_off, "--rubric", "mindeval_v1_human", "--out", f.root / "a"],
        2,
        lambda f: f"{f.ratings_off}:2: value: value 7 is not on the scale 1-6",
    ),
    "judge-alpha/boolean": Case(
        lambda f: ["judge", "alpha", f.ratings_bool, "--rubric", "mindeval_v1_human", "--out", f.root / "a"],
        2,
        lambda f: f"{f.ratings_bool}:1: value: value True is not on the scale",
    ),
    "judge-alpha/wrong-column": Case(
        lambda f: ["judge", "alpha", f.ratings_column, "--rubric", "mindeval_v1_human", "--out", f.root / "a"],
        2,
        lambda f: f"{f.ratings_column}:1: header lacks column value",
    ),
    "judge-alpha/bad-rubric": Case(
        lambda f: ["judge", "alpha", f.ratings_off, "--rubric", f.rubric_bad, "--out", f.root / "a"],
        2,
        lambda f: str(f.rubric_bad),
    ),
    "labelstudio-ratings/not-an-export": Case(
        lambda f: ["annotate", "labelstudio", "ratings", f.malformed, "--rubric", "mindeval_v1", "--out", f.root / "o"],
        2,
        lambda f: str(f.malformed),
    ),
    "export-sft/negative-bound": Case(
        lambda f: ["export", "sft", f.run_corrupt, "--out", f.root / "x.jsonl", "--min-turns", "-1"],
        2,
        lambda f: "--min-turns",
    ),
}


# Hardening: secrets, files out of their folder, tracebacks, silent coercions, things written before the checks.
FAKE_KEY = "sk-mindsimtest-Zq8fakeKEY1234567890"
_RUBRIC_TEMPLATES = {
    # More '..' than any test folder is deep (a path stops climbing at /), so it is /etc/passwd wherever pytest's
    # temporary folders sit.
    "dotdot": ("../" * 32 + "etc/passwd", "resolves to /etc/passwd, outside"),
    "shared-dotdot": ("judge/../../../../etc/passwd", "not a name under prompts/"),
    "absolute": ("/etc/passwd", "resolves to /etc/passwd, outside"),
    "symlink-out": ("./link.jinja2", "link.jinja2 resolves to /etc/passwd, outside"),
    "render-error": ("./div.jinja2", "ZeroDivisionError"),
    "empty": ("./empty.jinja2", "is empty"),
    "include-out": ("./include.jinja2", "include '/etc/passwd'"),
    "syntax": ("./syntax.jinja2", "line 1:"),
    "binary": ("./binary.jinja2", "binary data"),
}
CASES.update(
    {
        **{
            f"run/base-url-{i}": Case(
                lambda f, u=u: ["run", f.recipe_url[u], "--out", f.root / "o"], 2, lambda f: "engines.remote.base_url"
            )
            for i, u in enumerate(["not a url", "ftp://host/v1", "", "http://[::1/v1"])
        },
        "engines/base-url": Case(
            lambda f: ["engines", "check", f.recipe_url["not a url"]],
            2,
            lambda f: "engines.remote.base_url: 'not a url' is not an http(s) URL",
            out=NOWHERE,
        ),
        "judge-run/base-url": Case(
            lambda f: ["judge", "run", f.root, "--recipe", f.recipe_url["ftp://host/v1"]],
            2,
            lambda f: "engines.remote.base_url",
            out=lambda f: f.root / "judgments",
        ),
        "profiles/base-url": Case(
            lambda f: ["profiles", f.recipe_url["http://[::1/v1"], "--out", f.root / "o"],
            2,
            lambda f: "engines.remote.base_url",
        ),
        "run/key-pasted-as-variable": Case(
            lambda f: ["run", f.recipe_pasted_key, "--out", f.root / "o"],
            2,
            lambda f: "engines.remote.api_key_env: not the NAME of an environment variable",
        ),
        "run/duplicate-key": Case(
            lambda f: ["run", f.recipe_dup, "--out", f.root / "o"],
            2,
            lambda f: "the key 'simulation' is given twice (first at line",
        ),
        "run/prompt-outside-recipe-folder": Case(
            lambda f: ["run", f.recipe_escape, "--out", f.root / "o"],
            2,
            lambda f: "prompts.memory/compact.jinja2: ../outside.jinja2 resolves to",
        ),
        "run/judge-rubric-outside-recipe-folder": Case(
            lambda f: ["run", f.recipe_judge_outside, "--out", f.root / "o"],
            2,
            lambda f: "judge.rubric: /etc/passwd resolves to /etc/passwd, outside",
        ),
        "run/judge-rubric-binary": Case(
            lambda f: ["run", f.recipe_judge_binary, "--out", f.root / "o"],
            2,
            lambda f: f"{f.binary_mhqr} holds binary data",
        ),
        "run/judge-rubric-missing": Case(
            lambda f: ["run", f.recipe_judge_missing, "--out", f.root / "o"],
            2,
            lambda f: f"rubric {f.root / 'no-rubric.yaml'}: no such file",
        ),
        "run/personas-missing": Case(
            lambda f: ["run", f.recipe_personas_missing, "--out", f.root / "o"],
            2,
            lambda f: "persona source './no-personas.parquet' is neither",
        ),
        **{
            f"judge-run/template-{k}": Case(
                lambda f, t=t: ["judge", "run", f.root, "--rubric", f.rubric_template[t]],
                2,
                lambda f, w=w: w,
                out=lambda f: f.root / "rubric_judge",
            )
            for k, (t, w) in _RUBRIC_TEMPLATES.items()
        },
        **{
            f"{cmd}/rubric-{kind}": Case(
                lambda f, a=args, k=kind: [*a(f), getattr(f, f"rubric_{k}")],
                2,
                lambda f, k=kind: str(getattr(f, f"rubric_{k}")),
                out=out,
            )
            for kind in ("binary", "latin", "dup")
            for cmd, args, out in (
                ("judge-alpha", lambda f: ["judge", "alpha", f.ratings_off, "--out", f.root / "a", "--rubric"], None),
                ("judge-run", lambda f: ["judge", "run", f.root, "--rubric"], lambda f: f.root / "rubric_judge"),
                (
                    "annotate-sample-sessions",
                    lambda f: [
                        "annotate",
                        "sample",
                        "sessions",
                        "--out",
                        f.root / "task",
                        "--run",
                        f.root,
                        "--n-raters",
                        "3",
                        "--rubric",
                    ],
                    lambda f: f.root / "task",
                ),
                (
                    "labelstudio-ratings",
                    lambda f: ["annotate", "labelstudio", "ratings", f.malformed, "--out", f.root / "o", "--rubric"],
                    None,
                ),
            )
        },
        **{
            f"judge-alpha/scale-{k}": Case(
                lambda f, k=k: [
                    "judge",
                    "alpha",
                    f.ratings_off,
                    "--out",
                    f.root / "a",
                    "--rubric",
                    f.rubric_coerced[k],
                ],
                2,
                lambda f: "scale.min",
            )
            for k in ("false", "text")
        },
        "judge-alpha/not-applicable-as-text": Case(
            lambda f: ["judge", "alpha", f.ratings_off, "--out", f.root / "a", "--rubric", f.rubric_na_text],
            2,
            lambda f: "not_applicable value '3' is a number written as text",
        ),
        **{
            f"judge-alpha/csv-{k}": Case(
                lambda f, k=k: ["judge", "alpha", f.csv[k], "--rubric", "mindeval_v1_human", "--out", f.root / "a"],
                2,
                lambda f, k=k, w=w: f"{f.csv[k]}:{w}",
            )
            for k, w in {
                "latin1": "2: not UTF-8",
                "nul": "2: a NUL byte",
                "binary": "3: a NUL byte",
                "huge-cell": "2: not CSV this reader accepts",
                "digits": "2: value: value '1111",
                "short-row": "2: fewer cells than header columns",
                "unknown-item-null": "2: item 'nope'",
                "duplicate-first-null": "3: rater 'ana' rates item 'criterion_1' of unit 'c1' twice",
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
                    "mindeval_v1",
                    "--out",
                    f.root / "o",
                ],
                2,
                lambda f, k=k, w=w: f"{f.ls[k]} task 0: {w}",
            )
            for k, w in {
                "numbers": "a int, not a task object",
                "data-list": "'data' is a list",
                "annotations-string": "'annotations' is not a list",
            }.items()
        },
        **{
            f"annotate-serve/port-{p}": Case(
                lambda f, p=p: ["annotate", "serve", f.adir, "--port", p], 2, lambda f: "--port", out=NOWHERE
            )
            for p in ("70000", "-1")
        },
        "export-dpo/missing": Case(
            lambda f: ["export", "dpo", f.root / "no-run", "--out", f.root / "x.jsonl"],
            2,
            lambda f: str(f.root / "no-run"),
        ),
    }
)
# mindsim plan: writes nothing, so every case checks only the code and the line
CASES.update(
    {
        "plan/missing": Case(lambda f: ["plan", f.recipe_missing], 2, lambda f: str(f.recipe_missing), out=NOWHERE),
        "plan/wrong-field": Case(lambda f: ["plan", f.recipe_typo], 2, lambda f: "simulation.sesions", out=NOWHERE),
        "plan/bad-prices": Case(
            lambda f: ["plan", f.recipe_ok, "--prices", f.recipe_malformed],
            2,
            lambda f: str(f.recipe_malformed),
            out=NOWHERE,
        ),
        "plan/no-run": Case(
            lambda f: ["plan", f.recipe_ok, "--from-run", f.root / "no-run"], 2, lambda f: "--from-run", out=NOWHERE
        ),
    }
)
CONSOLE_CASES += [
    "run/base-url-0",
    "run/key-pasted-as-variable",
    "judge-run/template-dotdot",
    "judge-alpha/csv-digits",
    "run/duplicate-key",
    "labelstudio-ratings/numbers",
]


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_bad_input_exit_code_and_one_error_line(case: Case, files: Files):
    _check_case(case, files, mindsim_here)


@pytest.mark.parametrize("name", CONSOLE_CASES)
def test_bad_input_through_the_console_script(name: str, files: Files):
    _check_case(CASES[name], files, mindsim)


def _check_case(case: Case, files: Files, runner: Callable[..., subprocess.CompletedProcess]) -> None:
    out = case.output(files)
    assert out is None or not out.exists()
    before = _tree(files.root)
    proc = runner(*case.args(files), cwd=files.root)
    assert proc.returncode == case.code, proc.stderr
    assert case.names(files) in error_line(proc)
    # Nothing half-written: not at the command's own output path, and nothing else created or changed either.
    assert out is None or not out.exists(), f"a rejected command started writing {out}"
    assert _tree(files.root) == before, "a rejected command changed files beside its inputs"


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` with its bytes (None for a folder): what a rejected command must leave alone."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def test_success_exits_0_with_a_quiet_stderr(files: Files):
    proc = mindsim("validate", "reference", files.good, "--out", files.root / "r.parquet", cwd=files.root)
    assert proc.returncode == 0 and without_progress(proc.stderr).strip() == "", proc.stderr
    assert f"wrote {files.root / 'r.parquet'}" in proc.stdout  # the path stays whole on a narrow width


def test_help_exits_0_for_every_command_group(tmp_path):
    for group in ("profiles", "validate", "export", "engines", "judge"):
        proc = mindsim(group, "--help", cwd=tmp_path)
        assert proc.returncode == 0 and "Usage" in proc.stdout, (group, proc.stderr)


# ---------------------------------------------------------------- engines that fail at run time


def _stub_recipe(path: Path, stub, roles: list[str], extra: str = "") -> Path:
    """A recipe on the stub: one model per role, named after the role (see openai_stub.from_responder)."""
    base_url = stub.serve("m", *roles).base_url
    lines = [f"  {r!r}: {{engine: stub, model: {r!r}}}" for r in roles]
    path.write_text(
        f"name: stub\nseed: 3\nengines:\n  stub: {{kind: openai, base_url: '{base_url}', model: m, native_tools: false}}\n"
        "roles:\n  default: {engine: stub}\n" + "\n".join(lines) + "\n" + extra
    )
    return path


SIM_ROLES = ["patient", "scenario_writer", "memory_compactor", "labeller", "counsellor", "counsellor:broken"]
TWO_COUNSELLORS = "simulation: {sessions: 1, turn_cap: 3, counsellors: [counsellor, 'counsellor:broken']}\n"


def _sim_behaviour():
    """Every simulator role played by the unit tests' fake, except one counsellor whose calls are refused."""
    from simfakes import SimResponder

    return by_model({"counsellor:broken": always_status(400)}, from_responder(SimResponder(end_after=2)))


@pytest.mark.parametrize(
    "behaviour, problem",
    [(always_status(500), "HTTP 500"), (always_text("{not json"), "_Probe")],
    ids=["http-500", "invalid-json"],
)
def test_engines_check_with_a_failing_engine_exits_1(behaviour, problem, openai_stub, tmp_path):
    stub = openai_stub(behaviour)
    recipe = _stub_recipe(tmp_path / "r.yaml", stub, [])
    proc = mindsim_here("engines", "check", recipe, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    line = error_line(proc)
    assert "engine 'stub'" in line and problem in line and stub.base_url in line


def test_engines_check_with_a_working_engine_exits_0(openai_stub, tmp_path):
    stub = openai_stub(always_text('{"mood": "fine", "calm": true}'))
    proc = mindsim_here("engines", "check", _stub_recipe(tmp_path / "r.yaml", stub, []), cwd=tmp_path)
    assert proc.returncode == 0 and without_progress(proc.stderr).strip() == "", proc.stderr


def test_simulate_with_failed_arcs_exits_1(openai_stub, tmp_path):
    from mindsimkit.profilegen.dataset import write_profiles
    from simfakes import make_profile

    write_profiles([make_profile("p1"), make_profile("p2", "joker")], tmp_path / "profiles")
    stub = openai_stub(_sim_behaviour())
    recipe = _stub_recipe(tmp_path / "r.yaml", stub, SIM_ROLES, TWO_COUNSELLORS)
    out = tmp_path / "sim"
    proc = mindsim_here("simulate", "--profiles", tmp_path / "profiles", "--recipe", recipe, "--out", out, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    line = error_line(proc)
    assert "2 of 4 session arcs failed" in line and str(out / "sessions" / "summary.json") in line and "rerun" in line
    # The healthy counsellor's sessions were written: a failed arc does not sink the others.
    assert len(json.loads((out / "sessions" / "summary.json").read_text())["failed_arcs"]) == 2


def test_simulate_under_a_preset_says_which_of_its_settings_the_recipe_replaced(openai_stub, tmp_path):
    from mindsimkit.profilegen.dataset import write_profiles
    from simfakes import make_profile
    from test_reference_preset import ReferenceResponder

    write_profiles([make_profile("p1")], tmp_path / "profiles")
    stub = openai_stub(from_responder(ReferenceResponder(end_after=99)))
    recipe = _stub_recipe(
        tmp_path / "r.yaml",
        stub,
        SIM_ROLES[:-1],
        "simulation: {preset: mindeval2-reference, sessions: 1, turn_cap: 3}\n",
    )
    out = tmp_path / "sim"
    proc = mindsim_here("simulate", "--profiles", tmp_path / "profiles", "--recipe", recipe, "--out", out, cwd=tmp_path)
    assert proc.returncode == 0 and "error:" not in proc.stderr, proc.stderr
    said = " ".join(proc.stdout.split())  # rich wraps lines at COLUMNS=40
    assert (
        "preflight: simulation.preset mindeval2-reference: the recipe's turn_cap 3 (in place of "
        "counsellor_replies) is used, not the preset's counsellor_replies 30"
    ) in said
    assert "the recipe's sessions 1 is used, not the preset's sessions 3" in said
    summary = json.loads((out / "sessions" / "summary.json").read_text())
    assert len(summary["preset_overrides"]) == 2 and summary["config"]["turn_cap"] == 3


def test_profiles_on_a_dead_engine_stop_at_preflight_with_exit_1(openai_stub, tmp_path):
    stub = openai_stub(always_status(500))
    recipe = _stub_recipe(tmp_path / "r.yaml", stub, [], "profiles: {personas: synthetic, candidates: 2}\n")
    proc = mindsim_here("profiles", recipe, "--out", tmp_path / "o", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    line = error_line(proc)
    assert "preflight" in line and "engine 'stub'" in line and "HTTP 500" in line and stub.base_url in line
    assert not (tmp_path / "o" / "profiles" / "checkpoints").exists() and len(stub.requests) <= 4


def test_run_with_an_unset_key_variable_stops_at_preflight_with_exit_2(openai_stub, tmp_path, monkeypatch):
    stub = openai_stub(always_text('{"mood": "fine", "calm": true}'))
    recipe = _stub_recipe(tmp_path / "r.yaml", stub, [])
    recipe.write_text(
        recipe.read_text().replace("native_tools: false}", "native_tools: false, api_key_env: MINDSIM_TEST_UNSET_KEY}")
    )
    monkeypatch.delenv("MINDSIM_TEST_UNSET_KEY", raising=False)
    proc = mindsim_here("run", recipe, "--out", tmp_path / "o", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    line = error_line(proc, only_line=False)
    assert "MINDSIM_TEST_UNSET_KEY" in line and not stub.requests
    assert not (tmp_path / "o").exists(), "run.json or logs/ written before the checks"


def test_run_whose_key_is_refused_writes_nothing_and_the_fixed_recipe_starts_clean(openai_stub, tmp_path, monkeypatch):
    stub = openai_stub(always_status(401))
    recipe = _stub_recipe(tmp_path / "r.yaml", stub, [])
    proc = mindsim_here("run", recipe, "--out", tmp_path / "o", cwd=tmp_path)
    assert proc.returncode == 2 and "refused the API key" in error_line(proc, only_line=False), proc.stderr
    assert not (tmp_path / "o").exists()


def test_a_ratings_csv_with_a_byte_order_mark_is_read(files):
    ratings = _write(
        files.root / "bom.csv", b"\xef\xbb\xbfitem,unit,rater,value\ncriterion_1,c1,ana,4\ncriterion_1,c1,bo,5\n"
    )
    proc = mindsim_here(
        "judge", "alpha", ratings, "--rubric", "mindeval_v1_human", "--out", files.root / "a", cwd=files.root
    )
    assert proc.returncode == 0 and "2 ratings, 2 raters" in proc.stdout, proc.stderr


def test_profiles_whose_every_candidate_failed_exit_1(openai_stub, tmp_path):
    stub = openai_stub(after_probe(always_status(500)))
    recipe = _stub_recipe(
        tmp_path / "r.yaml",
        stub,
        [],
        "profiles: {personas: synthetic, candidates: 2, pool_size: 1, benchmark_size: 1, use_distilabel: false}\n",
    )
    proc = mindsim_here("profiles", recipe, "--out", tmp_path / "o", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    line = error_line(proc)
    assert "all 2 candidate profiles failed" in line and str(tmp_path / "o" / "profiles" / "summary.json") in line


def _profile_fakes():
    spec = importlib.util.spec_from_file_location("profilegen_test_fakes", TESTS / "profilegen" / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_run_with_failed_arcs_exits_1(openai_stub, tmp_path):
    """The whole job on the stub: profiles and one counsellor work, the other counsellor's calls are
    refused. The job finishes its dataset, and still exits 1 with one line saying what failed."""
    from simfakes import SimResponder

    pg, sim = _profile_fakes(), SimResponder(end_after=2)

    def respond(req):
        if req.role == "profile_writer":
            return pg.draft_for(req)
        return pg.clean_verdict(req) if req.role == "screener" else sim(req)

    stub = openai_stub(by_model({"counsellor:broken": always_status(400)}, from_responder(respond)))
    recipe = _stub_recipe(
        tmp_path / "r.yaml",
        stub,
        ["profile_writer", "screener", *SIM_ROLES],
        "profiles: {personas: synthetic, candidates: 3, pool_size: 2, benchmark_size: 1, pool_verdicts: [clean, minor]}\n"
        + TWO_COUNSELLORS
        + "validation: {bootstrap_draws: 20, floor_splits: 5}\n",
    )
    out = tmp_path / "run"
    proc = mindsim_here("run", recipe, "--out", out, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    line = error_line(proc, only_line=False)  # the job's stage rules also go to stderr
    assert "2 session arcs failed" in line and "rerun" in line and str(out / "sessions" / "summary.json") in line
    assert RunLayout(out).header().counts.failed_arcs == 2
    # The job's page is written whatever failed, and names the failures with their side.
    page = (out / "report.html").read_text()
    assert "2 of 4 arcs failed" in page and "counsellor:broken" in page
    assert "engine: 2" in page  # HTTP 400 from the counsellor's server: the engine's, not the simulator's
    assert json.loads((out / "run.json").read_text())["release_gate"]["set"] is False


def test_a_run_whose_screened_profiles_miss_the_pool_verdicts_exits_1_naming_the_settings(openai_stub, tmp_path):
    """Every candidate kept, none with a verdict the pool takes (the screener calls them all clean, the recipe pools
    `minor` only): one line naming the verdicts and the settings to change, before any arc starts."""
    pg = _profile_fakes()

    def respond(req):
        return pg.draft_for(req) if req.role == "profile_writer" else pg.clean_verdict(req)

    stub = openai_stub(from_responder(respond))
    recipe = _stub_recipe(
        tmp_path / "r.yaml",
        stub,
        ["profile_writer", "screener", *SIM_ROLES],
        "profiles: {personas: synthetic, candidates: 2, pool_size: 1, benchmark_size: 1, pool_verdicts: [minor]}\n"
        "validation: {bootstrap_draws: 20, floor_splits: 5}\n",
    )
    proc = mindsim_here("run", recipe, "--out", tmp_path / "run", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    line = error_line(proc, only_line=False)
    assert line.startswith("error: profiles: the pool is empty: 2 of 2 candidates were kept (2 clean)"), line
    assert "profiles.pool_verdicts ['minor']" in line and "profiles.extra_candidates" in line
    assert not (tmp_path / "run" / "sessions" / "summary.json").exists()


def test_ctrl_c_exits_130_with_a_resume_hint(openai_stub, tmp_path):
    from mindsimkit.profilegen.dataset import write_profiles
    from simfakes import make_profile

    def slow(_body):
        time.sleep(20)
        return Reply(content="too late")

    write_profiles([make_profile("p1")], tmp_path / "profiles")
    stub = openai_stub(slow)
    recipe = _stub_recipe(tmp_path / "r.yaml", stub, [], "simulation: {sessions: 1, turn_cap: 3}\n")
    # Started as from a terminal: a pytest-xdist worker ignores SIGINT, and a child inherits that (Python then
    # installs no KeyboardInterrupt handler), so Ctrl-C would never reach the command under test.
    proc = subprocess.Popen(
        [MINDSIM, "simulate", "--profiles", tmp_path / "profiles", "--recipe", recipe, "--out", tmp_path / "o"],
        cwd=tmp_path,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 60
        while not stub.requests and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert stub.requests, "the simulator never called the engine"
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "rerun the same command to resume" in stderr and "Traceback" not in stderr


# ---------------------------------------------------------------- publishing over a dead network


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_publish_network_failure_exits_1(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mindsimkit.mindcore.provenance import base_provenance
    from mindsimkit.mindsim_app.cards import build_dataset_folder

    run_dir = tmp_path / "run"
    (run_dir / "profiles").mkdir(parents=True)
    pq.write_table(
        pa.table({"profile_id": ["p0", "p1"], "in_pool": [True, True]}), run_dir / "profiles" / "profiles.parquet"
    )
    folder = build_dataset_folder(
        run_dir, header({"run_id": "abcd", "recipe": {"name": "t", "seed": 1}, "provenance": base_provenance()})
    )
    # Nothing listens on this loopback port: every connection is refused, as on a dead network.
    env = {**ENV, "HF_TOKEN": "hf_test_not_a_secret_000", "HF_ENDPOINT": f"http://127.0.0.1:{_free_port()}"}
    proc = mindsim("publish", folder, "--repo-id", "someone/tiny", cwd=tmp_path, env=env)
    assert proc.returncode == 1, proc.stderr
    line = error_line(proc, only_line=False)  # the dry-run part prints `datasets` progress on stderr
    assert "someone/tiny" in line and "rerun" in line and "hf_test_not_a_secret_000" not in proc.stderr + proc.stdout


# A labeller that fails its health probe is stopped by the preflight before any turn is sent; one that
# passes it and then answers nonsense fails every turn.
@pytest.mark.parametrize(
    "behaviour, expected",
    [
        (always_status(400), "engine error: preflight: engine 'stub'"),
        (after_probe(always_text("{not json")), "error: arc labelling failed for every patient turn"),
    ],
    ids=["http-400", "invalid-json"],
)
def test_validate_with_a_failing_labeller_exits_1(behaviour, expected, openai_stub, files):
    stub = openai_stub(behaviour)
    recipe = _stub_recipe(files.root / "r.yaml", stub, [])
    proc = mindsim_here(
        "validate",
        "reference",
        files.good,
        "--out",
        files.root / "r.parquet",
        "--arc",
        "--recipe",
        recipe,
        cwd=files.root,
    )
    assert proc.returncode == 1, proc.stderr
    assert error_line(proc).startswith(expected)


def test_publish_refused_by_the_hub_exits_2(openai_stub, tmp_path):
    """An HTTP 4xx from the Hub (bad token, no permission, no such repo) is the user's to fix: exit 2,
    unlike a dead network (exit 1). The stub answers 404 to every Hub route."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mindsimkit.mindcore.provenance import base_provenance
    from mindsimkit.mindsim_app.cards import build_dataset_folder

    run_dir = tmp_path / "run"
    (run_dir / "profiles").mkdir(parents=True)
    pq.write_table(pa.table({"profile_id": ["p0"], "in_pool": [True]}), run_dir / "profiles" / "profiles.parquet")
    folder = build_dataset_folder(
        run_dir, header({"run_id": "abcd", "recipe": {"name": "t", "seed": 1}, "provenance": base_provenance()})
    )
    stub = openai_stub(always_status(500))  # never reached: the Hub routes are not chat completions
    env = {**ENV, "HF_TOKEN": "hf_test_not_a_secret_000", "HF_ENDPOINT": stub.base_url.removesuffix("/v1")}
    proc = mindsim("publish", folder, "--repo-id", "someone/tiny", cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stderr
    line = error_line(proc, only_line=False)
    assert line.startswith("error: push to someone/tiny failed") and "404" in line
    assert "hf_test_not_a_secret_000" not in proc.stderr + proc.stdout


# ---------------------------------------------------------------- damaged run folders

# A finished run on the fake engine (every stage, the dataset and the PatientAct rubric), copied and broken per case.
# Each damage names the file a refusal must name, and the readers that read it (a reader checks only the
# stages it reads, so rerunning or damaging one stage leaves the others' readers working).
ALL = frozenset({"report", "publish", "publish-dataset", "export-sft", "judge-sample", "annotate-sample"})
READS_SESSIONS = ALL - {"publish-dataset"}  # the dataset folder holds its own copy of the sessions
DAMAGES = {
    "sessions-deleted": (lambda r: shutil.rmtree(r / "sessions"), "sessions/sessions.parquet", READS_SESSIONS),
    # Cut at a line boundary: every line still parses, only the manifest can tell. The dataset folder was built
    # from the transcripts, so publishing it as it is is refused too (it is out of date).
    "transcripts-cut-at-a-line": (
        lambda r: _cut(r / "transcripts" / "transcripts.jsonl", at_line=True),
        "transcripts/transcripts.jsonl",
        ALL,
    ),
    "transcripts-cut-mid-line": (
        lambda r: _cut(r / "transcripts" / "transcripts.jsonl", at_line=False),
        "transcripts/transcripts.jsonl",
        ALL,
    ),
    "run-json-removed": (lambda r: (r / "run.json").unlink(), "run.json", {"report", "publish", "publish-dataset"}),
    "judgments-removed": (
        lambda r: shutil.rmtree(r / "judgments"),
        "judgments/judgments.parquet",
        {"report", "publish", "judge-sample", "annotate-sample"},
    ),
    "dataset-profiles-deleted": (
        lambda r: next((r / "dataset" / "data").glob("profiles-*.parquet")).unlink(),
        "dataset/data/profiles-",
        {"publish-dataset"},
    ),
    "manifest-removed": (lambda r: (r / "run_manifest.json").unlink(), "run_manifest.json", ALL),
    "profiles-edited": (
        lambda r: (r / "profiles" / "pool_table.md").write_text("edited by hand\n"),
        "profiles/pool_table.md",
        {"report", "publish", "publish-dataset"},
    ),
}
READERS = {
    "report": lambda r, t: ["report", r],
    "publish": lambda r, t: ["publish", r, "--repo-id", "someone/x", "--dry-run"],
    "publish-dataset": lambda r, t: ["publish", r / "dataset", "--repo-id", "someone/x", "--dry-run"],
    "export-sft": lambda r, t: ["export", "sft", r, "--out", t / "sft.jsonl"],
    "judge-sample": lambda r, t: ["judge", "sample", r, "--n", "1", "--out", t / "s.jsonl"],
    "annotate-sample": lambda r, t: [
        "annotate",
        "sample",
        "mhqr",
        r,
        "--n",
        "1",
        "--n-raters",
        "3",
        "--out",
        t / "task",
    ],
}


def _cut(path: Path, *, at_line: bool) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 1] if at_line else data[: len(data) // 2])


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    sys.path.insert(0, str(TESTS / "mindsim_app"))
    from fakejob import write_fake_job

    return write_fake_job(tmp_path_factory.mktemp("finished"))


def _copy_of(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "run"))


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_run_is_refused_by_its_readers_naming_the_file(damage, reader, finished_run, tmp_path):
    run = _copy_of(finished_run, tmp_path)
    (tmp_path / "outputs").mkdir()
    break_it, named, readers = DAMAGES[damage]
    break_it(run)
    before = _tree(tmp_path)
    proc = mindsim_here(*READERS[reader](run, tmp_path / "outputs"), cwd=tmp_path)
    if reader not in readers:  # it does not read what was damaged
        assert proc.returncode == 0, proc.stderr
        return
    assert proc.returncode == 2, proc.stderr
    line = error_line(proc)
    assert f"{run}/{named}" in line, line
    assert _tree(tmp_path) == before, "a refused command wrote something"


@pytest.mark.parametrize("reader", list(READERS))
def test_an_intact_run_is_read(reader, finished_run, tmp_path):
    run = _copy_of(finished_run, tmp_path)
    (tmp_path / "outputs").mkdir()
    proc = mindsim_here(*READERS[reader](run, tmp_path / "outputs"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_a_run_in_progress_is_reported_only_with_allow_partial(finished_run, tmp_path):
    run = _copy_of(finished_run, tmp_path)
    info = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**info, "status": "running"}))
    proc = mindsim_here("report", run, "--out", tmp_path / "r.html", cwd=tmp_path)
    assert proc.returncode == 2 and "the run has not finished (status 'running'" in error_line(proc)
    assert not (tmp_path / "r.html").exists()
    proc = mindsim_here("report", run, "--out", tmp_path / "r.html", "--allow-partial", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    html = (tmp_path / "r.html").read_text()
    assert 'id="partial-tag"' in html and 'id="partial-banner-0"' in html and "status &#39;running&#39;" in html


def test_more_excerpts_than_the_run_holds_is_refused(finished_run, tmp_path):
    run = _copy_of(finished_run, tmp_path)
    proc = mindsim_here(
        "annotate", "sample", "mhqr", run, "--n", "500", "--n-raters", "3", "--out", tmp_path / "task", cwd=tmp_path
    )
    assert proc.returncode == 2
    assert "--n 500:" in error_line(proc) and "ask for at most" in error_line(proc)
    assert not (tmp_path / "task").exists()


def test_validate_compare_refuses_a_run_transcript_cut_at_a_line(finished_run, tmp_path):
    run = _copy_of(finished_run, tmp_path)
    _cut(run / "transcripts" / "transcripts.jsonl", at_line=True)
    proc = mindsim_here(
        "validate",
        "compare",
        "--sim",
        f"x={run / 'transcripts' / 'transcripts.jsonl'}",
        "--out",
        tmp_path / "v",
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert f"{run / 'transcripts' / 'transcripts.jsonl'}: changed after the simulation stage" in error_line(proc)
    assert not (tmp_path / "v").exists()


# ---------------------------------------------------------------- no key printed or written, anywhere

KEY_VAR = "MINDSIM_TEST_FAKE_KEY"


def _keyed_recipe(path: Path, stub, roles: list[str], extra: str = "") -> Path:
    """`_stub_recipe` with the engine's key in KEY_VAR, and the key also pasted into the URL's user part."""
    recipe = _stub_recipe(path, stub, roles, extra)
    text = recipe.read_text().replace("native_tools: false}", f"native_tools: false, api_key_env: {KEY_VAR}}}")
    recipe.write_text(text.replace("http://", f"http://user:{FAKE_KEY}@", 1))
    return recipe


def _nowhere(key: str, proc: subprocess.CompletedProcess, *folders: Path) -> None:
    """`key` is not in stdout, stderr, nor in any file under `folders` (parquet files read as their rows' text)."""
    import pyarrow.parquet as pq

    assert key not in proc.stdout and key not in proc.stderr, (proc.stdout + proc.stderr)[-3000:]
    assert "Traceback" not in proc.stderr
    looked = 0
    for folder in folders:
        for path in (p for p in folder.rglob("*") if p.is_file()):
            looked += 1
            assert key.encode() not in path.read_bytes(), path
            if path.suffix == ".parquet":
                assert key not in json.dumps(pq.read_table(path).to_pylist(), default=str), path
    assert looked or not folders, "nothing was written: the test would pass vacuously"


def echoing():
    """Passes the preflight's probe, then refuses every call with an error body quoting the Authorization header."""
    return after_probe(always_status(400, "bad request; {authorization}"))


@pytest.fixture
def fake_key(monkeypatch):
    monkeypatch.setenv(KEY_VAR, FAKE_KEY)
    return FAKE_KEY


def test_run_with_an_engine_echoing_the_key_prints_and_writes_it_nowhere(openai_stub, fake_key, tmp_path):
    stub = openai_stub(echoing())
    recipe = _keyed_recipe(
        tmp_path / "r.yaml",
        stub,
        [],
        "profiles: {personas: synthetic, candidates: 2, pool_size: 1, benchmark_size: 1, use_distilabel: false}\n",
    )
    proc = mindsim_here("run", recipe, "--out", tmp_path / "o", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "profiles: all 2 candidates failed" in error_line(proc, only_line=False)
    _nowhere(fake_key, proc, tmp_path / "o")


def test_profiles_simulate_and_judge_run_with_an_echoing_engine_print_and_write_no_key(openai_stub, fake_key, tmp_path):
    sys.path.insert(0, str(TESTS / "judge"))
    from judgefakes import write_run
    from mindsimkit.profilegen.dataset import write_profiles
    from simfakes import make_profile

    stub = openai_stub(echoing())
    recipe = _keyed_recipe(
        tmp_path / "r.yaml",
        stub,
        SIM_ROLES,
        "profiles: {personas: synthetic, candidates: 2, "
        "pool_size: 1, benchmark_size: 1, use_distilabel: false}\nsimulation: {sessions: 1, turn_cap: 3}\n",
    )
    profiles = mindsim_here("profiles", recipe, "--out", tmp_path / "p", cwd=tmp_path)
    assert profiles.returncode == 1, profiles.stderr
    _nowhere(fake_key, profiles, tmp_path / "p")

    write_profiles([make_profile("p1")], tmp_path / "pool")
    stub.behaviour = echoing()  # each command probes the engine first
    simulate = mindsim_here(
        "simulate", "--profiles", tmp_path / "pool", "--recipe", recipe, "--out", tmp_path / "s", cwd=tmp_path
    )
    assert simulate.returncode == 1, simulate.stderr
    assert "request had Authorization: ***" in (tmp_path / "s" / "sessions" / "summary.json").read_text()
    _nowhere(fake_key, simulate, tmp_path / "s")

    run = write_run(tmp_path / "judged")
    stub.behaviour = echoing()
    judged = mindsim_here("judge", "run", run, "--recipe", recipe, cwd=tmp_path)
    assert judged.returncode == 1, judged.stderr
    _nowhere(fake_key, judged, run)


def test_engines_check_with_an_echoing_engine_shows_no_key(openai_stub, fake_key, tmp_path):
    stub = openai_stub(always_status(400, "refused; {authorization}"))
    proc = mindsim_here("engines", "check", _keyed_recipe(tmp_path / "r.yaml", stub, []), cwd=tmp_path)
    assert proc.returncode in (1, 2), proc.stderr
    assert "http://***@127.0.0.1" in proc.stdout + proc.stderr
    _nowhere(fake_key, proc)


def test_publish_to_a_hub_echoing_the_token_shows_no_token(openai_stub, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mindsimkit.mindcore.provenance import base_provenance
    from mindsimkit.mindsim_app.cards import build_dataset_folder

    run_dir = tmp_path / "run"
    (run_dir / "profiles").mkdir(parents=True)
    pq.write_table(pa.table({"profile_id": ["p0"], "in_pool": [True]}), run_dir / "profiles" / "profiles.parquet")
    folder = build_dataset_folder(
        run_dir, header({"run_id": "abcd", "recipe": {"name": "t", "seed": 1}, "provenance": base_provenance()})
    )
    stub = openai_stub(always_status(500))
    stub.echo_auth = True  # the Hub routes answer 404 quoting the request's Authorization header
    env = {**ENV, "HF_TOKEN": FAKE_KEY, "HF_ENDPOINT": stub.base_url.removesuffix("/v1")}
    proc = mindsim("publish", folder, "--repo-id", "someone/tiny", cwd=tmp_path, env=env)
    assert proc.returncode == 2, proc.stderr
    assert "push to someone/tiny failed" in error_line(proc, only_line=False)
    _nowhere(FAKE_KEY, proc, folder)


def test_a_key_pasted_as_the_variable_name_is_not_echoed(tmp_path):
    files = Files(tmp_path)
    for runner in (mindsim_here, mindsim):
        proc = runner("run", files.recipe_pasted_key, "--out", tmp_path / "o", cwd=tmp_path)
        assert proc.returncode == 2 and FAKE_KEY not in proc.stdout + proc.stderr, proc.stderr
        assert "api_key_env" in error_line(proc)


def test_an_unexpected_exception_is_one_line_without_locals(monkeypatch, fake_key, tmp_path):
    """Whatever escapes a command (a bug) is one `error:` line naming the exception, never a traceback with the
    frames' local variables: distilabel installs such a hook for the whole process when it is imported."""
    import mindsimkit.mindcore.distilabel_llm  # noqa: F401 - what installs the hook, imported as a job does
    from mindsimkit.mindcore import recipe as recipe_module

    def broken(path):
        api_key = os.environ[KEY_VAR]  # a local a traceback with locals would print
        raise RuntimeError(f"boom while holding {api_key[:4]}…")

    monkeypatch.setattr(recipe_module, "load_recipe", broken)
    proc = mindsim_here("run", tmp_path / "r.yaml", "--out", tmp_path / "o", cwd=tmp_path)
    assert proc.returncode == 1
    line = error_line(proc)
    assert line.startswith("error: internal error (RuntimeError: boom while holding sk-m…)") and "mindsim bug" in line
    assert fake_key not in proc.stderr
    assert not (getattr(sys.excepthook, "__module__", "") or "").startswith("rich"), "distilabel's hook is still there"


# ---------------------------------------------------------------- environments and run-time checks


def test_a_ray_address_that_answers_http_fails_within_the_timeout(files):
    """A port that accepts the connection but is not a Ray head (a web server, the dashboard): exit 1 in one line
    within ray.connect_timeout_s (it used to hang until killed), before the run folder exists."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    recipe = files.root / "ray.yaml"
    recipe.write_text(files.recipe_ok.read_text() + "ray: {connect_timeout_s: 3}\n")
    try:
        started = time.monotonic()
        proc = mindsim(
            "run",
            recipe,
            "--out",
            files.root / "o",
            "--ray",
            f"127.0.0.1:{server.server_address[1]}",
            cwd=files.root,
            timeout=120,
        )
        took = time.monotonic() - started
    finally:
        server.shutdown()
    assert proc.returncode == 1, proc.stderr
    assert "the port answers but is not a Ray head" in error_line(proc)
    assert not (files.root / "o").exists() and took < 60


def test_a_ray_client_address_without_the_client_extra_is_exit_2(files):
    if importlib.util.find_spec("grpc") is not None:
        pytest.skip("ray[client] is installed here")
    proc = mindsim_here(
        "run", files.recipe_ok, "--out", files.root / "o", "--ray", "ray://127.0.0.1:10001", cwd=files.root
    )
    assert proc.returncode == 2 and "pip install 'ray[client]'" in error_line(proc)
    assert not (files.root / "o").exists()


@pytest.mark.parametrize(
    "answer, expected",
    [(b"SSH-2.0-OpenSSH_9.6\r\n", "no server answers there"), (b'{"data": null}', "is not an OpenAI-style model list")],
    ids=["not-http", "data-null"],
)
def test_an_embedded_url_at_something_else_is_one_line_and_nothing_written(answer, expected, files, monkeypatch):
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                if answer.startswith(b"{"):
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                        + str(len(answer)).encode()
                        + b"\r\nConnection: close\r\n\r\n"
                        + answer
                    )
                else:
                    conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    monkeypatch.setenv("MINDSIM_EMBEDDED_URL", f"http://127.0.0.1:{listener.getsockname()[1]}/v1")
    try:
        proc = mindsim_here("run", files.recipe_ok, "--out", files.root / "o", cwd=files.root)
    finally:
        listener.close()
    assert proc.returncode == 2, proc.stderr
    assert expected in error_line(proc, only_line=False) and "MINDSIM_EMBEDDED_URL" in error_line(proc, only_line=False)
    assert not (files.root / "o").exists()


def test_a_closed_embedded_url_writes_nothing_and_the_fixed_run_starts_clean(files, monkeypatch):
    monkeypatch.setenv("MINDSIM_EMBEDDED_URL", f"http://127.0.0.1:{_free_port()}/v1")
    proc = mindsim_here("run", files.recipe_ok, "--out", files.root / "o", cwd=files.root)
    assert proc.returncode == 2 and "MINDSIM_EMBEDDED_URL" in error_line(proc, only_line=False)
    assert not (files.root / "o").exists(), "run.json or logs/ written before the checks"


@pytest.mark.parametrize(
    "argv",
    [
        lambda f: ["report", f["run"], "--out", f["tmp"] / "r.html"],
        lambda f: ["judge", "alpha", f["ratings"], "--rubric", "mindeval_v1_human", "--out", f["tmp"] / "a"],
    ],
    ids=["report", "judge-alpha"],
)
def test_a_full_disk_is_one_line_exit_1(argv, finished_run, files, monkeypatch, tmp_path):
    """OSError 28 from the atomic writer (the disk or quota ran out): one line naming the file, exit 1, and the
    temp file removed."""
    from mindsimkit.mindcore import io as mio

    real = mio._umask_mode

    def full() -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(mio, "_umask_mode", full)
    ratings = files.root / "two.csv"
    ratings.write_text("item,unit,rater,value\ncriterion_1,c1,ana,4\ncriterion_1,c1,bo,5\n")
    proc = mindsim_here(
        *argv({"run": _copy_of(finished_run, tmp_path), "tmp": tmp_path, "ratings": ratings}), cwd=tmp_path
    )
    monkeypatch.setattr(mio, "_umask_mode", real)
    assert proc.returncode == 1, proc.stderr
    assert "no space left on the device while writing it" in error_line(proc)
    assert not list(tmp_path.rglob(".*.tmp"))


def test_annotate_serve_refuses_a_task_whose_rubric_is_invalid(finished_run, tmp_path):
    rubric = tmp_path / "mine.yaml"
    rubric.write_text(
        "id: mine\nname: x\nversion: '1'\nsource: ours\nunit: conversation\nscale: {min: 1, max: 3, "
        "anchors: {1: a, 2: b, 3: c}}\nitems:\n  - {id: warmth, name: W, question: Q}\npage: {title: T}\n"
    )
    task = tmp_path / "task"
    made = mindsim_here(
        "annotate",
        "sample",
        "sessions",
        "--out",
        task,
        "--run",
        finished_run,
        "--rubric",
        rubric,
        "--n-raters",
        "3",
        cwd=tmp_path,
    )
    assert made.returncode == 0, made.stderr
    head = json.loads((task / "task.json").read_text())
    head["rubric"]["yaml"] = head["rubric"]["yaml"].replace("max: 3", "max: 2")  # anchor 3 now off the scale
    (task / "task.json").write_text(json.dumps(head))
    before = _tree(tmp_path)
    proc = mindsim_here("annotate", "serve", task, "--port", "0", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert f"{task}: its items cannot be shown" in error_line(proc)
    assert _tree(tmp_path) == before


def test_publish_refuses_to_delete_a_file_left_in_the_dataset_folder(finished_run, tmp_path):
    run = _copy_of(finished_run, tmp_path)
    notes = run / "dataset" / "my-notes.txt"
    notes.write_text("mine\n")
    before = _tree(tmp_path)
    proc = mindsim_here("publish", run, "--repo-id", "someone/x", "--dry-run", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert f"{notes}: not written by mindsim" in error_line(proc) and "move it out" in error_line(proc)
    assert _tree(tmp_path) == before


def test_a_run_whose_every_judgment_failed_exits_1_and_its_page_names_its_presets(openai_stub, tmp_path):
    """The judge answers nothing usable: every judgment is recorded as a counted failure, the job stops with exit 1
    before the dataset, and run.json already names the presets the run used, so the page `report --allow-partial`
    makes of the stopped run says them instead of the defaults."""
    from simfakes import SimResponder

    pg, sim = _profile_fakes(), SimResponder(end_after=2)

    def respond(req):
        if req.role == "profile_writer":
            return pg.draft_for(req)
        if req.role == "judge":
            return {"justification": "n/a"}  # never a whole judgment
        return pg.clean_verdict(req) if req.role == "screener" else sim(req)

    stub = openai_stub(from_responder(respond))
    recipe = _stub_recipe(
        tmp_path / "r.yaml",
        stub,
        ["profile_writer", "screener", *SIM_ROLES[:-1], "judge"],
        "profiles: {personas: synthetic, candidates: 3, pool_size: 2, benchmark_size: 1, pool_verdicts: [clean, minor]}\n"
        "simulation: {sessions: 1, turn_cap: 3}\n"
        "validation: {bootstrap_draws: 20, floor_splits: 5}\n"
        "judge: {preset: mhqr-reference}\n",
    )
    out = tmp_path / "run"
    proc = mindsim_here("run", recipe, "--out", out, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert "every judgment failed" in error_line(proc, only_line=False)
    header = RunLayout(out).header()
    assert not header.finished and header.presets == {"mindsim": "ours", "judge": "mhqr-reference"}
    assert not (out / "dataset" / "README.md").exists()
    assert mindsim_here("report", out, "--allow-partial", cwd=tmp_path).returncode == 0
    page = (out / "report.html").read_text()
    assert "<th>presets</th><td>mindsim: ours</td>" in page and "judge output preset mhqr-reference" in page
