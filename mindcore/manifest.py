"""The run folder's manifest (`RUN/run_manifest.json`): what each finished stage wrote, with sizes and sha256
digests, and the counts it finished with.

Each stage that writes into a run folder records itself at its end (`record_stage`), rewriting the manifest
atomically. The commands that read a finished run (`report`, `publish`, `export`, `judge`, `annotate sample`)
call `verify_run` first, so a folder with a deleted, truncated or edited file is refused in one line naming
the first such file, instead of yielding a page or a dataset built from what happened to be left.

A stage also records the digests of the files it read from the stages before it (`reads`): judgments made
from an earlier `sessions.parquet` are stale once the simulation is rerun, and are named as such.

A reader checks only the stages it reads (`needs`, and `optional` ones when the folder has them), so rerunning one
stage breaks only what read it: `mindsim judge run` on a finished run makes the dataset folder stale (it copied the
judgments), which `publish RUN/dataset` refuses, naming the one command that rebuilds it; `report`, `export` and
`publish RUN` read the judgments themselves and go on. Digests, not times, decide: a stage rerun that writes the same
bytes (a judge run served from its cache) changes nothing any reader sees.

Checkpoints and caches are not listed: they are a stage's working state, rewritten on every resume.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import threading
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Iterable, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.runlog import REMAKE, remake
from mindsimkit.mindcore.io import atomic_write_json
from mindsimkit.mindcore.layout import RunLayout

FORMAT: Literal[1] = 1

# What to run to (re)make each stage's files; RUN stands for the folder.


def inside_run(rel: str) -> str:
    """A manifest entry names a file of its own run: a relative path with no `..`. The manifest is read from a
    folder that may come from anywhere, and every reader opens and hashes what it lists."""
    pure = PurePosixPath(rel)
    if not rel or pure.is_absolute() or ".." in pure.parts or "\\" in rel or "\x00" in rel:
        raise ValueError(f"entry {rel!r} points outside the run folder (manifest paths are relative, without '..')")
    return rel


class FileRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str  # inside the run folder, with /
    bytes: int
    sha256: str

    @field_validator("path")
    @classmethod
    def _inside(cls, v: str) -> str:
        return inside_run(v)


class StageRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    written_utc: str
    toolkit_version: str
    # A list, in the order the stage gave them (its main file first), so a problem names that file first.
    files: list[FileRecord]
    # Files of earlier stages this stage was made from, path → sha256 as it read them.
    reads: dict[str, str] = {}
    counts: dict[str, int] = {}

    @field_validator("reads")
    @classmethod
    def _reads_inside(cls, v: dict[str, str]) -> dict[str, str]:
        for rel in v:
            inside_run(rel)
        return v


class RunManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: Literal[1] = FORMAT
    stages: dict[str, StageRecord] = {}

    def in_order(self) -> list[tuple[str, StageRecord]]:
        """The recorded stages in the order the data flows (the file keeps them sorted by name)."""
        rank = {s: i for i, s in enumerate(REMAKE)}
        return sorted(self.stages.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0]))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# One process may finish stages from several threads (the Ray driver, the judge next to the job): each
# read-modify-write of the manifest happens whole.
_LOCK = threading.Lock()


def read_manifest(run_dir: Path) -> RunManifest | None:
    """The manifest, or None when the folder has none; one clear error when it cannot be read."""
    path = RunLayout(run_dir).manifest
    if not path.is_file():
        return None
    try:
        return RunManifest.model_validate_json(path.read_bytes())
    except (ValidationError, ValueError) as exc:
        first = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc).splitlines()[0]
        raise InputError(
            f"{path}: not a mindsim run manifest ({first}); it is written by the stages, not by hand: "
            f"rerun the command that made the folder to rewrite it"
        ) from None


def record_stage(
    run_dir: str | Path,
    stage: str,
    files: Iterable[Path],
    *,
    reads: Iterable[str | Path] = (),
    counts: dict[str, int] | None = None,
) -> None:
    """Record `stage` as finished with `files` (those that exist; paths inside the run folder). `reads`: what it
    was made from, with the digests those files have now: a stage name (every file that stage recorded) or a file
    of the run folder (that file alone, so an edit of a file the stage never opened does not make it stale)."""
    from mindsimkit.mindcore import __version__

    run_dir = Path(run_dir)
    root = run_dir.resolve()
    listed = [
        FileRecord(path=f.resolve().relative_to(root).as_posix(), bytes=f.stat().st_size, sha256=sha256_file(f))
        for f in dict.fromkeys(Path(f) for f in files)
        if f.is_file()
    ]
    with _LOCK:
        manifest = _readable(run_dir)
        upstream = {
            rec.path: rec.sha256
            for s in reads
            if isinstance(s, str) and s in manifest.stages
            for rec in manifest.stages[s].files
        }
        upstream.update(
            {
                Path(f).resolve().relative_to(root).as_posix(): sha256_file(Path(f))
                for f in reads
                if isinstance(f, Path) and Path(f).is_file()
            }
        )
        manifest.stages[stage] = StageRecord(
            written_utc=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            toolkit_version=__version__,
            files=listed,
            reads=upstream,
            counts=dict(counts or {}),
        )
        atomic_write_json(RunLayout(run_dir).manifest, manifest.model_dump(mode="json"))


def forget_stage(run_dir: str | Path, stage: str) -> None:
    """Drop a stage's record: it is being made again (the job's `run` record while the job runs)."""
    with _LOCK:
        manifest = _readable(Path(run_dir))
        if manifest.stages.pop(stage, None) is not None:
            atomic_write_json(RunLayout(Path(run_dir)).manifest, manifest.model_dump(mode="json"))


def _readable(run_dir: Path) -> RunManifest:
    """For writers: an unreadable manifest is started over (the stages about to record rewrite it)."""
    try:
        return read_manifest(run_dir) or RunManifest()
    except InputError:
        return RunManifest()


@dataclass
class RunCheck:
    """What `verify_run` found: the manifest (None without one) and every problem, first one first."""

    run_dir: Path
    manifest: RunManifest | None
    problems: list[str] = field(default_factory=list)
    in_progress: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems


# What a reader of the whole run reads (`report`, `publish RUN`): every stage but the dataset folder, which
# `publish RUN` rebuilds from them and `report` does not open.
RUN_STAGES = ("profiles", "simulation", "validation", "judge", "patientact_judge", "run")


def check_run(
    run_dir: str | Path, needs: Iterable[str] = (), *, optional: Iterable[str] = (), whole: bool = True
) -> RunCheck:
    """Every stage in `needs` recorded; its files, and those of the `optional` stages the folder has, present and
    unchanged and made from the files their upstream stages hold now; with `whole`, the run finished and the
    folder has a manifest. Stages the reader does not read are not looked at. Problems are full sentences naming
    the file and the one command that remakes it, the first missing or changed file first.

    A stage reading its inputs passes `whole=False`: `mindsim judge run` on a folder whose judgments were
    deleted remakes them, where `report` or `publish` must refuse the folder; and a folder without any
    manifest (sessions written by other means) is judged, where the others refuse it."""
    needs = tuple(needs)
    reads = set(needs) | set(optional)
    run_dir = Path(run_dir)
    layout = RunLayout(run_dir)
    manifest = read_manifest(run_dir)
    check = RunCheck(run_dir, manifest)
    try:
        status = _run_status(layout) if whole else None
    except InputError as exc:  # the header's own line: unreadable, of a newer format, or not a header
        status = None
        check.problems.append(str(exc))
    if status not in (None, "finished"):
        check.in_progress = True
        check.problems.append(
            f"{layout.run_json}: the run has not finished (status {status!r}: still running, or "
            f"stopped); {_fix('run', run_dir)}"
        )
    if manifest is None:
        if not whole:  # a stage reading its inputs from a folder made by other means: nothing recorded to check
            return check
        check.problems.append(
            f"{layout.manifest}: missing, so what the folder holds cannot be checked (a folder written before "
            f"mindsim recorded its stages, or one whose first stage has not finished); "
            f"{_fix(next(iter(needs), 'run'), run_dir)} to record it"
        )
        return check
    for stage in needs:
        if stage not in manifest.stages:
            check.problems.append(
                f"{run_dir}: the {stage} stage has not finished here (not in {layout.manifest.name}); "
                f"{_fix(stage, run_dir)}"
            )
    recorded = [(s, r) for s, r in manifest.in_order() if s in reads]
    current: dict[str, str | None] = {}
    for stage, record in recorded:
        for rec in record.files:
            rel, path = rec.path, run_dir / rec.path
            if not path.resolve().is_relative_to(run_dir.resolve()):
                # A symlink out of the folder: what it points at is not the stage's file, whatever its digest.
                check.problems.append(
                    f"{path}: a link to {path.resolve()}, outside the run folder (the {stage} "
                    f"stage wrote a file here); {_fix(stage, run_dir)}"
                )
                continue
            if not path.is_file():
                check.problems.append(f"{path}: missing (the {stage} stage wrote it); {_fix(stage, run_dir)}")
                continue
            size = path.stat().st_size
            digest = sha256_file(path) if size == rec.bytes else None
            if digest != rec.sha256:
                what = f"{size} bytes, {rec.bytes} written" if size != rec.bytes else "same size, other content"
                check.problems.append(
                    f"{path}: changed after the {stage} stage wrote it ({what}); {_fix(stage, run_dir)}"
                )
                continue
            current[rel] = digest
    for stage, record in recorded:
        # An upstream file the reader does not read itself is hashed only here; one that is gone is the problem of
        # the readers of its own stage, not a sign that this stage is out of date.
        stale = [
            rel for rel, digest in record.reads.items() if _digest_now(run_dir, rel, current) not in (None, digest)
        ]
        if stale:
            check.problems.append(
                f"{run_dir / stale[0]}: rewritten after the {stage} stage read it, so that stage's "
                f"files are out of date; {_fix(stage, run_dir)}"
            )
    return check


def _digest_now(run_dir: Path, rel: str, known: dict[str, str | None]) -> str | None:
    if rel not in known:
        path = run_dir / rel
        inside = path.resolve().is_relative_to(run_dir.resolve())
        known[rel] = sha256_file(path) if inside and path.is_file() else None
    return known[rel]


def verify_run(
    run_dir: str | Path,
    needs: Iterable[str] = (),
    *,
    optional: Iterable[str] = (),
    whole: bool = True,
    allow_partial: bool = False,
) -> RunCheck:
    """`check_run`, refusing (InputError, exit 2) with the first problem unless `allow_partial`."""
    check = check_run(run_dir, needs, optional=optional, whole=whole)
    if check.problems and not allow_partial:
        more = len(check.problems) - 1
        raise InputError(
            check.problems[0] + (f" ({more} more problem{'s' if more != 1 else ''} in this folder)" if more else "")
        )
    return check


def _run_status(layout: RunLayout) -> str | None:
    if not layout.run_json.is_file():
        return None  # a folder of `mindsim simulate` / `judge run`: no job around it
    return layout.header().status


def _fix(stage: str, run_dir: Path) -> str:
    return remake(stage, run_dir)


def verify_file(path: str | Path) -> None:
    """A file given by its path (`validate compare --sim x=RUN/transcripts/transcripts.jsonl`): when a run
    folder above it lists it in its manifest, it must be as its stage wrote it (a file cut at a line boundary
    still parses, so only the digest can tell)."""
    path = Path(path).resolve()
    for run in list(path.parents)[:3]:
        if not RunLayout(run).manifest.is_file():
            continue
        manifest = read_manifest(run)
        rel = path.relative_to(run).as_posix()
        for stage, record in manifest.in_order() if manifest else []:
            rec = next((r for r in record.files if r.path == rel), None)
            if (
                rec is not None
                and path.is_file()
                and (path.stat().st_size != rec.bytes or sha256_file(path) != rec.sha256)
            ):
                raise InputError(
                    f"{path}: changed after the {stage} stage of {run} wrote it (its run_manifest.json lists "
                    f"{rec.bytes} bytes, the file has {path.stat().st_size}); {_fix(stage, run)}"
                )
        return
