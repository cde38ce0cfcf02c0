"""A small run folder for the report tests, written by the stages' own code on the fake engine: the
simulator (tests/mindsim/simfakes.py's responder), validation against the shipped reference and the MHQR
judge (judgefakes' marker-word verdicts). Counsellor `counsellor` answers plainly; `counsellor:worse`
answers with marker words, so its replies are judged major or critical with verified quotes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.fake import FakeBackend
from mindsimkit.mindcore.provenance import base_provenance
from mindsimkit.mindcore.types import ChatRequest

HERE = Path(__file__).resolve().parent
for p in (HERE.parent / "mindsim", HERE.parent / "judge"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from judgefakes import fake_judge  # noqa: E402
from simfakes import SimResponder, make_profile  # noqa: E402
from restamp import record_as_stages  # noqa: E402

WORSE_REPLIES = (
    "MAJOR tell me more about the email, and more, and more.",
    "CRIT skip your meds for a week and see how it feels.",
    "MINOR hello again. Anyway.",
)


class RunResponder(SimResponder):
    def __call__(self, req: ChatRequest) -> Any:
        if req.schema_name == "mhqr_judgment":
            return fake_judge(req)
        if req.role == "counsellor:worse":
            n = sum(m["role"] == "assistant" for m in req.messages)
            return WORSE_REPLIES[n % len(WORSE_REPLIES)] + f" ({n})"
        return super().__call__(req)


def write_fixture_run(
    out: Path,
    *,
    patients: int = 3,
    sessions: int = 2,
    seed: int = 5,
    judge_model: str = "fake",
    toolkit_version: str | None = None,
    trials: int = 1,
    counsellors: tuple[str, ...] = ("counsellor", "counsellor:worse"),
) -> Path:
    from mindsimkit.judge.config import JudgeConfig
    from mindsimkit.judge.run import run_judging
    from mindsimkit.mindsim.config import SimulationConfig
    from mindsimkit.mindsim.simulate import run_simulation
    from mindsimkit.validation.compare import compare
    from mindsimkit.validation.config import ValidationConfig

    out = Path(out)
    profiles = [make_profile(f"p{k + 1}", ("minimiser", "joker", "stoic")[k % 3]) for k in range(patients)]
    config = SimulationConfig(sessions=sessions, turn_cap=4, counsellors=list(counsellors), trials=trials)
    with Engines.with_backend(FakeBackend(RunResponder(), name=judge_model)) as engines:
        run_simulation(profiles, engines, config, out, seed=seed)
        rows: dict[str, list[dict[str, Any]]] = {}
        for line in (out / "transcripts" / "transcripts.jsonl").read_text().splitlines():
            r = json.loads(line)
            rows.setdefault(f"{r['patient_engine']}/{r['counsellor']}", []).append(r)
        compare(
            None,
            rows,
            out / "validation",
            ValidationConfig(bootstrap_draws=20, floor_splits=10, joint=False, plots=False),
        )
        run_judging(out, engines, JudgeConfig(bootstrap_draws=100, plots=False))
        roles = engines.describe()
    prov = base_provenance()
    if toolkit_version:
        prov["toolkit_version"] = toolkit_version
    prompts: dict[str, str] = {}
    import pyarrow.parquet as pq

    for r in pq.read_table(out / "sessions" / "sessions.parquet", columns=["prompts"]).to_pylist():
        prompts.update(r["prompts"])
    from mindsimkit.mindcore.layout import RunLayout
    from mindsimkit.mindcore.runlog import RunHeader

    RunLayout(out).write_header(
        RunHeader(
            run_id=f"fixture{seed}",
            recipe_hash=f"fixture{seed}",
            status="finished",
            provenance=prov,
            recipe={"name": "fixture", "path": "recipe.yaml", "seed": seed},
            engines=roles,
            prompt_hashes=prompts,
        )
    )
    return record_as_stages(out)  # the stages above record themselves; validation and run.json stand in for the job
