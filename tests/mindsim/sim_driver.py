"""Driver for the kill-and-resume test: runs a small simulation on a slowed fake engine in its own process
so the test can SIGKILL it mid-run. Usage: python sim_driver.py OUT_DIR"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mindsimkit.mindcore.engine import Engines  # noqa: E402
from mindsimkit.mindcore.fake import FakeBackend  # noqa: E402
from mindsimkit.mindsim.config import SimulationConfig  # noqa: E402
from mindsimkit.mindsim.simulate import run_simulation  # noqa: E402
from simfakes import SimResponder, make_profile  # noqa: E402

PATIENTS = ["k1", "k2", "k3", "k4"]
SESSIONS = 3


class Slow(FakeBackend):
    async def complete(self, request):
        await asyncio.sleep(0.03)
        return await super().complete(request)


def main(out: str) -> None:
    profiles = [make_profile(p, a) for p, a in zip(PATIENTS, ["minimiser", "joker", "stoic", "venter"])]
    config = SimulationConfig(sessions=SESSIONS, turn_cap=6)
    with Engines.with_backend(Slow(SimResponder(end_after=99))) as engines:
        run_simulation(profiles, engines, config, out, seed=9)


if __name__ == "__main__":
    main(sys.argv[1])
