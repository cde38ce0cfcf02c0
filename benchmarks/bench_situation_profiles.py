"""How long one situation-seeded PatientAct profile takes on the embedded engine: each situation of an imported
folder (default: the test situations, tests/data/patientact_situations, imported into a temporary folder) goes
through the whole generation chain (profilegen.situation_chain: problem formulation, conflict rules,
demographics, psychological formulation, validation and its revisions) one after another, and the script prints
per situation the wall seconds, the calls made, the generations and whether validation passed, then the median.

    python benchmarks/bench_situation_profiles.py [--folder IMPORTED] [--situations 3] [--writer-tokens 4000]
        [--demographics-rounds N] [--validation-rounds N]

The rounds default to the authors' (5 and 3, profilegen/data/situation_profile.yaml): a small model rarely passes
validation, so its figure is close to the worst case. The machine's load (os.getloadavg) is printed beside the
figure: on 2 shared cores it moves the time more than the toolkit does. `--smoke` runs one situation against the
instant stub server, to check the script still runs (its numbers mean nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from pathlib import Path

from instant_server import InstantServer
from smoke import parse_args

from mindsimkit.mindcore.config import EmbeddedEngine, EnginesConfig, OpenAIEngine, RoleSpec
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindcore.errors import EngineError
from mindsimkit.profilegen.config import ProfilesConfig
from mindsimkit.profilegen.situation_chain import generate_situation_profile
from mindsimkit.profilegen.situation_stage import plan

REPO = Path(__file__).resolve().parent.parent
TEST_DATA = REPO / "tests" / "data" / "patientact_situations"


def import_test_situations(out: Path) -> Path:
    """The test situations imported as `mindsim import patientact-situations` imports them."""
    from mindsimkit.mindsim_app.imports.cli import patientact_cmd

    patientact_cmd(
        TEST_DATA / "patientAct.json",
        TEST_DATA / "disease_outlines.json",
        TEST_DATA / "attribute_priors.json",
        TEST_DATA / "disease_priors.json",
        out,
    )
    return out


def engines_config(stub_url: str | None, tokens: int) -> EnginesConfig:
    engine = (
        OpenAIEngine(base_url=stub_url, model="instant", native_tools=False)
        if stub_url
        else EmbeddedEngine(parallel=1, ctx_per_slot=8192)
    )
    return EnginesConfig(
        engines={"local": engine},
        roles={"default": RoleSpec(engine="local", temperature=0.3, max_tokens=tokens, seed=0, max_attempts=2)},
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--folder", type=Path, default=None, help="an imported folder (default: the test situations)")
    ap.add_argument("--situations", type=int, default=3)
    ap.add_argument("--writer-tokens", type=int, default=4000)
    ap.add_argument("--demographics-rounds", type=int, default=None)
    ap.add_argument("--validation-rounds", type=int, default=None)
    args = parse_args(ap, situations=1)
    with contextlib.ExitStack() as stack:
        folder = args.folder or import_test_situations(Path(stack.enter_context(tempfile.TemporaryDirectory())) / "in")
        cfg = ProfilesConfig(
            source="patientact-situations",
            situations=folder,
            demographics_rounds=args.demographics_rounds,
            validation_rounds=args.validation_rounds,
        )
        p = plan(cfg, 0)
        stub = stack.enter_context(InstantServer()).base_url if args.smoke else None
        engines = stack.enter_context(Engines.from_config(engines_config(stub, args.writer_tokens)))
        writer, validator = engines.role("profile_writer"), engines.role("screener")
        print(
            f"{len(p.inputs)} situations in {folder}; rounds: demographics {p.demographics_rounds}, validation "
            f"{p.validation_rounds}; running {min(args.situations, len(p.inputs))}",
            flush=True,
        )
        times = []
        for inp, scaffold in p.inputs[: args.situations]:
            before = engines.ledger.totals()
            t0 = time.perf_counter()
            try:
                rec = engines.run(
                    generate_situation_profile(
                        writer,
                        validator,
                        inp,
                        scaffold,
                        demographics_rounds=p.demographics_rounds,
                        validation_rounds=p.validation_rounds,
                    )
                )
                what = (
                    f"{rec.stats.generations} generation(s), {rec.stats.demographics_rounds} demographics "
                    f"round(s), validation {'passed' if rec.passed else 'failed'}"
                )
            except EngineError as exc:
                what = f"failed: {type(exc).__name__}: {str(exc)[:120]}"
            secs = time.perf_counter() - t0
            times.append(secs)
            after = engines.ledger.totals()
            calls = after.get("calls", 0) - before.get("calls", 0)
            tokens = after.get("completion_tokens", 0) - before.get("completion_tokens", 0)
            print(f"  {inp.situation_id}: {secs:.1f} s, {calls} calls, {tokens} tokens written, {what}", flush=True)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"\nprofile generation per situation: median {statistics.median(times):.1f} s over {len(times)} "
        f"(min {min(times):.1f}, max {max(times):.1f}); load average {load} on {os.cpu_count()} cores"
    )


if __name__ == "__main__":
    main()
