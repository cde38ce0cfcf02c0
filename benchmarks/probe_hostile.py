"""Hostile inputs and hostile servers against the real `mindsim` command, one table row per probe.

Each probe runs in a fresh sandbox folder with a fake API key in the environment and, when it names one, a stub
OpenAI-compatible server on 127.0.0.1 (tests/openai_stub.py) behaving as the row says. For every probe it checks
what docs/commands.md promises:

- the documented exit code, within the row's time bound (a probe still running then is killed: "timeout");
- a refusal is ONE line on stderr (`error: …`, or `interrupted` after Ctrl-C), with no traceback;
- nothing is written or changed in the sandbox outside the command's output folder;
- the fake key is nowhere: not in stdout, stderr, any file in the sandbox, nor (raw or URL-encoded) in what the
  stub server was sent in a request body.

A new class of hostile input is one `Probe(...)` row in `PROBES`. Rows whose `owner` is not "run folder" check
fixes made on other branches and may fail until those are merged.

    python benchmarks/probe_hostile.py            # every probe, a summary table; exit 1 if any failed
    python benchmarks/probe_hostile.py --smoke    # a few fast probes (tests/test_benchmarks.py runs this)
    python benchmarks/probe_hostile.py --only lock-held --only out-over-run-table
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
for extra in (ROOT / "tests", ROOT / "tests" / "judge", ROOT / "tests" / "mindsim", ROOT / "tests" / "mindsim_app"):
    sys.path.insert(0, str(extra))

from smoke import parse_args  # noqa: E402

KEY_VAR = "MINDSIM_PROBE_KEY"
# A slash and a plus, so its URL-encoded form differs from the raw one (sk-…%2F…%2B…).
FAKE_KEY = f"sk-probe/{secrets.token_hex(10)}+{secrets.token_hex(6)}"


@dataclass
class Ctx:
    """A probe's sandbox: `root` (everything it may see), `inputs` (what the row creates), `out` (the only place
    the command may write), and the stub server's recipe when the row has a stub."""

    root: Path
    recipe: Path | None = None
    stub: Any = None

    @property
    def inputs(self) -> Path:
        return self.root / "in"

    @property
    def out(self) -> Path:
        return self.root / "work" / "out"

    @property
    def run(self) -> Path:
        return self.inputs / "run"


@dataclass
class Probe:
    name: str
    argv: Callable[[Ctx], list[Any]]  # after `mindsim` (or after `program`)
    expect: int | str  # an exit code, or "nonzero"
    setup: Callable[[Ctx], None] | None = None  # the files the probe needs, made in the sandbox
    stub: str | None = None  # a key of STUBS: how the engine behaves
    bound_s: float = 120.0  # killed (and failed) after this long
    interrupt_after: int | None = None  # SIGINT to the process group once the stub has this many requests
    one_line: bool = True  # a non-zero exit prints one line on stderr
    check: Callable[[Ctx, subprocess.CompletedProcess[str]], str | None] | None = None  # extra: a problem, or None
    program: str = "mindsim"
    smoke: bool = False
    owner: str = "run folder"
    holds_lock: bool = False  # this probe holds the output folder's run lock while the command runs


# ---------------------------------------------------------------- stub behaviours


def _stubs() -> dict[str, Callable[[], Any]]:
    from openai_stub import Reply, always_status, probe_answers

    def slow(body: dict[str, Any]) -> Any:
        time.sleep(0.5)
        return probe_answers(body)

    def never(_body: dict[str, Any]) -> Any:
        time.sleep(3600)
        return Reply(content="too late")

    echo = f"invalid api key {quote(FAKE_KEY, safe='')} (sent {FAKE_KEY})"
    return {
        "ok": lambda: probe_answers,
        "slow": lambda: slow,
        "never": lambda: never,
        "echo-key": lambda: always_status(401, echo),
    }


