"""The run folder's manifest (`mindcore.manifest`): what each stage records, and what `check_run` /
`verify_run` / `verify_file` find in a folder that was changed after."""

from __future__ import annotations

import json
import socket

import pytest

from mindsimkit.mindcore.errors import ConfigError, EngineError, InputError
from mindsimkit.mindcore.layout import RunLayout
from mindsimkit.mindcore.manifest import check_run, forget_stage, read_manifest, record_stage, verify_file, verify_run


@pytest.fixture
def run(tmp_path):
    layout = RunLayout(tmp_path / "run")
    layout.sessions.path.mkdir(parents=True)
    layout.judgments.path.mkdir()
    layout.transcripts.parent.mkdir()
    layout.sessions.parquet.write_bytes(b"sessions v1")
    layout.transcripts.write_text('{"id": "a"}\n{"id": "b"}\n')
    record_stage(
        layout.path,
        "simulation",
        [layout.sessions.parquet, layout.transcripts, layout.sessions.summary],
        counts={"sessions": 2},
    )
    layout.judgments.parquet.write_bytes(b"judgments of v1")
    record_stage(layout.path, "judge", [layout.judgments.parquet], reads=["simulation"])
    return layout


def test_stages_record_their_files_in_order_with_digests_and_reads(run):
    manifest = read_manifest(run.path)
    sim = manifest.stages["simulation"]
    # A file the stage did not write (no summary here) is not listed; the order given is kept.
    assert [f.path for f in sim.files] == ["sessions/sessions.parquet", "transcripts/transcripts.jsonl"]
    assert (
        sim.files[0].bytes == len(b"sessions v1") and len(sim.files[0].sha256) == 64 and sim.counts == {"sessions": 2}
    )
    assert set(manifest.stages["judge"].reads) == {"sessions/sessions.parquet", "transcripts/transcripts.jsonl"}
    assert check_run(run.path, needs=["simulation", "judge"]).ok


def test_a_missing_file_is_named_first_with_the_command_that_remakes_it(run):
    run.sessions.parquet.unlink()
    with pytest.raises(InputError) as exc:
        verify_run(run.path, needs=["simulation"])
    assert str(exc.value).startswith(f"{run.sessions.parquet}: missing (the simulation stage wrote it); rerun")


def test_an_edit_of_the_same_size_is_caught_by_the_digest(run):
    run.sessions.parquet.write_bytes(b"sessions v2")  # same length
    problems = check_run(run.path, needs=["simulation"]).problems
    assert problems and "changed after the simulation stage wrote it (same size, other content)" in problems[0]


def test_a_file_cut_at_a_line_boundary_is_caught(run):
    run.transcripts.write_text('{"id": "a"}\n')
    assert (
        "transcripts.jsonl: changed after the simulation stage wrote it (12 bytes, 24 written)"
        in check_run(run.path, needs=["simulation"]).problems[0]
    )


def test_a_stage_made_from_files_rewritten_since_is_out_of_date(run):
    run.sessions.parquet.write_bytes(b"sessions v2, more of them")
    record_stage(run.path, "simulation", [run.sessions.parquet, run.transcripts])  # the simulation ran again
    (problem,) = check_run(run.path, needs=["simulation"], optional=["judge"]).problems
    assert problem.startswith(f"{run.sessions.parquet}: rewritten after the judge stage read it")
    assert "mindsim judge run" in problem
    # Stale judgments trouble only a reader of the judgments: one that reads the sessions alone goes on.
    assert check_run(run.path, needs=["simulation"]).ok


def test_a_stage_rerun_to_the_same_bytes_is_no_change(run):
    """Digests decide, not times: the judge stage run again (served from its cache) writes the same bytes, so
    neither it nor anything made from it is out of date; a reader that does not read a stage never looks at it."""
    run.dataset.mkdir()
    (run.dataset / "judgments.parquet").write_bytes(b"a copy of the judgments of v1")
    record_stage(run.path, "dataset", [run.dataset / "judgments.parquet"], reads=["judge"])
    run.judgments.parquet.write_bytes(b"judgments of v1")
    record_stage(run.path, "judge", [run.judgments.parquet], reads=["simulation"])
    assert check_run(run.path, needs=["dataset", "judge", "simulation"]).ok
    run.judgments.parquet.write_bytes(b"judgments of v1 and of a second judge")
    record_stage(run.path, "judge", [run.judgments.parquet], reads=["simulation"])
    (problem,) = check_run(run.path, needs=["dataset"]).problems
    assert problem.startswith(f"{run.judgments.parquet}: rewritten after the dataset stage read it")
    assert "mindsim publish" in problem and "--dry-run" in problem  # the one command that rebuilds it
    assert check_run(run.path, needs=["simulation"], optional=["judge"]).ok


def test_needs_and_whole(run):
    forget_stage(run.path, "judge")
    assert "the judge stage has not finished here" in check_run(run.path, needs=["judge"]).problems[0]
    run.judgments.parquet.unlink()
    record_stage(run.path, "judge", [run.judgments.parquet])  # recorded with no files: nothing to miss
    run.transcripts.unlink()
    # A stage reading only the sessions checks only what it needs.
    assert check_run(run.path, needs=["simulation"], whole=False).problems[0].startswith(f"{run.transcripts}: missing")
    assert check_run(run.path, needs=["judge"], whole=False).ok


