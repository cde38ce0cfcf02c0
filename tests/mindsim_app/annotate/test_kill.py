"""`kill -9` the server while raters answer: after a restart every acknowledged answer is there, once."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import threading

import requests

from annotfakes import write_run
from mindsimkit.mindsim_app.annotate.samplers import sample_realism
from mindsimkit.mindsim_app.annotate.tasks import Design
from serving import Rater, free_port, start, tokens


def test_kill_9_loses_nothing_acknowledged(tmp_path):
    run = write_run(tmp_path / "run", turns=10)
    s = sample_realism(tmp_path / "t", Design(raters=["R1", "R2"], k=2, all_raters=0), n=10, runs=[str(run)], seed=2)
    task = tmp_path / "t"
    port = free_port()
    proc = start([task], port, tmp_path / "log1")
    base = f"http://127.0.0.1:{port}"
    acked: dict[tuple[str, str, str], dict] = {}
    sent: dict[tuple[str, str, str], list[dict]] = {}  # every answer sent per unit, in order
    lock = threading.Lock()
    stop = threading.Event()

    def rater(name: str) -> None:
        c = Rater(base, tokens(task)[name])
        rng = random.Random(name)
        units = [
            (it["item_id"], u["unit"])
            for pos in range(c.session()["items"])
            for it in [c.item(pos)]
            for u in it["units"]
        ]
        k = 0
        while not stop.is_set():
            iid, unit = units[k % len(units)]  # round and round: later answers revise earlier ones
            ans = {"reasons": ["form_none", "content_none"], "rating": rng.randint(1, 5), "comment": f"try {k}"}
            with lock:
                sent.setdefault((name, iid, unit), []).append(ans)
            try:
                r = c.answer(iid, unit, ans)
            except requests.RequestException:
                return  # the server is gone; this answer was never acknowledged
            if r.status_code == 200:
                with lock:
                    acked[(name, iid, unit)] = ans
            k += 1

    threads = [threading.Thread(target=rater, args=(r,)) for r in ("R1", "R2")]
    for t in threads:
        t.start()
    while True:
        with lock:
            if len(acked) >= 25:
                break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    stop.set()
    for t in threads:
        t.join(10)
    assert len(acked) >= 25

    proc = start([task], port, tmp_path / "log2")
    try:
        for name in ("R1", "R2"):
            c = Rater(base, tokens(task)[name])
            stored = {}
            for pos in range(c.session()["items"]):
                it = c.item(pos)
                for unit, a in it["answers"].items():
                    stored[(name, it["item_id"], unit)] = a
            for k, v in acked.items():
                if k[0] != name:
                    continue
                # The last acknowledged answer is stored, unless one sent after it (never acknowledged, in
                # flight at the kill) landed on top of it.
                later = sent[k][sent[k].index(v) :]
                assert stored[k] in later, (k, stored[k], v)
        db = sqlite3.connect(task / "answers.sqlite")
        rows = db.execute("SELECT rater, item_id, unit, COUNT(*) FROM answers GROUP BY rater, item_id, unit").fetchall()
        assert all(n == 1 for *_, n in rows)  # once
        assert {(r, i, u) for r, i, u, _ in rows} >= set(acked)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    assert s["units"] > 0