def _recipe(ctx: Ctx, extra: str = "") -> Path:
    path = ctx.inputs / "recipe.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"name: probe\nseed: 3\nengines:\n  stub: {{kind: openai, base_url: '{ctx.stub.base_url}', model: m, "
        f"native_tools: false, api_key_env: {KEY_VAR}, timeout_s: 15}}\nroles:\n  default: {{engine: stub}}\n"
        "profiles: {personas: synthetic, candidates: 2, pool_size: 1, benchmark_size: 1, use_distilabel: false}\n"
        + extra
    )
    return path


# ---------------------------------------------------------------- files the probes start from


def _run_folder(ctx: Ctx, manifest: dict[str, Any] | None = None) -> None:
    """A small run folder: sessions, and a manifest (empty unless given)."""
    from judgefakes import write_run

    write_run(ctx.run)
    (ctx.run / "run_manifest.json").write_text(json.dumps(manifest or {"format": 1, "stages": {}}))


def _manifest_entry(path: str) -> Callable[[Ctx], None]:
    record = {
        "written_utc": "2026-01-01T00:00:00+00:00",
        "toolkit_version": "0",
        "reads": {},
        "counts": {},
        "files": [{"path": path, "bytes": 1, "sha256": "0" * 64}],
    }
    return lambda ctx: _run_folder(ctx, {"format": 1, "stages": {"simulation": record}})


def _dataset_with_link(ctx: Ctx) -> None:
    from mindsimkit.mindsim_app.cards import MANIFEST

    (ctx.inputs / "private").mkdir(parents=True)
    (ctx.inputs / "private" / "notes.txt").write_text("not for the Hub\n")
    dataset = ctx.inputs / "dataset"
    (dataset / "data").mkdir(parents=True)
    (dataset / MANIFEST).write_text(json.dumps({"files": {}, "configs": {}}))
    (dataset / "data" / "extra").symlink_to(ctx.inputs / "private")


def _rubric_reading_environ(ctx: Ctx) -> None:
    _run_folder(ctx)
    folder = ctx.inputs / "rubric"
    folder.mkdir()
    (folder / "t.jinja2").write_text("{{ cycler.__init__.__globals__.os.environ }}")
    (folder / "rubric.yaml").write_text(
        "id: probe\nname: x\nversion: '1'\nsource: ours\nunit: conversation\nscale: {min: 1, max: 5}\nitems:\n"
        "  - {id: warmth, name: W, question: Q, anchors: {1: a, 2: b, 3: c, 4: d, 5: e}}\n"
        "judge: {template: ./t.jinja2}\npage: {title: T}\n"
    )


def _members_escaping(ctx: Ctx) -> None:
    from import_fixtures import member, write_jsonl

    write_jsonl(ctx.inputs / "profiles.jsonl", [member("../../PRB_escape1")])


def _profiles(ctx: Ctx) -> None:
    from mindsimkit.profilegen.dataset import write_profiles
    from simfakes import make_profile

    write_profiles([make_profile("p1")], ctx.inputs / "profiles")


def _no_request_holds_the_environment(ctx: Ctx, _proc: subprocess.CompletedProcess[str]) -> str | None:
    sent = [json.dumps(r) for r in (ctx.stub.requests if ctx.stub else [])]
    return f"a request body held {KEY_VAR}" if any(KEY_VAR in s for s in sent) else None


def _names_this_process(ctx: Ctx, proc: subprocess.CompletedProcess[str]) -> str | None:
    return None if f"pid {os.getpid()}" in proc.stderr else "the refusal does not name the holder's pid"


PROBES: list[Probe] = [
    # -- a run's own files, its manifest, its dataset, its lock, Ctrl-C
    Probe(
        "out-over-run-table",
        lambda c: ["export", "sft", c.run, "--out", c.run / "sessions" / "sessions.parquet"],
        2,
        setup=_run_folder,
        smoke=True,
    ),
    Probe(
        "key-over-run-manifest",
        lambda c: [
            "judge",
            "sample",
            c.run,
            "--n",
            "1",
            "--out",
            c.out / "x.jsonl",
            "--key",
            c.run / "run_manifest.json",
        ],
        2,
        setup=_run_folder,
        smoke=True,
    ),
    Probe(
        "out-dotdot-into-run",
        lambda c: ["export", "patient", c.run, "--out", c.run / "exports" / ".." / "run_manifest.json.jsonl"],
        2,
        setup=_run_folder,
    ),
    Probe(
        "manifest-entry-dotdot",
        lambda c: ["report", c.run, "--out", c.out / "r.html"],
        2,
        setup=_manifest_entry("../../outside.txt"),
        smoke=True,
    ),
    Probe(
        "manifest-entry-absolute",
        lambda c: ["export", "sft", c.run, "--out", c.out / "sft.jsonl"],
        2,
        setup=_manifest_entry("/etc/passwd"),
    ),
    Probe(
        "dataset-symlink",
        lambda c: ["publish", c.inputs / "dataset", "--repo-id", "probe/x", "--dry-run"],
        2,
        setup=_dataset_with_link,
        smoke=True,
    ),
    Probe(
        "lock-held",
        lambda c: ["run", c.recipe, "--out", c.out],
        2,
        stub="ok",
        holds_lock=True,
        check=_names_this_process,
        smoke=True,
    ),
    Probe("ctrl-c-profiles", lambda c: ["profiles", c.recipe, "--out", c.out], 130, stub="slow", interrupt_after=4),
    # -- other branches' classes: these may fail until those fixes are merged
    Probe(
        "template-reads-environ",
        lambda c: ["judge", "run", c.run, "--rubric", c.inputs / "rubric" / "rubric.yaml", "--recipe", c.recipe],
        2,
        stub="ok",
        setup=_rubric_reading_environ,
        check=_no_request_holds_the_environment,
        owner="templates",
    ),
    Probe(
        "member-id-escape",
        lambda c: ["import", "mindeval2-profiles", c.inputs / "profiles.jsonl", "--out", c.out],
        2,
        setup=_members_escaping,
        owner="file names",
    ),
    Probe(
        "key-echoed-url-encoded", lambda c: ["engines", "check", c.recipe], "nonzero", stub="echo-key", owner="secrets"
    ),
    # The probe recipe's engine has timeout_s 15: one probe request, sent once on a timeout (docs/engines.md).
    Probe(
        "server-never-answers",
        lambda c: ["engines", "check", c.recipe],
        "nonzero",
        stub="never",
        bound_s=60,
        owner="timeouts",
    ),
    Probe(
        "dev-zero-input",
        lambda c: ["validate", "reference", "/dev/zero", "--out", c.out / "ref.parquet"],
        2,
        bound_s=5,
        owner="size bounds",
    ),
    Probe(
        "inspect-sessions-negative",
        lambda c: [
            "eval",
            "mindsimkit/mindeval2",
            "-T",
            "sessions=-1",
            "-T",
            f"profiles={c.inputs / 'profiles'}",
            "-T",
            f"recipe={c.recipe}",
            "--log-dir",
            c.out / "logs",
        ],
        "nonzero",
        stub="ok",
        setup=_profiles,
        program="inspect",
        owner="inspect args",
        one_line=False,
        # inspect prints a task's refusal on stdout (its own choice), so both streams are read.
        check=lambda c, p: None if "sessions" in p.stdout + p.stderr else "the argument at fault is not named",
    ),
]


# ---------------------------------------------------------------- running one probe


def _files(root: Path) -> dict[str, str]:
    found = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            found[p.relative_to(root).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    return found


def _error_lines(stderr: str) -> list[str]:
    from cli_streams import without_progress

    return [ln for ln in without_progress(stderr).splitlines() if ln.strip()]


@dataclass
class Result:
    probe: Probe
    got: str
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems


def _program(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if not found:
        raise SystemExit(f"error: the `{name}` script is not installed beside {sys.executable}; run `make install`")
    return found


def _wait(proc: subprocess.Popen[str], probe: Probe, ctx: Ctx, started: float) -> tuple[str, str, bool]:
    if probe.interrupt_after is not None:
        while (
            len(ctx.stub.requests) < probe.interrupt_after
            and proc.poll() is None
            and time.monotonic() - started < probe.bound_s
        ):
            time.sleep(0.05)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=max(0.1, probe.bound_s - (time.monotonic() - started)))
        return out, err, False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return out, err, True


def run_probe(probe: Probe) -> Result:
    from contextlib import ExitStack

    from openai_stub import OpenAIStub

    from mindsimkit.mindcore.runfolder import run_lock

    with tempfile.TemporaryDirectory(prefix=f"probe-{probe.name}-") as tmp, ExitStack() as stack:
        ctx = Ctx(Path(tmp))
        ctx.inputs.mkdir(parents=True)
        ctx.out.parent.mkdir(parents=True)
        if probe.stub is not None:
            ctx.stub = stack.enter_context(OpenAIStub(_stubs()[probe.stub]()))
            ctx.stub.serve("m")
            ctx.recipe = _recipe(ctx)
        if probe.setup is not None:
            probe.setup(ctx)
        if probe.holds_lock:
            stack.enter_context(run_lock(ctx.out, "probe_hostile.py (holding the lock on purpose)"))
        before = _files(ctx.root)
        env = {**os.environ, KEY_VAR: FAKE_KEY, "COLUMNS": "200", "NO_COLOR": "1"}
        started = time.monotonic()
        proc = subprocess.Popen(
            [_program(probe.program), *map(str, probe.argv(ctx))],
            cwd=ctx.root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        out, err, timed_out = _wait(proc, probe, ctx, started)
        seconds = time.monotonic() - started
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        got = "timeout" if timed_out else str(proc.returncode)
        result = Result(probe, got, seconds=seconds)
        problems = result.problems
        if timed_out:
            problems.append(f"still running after {probe.bound_s:.0f} s")
        elif (
            probe.expect == "nonzero"
            and proc.returncode == 0
            or probe.expect != "nonzero"
            and proc.returncode != probe.expect
        ):
            problems.append(f"exit {proc.returncode}, expected {probe.expect}")
        if "Traceback" in err:
            problems.append("a traceback on stderr")
        lines = _error_lines(err)
        if not timed_out and proc.returncode != 0 and probe.one_line:
            mark = "interrupted" if proc.returncode == 130 else "error:"
            said = [ln for ln in lines if ln.startswith(mark)]
            if len(said) != 1:
                problems.append(f"{len(said)} '{mark}' lines on stderr (want one): {lines[-3:]}")
        after = _files(ctx.root)
        out_rel = ctx.out.relative_to(ctx.root).as_posix() + "/"
        outside = sorted(k for k, v in after.items() if not k.startswith(out_rel) and before.get(k) != v)
        if outside:
            problems.append(f"wrote outside --out: {outside[:3]}")
        encoded = quote(FAKE_KEY, safe="")
        for form in (FAKE_KEY, encoded):
            if form in out or form in err:
                problems.append("the key is on stdout/stderr" + (" (URL-encoded)" if form == encoded else ""))
            leaked = [k for k in after if form.encode() in (ctx.root / k).read_bytes()]
            if leaked:
                problems.append(f"the key is in {leaked[:2]}")
        if probe.check is not None:
            extra = probe.check(ctx, done)
            if extra:
                problems.append(extra)
        return result


# ---------------------------------------------------------------- the table


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", default=[], help="run only this probe (repeat)")
    args = parse_args(ap)
    chosen = [p for p in PROBES if (not args.smoke or p.smoke) and (not args.only or p.name in args.only)]
    unknown = set(args.only) - {p.name for p in PROBES}
    if unknown:
        print(
            f"error: --only {', '.join(sorted(unknown))}: no such probe ({', '.join(p.name for p in PROBES)})",
            file=sys.stderr,
        )
        return 2
    results = []
    for probe in chosen:
        results.append(run_probe(probe))
        r = results[-1]
        print(
            f"{'pass' if r.ok else 'FAIL'}  {probe.name}: exit {r.got} in {r.seconds:.1f} s"
            + ("" if r.ok else " — " + "; ".join(r.problems)),
            flush=True,
        )
    width = max(len(p.name) for p in chosen) if chosen else 5
    print(f"\n{'probe':<{width}}  {'owner':<12}  {'expected':>8}  {'got':>7}  pass")
    for r in results:
        print(
            f"{r.probe.name:<{width}}  {r.probe.owner:<12}  {str(r.probe.expect):>8}  {r.got:>7}  "
            f"{'yes' if r.ok else 'NO'}"
        )
    failed = [r for r in results if not r.ok]
    print(f"\n{len(results) - len(failed)} of {len(results)} probes hold")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
