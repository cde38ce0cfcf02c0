"""`mindsim publish`: push a run's dataset folder to the Hugging Face Hub, or (`--dry-run`) build and
check exactly what would be pushed.

Before anything leaves the machine the folder is checked: every file must be one the toolkit wrote
(listed in the manifest with a matching checksum), every parquet row must carry this run's id, and no
string may match a message of a reference transcript file the user names. The token comes from the
`HF_TOKEN` environment variable only and is never printed or written.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Optional

import typer

from mindsimkit.mindcore.console import out_console
from mindsimkit.mindcore.errors import InputError, MindsimError, UserError
from mindsimkit.mindcore.io import read_jsonl
from mindsimkit.mindcore.layout import RunLayout
from mindsimkit.mindcore.manifest import RUN_STAGES, read_manifest, verify_run
from mindsimkit.mindcore.manifest import sha256_file
from mindsimkit.mindsim_app.cards import MANIFEST, META_KEY, build_dataset_folder

if TYPE_CHECKING:  # pragma: no cover - typing only
    from mindsimkit.mindcore.runlog import RunHeader

console = out_console()
_WS = re.compile(r"\s+")
# Short messages ("yes", "i don't know") are common to any chat; only longer ones identify a source.
MIN_FINGERPRINT_WORDS = 6


class PublishRefused(UserError):
    """The folder holds something the toolkit will not publish."""


class PushFailed(MindsimError):
    """The Hub could not be reached or failed on its side (connection, timeout, HTTP 5xx/429): nothing
    the user got wrong, so exit code 1 like an engine failing at run time; rerunning retries the push."""


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    code = getattr(response, "status_code", None)
    return code if isinstance(code, int) else None


def _is_network_failure(exc: BaseException) -> bool:
    """Transport errors and server-side HTTP codes, through any chain of wrapped exceptions."""
    import httpx
    import requests

    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        status = _status(e)
        if status is not None:
            return status >= 500 or status in (408, 429)
        if isinstance(
            e,
            (
                httpx.TransportError,
                requests.exceptions.ConnectionError,
                requests.exceptions.Timeout,
                ConnectionError,
                TimeoutError,
            ),
        ):
            return True
        e = e.__cause__ or e.__context__
    return False


def _norm(text: str) -> str:
    return _WS.sub(" ", text.strip().lower())


def reference_fingerprints(paths: Iterable[Path]) -> set[str]:
    """sha256 of every normalised reference message long enough to be identifying (kept in memory only)."""
    prints: set[str] = set()
    for path in paths:
        for _, obj in read_jsonl(path):
            for m in obj.get("messages", []):
                text = m.get("content")
                if isinstance(text, str) and len(text.split()) >= MIN_FINGERPRINT_WORDS:
                    prints.add(hashlib.sha256(_norm(text).encode()).hexdigest())
    return prints


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def refuse_links(folder: Path) -> None:
    """A symbolic link in (or as) a dataset folder is refused by name: an upload follows it, so a link to a folder
    or file anywhere on the machine would publish whatever it points at under the dataset's name."""
    folder = Path(folder)
    links = [folder] if folder.is_symlink() else []
    for root, dirs, files in os.walk(folder):  # does not descend into linked folders, but lists them in dirs
        links += [Path(root) / n for n in (*dirs, *files) if (Path(root) / n).is_symlink()]
    if links:
        more = f" (and {len(links) - 1} more)" if len(links) > 1 else ""
        raise PublishRefused(
            f"{links[0]}{more}: a symbolic link in the dataset folder {folder}; a dataset holds the "
            "files mindsim wrote, not links: remove it and rebuild the folder with `mindsim publish "
            "RUN --dry-run`"
        )


def check_folder(folder: Path, reference_transcripts: Iterable[Path] = ()) -> dict[str, Any]:
    """Raise `PublishRefused` naming every problem; return the manifest when the folder is clean."""
    import pyarrow.parquet as pq

    folder = Path(folder)
    refuse_links(folder)
    mpath = folder / MANIFEST
    if not mpath.is_file():
        raise PublishRefused(f"{folder}: no {MANIFEST}; only dataset folders written by mindsim can be published")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PublishRefused(
            f"{mpath}: not a readable manifest ({exc.__class__.__name__}); rebuild the folder with "
            "`mindsim run` (rerun with the same --out) instead of editing it"
        ) from exc
    if not isinstance(manifest, dict):
        raise PublishRefused(f"{mpath}: not a mindsim manifest (expected a JSON object)")
    run_id = manifest.get("run_id")
    problems: list[str] = []
    listed = manifest.get("files", {})
    for p in sorted(folder.rglob("*")):
        if not p.is_file() or p.name == MANIFEST:
            continue
        rel = str(p.relative_to(folder))
        if rel not in listed:
            problems.append(f"{rel}: not written by the toolkit for this run")
        elif sha256_file(p) != listed[rel]:
            problems.append(f"{rel}: changed after the toolkit wrote it")
    prints = reference_fingerprints(reference_transcripts)
    for rel in listed:
        if not rel.endswith(".parquet") or not (folder / rel).is_file():
            continue
        table = pq.read_table(folder / rel)
        meta = json.loads((table.schema.metadata or {}).get(META_KEY, b"{}"))
        if meta.get("run_id") != run_id:
            problems.append(f"{rel}: not stamped with this run's id")
        if "run_id" not in table.column_names or set(table.column("run_id").to_pylist()) - {run_id}:
            problems.append(f"{rel}: has rows not produced by this run")
        if prints:
            hits = sum(
                1
                for row in table.to_pylist()
                for s in _strings(row)
                if len(s.split()) >= MIN_FINGERPRINT_WORDS and hashlib.sha256(_norm(s).encode()).hexdigest() in prints
            )
            if hits:
                problems.append(f"{rel}: {hits} string(s) match reference transcript messages")
    if problems:
        raise PublishRefused("refusing to publish " + str(folder) + ":\n  - " + "\n  - ".join(problems))
    return manifest


