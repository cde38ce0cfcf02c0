"""`mindsim import …`: read a MindEval release file the user downloaded and write the toolkit's files from it. Each
command checks the whole file before it writes anything; the files it writes are listed, with an `import.json`
that records the source file's sha256 and what was read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

app = typer.Typer(
    help="Convert the MindEval authors' released files (downloaded by you) into the toolkit's files.",
    no_args_is_help=True,
)

FILE = typer.Argument(..., help="The release file as downloaded")


def _record(out: Path, source: Path, what: str, summary: dict[str, Any], files: dict[str, Path]) -> None:
    from mindsimkit.mindcore.io import atomic_write_json
    from mindsimkit.mindsim_app.imports.common import file_sha256

    atomic_write_json(
        out / "import.json",
        {
            "source": str(source),
            "sha256": file_sha256(source),
            "what": what,
            **summary,
            "files": {k: str(v) for k, v in files.items()},
        },
    )
    for label, path in files.items():
        typer.echo(f"  {label}: {path}")
    typer.echo(f"  import record: {out / 'import.json'}")


@app.command("mindeval2-profiles")
def profiles_cmd(
    file: Path = FILE,
    out: Path = typer.Option(..., "--out", help="Profiles folder to write (then `mindsim simulate --profiles OUT`)"),
) -> None:
    """MindEval2's benchmark members (data/profiles.jsonl) → a profiles folder that `mindsim simulate` plays under
    `simulation.preset: mindeval2-reference`, each member's session-1 situation played verbatim."""
    from mindsimkit.mindcore.outputs import check_out_folder
    from mindsimkit.mindsim_app.imports.profiles import convert
    from mindsimkit.profilegen.dataset import write_profiles

    check_out_folder(out)
    got = convert(file)
    parquet = write_profiles(got["profiles"], out)
    typer.echo(f"imported {got['members']} members of {file} into {out} (every one in the pool and the benchmark)")
    _record(
        out,
        file,
        "MindEval2 benchmark members",
        {
            "members": got["members"],
            "archetypes": got["archetypes"],
            "longest_formulation_chars": got["longest_formulation_chars"],
        },
        {"profiles": parquet, "case summaries": out / "case_summaries"},
    )


@app.command("mindeval2-realism")
def realism_cmd(
    file: Path = FILE,
    out: Path = typer.Option(..., "--out", help="Folder for realism_ratings.jsonl, mhqr_annotations.jsonl and its key"),
) -> None:
    """MindEval2's realism study (data/member_realism_annotations.json) → realism_ratings.jsonl for `mindsim realism
    report` (Tables 4, 13) and the counsellor labels as mhqr_annotations.jsonl + key for `mindsim judge agreement`."""
    from mindsimkit.mindcore.io import atomic_write_json, atomic_write_jsonl
    from mindsimkit.mindcore.outputs import check_out_folder
    from mindsimkit.mindsim_app.imports.realism import mhqr_lines, read_release, realism_lines, summary

    check_out_folder(out)
    release = read_release(file)
    lines, key = mhqr_lines(release["items"])
    files = {
        "realism ratings": atomic_write_jsonl(out / "realism_ratings.jsonl", realism_lines(release["items"])),
        "MHQR annotations": atomic_write_jsonl(out / "mhqr_annotations.jsonl", lines),
        "their key": atomic_write_json(out / "mhqr_annotations.key.json", key),
    }
    s = summary(release)
    per = ", ".join(f"{k}: {v['items']} windows" for k, v in s["by_system"].items())
    typer.echo(
        f"imported {s['items']} windows, {s['turn_ratings']} turn ratings by {len(s['annotators'])} annotators "
        f"({per}) into {out}"
    )
    _record(out, file, "MindEval2 member realism annotations", s, files)


