"""The versions block of the HTML report and the rule for comparing runs.

Two runs compare on one page only when what measures them is the same; what they are meant to differ in
(counsellors, seeds, patients) may differ. `KEYS` defines "the same", each read from the run folder:

- `toolkit`: the toolkit version (`run.json` provenance; the git revision is shown, not compared);
- `rubric`: the MHQR rubric version of each judge (`judgments/report.json`), when both runs are judged, and the
  judge's output-format preset (`judge.preset`; reports from before presets used `ours`);
- `judge model`: the model behind each judge role both runs have;
- `templates`: the hash of every prompt template both runs record (`run.json` prompt_hashes) — a template
  only one run used (e.g. a second patient engine's) is not a difference;
- `patient model`: model of each patient-side role (patient, scenario_writer, memory_compactor, and
  PatientAct's appraiser and decomposer) both runs bind;
- `reference`: the reference statistics' source hash and markers version (`validation/report.json`).

A run that lacks a stage (no judge) is not compared on that stage's keys.
"""

from __future__ import annotations

from typing import Any

from mindsimkit.mindcore.runlog import JudgeReport, played_by

PATIENT_ROLES = ("patient", "scenario_writer", "memory_compactor", "patient_appraiser", "profile_decomposer")
KEYS = ("toolkit", "rubric", "judge model", "templates", "patient model", "reference")


def _role_model(info: Any, role: str) -> str | None:
    e = (info.engines if info else {}).get(role)
    return f"{e.get('model')} on {e.get('engine')}" if e else None


def versions(run: Any) -> dict[str, Any]:
    info = run.info
    recipe = info.recipe if info else None
    summary = run.summary
    # A folder of `mindsim simulate` has no run header: its simulation summary carries the provenance.
    prov = (info.provenance if info else None) or (summary.model_dump() if summary else {})
    jr = run.judge_report or JudgeReport()
    ref = run.validation.reference if run.validation else {}
    judges = {
        n: {"model": j.model, "engine": j.engine, "rubric": j.rubric_version, "role": j.role}
        for n, j in jr.judges.items()
    }
    return {
        "toolkit": prov.get("toolkit_version"),
        "git_revision": prov.get("git_revision"),
        "git_dirty": prov.get("git_dirty"),
        "rubric": jr.rubric.get("version"),
        "rubric_source": jr.rubric.get("source"),
        "judges": judges,
        # The judge's output-format preset; reports from before presets used ours.
        "judge_preset": (jr.preset.get("name") or "ours") if jr.judges else None,
        "templates": {**(info.prompt_hashes if info else {}), **jr.prompt_hashes},
        "roles": (info.engines if info else None) or (summary.engines if summary else {}),
        "patient_engines": (summary.patient_engines if summary else [])
        or sorted({played_by(s.patient_engine) for s in run.sessions}),
        "reference": {
            "name": ref.get("name"),
            "source_sha256": (ref.get("provenance") or {}).get("source_sha256"),
            "markers_version": (ref.get("settings") or {}).get("markers_version"),
        }
        if ref
        else None,
        # The patient engines' presets (the judge's is on the rubric row); runs from before presets ran under 'ours'.
        "presets": {e: p for e, p in (info.presets if info else {}).items() if e != "judge"},
        "recipe": recipe.name if recipe else None,
        "run_id": info.run_id if info else None,
        "seed": recipe.seed if recipe else None,
    }


def differences(a: Any, b: Any) -> list[str]:
    """One line per key on which runs `a` and `b` differ (empty: they compare)."""
    va, vb = versions(a), versions(b)
    out = []
    if va["toolkit"] != vb["toolkit"]:
        out.append(f"toolkit {va['toolkit']} vs {vb['toolkit']}")
    for n in sorted(set(va["judges"]) & set(vb["judges"])):
        ja, jb = va["judges"][n], vb["judges"][n]
        if ja["rubric"] != jb["rubric"]:
            out.append(f"rubric of {n}: {ja['rubric']} vs {jb['rubric']}")
        if ja["model"] != jb["model"]:
            out.append(f"judge model of {n}: {ja['model']} vs {jb['model']}")
    if va["judge_preset"] and vb["judge_preset"] and va["judge_preset"] != vb["judge_preset"]:
        out.append(f"judge preset {va['judge_preset']} vs {vb['judge_preset']}")
    pa, pb = va["presets"], vb["presets"]
    for engine in sorted(set(pa) & set(pb)):
        if pa[engine] != pb[engine]:
            out.append(f"preset of {engine}: {pa[engine]} vs {pb[engine]}")
    changed = sorted(t for t in set(va["templates"]) & set(vb["templates"]) if va["templates"][t] != vb["templates"][t])
    if changed:
        out.append(f"templates {', '.join(changed)}")
    for role in PATIENT_ROLES:
        ma, mb = _role_model(a.info, role), _role_model(b.info, role)
        if ma and mb and ma != mb:
            out.append(f"patient model ({role}): {ma} vs {mb}")
    ra, rb = va["reference"], vb["reference"]
    if ra and rb and (ra["source_sha256"], ra["markers_version"]) != (rb["source_sha256"], rb["markers_version"]):
        out.append(
            f"reference {ra['name']} ({(ra['source_sha256'] or '?')[:12]}, {ra['markers_version']}) vs "
            f"{rb['name']} ({(rb['source_sha256'] or '?')[:12]}, {rb['markers_version']})"
        )
    return out
