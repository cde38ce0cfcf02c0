"""Recall and precision of PatientAct's two tag matchers (`simulation.patientact.retrieval: lexical | llm`) on
the shared held-out set `mindsim/data/patientact/retrieval_heldout.yaml` (104 paraphrased counsellor
messages, two patients; provenance in the file).

    python benchmarks/bench_retrieval.py                      # lexical only (instant)
    python benchmarks/bench_retrieval.py --llm [--limit 10]   # + the LLM matcher on the embedded SmolLM2-135M

The LLM figure here can only come from the 135M embedded model (no other model runs offline): it measures the
plumbing and a floor, not what a real model's matcher achieves; `--limit` takes the first N cases of each
patient (slow on 2 shared cores). Record the numbers in docs/patientact.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from mindsimkit.mindcore.config import EmbeddedEngine, EnginesConfig, RoleSpec
from mindsimkit.mindcore.engine import Engines
from mindsimkit.mindsim.patientact.matcher import MATCHER_ROLE, TagMatch
from mindsimkit.mindsim.patientact.recall import lexical_matcher, llm_matcher, load_heldout, measure_heldout
from smoke import parse_args


def _short(result: dict) -> dict:
    return {k: v for k, v in result.items() if k != "mismatches"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llm", action="store_true", help="also run the LLM matcher on the embedded 135M model")
    ap.add_argument("--limit", type=int, default=None, help="first N cases of each patient")
    ap.add_argument("--mismatches", action="store_true")
    args = parse_args(ap, limit=2, llm=False)
    heldout = load_heldout()
    out = {"set": {"source": heldout.source, "cases": heldout.size, "limit_per_patient": args.limit}}
    lex = asyncio.run(measure_heldout(lexical_matcher(), heldout, args.limit))
    out["lexical"] = lex if args.mismatches else _short(lex)
    if args.llm:
        from mindsimkit.mindcore.budget import worst_case_tokens

        budget = worst_case_tokens(TagMatch.model_json_schema()).tokens
        cfg = EnginesConfig(
            engines={"local": EmbeddedEngine(parallel=2, ctx_per_slot=4096)},
            roles={"default": RoleSpec(engine="local", temperature=0.0, max_tokens=budget, seed=0)},
        )
        with Engines.from_config(cfg) as engines:
            t0 = time.monotonic()
            res = engines.run(
                measure_heldout(llm_matcher(engines.role(MATCHER_ROLE), max_tokens=budget), heldout, args.limit)
            )
            res["wall_s"] = round(time.monotonic() - t0, 1)
        out["llm_135m"] = res if args.mismatches else _short(res)
        out["llm_135m"]["caveat"] = "SmolLM2-135M: a floor for the plumbing, not a real model's matcher"
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
