"""Inputs of the samplers beyond run folders (another simulator's sessions JSONL, named inputs, the paper's
first-session / turn filters), the PatientAct export read back by the judge's own loader, and the commands:
one `error:` line and exit 2 on bad input, a warning when serving beyond this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


from annotfakes import messages, write_run
from mindsimkit.judge.patientact import load_human, load_items, rubrics
from mindsimkit.mindsim_app.annotate.export import export_task
from mindsimkit.mindsim_app.annotate.samplers import sample_patientact_sessions, sample_realism
from mindsimkit.mindsim_app.annotate.store import Store
from mindsimkit.mindsim_app.annotate.tasks import Design, load_task
from serving import REPO, free_port


def other_simulator(path: Path) -> Path:
    rows = []
    for i in range(3):
        for idx in (0, 1):
            msgs = messages(f"o{i}{idx}", 12)
            rows.append(
                {
                    "session_id": f"o{i}{idx}",
                    "patient_id": f"op{i}",
                    "counsellor": "c",
                    "session_index": idx,
                    "counsellor_system_prompt": msgs[0]["content"],
                    "messages": msgs,
                }
            )
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_sessions_jsonl_named_inputs_and_the_papers_filters(tmp_path, run_dir):
    other = other_simulator(tmp_path / "other.jsonl")
    s = sample_realism(
        tmp_path / "t",
        Design(raters=["a"], k=1),
        n=6,
        runs=[f"ours={run_dir}"],
        sessions=[f"baseline={other}"],
        windows=[5],
        first_sessions=True,
        max_turns=5,
        seed=0,
    )
    key = json.loads(Path(s["key"]).read_text())
    assert sorted(key["systems"].values()) == ["baseline", "ours"]
    for e in key["items"].values():
        assert e["session_index"] == 0 and max(e["turns"]) < 5  # first sessions, first five patient turns
    # Only one five-turn window fits in five turns: each conversation gives at most one.
    per = {}
    for e in key["items"].values():
        per[(e["system"], e["conversation_id"])] = per.get((e["system"], e["conversation_id"]), 0) + 1
    assert set(per.values()) == {1}


def test_patientact_export_reads_back_with_the_judges_loader(tmp_path, run_dir):
    s = sample_patientact_sessions(tmp_path / "t", Design(raters=["a", "b"], k=2), runs=[run_dir], per_system=2)
    task = load_task(Path(s["task"]))
    store = Store(task.root)
    dims = rubrics().conversation.ids
    for r, ids in task.assignments.items():
        for iid in ids:
            store.save(r, iid, "0", {"scores": {d: 3 for d in dims}})
    store.close()
    out = export_task(task.root, tmp_path / "x", Path(s["key"]))
    ratings = load_human(Path(out["files"]["patientact_human"]), dims)
    judge_ids = {it.item_id for it in load_items([run_dir])}
    assert len(ratings) == 8 and {r.item_id for r in ratings} <= judge_ids


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """The commands under the toolkit's own entry point, with the annotate sub-apps mounted as the top-level
    CLI mounts them (`mindsim annotate …`, `mindsim realism …`)."""
    try:
        import mindsimkit.mindsim_app.cli as root
    except ImportError:
        import mindsimkit.mindsim.cli as root
    from mindsimkit.mindsim_app.annotate.cli import app, realism_app

    names = {g.name for g in root.app.registered_groups}
    if "annotate" not in names:
        root.app.add_typer(app, name="annotate")
    if "realism" not in names:
        root.app.add_typer(realism_app, name="realism")
    code = root.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_bad_input_is_one_error_line_and_exit_2(tmp_path, run_dir, capsys):
    code, out, err = cli(
        capsys,
        "annotate",
        "sample",
        "realism",
        "--run",
        str(run_dir),
        "--n",
        "4",
        "--n-raters",
        "2",
        "--k",
        "3",
        "--out",
        str(tmp_path / "t"),
    )
    assert code == 2 and err.strip().startswith("error:") and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "t").exists()
    code, out, err = cli(capsys, "annotate", "export", str(tmp_path / "nope"), "--out", str(tmp_path / "o"))
    assert code == 2 and "not a task folder" in err
    code, out, err = cli(
        capsys,
        "annotate",
        "sample",
        "realism",
        "--run",
        str(run_dir),
        "--n",
        "4",
        "--n-raters",
        "2",
        "--k",
        "2",
        "--out",
        str(tmp_path / "t"),
    )
    assert code == 0 and "key (keep it from the raters)" in out, err
    code, out, err = cli(capsys, "realism", "report", str(tmp_path / "t"), "--out", str(tmp_path / "rep"))
    assert code == 2 and "--key" in err


def test_serving_beyond_this_machine_warns(tmp_path, run_dir):
    sample_realism(tmp_path / "t", Design(raters=["a"], k=1), n=2, runs=[str(run_dir)], windows=[1])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mindsimkit.mindsim_app.annotate",
            "serve",
            str(tmp_path / "t"),
            "--host",
            "0.0.0.0",
            "--port",
            str(free_port()),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    try:
        line = p.stderr.readline()
        assert line.startswith("warning: listening on 0.0.0.0")
    finally:
        p.terminate()
        p.wait(10)


def test_mhqr_export_writes_only_excerpts_rated_on_every_turn(tmp_path, run_dir):
    from mindsimkit.mindsim_app.annotate.samplers import sample_mhqr

    s = sample_mhqr(tmp_path / "m", Design(raters=["a"], k=1), run_dir=run_dir, n=2, unit="window", seed=1)
    task = load_task(Path(s["task"]))
    first, second = task.assignments["a"]
    store = Store(task.root)
    for u in task.items[first]["units"]:
        store.save("a", first, u["unit"], {"severity": "no_concern", "issues": []})
    store.save("a", second, "0", {"severity": "minor", "issues": ["under_guiding"]})  # 1 of 5 turns
    store.close()
    out = export_task(task.root, tmp_path / "x")
    lines = [json.loads(x) for x in Path(out["files"]["mhqr_annotations"]).read_text().splitlines()]
    assert {x["excerpt_id"] for x in lines} == {first} and len(lines) == 5 and all(x["turn_id"] for x in lines)
    assert out["incomplete_excerpts"] == [{"rater": "a", "item_id": second, "rated": 1, "turns": 5}]


def test_serving_on_a_port_in_use_is_one_error_line_and_writes_no_links(tmp_path, run_dir, capsys):
    import socket

    sample_realism(tmp_path / "t", Design(raters=["a"], k=1), n=2, runs=[str(run_dir)], windows=[1])
    before = sorted(p.name for p in (tmp_path / "t").iterdir())
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code, _, err = cli(capsys, "annotate", "serve", str(tmp_path / "t"), "--port", str(port))
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --host 127.0.0.1 --port " + str(port)), err
    assert "already in use" in lines[0] and "--port" in lines[0]
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == before  # no links file was written


def test_a_sample_that_draws_nothing_is_one_error_line_and_exit_1(tmp_path, capsys):
    # Sessions of 3 patient turns cannot hold a 9-turn window: no task folder, not an empty one.
    run = write_run(tmp_path / "run", turns=3)
    code, out, err = cli(
        capsys,
        "annotate",
        "sample",
        "realism",
        "--run",
        str(run),
        "--n",
        "4",
        "--windows",
        "9",
        "--n-raters",
        "2",
        "--k",
        "1",
        "--out",
        str(tmp_path / "t"),
    )
    assert code == 1 and len(err.strip().splitlines()) == 1 and err.startswith("error:"), err
    assert "no window drawn" in err and "--windows 3" in err
    assert not (tmp_path / "t").exists() and not (tmp_path / "t.key.json").exists()