def check_loads(folder: Path, manifest: dict[str, Any]) -> dict[str, int]:
    """Load every config the way a user would; return rows per config."""
    from datasets import load_dataset

    rows = {}
    # A private cache: the check must read these files, never rows `datasets` cached earlier for a
    # folder of the same name, and it should leave nothing behind in the user's cache.
    with tempfile.TemporaryDirectory(prefix="mindsim-check-") as cache:
        for name in manifest["configs"]:
            ds = load_dataset(str(folder), name, split="train", cache_dir=cache)
            rows[name] = ds.num_rows
            del ds
    return rows


class GateFailed(MindsimError):
    """The run is outside the recipe's release gate (exit 1, like a stage that finished with failures)."""

    def __init__(self, lines: list[str]):
        super().__init__("; ".join(lines))
        self.lines = lines


def _gate(run_dir: Path, info: "RunHeader", force: bool) -> dict[str, Any]:
    """The recipe's release gate for this run; refused (`GateFailed`) outside it unless `force`."""
    from mindsimkit.mindsim_app.release import failure_lines, gate_for_run

    gate = gate_for_run(run_dir, info, forced=force)
    if not gate["passed"] and not force:
        raise GateFailed(failure_lines(gate))
    console.print(f"release gate: {gate['outcome']}")
    return gate


