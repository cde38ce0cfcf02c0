"""The typed run header (`mindcore.runlog`): written in the current format, version-1 headers (counts and
schedule keyed by English labels) read as they are and shown on the card unchanged, a newer header refused."""

from __future__ import annotations

import json

import pytest

from mindsimkit.mindcore.errors import InputError
from mindsimkit.mindcore.layout import RunLayout
from mindsimkit.mindcore.runlog import LOG_VERSION, Pair, RunCounts, RunHeader, ScheduleSettings, played_by, read_header

# run.json's counts and schedule as version 1 wrote them (a real run folder of 2026-12-02, numbers changed).
V1_COUNTS = {
    "personas read": 12,
    "under-18 personas skipped": 1,
    "candidate profiles": 4,
    "profiles kept (clean + minor)": 3,
    "profiles dropped as serious": 1,
    "profile failures (engine or invalid output)": 0,
    "pool / benchmark patients": "3 / 1",
    "pool drawn from verdicts": "clean, minor",
    "sessions written / expected": "5 / 6",
    "failed arcs": 1,
    "sessions the patient ended": 2,
    "rejected move commits": 7,
    "patient messages re-asked (not stored), by reason": "not_speech 1, too_long 2",
    "patient messages ended at their last complete sentence": 0,
    "scenario drafts written (re-drafts included) / sessions": "6 / 5",
    "counsellor replies flagged (stored as sent), by flag": "empty 1 (of 40 replies)",
    "judged replies (ok / failed)": "38 / 2",
    "critical replies (listed for review in judgments/report.md)": 0,
}
V1_SCHEDULE = {
    "sessions per patient": 2,
    "turn cap": 6,
    "gap before follow-ups (hours)": "24–168",
    "counsellors": "counsellor, counsellor:b",
    "memory cap (entries)": 20,
    "seed": 7,
}


def _v1(tmp_path, **extra):
    info = {
        "run_id": "abc",
        "recipe_hash": "h1",
        "status": "finished",
        "recipe": {"name": "q", "path": "recipes/quickstart.yaml", "seed": 7, "sessions": {"x": 1}},
        "counts": V1_COUNTS,
        "schedule_settings": V1_SCHEDULE,
        **extra,
    }
    (tmp_path / "run.json").write_text(json.dumps(info))
    return tmp_path / "run.json"


def test_a_version_1_header_reads_typed_and_the_card_lines_are_unchanged(tmp_path):
    header = read_header(_v1(tmp_path))
    c = header.counts
    assert header.log_version == 1 and header.finished
    assert (c.failed_arcs, c.sessions, c.judged) == (1, Pair(first=5, second=6), Pair(first=38, second=2))
    assert c.rejected_messages == {"not_speech": 1, "too_long": 2} and c.pool_verdicts == ["clean", "minor"]
    assert c.counsellor_flags == {"empty": 1, "replies": 40}
    assert c.labelled() == V1_COUNTS
    assert header.schedule_settings.labelled() == V1_SCHEDULE
    assert header.recipe.model_dump()["sessions"] == {"x": 1}  # the recipe's own sections kept as they were


def test_written_in_the_current_format_and_read_back_equal(tmp_path):
    counts = RunCounts.model_validate(V1_COUNTS)
    header = RunHeader(
        run_id="r",
        recipe_hash="h",
        status="finished",
        counts=counts,
        schedule_settings=ScheduleSettings.model_validate(V1_SCHEDULE),
        recipe={"name": "q", "path": "q.yaml", "seed": 1},
    )
    layout = RunLayout(tmp_path)
    layout.write_header(header)
    raw = json.loads(layout.run_json.read_text())
    # Fields, not labels, on disk; the version stamped.
    assert (
        raw["log_version"] == LOG_VERSION and raw["counts"]["failed_arcs"] == 1 and "failed arcs" not in raw["counts"]
    )
    back = layout.header()
    assert back.model_copy(update={"log_version": 1}) == header and back.counts.labelled() == V1_COUNTS