@app.command("mindeval-v1-ratings")
def v1_cmd(
    file: Path = FILE,
    out: Path = typer.Option(..., "--out", help="Folder for ratings.jsonl (the long format)"),
) -> None:
    """MindEval v1's clinician ratings (data/human_annotations.jsonl) → ratings.jsonl in the long format, for
    `mindsim judge alpha ratings.jsonl --rubric mindeval_v1_human`."""
    from mindsimkit.judge.ratings import write_rows
    from mindsimkit.mindcore.io import atomic_write_jsonl
    from mindsimkit.mindcore.outputs import check_out_folder
    from mindsimkit.mindsim_app.imports.mindeval_v1 import convert

    check_out_folder(out)
    got = convert(file)
    path = atomic_write_jsonl(out / "ratings.jsonl", write_rows(got["rows"]))
    left = sum(got["skipped_by_status"].values())
    typer.echo(
        f"imported {len(got['rows'])} ratings of {len(got['raters'])} raters on {got['conversations']} "
        f"conversations ({left} responses left out by status) into {out}"
    )
    _record(
        out,
        file,
        "MindEval v1 clinician ratings",
        {
            "ratings": len(got["rows"]),
            "raters": got["raters"],
            "conversations": got["conversations"],
            "skipped_by_status": got["skipped_by_status"],
            "rubric": got["rubric"],
        },
        {"ratings": path},
    )


@app.command("patientact-situations")
def patientact_cmd(
    file: Path = typer.Argument(..., help="PatientHub's data/seeds/patientAct.json as downloaded"),
    outlines: Path | None = typer.Option(
        None,
        "--outlines",
        help="data/resources/PatientAct/disease_outlines.json (each situation's disease key must have one)",
    ),
    priors: Path | None = typer.Option(None, "--priors", help="data/resources/PatientAct/attribute_priors.json"),
    disease_priors: Path | None = typer.Option(
        None, "--disease-priors", help="data/resources/PatientAct/disease_priors.json (needs --priors)"
    ),
    out: Path = typer.Option(
        ...,
        "--out",
        help="Folder for situations.jsonl, outlines.json, priors.json and import.json (read by the profile stage)",
    ),
) -> None:
    """The PatientAct authors' clinical situations, disease outlines and attribute priors (PatientHub, downloaded
    by you) → a folder of situations, outlines and priors in the toolkit's shape that the profile stage reads."""
    from mindsimkit.mindcore.io import atomic_write_json, atomic_write_jsonl
    from mindsimkit.mindcore.outputs import check_out_folder
    from mindsimkit.mindsim_app.imports.common import file_sha256
    from mindsimkit.mindsim_app.imports.patientact import convert
    from mindsimkit.profilegen import patientact_inputs as pi

    check_out_folder(out)
    got = convert(file, outlines, priors, disease_priors)
    out.mkdir(parents=True, exist_ok=True)
    # A finished import is the one its import.json lists: that record goes last, so a folder whose writing was cut
    # short still reads as the previous import (or as none).
    files = {"situations": atomic_write_jsonl(out / pi.SITUATIONS, (s.model_dump() for s in got["situations"]))}
    if got["outlines"] is not None:
        files["outlines"] = atomic_write_json(
            out / pi.OUTLINES, {k: v.model_dump() for k, v in got["outlines"].items()}
        )
    if got["priors"] is not None:
        files["priors"] = atomic_write_json(out / pi.PRIORS, got["priors"].model_dump(by_alias=True))
    sources = {"situations": file, "outlines": outlines, "priors": priors, "disease priors": disease_priors}
    record = {
        "what": pi.WHAT,
        "sources": {k: {"path": str(p), "sha256": file_sha256(p)} for k, p in sources.items() if p is not None},
        "situations": len(got["situations"]),
        "disease_keys": got["disease_keys"],
        "outlines": len(got["outlines"] or {}),
        "disease_priors": sorted(got["priors"].by_disease) if got["priors"] is not None else [],
        "files": {k: str(v) for k, v in files.items()},
    }
    atomic_write_json(out / pi.RECORD, record)
    for name in (pi.OUTLINES, pi.PRIORS):
        if not any(Path(v).name == name for v in files.values()):
            (out / name).unlink(missing_ok=True)  # left by an earlier import that had it; this one has none
    typer.echo(
        f"imported {len(got['situations'])} situations over {len(got['disease_keys'])} disease keys, "
        f"{record['outlines']} outlines, {'priors' if priors else 'no priors'} into {out}"
    )
    for label, path in files.items():
        typer.echo(f"  {label}: {path}")
    typer.echo(f"  import record: {out / pi.RECORD}")