def _refuse_annotation_task(path: Path) -> None:
    """An annotation task is a study's working folder, not a dataset: it may hold real conversation text
    (then marked `publish: never`) and always holds the raters' answers. `--force` does not override this."""
    from mindsimkit.mindsim_app.annotate.tasks import TASK_FILE

    task = path / TASK_FILE
    if not task.is_file():
        return
    try:
        header = json.loads(task.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        header = {}
    why = (
        "it holds real conversation text and is marked never-publish"
        if isinstance(header, dict) and header.get("publish") == "never"
        else "annotation tasks and their answers are not datasets"
    )
    raise PublishRefused(
        f"{path}: an annotation task folder ({TASK_FILE}); {why}. Publish the run folder the "
        "task was sampled from instead"
    )


def _is_run(path: Path) -> bool:
    """A folder of `mindsim run`: its run.json, or a manifest that recorded one (so a deleted run.json is named as
    missing rather than the folder taken for something else). A dataset built beside other files is not one."""
    if RunLayout(path).run_json.is_file():
        return True
    manifest = read_manifest(path)
    return manifest is not None and "run" in manifest.stages


def resolve_folder(path: Path, repo_id: str | None = None, *, force: bool = False) -> Path:
    """Accept a dataset folder (with a manifest) or a run folder (with run.json; its dataset is rebuilt).
    The recipe's release gate is evaluated first wherever the run folder is known (a dataset folder inside
    one included): outside it the publish is refused (`GateFailed`) unless `force`. A run folder's rebuilt
    card shows the gate and its outcome; a dataset folder is published exactly as it is (its card shows the
    gate as it stood at the end of the run), so `--force` outside the gate needs the run folder instead."""
    path = Path(path)
    _refuse_annotation_task(path)
    if (path / MANIFEST).is_file():
        parent = RunLayout(path.parent)
        if _is_run(parent.path) and parent.dataset.resolve() == path.resolve():
            # The dataset is published as it is: it and everything it was built from must be intact.
            verify_run(parent.path, needs=["run", "dataset"])
            gate = _gate(parent.path, parent.header(), force)
            if gate["forced"]:
                raise UserError(
                    f"{path}: --force outside the release gate needs the run folder, so the rebuilt card "
                    f"can say so; publish {parent.path} instead"
                )
        return path
    if _is_run(path):
        # Every stage the dataset is built from intact (a damaged folder would otherwise be published as whatever
        # was left of it); the dataset folder itself is rebuilt here from them, so a stale one is no problem.
        verify_run(path, needs=["run"], optional=RUN_STAGES)
        info = RunLayout(path).header()
        info = info.model_copy(update={"release_gate": _gate(path, info, force), "repo_id": repo_id or info.repo_id})
        _no_foreign_files(RunLayout(path).dataset)
        return build_dataset_folder(path, info)
    raise InputError(f"{path}: neither a dataset folder ({MANIFEST}) nor a run folder (run.json)")


def _no_foreign_files(dataset: Path) -> None:
    """The dataset folder is rebuilt whole from the run; a file someone put there would vanish with it, so one the
    folder's manifest does not list is refused by name instead of deleted without a word."""
    if dataset.is_symlink() or dataset.is_dir():
        refuse_links(dataset)
    if not dataset.is_dir():
        return
    try:
        listed = set(json.loads((dataset / MANIFEST).read_text(encoding="utf-8")).get("files", {}))
    except (OSError, ValueError, AttributeError):
        listed = set()
    foreign = sorted(
        p
        for p in dataset.rglob("*")
        if p.is_file() and p.name != MANIFEST and p.relative_to(dataset).as_posix() not in listed
    )
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise InputError(
            f"{foreign[0]}{more}: not written by mindsim, and {dataset} is rebuilt from the run before "
            "it is checked or uploaded, which would delete it; move it out of the dataset folder"
        )


# What a push makes identical to the folder (files there that the folder lacks are deleted in the same
# commit); anything else a user keeps in the repo is left alone. Markdown files are named one by one:
# the Hub's pattern matching lets "*" cross "/", so "*.md" would also delete a user's docs/*.md.
REPLACED_ON_PUSH = ("data/*", "images/*", "README.md", "MIBOT_NOTICE.md", MANIFEST)


def push(folder: Path, repo_id: str, *, private: bool, endpoint: str | None = None) -> str:
    from huggingface_hub import HfApi

    token = os.environ.get("HF_TOKEN")
    if not token:
        raise UserError(
            "HF_TOKEN is not set: export a Hugging Face write token in HF_TOKEN (it is read from there only)"
        )
    api = HfApi(endpoint=endpoint or os.environ.get("HF_ENDPOINT") or None, token=token)
    try:
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        # Data and plot files are named by content hash, so a new version of the dataset uploads new
        # names; without deleting what this folder no longer has, old rows would linger in the repo.
        info = api.upload_folder(
            folder_path=str(folder),
            repo_id=repo_id,
            repo_type="dataset",
            commit_message="Upload mindsim dataset",
            delete_patterns=list(REPLACED_ON_PUSH),
        )
    except Exception as exc:  # never let a library message that might echo headers reach the screen
        message = str(exc).replace(token, "***")
        first = message.splitlines()[0] if message.strip() else type(exc).__name__
        if _is_network_failure(exc):
            raise PushFailed(
                f"push to {repo_id} failed: {first} (the network or the Hub failed, not the dataset; "
                f"rerun the same command to try again)"
            ) from None
        # Refused by the Hub for a reason the user can fix: token, permissions, repo name.
        raise UserError(f"push to {repo_id} failed: {first}") from None
    return getattr(info, "commit_url", None) or str(info)


def publish_cmd(
    folder: Path = typer.Argument(..., help="Run folder (from `mindsim run`) or its dataset/ folder"),
    repo_id: str = typer.Option(..., "--repo-id", help="OWNER/NAME of the Hub dataset"),
    private: bool = typer.Option(False, "--private", help="Create the repository as private"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Build and check the upload folder; send nothing"),
    reference_transcripts: Optional[list[Path]] = typer.Option(
        None, "--reference-transcripts", help="Chat JSONL whose messages must not appear in the upload (repeatable)"
    ),
    force: bool = typer.Option(
        False, "--force", help="Publish although the run is outside the recipe's release gate (the card then says so)"
    ),
) -> None:
    """Publish a run's dataset (parquet per config + card) to the Hugging Face Hub."""
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo_id):
        raise InputError(f"--repo-id {repo_id!r}: expected OWNER/NAME")
    try:
        dataset = resolve_folder(folder, repo_id, force=force)
    except GateFailed as exc:
        from rich.markup import escape

        from mindsimkit.mindcore.console import err_console

        for line in exc.lines:  # one line per failed criterion, so a CI log shows each
            err_console().print(f"[red]error:[/] {escape(line)}")
        err_console().print(
            "[red]error:[/] refusing to publish outside the release gate; fix the run or pass --force "
            "(the card will say so)"
        )
        raise typer.Exit(1) from None
    manifest = check_folder(dataset, reference_transcripts or [])
    rows = check_loads(dataset, manifest)
    for name, n in rows.items():
        console.print(f"  config [bold]{name}[/]: {n} rows load")
    if dry_run:
        console.print(
            f"dry run: {dataset} is exactly what would be uploaded to {repo_id} ({len(manifest['files']) + 1} files)"
        )
        return
    url = push(dataset, repo_id, private=private)
    console.print(f"pushed to {url}")
