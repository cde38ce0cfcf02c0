"""Atomic and exactly-once checkpoint writes: the first finished copy of a key wins, a late duplicate
is dropped and counted, and a writer killed mid-write never leaves something that reads as done."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import time

import pytest

from mindsimkit.mindcore.io import CheckpointDir, atomic_write_json, atomic_writer, publish_bytes_once

# Big enough that the two writes overlap in time instead of one finishing before the other starts.
PAYLOAD_CHARS = 2_000_000


def _race_writer(folder: str, key: str, tag: str, barrier, results) -> None:
    ckpt = CheckpointDir(folder)
    barrier.wait()
    won = ckpt.write_once(key, {"writer": tag, "blob": tag * PAYLOAD_CHARS})
    results.put((tag, won, ckpt.duplicates))


def test_two_processes_racing_one_key_exactly_one_wins(tmp_path):
    ctx = mp.get_context("fork")
    for round_no in range(3):
        key = f"session-{round_no}"
        barrier, results = ctx.Barrier(2), ctx.Queue()
        procs = [
            ctx.Process(target=_race_writer, args=(str(tmp_path), key, tag, barrier, results)) for tag in ("a", "b")
        ]
        for p in procs:
            p.start()
        outcomes = [results.get(timeout=30) for _ in procs]
        for p in procs:
            p.join(timeout=30)
            assert p.exitcode == 0
        winners = [tag for tag, won, _ in outcomes if won]
        assert len(winners) == 1, outcomes
        loser = next(o for o in outcomes if not o[1])
        assert loser[2] == 1  # the discarded copy is counted by the process that wrote it
        assert next(o for o in outcomes if o[1])[2] == 0
        stored = CheckpointDir(tmp_path).read(key)
        # The file holds the winner's bytes whole, not a mix and not a truncated copy.
        assert stored["writer"] == winners[0] and stored["blob"] == winners[0] * PAYLOAD_CHARS
    assert CheckpointDir(tmp_path).keys() == ["session-0", "session-1", "session-2"]
    assert not list(tmp_path.glob(".*.tmp"))


def test_late_duplicate_in_one_process_is_discarded_and_counted(tmp_path):
    ckpt = CheckpointDir(tmp_path)
    assert ckpt.write_once("k", {"v": 1}) is True
    assert ckpt.write_once("k", {"v": 2}) is False
    assert ckpt.write_once("k", {"v": 3}) is False
    assert ckpt.read("k") == {"v": 1} and ckpt.duplicates == 2
    # The explicit replace-write still replaces; the historical `write` is the same thing.
    ckpt.overwrite("k", {"v": 4})
    assert ckpt.read("k") == {"v": 4}
    ckpt.write("k", {"v": 5})
    assert ckpt.read("k") == {"v": 5} and ckpt.duplicates == 2


def test_first_copy_hands_the_loser_the_winners_copy(tmp_path):
    ckpt = CheckpointDir(tmp_path)
    assert ckpt.first_copy("scenario", {"text": "original"}) == ({"text": "original"}, True)
    assert ckpt.first_copy("scenario", {"text": "retry"}) == ({"text": "original"}, False)
    assert ckpt.duplicates == 1


def test_write_once_formats_like_atomic_write_json(tmp_path):
    obj = {"b": [1, 2], "a": "é"}
    atomic_write_json(tmp_path / "x.json", obj)
    assert publish_bytes_once(tmp_path / "y.json", (tmp_path / "x.json").read_bytes())
    CheckpointDir(tmp_path / "c").write_once("z", obj)
    assert (tmp_path / "c" / "z.json").read_bytes() == (tmp_path / "x.json").read_bytes()


def _killed_writer(folder: str, ready) -> None:
    # Stop between writing the temp file and publishing it, as a SIGKILL at the worst moment would.
    def hang(*_a, **_k):
        ready.set()
        time.sleep(60)

    os.link = hang
    CheckpointDir(folder).write_once("arc-1", {"half": "done"})


def test_stale_temp_from_killed_writer_is_never_read_as_a_checkpoint(tmp_path):
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    proc = ctx.Process(target=_killed_writer, args=(str(tmp_path), ready))
    proc.start()
    assert ready.wait(timeout=30)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(timeout=30)
    temps = list(tmp_path.glob(".*.tmp"))
    assert len(temps) == 1 and json.loads(temps[0].read_text()) == {"half": "done"}
    ckpt = CheckpointDir(tmp_path)
    assert not ckpt.has("arc-1") and ckpt.keys() == [] and ckpt.read_all() == []
    # The rerun's copy is the one that counts; the leftover does not block or replace it.
    assert ckpt.write_once("arc-1", {"rerun": True}) is True
    assert ckpt.read_all() == [{"rerun": True}] and ckpt.duplicates == 0
    assert ckpt.clean_temps(older_than_s=3600) == 0  # too young: might belong to a live writer
    old = time.time() - 7200
    os.utime(temps[0], (old, old))
    assert ckpt.clean_temps(older_than_s=3600) == 1 and not list(tmp_path.glob(".*.tmp"))


def test_existing_foreign_file_is_kept(tmp_path):
    target = tmp_path / "k.json"
    target.write_text('{"first": true}\n')
    assert publish_bytes_once(target, b'{"second": true}\n') is False
    assert json.loads(target.read_text()) == {"first": True}


def test_streamed_output_appears_whole_or_not_at_all(tmp_path):
    """`atomic_writer` (streamed parquet and JSONL): the old file stays until the block finishes, a failed
    block leaves the old file and no temp file, and the new file gets the usual permissions."""
    path = tmp_path / "sub" / "out.jsonl"
    with atomic_writer(path, "w") as f:
        f.write("first\n")
        assert not path.exists()
    assert path.read_text(encoding="utf-8") == "first\n"
    with pytest.raises(RuntimeError):
        with atomic_writer(path, "w") as f:
            f.write("second, half")
            raise RuntimeError("killed mid-stream")
    assert path.read_text(encoding="utf-8") == "first\n" and sorted(p.name for p in path.parent.iterdir()) == [
        "out.jsonl"
    ]
    with atomic_writer(path, "wb") as f:
        f.write("ünïcode".encode("utf-8"))
    mask = os.umask(0)
    os.umask(mask)
    assert path.read_bytes() == "ünïcode".encode("utf-8") and path.stat().st_mode & 0o777 == 0o666 & ~mask


# -- checkpoint writes off the event loop ------------------------------------------------------------
_WRITER_CHILD = r"""
import asyncio, sys, threading
from mindsimkit.mindcore.io import CheckpointDir, off_loop

