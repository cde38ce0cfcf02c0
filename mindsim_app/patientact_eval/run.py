"""`mindsim patientact profile-eval RUN_DIR`: PatientAct's profile evaluation (PatientAct §4.1, Table 1) for
the profiles a run simulated with the PatientAct engine. Each profile that has a decomposition under
`sessions/decompositions/` is judged once on the four profile dimensions and the identification task
(`rubric.judge_profile`), one more call rates the diversity of the whole set, and the table is
built by `judge.patientact_profiles.profile_report` together with the human ratings the annotation tool
exports (`--human patientact_profile_human.jsonl`, `--diversity patientact_diversity.jsonl`). Writes
`OUT/patientact_profile_eval/`: `judgments.jsonl`, `diversity.json`, `report.json`, `report.md`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from mindsimkit.judge.patientact import Judgment, ask, rubrics
from mindsimkit.judge.patientact_profiles import (
    load_diversity,
    load_profile_human,
    profile_report,
    profile_report_md,
)
from mindsimkit.mindcore.errors import EngineError, InputError
from mindsimkit.mindcore.io import atomic_write_json, atomic_write_jsonl, atomic_write_text
from mindsimkit.mindcore.prompts import render, template_hash
from mindsimkit.mindsim.patientact.data import attachment_prior
from mindsimkit.mindsim.patientact.decompose import Decomposition
from mindsimkit.mindsim_app.patientact_eval.rubric import judge_profile, profile_view

OUT_DIR = "patientact_profile_eval"
DIVERSITY_TEMPLATE = "judge/patientact_diversity.jinja2"
# The diversity call sees every profile at once: each is cut to this many characters (ours) so that a set
# of 40 stays within one request.
DIVERSITY_CHARS = 1200


def diversity_model() -> type[BaseModel]:
    return create_model(
        "PatientActDiversity",
        __config__=ConfigDict(extra="forbid"),
        reason=(str, Field(max_length=400, description="One or two sentences")),
        rating=(Literal[1, 2, 3, 4, 5], Field(description="Diversity, 1-5")),
    )


def load_run(run_dir: Path) -> list[tuple[Any, Decomposition]]:
    """(profile, decomposition) for every profile of the run that PatientAct decomposed."""
    from mindsimkit.profilegen.dataset import load_profiles

    folder = Path(run_dir) / "sessions" / "decompositions"
    if not folder.is_dir():
        raise InputError(
            f"{folder}: no decompositions; profile-eval reads a run simulated with the patientact "
            "engine (simulation.patient_engine: patientact)"
        )
    profiles = {p.profile_id: p for p in load_profiles(Path(run_dir) / "profiles", pool_only=False)}
    out = []
    for path in sorted(folder.glob("*.json")):
        d = Decomposition.model_validate(json.loads(path.read_text(encoding="utf-8")))
        if d.patient_id not in profiles:
            raise InputError(f"{path}: patient {d.patient_id} is not in {run_dir}/profiles")
        out.append((profiles[d.patient_id], d))
    if not out:
        raise InputError(f"{folder}: no decomposition files")
    return out


async def judge_diversity(
    client: Any, pairs: list[tuple[Any, Decomposition]], max_tokens: int | None = None
) -> dict[str, Any]:
    div = rubrics().diversity
    content = render(
        DIVERSITY_TEMPLATE,
        question=div.question,
        anchors=div.anchors,
        profiles=[(p.profile_id, profile_view(p, d.formulation)[:DIVERSITY_CHARS]) for p, d in pairs],
    )
    answer, error, kind = await ask(
        client, content, diversity_model(), schema_name="patientact_diversity", max_tokens=max_tokens
    )
    base = {
        "profiles": len(pairs),
        "judge": client.describe(),
        "prompt": {DIVERSITY_TEMPLATE: template_hash(DIVERSITY_TEMPLATE)},
    }
    if answer is None:
        return {**base, "rating": None, "error": error, "error_kind": kind}
    return {**base, "rating": answer["rating"], "reason": answer["reason"]}


async def _judge_all(
    client: Any, pairs: list[tuple[Any, Decomposition]], max_tokens: int | None
) -> tuple[list[Any], dict[str, Any]]:
    import asyncio

    rows = await asyncio.gather(*(judge_profile(client, p, d, max_tokens=max_tokens) for p, d in pairs))
    return list(rows), await judge_diversity(client, pairs, max_tokens)


def profile_eval(
    run_dir: Path,
    engines: Any,
    *,
    out: Path | None = None,
    judge: str = "judge",
    human: Path | None = None,
    diversity: Path | None = None,
    max_tokens: int | None = None,
    seed_priors: dict[str, dict[str, float]] | None = None,
) -> dict[str, Any]:
    """`seed_priors`: the attachment and theme distributions the seeds were drawn from (keys `attachment`,
    `theme`); by default attachment's is the persona path's prior and the theme has none."""
    pairs = load_run(run_dir)
    priors = seed_priors or {"attachment": attachment_prior().weights}
    human_rows = load_profile_human(human) if human else []
    diversity_rows = load_diversity(diversity) if diversity else []
    rows, div = engines.run(_judge_all(engines.role(judge), pairs, max_tokens))
    folder = Path(out or run_dir) / OUT_DIR
    atomic_write_jsonl(folder / "judgments.jsonl", [r.model_dump(mode="json") for r in rows])
    atomic_write_json(folder / "diversity.json", div)
    report = profile_report(
        rows, human_rows, diversity_rows, div, priors.get("attachment"), theme_prior=priors.get("theme")
    )
    atomic_write_json(folder / "report.json", report)
    atomic_write_text(folder / "report.md", profile_report_md(report))
    if rows and not any(r.ok for r in rows):
        raise EngineError(
            f"every profile judgment failed (first: {rows[0].error}); rows and report written to {folder}"
        )
    return {
        "profiles": len(rows),
        "ok": sum(r.ok for r in rows),
        "report": report,
        "outputs": {n: folder / n for n in ("judgments.jsonl", "diversity.json", "report.json", "report.md")},
    }


__all__ = ["Judgment", "diversity_model", "judge_diversity", "load_run", "profile_eval"]