def test_no_manifest_is_refused_except_by_a_stage_reading_its_inputs(tmp_path):
    (tmp_path / "sessions").mkdir()
    assert check_run(tmp_path, needs=["simulation"], whole=False).ok
    with pytest.raises(InputError, match="run_manifest.json: missing, so what the folder holds cannot be checked"):
        verify_run(tmp_path, needs=["simulation"])


def test_an_unreadable_manifest_is_one_clear_error_and_writers_start_it_over(run):
    run.manifest.write_text("{not json")
    with pytest.raises(InputError, match="run_manifest.json: not a mindsim run manifest"):
        verify_run(run.path, needs=["simulation"])
    record_stage(run.path, "simulation", [run.sessions.parquet])
    assert list(read_manifest(run.path).stages) == ["simulation"]


def test_a_run_in_progress_is_partial(run):
    run.run_json.write_text(json.dumps({"run_id": "x", "recipe_hash": "h", "status": "running"}))
    with pytest.raises(InputError, match="the run has not finished \\(status 'running'"):
        verify_run(run.path)
    check = verify_run(run.path, allow_partial=True)
    assert check.in_progress and len(check.problems) == 1
    run.run_json.write_text("[1, 2")
    assert "not readable JSON" in check_run(run.path).problems[0]


def test_verify_file_checks_a_transcript_given_by_path(run, tmp_path):
    verify_file(run.transcripts)  # intact
    outside = tmp_path / "other.jsonl"
    outside.write_text("{}\n")
    verify_file(outside)  # not in any run folder: nothing to check
    run.transcripts.write_text('{"id": "a"}\n')
    with pytest.raises(InputError, match="changed after the simulation stage of"):
        verify_file(run.transcripts)


# -- Ray addresses -----------------------------------------------------------------------------------------


def test_a_ray_address_is_checked_before_anything_runs(tmp_path):
    from mindsimkit.mindcore.recipe import Recipe, load_recipe

    base = "name: x\nengines:\n  local: {kind: embedded}\nroles:\n  default: {engine: local}\n"
    bad = tmp_path / "r.yaml"
    bad.write_text(base + "runner: ray\nray: {address: 'garbage::address'}\n")
    with pytest.raises(ConfigError, match="ray.address.*not a Ray address"):
        load_recipe(bad)
    good = tmp_path / "g.yaml"
    good.write_text(base)
    recipe = load_recipe(good)
    for ok in ("auto", "local", "10.0.0.5:6379", "ray://head.example:10001", "[::1]:6379"):
        assert recipe.with_runner(ok, env={}).ray.address == ok
    for wrong in ("head", "head:0", "head:99999", "http://head:8265", "a b:1"):
        with pytest.raises(ConfigError, match=f"--ray '{wrong}'"):
            recipe.with_runner(wrong, env={})
    with pytest.raises(ConfigError, match="RAY_ADDRESS 'nowhere'"):
        recipe.with_runner(None, env={"RAY_ADDRESS": "nowhere"})
    assert isinstance(recipe, Recipe)


def test_an_unreachable_cluster_fails_within_the_timeout_naming_the_address(monkeypatch):
    from mindsimkit.mindcore.shards import RaySession

    asked = {}

    def silent(address, timeout):  # what a dropped SYN looks like: nothing until the timeout
        asked.update(address=address, timeout=timeout)
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", silent)
    with pytest.raises(EngineError) as exc:
        RaySession("10.9.8.7:6379", connect_timeout_s=2.5).check_reachable()
    assert asked == {"address": ("10.9.8.7", 6379), "timeout": 2.5}
    assert "Ray cluster at 10.9.8.7:6379: cannot connect (nothing answered within 2.5 s)" in str(exc.value)
    assert "ray status --address 10.9.8.7:6379" in str(exc.value)


def test_a_port_that_answers_but_is_not_ray_fails_within_the_timeout():
    """A web server (or the Ray dashboard) accepts the connection but is not a Ray head: refused in one line within
    ray.connect_timeout_s, where Ray's own client kept retrying for minutes."""
    import http.server
    import threading
    import time

    from mindsimkit.mindcore.shards import RaySession

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    silent = socket.socket()  # accepts connections (the kernel does) but never says anything
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    try:
        for port in (server.server_address[1], silent.getsockname()[1]):
            started = time.monotonic()
            with pytest.raises(
                EngineError, match=f"Ray cluster at 127.0.0.1:{port}: the port answers but is not a Ray head"
            ):
                RaySession(f"127.0.0.1:{port}", connect_timeout_s=2).check_reachable()
            assert time.monotonic() - started < 6
    finally:
        server.shutdown()
        silent.close()


def test_a_ray_client_address_needs_the_client_extra():
    import importlib.util

    from mindsimkit.mindcore.shards import RaySession

    if importlib.util.find_spec("grpc") is not None:
        pytest.skip("ray[client] is installed here")
    with pytest.raises(
        ConfigError,
        match=r"ray://127.0.0.1:10001: a ray:// address goes through Ray Client.*"
        r"pip install 'ray\[client\]'",
    ):
        RaySession("ray://127.0.0.1:10001", connect_timeout_s=2).check_reachable()


def test_a_refused_connection_is_named_at_once():
    from mindsimkit.mindcore.shards import RaySession

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(EngineError, match=f"Ray cluster at 127.0.0.1:{port}: cannot connect \\(connection refused\\)"):
        RaySession(f"127.0.0.1:{port}", connect_timeout_s=5).check_reachable()
    RaySession("auto").check_reachable()  # Ray resolves `auto` itself: nothing to probe