@pytest.mark.parametrize(
    "damage, says",
    [
        (
            lambda p: p.write_text(json.dumps({"log_version": LOG_VERSION + 1, "run_id": "x"})),
            "written by a newer mindsim",
        ),
        (lambda p: p.write_text("{not json"), "not readable JSON"),
        (lambda p: p.write_text("[1]"), "expected a JSON object"),
        (lambda p: p.write_text(json.dumps({"run_id": "x", "recipe_hash": "h", "status": "done"})), "status"),
        (
            lambda p: p.write_text(json.dumps({"run_id": "x", "recipe_hash": "h", "status": "finished", "bogus": 1})),
            "bogus",
        ),
        (lambda p: None, "missing"),
    ],
)
def test_an_unreadable_header_is_one_line_naming_the_file(tmp_path, damage, says):
    path = tmp_path / "run.json"
    damage(path)
    with pytest.raises(InputError) as caught:
        read_header(path)
    line = str(caught.value)
    assert "\n" not in line and line.startswith(str(path)) and says in line


def test_a_missing_engine_is_decided_in_one_place():
    assert (played_by(None), played_by(""), played_by("patientact")) == ("mindsim", "mindsim", "patientact")
    assert played_by(None, ours=False) == "unknown"


# --- every read of a run file goes through the typed readers -------------------------------------------------------

REPO = __import__("pathlib").Path(__file__).resolve().parents[2]
PACKAGES = ("mindcore", "profilegen", "mindsim", "validation", "judge", "mindsim_app")
PARQUET_READS = {"read_table", "read_schema", "ParquetFile", "read_pandas"}
# Files that read parquet themselves, and why none of those reads is of a run folder's table through a side door.
PARQUET_ALLOWED = {
    "mindcore/runlog.py": "the typed readers themselves",
    "mindcore/io.py": "`read_parquet_rows`, for tables a user gives (annotation tables, fitted rates)",
    "mindsim/simulate.py": "the writer merging its own shard files, streamed as Arrow slices to bound memory",
    "validation/reference.py": "reference artifacts (numbers-only files a user builds or ships), not run files",
    "profilegen/personas.py": "persona source files",
    "mindsim_app/publish.py": "the dataset folder being published, checked table by table against its manifest",
}
RUN_FILE_ATTRS = {"run_json", "report_json", "summary", "failures", "transcripts", "parquet", "judgments", "shard"}


def _raw_reads(path):
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        owner = ast.unparse(f.value) if isinstance(f, ast.Attribute) else ""
        if name in PARQUET_READS and owner in ("pq", "pyarrow.parquet", "pd"):
            found.append(("parquet", ast.unparse(node)[:80]))
        elif name == "loads" and owner == "json" and node.args:
            source = ast.unparse(node.args[0])
            if "read_text" in source and any(f".{a}" in source or a in source.split("(")[0] for a in RUN_FILE_ATTRS):
                found.append(("json", source[:80]))
    return found


def test_run_files_are_read_only_through_the_typed_readers():
    scanned = [p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))]
    assert len(scanned) > 100
    offenders = {}
    for p in scanned:
        rel = str(p.relative_to(REPO))
        reads = _raw_reads(p)
        if rel in PARQUET_ALLOWED:
            reads = [r for r in reads if r[0] != "parquet"]
        if reads:
            offenders[rel] = reads
    assert offenders == {}


def test_the_scan_sees_a_side_door(tmp_path):
    bad = tmp_path / "reader.py"
    bad.write_text(
        "import json\nimport pyarrow.parquet as pq\n"
        "def f(layout):\n    rows = pq.read_table(layout.sessions.parquet)\n"
        "    info = json.loads(layout.run_json.read_text())\n"
    )
    assert [kind for kind, _ in _raw_reads(bad)] == ["parquet", "json"]
