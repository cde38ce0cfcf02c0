"""Comparing judges (MindEval2 Appendix G "Alternative judge", Table 15; Table 6's dagger):
Kendall's tau-b between the counsellor rankings of every pair of judges, and a flag on any judge
whose model family matches a counsellor under test (possible self-preference).

Model family heuristic: the last path segment of the model name, lower-cased, cut at its first
character that is not a letter, e.g. `gpt-4.1-mini` -> `gpt`, `Qwen/Qwen3-32B` -> `qwen`,
`claude-sonnet-4` -> `claude`, `SmolLM2-135M-Instruct` -> `smollm`. It is a name heuristic: it
misses families renamed across versions and splits vendor-prefixed names (`meta-llama-3` -> `meta`
vs `llama-3` -> `llama`); read the flag as a prompt to check, not a verdict.
"""

from __future__ import annotations

import math
import re
from itertools import combinations
from typing import Any


def model_family(model: str | None) -> str | None:
    if not model:
        return None
    base = model.rstrip("/").rsplit("/", 1)[-1].lower()
    m = re.match(r"[a-z]+", base)
    return m.group(0) if m else base


def judge_agreement(scores_by_judge: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Kendall's tau-b (scipy, tie-corrected) between every two judges' counsellor MHQR, over the
    counsellors both judged (the units `judge.scores` ranks: `counsellor/engine` in a run of several
    patient engines, so a counsellor's two engines are two ranked units, never an average). Undefined (fewer than two counsellors, or a constant ranking) is null
    with the reason."""
    from scipy.stats import kendalltau  # ~1.5 s to import: only when judges are compared

    out = []
    for a, b in combinations(sorted(scores_by_judge), 2):
        ca, cb = scores_by_judge[a]["counsellors"], scores_by_judge[b]["counsellors"]
        common = sorted(set(ca) & set(cb))
        entry: dict[str, Any] = {"a": a, "b": b, "counsellors": len(common), "tau_b": None, "p_value": None}
        if len(common) < 2:
            entry["note"] = "fewer than two counsellors judged by both"
        else:
            res = kendalltau([ca[n]["mhqr"] for n in common], [cb[n]["mhqr"] for n in common])
            if math.isnan(res.statistic):
                entry["note"] = "undefined: one judge scores every counsellor the same"
            else:
                entry["tau_b"], entry["p_value"] = float(res.statistic), float(res.pvalue)
        out.append(entry)
    return out


def family_flags(judge_models: dict[str, str], counsellor_models: dict[str, str | None]) -> list[dict[str, Any]]:
    """(judge, counsellor) pairs whose models share a family."""
    flags = []
    for judge, jm in sorted(judge_models.items()):
        jf = model_family(jm)
        for counsellor, cm in sorted(counsellor_models.items()):
            if jf and model_family(cm) == jf:
                flags.append(
                    {"judge": judge, "judge_model": jm, "counsellor": counsellor, "counsellor_model": cm, "family": jf}
                )
    return flags
