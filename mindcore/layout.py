"""The run folder: where every stage of `mindsim run RECIPE --out DIR` writes and finds its files.

One description shared by every reader and writer (profiles, simulator, validation, judges, exports, card,
publishing), so a path is spelled once. It describes the folder as runs have always written it — old run
folders keep reading — and builds no folder itself. Each stage folder has its own small class, also usable
on its own where a command writes a stage's output elsewhere (`mindsim validate compare --out`, `mindsim
profiles --out`); `RunLayout(run_folder)` puts them together. The table in
docs/architecture.md ("Run folder layout") says who writes and who reads each path.

    RUN/
      run.json                      the job's id, recipe hash, status and provenance
      run_manifest.json             each finished stage's files (size, sha256) and counts (mindcore.manifest)
      logs/                         library logs (distilabel, datasets) when not --verbose
      profiles/                     profiles.parquet, case_summaries/, checkpoints/, distilabel_cache/,
                                    pool_table.md, summary.json, failures.jsonl, provenance.json
      sessions/                     checkpoints/, scenarios/, decompositions/, shards/, layout.json,
                                    sessions.parquet, summary.json
      transcripts/transcripts.jsonl plain chat per session (what validation reads)
      validation/                   report.json, report.md, *.png, arc_cache.jsonl
      judgments/                    judgments.parquet, cache/, report.json, report.md, *.png
      patientact_judge/             judgments.jsonl, cache/, report.json, report.md
      ablations/memory/             sessions/checkpoints/, judge_inputs.jsonl, judgments/, report.json, report.md, PNG
      dataset/                      the publishable folder with its card
      report.html                   the self-contained HTML report (mindsim_app/report/)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Generic, TypeVar, overload

if TYPE_CHECKING:  # pragma: no cover - typing only
    from pydantic import BaseModel

    from mindsimkit.mindcore.runlog import RunHeader, TranscriptRow

T = TypeVar("T")


class _Below(Generic[T]):
    """A class attribute naming a path below the folder: `parquet = _Below("profiles.parquet")` reads as
    `folder.path / "profiles.parquet"`; with `kind`, the path comes wrapped in that folder class."""

    @overload
    def __init__(self: "_Below[Path]", name: str, *, doc: str = "") -> None: ...
    @overload
    def __init__(self, name: str, kind: Callable[[Path], T], doc: str = "") -> None: ...

    def __init__(self, name: str, kind: Callable[[Path], Any] = Path, doc: str = "") -> None:
        self.name, self.kind, self.__doc__ = name, kind, doc

    @overload
    def __get__(self, obj: None, owner: type) -> "_Below[T]": ...
    @overload
    def __get__(self, obj: Any, owner: type) -> T: ...

    def __get__(self, obj: Any, owner: type) -> Any:
        return self if obj is None else self.kind(obj.path / self.name)


M = TypeVar("M", bound="BaseModel")


@dataclass(frozen=True)
class _Folder:
    path: Path
    # The manifest stage that writes this folder: its readers say how to write a damaged file again.
    stage: ClassVar[str] = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    def _remake(self) -> str:
        from mindsimkit.mindcore.runlog import remake

        return remake(self.stage, self.path.parent)

    def _rows(self, path: Path, model: "type[M]", what: str) -> "list[M]":
        from mindsimkit.mindcore.runlog import read_table

        return read_table(path, model, what=what, remake=self._remake())

    def _arrow(self, path: Path, what: str) -> Any:
        from mindsimkit.mindcore.runlog import read_arrow

        return read_arrow(path, what=what, remake=self._remake())

    def _jsonl(self, path: Path, model: "type[M]", what: str) -> "list[M]":
        from mindsimkit.mindcore.runlog import read_jsonl_rows

        return read_jsonl_rows(path, model, what=what, remake=self._remake())

    def _json(self, path: Path, model: "type[M]", what: str) -> "M | None":
        from mindsimkit.mindcore.runlog import read_json_model

        return read_json_model(path, model, what=what, remake=self._remake())


@dataclass(frozen=True)
class ProfilesFolder(_Folder):
    """`profiles/`: the profile dataset and what the profile job wrote beside it."""

    parquet = _Below("profiles.parquet")
    case_summaries = _Below("case_summaries", doc="One rendered case summary per profile, `<profile_id>.md`.")
    checkpoints = _Below("checkpoints")
    distilabel_cache = _Below(
        "distilabel_cache", doc="distilabel's own pipeline cache (the checkpoints resume the job)."
    )
    pool_table = _Below("pool_table.md")
    summary = _Below("summary.json")
    failures = _Below("failures.jsonl")
    provenance = _Below("provenance.json")

    stage = "profiles"

    def case_summary(self, profile_id: str) -> Path:
        from mindsimkit.mindcore.io import confined_path

        return confined_path(
            self.case_summaries, profile_id, field="profile_id", where=f"profiles of {self.path}", suffix=".md"
        )

    def rows(self, model: "type[M]") -> "list[M]":
        """`profiles.parquet` as `model` rows (only the model's fields are read)."""
        return self._rows(self.parquet, model, "profiles table")

    def arrow(self) -> Any:
        return self._arrow(self.parquet, "profiles table")

    def failure_rows(self, model: "type[M]") -> "list[M]":
        """`failures.jsonl` as `model` rows; none when the stage recorded no file."""
        return self._jsonl(self.failures, model, "profile failure") if self.failures.is_file() else []

    def read_summary(self, model: "type[M]") -> "M | None":
        return self._json(self.summary, model, "profile stage summary")


@dataclass(frozen=True)
class SessionsFolder(_Folder):
    """`sessions/`: per-item checkpoints, the shards' slices and the merged sessions dataset."""

    checkpoints = _Below("checkpoints", doc="One finished session per file, `<session_id>.json`.")
    scenarios = _Below("scenarios", doc="Each patient's shared first scenario, `<patient_id>-<seed>.json`.")
    decompositions = _Below(
        "decompositions", doc="Each PatientAct patient's decomposition, `<patient_id>-<seed>.json`."
    )
    shards = _Below("shards")
    layout_marker = _Below(
        "layout.json", doc="Which simulator layout wrote the checkpoints (`mindsim.simulate.check_layout`)."
    )
    parquet = _Below("sessions.parquet")
    summary = _Below("summary.json")

    stage = "simulation"

    def rows(self, model: "type[M]") -> "list[M]":
        """`sessions.parquet` as `model` rows (only the model's fields are read)."""
        return self._rows(self.parquet, model, "sessions table")

    def arrow(self) -> Any:
        return self._arrow(self.parquet, "sessions table")

    def read_summary(self, model: "type[M]") -> "M | None":
        return self._json(self.summary, model, "simulation summary")

    def shard(self, shard: int, shards: int) -> tuple[Path, Path]:
        """Shard `shard` of `shards`: its sessions (parquet) and its transcripts (JSONL)."""
        stem = self.shards / f"{shard:05d}-of-{shards:05d}"
        return stem.with_suffix(".parquet"), stem.with_suffix(".jsonl")


@dataclass(frozen=True)
class ReportFolder(_Folder):
    """A stage folder holding `report.json`, `report.md` and PNG plots."""

    report_json = _Below("report.json")
    report_md = _Below("report.md")

    def plots(self) -> list[Path]:
        return sorted(self.path.glob("*.png"))

    def report(self, model: "type[M]") -> "M | None":
        """`report.json` as `model`; None when the stage did not write one."""
        return self._json(self.report_json, model, f"{self.stage or 'stage'} report")


@dataclass(frozen=True)
class ValidationFolder(ReportFolder):
    """`validation/`: the realism report, and the arc labeller's cache when arc labelling runs."""

    arc_cache = _Below("arc_cache.jsonl")
    stage = "validation"


@dataclass(frozen=True)
class JudgmentsFolder(ReportFolder):
    """`judgments/`: MHQR rows, the per-judgment cache and the report."""

    parquet = _Below("judgments.parquet")
    cache = _Below("cache")
    stage = "judge"

    def rows(self, model: "type[M]") -> "list[M]":
        """`judgments.parquet` as `model` rows (only the model's fields are read)."""
        return self._rows(self.parquet, model, "judgments table")

    def arrow(self) -> Any:
        return self._arrow(self.parquet, "judgments table")


@dataclass(frozen=True)
class PatientActJudgeFolder(ReportFolder):
    """`patientact_judge/`: PatientAct-rubric rows (one per session), their cache and the report."""

    judgments = _Below("judgments.jsonl")
    cache = _Below("cache")
    stage = "patientact_judge"


@dataclass(frozen=True)
class MemoryAblationFolder(ReportFolder):
    """`ablations/memory/` (`mindsim ablate memory`): the rerun sessions' checkpoints, the judge's explicit input,
    both sides' judgments (the twins' come from the run's own judgment cache) and the paired report."""

    sessions = _Below("sessions", SessionsFolder, doc="checkpoints/ of the rerun sessions (their own ids).")
    judge_inputs = _Below("judge_inputs.jsonl", doc="What the judge saw per rerun session (the twin's system prompt).")
    judgments = _Below("judgments", JudgmentsFolder, doc="ablated.parquet, benchmark.parquet, cache/.")


@dataclass(frozen=True)
class RunLayout(_Folder):
    """Every path of one run folder. `RunLayout(out)` is cheap and touches no disk."""

    run_json = _Below("run.json")
    manifest = _Below("run_manifest.json", doc="What each finished stage wrote, with digests (`mindcore.manifest`).")
    logs = _Below("logs")
    profiles = _Below("profiles", ProfilesFolder)
    sessions = _Below("sessions", SessionsFolder)
    transcripts = _Below("transcripts/transcripts.jsonl")
    validation = _Below("validation", ValidationFolder)
    judgments = _Below("judgments", JudgmentsFolder)
    patientact_judge = _Below("patientact_judge", PatientActJudgeFolder)
    dataset = _Below("dataset")
    memory_ablation = _Below("ablations/memory", MemoryAblationFolder)
    report_html = _Below("report.html", doc="The self-contained HTML report (`mindsim run`, `mindsim report`).")
    report_json = _Below("report.json", doc="The report's figures as data, beside report.html (`mindsim report`).")

    def transcript_rows(self) -> "list[TranscriptRow]":
        """`transcripts/transcripts.jsonl`, typed (`mindcore.runlog.TranscriptRow`)."""
        from mindsimkit.mindcore.runlog import TranscriptRow, read_jsonl_rows, remake

        return read_jsonl_rows(
            self.transcripts, TranscriptRow, what="transcript", remake=remake("simulation", self.path)
        )

    def header(self) -> "RunHeader":
        """`run.json`, typed (`mindcore.runlog.RunHeader`); one `InputError` line when missing or unreadable."""
        from mindsimkit.mindcore.runlog import read_header

        return read_header(self.run_json)

    def write_header(self, header: "RunHeader") -> None:
        from mindsimkit.mindcore.runlog import write_header

        write_header(self.run_json, header)


def run_file_names() -> frozenset[str]:
    """The first path component of every file and folder `RunLayout` names at a run folder's top (run.json,
    sessions, judgments, …): what a run owns there."""
    return frozenset(v.name.split("/")[0] for v in vars(RunLayout).values() if isinstance(v, _Below))