async def main(folder):
    d = CheckpointDir(folder)
    async def one(i):
        won = await off_loop(d.write_once, f"k{i:04d}", {"i": i, "pad": "x" * 5000})
        print(f"saved k{i:04d} {won}", flush=True)
    await asyncio.gather(*(one(i) for i in range(3000)))

asyncio.run(main(sys.argv[1]))
"""


def test_off_loop_writes_in_writer_threads_and_one_racing_copy_wins(tmp_path):
    import asyncio
    import threading

    from mindsimkit.mindcore.io import off_loop

    d = CheckpointDir(tmp_path)
    seen: list[str] = []

    def write(key, obj):
        seen.append(threading.current_thread().name)
        return d.first_copy(key, obj)

    async def main():
        loop_thread = threading.current_thread().name
        got = await asyncio.gather(*(off_loop(write, "k", {"copy": i}) for i in range(8)))
        return loop_thread, got

    loop_thread, got = asyncio.run(main())
    assert all(name.startswith("checkpoint-writer") and name != loop_thread for name in seen)
    stored = d.read("k")
    assert sum(won for _, won in got) == 1 and all(obj == stored for obj, _ in got) and d.duplicates == 7


def test_checkpoints_written_off_the_loop_are_whole_and_all_there_after_a_kill(tmp_path):
    """SIGKILL a process while many writes are in the writer threads: every key it was told was saved is
    there, every file under a final name is whole JSON, and a rerun of the same keys adds no second copy."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER_CHILD, str(tmp_path)], stdout=subprocess.PIPE, env=env, text=True
    )
    saved = []
    for line in proc.stdout:
        saved.append(line.split()[1])
        if len(saved) >= 200:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    d = CheckpointDir(tmp_path)
    keys = d.keys()
    assert set(saved) <= set(keys)
    for k in keys:
        assert d.read(k)["i"] == int(k[1:])  # whole: a partial file never gets a final name
    assert not [k for k in keys if not (tmp_path / f"{k}.json").stat().st_size > 5000]
    assert all(d.write_once(k, {"i": -1}) is False for k in keys) and d.duplicates == len(keys)


# -- names from input files ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name, problem",
    [
        ("", "is empty"),
        ("  ", "is empty"),
        (".", "path step"),
        ("..", "path step"),
        ("a/b", "path separator"),
        ("../x", "path separator"),
        ("/etc/x", "path separator"),
        ("a\\b", "path separator"),
        ("a\nb", "control"),
        ("a\x00b", "control"),
        ("a\tb", "control"),
        ("\u00e9" * 101, "202 bytes"),
        (7, "is not text"),
    ],
    ids=[
        "empty",
        "blank",
        "dot",
        "dotdot",
        "slash",
        "dotdot-slash",
        "absolute",
        "backslash",
        "newline",
        "nul",
        "tab",
        "long-utf8",
        "number",
    ],
)
def test_a_name_from_an_input_file_that_is_not_one_file_name_is_one_input_error(name, problem):
    from mindsimkit.mindcore.errors import InputError
    from mindsimkit.mindcore.io import file_name

    with pytest.raises(InputError, match=problem) as caught:
        file_name(name, "unit_id", "ratings.jsonl:4")
    line = str(caught.value)
    assert line.startswith("ratings.jsonl:4: field 'unit_id': ") and "\n" not in line


def test_confined_paths_stay_directly_inside_their_folder(tmp_path):
    from mindsimkit.mindcore.errors import InputError
    from mindsimkit.mindcore.io import confined_path, file_name

    assert file_name("m9001.v2 \u00e9", "member_id", "x") == "m9001.v2 \u00e9"
    assert confined_path(tmp_path, "m1", field="member_id", where="x", suffix=".md") == tmp_path / "m1.md"
    with pytest.raises(InputError, match="path separator"):
        confined_path(tmp_path, "../m1", field="member_id", where="x")


def test_a_checkpoint_key_longer_than_a_file_name_is_still_written_and_found(tmp_path):
    from mindsimkit.mindcore.io import CheckpointDir

    cache = CheckpointDir(tmp_path)
    long_a, long_b = "p" * 400 + "a", "p" * 400 + "b"
    cache.write(long_a, {"v": 1})
    cache.write(long_b, {"v": 2})
    assert cache.has(long_a) and cache.has(long_b) and len(list(tmp_path.glob("*.json"))) == 2
    assert all(len(p.name.encode()) <= 255 for p in tmp_path.iterdir())
