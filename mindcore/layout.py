"""The run folder: where every stage of `mindsim run RECIPE --out DIR` writes and finds its files.

One description shared by every reader and writer (profiles, simulator, validation, judges, exports, card,
publishing), so a path is spelled once. It describes the folder as runs have always written it — old run
folders keep reading — and builds no folder itself. Each stage folder has its own small class, also usable
on its own where a command writes a stage's output elsewhere (`mindsim validate compare --out`, `mindsim
profiles --out`); `RunLayout(root)` puts them together under one run folder. The table in
docs/architecture.md ("Run folder layout") says who writes and who reads each path.

    RUN/
      run.json                      the job's id, recipe hash, status and provenance
      logs/                         library logs (distilabel, datasets) when not --verbose
      profiles/                     profiles.parquet, case_summaries/, checkpoints/, distilabel_cache/,
                                    pool_table.md, summary.json, failures.jsonl, provenance.json
      sessions/                     checkpoints/, scenarios/, decompositions/, shards/, layout.json,
                                    sessions.parquet, summary.json
      transcripts/transcripts.jsonl plain chat per session (what validation reads)
      validation/                   report.json, report.md, *.png, arc_cache.jsonl
      judgments/                    judgments.parquet, cache/, report.json, report.md, *.png
      patientact_judge/             judgments.jsonl, cache/, report.json, report.md
      dataset/                      the publishable folder with its card
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

REPORT_JSON = "report.json"
REPORT_MD = "report.md"


@dataclass(frozen=True)
class ProfilesFolder:
    """`profiles/`: the profile dataset and what the profile job wrote beside it."""

    path: Path

    @property
    def parquet(self) -> Path:
        return self.path / "profiles.parquet"

    @property
    def case_summaries(self) -> Path:
        return self.path / "case_summaries"

    def case_summary(self, profile_id: str) -> Path:
        return self.case_summaries / f"{profile_id}.md"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def distilabel_cache(self) -> Path:
        """distilabel's own pipeline cache (the profile job's checkpoints are what resume it)."""
        return self.path / "distilabel_cache"

    @property
    def pool_table(self) -> Path:
        return self.path / "pool_table.md"

    @property
    def summary(self) -> Path:
        return self.path / "summary.json"

    @property
    def failures(self) -> Path:
        return self.path / "failures.jsonl"

    @property
    def provenance(self) -> Path:
        return self.path / "provenance.json"


@dataclass(frozen=True)
class SessionsFolder:
    """`sessions/`: per-item checkpoints, the shards' slices and the merged sessions dataset."""

    path: Path

    @property
    def checkpoints(self) -> Path:
        """One finished session per file, `<session_id>.json`."""
        return self.path / "checkpoints"

    @property
    def scenarios(self) -> Path:
        """Each patient's shared first scenario, `<patient_id>-<seed>.json`."""
        return self.path / "scenarios"

    @property
    def decompositions(self) -> Path:
        """Each PatientAct patient's decomposition, `<patient_id>-<seed>.json`."""
        return self.path / "decompositions"

    @property
    def shards(self) -> Path:
        return self.path / "shards"

    def shard(self, shard: int, shards: int) -> tuple[Path, Path]:
        """Shard `shard` of `shards`: its sessions (parquet) and its transcripts (JSONL)."""
        stem = self.shards / f"{shard:05d}-of-{shards:05d}"
        return stem.with_suffix(".parquet"), stem.with_suffix(".jsonl")

    @property
    def layout_marker(self) -> Path:
        """Which simulator layout wrote the checkpoints (`mindsim.simulate.check_layout`)."""
        return self.path / "layout.json"

    @property
    def parquet(self) -> Path:
        return self.path / "sessions.parquet"

    @property
    def summary(self) -> Path:
        return self.path / "summary.json"


@dataclass(frozen=True)
class ReportFolder:
    """A stage folder holding `report.json`, `report.md` and PNG plots."""

    path: Path

    @property
    def report_json(self) -> Path:
        return self.path / REPORT_JSON

    @property
    def report_md(self) -> Path:
        return self.path / REPORT_MD

    def plots(self) -> list[Path]:
        return sorted(self.path.glob("*.png"))


@dataclass(frozen=True)
class ValidationFolder(ReportFolder):
    """`validation/`: the realism report, and the arc labeller's cache when arc labelling runs."""

    @property
    def arc_cache(self) -> Path:
        return self.path / "arc_cache.jsonl"


@dataclass(frozen=True)
class JudgmentsFolder(ReportFolder):
    """`judgments/`: MHQR rows, the per-judgment cache and the report."""

    @property
    def parquet(self) -> Path:
        return self.path / "judgments.parquet"

    @property
    def cache(self) -> Path:
        return self.path / "cache"


@dataclass(frozen=True)
class PatientActJudgeFolder(ReportFolder):
    """`patientact_judge/`: PatientAct-rubric rows (one per session), their cache and the report."""

    @property
    def judgments(self) -> Path:
        return self.path / "judgments.jsonl"

    @property
    def cache(self) -> Path:
        return self.path / "cache"


@dataclass(frozen=True)
class RunLayout:
    """Every path of one run folder. `RunLayout(out)` is cheap and touches no disk."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def profiles(self) -> ProfilesFolder:
        return ProfilesFolder(self.root / "profiles")

    @property
    def sessions(self) -> SessionsFolder:
        return SessionsFolder(self.root / "sessions")

    @property
    def transcripts(self) -> Path:
        return self.root / "transcripts" / "transcripts.jsonl"

    @property
    def validation(self) -> ValidationFolder:
        return ValidationFolder(self.root / "validation")

    @property
    def judgments(self) -> JudgmentsFolder:
        return JudgmentsFolder(self.root / "judgments")

    @property
    def patientact_judge(self) -> PatientActJudgeFolder:
        return PatientActJudgeFolder(self.root / "patientact_judge")

    @property
    def dataset(self) -> Path:
        return self.root / "dataset"
